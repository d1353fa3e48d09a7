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
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config import TrainingConfig
from workbench.families import family_of
from workbench.graph.execution import fsdp_ops
from workbench.graph.ops import Op, replace_op
from workbench.graph.recomputed import RecomputedPiece
from workbench.graph.stack_kernels import (
    FP8_PRECOMPUTE_SCALE,
    MTA_BLOCKS_PER_LAUNCH,
    MTA_CHUNK_ELEMENTS,
    Dims,
    StackFlavor,
    _k,
    block_ops,
    block_recomputed_indices,
    embedding_ops,
    head_ops,
    optimizer_ops,
    pytorch_flavor,
    recompute_ops,
    recomputed_blocks,
    torchtitan_flavor,
    weight_shard_cast,
)
from workbench.graph.stack_kernels_megatron_gpt import is_gpt_block
from workbench.memory import MemoryBreakdown
from workbench.models import Model, TransformerModel
from workbench.perf.timer_key import KeyedOps, TimerFamily
from workbench.precision import is_8bit_training
from workbench.profile_fit import NO_FIT
from workbench.stack_memory import (graph_calls, host_time_s, part_launch_counts, piece_launch_counts, reserved_ratio,
                                    stack_memory)
from workbench.stacks import Stack


FLOAT8_STACKS: dict[str, tuple[str, str]] = {"torchtitan": ("rowwise", "tensorwise")}
"""Stacks whose tables price ``fp8`` training, and the torchao recipe they price it as (on one GPU, under FSDP2):
one GPU, torchtitan's float8 as the H200 runs set it (``[quantize.linear.float8] recipe_name = "rowwise"``,
``filter_fqns = ["output"]``); under FSDP2, tensorwise with FSDP2's float8 all-gather and precomputed scales
(torchtitan's llama3 presets: ``enable_fsdp_float8_all_gather = true``, ``precompute_float8_dynamic_scale_for_fsdp =
true``, no recipe name = torchao's default, tensorwise; the float8 all-gather exists for tensorwise only: torchtitan
components/quantization/float8.py), as every published torchtitan FSDP float8 table ran."""

TE_FP8_PRECISIONS: tuple[str, ...] = ("fp8", "mxfp8")
"""The fp8 training precisions the ``megatron-te`` tables price (TransformerEngine's recipes,
``workbench.graph.te_fp8``: fp8 = the stack's ``fp8_recipe``, delayed or current scaling; mxfp8 = MXFP8)."""

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
    if model.is_moe:  # Megatron-Core's TE spec prices Mixtral-like experts (graph.stack_kernels_megatron_moe)
        from workbench.graph.stack_kernels_megatron_moe import moe_scope_gap
        gap = moe_scope_gap(model) if kernels == "megatron-te" else "MoE blocks"
        if gap:
            return gap
    if model.non_llama_features():
        return f"{' / '.join(model.non_llama_features())} blocks"
    gpt_covered = kernels == "megatron-te" and is_gpt_block(model)  # graph.stack_kernels_megatron_gpt
    if (model.norm != "rmsnorm" or model.ffn_activation != "swiglu") and not gpt_covered:
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
        if cfg.precision in TE_FP8_PRECISIONS and kernels == "megatron-te":  # workbench.graph.te_fp8
            return None
        where = ("only as torchao rowwise on one GPU and tensorwise under FSDP2: rowwise_with_gw_hp, mxfp8 and "
                 "float8 under DDP are not in the tables" if kernels in FLOAT8_STACKS
                 else "torchao float8 is not in this stack's tables")
        return f"{cfg.precision} training ({where})"
    if cfg.precision not in ("bf16",):
        return f"{cfg.precision} training"
    return None


Parts = tuple[tuple[tuple[Op, ...], int], ...]
"""Ops in step order as (ops, copies) pieces: each op of a piece runs ``op.count`` x ``copies`` times (a block's
ops are one block's, ``copies`` the blocks on the stage; 1 elsewhere). The tables of many configurations share
their pieces (``stack_tables``' memo), so the step model prices a piece once (``StepModel._parts``)."""


