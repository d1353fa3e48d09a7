"""GEMM time model: output tiles, waves over SMs/CUs, padding, K-loop depth, split-K, and the memory roof.

For each candidate library tile (tm x tn) and split-K factor s, the model

1. pads M, N, K up to the matrix instruction's granule (``GPU.matrix_instruction_mnk``) and to whole tiles,
2. counts output tiles and the waves they need over the compute units (the tail wave costs a full wave:
   wave quantization),
3. prices one tile as its padded FLOPs at the per-unit achievable rate (``gemm_fraction``), scaled down for
   small tiles (less operand reuse per tile: ``gemm_tile_intensity_saturation``), plus a per-wave
   prologue/epilogue (``gemm_wave_overhead_us``),
4. bounds the result below by the bytes the GEMM must move at ``gemm_memory_fraction`` of HBM bandwidth,

and keeps the fastest candidate, as a vendor library's heuristic would. A fixed ``gemm_launch_us`` is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.graph.ops import GemmShape, nbytes, output_dtype
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants
from workbench.precision import get_precision

# The tile menu of the vendor library (a guess at what cuBLAS / hipBLASLt pick from; calibrate the constants,
# not this list). Larger tiles first.
TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "nvidia": ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64)),
    "amd": ((256, 256), (256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (32, 32)),
}
SPLIT_K = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_SPLIT_K_DEPTH = 256
"""A split-K slice keeps at least this many K elements (smaller slices waste the pipeline)."""


@dataclass(frozen=True)
class GemmEstimate:
    """The predicted time of one GEMM and the choices behind it."""

    time_s: float
    tile: tuple[int, int]
    split_k: int
    waves: int
    tiles: int
    wave_efficiency: float
    """Useful tiles / (waves x units): 1.0 means no tail-wave waste."""
    padding_efficiency: float
    """Useful FLOPs / padded FLOPs."""
    compute_s: float
    memory_s: float
    bound: str
    """"compute" or "memory"."""


def _round_up(x: int, granule: int) -> int:
    return -(-x // granule) * granule


def gemm_time(shape: GemmShape, dtype: str, gpu: GPU, constants: Constants) -> GemmEstimate:
    """Predicted device time of ``groups`` GEMMs C[m, n] = A[m, k] @ B[k, n] in ``dtype``."""
    precision = get_precision(dtype)
    peak = gpu.peak_tflops(precision.peak_key) * 1e12
    units = gpu.compute_units.value
    per_unit = peak * constants[f"gemm_fraction.{precision.peak_key}"] / units
    inst_m, inst_n, inst_k = gpu.matrix_instruction_mnk.value.get(precision.peak_key, (1, 1, 1))
    m, n, k, groups = shape.m, shape.n, shape.k, shape.groups
    k_padded = _round_up(k, inst_k)
    saturation = constants["gemm_tile_intensity_saturation"]
    wave_overhead = constants["gemm_wave_overhead_us"] * 1e-6

    bytes_moved = groups * ((m * k + k * n) * nbytes(dtype) + m * n * nbytes(output_dtype(dtype)))
    bandwidth = gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"]
    memory_s = bytes_moved / bandwidth

    best: GemmEstimate | None = None
    for tm, tn in TILES[gpu.vendor]:
        tile_m, tile_n = _round_up(tm, inst_m), _round_up(tn, inst_n)
        output_tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n) * groups
        tile_rate = per_unit * min(1.0, (tile_m * tile_n / (tile_m + tile_n)) / saturation)
        for split in SPLIT_K:
            if split > 1 and (output_tiles * split > 2 * units or k_padded / split < MIN_SPLIT_K_DEPTH):
                break
            tiles = output_tiles * split
            waves = math.ceil(tiles / units)
            depth = _round_up(math.ceil(k_padded / split), inst_k)
            tile_s = 2.0 * tile_m * tile_n * depth / tile_rate + wave_overhead
            compute_s = waves * tile_s
            # split-K partial sums: fp32 [m, n] written and read back once per extra slice
            reduce_s = (split - 1) * 2 * m * n * 4 * groups / bandwidth if split > 1 else 0.0
            time_s = max(compute_s + reduce_s, memory_s)
            if best is None or time_s < best.time_s:
                best = GemmEstimate(
                    time_s=time_s,
                    tile=(tile_m, tile_n),
                    split_k=split,
                    waves=waves,
                    tiles=tiles,
                    wave_efficiency=tiles / (waves * units),
                    padding_efficiency=(m * n * k) / (math.ceil(m / tile_m) * tile_m * math.ceil(n / tile_n) * tile_n * k_padded),
                    compute_s=compute_s + reduce_s,
                    memory_s=memory_s,
                    bound="compute" if compute_s + reduce_s >= memory_s else "memory",
                )
    assert best is not None
    launch = constants["gemm_launch_us"] * 1e-6
    return GemmEstimate(**{**best.__dict__, "time_s": best.time_s + launch})
