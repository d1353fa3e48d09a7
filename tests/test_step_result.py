"""The summary's plausibility check (workbench.step_result.check_plausible): its fast path for in-range figures
passes exactly what the figure-by-figure check passes, and raises on what it raises on."""

import dataclasses
import math
import re

import pytest

from workbench.hardware import get_gpu
from workbench.memory import MemoryBreakdown
from workbench.step_result import MFU_CEILING, ImplausiblePredictionError, StepSummary, check_plausible

GOOD = StepSummary(step_time_s=1.0, compute_bound_s=0.6, memory_bound_s=0.2, communication_s=0.1,
                   communication_total_s=0.3, optimizer_s=0.05, bubble_s=0.05, samples_per_s=8.0, tokens_per_s=8e3,
                   mfu=0.4, model_flops_per_step=1e15, memory=MemoryBreakdown(1e9, 1e9, 2e9, 4e9, 1e9, 80e9),
                   max_micro_batch=-1, gpus=8)
FIGURES = ("step_time_s", "tokens_per_s", "samples_per_s", "mfu", "model_flops_per_step")
PARTS = ("compute_bound_s", "memory_bound_s", "optimizer_s", "communication_s", "bubble_s")


def test_in_range_figures_pass():
    check_plausible(GOOD, "m", get_gpu("h200"))
    check_plausible(dataclasses.replace(GOOD, compute_bound_s=0.0, bubble_s=0, mfu=MFU_CEILING), "m", get_gpu("h200"))


@pytest.mark.parametrize("name", FIGURES + PARTS + ("memory.total",))
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, 0.0])
def test_each_figure_out_of_range_is_named(name, value):
    if name == "memory.total":
        summary = dataclasses.replace(GOOD, memory=MemoryBreakdown(value, 0.0, 0.0, 0.0, 0.0, 80e9))  # total: value
    else:
        summary = dataclasses.replace(GOOD, **{name: value})
    if value == 0.0 and name in PARTS:  # a part may be zero (no bubble on one stage)
        check_plausible(summary, "m", get_gpu("h200"))
        return
    with pytest.raises(ImplausiblePredictionError, match=f"the predicted {re.escape(name)} is"):
        check_plausible(summary, "m", get_gpu("h200"))


def test_an_mfu_above_one_is_an_error():
    with pytest.raises(ImplausiblePredictionError, match="above 1"):
        check_plausible(dataclasses.replace(GOOD, mfu=1.01), "m", get_gpu("h200"))