def one_piece(ops: Sequence[Op]) -> Parts:
    """``ops`` as one piece of one copy (tables built whole: Megatron-Core's, DeepSpeed's)."""
    return ((tuple(ops), 1),)


def flat_ops(parts: Parts) -> list[Op]:
    """Every op of ``parts`` in order, its count times its piece's copies."""
    return [op if copies == 1 else replace_op(op, count=op.count * copies)
            for ops, copies in parts for op in ops]


@dataclass(frozen=True)
class StackStep:
    """The ops of one micro-batch and of the step, and how to price the rest, for one stack and configuration."""

    flavor: StackFlavor
    policy: str
    microbatch_parts: Parts
    step_parts: Parts
    """The once-per-step ops (optimizer, FSDP2's copies)."""
    dims: Dims
    fsdp_gather_scale: float = 1.0
    """The blocks' FSDP2 all-gather bytes relative to bf16 (< 1 under FSDP2's float8 all-gather): the step model
    passes it to ``step_comm.data_parallel_plan``."""
    piece_launches: tuple[tuple, tuple] | None = None
    """Each piece's kernel launches (``stack_memory.piece_launch_counts``) of ``microbatch_parts`` and of
    ``step_parts``, counted once per piece by ``stack_step``; None: ``host_s`` counts them."""

    covers_data_parallel_memory = False
    """Whether ``memory`` holds on several data-parallel GPUs (else the step model uses ``workbench.memory``)."""

    @property
    def microbatch_ops(self) -> list[Op]:
        """Every op of one micro-batch, counts on the stage (``flat_ops``: for reading, not for the search)."""
        return flat_ops(self.microbatch_parts)

    @property
    def step_ops(self) -> list[Op]:
        return flat_ops(self.step_parts)

    def overlap_critical_path(self, critical, micro, cfg: TrainingConfig, model: Model, gpu=None, price=None):
        """``critical`` (``step_comm.CriticalPath``) with what the stack overlaps of it, given the priced
        micro-batch ``micro``, the GPU and ``price`` (seconds of one execution of an op): nothing here
        (Megatron-Core's TE userbuffers overlap: ``MegatronStackStep``)."""
        return critical

    def data_parallel_schedules(self, cfg: TrainingConfig) -> list | None:
        """The stack's own data-parallel collectives (``step_comm.Schedules``), or None: the model family's for the
        configuration's sharding (FSDP2, DDP, ZeRO-1), what torchtitan and plain PyTorch run."""
        return None

    def host_s(self, stack: Stack, grad_accumulation: int) -> float:
        """CPU seconds to launch the step's kernels (``workbench.stack_memory.host_time_s``)."""
        constants = {name: c.value for name, c in stack.constants.items()}  # host_time_s fills the guesses
        micro_pieces, step_pieces = self.piece_launches or (None, None)
        micro = part_launch_counts(self.microbatch_parts, self.flavor.compile_blocks,
                                   graph_calls(self.flavor, self.dims.layers), micro_pieces)
        step = part_launch_counts(self.step_parts, False, 0, step_pieces)
        counts = {k: v * grad_accumulation for k, v in micro.items()}
        return host_time_s({k: counts[k] + step[k] for k in counts}, constants)

    def memory(self, stack: Stack, capacity_bytes: float) -> MemoryBreakdown:
        """Peak reserved memory on one GPU: the larger of the loss's and the end of backward's allocations
        (``workbench.stack_memory``), times the stack's reserved/allocated ratio (``stack_memory.reserved_ratio``)."""
        m = stack_memory(self.dims, self.flavor, self.policy)
        slack = (reserved_ratio(stack, self.policy) - 1) * m.peak_allocated
        if m.at_loss >= m.at_backward_end:
            return MemoryBreakdown(params=m.params, grads=0.0, optimizer=m.optimizer,
                                   activations=m.weight_copies + m.activations + m.loss, workspace=slack,
                                   capacity=capacity_bytes)
        return MemoryBreakdown(params=m.params, grads=m.grads, optimizer=m.optimizer, activations=m.recompute_peak,
                               workspace=slack, capacity=capacity_bytes)


