"""The step's running sums (``workbench.step_sums``): the sums a step model keeps per prefix of parts, over each
part's ``summed`` columns, are the plain left-to-right sums of every field over every part, bit for bit."""

import pytest

from workbench.recipe.search import StepEvaluator, search
from workbench.step_sums import ACCUMULATED, ONE_MICRO, SUMMED, PricedOps, Sums, fold, micro_sums


@pytest.mark.parametrize("stack", ["torchtitan", "ideal"])
def test_prefix_sums_are_the_plain_sums_of_every_part(stack):
    """A search's every micro-batch graph (the fused step's and the tables', float8 all-gather runs included): each
    part's ``summed`` is its non-empty ``SUMMED`` columns in order, and the step model's cached sums of the graph
    (``StepModel._micro_sums``) and ``fold`` from them are those of plain loops over every part's fields."""
    evaluator = StepEvaluator("llama3-8b", "h200-sxm", stack)
    search("llama3-8b", "h200-sxm", 8, precisions=("bf16", "fp8"), evaluator=evaluator)
    graphs = evaluator.step._graphs
    made = [(key[2], value) for key, value in graphs.items() if key[0] == "micro sums of"]
    # the once-per-step parts: the tables' (optimizer, FSDP2's copies, float8 scales) and the fused step's optimizer
    onces = [value[0][1] for key, value in graphs.items() if key[0] == "table parts"]
    onces += [((value[0], 1),) for key, value in graphs.items() if key[0] == "optimizer"]
    assert len(made) > 100 and onces
    for n, (accum, (micro, (per_step, per_micro))) in enumerate(made):
        for part, _ in micro:
            assert isinstance(part, PricedOps)
            assert part.summed == tuple((j, getattr(part, f)) for j, f in enumerate(SUMMED) if getattr(part, f))
        assert per_step == micro_sums(micro, accum, ACCUMULATED) and per_micro == micro_sums(micro, 1, ONE_MICRO)
        once = onces[n % len(onces)]
        assert fold(micro, accum, once, (per_step, per_micro)) == _plain_fold(micro, accum, once)


def _plain_fold(micro, accum: int, once) -> Sums:
    """``fold`` written out: per field, one left-to-right loop over every term of the micro-batch's parts (x
    ``accum`` for the accumulated fields) and then of the once-per-step parts (none for the micro-batch's time)."""
    def plain(field: str, k: int, with_once: bool = True) -> float:
        s = 0
        for part, copies in micro:
            for t, n in getattr(part, field):
                s += t * (n * (copies * k))
        for part, copies in once if with_once else ():
            for t, n in getattr(part, field):
                s += t * (n * copies)
        return s

    return Sums(compute_bound_s=plain("compute", accum), memory_bound_s=plain("memory", accum),
                optimizer_s=plain("optimizer", accum), microbatch_s=plain("pairs", 1, with_once=False),
                embedding_fwd_s=plain("embedding_fwd", 1), embedding_bwd_s=plain("embedding_bwd", 1),
                attention_s=plain("attention", 1))
