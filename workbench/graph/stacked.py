"""The step as a stack with its own kernel tables runs it (``kernels: pytorch`` or ``torchtitan`` in
``specs/stacks/``): the ops of one micro-batch and of the step, the CPU time that launches them, and the memory
the allocator reserves, from ``workbench.graph.stack_kernels`` and ``workbench.stack_memory``.

The tables cover dense Llama-style decoders (RMSNorm, SwiGLU) in bf16 without tensor or pipeline parallelism;
``scope_gap`` names what a configuration has beyond that, and ``predict`` then prices it as the fused step and
says so in its notes. With more than one data-parallel rank, torchtitan's FSDP2 computes with bf16 parameters
(its mixed-precision policy: no autocast casts, a bf16 stream) plus FSDP2's own copies, and the memory is the
sharded model of ``workbench.memory``.
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
    Dims,
    StackFlavor,
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


FLOAT8_STACKS: dict[str, str] = {"torchtitan": "rowwise"}
"""Stacks whose tables price ``fp8`` training, and the torchao recipe they price it as: torchtitan's float8
(``[quantize.linear.float8] recipe_name = "rowwise"``, ``filter_fqns = ["output"]``) on one GPU."""


def float8_recipe(kernels: str, cfg: TrainingConfig) -> str:
    """The torchao recipe ``kernels``' tables price for ``cfg`` (``none`` for bf16)."""
    return FLOAT8_STACKS[kernels] if cfg.precision == "fp8" and kernels in FLOAT8_STACKS else "none"


def scope_gap(model: Model, cfg: TrainingConfig, kernels: str = "") -> str | None:
    """What of this configuration the stack kernel tables do not cover (None: they cover all of it);
    ``kernels``: the stack's tables (``torchtitan`` prices fp8 as torchao's rowwise recipe on one GPU). The tables
    are a transformer's (``transformer_scope_gap``); other families say what they lack (``Family.stack_table_gap``)."""
    return family_of(model).stack_table_gap(model, cfg, kernels)


def transformer_scope_gap(model: TransformerModel, cfg: TrainingConfig, kernels: str = "") -> str | None:
    """``scope_gap`` of a transformer: the tables hold dense Llama-style blocks in bf16 (or torchtitan's fp8 on one
    GPU) without tensor or pipeline parallelism."""
    if model.is_moe:
        return "MoE blocks"
    if model.norm != "rmsnorm" or model.ffn_activation != "swiglu":
        return f"{model.norm} / {model.ffn_activation} blocks"
    p = cfg.parallelism
    if p.tp > 1 or p.pp > 1:
        return "tensor and pipeline parallelism"
    if is_8bit_training(cfg.precision):
        if cfg.precision == "fp8" and kernels in FLOAT8_STACKS and p.dp == 1:
            return None
        where = ("only as torchao rowwise on one GPU: tensorwise, rowwise_with_gw_hp, mxfp8 and FSDP2's float8 "
                 "are not in the tables" if kernels in FLOAT8_STACKS else "torchao float8 is not in this stack's tables")
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

    covers_data_parallel_memory = False
    """Whether ``memory`` holds on several data-parallel GPUs (else the step model uses ``workbench.memory``)."""

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
    d = Dims.of(model, cfg.micro_batch, cfg.seq_len)
    fsdp = p.dp > 1 and p.sharding == "fsdp"
    if stack.kernels.startswith("megatron"):  # Megatron-Core's tables (import here: that module imports this one)
        from workbench.graph.stacked_megatron import megatron_stack_step
        return megatron_stack_step(model, cfg, stack)
    if stack.kernels == "hf-deepspeed":  # HF Llama under DeepSpeed ZeRO (that module imports this one)
        from workbench.graph.stack_kernels_hf import deepspeed_step
        return deepspeed_step(model, cfg, stack)
    if stack.kernels == "torchtitan":
        flavor = torchtitan_flavor(compiled, float8_recipe(stack.kernels, cfg))
        if fsdp:  # FSDP2's MixedPrecisionPolicy(param_dtype=bf16): bf16 parameters in compute, no autocast
            flavor = dataclasses.replace(flavor, param_dtype="bf16")
    else:
        flavor = pytorch_flavor(param_dtype, compiled)
    flavor = dataclasses.replace(flavor, tied=model.tied_embeddings)
    policy = stack.policy(cfg.activation_checkpointing)
    if policy == "workbench-selective":  # recompute the memory-bound ops, save every GEMM and attention output
        policy = "selective-op-all-mm"
    fwd, bwd = block_ops(d, flavor)
    recompute = _recompute(fwd, policy, d.layers)
    microbatch = embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute
    local_params = model.params_per_gpu(1, 1, p.dp, 1, sharded=fsdp)
    # the optimizer steps the fp32 shards under FSDP2 (its moments fp32); else the parameters in their own dtype
    optimizer_flavor = dataclasses.replace(flavor, param_dtype="fp32") if fsdp else flavor
    step = optimizer_ops(max(1, int(local_params)), optimizer_flavor)
    if fsdp:
        layers = math.ceil(model.num_layers / p.pp)
        step += fsdp_ops(model.layer_params(), model.embedding_params() + model.hidden_size, layers, p.dp,
                         units=layers + 1, params_per_unit=9, grad_accumulation=cfg.grad_accumulation)
    return StackStep(flavor, policy, microbatch, step, d)


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
