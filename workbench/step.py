"""One step-model pipeline: the op graph of a training step for the model family and the stack that runs it, every
op priced by one memoized timer, the collectives and their overlap added, and the step summarized. What differs
between model families (transformer, DLRM, HSTU) the model's family says (``workbench.families``).

    >>> from workbench.step import StepModel
    >>> step = StepModel("llama3-8b", "h200")
    >>> step.prediction(TrainingConfig(1, 8192)).summary.tokens_per_s   # per-op detail: what predict returns
    >>> step.summary(cfg)                                                # the same numbers, fast: what search asks

``workbench.predict`` is one ``prediction`` call; recipe search (``workbench.recipe.search``) calls ``summary`` for
every candidate of one model on one GPU type. Both run the same arithmetic (``_fold`` and ``_step``), so a
candidate's numbers are exactly ``predict``'s. What makes ``summary`` fast is caching, never a second formula:

- op times are memoized by everything ``workbench.perf.op_time`` reads of an op (``perf.timer_key``, numbered once
  per op list: ``_timer_ids``);
- a transformer's blocks are copies of one block (``Family.repeats_blocks``): one block's graph is built once per
  (micro-batch, sequence, precision, tp, ep, cp, LoRA) for all three checkpointing modes
  (``graph.transformer.block_graph``; kept per model for every step model, ``_shared_graph``: a new evaluator
  prices the graphs an earlier one built), priced once (the recomputation per mode) and multiplied by the busiest
  stage's ``ceil(layers / pp)`` (its op counts), reused across dp, sharding, pp and global batch; the stage's
  priced parts are one object per (block, checkpointing, pp), so the sums cached by it are found again across dp,
  sharding and accumulation;
- the micro-batch's running sums are cached per (micro-batch graph, accumulation), the part FSDP, DDP and ZeRO-1
  share (``_micro_sums``; the once-per-step ops are added after, in the same order, so the bits are the same);
- the optimizer, the data-parallel plan (and its ``step_comm.exposure_schedule``), the critical-path collectives
  (per layout and micro-batch), memory, a stack's priced kernel tables and its launch time, and the largest fitting
  micro-batch are cached by what they read (the plan and optimizer by the layout object itself; the sharded memory
  model's layout terms in ``workbench.memory``, leaving a candidate its micro-batch's arithmetic); ``summary`` sums
  the collectives without making a ``CommPrediction`` for each;
- a stack's kernel tables are built from pieces shared by every configuration (``stacked.stack_tables``' memo:
  one block's ops per micro-batch shape and flavor, copied over the stage's blocks, whatever the pp, dp or
  accumulation; the memo kept per model and stack for every step model, ``stacked.shared_memo``), each piece
  priced once (``_price_parts``);
- a block's recomputation, whose ops are copies of its forward's with the same timer keys, is priced from the
  forward's prices (``graph.recomputed``, ``PricedOps.recomputed``), the fused step's and the stacks' alike.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence

from workbench.config import TrainingConfig, activation_dtype
from workbench.families import family_of
from workbench.graph import stacked
from workbench.graph.execution import Execution
from workbench.graph.ops import FlatShape, Op, memory_op
from workbench.graph.recomputed import RecomputedPiece
from workbench.graph.te_fp8 import fp8_gemm_any_layout
from workbench.graph.transformer import block_graph as _block_graph  # noqa: F401 -- tests/test_step.py reads it
from workbench.graph.transformer import block_pieces as _block_pieces  # noqa: F401 -- and this
from workbench.hardware import GPU, get_gpu
from workbench.memory import MemoryBreakdown, StackMemoryTraits, max_micro_batch, memory_breakdown
from workbench.models import Model, get_model
from workbench.offload import offload_note, offload_time
from workbench.perf import OpTime, op_time
from workbench.perf.efficiency import Constants, constants_for, profile_path
from workbench.perf.overlap import ExposureSchedule
from workbench.perf.timer_key import KeyedOps, timer_key
from workbench.power import tensor_throughput_scale
from workbench.precision import get_precision, is_8bit_training, linear_gemm_precisions, resolve_precision
from workbench.stack_memory_megatron import te_memory_traits
from workbench.stacks import Stack, get_stack
from workbench.step_comm import (
    CommPrediction,
    CriticalPath,
    DataParallelPlan,
    communication,
    communication_seconds,
    critical_path,
    data_parallel_plan,
    exposure_schedule,
)
from workbench.step_result import Prediction, StepSummary, check_plausible, implausible_notes
from workbench.step_sums import ACCUMULATED as _ACCUMULATED
from workbench.step_sums import ONE_MICRO as _ONE_MICRO
from workbench.step_sums import PrefixSums, PricedOps, Stage
from workbench.step_sums import fold as _fold
from workbench.step_sums import micro_sums as _micro_sums
from workbench.step_sums import useful_flops as _useful_flops

TABLE_KERNELS = ("pytorch", "torchtitan", "megatron-local", "megatron-te", "hf-deepspeed")
"""Stacks priced from their own kernel tables (``workbench.graph.stacked``)."""
FAMILY_KERNELS = ("generative-recommenders", "hugectr")
"""Stacks whose kernels a model family prices itself (``Family.own_kernels``, ``Family.stack_microbatch_ops``):
generative-recommenders' HSTU (``workbench.graph.hstu_gr_kernels``), HugeCTR's DLRM (``workbench.families.recsys``)."""


# ----------------------------------------------------------------------------------------------- the op graphs
def microbatch_ops(model: Model, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    """Every op of one micro-batch on the busiest pipeline stage (fused step, or the reference job's)."""
    return family_of(model).microbatch_ops(model, cfg, execution)


def step_ops(model: Model, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
    """Ops that run once per step (the reference job's FSDP2 copies, its sparse table update)."""
    if execution is None:
        return []
    return family_of(model).step_ops(model, cfg, execution)


def optimizer_op(model: Model, cfg: TrainingConfig) -> Op:
    """AdamW over the local dense parameters (``Family.optimizer_params``): read p, g, m, v (fp32), write p, m, v
    and the bf16 copy."""
    params = family_of(model).optimizer_params(model, cfg)
    return memory_op("optimizer.adamw", "optimizer", FlatShape(max(1, int(params))), "fp32", reads=4, writes=3.5,
                     phase="optimizer", layer="optimizer")


# ---------------------------------------------------------------------------------------------- the pipeline
class StepModel:
    """The step model of one model on one GPU type as one stack runs it, with its caches (op times, op graphs,
    optimizer, data-parallel plans, largest micro-batch). ``prediction`` gives per-op detail (``predict``),
    ``summary`` the same summary numbers without it (recipe search). ``constants``: the efficiency constants
    (None: the GPU's spec constants, or its calibration profile when ``calibrated``); ``execution``: the reference
    job's execution (``predict(execution=...)``; implies the ``workbench-job`` stack)."""

    def __init__(self, model: str | Model, gpu: str | GPU, *, stack: str | Stack | None = None,
                 calibrated: bool = False, constants: Constants | None = None, execution: Execution | None = None):
        if execution is not None and stack is None:
            stack = "workbench-job"
        self.stack = get_stack(stack)
        self.model = get_model(model)
        self.family = family_of(self.model)
        self.gpu = get_gpu(gpu)
        self.calibrated = calibrated
        self.execution = execution
        self._given_constants = constants
        self._op_times: dict[int, OpTime] = {}
        """``op_time`` by the op's timer key's number (``_timer_number``)."""
        self._graphs: dict[tuple, object] = {}
        self._fits: dict[tuple, tuple[object, tuple[str, ...]]] = {}
        self._peaks: dict[str, float] = {}
        self._power_scales: dict[float, float] = {}
        """``_power`` by power limit."""
        self._gather_scales: dict[str, float] = {}
        """``_bound_gather_scale`` by precision."""
        self._padded: dict[int, Model] = {}
        self._prefix_sums = PrefixSums()  # the sums of _ACCUMULATED + _ONE_MICRO (step_sums.SUMMED)
        """Every sum of ``_fold`` over a micro-batch's parts, once per prefix of parts (``_micro_sums``)."""

    def _laid_out(self, cfg: TrainingConfig) -> Model:
        """The model as the stack lays it out on ``cfg``'s tensor-parallel ranks: its vocabulary padded
        (``Stack.padded_model``: Megatron's ``make_vocab_size_divisible_by``); the model itself for a stack that pads
        nothing. Every op, plan and memory term of a step reads this; the prediction reports the model as given."""
        if self.stack.vocab_size_divisible_by <= 1:
            return self.model
        tp = cfg.parallelism.tp
        padded = self._padded.get(tp)
        if padded is None:
            padded = self._padded[tp] = self.stack.padded_model(self.model, tp)
        return padded

    @functools.cached_property
    def constants(self) -> Constants:
        """The efficiency constants every op is priced with (read on first use: a missing profile raises then).
        Calibrated with no GPU profile but a trace profile for this stack and GPU: the spec constants, which that
        profile's factors were fitted over (``stack_calibration.base_constants``)."""
        if self._given_constants is not None:
            return self._given_constants
        calibrated = self.calibrated
        if calibrated and not profile_path(self.gpu).is_file():
            from workbench.stack_calibration import load_stack_profile

            calibrated = load_stack_profile(self.stack.name, self.gpu) is None
        return self.stack.gemm_constants(constants_for(self.gpu, calibrated), self.gpu.architecture)

    # -- the memoized timer
    def op_time(self, op: Op) -> OpTime:
        """``workbench.perf.op_time`` of ``op``, memoized by everything it reads of an op (``perf.timer_key``, by its
        number: ``_timer_number``)."""
        key = _timer_number(op)
        hit = self._op_times.get(key)
        if hit is None:
            hit = self._op_times[key] = op_time(op, self.gpu, self.constants)
        return hit

    def _price(self, ops: Sequence[Op], fit, bound: str | None = None, power: float = 1.0) -> PricedOps:
        """``ops`` (each run ``op.count`` times) priced under the stack profile ``fit``, each with its bound
        (``bound``, or its time's), by the memoized timer (``op_time``). ``power``: the sustained tensor throughput
        under the power limit (``workbench.power``); a compute-bound op's time is divided by it (memory-bound ops
        are left as they are)."""
        gpu, constants = self.gpu, self.constants
        return PricedOps.priced(ops, self._op_times, _timer_ids, lambda op: op_time(op, gpu, constants), fit,
                                bound, power)

    def _power(self, cfg: TrainingConfig) -> float:
        """Sustained tensor throughput under ``cfg``'s power limit, or the GPU's (``workbench.power``): 1 at the
        rating."""
        scale = self._power_scales.get(cfg.power_limit_w)
        if scale is None:
            scale = self._power_scales[cfg.power_limit_w] = tensor_throughput_scale(self.gpu, cfg.power_limit_w)
        return scale

    def _cached(self, key: tuple, build):
        hit = self._graphs.get(key)
        if hit is None:
            if len(self._graphs) > 50_000:  # a long-lived model: start over rather than grow without bound
                self._graphs.clear()
            hit = self._graphs[key] = build()
        return hit

    # -- the step's parts
    def _mode(self, compile: bool | None, param_dtype: str | None) -> tuple[bool, str, Execution | None]:
        """(compiled, parameter dtype, execution) of one step as this stack runs it."""
        dtype = self.stack.param_dtype(param_dtype)
        if compile is None:  # the reference job's execution carries its recipe's flag; else torch's default, off
            compile = self.execution.compile if self.execution is not None else False
        compiled = self.stack.compiled(compile)
        execution = self.execution
        if self.stack.kernels == "reference-job" and execution is None:
            execution = Execution(compile=compiled)
        return compiled, dtype, execution

    def _tables(self, cfg: TrainingConfig, compiled: bool, dtype: str) -> tuple[stacked.StackStep | None, str | None]:
        """The stack's own kernel tables for ``cfg`` and, where they do not cover it, what they lack."""
        if self.stack.kernels not in TABLE_KERNELS:
            return None, None
        return self._cached(("tables", cfg, compiled, dtype), lambda: self._build_tables(cfg, compiled, dtype))

    def _build_tables(self, cfg: TrainingConfig, compiled: bool, dtype: str):
        model = self._laid_out(cfg)
        return stacked.stack_tables(model, cfg, self.stack, compiled=compiled, param_dtype=dtype,
                                    memo=stacked.shared_memo(model, self.stack),
                                    fp8_any_layout=fp8_gemm_any_layout(self.gpu))

    def _fit(self, compiled: bool, tables: stacked.StackStep | None):
        """The stack profile fitted on a trace of the user's job (``workbench calibrate --trace``), and the notes
        saying so; ``stacked.trace_fit`` decides, once per mode."""
        key = (compiled, tables is None)
        hit = self._fits.get(key)
        if hit is None:
            notes: list[str] = []
            fit = stacked.trace_fit(self.stack, self.gpu, compiled, notes,
                                    calibrated=self.calibrated and self._given_constants is None, tables=tables)
            hit = self._fits[key] = (fit, tuple(notes))
        return hit

    def _parts(self, cfg: TrainingConfig, fit, tables, execution) -> tuple[Stage, Stage]:
        """(the micro-batch's ops, the once-per-step ops and optimizer) priced, in step order. CPU offload
        (``cfg.offload``) moves the optimizer to the host: no GPU optimizer op (``_step`` adds the host's time)."""
        power = self._power(cfg)
        f = (id(fit), power)
        if tables is not None:  # the tables ride in the cached value: their id stays theirs while it lives
            return self._cached(("table parts", id(tables), f), lambda: (
                (self._price_parts(tables.microbatch_parts, fit, power),
                 self._price_parts(tables.step_parts, fit, power)), tables))[0]
        model, p = self._laid_out(cfg), cfg.parallelism
        if self.family.repeats_blocks:  # each kind of block priced once, its copies on the stage
            # one Stage per what its blocks read (``_block``'s key, the checkpointing mode, and the pipeline degree,
            # which is all ``Family.stage_blocks`` reads of cfg), so that the micro-batch's sums, cached by the
            # Stage, are found again (``_micro_sums``): every data-parallel degree, sharding and accumulation
            # shares it
            key = ("micro stage", cfg.micro_batch, cfg.seq_len, cfg.precision, p.tp, p.ep, p.cp, p.pp, cfg.lora_rank,
                   cfg.lora_targets, cfg.activation_checkpointing, execution, id(fit), power)
            micro = self._cached(key, lambda: _stage(tuple((self._block(cfg, execution, fit, power, kind), n)
                                                           for kind, n in self.family.stage_blocks(model, cfg))))
        else:
            key = (cfg if execution is not None else
                   (cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.activation_checkpointing))
            micro = ((self._cached(("micro", key, execution, f), lambda: self._price(
                self.family.stack_microbatch_ops(model, cfg, execution, self.stack.kernels), fit, power=power)), 1),)
        on_gpu = cfg.offload == "none"
        # keyed by the parallelism object (held by the cached value, so its id stays its own), as ``_planned``
        optimizer = self._cached(("optimizer", id(p), cfg.lora_rank, cfg.lora_targets, on_gpu, f), lambda: (
            self._price([optimizer_op(model, cfg)] if on_gpu else [], fit, bound="memory", power=power), p))[0]
        if execution is None:
            return micro, ((optimizer, 1),)
        once = self._cached(("step", cfg, execution, f), lambda: self._price(
            step_ops(model, cfg, execution), fit, power=power))
        return micro, ((once, 1), (optimizer, 1))

    def _price_parts(self, parts: stacked.Parts, fit, power: float) -> Stage:
        """A stack's tables' (ops, copies) pieces priced, each piece once while it lives (its ops ride in the cached
        value): the tables of many configurations share pieces (a block's ops across pipeline degrees, data
        parallelism and checkpointing), so a candidate's tables are mostly priced already."""
        return tuple((self._price_piece(ops, fit, power), copies) for ops, copies in parts)

    def _price_piece(self, ops: tuple[Op, ...], fit, power: float) -> PricedOps:
        """One piece of ``_price_parts``, priced once while it lives; a recomputed piece (``graph.recomputed``)
        from the prices of the forward piece it copies, unless ``fit`` is applied (it may read the names)."""
        key = ("table piece", id(ops), id(fit), power)
        hit = self._graphs.get(key)  # most pieces of a candidate's tables are priced already: no closure for them
        if hit is not None:
            return hit[0]

        def price() -> PricedOps:
            if type(ops) is RecomputedPiece:
                return self._price_recomputed(ops, ops.forward, self._price_piece(ops.forward, fit, power), fit,
                                              power)
            return self._price(ops, fit, power=power)

        return self._cached(key, lambda: (price(), ops))[0]

    def _block(self, cfg: TrainingConfig, execution, fit, power: float = 1.0, kind=None) -> tuple[PricedOps, ...]:
        """``Family.block_graph``'s pieces priced (one block, independent of pp). Checkpointing changes only the
        recomputation (``graph.transformer.block_ops``), so the graph is built once for all three modes and the
        other pieces are priced once."""
        p = cfg.parallelism
        block = (cfg.micro_batch, cfg.seq_len, cfg.precision, p.tp, p.ep, p.cp, cfg.lora_rank, cfg.lora_targets,
                 kind, execution, id(fit), power)
        mode = cfg.activation_checkpointing
        hit = self._graphs.get(("block", mode) + block)
        if hit is None:
            model = self._laid_out(cfg)  # the graph reads the model and the block's shape, not this step model
            graph = _shared_graph(model, block[:-2], lambda: self.family.block_graph(model, cfg, execution, kind))
            shared = self._cached(("block pieces",) + block, lambda: tuple(
                self._price(piece, fit, power=power) for piece in graph[:4]))
            hit = self._cached(("block", mode) + block, lambda: shared + (
                self._price_recomputed(graph[4][mode], graph[1], shared[1], fit, power),))
        return hit

    def _price_recomputed(self, ops, forward: Sequence[Op], priced: PricedOps, fit, power: float) -> PricedOps:
        """A block's recomputation ``ops`` priced: from ``priced``, the prices of the forward piece ``forward``,
        where ``ops`` are copies of its ops (``graph.recomputed``) and ``fit`` is not applied (it may read the
        names); else afresh."""
        if getattr(ops, "forward", None) is forward and not fit.applied:
            return PricedOps.recomputed(ops, ops.kept, priced)
        return self._price(ops, fit, power=power)

    def _plan(self, cfg: TrainingConfig, tables=None) -> DataParallelPlan:
        """``step_comm.data_parallel_plan``, cached by what it reads (not the micro-batch); ``tables``: a stack's,
        whose FSDP2 may gather the blocks in float8 (``StackStep.fsdp_gather_scale``) or which runs collectives of
        its own (``StackStep.data_parallel_schedules``: DeepSpeed ZeRO's buckets and per-module gathers)."""
        return self._planned(cfg, tables)[0]

    def _planned(self, cfg: TrainingConfig, tables=None) -> tuple[DataParallelPlan, ExposureSchedule]:
        """``_plan`` and its ``step_comm.exposure_schedule``, made together once per plan. Keyed by the parallelism
        object itself (its id; the cached value holds it, so the id stays its own): recipe search hands every
        candidate of a layout the same one, and hashing or comparing a ``Parallelism`` runs in Python, per
        candidate. An equal layout in another object is planned again, to the same plan."""
        p = cfg.parallelism
        scale = tables.fsdp_gather_scale if tables is not None else self._bound_gather_scale(cfg)
        own = tables.data_parallel_schedules(cfg) if tables is not None else None
        if own is None and self._family_kernels:  # the family's model of that stack's collectives
            own = self.family.stack_data_parallel_collectives(self._laid_out(cfg), cfg, self.stack)
        # of the gradient accumulation, only FSDP2's schedule reads anything (``step_comm.transformer_data_parallel``:
        # it gathers the blocks again for every micro-batch); a stack's own schedules join the key as they are
        accumulation = cfg.grad_accumulation if p.sharding == "fsdp" else 0
        key = ("plan", id(p), accumulation, activation_dtype(cfg.precision), cfg.lora_rank, cfg.lora_targets, scale,
               None if own is None else tuple((tuple(s), group) for s, group in own))
        hit = self._graphs.get(key)
        if hit is None:
            plan = data_parallel_plan(self._laid_out(cfg), cfg, self.gpu, self.constants, block_gather_scale=scale,
                                      schedules=own)
            hit = self._cached(key, lambda: (plan, exposure_schedule(plan), p))
        return hit[0], hit[1]

    def _bound_gather_scale(self, cfg: TrainingConfig) -> float:
        """The blocks' FSDP all-gather bytes of the fused-step bound relative to bf16: under fp8-family training
        the bound gathers the weights in 8 bits (torchtitan's FSDP2 float8 all-gather does, so a bound must; the
        norms' few weights, ~1e-4 of a block, go in 8 bits too here); 1 otherwise and for stacks that price the
        step themselves (the reference job gathers bf16)."""
        if cfg.parallelism.sharding != "fsdp":
            return 1.0
        scale = self._gather_scales.get(cfg.precision)
        if scale is None:
            scale = self._gather_scales[cfg.precision] = (
                get_precision(linear_gemm_precisions(cfg.precision).forward).bytes_per_element / 2
                if is_8bit_training(cfg.precision) and self._bound(None) else 1.0)
        return scale

    def _critical(self, cfg: TrainingConfig) -> CriticalPath:
        """``step_comm.critical_path``, cached by what it reads (every parallel degree but the sharding)."""
        p = cfg.parallelism
        key = ("critical", cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.activation_checkpointing,
               cfg.grad_accumulation, p.dp, p.tp, p.pp, p.ep, p.cp, p.virtual_stages)
        return self._cached(key, lambda: critical_path(self._laid_out(cfg), cfg, self.gpu, self.constants,
                                                       context_parallel=self.stack.context_parallel,
                                                       stack=self.stack if self._family_kernels else None))

    @property
    def _family_kernels(self) -> bool:
        """The stack's kernels are a table this model's family prices itself (``Family.own_kernels``)."""
        return self.stack.kernels in self.family.own_kernels

    def _max_micro_batch(self, cfg: TrainingConfig, compiled_loss: bool = False) -> int:
        key = ("max_micro_batch", cfg.seq_len, cfg.precision, cfg.parallelism, cfg.activation_checkpointing,
               cfg.lora_rank, cfg.lora_targets, cfg.offload, compiled_loss)
        return self._cached(key, lambda: max_micro_batch(self._laid_out(cfg), cfg, self.gpu,
                                                         compiled_loss=compiled_loss,
                                                         traits=self._memory_traits(cfg.precision)))

    def _memory_traits(self, precision: str) -> StackMemoryTraits | None:
        """What the stack holds differently from the job in ``workbench.memory`` (None: the job's own)."""
        if self.stack.kernels in self.family.own_kernels:  # the family's model of that code's memory
            return StackMemoryTraits(kernels=self.stack.kernels)
        if self.stack.kernels != "megatron-te":
            return None
        from workbench.graph.stacked_megatron import fp8_recipe  # as graph.stacked does: imported when used
        return te_memory_traits(fp8_recipe(self.stack, precision), fp8_gemm_any_layout(self.gpu))

    def _peak(self, precision: str) -> float:
        peak = self._peaks.get(precision)
        if peak is None:
            peak = self._peaks[precision] = self.gpu.peak_tflops(
                resolve_precision(self.gpu, precision).effective.peak_key) * 1e12
        return peak

    def memory(self, cfg: TrainingConfig, *, compile: bool | None = None,
               param_dtype: str | None = None) -> MemoryBreakdown:
        """Peak memory per GPU of ``cfg`` (resolved): the stack's own terms on one GPU where its tables cover the
        configuration, else the sharded model of ``workbench.memory``."""
        compiled, dtype, execution = self._mode(compile, param_dtype)
        return self._memory(cfg, self._tables(cfg, compiled, dtype)[0], _compiled_loss(execution))

    def _memory(self, cfg: TrainingConfig, tables, compiled_loss: bool = False) -> MemoryBreakdown:
        # search checks memory first, then prices the same cfg (``candidate`` hands the step what it found).
        # Outside a stack's tables the sharded model is not cached here: ``workbench.memory`` memoizes all of it
        # but the micro-batch's arithmetic, which costs less than hashing cfg for a key
        if tables is None:
            return self._build_memory(cfg, None, compiled_loss)
        key = ("memory", cfg, id(tables), compiled_loss)  # the tables ride in the cached value: their id stays theirs
        return self._cached(key, lambda: (self._build_memory(cfg, tables, compiled_loss), tables))[0]

    def _build_memory(self, cfg: TrainingConfig, tables, compiled_loss: bool) -> MemoryBreakdown:
        if tables is not None and (cfg.parallelism.gpus == 1 or tables.covers_data_parallel_memory):
            return tables.memory(self.stack, self.gpu.hbm_capacity_gb.value * 1e9)
        return memory_breakdown(self._laid_out(cfg), cfg, self.gpu, compiled_loss=compiled_loss,
                                traits=self._memory_traits(cfg.precision))

    def priced_as_bound(self, cfg: TrainingConfig, *, compile: bool | None = None,
                        param_dtype: str | None = None) -> bool:
        """Whether ``cfg``'s step is the fused-step bound (``StepSummary.priced_as_bound``)."""
        compiled, dtype, _ = self._mode(compile, param_dtype)
        return self._bound(self._tables(cfg, compiled, dtype)[0])

    def _bound(self, tables) -> bool:
        kernels = self.stack.kernels
        return (kernels == "fused" or (kernels in TABLE_KERNELS and tables is None)
                or (kernels in FAMILY_KERNELS and kernels not in self.family.own_kernels))

    # -- the step
    def summary(self, cfg: TrainingConfig, *, compile: bool | None = None, param_dtype: str | None = None,
                max_micro_batch: bool = True) -> StepSummary:
        """The step's summary for ``cfg`` (resolved for the model, its precision one this GPU runs natively):
        exactly ``prediction``'s, without the per-op detail and notes. ``max_micro_batch`` False leaves out the
        largest fitting micro-batch (a binary search over the memory model; ``StepSummary.max_micro_batch`` is then
        -1): the search climbs the micro-batches itself."""
        compiled, dtype, execution = self._mode(compile, param_dtype)
        tables, _ = self._tables(cfg, compiled, dtype)
        fit, _ = self._fit(compiled, tables)
        return self._step(cfg, fit, tables, execution, self._peak(cfg.precision), max_micro_batch,
                          detail=False)[0]

    def candidate(self, cfg: TrainingConfig, *, compile: bool | None = None,
                  param_dtype: str | None = None) -> tuple[MemoryBreakdown, StepSummary | None, bool]:
        """What recipe search asks of ``cfg`` (resolved), with one look-up of its tables: its peak memory
        (``memory``), its ``summary`` without the largest micro-batch if it fits (None if it does not), and
        whether it is priced as the bound (``priced_as_bound``)."""
        compiled, dtype, execution = self._mode(compile, param_dtype)
        compiled_loss = _compiled_loss(execution)
        memory = None
        if self.stack.kernels in TABLE_KERNELS and not stacked.memory_reads_tables(self.stack, cfg):
            memory = self._memory(cfg, None, compiled_loss)  # the sharded model: no tables built for it
            if not memory.fits:  # priced as the bound where the tables do not cover cfg
                model = self._laid_out(cfg)
                gap = stacked.tables_gap(model, cfg, self.stack, stacked.shared_memo(model, self.stack))
                return memory, None, gap is not None
        tables, _ = self._tables(cfg, compiled, dtype)
        if memory is None:
            memory = self._memory(cfg, tables, compiled_loss)
            if not memory.fits:
                return memory, None, self._bound(tables)
        fit, _ = self._fit(compiled, tables)
        if tables is None and self.stack.kernels in TABLE_KERNELS:
            # outside the stack's tables the step is the fused-step bound, which reads no compile flag (its fit is
            # ``trace_fit``'s none for both): the search's eager and compiled candidates of cfg are one step
            # (the fit lives in self._fits as long as this model: its id stays its own; memory, without tables,
            # reads cfg and the execution alone)
            key = ("bound step", cfg, id(fit), execution, dtype)
            summary = self._cached(key, lambda: self._step(cfg, fit, None, execution, self._peak(cfg.precision), False,
                                                           detail=False, memory=memory)[0])
            return memory, summary, summary.priced_as_bound
        summary = self._step(cfg, fit, tables, execution, self._peak(cfg.precision), False, detail=False,
                             memory=memory)[0]
        return memory, summary, summary.priced_as_bound

    def prediction(self, config: TrainingConfig, *, compile: bool | None = None, param_dtype: str | None = None,
                   allow_fallback: bool = False) -> Prediction:
        """Predict one step of ``config`` (``predict``'s arguments; ``config`` need not be resolved)."""
        resolved = resolve_precision(self.gpu, config.precision, allow_fallback=allow_fallback)
        notes = [resolved.note] if resolved.note else []
        cfg = dataclasses.replace(config, precision=resolved.effective.name).resolved(self.model)
        c = self.constants
        if self.gpu.is_uncertain:
            notes.append(f"{self.gpu.display_name} is announced, not shipping: several of its figures are estimates")
        if getattr(self.model, "approximation", None):  # a Hugging Face config read as a family it is not
            notes.append(self.model.approximation)
        compiled, dtype, execution = self._mode(compile, param_dtype)
        tables, gap = self._tables(cfg, compiled, dtype)
        if gap is not None:
            notes.append(f"{self.stack.display_name}: {gap} are outside this stack's kernel tables; priced as the "
                         "ideal fused step (a bound)")
        fit, fit_notes = self._fit(compiled, tables)
        notes += fit_notes
        if self._given_constants is None:  # given constants are the caller's: the stack's factors are not in them
            notes += self.stack.gemm_notes(self.gpu.architecture, resolved.effective.name)
        summary, (micro, once), comms = self._step(
            cfg, fit, tables, execution, self.gpu.peak_tflops(resolved.effective.peak_key) * 1e12)
        ops = [o for part, copies in micro for o in part.predictions(copies, cfg.grad_accumulation)]
        ops += [o for part, copies in once for o in part.predictions(copies, 1)]
        p = cfg.parallelism
        if tables is not None and p.gpus > 1 and not tables.covers_data_parallel_memory:
            notes.append(f"{self.stack.display_name}: memory on {p.gpus} GPUs is the sharded model of the reference "
                         "job (workbench.memory); the stack's own memory terms cover one GPU")
        if cfg.offload != "none":  # the same terms _step added, itemized
            microbatch_s = _micro_sums(micro, 1, ("pairs",))[0]
            notes.append(offload_note(offload_time(self._laid_out(cfg), cfg, self.gpu, microbatch_s), cfg))
        memory = summary.memory
        if not memory.fits:
            notes.append(f"does not fit: needs {memory.total / 1e9:.1f} GB of {memory.usable / 1e9:.1f} GB usable "
                         "HBM per GPU")
        notes += implausible_notes(summary)
        return Prediction(self.model, self.gpu, cfg, resolved, ops, comms, summary,
                          calibrated=c.calibrated or fit.applied, notes=notes)

    def _micro_sums(self, micro: Stage, accum: int) -> tuple[tuple, tuple]:
        """``_micro_sums`` of ``_ACCUMULATED`` (x ``accum``) and of ``_ONE_MICRO`` (x 1) for the micro-batch graph
        ``micro``, cached by ``micro`` itself (a cached value of ``_parts``). The sums are made once per prefix of
        parts (``step_sums.PrefixSums``: graphs that begin alike add their common parts once). A power-of-two
        ``accum`` scales the sums of one micro-batch: every term and every partial sum is then that power of two
        times its one-micro-batch value, exactly (the same significands), so the bits are those ``_micro_sums``
        makes with ``accum``; any other ``accum`` sums again."""
        key = ("micro sums of", id(micro), accum)  # micro rides in the cached value: its id stays its own
        hit = self._graphs.get(key)
        if hit is None:
            sums = self._prefix_sums(micro)
            split = len(_ACCUMULATED)
            step_sums = (tuple(s * accum for s in sums[:split]) if accum & (accum - 1) == 0
                         else _micro_sums(micro, accum, _ACCUMULATED))
            hit = self._cached(key, lambda: (micro, (step_sums, sums[split:])))
        return hit[1]

    def _step(self, cfg: TrainingConfig, fit, tables, execution, peak: float, with_max_micro_batch: bool = True,
              detail: bool = True, memory: MemoryBreakdown | None = None):
        """(summary, priced parts, collectives) of ``cfg``: the one place the step's arithmetic lives. ``detail``
        False leaves out the collectives (None; their sums are the same: ``step_comm.communication_seconds``);
        ``memory``: ``cfg``'s, already looked up (``_memory``)."""
        model, gpu, p = self._laid_out(cfg), self.gpu, cfg.parallelism
        accum = cfg.grad_accumulation
        micro, once = parts = self._parts(cfg, fit, tables, execution)
        s = _fold(micro, accum, once, self._micro_sums(micro, accum))
        plan, schedule = self._planned(cfg, tables)
        comm_args = dict(embedding_fwd_s=s.embedding_fwd_s, embedding_bwd_s=s.embedding_bwd_s,
                         plan=plan, schedule=schedule,
                         attention_s=s.attention_s, critical=self._critical(cfg) if tables is None else
                         tables.overlap_critical_path(self._critical(cfg), micro, cfg, model, gpu,
                                                      lambda op: self.op_time(op).time_s))
        if detail:
            comms: list[CommPrediction] | None = communication(model, cfg, gpu, self.constants,
                                                               accum * s.microbatch_s, **comm_args)
            comm_s = sum(cm.exposed_s for cm in comms)
            comm_total_s = sum(cm.time_s for cm in comms)
        else:  # the same sums, without a CommPrediction per collective
            comms = None
            comm_s, comm_total_s = communication_seconds(model, cfg, gpu, self.constants, accum * s.microbatch_s,
                                                         **comm_args)
        # 1F1B's bubble, 1/virtual_stages of it interleaved (Narayanan et al. 2021, Sec. 2.2: (p - 1) / (v m))
        bubble_s = (p.pp - 1) * s.microbatch_s / p.virtual_stages if p.pp > 1 else 0.0
        optimizer_s = s.optimizer_s  # CPU offload: the host step's exposed seconds instead (workbench.offload)
        if cfg.offload != "none":
            optimizer_s += offload_time(model, cfg, gpu, s.microbatch_s).exposed_s
        step = s.compute_bound_s + s.memory_bound_s + optimizer_s + bubble_s + comm_s
        host_s = fit.host_s(self._cached(("host", id(tables), accum), lambda: (
            tables.host_s(self.stack, accum), tables))[0]) if tables else 0.0
        step = max(step + fit.idle_gap_s, host_s)  # the CPU enqueues ahead of the GPU; the step ends at the later
        samples = cfg.samples_per_step
        family = self.family
        flops = self._cached(("flops", cfg.seq_len, cfg.lora),
                             lambda: family.model_flops_per_sample(self.model, cfg.seq_len, cfg.lora))
        # None: the priced ops' FLOPs
        model_flops = _useful_flops(micro, accum, once) * p.gpus if flops is None else flops * samples
        tokens = samples * family.tokens_per_sample(model, cfg)
        compiled_loss = _compiled_loss(execution)
        if memory is None:
            memory = self._memory(cfg, tables, compiled_loss)
        summary = object.__new__(StepSummary)  # its fields set without the frozen __init__ (one per candidate of
        summary.__dict__.update(  # a recipe search), in the order of its fields, as __init__ sets them
            step_time_s=step, compute_bound_s=s.compute_bound_s, memory_bound_s=s.memory_bound_s,
            communication_s=comm_s, communication_total_s=comm_total_s,
            optimizer_s=optimizer_s, bubble_s=bubble_s, samples_per_s=samples / step, tokens_per_s=tokens / step,
            mfu=model_flops / (step * p.gpus * peak), model_flops_per_step=model_flops, memory=memory,
            max_micro_batch=self._max_micro_batch(cfg, compiled_loss) if with_max_micro_batch else -1, gpus=p.gpus,
            host_s=host_s, stack=self.stack.name,
            priced_as_bound=self._bound(tables))
        check_plausible(summary, model, gpu)
        return summary, parts, comms


_SHARED_GRAPHS: dict[tuple, tuple[Model, object]] = {}
SHARED_GRAPHS_LIMIT = 1024
"""Block graphs ``_shared_graph`` keeps before it starts over (a long session searching many models): the nine
cases of ``benchmarks/speed/search_speed.py`` make 339 (some 14,600 ops)."""


def _shared_graph(model: Model, key: tuple, build):
    """``build()``, one block's op graph (``Family.block_graph``), made once per model object and ``key`` (the
    block's shape: everything the graph reads of a configuration) for every ``StepModel``: a graph reads neither
    the GPU nor the constants nor a stack profile, so a fresh step model of the same model -- each recipe search's
    new evaluator -- prices the graphs the last one built instead of building them again (callgrind: 17% of the
    instructions of a cold search of Llama 3 8B on 8 H200s, the fused step). The ops are frozen and never changed
    after they are built, so sharing them is safe; the entry holds the model, so its id is not reused while the
    entry lives."""
    memo_key = (id(model), *key)
    hit = _SHARED_GRAPHS.get(memo_key)
    if hit is None:
        if len(_SHARED_GRAPHS) >= SHARED_GRAPHS_LIMIT:
            _SHARED_GRAPHS.clear()
        hit = _SHARED_GRAPHS[memo_key] = (model, build())
    return hit[1]


def _stage(blocks: tuple[tuple[tuple[PricedOps, ...], int], ...]) -> Stage:
    """A micro-batch's priced parts in step order from its kinds of block (each ``StepModel._block``'s pieces and
    its copies on the stage): the embedding, every kind's forward, the head, every kind's backward, every kind's
    recomputation (the ends and head are the first kind's)."""
    (ends, _, head, _, _), _ = blocks[0]
    return ((ends, 1), *((b[1], n) for b, n in blocks), (head, 1), *((b[3], n) for b, n in blocks),
            *((b[4], n) for b, n in blocks))


def _compiled_loss(execution: Execution | None) -> bool:
    """Whether the step's loss is the reference job's chunked loss, compiled (``Execution.compiled_loss``): its
    memory holds no fp32 chunks (``workbench.memory.COMPILED_LOSS_CHUNKS_LIVE``)."""
    return execution is not None and execution.compiled_loss


_TIMER_IDS: dict[tuple, int] = {}
"""A number per timer key (``perf.timer_key``), the same for every step model."""
_PIECE_TIMER_IDS: dict[int, tuple[Sequence[Op], tuple[int, ...]]] = {}
"""``_timer_ids`` of each op list priced, by the list's id (the entry holds the list: its id is not reused while the
entry lives)."""
TIMER_IDS_LIMIT = 100_000
"""Timer keys ``_timer_number`` keeps before it starts over (a long session pricing many models): the nine cases of
``benchmarks/speed/search_speed.py`` make some 5,000."""
PIECE_TIMER_IDS_LIMIT = 20_000
"""Op lists ``_timer_ids`` keeps before it starts over: no more than the graph memos keep (``stacked.MEMO_LIMIT``),
so that it holds few lists they have let go (the nine cases of ``search_speed.py``, two evaluators each, price
some 2,600)."""
_timer_numbers = itertools.count()  # never reused, even after a clear: a kept list's numbers stay its own


def _timer_number(op: Op) -> int:
    """The number of ``op``'s timer key (``perf.timer_key``): equal keys, one number, for every step model (a number
    drawn for a key already numbered is skipped: numbers need only differ)."""
    if len(_TIMER_IDS) >= TIMER_IDS_LIMIT:
        _TIMER_IDS.clear()
    return _TIMER_IDS.setdefault(timer_key(op), next(_timer_numbers))


def _timer_ids(ops: Sequence[Op]) -> tuple[int, ...]:
    """``_timer_number`` of each op of ``ops``, made once per op list and kept for every step model:
    a recipe search's new evaluator prices the op lists an earlier one built (the graphs are shared:
    ``_shared_graph``, ``stacked.shared_memo``), and making each op's key again (a tuple of seven, its ``extra``
    flags read one by one) and hashing it (a GEMM's shape hashes in Python) was most of what pricing an op of known
    time cost. Op lists are never changed once built, as their ops."""
    hit = _PIECE_TIMER_IDS.get(id(ops))
    if hit is not None and len(hit[1]) == len(ops):  # (a list grown since would be numbered again)
        return hit[1]
    if len(_PIECE_TIMER_IDS) >= PIECE_TIMER_IDS_LIMIT:
        _PIECE_TIMER_IDS.clear()
    if len(_TIMER_IDS) >= TIMER_IDS_LIMIT:
        _TIMER_IDS.clear()
    # _timer_number of each op, the loop in C: a fresh number drawn per op, kept where its key is new; a stack
    # table's block zips its sizes with its family's keys (``perf.timer_key.KeyedOps``: the same keys)
    keys = ops.family.keys(ops) if type(ops) is KeyedOps else map(timer_key, ops)
    numbers = tuple(map(_TIMER_IDS.setdefault, keys, _timer_numbers))
    _PIECE_TIMER_IDS[id(ops)] = (ops, numbers)
    return numbers


__all__ = ["PricedOps", "StepModel", "microbatch_ops", "optimizer_op", "step_ops"]
