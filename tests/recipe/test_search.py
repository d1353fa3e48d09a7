"""Search: the fast evaluator reproduces predict(); ranking, feasibility, Pareto set and enumeration."""

import math

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError, WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import get_model
from workbench.predict import predict
from workbench.recipe.search import FastEvaluator, layouts, search


@pytest.mark.parametrize("model, gpu, gpus, global_batch", [
    ("llama3-8b", "h200", 8, 0),
    ("llama3-70b", "h100", 32, 256),
    ("mixtral-8x7b", "mi300x", 16, 0),
    ("dlrm-dcnv2", "mi350x", 8, 0),
    ("hstu-gr", "b200", 4, 0),
])
def test_fast_evaluator_matches_predict_on_a_sample(model, gpu, gpus, global_batch):
    result = search(model, gpu, gpus, global_batch=global_batch)
    sample = [c for c in result.candidates if c.fits][::5][:12]
    assert sample
    for c in sample:
        s = predict(model, gpu, c.config).summary
        assert c.step_time_s == pytest.approx(s.step_time_s, rel=1e-9)
        assert c.tokens_per_s == pytest.approx(s.tokens_per_s, rel=1e-9)
        assert c.samples_per_s == pytest.approx(s.samples_per_s, rel=1e-9)
        assert c.mfu == pytest.approx(s.mfu, rel=1e-9)
        assert c.communication_s == pytest.approx(s.communication_s, rel=1e-9, abs=1e-15)
        assert c.peak_memory_gb == pytest.approx(s.memory.total / 1e9, rel=1e-12)
        assert c.fits == s.memory.fits


def test_all_checkpointing_modes_and_pipeline_depths_match_predict():
    ev = FastEvaluator("llama3-8b", "h100")
    for ac in ("none", "selective", "full"):
        for pp in (1, 2, 4):
            cfg = TrainingConfig(2, 4096, "bf16", Parallelism(dp=8 // pp, pp=pp), ac, global_batch=8 * 2 // pp * 4)
            cfg = cfg.resolved(ev.model)
            assert ev.evaluate(cfg).step_time_s == pytest.approx(predict("llama3-8b", "h100", cfg).summary.step_time_s,
                                                                 rel=1e-9)


def test_ranked_are_feasible_and_fastest_first():
    result = search("llama3-8b", "h100", 8)
    ranked = result.ranked
    assert ranked and all(c.fits for c in ranked)
    assert [c.tokens_per_s for c in ranked] == sorted((c.tokens_per_s for c in ranked), reverse=True)
    assert result.best is ranked[0]
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
    result = search("llama3-8b", "h100", 8, global_batch=64, precisions=["bf16", "fp8"])
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


def test_leaders_get_the_largest_micro_batch_that_fits():
    from workbench.recipe import revised_model

    model = revised_model("llama3-8b", {"num_layers": 4})
    result = search(model, "h200", 1)
    best = result.best.config
    assert best.micro_batch & (best.micro_batch - 1)  # not a power of two: filled up to the memory limit
    bigger = TrainingConfig(best.micro_batch + 1, best.seq_len, best.precision, best.parallelism,
                            best.activation_checkpointing)
    assert not FastEvaluator(model, "h200").evaluate(bigger).fits
    fixed = search(model, "h200", 1, global_batch=16)  # a fixed global batch keeps divisors of it only
    assert all(16 % c.config.micro_batch == 0 for c in fixed.candidates)
