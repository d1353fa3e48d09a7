"""Priced op lists and the step's running sums over them (``workbench.step.StepModel``).

``workbench.step`` sums each field of the priced ops (compute-bound seconds, memory-bound seconds, FLOPs, ...) left
to right over the micro-batch's parts, each term seconds x executions, so that every path gives the same bits. A
part's additions depend on the sums before it, so they cannot be made once per part; but the graphs of one recipe
search begin alike (the checkpointing modes differ only in their recomputed blocks, the shardings not at all), so
the sums after each prefix of parts are kept and a prefix two graphs share is added once.

(A running sum over a part is a plain loop: ``functools.reduce`` over ``map`` makes the same additions, but costs
more than it saves on a part's ~10 ops, most of its sums over 0-3 of them.)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.graph.ops import Op, replace_op
from workbench.graph.recomputed import PREFIX, RecomputedPiece
from workbench.perf import OpTime
from workbench.step_result import OpPrediction

Column = tuple[tuple[float, int], ...]
"""(value, count) of each op that enters one sum: seconds (or FLOPs) per execution, executions per copy."""

PREFIX_LIMIT = 50_000
"""Prefixes kept before the memo starts over (a long-lived step model: the widget's)."""


# ------------------------------------------------------------------------------------------ priced op lists
@dataclass(frozen=True)
class PricedOps:
    """Ops priced once, with what the step sums of them: (seconds per execution, count) pairs filtered as the
    summary sums them. ``counts`` are the ops' counts on the busiest stage (a block op's count x its layers)."""

    ops: tuple[Op, ...]
    counts: tuple[int, ...]
    times: tuple[OpTime, ...]
    bounds: tuple[str, ...]
    """The bound reported per op (the fused step's optimizer: memory)."""
    compute: Column
    """Compute-bound ops outside the optimizer phase."""
    memory: Column
    optimizer: Column
    embedding_fwd: Column
    embedding_bwd: Column
    attention: Column
    pairs: Column
    """Every op."""
    summed: tuple[tuple[int, Column], ...]
    """(place in ``SUMMED``, column) of each of the columns above that the running sums walk and that holds a
    term, in ``SUMMED``'s order (``_summed``): the sums fetch a part's columns once, not field by field at each
    prefix of parts it ends, and skip its empty ones (a block's optimizer and embedding columns: ``part_sums``)."""

    @functools.cached_property
    def useful(self) -> Column:
        """(FLOPs, count) of every op but recomputation: made when first asked (only a family without model FLOPs
        of its own reads them, ``useful_flops``), not per op as the op is priced."""
        return tuple((op.flops, n) for op, n in zip(self.ops, self.counts) if not op.name.startswith(PREFIX))

    @staticmethod
    def priced(ops: Sequence[Op], times: dict, keys: Callable[[Sequence[Op]], Sequence],
               time: Callable[[Op], OpTime], fit, bound: str | None = None, power: float = 1.0) -> PricedOps:
        """``ops`` (each run ``op.count`` times) priced, in one pass sorting each into the sums it enters: an op's
        time is ``times[k]``, ``k`` its entry of ``keys(ops)``, made by ``time(op)`` on a miss (the memoized timer),
        then ``fit``'s (``profile_fit``; applied only where ``fit.applied``) and, for a compute-bound op, divided by
        ``power`` (the sustained tensor throughput under a power limit); its bound is ``bound``, or its time's."""
        keyed = keys(ops)
        ops = tuple(ops)
        compute, memory, optimizer, emb_fwd, emb_bwd, attention, pairs = [], [], [], [], [], [], []
        counts, priced, bounds = [], [], []
        scaled = fit.applied
        for op, k in zip(ops, keyed):  # the cold search's innermost loop
            t = times.get(k)
            if t is None:
                t = times[k] = time(op)
            if scaled:
                t = fit.op_time(op, t)
            if power != 1.0 and t.bound == "compute":
                t = dataclasses.replace(t, time_s=t.time_s / power)
            priced.append(t)
            b = bound or t.bound
            bounds.append(b)
            n = op.count
            counts.append(n)
            pair = (t.time_s, n)
            pairs.append(pair)
            phase = op.phase
            if phase == "optimizer":
                optimizer.append(pair)
            elif b == "compute":
                compute.append(pair)
            else:
                memory.append(pair)
            if op.layer == "embedding":
                if phase == "fwd":
                    emb_fwd.append(pair)
                elif phase == "bwd":
                    emb_bwd.append(pair)
            if op.kind == "attention":
                attention.append(pair)
        new = object.__new__(PricedOps)  # the fields set without the frozen __init__ (a cold search makes ~1,500)
        new.__dict__.update(ops=ops, counts=tuple(counts), times=tuple(priced), bounds=tuple(bounds),
                            compute=tuple(compute), memory=tuple(memory), optimizer=tuple(optimizer),
                            embedding_fwd=tuple(emb_fwd), embedding_bwd=tuple(emb_bwd), attention=tuple(attention),
                            pairs=tuple(pairs))
        new.__dict__["summed"] = _summed(new)
        return new

    @staticmethod
    def recomputed(ops: Sequence[Op], kept: Sequence[int], forward: PricedOps) -> PricedOps:
        """``priced`` of ``ops``, the recomputed copies of ``forward.ops[i]`` for ``i`` in ``kept``
        (``graph.recomputed.RecomputedPiece``: renamed ``recompute.*``, moved to the backward, nothing else
        changed), from ``forward``'s prices: a copy has its op's timer key, so ``priced`` gives it its op's time and
        bound (scaled by the same power; ``forward`` priced with the same ``fit``, one that is not applied, since
        an applied fit may read the name and phase, and the same ``bound``). Its sums are sorted as ``priced``
        sorts a backward, recomputed op: compute or memory by its bound, never the optimizer's or the useful
        FLOPs."""
        if len(ops) != len(kept):
            raise ValueError("a recomputed piece copies one forward op per kept index")
        ops = ops if isinstance(ops, RecomputedPiece) else tuple(ops)  # its copies stay unmade (graph.recomputed)
        times, bounds, pairs, copied = forward.times, forward.bounds, forward.pairs, forward.ops
        compute, memory, emb_bwd, attention, counts, priced, kept_bounds, kept_pairs = [], [], [], [], [], [], [], []
        for i in kept:
            op = copied[i]  # the copy's layer and kind are its op's
            pair = pairs[i]  # (time_s, op.count): the copy's count is its op's
            priced.append(times[i])
            b = bounds[i]
            kept_bounds.append(b)
            counts.append(pair[1])
            kept_pairs.append(pair)
            if b == "compute":
                compute.append(pair)
            else:
                memory.append(pair)
            if op.layer == "embedding":
                emb_bwd.append(pair)
            if op.kind == "attention":
                attention.append(pair)
        new = object.__new__(PricedOps)
        new.__dict__.update(ops=ops, counts=tuple(counts), times=tuple(priced), bounds=tuple(kept_bounds),
                            compute=tuple(compute), memory=tuple(memory), optimizer=(), embedding_fwd=(),
                            embedding_bwd=tuple(emb_bwd), attention=tuple(attention),
                            pairs=tuple(kept_pairs))
        new.__dict__["summed"] = _summed(new)
        return new

    def predictions(self, copies: int, executions_per_count: int) -> list[OpPrediction]:
        """One ``OpPrediction`` per op, its count x ``copies`` (a block's layers on the stage); executions = that
        count x ``executions_per_count`` (the micro-batches)."""
        return [OpPrediction(op if op.count == n * copies else replace_op(op, count=n * copies), t.time_s,
                             t.roofline_s, bound, n * copies * executions_per_count)
                for op, n, t, bound in zip(self.ops, self.counts, self.times, self.bounds)]


ACCUMULATED = ("compute", "memory", "optimizer")
"""``PricedOps``' sums that count every micro-batch (x accumulation). The useful FLOPs count every micro-batch too,
but only a family without model FLOPs of its own reads them (``useful_flops``): they are summed apart, when asked
(a transformer's search spent a quarter of its running sums' additions on them)."""
ONE_MICRO = ("pairs", "embedding_fwd", "embedding_bwd", "attention")
"""``PricedOps``' sums that count one micro-batch (``pairs``: the micro-batch's own time, ``microbatch_s``)."""
SUMMED = ACCUMULATED + ONE_MICRO
"""The running sums over a micro-batch's parts, in this order (``PrefixSums``, ``PricedOps.summed``)."""
_SUMMED_COLUMNS = operator.attrgetter(*SUMMED)
_PAIRS = SUMMED.index("pairs")
"""``microbatch_s``'s place in ``SUMMED``: ``fold`` carries on every other sum over the once-per-step ops
(``microbatch_s`` has no once-per-step term)."""


def _summed(part: PricedOps) -> tuple[tuple[int, Column], ...]:
    """``PricedOps.summed`` of ``part``, whose other fields are set."""
    return tuple((j, column) for j, column in enumerate(_SUMMED_COLUMNS(part)) if column)

Stage = tuple[tuple[PricedOps, int], ...]
"""Priced op lists in step order, each with how many copies of it run (a block's ops: the stage's layers)."""


# ------------------------------------------------------------------------------------------------ the sums
@dataclass(frozen=True)
class Sums:
    compute_bound_s: float
    memory_bound_s: float
    optimizer_s: float
    microbatch_s: float
    embedding_fwd_s: float
    embedding_bwd_s: float
    attention_s: float


def part_sums(sums: tuple, part: PricedOps, k: int, skip: int = -1) -> tuple:
    """``sums`` (one per ``SUMMED`` field) carried on over ``part``'s columns (``PricedOps.summed``), each term
    value x (count x ``k``): the additions of a left-to-right sum, in its order. ``skip``: a place in ``SUMMED``
    whose sum is left as it is."""
    out = list(sums)
    for j, column in part.summed:
        if j != skip:
            s = out[j]
            for t, n in column:
                s += t * (n * k)
            out[j] = s
    return tuple(out)


def micro_sums(micro: Stage, accum: int, fields: Sequence[str]) -> tuple:
    """``fold``'s running sums of ``fields`` after the micro-batch ops, in op order, each term x ``accum``: the
    part FSDP and DDP (and every once-per-step op list) share for one micro-batch graph and accumulation, so
    ``StepModel`` caches it (``ONE_MICRO`` with ``accum`` 1, by the graph alone)."""
    sums = []
    for field in fields:
        s = 0
        for part, copies in micro:
            k = copies * accum
            for t, n in getattr(part, field):
                s += t * (n * k)
        sums.append(s)
    return tuple(sums)


def fold(micro: Stage, accum: int, once: Stage, made: tuple[tuple, tuple] | None = None) -> Sums:
    """The step's sums over the micro-batch ops (executed count x ``accum``) and the once-per-step ops, in op order:
    the left-to-right sums the summary has always made (a term is seconds x executions, the executions an exact
    integer however it is grouped), so every path gives the same bits. ``made``: ``micro_sums`` of ``ACCUMULATED``
    (x ``accum``) and of ``ONE_MICRO`` (x 1) already made; the running sums go on from them over ``once`` (the
    same additions in the same order). ``microbatch_s`` has no once-per-step term."""
    per_step, per_micro = made or (micro_sums(micro, accum, ACCUMULATED), micro_sums(micro, 1, ONE_MICRO))
    sums = (*per_step, *per_micro)  # each field's sum but microbatch_s goes on over the once-per-step parts
    for part, copies in once:
        sums = part_sums(sums, part, copies, skip=_PAIRS)
    compute, memory, optimizer, _, emb_fwd, emb_bwd, attention = sums
    out = object.__new__(Sums)  # the fields set without the frozen __init__ (one per candidate of a recipe search)
    out.__dict__.update(compute_bound_s=compute, memory_bound_s=memory, optimizer_s=optimizer,
                        microbatch_s=per_micro[0], embedding_fwd_s=emb_fwd, embedding_bwd_s=emb_bwd,
                        attention_s=attention)
    return out


def useful_flops(micro: Stage, accum: int, once: Stage) -> float:
    """The FLOPs of every op but recomputation over the micro-batch ops (executed count x ``accum``) and the
    once-per-step ops: the left-to-right sum ``fold`` makes of each of its fields, for the ``useful`` column."""
    s = micro_sums(micro, accum, ("useful",))[0]
    for part, copies in once:
        for t, n in part.useful:
            s += t * (n * copies)
    return s


class PrefixSums:
    """The running sums of ``SUMMED`` over a micro-batch's (priced part, copies) pairs, each term x its part's
    copies; the sums after each prefix of parts cached by the prefix's number, the part and its copies (the part
    rides in the cached value, so its id stays its own while the entry lives)."""

    fields = SUMMED

    def __init__(self):
        self._zero = (0,) * len(SUMMED)  # an empty field sums to the int 0, as a plain left-to-right sum
        self._prefixes: dict[tuple, tuple] = {}
        self._numbers = itertools.count(1)  # 0 is the empty prefix; numbers are never reused, even after a clear

    def __call__(self, micro: Sequence[tuple[PricedOps, int]]) -> tuple:
        prefixes = self._prefixes
        if len(prefixes) > PREFIX_LIMIT:
            prefixes.clear()
        prefix, sums = 0, self._zero
        for part, copies in micro:
            key = (prefix, id(part), copies)
            hit = prefixes.get(key)
            if hit is None:
                hit = prefixes[key] = (next(self._numbers), part_sums(sums, part, copies), part)
            prefix, sums = hit[0], hit[1]
        return sums
