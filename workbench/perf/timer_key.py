"""What ``workbench.perf.op_time`` reads of an op, as a hashable key: the step model's memoized timer
(``workbench.step``) times each key once, and numbers each op list's keys once (``step._timer_ids``).

A stack table's block is the same list of ops at every micro-batch but for their sizes (``graph.stacked``): the
keys of such a list are its sizes zipped with what the first list's keys held besides them (``KeyedOps``,
``TimerFamily``), the same tuples ``timer_key`` makes op by op.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from workbench.graph.ops import Op

TIMER_EXTRAS = ("host_idle", "bandwidth_kind", "unvectorized", "transpose", "gather", "sdpa_backend")
"""The ``extra`` entries ``workbench.perf.op_time`` reads (``timer_key``)."""
NO_TIMER_EXTRAS = (None,) * len(TIMER_EXTRAS)
"""``timer_key``'s entries of an empty ``extra``: those of an ``extra`` that holds none of them (a GEMM tagged with
its ``aten`` only), so the two are one key (wo's forward GEMM and wq's dgrad are one shape where q = hidden)."""
SHAPED_KINDS = frozenset({"gemm", "attention"})
"""The op kinds whose time reads the op's shape (``perf.gemm``, ``perf.attention``; ``timer_key``)."""


def timer_key(op: Op) -> tuple:
    """Everything ``workbench.perf.op_time`` reads of an op (``perf.gemm``: shape, dtype; ``perf.attention``: shape
    -- its kernel's pass included (``graph.ops.kernel_pass``) --, dtype, FLOPs, bytes and ``extra["sdpa_backend"]``;
    ``perf.memory_bound``: kind, dtype, bytes and the ``extra`` flags, ``TIMER_EXTRAS``; ``perf.roofline``: kind,
    dtype, FLOPs, bytes). A field the timer starts to read must join this key. (Flags are keyed as stored: an absent
    and a False flag are two keys of one time, priced twice; the builders set only True flags.) A memory-bound op's
    shape is not read, so it is keyed as None: a shape is a dataclass, whose hash and equality run in Python, and
    memory-bound ops are most of the ops a cold recipe search prices. The fields are read from the op's
    ``__dict__`` and the flags one ``get`` each (``TIMER_EXTRAS``' order): a first search keys every op of its
    new tables, and ``tuple(map(extra.get, ...))`` and the attribute lookups were a third of a key's cost."""
    fields = op.__dict__
    extra = fields["extra"]
    kind = fields["kind"]
    if extra:
        get = extra.get
        flags = (get("host_idle"), get("bandwidth_kind"), get("unvectorized"), get("transpose"), get("gather"),
                 get("sdpa_backend"))
    else:
        flags = NO_TIMER_EXTRAS
    return (kind, fields["shape"] if kind in SHAPED_KINDS else None, fields["dtype"], fields["flops"],
            fields["bytes_read"], fields["bytes_written"], flags)


_FLOPS = operator.attrgetter("flops")
_BYTES_READ = operator.attrgetter("bytes_read")
_BYTES_WRITTEN = operator.attrgetter("bytes_written")


@dataclass(frozen=True)
class TimerLayout:
    """``timer_key`` of each op of a list less its sizes: the kinds, dtypes and ``extra`` flags, and where the ops
    keyed with their shape are; ``keys`` adds the sizes of a list that differs from it in nothing else."""

    kinds: tuple[str, ...]
    dtypes: tuple[str, ...]
    flags: tuple[tuple, ...]
    shaped: tuple[int, ...]

    @staticmethod
    def of(keys: Sequence[tuple]) -> TimerLayout:
        """The layout of a list whose ``timer_key``s are ``keys``."""
        kinds, _, dtypes, _, _, _, flags = zip(*keys) if keys else ((),) * 7
        return TimerLayout(kinds, dtypes, flags, tuple(i for i, kind in enumerate(kinds) if kind in SHAPED_KINDS))

    def keys(self, ops: Sequence[Op]) -> Iterator[tuple]:
        """``timer_key`` of each op of ``ops``, a list this layout is of but for the sizes: each key its kind,
        shape (where keyed), dtype, FLOPs, bytes and flags zipped, the loop in C."""
        if len(ops) != len(self.kinds):
            raise AssertionError("a timer layout keys a list of its own length only")
        shapes = [None] * len(ops)
        for i in self.shaped:
            shapes[i] = ops[i].shape
        return zip(self.kinds, shapes, self.dtypes, map(_FLOPS, ops), map(_BYTES_READ, ops), map(_BYTES_WRITTEN, ops),
                   self.flags)


class TimerFamily:
    """Lists of ops that differ from one another in their ops' sizes only (a stack table's block at each
    micro-batch: ``graph.stacked._BlockLayout``): the first list keyed is keyed op by op (``timer_key``), and its
    keys less their sizes (``layout``, None before) key every later one."""

    __slots__ = ("layout",)

    def __init__(self):
        self.layout: TimerLayout | None = None

    def keys(self, ops: Sequence[Op]) -> Sequence[tuple] | Iterator[tuple]:
        """``timer_key`` of each op of ``ops``, a list of this family."""
        if self.layout is not None:
            return self.layout.keys(ops)
        keys = list(map(timer_key, ops))
        self.layout = TimerLayout.of(keys)
        return keys


class KeyedOps(tuple):
    """A tuple of ops of a ``TimerFamily``, which ``step._timer_ids`` keys it by."""

    family: TimerFamily

    def __new__(cls, ops: Sequence[Op], family: TimerFamily) -> KeyedOps:
        keyed = super().__new__(cls, ops)
        keyed.family = family
        return keyed
