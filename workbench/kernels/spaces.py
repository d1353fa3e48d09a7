"""The config spaces of the GEMM and flash-attention kernels, per backend, in pure Python.

The kernel selector (``workbench.select``) ranks these spaces on a CPU without torch or triton, so they live
apart from the kernels (``gemm.py`` and ``attention.py`` re-export them as ``config_space``).
"""

from __future__ import annotations

import itertools

from workbench.kernels._common import KernelInputError, check

HEAD_DIMS = (16, 32, 64, 128, 256)
"""Head dimensions the attention kernel takes (tl.arange needs a power of two)."""


# ------------------------------------------------------------------------------------------------------ GEMM
# Config space. Every pruning bound below that is not a hardware limit is a guess: calibrate it by timing the
# whole space with ``workbench bench`` on the target GPU and widening the bound if a pruned config would win.
BLOCK_MN = (64, 128, 256)
BLOCK_K = (32, 64, 128)
GROUP_M = 8
ACCUMULATOR_REGS_PER_LANE = (64, 128)
"""fp32 accumulator registers per lane, BLOCK_M*BLOCK_N / (num_warps * lanes): fewer leaves warps with too
little work per K step, more leaves too few of the 255 (NVIDIA) / 512 (AMD, VGPR+AGPR) registers for operands
and addresses and spills. A guess."""
SM90_SHARED_BYTES = 227 * 1024
"""Shared memory one block may use on compute capability 9.0 (H100/H200): CUDA C++ Programming Guide,
"Technical Specifications per Compute Capability"."""
NVIDIA_MIN_INFLIGHT_BYTES = 256
"""num_stages * BLOCK_K * dtype bytes: the K bytes of each row the pipeline keeps in flight; shallower
pipelines expose the HBM latency. A guess."""
AMD_LDS_BYTES = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}
"""LDS per CU (and per workgroup): 64 KiB on CDNA3 (MI300X/MI325X), 160 KiB on CDNA4 (MI350X/MI355X), per
AMD's CDNA3 ISA guide and CDNA4 whitepaper."""
AMD_MIN_K_SLICE_BYTES = 128
"""BLOCK_K * dtype bytes on AMD: with num_stages=2 only one K step is prefetched, so each step must be deep.
A guess."""
AMD_WAVES_PER_EU_2_MAX_ACC = 64
"""waves_per_eu=2 caps a wave at 256 of the 512 registers per lane; only accumulators up to this many
registers leave room for the operands. A guess."""


def gemm_config_space(backend: str, *, arch: str = "gfx942", dtype_bytes: int = 2) -> list[dict]:
    """Launch configs for ``backend`` ("cuda", "hip" or "interpreter"), the default (the wrapper's
    ``config=None``) first. ``arch`` picks the AMD target ("gfx942" or "gfx950"); ``dtype_bytes`` is the operand
    size (1 fp8, 2 bf16/fp16, 4 fp32), which sets the shared memory/LDS a config needs."""
    check(dtype_bytes in (1, 2, 4), "dtype_bytes", dtype_bytes, "1 (fp8), 2 (bf16/fp16) or 4 (fp32)")
    if backend == "interpreter":  # small tiles keep the CPU tests fast
        return [dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=GROUP_M, num_warps=4, num_stages=1)]
    if backend == "cuda":
        return _nvidia_configs(dtype_bytes)
    if backend == "hip":
        check(arch in AMD_LDS_BYTES, "arch", repr(arch), f"one of {tuple(AMD_LDS_BYTES)}")
        return _amd_configs(arch, dtype_bytes)
    raise KernelInputError(f"backend: got {backend!r}, expected 'cuda', 'hip' or 'interpreter'")


def _accumulator_fits(block_m: int, block_n: int, num_warps: int, lanes: int) -> bool:
    low, high = ACCUMULATOR_REGS_PER_LANE
    return low <= block_m * block_n // (num_warps * lanes) <= high


# The config=None choice on sm_90, per operand size: the best single config over the Llama 3 8B/70B
# projections in benchmarks/results/h200/kernels/gemm_sweep.csv (bf16: 0.976 of cuBLAS, geometric mean;
# fp8: 0.779 of _scaled_mm). tf32 was not swept: its default is the bf16 one at the same bytes per K step
# (BLOCK_K 32 fp32 = 64 bf16 = 128 bytes, the same 192 KiB of stages), a guess until
# benchmarks/kernels/elementwise.py's tf32 sweep ranks it.
_NVIDIA_DEFAULTS = {
    1: dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=GROUP_M, num_warps=8, num_stages=3),
    2: dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=GROUP_M, num_warps=8, num_stages=4),
    4: dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=GROUP_M, num_warps=8, num_stages=4),
}