# ------------------------------------------------------------------------------------------ building the tables
# Recipe search builds the tables of every candidate of one model and stack. Most of what they hold depends on far
# fewer inputs than a candidate has, so ``stack_tables`` builds each piece once per (model, stack) in a memo the
# caller keeps (``StepModel``) and a candidate's tables share them: keys are plain ints and strings (never the
# config), each naming everything its value reads (the model and the stack are the memo's own: ``_memo_for``).
# A field a builder starts to read must join its key.

_GAP_UNSET = object()
MEMO_LIMIT = 20_000
"""Entries a memo holds before it starts over (a long-lived step model: the widget's)."""


def stack_tables(model: Model, cfg: TrainingConfig, stack: Stack, *, compiled: bool, param_dtype: str,
                 memo: dict | None = None, fp8_any_layout: bool = False) -> tuple[StackStep | None, str | None]:
    """(``stack``'s tables for ``cfg``, None), or (None, what they lack: ``scope_gap``). ``memo``: a dict the caller
    keeps for this one model and stack (None: build everything afresh); the tables of every configuration asked of
    it share their pieces."""
    memo = _memo_for(memo, model, stack)
    gap = tables_gap(model, cfg, stack, memo)
    if gap is not None:
        return None, gap
    return stack_step(model, cfg, stack, compiled=compiled, param_dtype=param_dtype, memo=memo,
                      fp8_any_layout=fp8_any_layout), None


def tables_gap(model: Model, cfg: TrainingConfig, stack: Stack, memo: dict | None = None) -> str | None:
    """``scope_gap`` of ``cfg`` for ``stack``'s tables, kept in ``memo`` (``stack_tables``'): whether the tables
    cover a configuration, known without building them."""
    memo = _memo_for(memo, model, stack)
    p = cfg.parallelism
    # scope_gap reads the layout (every parallel degree and the sharding), precision, offload and LoRA, not the
    # micro-batch, sequence, checkpointing or global batch (``feature_gap``, ``transformer_scope_gap``)
    key = ("gap", p, cfg.precision, cfg.offload, cfg.lora_rank)
    gap = memo.get(key, _GAP_UNSET)
    if gap is _GAP_UNSET:
        gap = memo[key] = scope_gap(model, cfg, stack.kernels)
    return gap


def memory_reads_tables(stack: Stack, cfg: TrainingConfig) -> bool:
    """Whether the step model's memory of ``cfg`` reads ``stack``'s tables (``StackStep.memory``): on one GPU, or
    where the tables hold several data-parallel GPUs' memory (DeepSpeed's, Megatron-Core's: their own
    ``StackStep`` kinds); else it is ``workbench.memory``'s sharded model, which reads only whether they cover
    ``cfg`` (``tables_gap``), so a configuration that does not fit needs no tables built."""
    return cfg.parallelism.gpus == 1 or stack.kernels not in ("pytorch", "torchtitan")


