"""A recomputed block piece that remembers which forward ops it copies, so that it is priced from them.

A checkpointed block reruns some of its forward kernels in the backward: ``stack_kernels.block_recompute_ops``
copies each such op with its name prefixed ``recompute.`` and its phase set to ``bwd``, nothing else changed. The
copy has its forward op's shape, dtype, FLOPs, bytes and ``extra``, so the step model's timer gives it the forward
op's time (``workbench.perf.timer_key`` reads none of the two changed fields). A ``RecomputedPiece`` is those
copies as a tuple (what ``graph.stacked.Parts`` holds) plus ``forward`` and ``kept``: the piece it copies and the
index of each copied op in it. ``step_sums.PricedOps.recomputed`` then prices the piece from the forward piece's
prices (the recomputed ops of a recipe search were a third of the ops it priced) instead of looking each op up
again.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.graph.ops import Op

PREFIX = "recompute."
"""What a recomputed op's name begins with (``step_sums.PricedOps`` leaves those ops out of the useful FLOPs)."""


class RecomputedPiece(tuple):
    """The recomputed copies of ``forward[i]`` for each ``i`` in ``kept`` (ascending), in that order: a tuple of
    ops equal to the one ``block_recompute_ops`` makes, with where each op comes from (a stack table's piece)."""

    forward: Sequence[Op]
    kept: tuple[int, ...]

    def __new__(cls, forward: Sequence[Op], kept: Sequence[int]) -> RecomputedPiece:
        piece = super().__new__(cls, map(recomputed_copy, map(forward.__getitem__, kept)))
        piece.forward, piece.kept = forward, tuple(kept)
        return piece


class RecomputedOps(list):
    """``RecomputedPiece`` as a list (the fused step's block graph: ``graph.transformer.block_ops``, whose pieces
    are lists); equal to the list of its copies."""

    forward: Sequence[Op]
    kept: tuple[int, ...]

    def __init__(self, forward: Sequence[Op], kept: Sequence[int]):
        super().__init__(map(recomputed_copy, map(forward.__getitem__, kept)))
        self.forward, self.kept = forward, tuple(kept)


def recomputed_copy(op: Op) -> Op:
    """``op`` rerun in the backward: ``replace_op(op, name=f"recompute.{op.name}", phase="bwd")``, made directly
    (every other field shared, ``extra`` included; the recomputation builders copy thousands of ops per search)."""
    new = object.__new__(Op)  # what Op(...) of the same fields makes
    fields = new.__dict__
    fields.update(op.__dict__)
    fields["name"] = PREFIX + op.name
    fields["phase"] = "bwd"
    return new
