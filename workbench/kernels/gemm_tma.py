"""Hopper GEMM: C[M, N] = A[M, K] @ B[K, N] in bf16/fp16, and the fp8 e4m3 ``torch._scaled_mm`` form, with
TMA loads through tensor descriptors, persistent programs and (optionally) warp specialization.

Why a second GEMM: ``gemm.py``'s kernel computes addresses per thread (``tl.load`` of pointer tiles) and
launches one program per output tile. On sm_90 that leaves three Hopper features unused:

- **TMA** (Tensor Memory Accelerator): one thread hands the copy engine a tile coordinate and a descriptor
  (base, shape, strides, block shape), the tile lands swizzled in shared memory ready for ``wgmma``, and
  out-of-bounds rows/columns are zero-filled (loads) or dropped (stores) by the hardware: no masks, no
  address registers. The descriptors are built on the host (``TensorDescriptor.from_tensor``, Triton >= 3.4)
  and passed as kernel arguments; the launcher encodes them (``cuTensorMapEncodeTiled``) at each launch.
- **Persistent programs**: ``min(NUM_SMS, tiles)`` programs each walk tiles ``pid, pid + NUM_SMS, ...`` in
  grouped order (GROUP_M tile rows per group, as ``gemm.py``, so concurrent tiles share A and B panels in L2).
  ``tl.range(..., flatten=True)`` flattens the tile loop and the K loop into one software pipeline, so the TMA
  loads of the next tile overlap the last ``wgmma``s and the epilogue of the current one.
- **Warp specialization** (``tl.range(..., warp_specialize=True)``, WARP_SPECIALIZE=True): Triton's Hopper
  pass splits the program into a producer warpgroup that issues the TMA loads and two consumer warpgroups
  that each run ``wgmma`` on half of the tile's rows (registers rebalanced with ``setmaxnreg``), so the
  launch's num_warps=4 becomes 12 warps. Seen with triton 3.7.1 sm_90 builds: the pass only engages with
  num_warps=4 (with 8 it leaves the loop as it is), it fails on host-built descriptors (it halves the A block
  and the host descriptor's block shape cannot follow), and it is not combined with ``flatten``. So a
  WARP_SPECIALIZE config builds its descriptors on the device (``tl.make_tensor_descriptor``, which needs a
  global-scratch allocator: the wrapper sets one with ``triton.set_allocator``) and does not flatten.

- **Split-K** (SPLIT_K > 1): each output tile is cut into SPLIT_K units of consecutive K steps, spread over the
  persistent programs like tiles. A unit stores its fp32 partial tile (a scratch buffer of every tile's SPLIT_K
  partials, allocated per call) and counts itself in the tile's int32 arrival count (one buffer per device and
  stream, ``split_k_arrivals``, zero between launches); the tile's last unit adds the partials in slice order,
  zeroes the count and runs the epilogue. One launch, no memset, and a sum that does not depend on which unit
  came last. The ordering is CUTLASS's semaphore: every thread stores, a CTA barrier, then one acq_rel atomic;
  the last unit reads the partials past L1 (``.cg``). Triton's nested-loop fusion fails on the last unit's
  branch, so the split loop is not flattened; config=None offers split configs only for fp8, where a tile's
  units fill one wave (``spaces.tma_split_config_space``, measured in benchmarks/results/h200/kernels/tma_split/).
- **Stream-K** (STREAM_K, an explicit config only): the whole waves of tiles run as usual; the tiles of the last,
  partial wave are dealt out as an equal share of their K steps per program (``_stream_k_tiles``), their partials
  fixed up as split-K's. On the H200 it took 0.73-1.79x the unsplit config's time where the tiles fill a wave
  (0.41-1.41 where they do not), gaining on long K and losing on short K, and as
  config=None's pick on 27 broad shapes it lost (0.960 -> 0.950 of the vendor, geometric mean), so config=None
  does not rank it (the same folder).

The epilogue (fp8 scales, bias, the cast) runs on the fp32 accumulator; EPILOGUE_SUBTILE=2 stores it as two
[BLOCK_M, BLOCK_N/2] halves so the store's shared-memory staging buffer is half as large, which leaves room
for one more pipeline stage.

TMA constraints (CUDA driver API, ``cuTensorMapEncodeTiled``): 16-byte aligned base addresses, 16-byte
aligned outer strides, unit inner stride. So A must be row-major with K * elem_size % 16 == 0, B row-major
([K, N], N * elem_size % 16 == 0) or column-major (``b = w.t()`` of a row-major w [N, K]), and C [M, N] needs
N * 2 % 16 == 0. Inputs that break this raise ``KernelInputError``: use ``dispatch.triton_matmul`` / ``dispatch.triton_scaled_matmul``
(any strides) for them (the checks: ``checks.check_tma_operands``). fp8 takes B column-major only (Hopper's fp8 ``wgmma`` reads both operands K-major,
as ``torch._scaled_mm`` requires).

Needs Triton >= 3.4 (host tensor descriptors; ``tl.range`` ``flatten``/``warp_specialize``) and sm_90+; see
``supported``. Under ``TRITON_INTERPRET=1`` the kernel runs on CPU tensors (bf16 and fp8 operands are upcast
to fp32 before the dot, as the interpreter's bf16 dot is wrong).
"""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl

from workbench.kernels import crosscompile as xc
from workbench.kernels import spaces
from workbench.kernels._common import (check, frozen, interpreting, launch_operands, plan_cache,
                                       reused_descriptors, sm_count, tensor_key, without_launch)
from workbench.kernels._launch import KernelLaunch
from workbench.kernels._tiling import TMA_ALIGN_BYTES, grouped_tile, is_power_of_two, use_torch_allocator
from workbench.kernels.checks import check_fp8_tma_operands, check_tma_operands, fp8_epilogue_kinds

try:  # host-side tensor descriptors: Triton >= 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton
    TensorDescriptor = None

HAS_WARP_SPECIALIZE = "warp_specialize" in inspect.signature(tl.range.__init__).parameters
"""``tl.range(..., warp_specialize=...)`` exists (Triton >= 3.4)."""
MATMUL_DTYPES = (torch.bfloat16, torch.float16)
TF32_DTYPES = (torch.float32,)
"""fp32 operands, multiplied as tf32 (``matmul_tma(..., input_precision="tf32")``, B column-major: tf32 wgmma reads
both operands K-major), C in fp32."""
_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_SUBTILE", "WARP_SPECIALIZE", "num_warps",
         "num_stages")


@triton.jit
def _gemm_tma_kernel(
    a, b, c, bias_ptr, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr,
    M, N, K, stride_am, stride_b, stride_cm,
    DEVICE_DESCRIPTORS: tl.constexpr, B_K_MAJOR: tl.constexpr, HAS_BIAS: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr,
    UPCAST: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr = None, SPLIT_K: tl.constexpr = 1, STREAM_K: tl.constexpr = False,
):
    """Program p computes the work units p, p + NUM_SMS, p + 2 NUM_SMS, ...: output tiles in grouped order, each
    cut into SPLIT_K units of consecutive K steps (unit u: tile u // SPLIT_K, K slice u % SPLIT_K).

    SPLIT_K > 1 (split-K, for tiles too few to fill the SMs): a unit stores its fp32 partial tile into
    partials_ptr (fp32 [tiles, SPLIT_K, BLOCK_M, BLOCK_N]) and counts itself in arrivals_ptr (int32 [tiles], zero
    before the launch); the tile's last unit to arrive adds the SPLIT_K partials in slice order (the sum does not
    depend on which arrives last), resets the count to zero and runs the epilogue. Unsplit, both pointers are
    unused.

    STREAM_K (SPLIT_K 1): the whole waves of tiles run as above; the tiles of the last, partial wave are dealt out
    as an equal share of their K steps per program (``_stream_k_tiles``), partials in partials_ptr (fp32
    [2 * NUM_SMS, BLOCK_M, BLOCK_N]: each program's first and last tile) and counts in arrivals_ptr (one per
    tile of that wave).

    a, b, c: host TensorDescriptors, or (DEVICE_DESCRIPTORS) pointers to A [M, K] (row stride stride_am),
    B [K, N] (stride_b: its column stride when B_K_MAJOR, else its row stride) and C [M, N] (stride_cm).
    Blocks: a_desc [BLOCK_M, BLOCK_K] of A [M, K]; b_desc [BLOCK_N, BLOCK_K] of B^T [N, K] when B_K_MAJOR
    (B column-major), else [BLOCK_K, BLOCK_N] of B [K, N]; c_desc [BLOCK_M, BLOCK_N // EPILOGUE_SUBTILE] of
    C [M, N]. SCALE_A / SCALE_B: "none", "tensor" (one fp32 scalar) or "row" (scale_a [M], scale_b [N]).
    MAX_IMPRECISE_ACC: None (fp8 accumulates all of K in the tensor cores' reduced-precision accumulator on
    sm_90) or BLOCK_K (each BLOCK_K partial sum is added into fp32, as _scaled_mm's use_fast_accum=False).
    INPUT_PRECISION: "tf32" for fp32 operands (None: the 16-bit and fp8 dots).
    """
    if DEVICE_DESCRIPTORS:  # a, b, c are pointers: build the descriptors here (global scratch from set_allocator)
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        if B_K_MAJOR:  # B^T [N, K] row-major
            b_desc = tl.make_tensor_descriptor(b, shape=[N, K], strides=[stride_b, 1],
                                               block_shape=[BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[stride_b, 1],
                                               block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[stride_cm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // EPILOGUE_SUBTILE])
    else:  # a, b, c are host-built TensorDescriptors with these block shapes
        a_desc = a
        b_desc = b
        c_desc = c
    first_unit = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    units = tiles_m * tiles_n * SPLIT_K
    if STREAM_K:  # whole waves only: the last, partial wave is shared out by K steps below
        units = units // NUM_SMS * NUM_SMS
    unit_steps = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)  # K steps per unit; the last slice's extra ones load zeros

    scale = 1.0  # per-tensor scales fold into one scalar, loaded once per program
    if SCALE_A == "tensor":
        scale = scale * tl.load(scale_a_ptr)
    if SCALE_B == "tensor":
        scale = scale * tl.load(scale_b_ptr)

    # The epilogue recomputes its tile from its own counter rather than reusing the loop's pid_m/pid_n: with
    # FLATTEN the pipeliner then need not keep prologue values alive across the flattened K loop.
    stored_unit = first_unit - NUM_SMS
    for unit in tl.range(first_unit, units, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(unit // SPLIT_K, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        first_step = (unit % SPLIT_K) * unit_steps
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # acc: [BLOCK_M, BLOCK_N]
        for step in range(unit_steps):
            off_k = (first_step + step) * BLOCK_K  # past K (the last slice): TMA loads zeros
            acc = _k_step(a_desc, b_desc, acc, off_m, off_n, off_k, B_K_MAJOR, UPCAST, INPUT_PRECISION,
                          MAX_IMPRECISE_ACC)

        stored_unit += NUM_SMS
        tile = stored_unit // SPLIT_K
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if SPLIT_K == 1:
            _tma_epilogue(acc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, off_m, off_n, M, N,
                          HAS_BIAS, SCALE_A, SCALE_B, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
        else:
            tile_partials = partials_ptr + tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
            within = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # [BLOCK_M, BLOCK_N]
            arrived = _arrive(tile_partials + (stored_unit % SPLIT_K) * (BLOCK_M * BLOCK_N) + within, acc,
                              arrivals_ptr + tile)
            if arrived == SPLIT_K - 1:  # the last unit of the tile: every other partial is visible (acquire)
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for part in tl.static_range(SPLIT_K):  # slice order: the same sum whichever unit arrived last
                    total += tl.load(tile_partials + part * (BLOCK_M * BLOCK_N) + within, cache_modifier=".cg")
                tl.store(arrivals_ptr + tile, 0)  # zero again for the next launch on this stream
                _tma_epilogue(total, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, off_m, off_n, M, N,
                              HAS_BIAS, SCALE_A, SCALE_B, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    if STREAM_K:
        _stream_k_tiles(a_desc, b_desc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, partials_ptr,
                        arrivals_ptr, M, N, K, units, first_unit, B_K_MAJOR, HAS_BIAS, SCALE_A, SCALE_B, UPCAST,
                        MAX_IMPRECISE_ACC, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EPILOGUE_SUBTILE, NUM_SMS,
                        INPUT_PRECISION)


@triton.jit
def _stream_k_tiles(a_desc, b_desc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, partials_ptr, arrivals_ptr,
                    M, N, K, first_tile, pid, B_K_MAJOR: tl.constexpr, HAS_BIAS: tl.constexpr,
                    SCALE_A: tl.constexpr, SCALE_B: tl.constexpr, UPCAST: tl.constexpr,
                    MAX_IMPRECISE_ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
                    NUM_SMS: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """Stream-K over the tiles from ``first_tile`` on (fewer than NUM_SMS): their K steps, tile after tile, cut
    into NUM_SMS equal runs; program ``pid`` walks run ``pid``. A run that covers a whole tile stores it; a tile
    split between runs gets a partial from each, in the partial slot of its run (2 pid for the run's first tile,
    2 pid + 1 for its last), and the tile's last run to arrive adds them in run order and stores the tile."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    steps = (tiles_m * tiles_n - first_tile) * k_steps
    run = tl.cdiv(steps, NUM_SMS)  # K steps per program
    begin = pid * run
    end = tl.minimum(begin + run, steps)
    within = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # [BLOCK_M, BLOCK_N]
    at = begin
    while at < end:
        t = at // k_steps  # the tile's index among the stream-K tiles
        k_first = at - t * k_steps
        k_last = tl.minimum(k_steps, k_first + end - at)  # this run's K steps of the tile: [k_first, k_last)
        pid_m, pid_n = grouped_tile(first_tile + t, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # acc: [BLOCK_M, BLOCK_N]
        for step in range(k_first, k_last):
            acc = _k_step(a_desc, b_desc, acc, off_m, off_n, step * BLOCK_K, B_K_MAJOR, UPCAST, INPUT_PRECISION,
                          MAX_IMPRECISE_ACC)
        if k_first == 0 and k_last == k_steps:  # the whole tile in this run
            _tma_epilogue(acc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, off_m, off_n, M, N,
                          HAS_BIAS, SCALE_A, SCALE_B, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
        else:
            slot = 2 * pid + (at != begin).to(tl.int32)
            arrived = _arrive(partials_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + within, acc, arrivals_ptr + t)
            first_run = t * k_steps // run
            last_run = ((t + 1) * k_steps - 1) // run
            if arrived == last_run - first_run:  # the tile's last run: add the partials in run order
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(first_run, last_run + 1):
                    q_slot = 2 * q + (q * run // k_steps != t).to(tl.int32)  # t is run q's first tile, or its last
                    total += tl.load(partials_ptr + q_slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + within,
                                     cache_modifier=".cg")
                tl.store(arrivals_ptr + t, 0)
                _tma_epilogue(total, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, off_m, off_n, M, N,
                              HAS_BIAS, SCALE_A, SCALE_B, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
        at += k_last - k_first


@triton.jit
def _k_step(a_desc, b_desc, acc, off_m, off_n, off_k, B_K_MAJOR: tl.constexpr, UPCAST: tl.constexpr,
            INPUT_PRECISION: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr):
    """acc plus one K step of the tile at (off_m, off_n): A [BLOCK_M, BLOCK_K] and B [BLOCK_K, BLOCK_N] at off_k
    through their descriptors (zero past M, N and K)."""
    a_tile = a_desc.load([off_m, off_k])  # [BLOCK_M, BLOCK_K]
    if B_K_MAJOR:
        b_tile = b_desc.load([off_n, off_k]).T  # [BLOCK_K, BLOCK_N], a view of the K-major tile
    else:
        b_tile = b_desc.load([off_k, off_n])  # [BLOCK_K, BLOCK_N]
    if UPCAST:
        a_tile = a_tile.to(tl.float32)
        b_tile = b_tile.to(tl.float32)
    return tl.dot(a_tile, b_tile, acc, input_precision=INPUT_PRECISION, max_num_imprecise_acc=MAX_IMPRECISE_ACC)


@triton.jit
def _arrive(partial_ptrs, acc, count_ptr):
    """Store this unit's fp32 partial tile and count it in the tile's arrivals; returns the count before it (the
    tile's last unit sees SPLIT_K - 1, or its runs - 1). CUTLASS's semaphore: every thread stores, a CTA barrier,
    then one acq_rel atomic, so the last unit's acquire sees every partial."""
    tl.store(partial_ptrs, acc)
    tl.debug_barrier()
    return tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _tma_epilogue(acc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, scale, off_m, off_n, M, N,
                  HAS_BIAS: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """One output tile from its fp32 sum, in torch._scaled_mm's order: scales, then bias, then the cast; stored
    through the C descriptor (rows and columns past M, N are dropped)."""
    if SCALE_A == "tensor" or SCALE_B == "tensor":
        acc = acc * scale
    if SCALE_A == "row":
        rows = off_m + tl.arange(0, BLOCK_M)  # [BLOCK_M]
        acc = acc * tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)[:, None]
    if SCALE_B == "row" or HAS_BIAS:
        cols = off_n + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        if SCALE_B == "row":
            acc = acc * tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)[None, :]
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if EPILOGUE_SUBTILE == 2:
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)  # left, right: [BLOCK_M, BLOCK_N // 2]
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def matmul_tma(a: torch.Tensor, b: torch.Tensor, config: dict | None = None, *,
               out: torch.Tensor | None = None, input_precision: str | None = None) -> torch.Tensor:
    """``a @ b`` for bf16 or fp16 a [M, K] (row-major) and b [K, N] (row-major or column-major); returns C [M, N]
    in the input dtype (written into ``out`` when given: a row-major [M, N] tensor of that dtype). Checks, config
    and descriptor layouts are cached per distinct call (``_TmaPlan``). fp32 a and b take
    ``input_precision="tf32"`` and b column-major (``TF32_DTYPES``)."""
    try:
        key = (tensor_key(a), tensor_key(b), tensor_key(out), frozen(config), input_precision)
        plan = _MATMUL_PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config value: the checks say which
        key = plan = None
    if plan is None:
        plan = _plan_matmul(a, b, config, out, input_precision)
        if key is not None:
            _MATMUL_PLANS.put(key, plan)
    return _run(plan, a, b, None, None, None, out)


def scaled_matmul_tma(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      bias: torch.Tensor | None = None, config: dict | None = None, *, use_fast_accum: bool = False,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16, as ``torch._scaled_mm(a, b, scale_a, scale_b,
    bias, out_dtype=torch.bfloat16, use_fast_accum=...)``: a_fp8 [M, K] row-major, b_fp8 [K, N] column-major,
    fp32 scales per tensor (scalars) or per row (scale_a [M] or [M, 1], scale_b [N] or [1, N]), bias [N]."""
    try:
        key = (tensor_key(a_fp8), tensor_key(b_fp8), tensor_key(scale_a), tensor_key(scale_b),
               tensor_key(bias), tensor_key(out), bool(use_fast_accum), frozen(config))
        plan = _SCALED_PLANS.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        plan = _plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum, out)
        if key is not None:
            _SCALED_PLANS.put(key, plan)
    return _run(plan, a_fp8, b_fp8, bias, scale_a, scale_b, out)


def _plan_matmul(a, b, config: dict | None, out, input_precision: str | None = None) -> _TmaPlan:
    """``matmul_tma``'s checks and launch plan for these inputs (also the front door's for a TMA config)."""
    check_tma_operands(a, b, "a", "b", out)
    tf32 = a.dtype in TF32_DTYPES
    check(a.dtype in MATMUL_DTYPES or (tf32 and input_precision == "tf32"), "a.dtype", a.dtype,
          f"one of {', '.join(map(str, MATMUL_DTYPES))}, or float32 with input_precision='tf32' "
          f"(fp8: use scaled_matmul_tma; fp32 IEEE: dispatch.triton_matmul)")
    check(b.dtype == a.dtype, "b.dtype", b.dtype, f"a's dtype {a.dtype}")
    check(input_precision in (None, "tf32"), "input_precision", repr(input_precision), "None or 'tf32' (fp32 operands)")
    if tf32:  # tf32 wgmma reads B only K-major (PTX ISA, wgmma: the transpose flags are for 16-bit types)
        check(b.stride(0) == 1 or b.shape[1] == 1, "b.stride()", tuple(b.stride()),
              "column-major [K, N] (b = w.t() of a row-major w [N, K]) for tf32: wgmma reads tf32 B only K-major")
    plan = _plan(a, b, a.dtype, config, out=out, upcast=interpreting() and a.dtype == torch.bfloat16)
    if tf32 and plan.constexprs is not None:
        plan.constexprs["INPUT_PRECISION"] = "tf32"
    return plan


def _plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config: dict | None, use_fast_accum: bool, out) -> _TmaPlan:
    """``scaled_matmul_tma``'s checks and launch plan (also the front door's for a TMA config)."""
    check_fp8_tma_operands(a_fp8, b_fp8, out)
    if config is not None and "BLOCK_K" in config:
        check(config["BLOCK_K"] >= 32, "config['BLOCK_K']", config["BLOCK_K"],
              "at least 32 for fp8 (sm_90's fp8 wgmma takes K in steps of 32)")
    kind_a, kind_b = fp8_epilogue_kinds(a_fp8, b_fp8, scale_a, scale_b, bias)
    return _plan(a_fp8, b_fp8, torch.bfloat16, config, out=out, bias=bias, upcast=interpreting(),
                 scales=(kind_a, kind_b), scale_copy=not (scale_a.is_contiguous() and scale_b.is_contiguous()),
                 max_imprecise_acc=None if use_fast_accum else "block_k")


class _TmaPlan:
    """One TMA launch minus the tensors (``_run``): the grid, scalar arguments and constexprs (``launch``, a
    ``KernelLaunch``: after its first launch it calls the compiled kernel directly), and the three descriptors'
    fields (``descriptors``: filled in by the first launch, which builds them with ``TensorDescriptor.from_tensor``
    and its checks; later launches copy them with the call's tensors as bases)."""

    __slots__ = ("route", "out_shape", "out_dtype", "grid", "tiles", "split_k", "stream_k", "blocks", "b_k_major",
                 "device_descriptors", "descriptors", "bias_copy", "scale_copy", "scalars", "constexprs", "names",
                 "launch")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))


_MATMUL_PLANS = plan_cache()
_SCALED_PLANS = plan_cache()


def _plan(a, b, out_dtype: torch.dtype, config: dict | None, *, out=None, bias=None, scales=None,
          scale_copy: bool = False, max_imprecise_acc: str | None = None, upcast: bool = False) -> _TmaPlan:
    """The launch of min(NUM_SMS, tiles) persistent programs for checked inputs. route: "launch", "empty" (M or
    N is 0) or "zero_k" (K = 0: TMA descriptors need every dimension >= 1, the product is the epilogue of a zero
    accumulator)."""
    (m, k), n = a.shape, b.shape[1]
    check(out is None or out.dtype == out_dtype, "out.dtype", getattr(out, "dtype", None), str(out_dtype))
    plan = _TmaPlan(route="launch", out_shape=(m, n), out_dtype=out_dtype, bias_copy=bias is not None and
                    not bias.is_contiguous(), scale_copy=scale_copy)
    if m == 0 or n == 0:
        plan.route = "empty"
        return plan
    if k == 0:
        plan.route = "zero_k"
        return plan
    check(TensorDescriptor is not None, "triton", triton.__version__, ">= 3.4 (triton.tools.tensor_descriptor)")
    meta, launch = _resolve_config(config, a)
    bm, bn, bk, subtile = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["EPILOGUE_SUBTILE"]
    plan.b_k_major = b.stride(0) == 1 and n > 1
    plan.device_descriptors = meta["WARP_SPECIALIZE"]  # see the module docstring
    plan.blocks = ([bm, bk], [bn, bk] if plan.b_k_major else [bk, bn], [bm, bn // subtile])
    c_stride = n if out is None else out.stride(0)
    plan.tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    plan.grid = (meta["NUM_SMS"] if meta["STREAM_K"] else min(meta["NUM_SMS"], plan.tiles * meta["SPLIT_K"]),)
    plan.split_k = meta["SPLIT_K"]
    plan.stream_k = meta["STREAM_K"]
    plan.scalars = (m, n, k, a.stride(0), b.stride(1) if plan.b_k_major else b.stride(0), c_stride)
    scale_a, scale_b = scales or ("none", "none")
    plan.constexprs = dict(
        DEVICE_DESCRIPTORS=plan.device_descriptors, B_K_MAJOR=plan.b_k_major, HAS_BIAS=bias is not None,
        SCALE_A=scale_a, SCALE_B=scale_b, UPCAST=upcast,
        MAX_IMPRECISE_ACC=bk if max_imprecise_acc == "block_k" else None,
        FLATTEN=not meta["WARP_SPECIALIZE"] and meta["SPLIT_K"] == 1, **meta, **launch)
    plan.names = ("a_fp8", "b_fp8") if scales else ("a", "b")
    plan.launch = KernelLaunch(_gemm_tma_kernel, plan.grid, plan.scalars, plan.constexprs)
    return plan


def _run(plan: _TmaPlan, a, b, bias, scale_a, scale_b, out) -> torch.Tensor:
    """Allocate C (or take ``out``), build the descriptors and launch: the per-call work of a cached plan."""
    c = torch.empty(plan.out_shape, dtype=plan.out_dtype, device=a.device) if out is None else out  # c: [M, N]
    if plan.route != "launch":
        return without_launch(plan, c, bias)
    if (a.data_ptr() | b.data_ptr() | c.data_ptr()) % TMA_ALIGN_BYTES:  # the plan checked strides, not addresses
        check_tma_operands(a, b, *plan.names, out)
    b_op = b.t() if plan.b_k_major else b  # b.t(): [N, K] row-major
    if plan.device_descriptors:
        use_torch_allocator()  # thread-local: set before every launch that builds descriptors on the device
        a_arg, b_arg, c_arg = a, b, c
    else:
        a_arg, b_arg, c_arg = reused_descriptors(plan, TensorDescriptor, a, b_op, c, plan.blocks)
    bias, scale_a, scale_b = launch_operands(plan, c, bias, scale_a, scale_b)
    if plan.split_k > 1 or plan.stream_k:  # fp32 partials (each slot written before it is read), zeroed counts
        slots = 2 * plan.grid[0] if plan.stream_k else plan.tiles * plan.split_k
        partials = torch.empty(slots * plan.constexprs["BLOCK_M"] * plan.constexprs["BLOCK_N"], dtype=torch.float32,
                               device=c.device)
        arrivals = split_k_arrivals(c.device, plan.tiles)
    else:
        partials = arrivals = c
    # a, b, c: aligned (checked above); Triton specializes the other pointers on their 16-byte alignment
    aligned = not (bias.data_ptr() | scale_a.data_ptr() | scale_b.data_ptr()) % TMA_ALIGN_BYTES
    plan.launch(aligned, a_arg, b_arg, c_arg, bias, scale_a, scale_b, partials, arrivals)
    return c


_ARRIVALS: dict = {}


def split_k_arrivals(device: torch.device, tiles: int) -> torch.Tensor:
    """The split-K launches' arrival counts on ``device``'s current stream: int32, one per output tile, zero
    between launches (each tile's last unit zeroes its count again), so a launch needs no memset. One buffer per
    (device, stream), grown to the largest tile count asked (a new buffer is zeroed): launches on one stream
    run in order, launches on two streams get two buffers."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream)
    counts = _ARRIVALS.get(key)
    if counts is None or counts.numel() < tiles:
        counts = _ARRIVALS[key] = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
    return counts


def _resolve_config(config: dict | None, a: torch.Tensor) -> tuple[dict, dict]:
    """Split a config into kernel meta-parameters (NUM_SMS filled in from the device) and launch options;
    config=None takes the first (default) entry of ``config_space``."""
    if config is None:
        config = config_space("interpreter" if interpreting() else {1: "fp8", 4: "tf32"}.get(a.element_size(), "bf16"))[0]
    missing = [key for key in _KEYS if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_KEYS} (NUM_SMS optional)")
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = config[key]
        check(is_power_of_two(value, 16, 256), f"config[{key!r}]", value,
              "a power of two in [16, 256] (tl.dot's smallest tile; TMA's largest box)")
    check(config["EPILOGUE_SUBTILE"] in (1, 2), "config['EPILOGUE_SUBTILE']", config["EPILOGUE_SUBTILE"], "1 or 2")
    check(not config["WARP_SPECIALIZE"] or HAS_WARP_SPECIALIZE, "config['WARP_SPECIALIZE']", True,
          f"False: triton {triton.__version__} has no tl.range(warp_specialize=...)")
    split, stream = config.get("SPLIT_K", 1), config.get("STREAM_K", False)
    check(type(split) is int and split >= 1, "config['SPLIT_K']", repr(split), "an int >= 1 (K slices per tile)")
    check(isinstance(stream, bool) and (not stream or (split == 1 and not config["WARP_SPECIALIZE"])),
          "config['STREAM_K']", repr(stream), "True or False; True only with SPLIT_K 1 and WARP_SPECIALIZE False")
    check(split == 1 or not config["WARP_SPECIALIZE"], "config['SPLIT_K']", split,
          "1 with WARP_SPECIALIZE (split-K runs on the flattened, not warp-specialized, loop)")
    meta = {key: config[key] for key in _KEYS[:6]}
    meta["NUM_SMS"] = config.get("NUM_SMS") or (4 if interpreting() else sm_count(a.device.index or 0))
    meta["SPLIT_K"] = split
    meta["STREAM_K"] = stream
    return meta, {key: config[key] for key in ("num_warps", "num_stages")}


def supported(device: torch.device | str | None = None) -> bool:
    """True when this kernel can run on ``device``: Triton has host tensor descriptors and ``tl.range``'s
    warp_specialize (>= 3.4), and the device is an NVIDIA GPU of compute capability 9.0+ (or the CPU under
    TRITON_INTERPRET=1)."""
    if TensorDescriptor is None or not HAS_WARP_SPECIALIZE:
        return False
    if interpreting():
        return device is None or torch.device(device).type == "cpu"
    if torch.version.hip or not torch.cuda.is_available():
        return False
    device = torch.device("cuda") if device is None else torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


# ------------------------------------------------------------------------------------------------ config space
SM90_SHARED_BYTES = spaces.SM90_SHARED_BYTES
GROUP_M = spaces.GROUP_M
shared_bytes = spaces.tma_shared_bytes


def config_space(dtype: str) -> list[dict]:
    """Launch configs for sm_90 and operand ``dtype`` ("bf16", "fp16" or "fp8"), the default first
    (``spaces.TMA_SM90_SPACE`` says where they come from); "interpreter" gives one small config for the CPU
    tests. NUM_SMS is left out: the wrapper takes the device's SM count."""
    check(dtype in ("bf16", "fp16", "fp8", "tf32", "interpreter"), "dtype", repr(dtype),
          "'bf16', 'fp16', 'fp8', 'tf32' or 'interpreter'")
    if dtype == "interpreter":
        return [dict(KERNEL=spaces.TMA_KERNEL, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, EPILOGUE_SUBTILE=1,
                     WARP_SPECIALIZE=False, num_warps=4, num_stages=2)]
    return spaces.tma_config_space({"fp8": 1, "tf32": 4}.get(dtype, 2), warp_specialize=HAS_WARP_SPECIALIZE)


# ------------------------------------------------------------------------------------- cross-compilation check
def crosscompile(config: dict, dtype: str = "bf16", target: str = "sm_90", *, b_k_major: bool = True,
                 scaling: str = "tensor", bias: bool = False, fast_accum: bool = False, num_sms: int = 132):
    """Compile one config for ``target`` on this machine (no GPU needed) and read shared memory, registers
    and spills, as ``crosscompile.inspect_config`` does for ``gemm.py``. Returns an ``Inspection``; its
    ``occupancy`` is the warps the compiled kernel launches (12 for a warp-specialized num_warps=4 config).
    fp8 compiles with ``scaling`` ("tensor" or "row") scales, and promotes every BLOCK_K unless fast_accum."""
    operand = {"fp8": "fp8e4nv", "tf32": "fp32"}.get(dtype, dtype)
    out = {"fp8": "bf16", "tf32": "fp32"}.get(dtype, dtype)
    bm, bn, bk, subtile = (config[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPILOGUE_SUBTILE"))
    device_descriptors = config["WARP_SPECIALIZE"]
    if device_descriptors:
        operands = {"a": f"*{operand}", "b": f"*{operand}", "c": f"*{out}"}
    else:  # how the JIT spells a host TensorDescriptor argument: tensordesc<dtype[block shape]>
        b_block = f"[{bn}, {bk}]" if b_k_major else f"[{bk}, {bn}]"
        operands = {"a": f"tensordesc<{operand}[{bm}, {bk}]>", "b": f"tensordesc<{operand}{b_block}>",
                    "c": f"tensordesc<{out}[{bm}, {bn // subtile}]>"}
    signature = {**operands, "bias_ptr": f"*{out}", "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32",
                 "partials_ptr": "*fp32", "arrivals_ptr": "*i32",
                 **{name: "i32" for name in ("M", "N", "K", "stride_am", "stride_b", "stride_cm")}}
    scale = scaling if dtype == "fp8" else "none"
    constexprs = dict(B_K_MAJOR=b_k_major, HAS_BIAS=bias, SCALE_A=scale, SCALE_B=scale, UPCAST=False,
                      MAX_IMPRECISE_ACC=bk if dtype == "fp8" and not fast_accum else None, NUM_SMS=num_sms,
                      DEVICE_DESCRIPTORS=device_descriptors,
                      FLATTEN=not config["WARP_SPECIALIZE"] and config.get("SPLIT_K", 1) == 1,
                      INPUT_PRECISION="tf32" if dtype == "tf32" else None, SPLIT_K=config.get("SPLIT_K", 1),
                      STREAM_K=config.get("STREAM_K", False),
                      **{k: config[k] for k in _KEYS[:6]})
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _gemm_tma_kernel.arg_names}
    divisible = ["M", "N", "K", "stride_am", "stride_b", "stride_cm"] + (["a", "b", "c"] if device_descriptors else [])
    source = xc.CompileSource(_gemm_tma_kernel, signature, constexprs, divisible)
    base = xc.Inspection("gemm_tma", target, dtype, config)
    try:
        compiled = xc.compile_for(target, source, {k: config[k] for k in ("num_warps", "num_stages")})
    except Exception as exc:  # noqa: BLE001 - a config that does not compile is a result
        return xc.failed(base, exc)
    shared = int(compiled.metadata.shared)
    registers, spill_bytes = xc._nvidia_resources(compiled.asm["cubin"])
    return xc._replace(base, shared_bytes=shared, registers=registers, spills=spill_bytes,
                       occupancy=int(compiled.metadata.num_warps),
                       fits=shared <= xc.SHARED_LIMIT_BYTES[target] and spill_bytes == 0)
