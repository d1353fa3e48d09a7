"""The flash-attention forward kernel's time model per config: ``time = coefficients . terms(shape, config)``.

The kernel runs one program per (query block, batch x head): ``ceil(S / BLOCK_M) * B * Hq`` programs, each
walking key/value blocks of BLOCK_N (causal: only up to its diagonal, the longest programs launched first). The
terms count, per SM/CU, the key/value steps on the critical path (total steps spread over the units, but never
fewer than the longest program's), the programs, and the launch.
"""

from __future__ import annotations

import math

from workbench.hardware import GPU
from workbench.perf.efficiency import Constants
from workbench.precision import get_precision

TERMS = ("kv_steps", "kv_steps_x_fill", "programs_per_unit", "launch")
SOFTMAX_COST = 0.5
"""Online-softmax work (exp, max, rescale) per key/value step, relative to the two dots. A guess."""


def _kv_steps(seq: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int]:
    """(total key/value steps of one head's query blocks, steps of the longest query block)."""
    blocks = math.ceil(seq / block_m)
    full = math.ceil(seq / block_n)
    if not causal:
        return blocks * full, full
    # query block i (0-based) reads ceil(min(seq, (i + 1) block_m) / block_n) blocks: every block but the last
    # ends at (i + 1) block_m < seq. The sum over them in closed form keeps a 16k causal shape under 1 ms.
    total = _floor_sum(blocks - 1, block_n, block_m, block_m + block_n - 1) + full
    return total, full


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a i + b) / m) for i in range(n)) for non-negative integers (m > 0), in O(log) steps (the
    Euclid-like reduction of the classic floor-sum identity)."""
    total = 0
    while n > 0:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            break
        n, b = divmod(y_max, m)
        m, a = a, m
    return total


def terms(config: dict, shape: dict, units: int) -> tuple[float, ...]:
    """``shape``: batch, seq, heads_q, head_dim, causal (heads_kv does not change the work)."""
    heads = shape["batch"] * shape["heads_q"]
    per_head, longest = _kv_steps(shape["seq"], config["BLOCK_M"], config["BLOCK_N"], shape["causal"])
    programs = math.ceil(shape["seq"] / config["BLOCK_M"]) * heads
    steps = max(math.ceil(per_head * heads / units), longest)
    fill = min(1.0, programs / units)
    return (steps, steps * fill, math.ceil(programs / units), 1.0)


def shared_bytes(config: dict, head_dim: int, operand_bytes: int, vendor: str) -> int:
    """The Q tile plus num_stages buffers of the K and V tiles (NVIDIA; matches the OutOfResources figures of
    the H200 sweep, e.g. 294912 B for 128x128 tiles, 4 stages, d=128); AMD keeps one K/V buffer per stage - 1."""
    stages = config["num_stages"] - (1 if vendor == "amd" else 0)
    return (config["BLOCK_M"] + 2 * max(1, stages) * config["BLOCK_N"]) * head_dim * operand_bytes


def occupancy(config: dict, head_dim: int, gpu: GPU, operand_bytes: int) -> int:
    """Programs resident per SM/CU by shared memory/LDS (0: does not fit; one program's limit is 1 KB under
    the unit's total on NVIDIA: CUDA reserves it per block)."""
    shared = shared_bytes(config, head_dim, operand_bytes, gpu.vendor)
    limit = gpu.shared_memory_kb.value * 1024 - (1024 if gpu.vendor == "nvidia" else 0)
    return 0 if shared > limit else int(min(4, limit // shared))


def spec_coefficients(config: dict, shape: dict, gpu: GPU, dtype: str, constants: Constants) -> tuple[float, ...]:
    precision = get_precision(dtype)
    units = gpu.compute_units.value
    d = shape["head_dim"]
    rate = gpu.peak_tflops(precision.peak_key) * 1e12 * constants[f"gemm_fraction.{precision.peak_key}"] / units
    dots = 4.0 * config["BLOCK_M"] * config["BLOCK_N"] * d / rate
    loads = 2 * config["BLOCK_N"] * d * precision.bytes_per_element / (gpu.hbm_bandwidth_tb_s.value * 1e12 * 2.5 / units)
    step = max(dots * (1 + SOFTMAX_COST), loads)
    return (step, 0.0, config["num_stages"] * step, constants["gemm_launch_us"] * 1e-6)
