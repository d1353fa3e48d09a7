"""Search: every feasible training configuration of a model on N GPUs of one type, ranked by predicted throughput.

Candidates span micro-batch (powers of two, and the largest that fits HBM for the leaders), activation
checkpointing, FSDP vs DDP, tensor-parallel degree (inside the scale-up domain), pipeline degree, expert-parallel
degree for MoE models, and precisions when asked. A candidate is feasible when its peak memory fits HBM with the memory model's headroom
(``workbench.memory.HEADROOM_FRACTION``).

``FastEvaluator`` gives the numbers ``workbench.predict`` gives (tested to 1e-9 relative) at a fraction of the
cost: the op graph of one micro-batch depends only on (micro-batch, tp, ep, checkpointing, precision), and a
transformer's blocks are ``ceil(layers / pp)`` copies of one block, so per-micro-batch compute is cached per
such key (and every op time per op shape) and reused across data-parallel degree, sharding, pipeline degree and
global batch. Memory, optimizer and collectives are the core model's own functions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.config import (
    CHECKPOINTING,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ_LEN,
    Parallelism,
    TrainingConfig,
    activation_dtype,
    default_seq_len,
)
from workbench.errors import SpecError, WorkbenchError
from workbench.graph.execution import Execution
from workbench.graph.ops import Op
from workbench.graph.transformer import (
    block_ops,
    embedding_ops,
    head_ops,
    model_flops_per_sample,
)
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB, memory_breakdown
from workbench.models import Model, TransformerModel, get_model
from workbench.perf import op_time
from workbench.perf.efficiency import constants_for
from workbench.precision import resolve_precision
from workbench.predict import (
    DataParallelPlan,
    _communication,
    _microbatch_ops,
    _optimizer_op,
    _step_ops,
    data_parallel_plan,
)

if TYPE_CHECKING:
    import pandas as pd

MAX_MICRO_BATCH = {"transformer": 1024, "dlrm": 1 << 20, "hstu": 4096}
"""Largest micro-batch tried per model kind (powers of two up to it; memory stops the climb earlier)."""
FILL_TOP = 8
"""How many of the fastest settings also try the largest micro-batch that fits between powers of two (a policy)."""


@dataclass(frozen=True)
class Candidate:
    """One configuration and what the model predicts for it."""

    config: TrainingConfig
    """Resolved (seq_len filled, precision as modelled)."""
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    peak_memory_gb: float
    communication_s: float
    fits: bool

    def as_row(self) -> dict:
        c, p = self.config, self.config.parallelism
        return {"precision": c.precision, "micro_batch": c.micro_batch, "global_batch": c.samples_per_step,
                "grad_accumulation": c.grad_accumulation, "activation_checkpointing": c.activation_checkpointing,
                "sharding": p.sharding, "dp": p.dp, "tp": p.tp, "pp": p.pp, "ep": p.ep,
                "step_time_ms": self.step_time_s * 1e3, "tokens_per_s": self.tokens_per_s,
                "samples_per_s": self.samples_per_s, "mfu": self.mfu, "peak_memory_gb": self.peak_memory_gb,
                "communication_ms": self.communication_s * 1e3, "fits": self.fits}


@dataclass(frozen=True)
class _MicrobatchCost:
    """One micro-batch's op time split by bound (count included, accumulation not), and its useful FLOPs."""

    compute_s: float
    memory_s: float
    useful_flops: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.memory_s