def _nvidia_configs(dtype_bytes: int) -> list[dict]:
    """sm_90: Triton keeps num_stages copies of the A and B tiles in shared memory (checked against
    ``metadata.shared`` of sm_90 builds with triton 3.7.1)."""
    configs = []
    for bm, bn, bk, warps, stages in itertools.product(BLOCK_MN, BLOCK_MN, BLOCK_K, (4, 8), (3, 4, 5)):
        shared = stages * (bm * bk + bk * bn) * dtype_bytes
        if (shared <= SM90_SHARED_BYTES and stages * bk * dtype_bytes >= NVIDIA_MIN_INFLIGHT_BYTES
                and _accumulator_fits(bm, bn, warps, lanes=32)):
            configs.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, num_warps=warps,
                                num_stages=stages))
    default = _NVIDIA_DEFAULTS[dtype_bytes]
    return _default_first(configs, default)


def _amd_configs(arch: str, dtype_bytes: int) -> list[dict]:
    """CDNA3/CDNA4: num_stages=2 (ROCm's advice for a single GEMM). Triton's AMD pipeliner then keeps
    num_stages - 1 = one copy of the A and B tiles in LDS (checked against ``metadata.shared`` of gfx942 and gfx950
    builds with triton 3.7.1). kpack 2 only on gfx942: gfx950 accepts only 1."""
    stages = 2
    kpacks = (1, 2) if arch == "gfx942" else (1,)
    configs = []
    for bm, bn, bk, warps, waves, nonkdim, kpack in itertools.product(
            BLOCK_MN, BLOCK_MN, BLOCK_K, (4, 8), (0, 2), (16, 32), kpacks):
        lds = (stages - 1) * (bm * bk + bk * bn) * dtype_bytes
        accumulator = bm * bn // (warps * 64)  # 64-lane wavefronts
        if (lds <= AMD_LDS_BYTES[arch] and bk * dtype_bytes >= AMD_MIN_K_SLICE_BYTES
                and _accumulator_fits(bm, bn, warps, lanes=64)
                and (waves == 0 or accumulator <= AMD_WAVES_PER_EU_2_MAX_ACC)):
            configs.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, num_warps=warps,
                                num_stages=stages, waves_per_eu=waves, matrix_instr_nonkdim=nonkdim, kpack=kpack))
    default = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128 // dtype_bytes, GROUP_M=GROUP_M, num_warps=4,
                   num_stages=stages, waves_per_eu=0, matrix_instr_nonkdim=16, kpack=kpacks[-1])
    return _default_first(configs, default)


def _default_first(configs: list[dict], default: dict) -> list[dict]:
    assert default in configs, f"the default config {default} was pruned"
    return [default] + [c for c in configs if c != default]


# ------------------------------------------------------------------------------------------------ split-K
SPLIT_K_FACTORS = (2, 4, 8)
"""K slices per output tile in the split-K family (``gemm.py``'s SPLIT_K). cuBLAS-style heuristics split K when the
output tiles cannot fill the GPU (skinny M <= 256, small M x N with a long K); the vendor model here searches
1-16 (``workbench.perf.gemm.SPLIT_K``). Which factors win is a guess until a sweep times them."""
SPLIT_K_MAX_TILE = 128 * 128
"""The split-K family takes gemm.py's tiles up to this many outputs: large tiles leave a skinny GEMM few programs
per split, and each slice's fp32 partial tile is written once."""
SPLIT_K_MIN_STEPS = 2
"""Each K slice keeps at least this many BLOCK_K steps (``split_k_fits``): shorter slices are all pipeline fill."""


def split_k_config_space(dtype_bytes: int = 2) -> list[dict]:
    """gemm.py's sm_90 configs of tiles up to ``SPLIT_K_MAX_TILE`` outputs, each with ``SPLIT_K`` in
    ``SPLIT_K_FACTORS``: the split-K family for NVIDIA (AMD's is not cross-compiled yet, so not offered)."""
    return [dict(config, SPLIT_K=split) for config in _nvidia_configs(dtype_bytes)
            if config["BLOCK_M"] * config["BLOCK_N"] <= SPLIT_K_MAX_TILE for split in SPLIT_K_FACTORS]


