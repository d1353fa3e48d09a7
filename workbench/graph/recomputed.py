"""A recomputed block piece that remembers which forward ops it copies, so that it is priced from them.

A checkpointed block reruns some of its forward kernels in the backward: ``stack_kernels.block_recompute_ops``
copies each such op with its name prefixed ``recompute.`` and its phase set to ``bwd``, nothing else changed. The
copy has its forward op's shape, dtype, FLOPs, bytes and ``extra``, so the step model's timer gives it the forward
op's time (``workbench.perf.timer_key`` reads none of the two changed fields). A ``RecomputedPiece`` is those
copies as a sequence (what ``graph.stacked.Parts`` holds) plus ``forward`` and ``kept``: the piece it copies and
the index of each copied op in it. ``step_sums.PricedOps.recomputed`` then prices the piece from the forward
piece's prices (the recomputed ops of a recipe search were a third of the ops it priced) instead of looking each op
up again, and reads the copies' kinds and layers from the forward ops they copy: so a recipe search, which reads
no recomputed op itself, never makes the copies. A piece makes them when first read (iterated, indexed, compared:
its launch counts, a prediction's ops), once. ``RecomputedOps`` is the same in the fused step's block graph.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.graph.ops import Op

PREFIX = "recompute."
"""What a recomputed op's name begins with (``step_sums.PricedOps`` leaves those ops out of the useful FLOPs)."""


class RecomputedPiece(Sequence):
    """The recomputed copies of ``forward[i]`` for each ``i`` in ``kept`` (ascending), in that order: a sequence of
    ops equal to the tuple ``block_recompute_ops`` makes (a stack table's piece), with where each op comes from.
    The copies are made when the piece is first read (``copies``); its length, ``forward`` and ``kept`` need none."""

    __slots__ = ("forward", "kept", "_copies")

    def __init__(self, forward: Sequence[Op], kept: Sequence[int]):
        self.forward, self.kept = forward, tuple(kept)
        self._copies: tuple[Op, ...] | None = None

    @property
    def copies(self) -> tuple[Op, ...]:
        """The copied ops, made on first use and kept."""
        if self._copies is None:
            self._copies = tuple(map(recomputed_copy, map(self.forward.__getitem__, self.kept)))
        return self._copies

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, index):
        return self.copies[index]

    def __iter__(self):
        return iter(self.copies)

    def __eq__(self, other) -> bool:  # equal to a tuple, or a piece, of the same ops (as the tuple it stands for)
        if isinstance(other, RecomputedPiece):
            other = other.copies
        return self.copies == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.copies)

    def __repr__(self) -> str:
        return f"RecomputedPiece({self.copies!r})"


class RecomputedOps(RecomputedPiece):
    """``RecomputedPiece`` in the fused step's block graph (``graph.transformer.block_ops``, whose pieces are
    lists): equal to the list of its copies, and unhashable, as a list."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        return self.copies == tuple(other) if isinstance(other, list) else super().__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"RecomputedOps({list(self.copies)!r})"


def recomputed_copy(op: Op) -> Op:
    """``op`` rerun in the backward: ``replace_op(op, name=f"recompute.{op.name}", phase="bwd")``, made directly
    (every other field shared, ``extra`` included; the recomputation builders copy thousands of ops per search)."""
    new = object.__new__(Op)  # what Op(...) of the same fields makes
    fields = new.__dict__
    fields.update(op.__dict__)
    fields["name"] = PREFIX + op.name
    fields["phase"] = "bwd"
    return new
