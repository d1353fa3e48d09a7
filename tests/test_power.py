"""The power limit (workbench.power): a GPU below its rating runs compute-bound ops slower, memory-bound ops not."""

import dataclasses
import math

import pytest

from workbench import power
from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.hardware import get_gpu
from workbench.predict import predict

CFG = TrainingConfig(2, 8192, "bf16", Parallelism(dp=8), "selective", 16)


def test_hopper_exponent_is_the_sxm_to_nvl_datasheet_ratio():
    derived = math.log(835.5 / 989.4) / math.log(400 / 700)
    assert power.SUSTAINED_CLOCK_EXPONENT["hopper"] == pytest.approx(derived, abs=0.005)


def test_a_part_at_its_rating_is_unscaled():
    for name in ("h100-sxm", "b200", "mi300x"):
        assert power.tensor_throughput_scale(get_gpu(name)) == 1.0


def test_the_500w_variant_is_power_limited_against_its_base_rating():
    gpu = get_gpu("h100-sxm-96gb-500w")
    assert (gpu.tdp_w.value, gpu.rated_tdp_w) == (500, 700)
    assert power.tensor_throughput_scale(gpu) == pytest.approx((500 / 700) ** 0.30)
    assert 0.90 < power.tensor_throughput_scale(gpu) < 0.91  # "between SXM and NVL" (the source's footnote)


def test_a_config_limit_scales_as_the_power_ratio_to_the_exponent():
    b200 = get_gpu("b200")
    assert power.tensor_throughput_scale(b200, 750) == pytest.approx(0.75 ** power.clock_exponent(b200))


@pytest.mark.parametrize("watts", [1200, 400])
def test_limits_above_the_rating_or_far_below_it_are_refused(watts):
    with pytest.raises(SpecError, match="power_limit_w"):
        power.tensor_throughput_scale(get_gpu("b200"), watts)


def test_compute_bound_ops_slow_by_the_scale_and_memory_bound_ops_do_not():
    full = predict("llama3-8b", "b200", CFG)
    limited = predict("llama3-8b", "b200", dataclasses.replace(CFG, power_limit_w=750))
    scale = power.tensor_throughput_scale(get_gpu("b200"), 750)
    assert limited.summary.compute_bound_s == pytest.approx(full.summary.compute_bound_s / scale)
    assert limited.summary.memory_bound_s == pytest.approx(full.summary.memory_bound_s)
    assert limited.summary.step_time_s > full.summary.step_time_s
    for a, b in zip(full.ops, limited.ops, strict=True):
        ratio = b.time_s / a.time_s
        assert ratio == pytest.approx(1 / scale if a.bound == "compute" else 1.0), a.op.name


def test_the_variant_prices_slower_than_the_same_part_at_700w():
    variant = get_gpu("h100-sxm-96gb-500w")
    at_700 = dataclasses.replace(variant, tdp_w=dataclasses.replace(variant.tdp_w, value=700), rated_tdp_w=None)
    slow, fast = predict("llama3-8b", variant, CFG).summary, predict("llama3-8b", at_700, CFG).summary
    assert slow.compute_bound_s == pytest.approx(fast.compute_bound_s / power.tensor_throughput_scale(variant))


def test_a_variant_that_overrides_a_peak_is_not_scaled_twice():
    from workbench.hardware import gpu_variant_from_dict

    variant = gpu_variant_from_dict({
        "schema_version": 1, "name": "h100-lowpower-test", "derived_from": "h100-sxm", "display_name": "test",
        "sources": {"t": "test"},
        "overrides": {"tdp_w": {"value": 400, "source": "t", "kind": "estimate"},
                      "peak_dense_tflops.bf16": {"value": 835.5, "source": "t", "kind": "estimate"}}})
    assert variant.rated_tdp_w is None and power.tensor_throughput_scale(variant) == 1.0


def test_search_summary_matches_the_prediction_under_a_limit():
    from workbench.step import StepModel

    cfg = dataclasses.replace(CFG, power_limit_w=800).resolved(StepModel("llama3-8b", "b200").model)
    step = StepModel("llama3-8b", "b200")
    assert step.summary(cfg).step_time_s == step.prediction(cfg).summary.step_time_s