class FastEvaluator:
    """``predict()``'s summary numbers for many configurations of one model on one GPU type, with caching."""

    def __init__(self, model: str | Model, gpu: str | GPU, *, calibrated: bool = False,
                 execution: Execution | None = None):
        self.execution = execution
        """As ``predict(execution=...)``: the reference job's extra ops (None: the fused step)."""
        self.model = get_model(model)
        self.gpu = get_gpu(gpu)
        self.constants = constants_for(self.gpu, calibrated)
        self._op_times: dict[tuple, tuple[float, str]] = {}
        self._microbatch: dict[tuple, _MicrobatchCost] = {}
        self._optimizers: dict[Parallelism, tuple[float, float]] = {}
        self._flops_per_sample: dict[int, float] = {}
        self._peaks: dict[str, float] = {}
        self._embedding: dict[tuple, tuple[float, float]] = {}
        self._plans: dict[tuple, DataParallelPlan] = {}

    def _time(self, op: Op, phase: str | None = None) -> tuple[float, str]:
        """(time, bound) of one execution, cached by everything ``op_time`` reads; ``phase`` overrides op.phase.
        Only attention's time depends on the phase (forward and backward rates), so only its key holds it."""
        phase = phase or op.phase
        key = (op.kind, phase if op.kind == "attention" else "", op.shape, op.dtype, op.flops, op.bytes_read,
               op.bytes_written, bool(op.extra.get("unvectorized")), bool(op.extra.get("transpose")),
               op.extra.get("bandwidth_kind"))
        hit = self._op_times.get(key)
        if hit is None:
            timed = op if phase == op.phase else dataclasses.replace(op, phase=phase)
            t = op_time(timed, self.gpu, self.constants)
            hit = self._op_times[key] = (t.time_s, t.bound)
        return hit

    def _sum(self, ops: Iterable[Op], phase: str | None = None, useful: bool = True) -> _MicrobatchCost:
        """Ops' time split by bound (count included); ``useful`` False leaves their FLOPs out (recomputation)."""
        compute = memory = flops = 0.0
        for op in ops:
            time_s, bound = self._time(op, phase)
            if bound == "compute":
                compute += time_s * op.count
            else:
                memory += time_s * op.count
            if useful and not op.name.startswith("recompute."):
                flops += op.flops * op.count
        return _MicrobatchCost(compute, memory, flops)

    def microbatch_cost(self, cfg: TrainingConfig) -> _MicrobatchCost:
        """Op time of one micro-batch on the busiest stage; ``cfg`` resolved."""
        p, model = cfg.parallelism, self.model
        if not isinstance(model, TransformerModel):
            key = (cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.activation_checkpointing)
            if key not in self._microbatch:
                self._microbatch[key] = self._sum(_microbatch_ops(model, cfg, self.execution))
            return self._microbatch[key]
        key = (cfg.micro_batch, cfg.seq_len, cfg.precision, p.tp, p.ep)
        parts = self._microbatch.get(key)
        if parts is None:
            parts = self._microbatch[key] = self._transformer_parts(cfg)  # type: ignore[assignment]
        ends, fwd, bwd, selective, full = parts  # type: ignore[misc]
        again = {"none": None, "selective": selective, "full": full}[cfg.activation_checkpointing]
        block_compute = fwd.compute_s + bwd.compute_s + (again.compute_s if again else 0.0)
        block_memory = fwd.memory_s + bwd.memory_s + (again.memory_s if again else 0.0)
        layers = math.ceil(model.num_layers / p.pp)
        return _MicrobatchCost(ends.compute_s + layers * block_compute, ends.memory_s + layers * block_memory,
                               ends.useful_flops + layers * (fwd.useful_flops + bwd.useful_flops))

    def _transformer_parts(self, cfg: TrainingConfig) -> tuple[_MicrobatchCost, ...]:
        """Embedding + head, one block's forward and backward (count 1), and its recomputation under selective and
        full checkpointing. Full recomputes the whole forward in the backward phase (as ``block_ops`` builds it), so
        one graph serves all three modes."""
        selective = TrainingConfig(cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.parallelism, "selective")
        fwd, bwd, recompute = block_ops(self.model, selective, 1, self.execution)
        ends = self._sum(embedding_ops(self.model, cfg) + head_ops(self.model, cfg, self.execution))
        full = self._sum(fwd, phase="bwd", useful=False)  # block_ops renames the forward ops into the bwd phase
        return ends, self._sum(fwd), self._sum(bwd), self._sum(recompute), full

    def _optimizer(self, cfg: TrainingConfig) -> tuple[float, float]:
        """(time, FLOPs) of the AdamW update over the local parameters (they depend on the parallelism only), plus
        the reference job's once-per-step ops (FSDP2 copies, the sparse table update) when ``execution`` is set."""
        key = (cfg.parallelism, cfg.micro_batch, cfg.grad_accumulation) if self.execution else cfg.parallelism
        hit = self._optimizers.get(key)
        if hit is None:
            op = _optimizer_op(self.model, cfg)
            step_ops = _step_ops(self.model, cfg, self.execution)
            time_s = op_time(op, self.gpu, self.constants).time_s + sum(
                op_time(o, self.gpu, self.constants).time_s * o.count for o in step_ops)
            flops = op.flops + sum(o.flops * o.count for o in step_ops)
            hit = self._optimizers[key] = (time_s, flops)
        return hit

    def _embedding_windows(self, cfg: TrainingConfig) -> tuple[float, float]:
        """(forward, backward) seconds of a transformer's embedding per micro-batch: the compute beside the first
        block's FSDP collectives (``predict``'s windows, ``workbench.perf.overlap``); (0, 0) for other models."""
        if not isinstance(self.model, TransformerModel):
            return 0.0, 0.0
        key = (cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.parallelism.tp)
        hit = self._embedding.get(key)
        if hit is None:
            ops = embedding_ops(self.model, cfg)
            hit = self._embedding[key] = (self._sum([o for o in ops if o.phase == "fwd"]).total_s,
                                          self._sum([o for o in ops if o.phase == "bwd"]).total_s)
        return hit

    def _data_parallel_plan(self, cfg: TrainingConfig) -> DataParallelPlan:
        """``predict.data_parallel_plan``, cached by what it reads (not the micro-batch)."""
        key = (cfg.parallelism, cfg.grad_accumulation, activation_dtype(cfg.precision))
        hit = self._plans.get(key)
        if hit is None:
            hit = self._plans[key] = data_parallel_plan(self.model, cfg, self.gpu, self.constants)
        return hit

    def evaluate(self, cfg: TrainingConfig, *, check_memory_first: bool = False) -> Candidate:
        """Predicted step of ``cfg`` (already ``resolved`` for the model; precision native on the GPU)."""
        memory = memory_breakdown(self.model, cfg, self.gpu)
        if check_memory_first and not memory.fits:
            return Candidate(cfg, math.inf, 0.0, 0.0, 0.0, memory.total / GB, 0.0, False)
        p = cfg.parallelism
        accum = cfg.grad_accumulation
        mb = self.microbatch_cost(cfg)
        optimizer_s, optimizer_flops = self._optimizer(cfg)
        fwd_s, bwd_s = self._embedding_windows(cfg)
        comms = _communication(self.model, cfg, self.gpu, self.constants, accum * mb.total_s,
                               embedding_fwd_s=fwd_s, embedding_bwd_s=bwd_s, plan=self._data_parallel_plan(cfg))
        comm_s = sum(c.exposed_s for c in comms)
        bubble_s = (p.pp - 1) * mb.total_s if p.pp > 1 else 0.0
        step = accum * mb.compute_s + accum * mb.memory_s + optimizer_s + bubble_s + comm_s
        samples = cfg.samples_per_step
        if isinstance(self.model, TransformerModel):
            if cfg.seq_len not in self._flops_per_sample:
                self._flops_per_sample[cfg.seq_len] = model_flops_per_sample(self.model, cfg.seq_len)
            model_flops = self._flops_per_sample[cfg.seq_len] * samples
            tokens = samples * cfg.seq_len
        else:
            model_flops = (mb.useful_flops * accum + optimizer_flops) * p.gpus  # as predict(): optimizer included
            tokens = samples * (cfg.seq_len if self.model.kind == "hstu" else 1)
        peak = self._peaks.get(cfg.precision)
        if peak is None:
            peak = self._peaks[cfg.precision] = self.gpu.peak_tflops(
                resolve_precision(self.gpu, cfg.precision).effective.peak_key) * 1e12
        return Candidate(cfg, step, tokens / step, samples / step, model_flops / (step * p.gpus * peak),
                         memory.total / GB, comm_s, memory.fits)


