"""GEMM time model: output tiles, waves over SMs/CUs, padding, K-loop depth, split-K, and the memory roof.

For each candidate library tile (tm x tn) and split-K factor s, the model

1. pads M, N, K up to the matrix instruction's granule (``GPU.matrix_instruction_mnk``) and to whole tiles,
2. counts output tiles and the waves they need over the compute units (the tail wave costs a full wave:
   wave quantization),
3. prices one tile as its padded FLOPs at the per-unit achievable rate (``gemm_fraction``), scaled down for
   small tiles (less operand reuse per tile: ``gemm_tile_intensity_saturation``), plus a per-wave
   prologue/epilogue (``gemm_wave_overhead_us``),
4. caps the rate at that of the fallback kernels when a leading dimension (k of row-major A, n of B and C) is
   not a multiple of 16 bytes: TMA and the fast library kernels need 16-byte aligned rows (CUDA Hopper tuning
   guide: TMA global strides must be multiples of 16 bytes), so the library falls back to kernels that load
   only as many elements at a time as the rows' alignment allows. Those are bound by issuing loads, so their
   FLOP rate depends on the elements per load, not on the element size (on the H200 an unaligned bf16, fp16
   and tf32 GEMM of one shape take the same time): ``gemm_unaligned_efficiency`` of the 16-bit matrix peak
   with 1-element loads, times (elements per load)^``gemm_unaligned_width_exponent``. They also move memory
   slower (``gemm_unaligned_memory_efficiency``), cost more fixed time (``gemm_unaligned_extra_us``) and more
   per wave of tiles (``gemm_unaligned_wave_overhead_us``: with loads too narrow for the asynchronous multi-stage
   copies, each tile's first K-block and its narrow-store epilogue are not hidden behind other work; a guess at
   the mechanism: an H200 profile of the DLRM job, benchmarks/results/h200/train/profile/dlrm-mb32k-compiled_kernels.csv,
   shows cuBLAS running CUTLASS's Turing-era ``cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_*_align1`` (mma.sync,
   64x64 tiles) for its k = 13 GEMMs, where aligned GEMMs run nvjet_sm90 (TMA + wgmma) kernels) and, not
   being power-bound, gain nothing from the short-kernel boost below,
5. adds, per wave, ``gemm_layout_wave_overhead_us.<precision>`` when B is row-major (N-major, as torch.matmul
   passes it) but the GPU's matrix instruction reads that precision only K-major (``GPU.matrix_k_major_only``:
   Hopper's wgmma transposes only 16-bit operands, PTX ISA): the library fixes the layout up tile by tile
   (on the H200 a large tf32 GEMM with a short K runs ~10 us per wave slower than its bf16 rate predicts),
6. adds the memory time, the bytes the GEMM must move at ``gemm_memory_fraction`` of HBM bandwidth, overlapped
   imperfectly with the math: time = (compute^p + memory^p)^(1/p), p = ``gemm_overlap_exponent`` (a large p is
   the roofline's max; the H200 fits p ~ 2.5, so GEMMs near the ridge point run slower than either roof),

and keeps the fastest candidate (tile shape and split-K factor), as a vendor library's heuristic would.
Split-K adds a reduction kernel (one more launch).
Under random data a large GEMM is power-limited (``gemm_fraction``); a tail wave that keeps only some units
busy runs them faster, up to ``gemm_fraction_unthrottled`` (the clock limit), so wave quantization costs
less than whole waves on a power-capped GPU; libraries that split the tail tiles over every unit (stream-K)
recover part of the rest (``gemm_tail_wave_softening``: ~0 whole tail waves, 1 perfectly spread). A matrix-vector product (m or n = 1) or an outer product (k = 1) is memory-bound
(``gemm_gemv_memory_fraction``). A fixed ``gemm_launch_us``
is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.graph.ops import GemmShape, nbytes, output_dtype
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants, derived
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
ALIGNMENT_BYTES = 16
B_K_MAJOR_PRECISIONS = frozenset({"fp8"})
"""Precisions the framework calls with B already K-major (column-major): torch._scaled_mm requires it for fp8;
torch.matmul passes a row-major (N-major) B."""


@dataclass(frozen=True)
class GemmEstimate:
    """The predicted time of one GEMM and the choices behind it."""

    time_s: float
    tile: tuple[int, int]
    split_k: int
    """K slices per output tile."""
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


def _alignment(shape: GemmShape, bytes_per_element: float) -> int:
    alignment = ALIGNMENT_BYTES
    for dim in (shape.k, shape.n):
        row_bytes = int(dim * bytes_per_element)
        lowest = row_bytes & -row_bytes  # lowest set bit = largest power-of-two divisor
        if lowest < alignment:  # min() and max() written out: every GEMM a search prices asks (gemm_time)
            alignment = lowest
    return alignment if alignment > 1 else 1


def alignment_bytes(shape: GemmShape, dtype: str) -> int:
    """The byte alignment of the rows of A (k), B and C (n): the largest power of two, up to 16, that divides
    both row lengths in bytes. GEMMs on the vector units (fp32/fp64) count as aligned: alignment does not
    pick their kernel."""
    precision = get_precision(dtype)
    if precision.peak_key in ("fp32", "fp64"):
        return ALIGNMENT_BYTES
    return _alignment(shape, precision.bytes_per_element)


def unaligned_width(shape: GemmShape, dtype: str) -> int:
    """Elements per load the fallback kernels can issue: the row alignment in elements (at least 1)."""
    return max(1, int(alignment_bytes(shape, dtype) // get_precision(dtype).bytes_per_element))


def is_aligned(shape: GemmShape, dtype: str) -> bool:
    """True when every leading dimension is a multiple of 16 bytes (the fast kernels' requirement)."""
    return alignment_bytes(shape, dtype) >= ALIGNMENT_BYTES


def needs_layout_fixup(dtype: str, gpu: GPU) -> bool:
    """True when the GEMM's row-major (N-major) B must be read by a matrix instruction that takes only K-major
    operands in ``dtype`` on ``gpu``."""
    key = get_precision(dtype).peak_key
    return key not in B_K_MAJOR_PRECISIONS and gpu.reads_k_major_only(key)


def _waves_time(tile_flops: float, tiles: int, units: int, rate: float, rate_max: float, wave_overhead: float,
                softening: float = 0.0) -> float:
    """Full waves at the power-limited per-unit ``rate``; a tail wave of fewer tiles runs its units faster, up to
    ``rate_max`` (the power freed by idle units goes to the busy ones). ``softening`` moves the tail wave's cost
    from a whole wave (0) towards its work spread evenly over every unit (1: stream-K)."""
    full, tail = divmod(tiles, units)
    seconds = full * (tile_flops / rate + wave_overhead)
    if tail:
        whole = tile_flops / min(rate_max, rate * units / tail)
        spread = tail * tile_flops / (units * rate)
        seconds += whole - softening * max(0.0, whole - spread) + wave_overhead
    return seconds


def _overlapped(compute_s: float, memory_s: float, exponent: float) -> float:
    """Compute and memory time of one kernel, overlapped imperfectly: the ``exponent``-norm of the two (infinity
    would be the roofline's max; 1 their sum)."""
    high = memory_s if memory_s > compute_s else compute_s  # max() and min() as the builtins pick, NaN too
    low = memory_s if memory_s < compute_s else compute_s
    return high * (1.0 + (low / high) ** exponent) ** (1.0 / exponent) if high > 0 else 0.0


class _GemmRates:
    """What ``gemm_time`` reads of one GPU, one precision and one set of constants, derived once for every GEMM of
    that precision (``efficiency.derived``): each value is the expression ``gemm_time`` would otherwise evaluate
    per GEMM, in the same order, so the bits are the same. ``*_aligned`` / ``*_unaligned``: the 16-byte aligned
    kernels' values and the fallback kernels' (module docstring, items 4 and 5)."""

    __slots__ = ("bytes_per_element", "vector", "in_bytes", "out_bytes", "peak", "units", "gemv_bandwidth",
                 "launch_aligned", "launch_unaligned", "bandwidth_aligned", "bandwidth_unaligned",
                 "wave_overhead_aligned", "wave_overhead_unaligned", "unaligned_efficiency",
                 "unaligned_width_exponent", "inst_k", "tile_sizes", "tiles", "twins", "overlap", "softening", "tau",
                 "full", "boost")

    def __init__(self, gpu: GPU, constants: Constants, dtype: str):
        precision = get_precision(dtype)
        key = precision.peak_key
        self.bytes_per_element = precision.bytes_per_element
        self.vector = key in ("fp32", "fp64")  # alignment does not pick the vector units' kernel
        self.in_bytes, self.out_bytes = nbytes(dtype), nbytes(output_dtype(dtype))
        self.peak = peak = gpu.peak_tflops(key) * 1e12
        self.units = units = gpu.compute_units.value
        launch = constants["gemm_launch_us"] * 1e-6
        self.launch_aligned = launch
        self.launch_unaligned = launch + constants["gemm_unaligned_extra_us"] * 1e-6
        bandwidth = gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_memory_fraction"]
        self.bandwidth_aligned = bandwidth
        self.bandwidth_unaligned = bandwidth * constants["gemm_unaligned_memory_efficiency"]
        self.gemv_bandwidth = gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["gemm_gemv_memory_fraction"]
        wave_overhead = constants["gemm_wave_overhead_us"] * 1e-6
        # the fallback kernels pay more per wave of tiles than the pipelined ones (see the module docstring)
        self.wave_overhead_unaligned = wave_overhead + constants["gemm_unaligned_wave_overhead_us"] * 1e-6
        if needs_layout_fixup(dtype, gpu):  # the aligned kernels fix the layout up (module docstring, item 5)
            wave_overhead += constants[f"gemm_layout_wave_overhead_us.{key}"] * 1e-6
        self.wave_overhead_aligned = wave_overhead
        self.unaligned_efficiency = constants["gemm_unaligned_efficiency"]
        self.unaligned_width_exponent = constants["gemm_unaligned_width_exponent"]
        per_unit = peak * constants[f"gemm_fraction.{key}"] / units
        # A partial wave draws less power, so its units clock higher, up to the unthrottled limit.
        per_unit_max = max(per_unit, peak * constants[f"gemm_fraction_unthrottled.{key}"] / units)
        inst_m, inst_n, self.inst_k = gpu.matrix_instruction_mnk.value.get(key, (1, 1, 1))
        saturation = constants["gemm_tile_intensity_saturation"]
        tiles = []  # (tile_m, tile_n, 2 tile_m tile_n, rate, rate_max): the tile menu, padded to the instruction
        for tm, tn in TILES[gpu.vendor]:
            tile_m, tile_n = _round_up(tm, inst_m), _round_up(tn, inst_n)
            intensity = tile_m * tile_n / (tile_m + tile_n) / saturation
            tiles.append((tile_m, tile_n, 2.0 * tile_m * tile_n, per_unit * min(1.0, intensity),
                          per_unit_max * min(1.0, intensity)))
        self.tiles = tuple(tiles)
        self.tile_sizes = tuple((tile_m, tile_n) for tile_m, tile_n, *_ in tiles)
        self.twins = tuple(next((j for j in range(i) if tiles[j][2:] == tile[2:]), None)
                           for i, tile in enumerate(tiles))
        """Per tile, an earlier tile of the same FLOPs and rates (128 x 256 after 256 x 128), or None: on a GEMM
        where both have as many output tiles, every split prices them the same, and the earlier one is kept."""
        self.overlap = constants["gemm_overlap_exponent"]
        self.softening = constants["gemm_tail_wave_softening"]
        self.tau = constants["gemm_power_time_constant_us"] * 1e-6
        self.full = constants[f"gemm_fraction.{key}"]
        self.boost = max(self.full, constants[f"gemm_fraction_unthrottled.{key}"])


def gemm_time(shape: GemmShape, dtype: str, gpu: GPU, constants: Constants) -> GemmEstimate:
    """Predicted device time of ``groups`` GEMMs C[m, n] = A[m, k] @ B[k, n] in ``dtype``."""
    r: _GemmRates = derived(_GemmRates, gpu, constants, dtype)
    m, n, k, groups = shape.m, shape.n, shape.k, shape.groups
    units = r.units
    bytes_moved = groups * ((m * k + k * n) * r.in_bytes + m * n * r.out_bytes)
    if min(m, n, k) == 1:
        # matrix-vector (m or n = 1) or outer product (k = 1): libraries run a GEMV/elementwise kernel
        # bound by moving the matrix, whatever the alignment, at its own achievable bandwidth
        memory_s = bytes_moved / r.gemv_bandwidth
        return GemmEstimate(memory_s + r.launch_aligned, (1, 1), 1, 1, 1, 1.0, 1.0, 0.0, memory_s, "memory")

    tiles = r.tiles
    fallback = 0.0
    alignment = ALIGNMENT_BYTES if r.vector else _alignment(shape, r.bytes_per_element)
    if alignment < ALIGNMENT_BYTES:
        width = max(1, int(alignment // r.bytes_per_element))  # unaligned_width
        efficiency = min(1.0, r.unaligned_efficiency * width ** r.unaligned_width_exponent)
        fallback = r.peak * r.bytes_per_element / 2 * efficiency / units
        tiles = tuple((tile_m, tile_n, flops, min(rate, fallback), min(rate_max, fallback))
                      for tile_m, tile_n, flops, rate, rate_max in tiles)
        bandwidth, launch, wave_overhead = r.bandwidth_unaligned, r.launch_unaligned, r.wave_overhead_unaligned
    else:
        bandwidth, launch, wave_overhead = r.bandwidth_aligned, r.launch_aligned, r.wave_overhead_aligned
    memory_s = bytes_moved / bandwidth
    inst_k = r.inst_k
    k_padded = _round_up(k, inst_k)
    overlap, softening = r.overlap, r.softening

    # Split-K factors worth trying, each with its K-loop depth and the cost of its partial sums (fp32 [m, n]
    # written and read back once per extra slice, by a second kernel): a slice keeps MIN_SPLIT_K_DEPTH of K, and
    # the split tiles stay within two waves -- here for the tile with the fewest output tiles, below per tile.
    output_tiles_of = [math.ceil(m / tile_m) * math.ceil(n / tile_n) * groups for tile_m, tile_n in r.tile_sizes]
    fewest = min(output_tiles_of)
    splits = []
    for split in SPLIT_K:
        if split > 1 and (fewest * split > 2 * units or k_padded / split < MIN_SPLIT_K_DEPTH):
            break
        partial_sums_s = (split - 1) * 2 * m * n * 4 * groups / bandwidth + launch if split > 1 else 0.0
        splits.append((split, _round_up(math.ceil(k_padded / split), inst_k), partial_sums_s))

    # The loop below is ``_waves_time`` and ``_overlapped`` written out, expression for expression (so the bits are
    # theirs): it runs for every tile and split of every GEMM a recipe search prices, and the two calls were a third
    # of its time. No estimate object is made per candidate either.
    inverse_overlap = 1.0 / overlap
    best_time, best = math.inf, None  # (tile_m, tile_n, split, tiles, compute_s) of the fastest candidate
    for (tile_m, tile_n, tile_flops_per_depth, rate, rate_max), output_tiles, twin in zip(tiles, output_tiles_of,
                                                                                          r.twins):
        if twin is not None and output_tiles_of[twin] == output_tiles:
            continue  # the same arithmetic as its twin's, which is kept on a tie
        all_units_rate = rate * units
        for split, depth, partial_sums_s in splits:
            if split > 1 and output_tiles * split > 2 * units:
                break
            tiles_split = output_tiles * split
            tile_flops = tile_flops_per_depth * depth  # _waves_time(tile_flops, tiles_split, units, rate, ...)
            full, tail = divmod(tiles_split, units)
            compute_s = full * (tile_flops / rate + wave_overhead)
            if tail:  # min() and max() as the builtins pick, without their calls (each parses keyword arguments)
                tail_rate = all_units_rate / tail
                whole = tile_flops / (tail_rate if tail_rate < rate_max else rate_max)
                spread = tail * tile_flops / all_units_rate
                excess = whole - spread
                compute_s += whole - softening * (excess if excess > 0.0 else 0.0) + wave_overhead
            if split > 1:
                compute_s += partial_sums_s
            if compute_s >= best_time:  # its time is >= high >= compute_s (below): never the strictly faster
                continue  # one that replaces the best, so the overlap's two powers are skipped
            # _overlapped(compute_s, memory_s, overlap): max() and min() of the two as the builtins pick (NaN too)
            high = memory_s if memory_s > compute_s else compute_s
            low = memory_s if memory_s < compute_s else compute_s
            time_s = high * (1.0 + (low / high) ** overlap) ** inverse_overlap if high > 0 else 0.0
            if time_s < best_time:
                best_time, best = time_s, (tile_m, tile_n, split, tiles_split, compute_s)
    tile_m, tile_n, split, tiles_split, waves_s = best
    # Short kernels finish before the power cap bites: their rate rises towards the unthrottled one
    # with time constant gemm_power_time_constant_us (a power-management window; guess, calibrate).
    tau, full = r.tau, r.full
    boost = full if fallback else r.boost
    fraction = full + (boost - full) * tau / (tau + waves_s)
    compute_s = waves_s * full / fraction
    waves = math.ceil(tiles_split / units)
    padded = math.ceil(m / tile_m) * tile_m * math.ceil(n / tile_n) * tile_n * k_padded
    estimate = object.__new__(GemmEstimate)  # the fields set without the frozen __init__ (as graph.ops.new_op)
    estimate.__dict__.update(time_s=_overlapped(compute_s, memory_s, overlap) + launch, tile=(tile_m, tile_n),
                             split_k=split, waves=waves, tiles=tiles_split,
                             wave_efficiency=tiles_split / (waves * units), padding_efficiency=m * n * k / padded,
                             compute_s=compute_s, memory_s=memory_s,
                             bound="compute" if compute_s >= memory_s else "memory")
    return estimate
