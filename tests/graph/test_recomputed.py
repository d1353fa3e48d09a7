"""A recomputed piece (``graph.recomputed``) is the copies ``block_recompute_ops`` makes, and its prices from the
forward piece's are exactly the ones pricing it afresh gives (``step_sums.PricedOps.recomputed``)."""

import dataclasses

import pytest

from workbench.config import TrainingConfig
from workbench.graph.ops import replace_op
from workbench.graph.recomputed import RecomputedOps, RecomputedPiece
from workbench.graph.stack_kernels import Dims, block_ops, block_recompute_ops, torchtitan_flavor
from workbench.graph.stacked import _recompute, _recomputed_indices
from workbench.graph.transformer import block_graph
from workbench.models import get_model
from workbench.perf.timer_key import timer_key
from workbench.profile_fit import NO_FIT
from workbench.stack_memory import piece_launch_counts
from workbench.step import StepModel
from workbench.step_sums import PricedOps

FIELDS = [f.name for f in dataclasses.fields(PricedOps)]


def _priced_both_ways(step: StepModel, fwd, recomputed, power: float):
    forward = step._price(fwd, NO_FIT, power=power)
    fresh = step._price(recomputed, NO_FIT, power=power)
    derived = PricedOps.recomputed(recomputed, recomputed.kept, forward)
    return fresh, derived


@pytest.mark.parametrize("policy", ["full", "selective-op", "selective-2", "selective-op-all-mm", "none"])
@pytest.mark.parametrize("float8", ["none", "tensorwise"])
def test_a_stack_tables_recomputed_block_is_priced_as_afresh(policy, float8):
    m = get_model("llama3-8b")
    d = dataclasses.replace(Dims.of(m, 2, 4096, 2), layers=1)
    flavor = dataclasses.replace(torchtitan_flavor(False, float8), param_dtype="bf16")
    fwd = tuple(block_ops(d, flavor)[0])
    piece = RecomputedPiece(fwd, _recomputed_indices(fwd, policy))
    theirs = _recompute(fwd, policy, 1) if policy == "selective-op-all-mm" else block_recompute_ops(fwd, policy)
    assert type(piece) is RecomputedPiece and piece.forward is fwd
    assert list(piece) == theirs and [op.extra for op in piece] == [op.extra for op in theirs]
    assert all(timer_key(op) == timer_key(fwd[i]) for op, i in zip(piece, piece.kept, strict=True))
    step = StepModel("llama3-8b", "h200-sxm", stack="torchtitan")
    lazy = RecomputedPiece(fwd, piece.kept)  # priced from the forward's prices without its copies made
    derived = PricedOps.recomputed(lazy, lazy.kept, step._price(fwd, NO_FIT))
    assert lazy._copies is None and derived.ops is lazy and len(lazy) == len(theirs)
    assert lazy == tuple(theirs) and hash(lazy) == hash(tuple(theirs)) and lazy[-1:] == tuple(theirs[-1:])
    for compile_blocks in (False, True):  # its launches counted on the ops it copies (graph.stacked)
        assert piece_launch_counts(map(fwd.__getitem__, lazy.kept), compile_blocks, recomputed=True) == \
            piece_launch_counts(theirs, compile_blocks)
    for power in (1.0, 0.8):
        fresh, derived = _priced_both_ways(step, fwd, piece, power)
        for field in FIELDS:
            assert getattr(derived, field) == getattr(fresh, field), (field, power)


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
def test_the_fused_steps_recomputation_is_priced_as_afresh(model):
    m = get_model(model)
    ends, fwd, head, bwd, recompute = block_graph(m, TrainingConfig(2, 4096), None)
    step = StepModel(model, "h200-sxm", stack="ideal")
    for mode in ("selective", "full"):
        ops = recompute[mode]
        assert type(ops) is RecomputedOps and ops.forward is fwd and ops
        derived = PricedOps.recomputed(ops, ops.kept, step._price(fwd, NO_FIT))
        assert ops._copies is None and derived.ops is ops  # priced without its copies made
        theirs = [replace_op(fwd[i], name=f"recompute.{fwd[i].name}", phase="bwd") for i in ops.kept]
        assert ops == theirs and ops != theirs[1:] and theirs == ops
        for power in (1.0, 0.7):
            fresh, derived = _priced_both_ways(step, fwd, ops, power)
            for field in FIELDS:
                assert getattr(derived, field) == getattr(fresh, field), (mode, field, power)
