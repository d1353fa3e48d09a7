"""Search: every configuration of one training run of a model on N GPUs of one type, predicted and ranked.

A global batch (samples per optimizer step) is a training decision, not a performance knob, so the search holds it
fixed: the one the caller gives, else ``default_global_batch`` (the model's standard, a rule that depends on the
model, the GPU count and the sequence length only). It varies only what leaves the training run the same: the
micro-batch with gradient accumulation (micro-batch x dp x accumulation == global batch exactly; a micro-batch that
does not divide ``global batch / dp`` is never tried), activation checkpointing, FSDP vs DDP, tensor-parallel degree
(inside the scale-up domain), pipeline degree, expert-parallel degree for MoE models, and precisions when asked. A
candidate is feasible when its peak memory fits HBM with the memory model's headroom
(``workbench.memory.HEADROOM_FRACTION``).

``SearchResult.best`` is not simply the fastest: every feasible candidate within ``STEP_TIME_UNCERTAINTY`` of the
fastest is a tie the model cannot break, and among those the simplest wins (``simplicity_key``).

``stack`` names what will run the recipe (``workbench.stacks``; None: the model family's default,
``workbench.stacks.default_stack``: ``torchtitan`` for a transformer, the ``ideal`` fused-step bound for DLRM and
HSTU; ``ideal`` by name for the bound), every candidate priced by ``StepEvaluator``, which asks the step-model
pipeline ``predict`` runs (``workbench.step.StepModel.summary``) -- the search has no step arithmetic of its own --
and, where the stack follows the recipe's compile flag, tries the step eager and compiled. A candidate outside the
stack's kernel tables is priced as the bound (``Candidate.priced_as_bound``) and is recommended only when no
covered candidate fits: an optimistic bound must not beat a priced step. The pipeline's caches make a candidate cheap: op times are memoized
per op shape, a transformer's blocks are copies of one block priced once, and the optimizer, data-parallel plan and
largest micro-batch are cached by what they read.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from workbench.config import (
    CHECKPOINTING,
    DEFAULT_LORA_TARGETS,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ_LEN,
    Parallelism,
    TrainingConfig,
    default_seq_len,
)
from workbench.errors import SpecError, WorkbenchError
from workbench.families import family_of
from workbench.graph.execution import Execution
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB
from workbench.models import Model, get_model
from workbench.precision import resolve_precision
from workbench.recipe.schema import SHARDINGS as RECIPE_SHARDINGS
from workbench.stacks import BOUND_STACK, Stack, default_stack, get_stack
from workbench.step import StepModel

if TYPE_CHECKING:
    import pandas as pd

STEP_TIME_UNCERTAINTY = 0.05
"""Relative uncertainty of a predicted step time, and so of a ratio of two (a throughput gain): candidates within it
of the fastest are ties the model cannot order. Source: the H200 stacks evaluation
(``benchmarks/results/h200/stacks/EVALUATION.md``: step MAPE 3.8% over 19 test and held-out runs of plain PyTorch
and torchtitan, worst 6.8%, all within 8%) and the reference job's (``benchmarks/results/h200/train/job_model_run/
REPORT.md``: 11 of 11 runs within 10%). 5% is a round figure just above that MAPE, a judgement; the default
search ranks the fused step (no stack), whose absolute error is larger, but it is shared by candidates of one
model on one GPU and largely cancels in their ratio (the default search ranks torchtitan's step for a
transformer, the fused step for DLRM and HSTU). Re-derive it from a new evaluation, not by taste."""
CHECKPOINTING_ORDER = {mode: rank for rank, mode in enumerate(CHECKPOINTING)}
"""Simplest first: no recomputation, then the saved-matmul policy, then the whole forward again."""
IDEAL = BOUND_STACK
"""The fused-step bound (``workbench.stacks``): what the search ranks when ``stack="ideal"`` is named, or when none
is and the model's family has no stack of its own (DLRM, HSTU)."""


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
    compile: bool = True
    """The recipe's compile flag. The fused step is the compiled step; a stack that follows the flag is priced
    with it (``StepEvaluator``)."""
    stack: str = IDEAL
    """The stack the candidate was priced for."""
    priced_as_bound: bool = True
    """The fused-step bound: the ``ideal`` stack, or a configuration outside the named stack's kernel tables."""

    def as_row(self) -> dict:
        c, p = self.config, self.config.parallelism
        return {"precision": c.precision, "micro_batch": c.micro_batch, "global_batch": c.samples_per_step,
                "grad_accumulation": c.grad_accumulation, "activation_checkpointing": c.activation_checkpointing,
                "compile": self.compile, "stack": self.stack, "priced_as_bound": self.priced_as_bound,
                "sharding": p.sharding, "dp": p.dp, "tp": p.tp, "pp": p.pp, "ep": p.ep,
                "step_time_ms": self.step_time_s * 1e3, "tokens_per_s": self.tokens_per_s,
                "samples_per_s": self.samples_per_s, "mfu": self.mfu, "peak_memory_gb": self.peak_memory_gb,
                "communication_ms": self.communication_s * 1e3, "fits": self.fits}


