"""The step as a stack with its own kernel tables runs it (``kernels: pytorch`` or ``torchtitan`` in
``specs/stacks/``): the ops of one micro-batch and of the step, the CPU time that launches them, and the memory
the allocator reserves, from ``workbench.graph.stack_kernels`` and ``workbench.stack_memory``.

The tables cover dense Llama-style decoders (RMSNorm, SwiGLU) in bf16; ``scope_gap`` names what a configuration has
beyond that, and ``predict`` then prices it as the fused step and says so in its notes. With more than one
data-parallel rank, torchtitan's FSDP2 computes with bf16 parameters (its mixed-precision policy: no autocast
casts, a bf16 stream) plus FSDP2's own copies, and the memory is the sharded model of ``workbench.memory``.

Tensor, pipeline and context parallelism (torchtitan and Megatron-Core, ``PARALLEL_TABLES``): the tables give one
GPU's compute -- ``Dims.of(..., tp, cp, pp)``: the heads, FFN and vocab split tp ways with sequence parallelism
(norms and residual adds on tokens / tp), the sequence split cp ways (attention over every key: cp ring blocks),
the busiest stage's ``ceil(layers / pp)`` blocks with the embedding and the head (the fused step's convention) --
and the step model adds what it adds to the fused step: the tensor-parallel, pipeline and ring collectives
(``workbench.step_comm``), the 1F1B bubble (interleaved: / virtual_stages), the data-parallel schedule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from workbench.config import TrainingConfig
from workbench.families import family_of
from workbench.graph.execution import fsdp_ops
from workbench.graph.ops import Op
from workbench.graph.stack_kernels import (
    FP8_PRECOMPUTE_SCALE,
    MTA_BLOCKS_PER_LAUNCH,
    MTA_CHUNK_ELEMENTS,
    Dims,
    StackFlavor,
    _k,
    block_ops,
    embedding_ops,
    head_ops,
    optimizer_ops,
    pytorch_flavor,
    recompute_ops,
    torchtitan_flavor,
)
from workbench.memory import MemoryBreakdown
from workbench.models import Model, TransformerModel
from workbench.precision import is_8bit_training
from workbench.stack_memory import host_time_s, launch_counts, stack_memory
from workbench.stacks import Stack


FLOAT8_STACKS: dict[str, tuple[str, str]] = {"torchtitan": ("rowwise", "tensorwise")}
"""Stacks whose tables price ``fp8`` training, and the torchao recipe they price it as (on one GPU, under FSDP2):
one GPU, torchtitan's float8 as the H200 runs set it (``[quantize.linear.float8] recipe_name = "rowwise"``,
``filter_fqns = ["output"]``); under FSDP2, tensorwise with FSDP2's float8 all-gather and precomputed scales
(torchtitan's llama3 presets: ``enable_fsdp_float8_all_gather = true``, ``precompute_float8_dynamic_scale_for_fsdp =
true``, no recipe name = torchao's default, tensorwise; the float8 all-gather exists for tensorwise only: torchtitan
components/quantization/float8.py), as every published torchtitan FSDP float8 table ran."""

PARALLEL_TABLES: dict[str, frozenset[str]] = {
    "torchtitan": frozenset({"tp", "pp", "cp", "virtual_stages"}),
    "megatron-local": frozenset({"tp", "pp", "virtual_stages", "zero1"}),  # cp needs TE's attention
    "megatron-te": frozenset({"tp", "pp", "cp", "virtual_stages", "zero1"}),
    # DeepSpeed ZeRO over dp ranks (any sharding: the stack's zero_stage decides) and its offload_optimizer
    "hf-deepspeed": frozenset({"zero1", "offload"}),
}
"""What each stack's tables cover beyond one GPU and plain ddp / fsdp data parallelism: tensor (with sequence)
parallelism, pipeline stages, context parallelism, interleaved schedules (torchtitan's Interleaved1F1B,
Megatron's virtual pipeline), Megatron's distributed optimizer (``sharding: zero1``) and CPU optimizer offload
(``offload: optimizer``; parameter offload is in no stack's tables)."""


def float8_recipe(kernels: str, cfg: TrainingConfig) -> str:
    """The torchao recipe ``kernels``' tables price for ``cfg`` (``none`` for bf16)."""
    if cfg.precision != "fp8" or kernels not in FLOAT8_STACKS:
        return "none"
    one_gpu, fsdp = FLOAT8_STACKS[kernels]
    return fsdp if _torchtitan_fsdp(cfg) else one_gpu


def _torchtitan_fsdp(cfg: TrainingConfig) -> bool:
    """Whether torchtitan applies FSDP2 (``ParallelDims.fsdp_enabled``: dp_shard x cp > 1), so its
    MixedPrecisionPolicy computes in bf16."""
    p = cfg.parallelism
    return p.sharding == "fsdp" and p.weight_replicas > 1


def scope_gap(model: Model, cfg: TrainingConfig, kernels: str = "") -> str | None:
    """What of this configuration the stack kernel tables do not cover (None: they cover all of it);
    ``kernels``: the stack's tables. First the configuration's features beyond the tables
    (``TrainingConfig.beyond_stack_tables``) less what ``PARALLEL_TABLES`` says this stack covers; then the model:
    the tables are a transformer's (``transformer_scope_gap``); other families say what they lack
    (``Family.stack_table_gap``)."""
    return feature_gap(cfg, kernels) or family_of(model).stack_table_gap(model, cfg, kernels)


def feature_gap(cfg: TrainingConfig, kernels: str) -> str | None:
    """``cfg.beyond_stack_tables()`` with the features ``kernels``' tables cover switched off."""
    covered = PARALLEL_TABLES.get(kernels, frozenset())
    p = cfg.parallelism
    off = {k: v for k, v in (("cp", 1), ("virtual_stages", 1)) if k in covered}
    if "zero1" in covered and p.sharding == "zero1":
        off["sharding"] = "fsdp"
    if off:
        cfg = dataclasses.replace(cfg, parallelism=dataclasses.replace(p, **off))
    if "offload" in covered and cfg.offload == "optimizer":
        cfg = dataclasses.replace(cfg, offload="none")
    return cfg.beyond_stack_tables()


def transformer_scope_gap(model: TransformerModel, cfg: TrainingConfig, kernels: str = "") -> str | None:
    """``scope_gap`` of a transformer: the tables hold dense Llama-style blocks in bf16 (or torchtitan's fp8:
    ``FLOAT8_STACKS``); tensor, pipeline and context parallelism where ``PARALLEL_TABLES`` says so (torchtitan's
    only under FSDP2: without it, ``maybe_enable_amp`` in torchtitan/distributed/utils.py trains TP / PP in fp32,
    "Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled")."""
    if model.is_moe:
        return "MoE blocks"
    if model.non_llama_features():
        return f"{' / '.join(model.non_llama_features())} blocks"
    if model.norm != "rmsnorm" or model.ffn_activation != "swiglu":
        return f"{model.norm} / {model.ffn_activation} blocks"
    p = cfg.parallelism
    if p.tp > 1 or p.pp > 1:
        if "tp" not in PARALLEL_TABLES.get(kernels, ()):
            return "tensor and pipeline parallelism"
        if kernels == "torchtitan" and not _torchtitan_fsdp(cfg):
            return "tensor and pipeline parallelism without FSDP (torchtitan then trains without mixed precision)"
    if is_8bit_training(cfg.precision):
        if cfg.precision == "fp8" and kernels in FLOAT8_STACKS and (p.gpus == 1 or _torchtitan_fsdp(cfg)):
            return None
        where = ("only as torchao rowwise on one GPU and tensorwise under FSDP2: rowwise_with_gw_hp, mxfp8 and "
                 "float8 under DDP are not in the tables" if kernels in FLOAT8_STACKS
                 else "torchao float8 is not in this stack's tables")
        return f"{cfg.precision} training ({where})"
    if cfg.precision not in ("bf16",):
        return f"{cfg.precision} training"
    return None


@dataclass(frozen=True)
class StackStep:
    """The ops of one micro-batch and of the step, and how to price the rest, for one stack and configuration."""

    flavor: StackFlavor
    policy: str
    microbatch_ops: list[Op]
    step_ops: list[Op]
    dims: Dims
    fsdp_gather_scale: float = 1.0
    """The blocks' FSDP2 all-gather bytes relative to bf16 (< 1 under FSDP2's float8 all-gather): the step model
    passes it to ``step_comm.data_parallel_plan``."""

    covers_data_parallel_memory = False
    """Whether ``memory`` holds on several data-parallel GPUs (else the step model uses ``workbench.memory``)."""

    def data_parallel_schedules(self, cfg: TrainingConfig) -> list | None:
        """The stack's own data-parallel collectives (``step_comm.Schedules``), or None: the model family's for the
        configuration's sharding (FSDP2, DDP, ZeRO-1), what torchtitan and plain PyTorch run."""
        return None

    def host_s(self, stack: Stack, grad_accumulation: int) -> float:
        """CPU seconds to launch the step's kernels (``workbench.stack_memory.host_time_s``)."""
        constants = {name: c.value for name, c in stack.constants.items()}  # host_time_s fills the guesses
        counts = launch_counts(self.microbatch_ops, self.flavor, self.dims.layers)
        counts = {k: v * grad_accumulation for k, v in counts.items()}
        step = launch_counts(self.step_ops, dataclasses.replace(self.flavor, compile_blocks=False), 0)
        return host_time_s({k: counts[k] + step[k] for k in counts}, constants)

    def memory(self, stack: Stack, capacity_bytes: float) -> MemoryBreakdown:
        """Peak reserved memory on one GPU: the larger of the loss's and the end of backward's allocations
        (``workbench.stack_memory``), times the stack's reserved/allocated ratio."""
        m = stack_memory(self.dims, self.flavor, self.policy)
        slack = (stack.constant("reserved_over_allocated", 1.0) - 1) * m.peak_allocated
        if m.at_loss >= m.at_backward_end:
            return MemoryBreakdown(params=m.params, grads=0.0, optimizer=m.optimizer,
                                   activations=m.weight_copies + m.activations + m.loss, workspace=slack,
                                   capacity=capacity_bytes)
        return MemoryBreakdown(params=m.params, grads=m.grads, optimizer=m.optimizer, activations=m.recompute_peak,
                               workspace=slack, capacity=capacity_bytes)


def stack_step(model: TransformerModel, cfg: TrainingConfig, stack: Stack, *, compiled: bool,
               param_dtype: str) -> StackStep:
    """The ops of ``cfg`` as ``stack`` runs it (``scope_gap`` must be None)."""
    p = cfg.parallelism
    d = Dims.of(model, cfg.micro_batch, cfg.seq_len, p.tp, p.cp, p.pp)
    fsdp = p.sharding == "fsdp" and p.weight_replicas > 1  # over dp x cp (torchtitan's dp_shard_cp mesh)
    if stack.kernels.startswith("megatron"):  # Megatron-Core's tables (import here: that module imports this one)
        from workbench.graph.stacked_megatron import megatron_stack_step
        return megatron_stack_step(model, cfg, stack)
    if stack.kernels == "hf-deepspeed":  # HF Llama under DeepSpeed ZeRO (that module imports this one)
        from workbench.graph.stack_kernels_hf import deepspeed_step
        return deepspeed_step(model, cfg, stack)
    recipe = float8_recipe(stack.kernels, cfg)
    if stack.kernels == "torchtitan":
        flavor = torchtitan_flavor(compiled, recipe)
        if fsdp:  # FSDP2's MixedPrecisionPolicy(param_dtype=bf16): bf16 parameters in compute, no autocast
            flavor = dataclasses.replace(flavor, param_dtype="bf16")
        if recipe == "tensorwise":  # FSDP2's float8 all-gather of the blocks' linears (FLOAT8_STACKS)
            flavor = dataclasses.replace(flavor, float8_all_gather=p.weight_replicas)
    else:
        flavor = pytorch_flavor(param_dtype, compiled)
    flavor = dataclasses.replace(flavor, tied=model.tied_embeddings)
    policy = stack.policy(cfg.activation_checkpointing)
    if policy == "workbench-selective":  # recompute the memory-bound ops, save every GEMM and attention output
        policy = "selective-op-all-mm"
    fwd, bwd = block_ops(d, flavor)
    recompute = _recompute(fwd, policy, d.layers)
    microbatch = embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute
    local_params = model.params_per_gpu(p.tp, p.pp, p.weight_replicas, 1, sharded=fsdp)
    # the optimizer steps the fp32 shards under FSDP2 (its moments fp32); else the parameters in their own dtype
    optimizer_flavor = dataclasses.replace(flavor, param_dtype="fp32") if fsdp else flavor
    step = optimizer_ops(max(1, int(local_params)), optimizer_flavor)
    gather_scale = 1.0
    if fsdp:
        layers = d.layers
        block, root = model.layer_params() // p.tp, model.embedding_params() // p.tp + model.hidden_size
        step += fsdp_ops(block, root, layers, p.weight_replicas, units=layers + 1, params_per_unit=9,
                         grad_accumulation=cfg.grad_accumulation)
        if flavor.float8_all_gather:  # the blocks' linears gather 1 B per parameter, the norms 2 (bf16)
            linears = d.block_params - 2 * d.hidden
            gather_scale = (linears + 2 * 2 * d.hidden) / (2 * d.block_params)
            step += _precompute_float8_scales(layers * linears // p.weight_replicas)
    return StackStep(flavor, policy, microbatch, step, d, gather_scale)


def _precompute_float8_scales(shard_params: int) -> list[Op]:
    """torchao's ``precompute_float8_dynamic_scale_for_fsdp`` after the optimizer: one foreach amax over this
    rank's fp32 shards of the blocks' linears (``stack_kernels.FP8_PRECOMPUTE_SCALE``)."""
    launches = max(1, math.ceil(shard_params / (MTA_CHUNK_ELEMENTS * MTA_BLOCKS_PER_LAUNCH)))
    return _k("float8.precompute_scale", "optimizer", FP8_PRECOMPUTE_SCALE, max(1, shard_params), "optimizer", 1,
              "optimizer", "float8_scale", launches=launches)


def _recompute(fwd: list[Op], policy: str, layers: int) -> list[Op]:
    if policy != "selective-op-all-mm":
        return recompute_ops(fwd, policy, layers)
    return [dataclasses.replace(op, name=f"recompute.{op.name}", phase="bwd") for op in fwd
            if op.extra.get("aten") not in ("mm", "sdpa") and not op.extra.get("last") and op.kind != "attention"]


def trace_fit(stack: Stack, gpu, compiled: bool, notes: list[str], *, calibrated: bool, tables: StackStep | None):
    """What ``predict`` applies of the stack's profile fitted on a trace of the user's job
    (``workbench.stack_calibration``; ``workbench calibrate --trace`` writes it): nothing unless ``calibrated``, and
    nothing for a bound (``ideal``, or a configuration outside the stack's kernel tables, ``tables`` None)."""
    from workbench.stack_calibration import NO_FIT, stack_fit

    bound = stack.bound or stack.kernels == "fused" or (stack.kernels not in ("fused", "reference-job") and tables is None)
    return stack_fit(stack.name, gpu, compiled, notes) if calibrated and not bound else NO_FIT
