"""Search: every candidate is predict()'s own numbers (one step-model pipeline); ranking, feasibility, Pareto set and enumeration."""

import math

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError, WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import get_model
from workbench.predict import predict
from workbench.recipe.search import (
    STEP_TIME_UNCERTAINTY,
    Candidate,
    SearchResult,
    StepEvaluator,
    default_global_batch,
    layouts,
    search,
    simplicity_key,
)


def _summary_fields(s):
    return (s.step_time_s, s.tokens_per_s, s.samples_per_s, s.mfu, s.communication_s, s.memory.total / 1e9,
            s.memory.fits, s.priced_as_bound)


def _candidate_fields(c):
    return (c.step_time_s, c.tokens_per_s, c.samples_per_s, c.mfu, c.communication_s, c.peak_memory_gb, c.fits,
            c.priced_as_bound)


@pytest.mark.parametrize("model, gpu, gpus, global_batch, stack", [
    ("llama3-8b", "h200", 8, 0, None),
    ("llama3-70b", "h100", 32, 256, None),
    ("mixtral-8x7b", "mi300x", 16, 0, None),
    ("dlrm-dcnv2", "mi350x", 8, 0, None),
    ("hstu-gr", "b200", 4, 0, None),
    ("llama3.2-1b", "h200", 8, 64, "torchtitan"),
    ("llama3.2-1b", "h200", 2, 16, "workbench-job"),
])
def test_search_candidates_are_exactly_predict(model, gpu, gpus, global_batch, stack):
    # the search asks the pipeline predict runs (workbench.step): not close to predict, the same numbers
    result = search(model, gpu, gpus, global_batch=global_batch, stack=stack)
    sample = [c for c in result.candidates if c.fits][::3][:40]
    assert sample
    for c in sample:  # stack None: predict's default is the search's (torchtitan, the bound for DLRM and HSTU)
        s = predict(model, gpu, c.config, stack=stack, compile=c.compile).summary
        assert _candidate_fields(c) == _summary_fields(s)
    # a candidate that does not fit is not priced (memory first) and stops its micro-batch climb
    for c in result.candidates:
        if not c.fits:
            assert c.step_time_s == math.inf and c.peak_memory_gb == predict(
                model, gpu, c.config, stack=stack, compile=c.compile).summary.memory.total / 1e9