class StepEvaluator:
    """Candidates for many configurations of one model on one GPU type as one stack runs them: each is
    ``workbench.step.StepModel.summary``, the pipeline ``predict`` runs (its caches -- op times, one block's ops,
    optimizer, data-parallel plans -- shared by every candidate), so a candidate's numbers are ``predict``'s exactly.
    ``stack`` None is the model's default, as ``predict``'s (``workbench.stacks.default_stack``); ``execution`` the
    reference job's (``predict(execution=)``, the ``workbench-job`` stack)."""

    def __init__(self, model: str | Model, gpu: str | GPU, stack: str | Stack | None = None, *,
                 calibrated: bool = False, execution: Execution | None = None, param_dtype: str | None = None):
        if stack is None and execution is None:
            stack = default_stack(get_model(model))  # predict's default, so a candidate is predict()'s step
        self.step = StepModel(model, gpu, stack=stack, calibrated=calibrated, execution=execution)
        self.model = self.step.model
        self.gpu = self.step.gpu
        self.execution = execution
        named = self.step.stack
        self.param_dtype = named.param_dtype(param_dtype)
        """The parameter dtype every candidate is priced at (checked against the stack's; None: its default)."""
        self.stack = named.name
        if execution is not None:
            options: tuple[bool, ...] = (execution.compile,)
        elif named.kernels == "fused":
            options = (True,)
        elif named.compile == "recipe":
            options = (False, True)
        else:
            options = (named.compiled(True),)
        self.compile_options = options
        """The compile flags tried: the fused step is the compiled step; the reference job's execution carries its
        flag; a stack that follows the recipe's flag is tried eager and compiled; else the one way it runs."""
        self._layouts: dict[Parallelism, Parallelism] = {}
        """``layout``'s canonical objects, by value."""

    def layout(self, p: Parallelism) -> Parallelism:
        """The evaluator's one object equal to ``p`` (``p`` itself the first time). The step model keys its
        data-parallel plans and optimizer, and ``workbench.memory`` a transformer's layout terms, by the layout
        object's id (``StepModel._planned``): every search makes its layouts anew, so without this a warm search
        (the same evaluator again) missed all of those caches and re-planned every layout, and each search left
        another set of entries behind. One hash of a ``Parallelism`` per layout and search, not per candidate."""
        return self._layouts.setdefault(p, p)

    def evaluate(self, cfg: TrainingConfig, *, check_memory_first: bool = False, compile: bool = True) -> Candidate:
        """The predicted step of ``cfg`` (resolved for the model; precision native on the GPU) with ``compile``;
        ``check_memory_first``: a configuration that does not fit gets its memory only (no step time)."""
        if check_memory_first:  # memory, and the step only if it fits, with one look-up of the stack's tables
            memory, s, bound = self.step.candidate(cfg, compile=compile, param_dtype=self.param_dtype)
            if s is None:
                return _candidate(cfg, math.inf, 0.0, 0.0, 0.0, memory.total / GB, 0.0, False, compile, self.stack,
                                  bound)
        else:
            s = self.step.summary(cfg, compile=compile, param_dtype=self.param_dtype, max_micro_batch=False)
        return _candidate(cfg, s.step_time_s, s.tokens_per_s, s.samples_per_s, s.mfu, s.memory.total / GB,
                          s.communication_s, s.memory.fits, compile, self.stack, s.priced_as_bound)