def stack_step(model: TransformerModel, cfg: TrainingConfig, stack: Stack, *, compiled: bool,
               param_dtype: str, memo: dict | None = None, fp8_any_layout: bool = False) -> StackStep:
    """The ops of ``cfg`` as ``stack`` runs it (``scope_gap`` must be None); ``memo`` as ``stack_tables``';
    ``fp8_any_layout``: the GPU's fp8 GEMMs take any operand layout (Blackwell; TransformerEngine then writes no
    fp8 transposes: ``workbench.graph.te_fp8``)."""
    if stack.kernels.startswith("megatron"):  # Megatron-Core's tables (import here: that module imports this one)
        from workbench.graph.stacked_megatron import megatron_stack_step
        return megatron_stack_step(model, cfg, stack, fp8_any_layout=fp8_any_layout)
    if stack.kernels == "hf-deepspeed":  # HF Llama under DeepSpeed ZeRO (that module imports this one)
        from workbench.graph.stack_kernels_hf import deepspeed_step
        return deepspeed_step(model, cfg, stack)
    memo = _memo_for(memo, model, stack)
    p = cfg.parallelism
    tp, pp, replicas = p.tp, p.pp, p.weight_replicas
    fsdp = p.sharding == "fsdp" and replicas > 1  # over dp x cp (torchtitan's dp_shard_cp mesh)
    recipe = float8_recipe(stack.kernels, cfg)
    gathers = replicas if recipe == "tensorwise" else 0  # FSDP2's float8 all-gather shards (FLOAT8_STACKS)
    # the flavor reads the compile flag, parameter dtype, float8 recipe, FSDP2 and its float8 gather (and the
    # model's tied head); one block's ops read the flavor and the micro-batch's shape on this GPU
    flavor_key = (compiled, param_dtype, recipe, fsdp, gathers)
    flavor = _memo(memo, ("flavor",) + flavor_key, lambda: _flavor(model, stack.kernels, compiled, param_dtype,
                                                                   fsdp, recipe, gathers))
    shape = (cfg.micro_batch, cfg.seq_len, tp, p.cp)
    d = _memo(memo, ("dims", pp) + shape, lambda: dataclasses.replace(  # the memo is one stack's: its backend fixed
        Dims.of(model, cfg.micro_batch, cfg.seq_len, tp, p.cp, pp), sdpa_backend=stack.sdpa_backend,
        context_parallel=stack.context_parallel))
    layers = d.layers
    policy = stack.policy(cfg.activation_checkpointing)
    if policy == "workbench-selective":  # recompute the memory-bound ops, save every GEMM and attention output
        policy = "selective-op-all-mm"
    # the blocks are built with ANY_SHARDS float8 gather shards and shared by every shard count: only their
    # forward's weight-shard casts read it (``_gathered_forward``)
    built_key = flavor_key[:-1] + ((ANY_SHARDS,) if gathers else (0,))
    built = flavor if not gathers else _memo(memo, ("flavor",) + built_key, lambda: _flavor(
        model, stack.kernels, compiled, param_dtype, fsdp, recipe, ANY_SHARDS))
    # the micro-batch's parts read the shape, the built flavor, the stage's blocks, the policy and the shards: one
    # entry for them all, so that a configuration that differs in nothing they read looks them up once
    micro, micro_counts = _memo(memo, ("micro-batch parts", pp, policy, gathers) + shape + built_key,
                                lambda: _microbatch_parts(memo, shape, built_key, d, built, policy, gathers))
    local_params = _memo(memo, ("local params", tp, pp, replicas, fsdp),
                         lambda: max(1, int(model.params_per_gpu(tp, pp, replicas, 1, sharded=fsdp))))
    # the optimizer steps the fp32 shards under FSDP2 (its moments fp32); else the parameters in their own dtype
    step = [_memo(memo, ("optimizer", local_params) + flavor_key, lambda: _pieces((optimizer_ops(
        local_params, dataclasses.replace(flavor, param_dtype="fp32") if fsdp else flavor),), False))]
    gather_scale = 1.0
    if fsdp:
        accumulation = cfg.grad_accumulation
        step.append(_memo(memo, ("fsdp", tp, layers, replicas, accumulation), lambda: _pieces((fsdp_ops(
            model.layer_params() // tp, model.embedding_params() // tp + model.hidden_size, layers, replicas,
            units=layers + 1, params_per_unit=9, grad_accumulation=accumulation),), False)))
        if flavor.float8_all_gather:  # the blocks' linears gather 1 B per parameter, the norms 2 (bf16)
            linears = d.block_params - 2 * d.hidden
            gather_scale = (linears + 2 * 2 * d.hidden) / (2 * d.block_params)
            shard = layers * linears // replicas
            step.append(_memo(memo, ("float8 scales", shard), lambda: _pieces((_precompute_float8_scales(shard),),
                                                                              False)))
    step_parts = tuple((ops, 1) for (ops,), _ in step)
    return StackStep(flavor, policy, micro, step_parts, d, gather_scale,
                     (micro_counts, tuple(counts for _, (counts,) in step)))