def test_all_checkpointing_modes_pipeline_depths_and_the_job_match_predict_exactly():
    from workbench.graph.execution import Execution

    for execution in (None, Execution(compile=False)):
        ev = StepEvaluator("llama3-8b", "h100", execution=execution)
        for ac in ("none", "selective", "full"):
            for pp in (1, 2, 4):
                cfg = TrainingConfig(2, 4096, "bf16", Parallelism(dp=8 // pp, pp=pp), ac, global_batch=8 * 2 // pp * 4)
                cfg = cfg.resolved(ev.model)
                s = predict("llama3-8b", "h100", cfg, execution=execution).summary
                assert _candidate_fields(ev.evaluate(cfg, compile=ev.compile_options[0])) == _summary_fields(s)


def test_the_evaluator_tries_the_compile_flags_its_stack_follows():
    assert StepEvaluator("llama3-8b", "h200", "ideal").compile_options == (True,)  # the fused step is compiled
    assert StepEvaluator("llama3-8b", "h200", "torchtitan").compile_options == (False, True)
    assert StepEvaluator("llama3-8b", "h200", "pytorch-eager").compile_options == (False,)
    # no stack named: predict's default, the model family's (was the ideal bound for every model before torchtitan
    # became the default)
    assert StepEvaluator("llama3-8b", "h200").stack == "torchtitan"
    assert StepEvaluator("dlrm-dcnv2", "h200").stack == StepEvaluator("hstu-gr", "h200").stack == "ideal"


def test_ranked_are_feasible_and_fastest_first():
    result = search("llama3-8b", "h100", 8)  # the default stack, torchtitan: some layouts are outside its tables
    ranked = result.ranked
    assert ranked and all(c.fits for c in ranked)
    # the ones its tables price first, fastest first; then the ones priced as the (optimistic) bound
    assert not ranked[0].priced_as_bound and any(c.priced_as_bound for c in ranked)
    order = [(c.priced_as_bound, -c.tokens_per_s) for c in ranked]
    assert order == sorted(order)
    assert result.fastest is ranked[0]
    tied = result.within_uncertainty()  # best: the simplest of the ties with the fastest, not the fastest itself
    assert tied == [c for c in ranked if c.tokens_per_s * (1 + STEP_TIME_UNCERTAINTY) >= ranked[0].tokens_per_s
                    and not c.priced_as_bound]
    assert result.best in tied and result.best == min(tied, key=simplicity_key)
    assert any(not c.fits for c in result.candidates)  # the climb stops at the first micro-batch that does not fit
    assert {c.config.activation_checkpointing for c in ranked} == {"none", "selective", "full"}
    assert {c.config.parallelism.sharding for c in ranked} == {"fsdp", "ddp"}


def test_pareto_front_is_non_dominated_and_sorted():
    result = search("llama3-8b", "h200", 8)
    front = result.pareto()
    mem = [c.peak_memory_gb for c in front]
    thr = [c.tokens_per_s for c in front]
    assert mem == sorted(mem) and thr == sorted(thr)
    for f in front:  # nothing feasible beats a front member on both axes
        assert not any(c.peak_memory_gb < f.peak_memory_gb and c.tokens_per_s > f.tokens_per_s for c in result.ranked)
    for c in result.ranked:  # and every feasible candidate is matched or beaten by the front
        assert any(f.peak_memory_gb <= c.peak_memory_gb and f.tokens_per_s >= c.tokens_per_s for f in front)
    frame = result.as_frame()
    assert frame["pareto"].sum() == len(front) and len(frame) == len(result.ranked)


def test_global_batch_is_respected_and_precisions_compared():
    # the fused step named: there fp8 is clearly faster; as torchtitan (the default) runs it, compiled fp8 is about
    # 4% faster than compiled bf16 at this batch, a tie inside STEP_TIME_UNCERTAINTY that the simpler bf16 wins
    result = search("llama3-8b", "h100", 8, global_batch=64, precisions=["bf16", "fp8"], stack="ideal")
    for c in result.candidates:
        assert c.config.samples_per_step == 64
        assert 64 % (c.config.micro_batch * c.config.parallelism.dp) == 0
    assert {c.config.precision for c in result.ranked} == {"bf16", "fp8"}
    assert result.best.config.precision == "fp8"


def test_moe_layouts_include_expert_parallelism_and_tp_stays_in_the_domain():
    found = layouts(get_model("mixtral-8x7b"), get_gpu("h100"), 16)
    assert any(p.ep > 1 for p in found)
    assert all(p.tp <= 8 and p.dp % p.ep == 0 for p in found)


def test_nothing_fits_says_so_and_bad_inputs_are_named():
    result = search("llama3-405b", "a100-sxm-80gb", 1)
    assert result.ranked == []
    with pytest.raises(WorkbenchError, match="no configuration"):
        result.best
    with pytest.raises(SpecError, match="gpus"):
        search("llama3-8b", "h100", 0)
    with pytest.raises(WorkbenchError, match="fp8"):
        search("llama3-8b", "a100-sxm-80gb", 1, precision="fp8")
    assert math.isinf(result.candidates[0].step_time_s)


def test_micro_batches_are_the_divisors_of_the_per_rank_batch_up_to_memory():
    from workbench.recipe import revised_model

    model = revised_model("llama3-8b", {"num_layers": 4})
    result = search(model, "h200", 1, global_batch=24, checkpointing=["none"])
    assert {c.compile for c in result.candidates} == {False, True}  # the default, torchtitan: one climb each
    for compiled in (False, True):
        climb = [c for c in result.candidates if c.compile == compiled]
        tried = [c.config.micro_batch for c in climb]
        assert tried == [1, 2, 3, 4, 6, 8, 12, 24][:len(tried)]  # every divisor, powers of two or not, in order
        assert not climb[-1].fits and all(c.fits for c in climb[:-1])  # memory stops the climb
    assert {c.config.grad_accumulation * c.config.micro_batch for c in result.candidates} == {24}


@pytest.mark.parametrize("model, gpu, gpus, global_batch, precisions", [
    ("llama3-8b", "h200", 8, 0, ["bf16"]),  # the case: the old search picked 24 here (3 x 8, no accumulation)
    ("llama3-8b", "h200", 8, 24, ["bf16", "fp8"]),
    ("llama3-70b", "h100", 32, 256, ["bf16"]),
    ("mixtral-8x7b", "mi300x", 16, 0, ["bf16"]),
    ("gpt2-small", "b200", 6, 0, ["bf16"]),
    ("dlrm-dcnv2", "mi350x", 8, 0, ["bf16"]),
    ("hstu-gr", "b200", 4, 0, ["bf16"]),
])
def test_every_candidate_has_the_requested_global_batch(model, gpu, gpus, global_batch, precisions):
    result = search(model, gpu, gpus, global_batch=global_batch, precisions=precisions)
    requested = global_batch or default_global_batch(model, gpus)
    assert result.global_batch == requested and result.candidates
    for c in result.candidates:
        cfg = c.config
        assert cfg.samples_per_step == cfg.global_batch == requested
        assert cfg.micro_batch * cfg.parallelism.dp * cfg.grad_accumulation == requested
    assert result.best.config.samples_per_step == requested
    assert set(result.as_frame()["global_batch"]) == {requested}


def test_default_global_batch_is_the_models_standard_per_gpu_count():
    # transformers: 4M tokens / seq_len as gpus x the nearest power of two per GPU; recommendation models: the
    # catalog's default_batch the same way; never a function of the candidate
    assert default_global_batch("llama3-8b", 8) == default_global_batch("llama3-8b", 1) == 512  # 8,192 tokens each
    assert default_global_batch("llama3-8b", 8, seq_len=2048) == 2048
    assert default_global_batch("llama3-8b", 6) == 6 * 64  # 85.3 per GPU -> 64
    assert default_global_batch("llama3-8b", 1024) == 1024  # at least one sample per GPU
    assert default_global_batch("gpt2-small", 2) == 4096  # 1,024 tokens each
    assert default_global_batch("dlrm-dcnv2", 8) == 65536 and default_global_batch("hstu-gr", 8) == 64
    dlrm = search("dlrm-dcnv2", "mi350x", 8, global_batch=1001)  # DLRM's one layout is dp 8: 8 does not divide it
    assert dlrm.candidates == []
    with pytest.raises(WorkbenchError, match="divides the global batch 1001"):
        dlrm.best


def _candidate(tokens_per_s: float, *, tp: int = 1, pp: int = 1, ac: str = "none", micro_batch: int = 1,
               memory_gb: float = 50.0, precision: str = "bf16") -> Candidate:
    dp = 8 // (tp * pp)
    cfg = TrainingConfig(micro_batch, 8192, precision, Parallelism(dp=dp, tp=tp, pp=pp), ac, global_batch=64)
    return Candidate(cfg, 64 * 8192 / tokens_per_s, tokens_per_s, 64 / (64 * 8192 / tokens_per_s), 0.5, memory_gb,
                     0.0, True)


def test_tie_break_prefers_the_simpler_candidate_within_the_uncertainty():
    result = SearchResult(get_model("llama3-8b"), get_gpu("h200"), 8, global_batch=64, precisions=("bf16", "fp8"))
    fastest = _candidate(100_000, tp=2, pp=2)
    tp_only = _candidate(98_000, tp=2)
    plain_selective = _candidate(97_000, ac="selective", micro_batch=2)
    plain_full = _candidate(97_500, ac="full", micro_batch=4)
    plain_none_small = _candidate(96_000, micro_batch=1, memory_gb=40)
    plain_none_large = _candidate(96_500, micro_batch=2, memory_gb=70)  # less accumulation: preferred over less memory
    too_slow = _candidate(90_000, micro_batch=8)  # simplest, but outside the uncertainty: a real loss
    fp8 = _candidate(99_000, precision="fp8", micro_batch=8)  # the precision listed second
    result.candidates = [fastest, tp_only, plain_selective, plain_full, plain_none_small, plain_none_large, too_slow,
                         fp8]
    assert result.fastest is fastest and too_slow not in result.within_uncertainty()
    assert result.best is plain_none_large
    result.candidates.remove(plain_none_large)
    assert result.best is plain_none_small
    result.candidates = [fastest, tp_only, plain_selective, plain_full]
    assert result.best is plain_selective  # checkpointing none < selective < full before accumulation
    result.candidates = [fastest, tp_only]
    assert result.best is tp_only  # one model-parallel dimension before two
    frame = result.as_frame()
    assert list(frame["within_uncertainty"]) == [True, True] and list(frame["recommended"]) == [False, True]
    result.candidates = [_candidate(100_000, tp=2), _candidate(94_000)]  # 6% apart: the model can tell them apart
    assert result.best.config.parallelism.tp == 2


def test_search_keeps_the_simpler_of_two_tied_candidates():
    # Llama 3 8B on 8 H200s: none and selective checkpointing at micro-batch 2 are within 1%: none wins on its own
    # merits; a fastest candidate with tp or pp > 1 would lose to any plain data-parallel one within 5%
    result = search("llama3-8b", "h200", 8)
    best = result.best
    for c in result.within_uncertainty():
        assert simplicity_key(best) <= simplicity_key(c)
    p = best.config.parallelism
    assert (p.tp, p.pp, p.ep) == (1, 1, 1) and best.config.activation_checkpointing == "none"


# ----------------------------------------------------------------------------------------------------------------
# search for a named stack: every candidate is predict(..., stack=, compile=)'s numbers


def _llama_4l():
    from workbench.recipe.build import revised_model

    return revised_model("llama3-8b", {"num_layers": 4})


def test_stack_search_prices_each_candidate_with_predict_eager_and_compiled():
    model = _llama_4l()
    result = search(model, "h200", 1, seq_len=8192, global_batch=2, stack="torchtitan")
    assert result.stack == "torchtitan"
    assert {c.compile for c in result.candidates} == {False, True}  # torchtitan follows the recipe's flag
    assert {c.config.activation_checkpointing for c in result.candidates} == {"none", "selective", "full"}
    for c in result.candidates:
        s = predict(model, "h200", c.config, stack="torchtitan", compile=c.compile).summary
        assert (c.step_time_s, c.peak_memory_gb, c.fits) == (s.step_time_s, s.memory.total / 1e9, s.memory.fits)
        assert c.stack == "torchtitan" and not c.priced_as_bound
    eager, compiled = (min(c.step_time_s for c in result.candidates if c.compile == flag and c.config.micro_batch == 1
                           and c.config.activation_checkpointing == "none") for flag in (False, True))
    assert compiled < eager  # compiling fuses torchtitan's eager norms, RoPE and SwiGLU
    # a stack that never or always compiles has one option; the fused step is the compiled step
    assert {c.compile for c in search(model, "h200", 1, seq_len=4096, global_batch=1,
                                      stack="pytorch-eager").candidates} == {False}
    assert {c.compile for c in search(model, "h200", 1, seq_len=4096, global_batch=1,
                                      stack="pytorch-compile").candidates} == {True}
    ideal = search(model, "h200", 1, seq_len=4096, global_batch=1, stack="ideal")
    assert ideal.stack == "ideal" and all(c.compile and c.priced_as_bound for c in ideal.candidates)
    assert search(model, "h200", 1, seq_len=4096, global_batch=1).stack == "torchtitan"  # the default


def test_a_candidate_priced_as_the_bound_never_beats_a_priced_one():
    # fp8 with the weight gradient in bf16 (rowwise_with_gw_hp) is outside torchtitan's kernel tables (rowwise is in
    # them): priced as the fused-step bound, faster than any priced step, so it must rank after them and never be
    # recommended while a priced candidate fits
    result = search(_llama_4l(), "h200", 1, seq_len=8192, global_batch=1, stack="torchtitan",
                    precisions=("fp8_gw_hp", "bf16"))
    bound = [c for c in result.ranked if c.priced_as_bound]
    priced = [c for c in result.ranked if not c.priced_as_bound]
    assert bound and priced and all(c.config.precision == "fp8_gw_hp" for c in bound)
    assert max(c.tokens_per_s for c in bound) > max(c.tokens_per_s for c in priced)
    assert result.ranked[:len(priced)] == priced
    assert not result.best.priced_as_bound and result.best.config.precision == "bf16"
    assert all(not c.priced_as_bound for c in result.within_uncertainty())
    assert "priced as the fused-step bound" in result.table(3)
    only_bound = SearchResult(result.model, result.gpu, 1, candidates=bound, global_batch=1, stack="torchtitan")
    assert only_bound.best.priced_as_bound  # nothing priced fits: the bound is all there is, and it says so


def test_the_tie_break_prefers_eager_to_compiled():
    first = _candidate(100_000)
    eager = Candidate(first.config, first.step_time_s * 1.02, first.tokens_per_s / 1.02, first.samples_per_s / 1.02,
                      0.5, 50, 0.0, True, compile=False, stack="torchtitan", priced_as_bound=False)
    compiled = Candidate(first.config, first.step_time_s, first.tokens_per_s, first.samples_per_s, 0.5, 50, 0.0, True,
                         compile=True, stack="torchtitan", priced_as_bound=False)
    result = SearchResult(get_model("llama3-8b"), get_gpu("h200"), 8, candidates=[compiled, eager], global_batch=64,
                          stack="torchtitan")
    assert result.best is eager  # 2% slower: a tie, and nothing to compile
    slower = Candidate(first.config, first.step_time_s * 1.08, first.tokens_per_s / 1.08, first.samples_per_s, 0.5, 50,
                       0.0, True, compile=False, stack="torchtitan", priced_as_bound=False)
    result.candidates = [compiled, slower]
    assert result.best is compiled  # 8% slower: a real loss


def test_stack_search_input_errors_are_named():
    from workbench.errors import UnknownNameError
    from workbench.graph.execution import Execution

    with pytest.raises(UnknownNameError, match="pytorch-eager"):
        search("gpt2-small", "h100", 1, stack="pytorch")
    with pytest.raises(SpecError, match="workbench-job"):
        search("gpt2-small", "h100", 1, stack="torchtitan", execution=Execution(compile=True))


def test_lora_is_searched_where_the_core_models_it():
    result = search("llama3-8b", "h200-sxm", 8, lora_rank=16, lora_targets=("q", "v"))
    assert result.candidates and all(c.config.lora_rank == 16 and c.config.lora_targets == ("q", "v")
                                     for c in result.candidates)
    # fsdp over frozen weights is not modelled: only layouts with one weight replica keep it
    assert all(c.config.parallelism.sharding != "fsdp" or c.config.parallelism.weight_replicas == 1
               for c in result.candidates)
    best = result.best
    again = predict("llama3-8b", "h200-sxm", best.config, stack="ideal")
    assert again.summary.tokens_per_s == pytest.approx(best.tokens_per_s, rel=1e-12)
    with pytest.raises(SpecError, match="ddp or zero1 with LoRA"):
        search("llama3-8b", "h200-sxm", 8, lora_rank=16, shardings=("fsdp",),
               parallelisms=[Parallelism(dp=8)])


def test_a_searched_candidate_is_the_dataclass_it_stands_for():
    # the evaluator makes candidates without the frozen __init__ (recipe.search._candidate): each must be the
    # Candidate(...) of its own fields -- equal, equally hashed, the same repr (search_speed.py's candidates_sha256)
    import dataclasses

    result = search("llama3-8b", "h200-sxm", 8, precisions=("bf16",), stack="torchtitan")
    for c in result.candidates[::7]:
        made = Candidate(**{f.name: getattr(c, f.name) for f in dataclasses.fields(Candidate)})
        assert c == made and hash(c) == hash(made) and repr(c) == repr(made)
        assert list(c.__dict__) == list(made.__dict__)


def test_warm_search_reuses_the_layout_caches():
    """A second search with the same evaluator finds the plans, optimizer and memory terms the first left (they are
    keyed by the layout object's id: ``StepEvaluator.layout`` hands every search the same objects), so it adds no
    cache entries and gives the same candidates."""
    from workbench import memory
    from workbench.recipe.search import StepEvaluator

    ev = StepEvaluator("llama3-8b", "h200-sxm", "ideal")
    first = search("llama3-8b", "h200-sxm", 8, precisions=("bf16", "fp8"), evaluator=ev)
    entries, memo = len(ev.step._graphs), len(memory._MEMO)
    again = search("llama3-8b", "h200-sxm", 8, precisions=("bf16", "fp8"), evaluator=ev)
    assert list(map(repr, again.candidates)) == list(map(repr, first.candidates))
    assert len(ev.step._graphs) == entries
    assert len(memory._MEMO) == memo


@pytest.mark.parametrize("stack", ["ideal", "torchtitan"])
def test_a_fresh_evaluator_reuses_the_op_graphs_the_last_one_built(stack):
    """Block graphs (the fused step's) and stack-table pieces (torchtitan's) read the model and the configuration,
    never the evaluator's GPU constants or caches, so they are kept per model (and stack) across step models: a
    cold search (a new evaluator) of a model searched before builds none again, and gives the same candidates.
    (Each evaluator still times every op and sums every graph itself: its constants are its own.)"""
    from workbench import step
    from workbench.graph import stacked
    from workbench.stacks import get_stack

    model = _llama_4l()
    first = search(model, "h200-sxm", 8, precisions=("bf16", "fp8"), stack=stack)
    graphs = len(step._SHARED_GRAPHS)
    memo = stacked.shared_memo(model, get_stack(stack))
    pieces = len(memo)
    again = search(model, "h200-sxm", 8, precisions=("bf16", "fp8"), stack=stack)
    assert list(map(repr, again.candidates)) == list(map(repr, first.candidates))
    assert len(step._SHARED_GRAPHS) == graphs and len(memo) == pieces
    assert graphs  # torchtitan's candidates outside its tables are priced as the fused step, from block graphs
    assert (pieces > 1) == (stack == "torchtitan")  # the memo's one entry for a stack with no tables: its owner
