"""A GPU run below its rated board power: the sustained tensor-core clock, and so the throughput of compute-bound
ops, falls with the power limit; memory-bound ops (HBM-bound, their power mostly the memory's) are left as they are.

    scale = (power_limit_w / rated_tdp_w) ** exponent        (1 at or above the rating)

The power limit is a config's ``power_limit_w``, else a power-limited variant's ``tdp_w`` (``GPU.rated_tdp_w`` holds
the part's rating); the efficiency constants (``gemm_fraction``) describe the part at its rating, so the scale
multiplies them. A compute-bound op's time is divided by the scale (``workbench.step.StepModel``).

The exponent, per architecture:

- hopper: 0.30, derived from NVIDIA's datasheets of two parts with the same 132-SM GH100 die: the H100 SXM (989.4
  dense bf16 TFLOP/s at up to 700 W, specs/gpus/h100-sxm.yaml) and the H100 NVL (1,671 sparse = 835.5 dense at up to
  400 W, https://www.nvidia.com/en-us/data-center/h100/): ln(835.5 / 989.4) / ln(400 / 700) = 0.302. The torchtitan
  team's 500 W H100s (specs/gpus/variants/h100-sxm-96gb-500w.yaml) peak "between SXM and NVL" by their own
  footnote; the exponent puts them at 0.904 x SXM.
- every other architecture: the Hopper value, a guess (calibrate me: time one large GEMM at two ``nvidia-smi -pl``
  / ``rocm-smi --setpoweroverdrive`` limits, exponent = ln(t_full / t_limited) / ln(limit / rating)).

Valid for moderate limits, roughly half the rating and up: far below it the clock falls faster (a GB300 capped at
500 W of 1,400 W ran cuBLAS GEMMs at ~617 TFLOP/s against ~1,600-2,174 at 1,400 W, facebookexperimental/triton PR
#2023: an exponent near 1), so ``MIN_POWER_FRACTION`` refuses lower limits.
"""

from __future__ import annotations

from workbench.errors import SpecError
from workbench.hardware import GPU

SUSTAINED_CLOCK_EXPONENT: dict[str, float] = {"hopper": 0.30}
"""Per architecture: d ln(sustained tensor throughput) / d ln(power limit) (the module docstring: derived for Hopper
from the H100 SXM and NVL datasheets)."""
DEFAULT_CLOCK_EXPONENT = 0.30
"""Architectures without their own figure: Hopper's (guess, calibrate me)."""
MIN_POWER_FRACTION = 0.5
"""The lowest power limit, as a share of the rating, the exponent is taken to hold for (the module docstring)."""


def clock_exponent(gpu: GPU) -> float:
    return SUSTAINED_CLOCK_EXPONENT.get(gpu.architecture, DEFAULT_CLOCK_EXPONENT)


def rated_power_w(gpu: GPU) -> float:
    """The part's rated board power: a power-limited variant's base rating, else its ``tdp_w``."""
    return float(gpu.rated_tdp_w or gpu.tdp_w.value)


def power_limit_w(gpu: GPU, requested_w: float = 0) -> float:
    """The limit the GPU runs under: ``requested_w`` (a config's ``power_limit_w``; 0: none), else its ``tdp_w``
    (a power-limited variant's limit). Refuses a limit above the rating or below ``MIN_POWER_FRACTION`` of it."""
    rated = rated_power_w(gpu)
    limit = float(requested_w or gpu.tdp_w.value)
    if not MIN_POWER_FRACTION * rated <= limit <= rated:
        raise SpecError("training config", "power_limit_w", requested_w or limit,
                        f"{MIN_POWER_FRACTION * rated:g}..{rated:g} W for {gpu.name} (rated {rated:g} W; below "
                        f"{MIN_POWER_FRACTION:.0%} of it the clock-power exponent does not hold), or 0 for the "
                        "GPU's own")
    return limit


def tensor_throughput_scale(gpu: GPU, requested_w: float = 0) -> float:
    """Sustained tensor throughput under the power limit, as a share of the rated part's: 1 at the rating."""
    limit = power_limit_w(gpu, requested_w)
    return (limit / rated_power_w(gpu)) ** clock_exponent(gpu)


__all__ = ["DEFAULT_CLOCK_EXPONENT", "MIN_POWER_FRACTION", "SUSTAINED_CLOCK_EXPONENT", "clock_exponent",
           "power_limit_w", "rated_power_w", "tensor_throughput_scale"]