def _microbatch_parts(memo: dict, shape: tuple, flavor_key: tuple, d: Dims, flavor: StackFlavor, policy: str,
                      shards: int) -> tuple[Parts, tuple]:
    """The micro-batch's pieces and their launch counts: the embedding, one block's forward (its weight-shard casts
    made for ``shards`` ranks under FSDP2's float8 all-gather), the head, one block's backward, the recomputed
    block; the micro-batch's ``shape`` and the ``flavor_key`` they were built with key them."""
    layers, compile_blocks = d.layers, flavor.compile_blocks
    block = shape + flavor_key
    # one block's forward and backward: every block of the stage runs the same shapes, so they are built for one
    # (``copies`` = the stage's blocks) and shared by every pipeline degree; what the passes over them read besides
    # their sizes is every micro-batch's (``_BlockLayout``)
    layout_key = ("block layout",) + block[1:]
    fwd, bwd = _memo(memo, ("block ops",) + block, lambda: _laid_out_block(memo, layout_key, _memo(
        memo, ("one block's dims",) + shape, lambda: dataclasses.replace(d, layers=1)), flavor, bool(shards)))
    layout = memo[layout_key]
    # the embedding and the head read the shape and the parameter dtype (the head its loss's compile flag too),
    # no block count, float8 recipe or FSDP2: layouts and flavors share them (their ops are no compiled block's)
    (embedding,), embedding_counts = _memo(memo, ("embedding", flavor.param_dtype) + shape, lambda: _pieces(
        (embedding_ops(d, flavor),), compile_blocks))
    (head,), head_counts = _memo(memo, ("head", flavor.param_dtype, flavor.compile_loss) + shape, lambda: _pieces(
        (head_ops(d, flavor),), compile_blocks))
    if shards:  # one piece, as the forward it stands for: a block's forward with its casts made for these shards
        casts = (shards, d.sp) + flavor_key  # what a weight-shard cast reads: the shards, the linears' tp split, tags
        forward = _memo(memo, ("forward", shards) + block, lambda: KeyedOps(
            _gathered_forward(memo, casts, fwd, layout.runs, d, shards), layout.timers[0]))
    else:
        forward = fwd
    # (no checkpointing recomputes no block: no piece, rather than an empty one that the parts would leave out)
    recompute = () if policy == "none" else (_recomputed_forward(memo, block, shards, forward, policy,
                                                                  compile_blocks),)
    recomputed = layers if policy == "selective-op-all-mm" else recomputed_blocks(policy, layers)
    parts = ((embedding, 1), (forward, layers), (head, 1), (bwd, layers),
             *((piece, recomputed) for piece, _ in recompute))
    parts_counts = (*embedding_counts, layout.counts[0], *head_counts, layout.counts[1],
                    *(counts for _, counts in recompute))
    kept = [i for i, (ops, copies) in enumerate(parts) if ops and copies]  # an empty piece adds nothing
    if len(kept) == len(parts):
        return parts, parts_counts
    return tuple(parts[i] for i in kept), tuple(parts_counts[i] for i in kept)


def _laid_out_block(memo: dict, layout_key: tuple, d: Dims, flavor: StackFlavor,
                    gathers: bool) -> tuple[KeyedOps, KeyedOps]:
    """One block's forward and backward (``block_ops`` of one block: ``d``), each keyed by the timer as its
    layout's (``_BlockLayout``, kept in ``memo`` under ``layout_key``; made from this block if it is the first)."""
    fwd, bwd = map(tuple, block_ops(d, flavor))
    layout = _memo(memo, layout_key, lambda: _BlockLayout.of(fwd, bwd, flavor.compile_blocks, gathers))
    if (len(fwd), len(bwd)) != layout.lengths:
        raise AssertionError("a block's ops at another micro-batch are not the block its layout was made from")
    return KeyedOps(fwd, layout.timers[0]), KeyedOps(bwd, layout.timers[1])