def _candidate(config: TrainingConfig, step_time_s: float, tokens_per_s: float, samples_per_s: float, mfu: float,
               peak_memory_gb: float, communication_s: float, fits: bool, compile: bool, stack: str,
               priced_as_bound: bool) -> Candidate:
    """``Candidate(...)`` of these fields without the frozen dataclass's ``__init__`` (one per candidate; __init__
    took ~5 us of a cold candidate's ~150): an equal candidate, with the same ``repr``."""
    candidate = object.__new__(Candidate)
    candidate.__dict__.update(config=config, step_time_s=step_time_s, tokens_per_s=tokens_per_s,
                              samples_per_s=samples_per_s, mfu=mfu, peak_memory_gb=peak_memory_gb,
                              communication_s=communication_s, fits=fits, compile=compile, stack=stack,
                              priced_as_bound=priced_as_bound)
    return candidate


FastEvaluator = StepEvaluator
"""The evaluator's former name (``workbench.recipe`` exports it)."""


def simplicity_key(candidate: Candidate, precisions: Sequence[str] = ()) -> tuple:
    """How ``SearchResult.best`` orders candidates the model cannot tell apart (within ``STEP_TIME_UNCERTAINTY``
    of the fastest), simplest first; each criterion only breaks ties of the ones before it:

    1. the precision listed first in ``precisions`` (the caller's own order: bf16 before fp8 in ``bf16,fp8``);
    2. fewer model-parallel dimensions in use (of tp, pp, ep, those > 1), then a smaller tp x pp x ep (more plain
       data parallelism);
    3. activation checkpointing none, then selective, then full (``CHECKPOINTING_ORDER``: less recomputation);
    4. eager before compiled (no compilation at start-up, one thing less to go wrong) -- only a stack that
       follows the compile flag has both;
    5. fewer gradient-accumulation steps (a larger micro-batch);
    6. less peak memory (FSDP before DDP at the same layout);
    7. faster.

    Simpler settings come before memory because every candidate here already fits with the memory model's
    headroom; memory decides between settings that are otherwise the same.
    """
    c, p = candidate.config, candidate.config.parallelism
    order = list(precisions)
    return (order.index(c.precision) if c.precision in order else len(order),
            sum(degree > 1 for degree in (p.tp, p.pp, p.ep)), p.tp * p.pp * p.ep,
            CHECKPOINTING_ORDER[c.activation_checkpointing], candidate.compile, c.grad_accumulation,
            candidate.peak_memory_gb, -candidate.tokens_per_s)