@dataclass
class SearchResult:
    """Every candidate evaluated; ``ranked`` holds the feasible ones, fastest first."""

    model: Model
    gpu: GPU
    gpus: int
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def ranked(self) -> list[Candidate]:
        return sorted((c for c in self.candidates if c.fits), key=lambda c: -c.tokens_per_s)

    @property
    def best(self) -> Candidate:
        ranked = self.ranked
        if not ranked:
            raise WorkbenchError(f"no configuration of {self.model.name} fits {self.gpus} x {self.gpu.display_name} "
                                 f"(tried {len(self.candidates)}); use more GPUs or a larger-memory GPU")
        return ranked[0]

    def pareto(self) -> list[Candidate]:
        """Feasible candidates no other beats on both throughput and peak memory, by rising memory."""
        front: list[Candidate] = []
        for c in sorted((c for c in self.candidates if c.fits), key=lambda c: (c.peak_memory_gb, -c.tokens_per_s)):
            if not front or c.tokens_per_s > front[-1].tokens_per_s:
                front.append(c)
        return front

    def as_frame(self, feasible_only: bool = True) -> pd.DataFrame:
        """One row per candidate (ranked when ``feasible_only``), with a ``pareto`` column for the UI."""
        import pandas as pd

        front = {id(c) for c in self.pareto()}
        rows = self.ranked if feasible_only else self.candidates
        return pd.DataFrame([{**c.as_row(), "pareto": id(c) in front} for c in rows])


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def layouts(model: Model, gpu: GPU, gpus: int) -> list[Parallelism]:
    """Valid (dp, tp, pp, ep) splits of ``gpus`` (fsdp sharding): tp inside the scale-up domain."""
    if not isinstance(model, TransformerModel):
        return [Parallelism(dp=gpus)]
    out = []
    domain = int(gpu.scale_up_domain_gpus.value)
    for tp in _divisors(gpus):
        if tp > domain:
            continue
        for pp in _divisors(gpus // tp):
            dp = gpus // (tp * pp)
            for ep in (_divisors(dp) if model.is_moe else [1]):
                p = Parallelism(dp=dp, tp=tp, pp=pp, ep=ep)
                try:
                    TrainingConfig(1, parallelism=p).resolved(model)
                except SpecError:
                    continue
                out.append(p)
    return out


def search(
    model: str | Model,
    gpu: str | GPU,
    gpus: int,
    *,
    precision: str = "bf16",
    precisions: Sequence[str] | None = None,
    seq_len: int = 0,
    global_batch: int = 0,
    checkpointing: Sequence[str] = CHECKPOINTING,
    shardings: Sequence[str] = ("fsdp", "ddp"),
    calibrated: bool = False,
    evaluator: FastEvaluator | None = None,
    execution: Execution | None = None,
) -> SearchResult:
    """Enumerate and predict every configuration; ``global_batch`` (samples) fixed, or 0 for no accumulation.
    ``execution`` predicts the reference job (see ``predict``); ignored when ``evaluator`` is given."""
    model = get_model(model)
    gpu = get_gpu(gpu)
    _check_count("gpus", gpus, 1, MAX_GPUS)
    _check_count("seq_len", seq_len, 0, MAX_SEQ_LEN, "0: the model's default")
    _check_count("global_batch", global_batch, 0, MAX_GLOBAL_BATCH, "0: micro-batch x dp")
    ev = evaluator or FastEvaluator(model, gpu, calibrated=calibrated, execution=execution)
    result = SearchResult(model, gpu, gpus)
    seq = seq_len or default_seq_len(model)
    ac_modes = tuple(checkpointing) if isinstance(model, TransformerModel) else ("none",)
    if not isinstance(model, TransformerModel):
        shardings = ("ddp",)  # recommendation models: dense layers replicate, tables row-shard (workbench.memory)
    for prec in precisions or (precision,):
        resolve_precision(gpu, prec)  # an unsupported precision fails here, naming what the GPU runs
        for base in layouts(model, gpu, gpus):
            for sharding in shardings:
                p = Parallelism(dp=base.dp, tp=base.tp, pp=base.pp, ep=base.ep, sharding=sharding)
                if sharding == "ddp" and p.dp == 1 and "fsdp" in shardings:
                    continue  # one data-parallel rank: ddp and fsdp are the same run
                for ac in ac_modes:
                    _climb(ev, result, model, p, prec, seq, ac, global_batch)
    if not global_batch:
        _fill_memory(ev, result, model)
    return result


def _check_count(name: str, value: object, minimum: int, maximum: int, zero: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        low = "a positive integer" if minimum else "a non-negative integer"
        raise SpecError("search", name, value, f"{low} up to {maximum:,}{f' ({zero})' if zero else ''}")


def _climb(ev: FastEvaluator, result: SearchResult, model: Model, p: Parallelism, precision: str, seq: int,
           ac: str, global_batch: int) -> None:
    """Micro-batches 1, 2, 4, ... until memory no longer fits (memory grows with the micro-batch)."""
    mb = 1
    while mb <= MAX_MICRO_BATCH[model.kind]:
        if global_batch and global_batch % (mb * p.dp):
            if mb * p.dp > global_batch:
                return
            mb *= 2
            continue
        candidate = ev.evaluate(TrainingConfig(mb, seq, precision, p, ac, global_batch), check_memory_first=True)
        result.candidates.append(candidate)
        if not candidate.fits:
            return
        mb *= 2


def _fill_memory(ev: FastEvaluator, result: SearchResult, model: Model) -> None:
    """For the FILL_TOP fastest settings (layout, sharding, checkpointing, precision) whose power-of-two climb
    stopped at memory, add the largest micro-batch that fits (bisected on the memory model alone): it fills HBM.
    Only the leaders get one, since each new micro-batch costs a new op graph."""
    largest: dict[tuple, int] = {}
    stopped: set[tuple] = set()
    for c in result.candidates:
        key = (c.config.precision, c.config.parallelism, c.config.activation_checkpointing)
        if c.fits:
            largest[key] = max(largest.get(key, 0), c.config.micro_batch)
        else:
            stopped.add(key)
    leaders: list[tuple] = []
    for c in result.ranked:
        key = (c.config.precision, c.config.parallelism, c.config.activation_checkpointing)
        if key in stopped and key not in leaders and c.config.micro_batch == largest[key]:
            leaders.append(key)
        if len(leaders) == FILL_TOP:
            break
    for precision, p, ac in leaders:
        seq = result.ranked[0].config.seq_len
        low, high = largest[(precision, p, ac)], 2 * largest[(precision, p, ac)]  # fits at low, not at high
        while high - low > 1:
            mid = (low + high) // 2
            fits = memory_breakdown(model, TrainingConfig(mid, seq, precision, p, ac), ev.gpu).fits
            low, high = (mid, high) if fits else (low, mid)
        if low > largest[(precision, p, ac)]:
            result.candidates.append(ev.evaluate(TrainingConfig(low, seq, precision, p, ac)))