@dataclass(frozen=True)
class _BlockLayout:
    """What the tables read of one block's ops besides their sizes, made once from one micro-batch's block
    (``of``) for every micro-batch of its flavor, sequence and layout (``_microbatch_parts``' memo key leaves the
    micro-batch out): the launch counts of its forward and backward (``piece_launch_counts``: the ops' counts,
    kinds, layers and names), their timer keys less the sizes (``perf.timer_key.TimerFamily``: kinds, dtypes and
    tags) and where its forward's weight-shard cast runs begin and end (``_shard_cast_runs``: the names);
    ``_recomputed_forward`` keeps the same of a recomputed block, per checkpointing policy. A block's ops differ
    from one micro-batch to the next in their shapes, FLOPs and bytes only, and so do its forwards with their
    weight-shard casts made for each shard count (``_gathered_forward``): ``tests/graph/test_stacked.py`` checks
    every other field of every op across micro-batches and shard counts for every flavor, and
    ``_microbatch_parts`` that the numbers of ops agree. Under FSDP2's float8 all-gather, the forward's counts and
    timer family are those of every shard count's forward."""

    lengths: tuple[int, int]
    counts: tuple[tuple[float, float, float], tuple[float, float, float]]
    runs: tuple[tuple[int, int, bool], ...]
    """(start, stop, whether one linear's weight-shard cast) of each run of the forward (none without FSDP2's
    float8 all-gather)."""
    timers: tuple[TimerFamily, TimerFamily]

    @staticmethod
    def of(fwd: tuple[Op, ...], bwd: tuple[Op, ...], compile_blocks: bool, gathers: bool) -> _BlockLayout:
        """The layout of a block whose forward and backward are ``fwd`` and ``bwd``; ``gathers``: its linears'
        weights are gathered in float8 (its forward's weight-shard casts are made again per shard count)."""
        runs, start = [], 0
        for ops, cast in _shard_cast_runs(fwd) if gathers else ():
            runs.append((start, start + len(ops), cast))
            start += len(ops)
        return _BlockLayout((len(fwd), len(bwd)), (piece_launch_counts(fwd, compile_blocks),
                                                   piece_launch_counts(bwd, compile_blocks)), tuple(runs),
                            (TimerFamily(), TimerFamily()))


def _memo_for(memo: dict | None, model: Model, stack: Stack) -> dict:
    """``memo``, checked to be ``model``'s and ``stack``'s (its keys leave them out); a fresh one for None."""
    if memo is None:
        memo = {}
    owner = memo.setdefault("owner", (model, stack))
    if owner[0] is not model or owner[1] is not stack:
        raise ValueError("a stack tables memo holds one model's and one stack's pieces: keep one per StepModel")
    if len(memo) > MEMO_LIMIT:
        memo.clear()
        memo["owner"] = (model, stack)
    return memo


_SHARED_MEMOS: dict[tuple[int, int], dict] = {}
SHARED_MEMOS_LIMIT = 16
"""(model, stack) memos ``shared_memo`` keeps before it starts over (each holds up to ``MEMO_LIMIT`` pieces; a
cold search of Llama 3 8B on 8 GPUs as torchtitan runs it leaves some 1,500)."""


def shared_memo(model: Model, stack: Stack) -> dict:
    """The ``stack_tables`` memo of ``model`` and ``stack`` that every caller shares (``workbench.step.StepModel``):
    its pieces read the model, the stack and the configuration fields their keys name, never the GPU, the
    constants or a step model's caches, so a fresh step model of the same model and stack -- each recipe search's
    new evaluator -- finds the op lists the last one built (with ``step._shared_graph``: a third of the
    instructions of a cold torchtitan search of Llama 3 8B on 8 H200s, callgrind). One memo per laid-out model
    also lets one step model price a vocabulary Megatron pads (``Stack.padded_model``) after one it does not.
    Keyed by the two objects' ids; the memo's ``owner`` entry holds both (``_memo_for``), so neither id is reused
    while it lives."""
    key = (id(model), id(stack))
    memo = _SHARED_MEMOS.get(key)
    if memo is None:
        if len(_SHARED_MEMOS) >= SHARED_MEMOS_LIMIT:
            _SHARED_MEMOS.clear()
        memo = _SHARED_MEMOS[key] = _memo_for(None, model, stack)
    return memo