@dataclass
class SearchResult:
    """Every candidate evaluated, all at one global batch; ``ranked`` holds the feasible ones, fastest first, and
    ``best`` the simplest of those within the model's uncertainty of the fastest."""

    model: Model
    gpu: GPU
    gpus: int
    candidates: list[Candidate] = field(default_factory=list)
    global_batch: int = 0
    """Samples per optimizer step, the same for every candidate (0 in a result built by hand: not recorded)."""
    precisions: tuple[str, ...] = ()
    """The precisions searched, in the caller's order (``simplicity_key`` prefers the first)."""
    stack: str = IDEAL
    """The stack every candidate was priced for."""

    @property
    def ranked(self) -> list[Candidate]:
        """Feasible candidates, fastest first. For a named stack, those its tables price come first: a candidate
        priced as the fused-step bound (outside the tables) is ranked after them, since its number is optimistic."""
        return sorted((c for c in self.candidates if c.fits), key=lambda c: (self._unpriced(c), -c.tokens_per_s))

    def _unpriced(self, c: Candidate) -> bool:
        return self.stack != IDEAL and c.priced_as_bound

    @property
    def fastest(self) -> Candidate:
        """The feasible candidate with the highest predicted throughput."""
        ranked = self.ranked
        return ranked[0] if ranked else self.best  # ``best`` raises the reason

    def within_uncertainty(self) -> list[Candidate]:
        """Feasible candidates whose predicted throughput is within ``STEP_TIME_UNCERTAINTY`` of the fastest's
        (all hold the same global batch, so this is the same as step time), fastest first."""
        ranked = self.ranked
        if not ranked:
            return []
        floor = ranked[0].tokens_per_s / (1 + STEP_TIME_UNCERTAINTY)
        return [c for c in ranked if c.tokens_per_s >= floor and self._unpriced(c) == self._unpriced(ranked[0])]

    @property
    def best(self) -> Candidate:
        """The recommended candidate: the simplest (``simplicity_key``) of those within the model's uncertainty of
        the fastest."""
        tied = self.within_uncertainty()
        if not tied:
            why = "use more GPUs or a larger-memory GPU"
            if not self.candidates and self.global_batch:
                why = (f"no layout's data-parallel degree divides the global batch {self.global_batch}: give a "
                       f"multiple of the GPU count")
            raise WorkbenchError(f"no configuration of {self.model.name} fits {self.gpus} x {self.gpu.display_name} "
                                 f"at global batch {self.global_batch} (tried {len(self.candidates)}); {why}")
        return min(tied, key=lambda c: simplicity_key(c, self.precisions))

    def pareto(self) -> list[Candidate]:
        """Feasible candidates no other beats on both throughput and peak memory, by rising memory."""
        front: list[Candidate] = []
        for c in sorted((c for c in self.candidates if c.fits), key=lambda c: (c.peak_memory_gb, -c.tokens_per_s)):
            if not front or c.tokens_per_s > front[-1].tokens_per_s:
                front.append(c)
        return front

    def as_frame(self, feasible_only: bool = True) -> pd.DataFrame:
        """One row per candidate (ranked when ``feasible_only``), with ``pareto``, ``within_uncertainty`` (a tie
        with the fastest, ``STEP_TIME_UNCERTAINTY``) and ``recommended`` (``best``) columns for the UI."""
        import pandas as pd

        front = {id(c) for c in self.pareto()}
        tied = {id(c) for c in self.within_uncertainty()}
        best = id(self.best) if tied else None
        rows = self.ranked if feasible_only else self.candidates
        return pd.DataFrame([{**c.as_row(), "pareto": id(c) in front, "within_uncertainty": id(c) in tied,
                              "recommended": id(c) == best} for c in rows])


    def table(self, top: int = 5, name: str = "") -> str:
        """The CLI's text: the ``top`` fastest feasible candidates (and the recommended one if it ranks lower),
        marking those within ``STEP_TIME_UNCERTAINTY`` of the fastest and the recommended one, and the rule."""
        import pandas as pd

        ranked = self.as_frame()
        frame = ranked.head(top)
        if len(ranked) and not frame["recommended"].any():  # the recommended one ranks lower: show it too
            frame = pd.concat([frame, ranked[ranked["recommended"]]])
        within = f"within {STEP_TIME_UNCERTAINTY:.0%}"
        priced = (f"predicted for the {self.stack} stack" if self.stack != IDEAL
                  else "predicted as the ideal fused step (a bound; --stack prices a real one)")
        lines = [f"{len(self.candidates)} configurations of {name or self.model.name} on {self.gpus} x {self.gpu.name} "
                 f"at global batch {self.global_batch}, {priced}, {len(self.ranked)} fit; the fastest "
                 f"{min(top, len(ranked))}{' and the recommended one' if len(frame) > top else ''}:"]
        if len(frame):
            columns = {"precision": "precision", "micro_batch": "micro_batch", "grad_accumulation": "accumulation",
                       "activation_checkpointing": "activation_checkpointing", "compile": "compile",
                       "sharding": "sharding", "dp": "dp", "tp": "tp", "pp": "pp", "ep": "ep",
                       "step_time_ms": "step_time_ms", "tokens_per_s": "tokens_per_s", "mfu": "mfu",
                       "peak_memory_gb": "peak_memory_gb", "within_uncertainty": within, "recommended": "recommended"}
            if self.stack == IDEAL:
                del columns["compile"]  # the fused step is the compiled step
            shown = frame[list(columns)].rename(columns=columns)
            if self.stack != IDEAL:
                shown["compile"] = shown["compile"].map({True: "yes", False: "no"})
                shown["priced"] = frame["priced_as_bound"].map({True: "as the bound", False: "stack"}).values
            shown[within] = shown[within].map({True: "yes", False: ""})
            shown["recommended"] = shown["recommended"].map({True: "<-", False: ""})
            lines.append(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
            lines.append(f"{len(self.within_uncertainty())} are {within} of the fastest (the model's step-time "
                         f"uncertainty), a tie it cannot order; recommended: the simplest of them (the precision "
                         f"listed first, fewer of tp/pp/ep > 1, checkpointing none < selective < full, "
                         f"{'eager < compiled, ' if self.stack != IDEAL else ''}less accumulation, less memory, then "
                         f"faster)")
            bound = sum(c.priced_as_bound for c in self.ranked) if self.stack != IDEAL else 0
            if bound:
                lines.append(f"{bound} fitting configurations are outside the {self.stack} stack's kernel tables and "
                             f"priced as the fused-step bound (optimistic): ranked after the priced ones, recommended "
                             f"only if nothing else fits")
        return "\n".join(lines)


def default_global_batch(model: str | Model, gpus: int, seq_len: int = 0) -> int:
    """The global batch (samples per optimizer step) ``search`` holds when none is given: the model's standard, as
    a whole power of two per GPU. The standard is the family's (``Family.standard_global_batch``): a
    recommendation model's ``default_batch`` from the catalog (DLRM 65,536, MLPerf's; HSTU 64, a representative
    guess), a transformer's 4M tokens (``TransformerFamily.standard_tokens_per_step``) / ``seq_len`` (0: the
    model's default). Global batch = ``gpus`` x the power of two nearest the standard / ``gpus``
    (at least 1): every data-parallel degree divides it and powers-of-two micro-batches divide its per-rank share.
    It depends on the model, GPU count and sequence length only, never on a candidate. Llama 3 8B at 8,192 tokens:
    512 on 1, 2, 4, ..., 512 GPUs, 384 on 6 (64 each), 1,024 on 1,024 (one sequence each)."""
    model = get_model(model)
    seq = seq_len or default_seq_len(model)
    per_gpu = family_of(model).standard_global_batch(model, seq) / gpus
    return gpus * (1 << max(0, round(math.log2(per_gpu)))) if per_gpu > 1 else gpus


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def layouts(model: Model, gpu: GPU, gpus: int) -> list[Parallelism]:
    """Valid (dp, tp, pp, ep) splits of ``gpus`` (fsdp sharding, or the family's first if it has no fsdp): tp
    inside the scale-up domain, each degree only where the model's family lets it exceed 1
    (``Family.parallelisms``)."""
    family = family_of(model)
    offered = family.parallelisms(model)
    sharding = "fsdp" if "fsdp" in family.shardings else family.shardings[0]

    def degrees(name: str, n: int) -> list[int]:
        return _divisors(n) if name in offered else [1]

    out = []
    domain = int(gpu.scale_up_domain_gpus.value)
    for tp in degrees("tp", gpus):
        if tp > domain:
            continue
        for pp in degrees("pp", gpus // tp):
            dp = gpus // (tp * pp)
            for ep in degrees("ep", dp):
                p = Parallelism(dp=dp, tp=tp, pp=pp, ep=ep, sharding=sharding)  # type: ignore[arg-type]
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
    shardings: Sequence[str] = RECIPE_SHARDINGS,
    calibrated: bool = False,
    evaluator: StepEvaluator | None = None,
    execution: Execution | None = None,
    stack: str | Stack | None = None,
    param_dtype: str | None = None,
    parallelisms: Sequence[Parallelism] | None = None,
    lora_rank: int = 0,
    lora_targets: Sequence[str] = DEFAULT_LORA_TARGETS,
) -> SearchResult:
    """Enumerate and predict every configuration at one global batch: ``global_batch`` samples per step, or 0 for
    ``default_global_batch`` (the model's standard: 4M tokens for a transformer, the catalog's ``default_batch``
    for a recommendation model, as a power of two per GPU). Every candidate has exactly that global batch
    (micro-batch x dp x accumulation); layouts whose dp does not divide it are skipped. ``execution`` predicts the
    reference job (see ``predict``); ``stack`` prices every candidate as that stack runs it (``StepEvaluator``;
    None: the model's default stack, as ``predict``'s; ``ideal``: the fused step) at ``param_dtype`` (None: the
    stack's default); these three are ignored when
    ``evaluator`` is given. ``parallelisms``: the layouts to try (each splits ``gpus``, with its cp, ep and virtual
    stages; the sharding comes from ``shardings``), None for every layout ``layouts`` gives. ``lora_rank`` > 0
    searches LoRA fine-tuning with adapters on ``lora_targets`` (``TrainingConfig.lora_rank``), 0 full training."""
    model = get_model(model)
    gpu = get_gpu(gpu)
    _check_count("gpus", gpus, 1, MAX_GPUS)
    _check_count("seq_len", seq_len, 0, MAX_SEQ_LEN, "0: the model's default")
    _check_count("global_batch", global_batch, 0, MAX_GLOBAL_BATCH, "0: the model's standard, default_global_batch")
    if evaluator is not None:
        ev = evaluator
    else:
        if execution is not None and stack is not None and get_stack(stack).name != IDEAL:
            raise SpecError("search", "stack", get_stack(stack).name, "no stack with execution= (the reference job's "
                            "execution is the workbench-job stack: pass stack='workbench-job' alone)")
        named = None if execution is not None else stack  # with execution: the workbench-job stack
        ev = StepEvaluator(model, gpu, named, calibrated=calibrated, execution=execution, param_dtype=param_dtype)
    seq = seq_len or default_seq_len(model)
    global_batch = global_batch or default_global_batch(model, gpus, seq)
    searched = tuple(precisions or (precision,))
    result = SearchResult(model, gpu, gpus, global_batch=global_batch, precisions=searched, stack=ev.stack)
    family = family_of(model)
    ac_modes = tuple(checkpointing) if family.checkpoints_activations else ("none",)
    tried = family.searched_shardings(model, tuple(shardings))
    if not tried:
        raise SpecError("search", "shardings", list(shardings), f"one or more of {', '.join(family.shardings)} "
                        f"({family.name} models)")
    limit = family.max_micro_batch
    lora = {"lora_rank": lora_rank, "lora_targets": tuple(lora_targets)} if lora_rank else {}
    refused: SpecError | None = None
    with _cyclic_gc_paused():
        for prec in searched:
            resolve_precision(gpu, prec)  # an unsupported precision fails here, naming what the GPU runs
            for base in layouts(model, gpu, gpus) if parallelisms is None else parallelisms:
                if global_batch % base.dp:
                    continue  # no micro-batch and accumulation give this global batch on this many ranks
                micro_batches = [mb for mb in _divisors_cached(global_batch // base.dp) if mb <= limit]
                for sharding in tried:
                    p = ev.layout(replace(base, sharding=sharding))  # one object per layout: id-keyed caches
                    if sharding == "ddp" and p.weight_replicas == 1 and "fsdp" in tried:
                        continue  # one data-parallel rank: ddp and fsdp are the same run
                    if lora:  # LoRA is not modelled under every sharding (fsdp over frozen weights)
                        try:
                            TrainingConfig(1, seq, parallelism=p, **lora).resolved(model)
                        except SpecError as exc:
                            refused = exc
                            continue
                    for ac in ac_modes:
                        for compiled in ev.compile_options:
                            _climb(ev, result, micro_batches, p, prec, seq, ac, global_batch, compiled, lora)
    if refused is not None and not result.candidates:
        raise refused  # the core's reason no layout takes this LoRA fine-tuning
    return result


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Python's cyclic garbage collector off while a search runs, back as it was after it (reference counting
    frees as always). A cold search makes some 10^5 long-lived objects (ops, priced pieces, cached parts): each
    allocation burst started a collection that walked them all again (8% of a cold search's instructions on the
    8B torchtitan case, callgrind), and none of them is garbage. After the search they move to the oldest
    generation unwalked (``gc.freeze`` then ``gc.unfreeze``: two list splices): left in the youngest, the first
    allocation after the search walked them all once more (a fifth of the 8B case's time); cycles made meanwhile
    are collected by the next full collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # every tracked object to the permanent generation,
        gc.unfreeze()  # and back, into the oldest
        if enabled:
            gc.enable()


def _check_count(name: str, value: object, minimum: int, maximum: int, zero: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        low = "a positive integer" if minimum else "a non-negative integer"
        raise SpecError("search", name, value, f"{low} up to {maximum:,}{f' ({zero})' if zero else ''}")


@functools.lru_cache(maxsize=256)
def _divisors_cached(n: int) -> tuple[int, ...]:
    return tuple(_divisors(n))


def _climb(ev: StepEvaluator, result: SearchResult, micro_batches: Sequence[int], p: Parallelism,
           precision: str, seq: int, ac: str, global_batch: int, compile: bool = True,
           lora: dict | None = None) -> None:
    """The micro-batches that divide the per-rank batch, smallest first, until memory no longer fits (memory grows
    with the micro-batch); accumulation makes up the rest of ``global_batch``. ``lora``: the LoRA fields of
    ``TrainingConfig``, none for full training."""
    for mb in micro_batches:
        candidate = ev.evaluate(TrainingConfig(mb, seq, precision, p, ac, global_batch, **(lora or {})),
                                check_memory_first=True, compile=compile)
        result.candidates.append(candidate)
        if not candidate.fits:
            return