def split_k_fits(config: dict, k: int) -> bool:
    """Whether a split config's slices keep ``SPLIT_K_MIN_STEPS`` BLOCK_K steps each for this K (True unsplit)."""
    split = config.get("SPLIT_K", 1)
    return split == 1 or -(-k // config["BLOCK_K"]) >= split * SPLIT_K_MIN_STEPS


def is_split_k(config: dict | None) -> bool:
    """True for a config with SPLIT_K > 1 (gemm.py's split-K family, or the TMA kernel's)."""
    return bool(config) and config.get("SPLIT_K", 1) > 1


TMA_SPLIT_K_FACTORS = (2, 3, 4, 6, 8)
"""K slices per output tile of the TMA kernel's split-K configs (``gemm_tma.py``: the units of one tile spread over
the persistent programs; the last to arrive adds the partials and runs the epilogue, no second launch)."""


TMA_SPLIT_SPILL_FREE = ((256, 128, 128, 8, 3), (128, 128, 256, 8, 3))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the fp8 TMA configs whose split-K sm_90 builds spill nothing
at every ``TMA_SPLIT_K_FACTORS`` (triton 3.7.1, ``gemm_tma.crosscompile``; a CPU test checks it)."""


def tma_split_config_space(dtype_bytes: int) -> list[dict]:
    """The TMA kernel's split-K configs: fp8 only, its configs without warp specialization, each with ``SPLIT_K`` in
    ``TMA_SPLIT_K_FACTORS``; ranked only where a tile's units fill at most one wave (``tma_split_fills``).

    Measured on the H200 (benchmarks/results/h200/kernels/tma_split/: every split of 3-4 TMA configs on 21
    shapes, fp8 and bf16): where the units fill one wave, fp8 split configs ran 1.05-1.33x torch._scaled_mm on the
    skinny, long-K GEMMs (M = 16-256, K = 8192-14336: 0.99-1.23 with the space before). Past one wave they lose
    (16 x 4096 x 14336, split 4 -> 6: 1.33 -> 0.88): the split loop is not flattened (Triton's nested-loop fusion
    fails on the last unit's branch), so each unit fills its pipeline anew. bf16 is left out: its best split config
    ran 0.77-0.96 of torch.matmul on those shapes, below gemm.py's configs on every one. Of the fp8 configs, the
    ones whose split builds spill on sm_90 at some SPLIT_K (triton 3.7.1: 256x128x128 s4, 128x128x128 w8 s4 at split
    4, 128x128x128 w4 s4: 8-24 bytes) are left out (``TMA_SPLIT_SPILL_FREE``)."""
    if dtype_bytes != 1:
        return []
    return [dict(config, SPLIT_K=split) for config in tma_config_space(1, warp_specialize=False)
            if _tma_tile(config) in TMA_SPLIT_SPILL_FREE for split in TMA_SPLIT_K_FACTORS]


def _tma_tile(config: dict) -> tuple:
    return tuple(config[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))


def tma_split_fills(config: dict, m: int, n: int, units: int) -> bool:
    """Whether a TMA split-K config's work units (output tiles x SPLIT_K) fit in one wave of ``units`` programs
    (True for any other config)."""
    if not (is_tma(config) and is_split_k(config)):
        return True
    return -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"]) * config["SPLIT_K"] <= units


# ----------------------------------------------------------------------------------- skinny GEMMs: swap-AB
SKINNY_MAX_M = 64
"""The swap-AB family is offered for M up to this (issue 20: M = 16 and 64 ran 0.75-0.90 of cuBLAS). gemm.py's
smallest BLOCK_M is 64 (one Hopper wgmma is 64 rows per warpgroup), so at M = 16 three quarters of every MMA and of
every A tile is padding; swapped, M is the kernel's N, which a wgmma takes in steps of 8. A guess: M = 128 and 256
already ran 0.95-1.6 of cuBLAS with the plain space (benchmarks/results/h200/kernels/broad/gemm.csv)."""
SKINNY_ROWS = (64, 128)
"""BLOCK_M over N of a swap-AB config (one 4-warp warpgroup per 64 rows)."""
SKINNY_COLS = (16, 32, 64)
"""BLOCK_N over M of a swap-AB config: the M = 16, 32 and 64 of skinny inference and decode GEMMs."""
SKINNY_BLOCK_K = (64, 128, 256)
"""A skinny GEMM streams B (the weight) once: deep K steps keep more of it in flight per stage."""
SKINNY_SPLIT_K = (1, 2, 4, 8)
"""K slices of a swap-AB config: 4096 / 64 = 64 N tiles fill half the 132 SMs unsplit, split 2-4 fill them."""
SKINNY_MIN_INFLIGHT_BYTES = 32 * 1024
"""num_stages * BLOCK_M * BLOCK_K * dtype bytes: the bytes of B^T each program keeps in flight. At the H200's
4.8 TB/s (datasheet) over 132 SMs and ~1 us of DRAM latency (a guess) an SM must keep ~36 KB in flight to stream at
the full bandwidth; one resident program at 32 KB or two at 16 KB (a guess, calibrate me with
benchmarks/kernels/gemm_skinny_sweep.py)."""


def skinny_config_space(dtype_bytes: int = 2) -> list[dict]:
    """gemm.py's swap-AB configs for sm_90 (``gemm.plan_gemm``: C^T = B^T A^T), split-K or not: 4 warps (one
    warpgroup), a [BLOCK_M, BLOCK_K] tile of B^T and a [BLOCK_K, BLOCK_N] tile of A^T per stage within the shared
    memory, ``SKINNY_MIN_INFLIGHT_BYTES`` of B^T in flight. NVIDIA only, as the split-K family."""
    check(dtype_bytes in (1, 2), "dtype_bytes", dtype_bytes, "1 (fp8) or 2 (bf16/fp16)")
    configs = []
    for bm, bn, bk, stages, split in itertools.product(SKINNY_ROWS, SKINNY_COLS, SKINNY_BLOCK_K, (3, 4, 5),
                                                       SKINNY_SPLIT_K):
        shared = stages * (bm + bn) * bk * dtype_bytes
        inflight = stages * bm * bk * dtype_bytes
        if shared <= SM90_SHARED_BYTES and SKINNY_MIN_INFLIGHT_BYTES <= inflight <= 2 * SKINNY_MIN_INFLIGHT_BYTES:
            configs.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, num_warps=4,
                                num_stages=stages, SWAP_AB=True, **({"SPLIT_K": split} if split > 1 else {})))
    return configs


def is_swap_ab(config: dict | None) -> bool:
    """True for a gemm.py swap-AB config (``skinny_config_space``)."""
    return bool(config) and bool(config.get("SWAP_AB", False))


# ------------------------------------------------------------------------------------------ Hopper TMA GEMM
TMA_KERNEL = "tma"
"""The ``KERNEL`` key of a config for ``gemm_tma.py`` (persistent TMA GEMM, sm_90); gemm.py's configs have none."""
TMA_SM90_SPACE = {
    2: [(128, 256, 64, 8, 3, 2, False), (128, 256, 64, 8, 4, 2, False), (256, 128, 64, 8, 3, 2, False),
        (128, 128, 64, 8, 4, 1, False), (128, 128, 64, 4, 4, 1, False),
        (128, 256, 64, 4, 3, 2, True), (128, 256, 64, 4, 4, 2, True), (256, 128, 64, 4, 3, 2, True),
        (256, 128, 64, 4, 4, 2, True), (128, 128, 64, 4, 4, 1, True),
        # issue 20's short-K GEMMs (DLRM K = 256-1024, the 4096 x 576 x 7168 projection): 128 x 128 tiles, twice as
        # many per SM as 128 x 256 ones, so the flattened tile loop overlaps more epilogues with the next loads
        (128, 128, 64, 8, 3, 1, False), (128, 128, 128, 8, 3, 2, False)],
    4: [(128, 256, 32, 8, 3, 2, False), (128, 128, 32, 8, 4, 1, False), (256, 128, 32, 8, 3, 2, False),
        (128, 128, 64, 8, 3, 2, False)],
    1: [(256, 128, 128, 8, 3, 2, False), (256, 128, 128, 8, 4, 2, False), (128, 128, 128, 8, 4, 1, False),
        (128, 128, 256, 8, 3, 1, False), (128, 128, 128, 4, 4, 1, False),
        (256, 128, 128, 4, 3, 2, True), (256, 128, 128, 4, 4, 2, True),
        (128, 128, 128, 4, 4, 1, True), (128, 128, 256, 4, 3, 1, True)],
}
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, EPILOGUE_SUBTILE, WARP_SPECIALIZE) per operand size. The
tiles are the ones Hopper GEMMs use (CUTLASS's sm90 defaults, Triton's persistent-matmul tutorial): 128 x 256,
256 x 128 and 128 x 128 output tiles over two consumer warpgroups (num_warps=8, or num_warps=4 plus Triton's
producer warpgroup when warp-specialized), BLOCK_K * elem_size = 128 bytes (one 128-byte swizzle row). The
stage counts fill the 227 KiB. The first entry of each list is the default: the best single config over the 12
Llama 3 shapes of benchmarks/tma_gemm_bench.py on the H200 (benchmarks/results/h200/kernels/tma/SUMMARY.md).
There, under triton 3.6, the warp-specialized 128x256 and 256x128 configs failed to compile ("PassManager::run
failed"; they stay for triton 3.7) and fp8 128x128x128 w4 s5 ws returned non-finite results, so it was dropped.
fp8 leaves out 128 x 256 tiles: promoting every BLOCK_K (use_fast_accum=False) keeps a second fp32 tile per
consumer warpgroup, and a 128 x 256 tile then spills (72-152 bytes per thread in triton 3.7.1 sm_90 builds).
4 bytes is tf32 (fp32 operands, ``input_precision="tf32"``, B K-major as tf32 wgmma reads it): the bf16 tiles at
the same 128 bytes per K row (BLOCK_K 32), the stages that fit next to the fp32 store buffer; not measured yet
(benchmarks/kernels/gemm_skinny_sweep.py times them against cuBLAS), so the first entry is gemm.py's tf32 default
tile."""
TMA_OPERAND_ALIGN_BYTES = 16
"""TMA needs 16-byte aligned base addresses and outer strides (CUDA driver API, cuTensorMapEncodeTiled)."""


def tma_config_space(dtype_bytes: int, *, warp_specialize: bool = True) -> list[dict]:
    """``gemm_tma.py``'s sm_90 configs for operands of ``dtype_bytes`` (1 fp8, 2 bf16/fp16, 4 tf32), the default first;
    ``warp_specialize=False`` leaves out the warp-specialized ones (they need Triton's Hopper warp
    specialization, which triton 3.6 fails to compile for the larger tiles)."""
    check(dtype_bytes in TMA_SM90_SPACE, "dtype_bytes", dtype_bytes, "1 (fp8), 2 (bf16/fp16) or 4 (tf32)")
    configs = []
    for bm, bn, bk, warps, stages, subtile, ws in TMA_SM90_SPACE[dtype_bytes]:
        shared = tma_shared_bytes(bm, bn, bk, stages, subtile, dtype_bytes, tma_out_bytes(dtype_bytes))
        if (ws and not warp_specialize) or shared > SM90_SHARED_BYTES:
            continue
        configs.append(dict(KERNEL=TMA_KERNEL, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M,
                            EPILOGUE_SUBTILE=subtile, WARP_SPECIALIZE=ws, num_warps=warps, num_stages=stages))
    return configs


def tma_out_bytes(operand_bytes: int) -> int:
    """Bytes per output element of the TMA kernel: bf16 for fp8 and 16-bit operands, fp32 for tf32."""
    return 4 if operand_bytes == 4 else 2


def tma_shared_bytes(block_m: int, block_n: int, block_k: int, stages: int, subtile: int, operand_bytes: int,
                     out_bytes: int = 2) -> int:
    """Estimated shared memory of a TMA config: num_stages copies of the A and B tiles plus the epilogue's store
    buffer (checked against ``metadata.shared`` of sm_90 builds, see ``gemm_tma.crosscompile``)."""
    return stages * (block_m + block_n) * block_k * operand_bytes + block_m * block_n // subtile * out_bytes


def tma_eligible(m: int, n: int, k: int, layout: str, operand_bytes: int) -> bool:
    """Whether ``gemm_tma.py`` takes C[m, n] = A[m, k] @ B[k, n] in ``layout`` (A row-major; B row-major, or
    column-major for "nt"; fp8 only "nt", the K-major layout of fp8 wgmma): every operand's rows and the bf16
    output's rows 16-byte aligned."""
    aligned = lambda elements, size: elements * size % TMA_OPERAND_ALIGN_BYTES == 0  # noqa: E731
    if layout not in (("nt",) if operand_bytes == 1 else ("nn", "nt")):
        return False
    b_rows = k if layout == "nt" else n  # B's outer stride: K (column-major) or N (row-major)
    return aligned(k, operand_bytes) and aligned(b_rows, operand_bytes) and aligned(n, 2)


def is_tma(config: dict | None) -> bool:
    """True for a ``gemm_tma.py`` config."""
    return bool(config) and config.get("KERNEL") == TMA_KERNEL


# ---------------------------------------------------------------------------------------- Hopper Gluon GEMM
GLUON_KERNEL = "gluon"
"""The ``KERNEL`` key of a config for ``gemm_gluon.py`` (persistent fp8 GEMM in Gluon, sm_90)."""
ACCUMULATIONS = ("exact", "fast")
"""fp8 accumulation modes: "exact" (``use_fast_accum=False``: partial sums promoted to fp32 every BLOCK_K) and
"fast" (``use_fast_accum=True``: one reduced-precision accumulator chain in the tensor cores)."""
GLUON_SM90_SPACE = {
    "exact": [(128, 128, 128, 4, True), (128, 128, 128, 6, True), (128, 128, 128, 6, False)],
    "fast": [(128, 128, 128, 6, True), (128, 128, 128, 5, False)],
}
"""(BLOCK_M, BLOCK_N, BLOCK_K, NUM_STAGES, WARP_SPECIALIZE) per accumulation mode, num_warps=8, GROUP_M=8: the
warp-specialized configs of ``gemm_gluon.config_space`` and its best non-warp-specialized one, ranked by the
H200 probe on the 8 Llama 3 fp8 GEMMs (benchmarks/archive/gluon_fp8_probe.py, benchmarks/results/h200/kernels/gluon/
summary.txt); the first entry of each list is the probe's best, the default. Exact configs keep three fp32
tiles per thread (the sum and two partials in flight), so 128 x 256 tiles are fast-only: a config of one mode
is never offered for the other (``gemm_gluon.resolve_config`` rejects a 128 x 256 exact config).

The fast 128 x 256 x 128 s3 ws config (``gemm_gluon.config_space("fast")``) is left out: the selector sweep times
exact accumulation only, so fast configs are priced from the TMA fit, which ranked it first on most Llama shapes,
and in both H200 kernel-suite runs it ran Llama 3 8B ``o`` (8192 x 4096 x 4096) at 0.76 and 0.61 of
``_scaled_mm`` (fast accumulation), slower than the exact kernel on the same shape, while 128 x 128 s6 ws was the
probe's best fast config overall (1.034). It stays available as an explicit config."""


def gluon_config_space(accumulation: str = "exact") -> list[dict]:
    """``gemm_gluon.py``'s sm_90 configs for ``accumulation`` ("exact" or "fast"), the default first. Each
    carries ``ACCUMULATION``, so ``dispatch.triton_scaled_matmul`` can refuse a config of the other mode."""
    check(accumulation in ACCUMULATIONS, "accumulation", repr(accumulation), "'exact' or 'fast'")
    return [dict(KERNEL=GLUON_KERNEL, ACCUMULATION=accumulation, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M,
                 NUM_STAGES=stages, WARP_SPECIALIZE=ws, num_warps=8)
            for bm, bn, bk, stages, ws in GLUON_SM90_SPACE[accumulation]]


def gluon_shared_bytes(block_m: int, block_n: int, block_k: int, stages: int) -> int:
    """Shared memory of a Gluon config: NUM_STAGES fp8 A and B tiles, the bf16 output tile and two 8-byte
    mbarriers per stage (as ``gemm_gluon.shared_bytes``)."""
    return stages * (block_m + block_n) * block_k + block_m * block_n * 2 + 2 * stages * 8


def gluon_eligible(m: int, n: int, k: int, layout: str, operand_bytes: int) -> bool:
    """Whether ``gemm_gluon.scaled_matmul_gluon`` takes C[m, n] = A[m, k] @ B[k, n]: fp8 only, layout "nt" (A
    row-major, B column-major, as fp8 wgmma and _scaled_mm take), the same 16-byte aligned rows as the TMA kernel
    (its operand checks are ``gemm_tma``'s)."""
    return operand_bytes == 1 and tma_eligible(m, n, k, layout, operand_bytes)


def is_gluon(config: dict | None) -> bool:
    """True for a ``gemm_gluon.py`` config."""
    return bool(config) and config.get("KERNEL") == GLUON_KERNEL


def config_stages(config: dict) -> int:
    """Pipeline stages of any GEMM config: ``num_stages`` (Triton kernels) or ``NUM_STAGES`` (Gluon)."""
    return config["NUM_STAGES"] if is_gluon(config) else config["num_stages"]


# ------------------------------------------------------------------------------------------------- attention
# ------------------------------------------------------------------------------------------------ config space
# Default (first) entries per head_dim, as (BLOCK_M, BLOCK_N, num_warps, num_stages). Guesses, to calibrate by
# timing config_space on the GPU. NVIDIA: FlashAttention-2's tiles (fwd 128 queries x 64 keys; bwd a small query
# tile against a larger key tile, as in Triton's fused-attention tutorial), picked among neighbours by compiling for
# sm_90a ahead of time (bf16, 16-divisible strides): fwd d=128 uses 178 registers and no spills (138 with TMA
# loads). bwd, triton 3.7.1 sm_90a builds of the dK/dV pass with TMA loads: the tutorial's 32x128, 4 warps,
# 5 stages spills 152 bytes at d=64; 32x128 with 8 warps, 3 stages uses 189 registers, no spills (d=64); at d=128
# every 128-key tile spills (32x128 w8: 80 bytes; 16x128 w8: 16) and 32x64, 8 warps, 3 stages uses 231, no spills.
# AMD: ROCm's Triton flash attention for MI300X (128x64, waves_per_eu 2, one stage for two fused GEMMs),
# matrix_instr_nonkdim 16; at d=128 with 8 warps, because `workbench kernels inspect --kernel attention` showed
# 4 warps spilling 46 VGPRs on gfx942.
_ATTENTION_NVIDIA_DEFAULTS = {
    "fwd": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
    "bwd": {64: (32, 128, 8, 3), 128: (32, 64, 8, 3), 256: (32, 64, 8, 2)},
}
_ATTENTION_AMD_DEFAULTS = {
    "fwd": {64: (128, 64, 4, 1), 128: (128, 64, 8, 1), 256: (64, 64, 4, 1)},
    "bwd": {64: (64, 64, 4, 1), 128: (64, 64, 4, 1), 256: (32, 64, 4, 1)},
}


def attention_config_space(backend: str, pass_: str = "fwd", head_dim: int = 128) -> list[dict]:
    """Tiles x warps x stages for the forward (``pass_="fwd"``) or backward (``"bwd"``) pass; the first entry is
    the default for ``head_dim``. Entries too large for a GPU's shared memory (large tiles at d=256) fail to
    compile there: skip them when tuning. AMD entries add waves_per_eu and matrix_instr_nonkdim."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    check(pass_ in ("fwd", "bwd"), "pass_", repr(pass_), "'fwd' or 'bwd'")
    check(head_dim in HEAD_DIMS, "head_dim", repr(head_dim), f"one of {', '.join(map(str, HEAD_DIMS))}")
    if backend == "interpreter":  # small tiles keep the CPU run short; both tile orders exercise the loop splits
        return [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": 1, "num_stages": 1}
                for m, n in ((16, 16), (32, 16), (16, 32))]
    bucket = 64 if head_dim <= 64 else head_dim
    if pass_ == "fwd":
        tiles = list(itertools.product((64, 128), (32, 64, 128)))
    else:  # dK/dV pass: a small query tile streams past a large key tile (16 queries: the one d=128 tile whose
        # sm_90a build of the original kernel does not spill, triton 3.7.1 ahead of time; 32 x 64 spills 24 bytes)
        tiles = list(itertools.product((16, 32, 64), (64, 128)))
    keys = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
    if backend == "cuda":
        default = dict(zip(keys, _ATTENTION_NVIDIA_DEFAULTS[pass_][bucket]))
        stages = (2, 3, 4) if pass_ == "fwd" else (1, 2, 3, 4, 5)
        space = [dict(zip(keys, (m, n, w, st))) for (m, n), w, st in itertools.product(tiles, (4, 8), stages)]
    else:
        default = {**dict(zip(keys, _ATTENTION_AMD_DEFAULTS[pass_][bucket])), "waves_per_eu": 2 if pass_ == "fwd" else 1,
                   "matrix_instr_nonkdim": 16}
        space = [{**dict(zip(keys, (m, n, w, 1))), "waves_per_eu": e, "matrix_instr_nonkdim": kdim}
                 for (m, n), w, e, kdim in itertools.product(tiles, (4, 8), (0, 1, 2), (16, 32))]
    return [default] + [c for c in space if c != default]


# ----------------------------------------------------------------------------------- pinned attention configs
ATTENTION_SEQ_BUCKETS = (1024, 4096)
"""Upper sequence bounds of the pinned-config buckets: S <= 1024 (bucket 0), S <= 4096 (1), longer (2)."""

_ATTENTION_PINNED = {
    "sm_90": {
        # (pass, head_dim, causal, seq bucket): (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA loads[, variant]),
        # variant: a dict of attention.VARIANT_KEYS other than TMA (the dQ pass's own tiles); absent: the original kernels
        # measured: the best of the sweep on the H200 (benchmarks/results/h200/kernels/attention_fifth/SWEEP.md)
        ("bwd", 64, False, 1): (64, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 64}),
        ("bwd", 64, True, 0): (64, 64, 4, 3, True),
        ("bwd", 64, True, 2): (64, 64, 4, 3, True),
        ("bwd", 128, False, 1): (32, 64, 4, 3, True),
        ("bwd", 128, False, 2): (32, 64, 4, 3, True),
        ("bwd", 128, True, 0): (32, 64, 4, 3, True),
        ("bwd", 128, True, 2): (32, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 32}),
        ("fwd", 64, False, 1): (64, 64, 4, 3, False),
        ("fwd", 64, True, 0): (64, 64, 4, 3, False),
        ("fwd", 64, True, 2): (64, 64, 4, 3, False),
        # measured: d=64 up to 4,096, the rule of benchmarks/results/h200/kernels/attention_fwd_short/rule.json
        # (chosen on its fit shapes: a02 0.647 -> 0.906 of SDPA, a11 0.880 -> 0.980)
        ("fwd", 64, False, 0): (64, 64, 4, 3, False),
        ("fwd", 64, True, 1): (64, 64, 4, 3, False),
        ("fwd", 128, False, 1): (64, 64, 4, 3, False),
        ("fwd", 128, False, 2): (64, 64, 4, 3, False),
        ("fwd", 128, True, 0): (64, 64, 4, 3, False),
        ("fwd", 128, True, 1): (64, 64, 4, 3, False),
        ("fwd", 128, True, 2): (128, 128, 8, 3, True),
        # measured: the picks of benchmarks/results/h200/kernels/attention_triton_bwd/REPORT.md on the fit shapes of
        # attention_candidates_split.json where they beat what was here by > 2% (a02 1.217x, a11 1.316x over the Gluon
        # backward, a07 1.048x; a bucket without a fit shape: its group's fit shapes, a02 + a08 1.060x)
        ("bwd", 64, False, 0): (64, 128, 8, 3, True),
        ("bwd", 64, False, 2): (64, 64, 4, 4, True),
        ("bwd", 64, True, 1): (64, 64, 4, 3, True),
        ("bwd", 128, True, 1): (32, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 64, "DQ_NUM_WARPS": 8}),
        # guess, calibrate me: a bucket no sweep covered (a non-spilling build, see below)
        ("bwd", 128, False, 0): (32, 64, 8, 3, True),
    },
}
"""Per-bucket configs on sm_90 (H100/H200), which the attention wrapper takes over the selector's modelled forward
pick and the static default. The guessed backward entries (guess, calibrate me) are the non-spilling builds
named above the defaults, and at d=64 64-key tiles for S <= 1024, where 128-key tiles leave the dK/dV grid
(cdiv(S, BLOCK_N) * B * Hkv programs) short of the 132 SMs for MQA shapes. The measured entries are
``benchmarks/kernels/attention_sweep.py``'s picks (8 shapes outside the committed set); forward buckets it did not
cover fall back to the selector's calibrated pick (specs/calibration/h200-sxm-select.yaml)."""


def attention_seq_bucket(seq: int) -> int:
    """The ``ATTENTION_SEQ_BUCKETS`` index of a sequence length (len(ATTENTION_SEQ_BUCKETS) past the last bound)."""
    return next((i for i, bound in enumerate(ATTENTION_SEQ_BUCKETS) if seq <= bound), len(ATTENTION_SEQ_BUCKETS))


def attention_pinned_config(target: str, pass_: str, head_dim: int, causal: bool, seq: int) -> dict | None:
    """The pinned config of a shape's bucket on ``target`` ("sm_90"), with its ``TMA`` flag; None where the table
    has no entry (the wrapper then asks the selector, forward only, or takes ``attention_config_space``'s first)."""
    entry = _ATTENTION_PINNED.get(target, {}).get((pass_, 64 if head_dim <= 64 else head_dim, bool(causal),
                                                   attention_seq_bucket(seq)))
    if entry is None:
        return None
    block_m, block_n, warps, stages, tma, *variant = entry
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, TMA=tma,
                **(variant[0] if variant else {}))