def _memo(memo: dict, key: tuple, build):
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = build()
    return hit


def _pieces(pieces, compile_blocks: bool) -> tuple[tuple[tuple[Op, ...], ...], tuple]:
    """(each piece as a tuple, each one's launch counts: ``stack_memory.piece_launch_counts``)."""
    pieces = tuple(ops if isinstance(ops, (tuple, RecomputedPiece)) else tuple(ops)  # a RecomputedPiece stays one
                   for ops in pieces)
    return pieces, tuple(piece_launch_counts(ops, compile_blocks) for ops in pieces)


def _flavor(model: TransformerModel, kernels: str, compiled: bool, param_dtype: str, fsdp: bool, recipe: str,
            gathers: int) -> StackFlavor:
    if kernels == "torchtitan":
        flavor = torchtitan_flavor(compiled, recipe)
        if fsdp:  # FSDP2's MixedPrecisionPolicy(param_dtype=bf16): bf16 parameters in compute, no autocast
            flavor = dataclasses.replace(flavor, param_dtype="bf16")
        if recipe == "tensorwise":  # FSDP2's float8 all-gather of the blocks' linears (FLOAT8_STACKS)
            flavor = dataclasses.replace(flavor, float8_all_gather=gathers)
    else:
        flavor = pytorch_flavor(param_dtype, compiled)
    return dataclasses.replace(flavor, tied=model.tied_embeddings)


ANY_SHARDS = 1
"""The float8 gather shard count a block is built with under FSDP2's float8 all-gather (``stack_step``); never a
real one (FSDP2 shards over more than one rank)."""


def _gathered_forward(memo: dict, casts: tuple, fwd: tuple[Op, ...], runs: tuple[tuple[int, int, bool], ...],
                      d: Dims, shards: int) -> tuple[Op, ...]:
    """One block's forward ``fwd`` (built with ``ANY_SHARDS``) for FSDP2's float8 all-gather over ``shards`` ranks:
    its ``runs`` (``_BlockLayout.runs``) between the weight-shard casts as they are, each linear's weight-shard cast
    (``stack_kernels.weight_shard_cast``) made again for ``shards``, with its tags. A cast reads no micro-batch
    shape (a weight's elements, its tensor-parallel split and its tags: ``casts`` keys it with the linear), so
    every micro-batch of a layout shares its ops (and the step model times them once)."""
    linears = {name: (i, o) for name, i, o in d.linears()}

    def fresh_cast(ops: tuple[Op, ...]) -> tuple[Op, ...]:
        linear = _linear_of(ops[0])
        fresh = weight_shard_cast(linear, *linears[linear], shards, ops[0].count, ops[0].layer)
        if [op.name for op in fresh] != [op.name for op in ops]:
            raise AssertionError(f"{linear}'s weight-shard cast is not the one the block was built with")
        return tuple(replace_op(op, shape=f.shape, flops=f.flops, bytes_read=f.bytes_read,
                                bytes_written=f.bytes_written, extra=dict(op.extra)) for op, f in zip(ops, fresh))

    forward: list[Op] = []
    for a, b, cast in runs:
        ops = fwd[a:b]
        forward += _memo(memo, ("weight-shard cast", _linear_of(ops[0])) + casts, lambda: fresh_cast(ops)) if cast \
            else ops
    if len(forward) != len(fwd):
        raise AssertionError("a gathered forward is not its block's forward")
    return tuple(forward)


def _recomputed_forward(memo: dict, block: tuple, shards: int, forward: tuple[Op, ...], policy: str,
                        compile_blocks: bool) -> tuple[RecomputedPiece, tuple[float, float, float]]:
    """(``forward`` recomputed, its launch counts: ``_recomputed_indices``); which ops it reruns and the counts are
    made once from the first micro-batch's forward and shared as ``_BlockLayout`` is (its key, with the policy),
    by every shard count's forward under FSDP2's float8 all-gather (``shards``) too."""
    layout_key = ("recomputed layout", policy) + block[1:]
    layout = memo.get(layout_key)
    if layout is None:
        kept = _recomputed_indices(forward, policy)
        layout = memo[layout_key] = (tuple(kept), piece_launch_counts(map(forward.__getitem__, kept), compile_blocks,
                                                                      recomputed=True))
    kept, counts = layout
    piece = _memo(memo, ("recompute", policy, shards) + block, lambda: RecomputedPiece(forward, kept))
    return piece, counts


def _shard_cast_runs(fwd: tuple[Op, ...]) -> tuple[tuple[tuple[Op, ...], bool], ...]:
    """``fwd`` as runs of consecutive ops, each (ops, whether they are one linear's weight-shard cast)."""
    runs: list[tuple[list[Op], bool]] = []
    for op in fwd:
        casts = ".w_shard.fp8." in op.name
        if runs and runs[-1][1] == casts and (not casts or _linear_of(runs[-1][0][0]) == _linear_of(op)):
            runs[-1][0].append(op)
        else:
            runs.append(([op], casts))
    return tuple((tuple(ops), casts) for ops, casts in runs)


def _linear_of(op: Op) -> str:
    """The linear (wq, ..., w2) a float8 cast belongs to: its name's first part."""
    return op.name.split(".", 1)[0]


def _recomputed_indices(fwd: tuple[Op, ...], policy: str) -> list[int]:
    """Where in ``fwd`` the ops a recomputed block reruns under ``policy`` are (``_recompute`` of one block): a
    ``RecomputedPiece`` of them is their copies, which the step model prices from ``fwd``'s prices
    (``graph.recomputed``)."""
    if policy != "selective-op-all-mm":
        return block_recomputed_indices(fwd, policy)
    return [i for i, op in enumerate(fwd) if _all_mm_reruns(op)]


def _precompute_float8_scales(shard_params: int) -> list[Op]:
    """torchao's ``precompute_float8_dynamic_scale_for_fsdp`` after the optimizer: one foreach amax over this
    rank's fp32 shards of the blocks' linears (``stack_kernels.FP8_PRECOMPUTE_SCALE``)."""
    launches = max(1, math.ceil(shard_params / (MTA_CHUNK_ELEMENTS * MTA_BLOCKS_PER_LAUNCH)))
    return _k("float8.precompute_scale", "optimizer", FP8_PRECOMPUTE_SCALE, max(1, shard_params), "optimizer", 1,
              "optimizer", "float8_scale", launches=launches)


def _recompute(fwd: list[Op] | tuple[Op, ...], policy: str, layers: int) -> list[Op]:
    if policy != "selective-op-all-mm":
        return recompute_ops(fwd, policy, layers)
    return [replace_op(op, name=f"recompute.{op.name}", phase="bwd") for op in fwd if _all_mm_reruns(op)]


def _all_mm_reruns(op: Op) -> bool:
    """Whether ``selective-op-all-mm`` (the workbench's selective: every GEMM and attention output saved) reruns
    the forward op ``op``."""
    return op.extra.get("aten") not in ("mm", "sdpa") and not op.extra.get("last") and op.kind != "attention"


def trace_fit(stack: Stack, gpu, compiled: bool, notes: list[str], *, calibrated: bool, tables: StackStep | None):
    """What ``predict`` applies of the stack's profile fitted on a trace of the user's job
    (``workbench.stack_calibration``; ``workbench calibrate --trace`` writes it): nothing unless ``calibrated``, and
    nothing for a bound (``ideal``, or a configuration outside the stack's kernel tables, ``tables`` None)."""
    bound = stack.bound or stack.kernels == "fused" or (stack.kernels not in ("fused", "reference-job") and tables is None)
    if not calibrated or bound:
        return NO_FIT
    from workbench.stack_calibration import stack_fit  # the trace machinery, only where a profile may apply

    return stack_fit(stack.name, gpu, compiled, notes)
