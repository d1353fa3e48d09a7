"""Hopper fp8 GEMM in Gluon: ``torch._scaled_mm``'s exact accumulation without draining the tensor cores.

C[M, N] = (A[M, K] * scale_a) @ (B[K, N] * scale_b) + bias, fp8 e4m3 operands, bf16 out, sm_90 only.

Why a third GEMM. sm_90's fp8 ``wgmma`` accumulates in a reduced-precision adder inside the tensor cores, so
``torch._scaled_mm(use_fast_accum=False)`` (cuBLAS) lifts the partial sum out into an fp32 register
accumulator every 128 products along K. ``gemm_tma.py`` asks Triton for the same with
``tl.dot(max_num_imprecise_acc=BLOCK_K)``, and Triton's lowering waits for *every* outstanding ``wgmma``
(``wgmma.wait_group 0``) before each add: the tensor cores go idle once per BLOCK_K and the kernel reaches
0.77-0.83 of ``_scaled_mm`` on an H200. cuBLAS, CUTLASS and DeepSeek's DeepGEMM hide the promotion:

    for each K block k:                       # the exact-accumulation main loop of this file
        partial[k] = wgmma(A_k, B_k)          #   async, into fresh registers (use_acc=False)
        wgmma.wait_group 1                    #   retires partial[k-1]; partial[k] keeps the tensor cores busy
        TMA-load K block k + STAGES - 1       #   into the ring slot partial[k-1] read
        acc += partial[k-1]                   #   the promotion, on the FP32 pipe, overlapped

Gluon (``triton.experimental.gluon``) exposes exactly these pieces: TMA copies into a shared-memory ring,
mbarriers, async ``warpgroup_mma`` and ``warpgroup_mma_wait(num_outstanding=1)``. The fast-accumulation
variant (``use_fast_accum=True``) keeps one accumulator chain in the tensor cores and promotes nothing.

Register budget (why 128x128 tiles with 8 warps): two warpgroups take 64 rows each; per thread the fp32
accumulator and two in-flight partials are 64 registers each (64 x 128 / 128 threads), 192 of the 255 a
thread may hold (the sm_90 builds use 212-239, no spills). A 128x256 tile would need 384, so it is offered for
fast accumulation only. The two partials alternate registers: the K loop is unrolled by two, because a
partial copied while its wgmma is in flight makes ptxas serialize every wgmma of the kernel (ptxas info
C7514; ``inspect_build`` reports it).

Pipelining across the persistent tile loop: loads are numbered per program (a load cursor walks this
program's tiles and K blocks in the order they are consumed) and run ahead of the ``wgmma``s (NUM_STAGES - 2
blocks beyond the one being issued), so the next tile's first blocks are in flight during this tile's
epilogue. Ring slot =
index % NUM_STAGES, mbarrier phase parity = (index // NUM_STAGES) & 1. A slot is refilled only after the
``wgmma`` that read it has retired: one load is issued after each retirement (the wait(1) in the loop, the
wait(0) that ends a tile). With two consumer warpgroups the retirement is per warpgroup; Triton's
shared-memory barrier analysis (membar) puts a CTA barrier between the ``wgmma`` reads of the ring and the TMA
write into it, so the slot is free in both.

Warp specialization (WARP_SPECIALIZE=True, ``gl.warp_specialize``): one extra warp (its own warpgroup,
LOADER_REGISTERS registers) runs the loads, waiting on an ``empty`` mbarrier per slot; the 8 consumer warps
(re-allotted WS_CONSUMER_REGISTERS registers) arrive on it after a partition barrier once both warpgroups have
retired the slot's wgmma. The consumers' K step then has no TMA or address work: ~110 instructions per warp
against ~150 inline (sm_90 SASS), 64 of them the promotion's FADDs.

Edges: K not a multiple of BLOCK_K reads zeros past K (TMA zero-fills out-of-bounds boxes), rows past M and
columns past N are dropped by the TMA store. Inputs: as ``gemm_tma.scaled_matmul_tma`` (A row-major, B
column-major, 16-byte aligned rows, N % 8 == 0; ``checks.check_fp8_tma_operands``).

Versions: written against Triton 3.6.0 (the H200 machine) and 3.7.1; ``crosscompile`` builds it for sm_90
on a CPU-only machine. Gluon has no interpreter: on the CPU only the host-side checks run.
"""

from __future__ import annotations

import functools

import torch
import triton

from workbench.kernels._common import (capability, check, frozen, interpreting, launch_operands, plan_cache,
                                       reused_descriptors, sm_count, tensor_key, undo_interpreter_patches,
                                       without_launch)
from workbench.kernels._launch import KernelLaunch, pointers_aligned
from workbench.kernels._tiling import grouped_tile_gluon, is_power_of_two, tma_aligned
from workbench.kernels.checks import check_fp8_tma_operands, check_tma_operands, fp8_epilogue_kinds
from workbench.kernels.crosscompile import GluonBuild, inspect_gluon_build
from workbench.kernels.reference import reference_scaled_matmul  # noqa: F401 - the reference, re-exported
from workbench.kernels.spaces import (
    GLUON_KERNEL,
    gluon_config_space,
    gluon_shared_bytes,
)

try:  # Gluon: Triton >= 3.5 (the 3.6 / 3.7 API used here)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import (
        TensorDescriptor as GluonTensorDescriptor,
    )

    # A CTA-wide barrier (a named barrier for the warps of a warp-specialized partition): renamed in Triton 3.7.
    _cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier
    HAS_GLUON = True
except ImportError:  # pragma: no cover - older Triton
    HAS_GLUON = False

_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_STAGES", "WARP_SPECIALIZE", "num_warps")
SM90_SHARED_BYTES = 227 * 1024
"""Shared memory one CTA may use on sm_90 (CUDA programming guide, compute capability 9.0)."""
MAX_REGISTERS_PER_THREAD = 255
"""sm_90's per-thread register limit (CUDA programming guide); past it ptxas spills."""
WGMMA_ROWS_PER_WARPGROUP = 64
"""A warpgroup (4 warps) covers 64 rows of a wgmma tile (PTX ISA, wgmma.mma_async m64nNk32)."""
LOADER_REGISTERS = 40
"""Registers per thread of the warp-specialized loader warp (setmaxnreg; a multiple of 8 in [24, 256]): it only
computes tile coordinates and issues TMA. A guess: the tutorials use 24 for pure TMA warps; 40 leaves room for
the grouped tile order's divisions."""
WS_CONSUMER_REGISTERS = 240
"""Registers per thread Triton gives the consumer warps of a warp-specialized launch with one LOADER_REGISTERS
loader warp (``setmaxnreg.inc 240`` in the PTX of triton 3.6.0 and 3.7.1 builds)."""
MIN_OTHER_REGISTERS = 32
"""Registers per thread besides the accumulators (addresses, loop counters, barrier phases): a lower bound
for the config check. The builds of ``config_space`` use 20-52 (``inspect_build`` against
``accumulator_registers``, triton 3.6.0 and 3.7.1); whether a config spills is the build's to say."""


if HAS_GLUON:

    @gluon.jit
    def _schedule(M, N, K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr):
        """This program's share of the work: (first tile, programs, tiles_m, tiles_n, its tile count, k_steps).
        The grid is min(SMs, tiles), so every program has at least one tile."""
        first_tile = gl.program_id(0)
        programs = gl.num_programs(0)
        tiles_m = gl.cdiv(M, BLOCK_M)
        tiles_n = gl.cdiv(N, BLOCK_N)
        my_tiles = gl.cdiv(tiles_m * tiles_n - first_tile, programs)
        return first_tile, programs, tiles_m, tiles_n, my_tiles, gl.cdiv(K, BLOCK_K)

    @gluon.jit
    def _issue_load(ld, M, N, K, a_desc, b_desc, ready, a_ring, b_ring, GROUP_M: gl.constexpr,
                    NUM_STAGES: gl.constexpr):
        """TMA-load the K block the load cursor ``ld`` = (p, k, local, pid_m, pid_n) points at: this program's
        p-th block, K block k of its tile number ``local`` (output tile pid_m, pid_n), into ring slot
        p % NUM_STAGES; ready[slot] completes when both tiles have landed. Predicated off past the last block.
        Returns the cursor advanced by one block (tile coordinates are recomputed only when a tile ends: the
        grouped order's integer divisions would otherwise cost ~75 instructions per K step in every warp)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        first_tile, programs, tiles_m, tiles_n, my_tiles, k_steps = _schedule(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
        p, k, local, pid_m, pid_n = ld
        valid = p < my_tiles * k_steps
        slot = p % NUM_STAGES
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=valid)
        tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k * BLOCK_K], bar, a_ring.index(slot), valid)
        tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k * BLOCK_K], bar, b_ring.index(slot), valid)
        k += 1
        if k == k_steps:  # the next block starts this program's next tile
            k = 0
            local += 1
            # past the last tile: any real tile (its loads are predicated off), not a division by zero
            tile = gl.minimum(first_tile + local * programs, tiles_m * tiles_n - 1)
            pid_m, pid_n = grouped_tile_gluon(tile, tiles_m, tiles_n, GROUP_M)
        return p + 1, k, local, pid_m, pid_n

    @gluon.jit
    def _release(ld, block, M, N, K, a_desc, b_desc, ready, empty, a_ring, b_ring, GROUP_M: gl.constexpr,
                 NUM_STAGES: gl.constexpr, WARP_SPECIALIZE: gl.constexpr):
        """K block ``block``'s wgmma has retired in this warpgroup: its ring slot may be refilled. Inline loads
        refill it now (the next load, NUM_STAGES blocks ahead); with a loader partition, signal empty[slot] once
        every consumer warpgroup has retired it (the thread barrier; the arrive is issued by one thread)."""
        if WARP_SPECIALIZE:
            _cta_barrier()
            mbarrier.arrive(empty.index(block % NUM_STAGES), count=1)
        else:
            ld = _issue_load(ld, M, N, K, a_desc, b_desc, ready, a_ring, b_ring, GROUP_M, NUM_STAGES)
        return ld

    @gluon.jit
    def _wait_ready(c, ready, a_ring, b_ring, NUM_STAGES: gl.constexpr):
        """Wait for K block c's tiles; returns A [BLOCK_M, BLOCK_K] and B as a [BLOCK_K, BLOCK_N] K-major view."""
        slot = c % NUM_STAGES
        mbarrier.wait(ready.index(slot), (c // NUM_STAGES) & 1)
        return a_ring.index(slot), b_ring.index(slot).permute((1, 0))

    @gluon.jit
    def _promote_step(c, ld, acc, in_flight, zero, M, N, K, a_desc, b_desc, ready, empty, a_ring, b_ring,
                      GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, WARP_SPECIALIZE: gl.constexpr):
        """One exact-accumulation K step: issue block c's wgmma into fresh registers (use_acc=False), retire the
        partial in flight (wait_group 1: block c keeps the tensor cores busy), release the retired block's ring
        slot, add the retired partial into acc. Returns (c + 1, load cursor, acc, block c's partial in flight)."""
        a_tile, b_tile = _wait_ready(c, ready, a_ring, b_ring, NUM_STAGES)
        issued = warpgroup_mma(a_tile, b_tile, zero, use_acc=False, is_async=True)
        retired = warpgroup_mma_wait(num_outstanding=1, deps=(in_flight, ))
        ld = _release(ld, c - 1, M, N, K, a_desc, b_desc, ready, empty, a_ring, b_ring, GROUP_M, NUM_STAGES,
                      WARP_SPECIALIZE)
        return c + 1, ld, acc + retired, issued

    @gluon.jit
    def _epilogue(acc, off_m, off_n, M, N, c_desc, c_smem, bias_ptr, scale_a_ptr, scale_b_ptr, scale,
                  HAS_BIAS: gl.constexpr, SCALE_A: gl.constexpr, SCALE_B: gl.constexpr, MMA: gl.constexpr):
        """acc [BLOCK_M, BLOCK_N] fp32 -> scales -> bias -> bf16 -> TMA store (torch._scaled_mm's order)."""
        BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
        if SCALE_A == "tensor" or SCALE_B == "tensor":
            acc = acc * scale
        if SCALE_A == "row":
            rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, MMA))  # [BLOCK_M]
            acc = acc * gl.expand_dims(gl.load(scale_a_ptr + rows, mask=rows < M, other=0.0), 1)
        if SCALE_B == "row" or HAS_BIAS:
            cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, MMA))  # [BLOCK_N]
            if SCALE_B == "row":
                acc = acc * gl.expand_dims(gl.load(scale_b_ptr + cols, mask=cols < N, other=0.0), 0)
            if HAS_BIAS:
                bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
                acc = acc + gl.expand_dims(bias, 0)
        tma.store_wait(0)  # the previous tile's store has left c_smem (it had this tile's main loop to do so)
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)  # rows/columns past M, N are dropped

    @gluon.jit
    def _mma_partition(a_desc, b_desc, c_desc, c_smem, ready, empty, a_ring, b_ring, bias_ptr, scale_a_ptr,
                       scale_b_ptr, M, N, K, EXACT: gl.constexpr, HAS_BIAS: gl.constexpr, SCALE_A: gl.constexpr,
                       SCALE_B: gl.constexpr, GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, MMA: gl.constexpr,
                       WARP_SPECIALIZE: gl.constexpr):
        """The num_warps consumer warps: wgmma main loop and epilogue of each of this program's tiles. Without
        warp specialization they also issue the loads (NUM_STAGES - 1 ahead, one after each retirement)."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        first_tile, programs, tiles_m, tiles_n, my_tiles, k_steps = _schedule(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
        scale = 1.0  # per-tensor scales fold into one scalar, loaded once per program
        if SCALE_A == "tensor":
            scale = scale * gl.load(scale_a_ptr)
        if SCALE_B == "tensor":
            scale = scale * gl.load(scale_b_ptr)

        zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=MMA)  # a constant: use_acc=False reads nothing
        # The load cursor (inline loads only): (loads issued, its K block, its tile number, that tile's pid_m, pid_n).
        ld_m, ld_n = grouped_tile_gluon(first_tile, tiles_m, tiles_n, GROUP_M)
        ld = (0, 0, 0, ld_m, ld_n)
        if not WARP_SPECIALIZE:
            for _ in gl.static_range(NUM_STAGES - 1):
                ld = _issue_load(ld, M, N, K, a_desc, b_desc, ready, a_ring, b_ring, GROUP_M, NUM_STAGES)
        c = 0  # K blocks consumed
        for local in range(my_tiles):
            pid_m, pid_n = grouped_tile_gluon(first_tile + local * programs, tiles_m, tiles_n, GROUP_M)
            a_tile, b_tile = _wait_ready(c, ready, a_ring, b_ring, NUM_STAGES)
            c += 1
            if EXACT:
                # acc and the partials: [BLOCK_M, BLOCK_N] fp32 in MMA layout, 64 registers per thread each.
                # Unrolled by two so each partial keeps its registers: a loop-carried partial reassigned from
                # the one in flight would be copied while the wgmma writes it, and ptxas then serializes every
                # wgmma of the kernel (ptxas info C7514).
                acc = zero
                x = warpgroup_mma(a_tile, b_tile, zero, use_acc=False, is_async=True)  # K block 0, in flight
                for _pair in range((k_steps - 1) // 2):
                    c, ld, acc, y = _promote_step(c, ld, acc, x, zero, M, N, K, a_desc, b_desc, ready, empty,
                                                  a_ring, b_ring, GROUP_M, NUM_STAGES, WARP_SPECIALIZE)
                    c, ld, acc, x = _promote_step(c, ld, acc, y, zero, M, N, K, a_desc, b_desc, ready, empty,
                                                  a_ring, b_ring, GROUP_M, NUM_STAGES, WARP_SPECIALIZE)
                if (k_steps - 1) % 2 == 1:  # an even number of K blocks: one more step, then drain its partial
                    c, ld, acc, last = _promote_step(c, ld, acc, x, zero, M, N, K, a_desc, b_desc, ready, empty,
                                                     a_ring, b_ring, GROUP_M, NUM_STAGES, WARP_SPECIALIZE)
                    acc = acc + warpgroup_mma_wait(num_outstanding=0, deps=(last, ))
                else:
                    acc = acc + warpgroup_mma_wait(num_outstanding=0, deps=(x, ))
            else:
                acc = warpgroup_mma(a_tile, b_tile, zero, use_acc=False, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))  # waits for nothing: a tensor again
                for _k in range(1, k_steps):
                    a_tile, b_tile = _wait_ready(c, ready, a_ring, b_ring, NUM_STAGES)
                    acc = warpgroup_mma(a_tile, b_tile, acc, is_async=True)
                    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))  # retires block c - 1
                    ld = _release(ld, c - 1, M, N, K, a_desc, b_desc, ready, empty, a_ring, b_ring, GROUP_M,
                                  NUM_STAGES, WARP_SPECIALIZE)
                    c += 1
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            # The tile's last block retired: release its slot (inline: the load NUM_STAGES blocks ahead).
            ld = _release(ld, c - 1, M, N, K, a_desc, b_desc, ready, empty, a_ring, b_ring, GROUP_M, NUM_STAGES,
                          WARP_SPECIALIZE)
            _epilogue(acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, c_desc, c_smem, bias_ptr, scale_a_ptr,
                      scale_b_ptr, scale, HAS_BIAS, SCALE_A, SCALE_B, MMA)
        tma.store_wait(0)

    @gluon.jit
    def _load_partition(a_desc, b_desc, ready, empty, a_ring, b_ring, M, N, K, GROUP_M: gl.constexpr,
                        NUM_STAGES: gl.constexpr):
        """The loader warp (warp specialization): fill the ring in the consumers' order, waiting for empty[slot]
        before reusing a slot. A fresh mbarrier counts as having completed the phase before phase 0, so the
        first NUM_STAGES waits (parity 1) pass at once."""
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        first_tile, programs, tiles_m, tiles_n, my_tiles, k_steps = _schedule(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
        p = 0
        for local in range(my_tiles):
            pid_m, pid_n = grouped_tile_gluon(first_tile + local * programs, tiles_m, tiles_n, GROUP_M)
            for k in range(k_steps):
                slot = p % NUM_STAGES
                mbarrier.wait(empty.index(slot), ((p // NUM_STAGES) & 1) ^ 1)
                bar = ready.index(slot)
                mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k * BLOCK_K], bar, a_ring.index(slot))
                tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k * BLOCK_K], bar, b_ring.index(slot))
                p += 1

    @gluon.jit(do_not_specialize=["M", "N", "K"])  # one build per config: M, N, K only bound loops and masks
    def _gemm_fp8_kernel(
        a_desc, b_desc, c_desc, bias_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
        EXACT: gl.constexpr, HAS_BIAS: gl.constexpr, SCALE_A: gl.constexpr, SCALE_B: gl.constexpr,
        GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, MMA: gl.constexpr, WARP_SPECIALIZE: gl.constexpr,
        LOADER_REGISTERS: gl.constexpr,
    ):
        """Program p computes output tiles p, p + programs, ... (grouped order).

        a_desc: A [M, K] fp8, block [BLOCK_M, BLOCK_K]; b_desc: B^T [N, K] fp8 (B column-major), block
        [BLOCK_N, BLOCK_K]; c_desc: C [M, N] bf16, block [BLOCK_M, BLOCK_N]. MMA: the accumulator's
        NVMMADistributedLayout (wgmma v3, warps stacked along M, instr [16, BLOCK_N, 32]).
        EXACT: promote every BLOCK_K into fp32 (use_fast_accum=False); else one tensor-core chain per tile.
        SCALE_A / SCALE_B: "tensor" (one fp32 scalar) or "row" (scale_a [M], scale_b [N]).
        WARP_SPECIALIZE: one extra warp issues the TMA loads (LOADER_REGISTERS registers per thread).
        """
        BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
        a_ring = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_ring = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
        c_smem = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        if WARP_SPECIALIZE:
            gl.warp_specialize([
                (_mma_partition, (a_desc, b_desc, c_desc, c_smem, ready, empty, a_ring, b_ring, bias_ptr,
                                  scale_a_ptr, scale_b_ptr, M, N, K, EXACT, HAS_BIAS, SCALE_A, SCALE_B, GROUP_M,
                                  NUM_STAGES, MMA, WARP_SPECIALIZE)),
                (_load_partition, (a_desc, b_desc, ready, empty, a_ring, b_ring, M, N, K, GROUP_M, NUM_STAGES)),
            ], [1], [LOADER_REGISTERS])
        else:
            _mma_partition(a_desc, b_desc, c_desc, c_smem, ready, empty, a_ring, b_ring, bias_ptr, scale_a_ptr,
                           scale_b_ptr, M, N, K, EXACT, HAS_BIAS, SCALE_A, SCALE_B, GROUP_M, NUM_STAGES, MMA,
                           WARP_SPECIALIZE)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(ready.index(i))
            mbarrier.invalidate(empty.index(i))


# ---------------------------------------------------------------------------------------------- launch wrapper
def scaled_matmul_gluon(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                        bias: torch.Tensor | None = None, config: dict | None = None, *, use_fast_accum: bool = False,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16, as ``torch._scaled_mm(a, b, scale_a, scale_b,
    bias, out_dtype=torch.bfloat16, use_fast_accum=...)``: a_fp8 [M, K] row-major, b_fp8 [K, N] column-major,
    fp32 scales per tensor (scalars) or per row (scale_a [M] or [M, 1], scale_b [N] or [1, N]), bias [N].
    Same contract as ``gemm_tma.scaled_matmul_tma``; sm_90 only (``supported``). Checks, config, grid,
    constexprs, descriptor layouts and block shapes are cached per distinct call (``_GluonPlan``); a repeated call
    allocates C, copies the three descriptors' fields onto its tensors and calls the compiled kernel's launcher
    directly (``_launch.KernelLaunch``)."""
    try:
        key = (tensor_key(a_fp8), tensor_key(b_fp8), tensor_key(scale_a), tensor_key(scale_b),
               tensor_key(bias), tensor_key(out), bool(use_fast_accum), frozen(config))
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config value: the checks say which
        key = plan = None
    if plan is None:
        plan = _plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum, out)
        if key is not None:
            _PLANS.put(key, plan)
    return _run(plan, a_fp8, b_fp8, bias, scale_a, scale_b, out)


class _GluonPlan:
    """One launch minus the tensors (``_run``): the grid, scalars and constexprs in ``launch`` (a ``KernelLaunch``:
    after its first launch it calls the compiled kernel's launcher directly), the descriptors' block shapes and
    shared layouts (``blocks``, ``layouts``) and, once the first launch has built them, their fields
    (``descriptors``, as in ``gemm_tma._TmaPlan``: only the base tensor changes from call to call)."""

    __slots__ = ("route", "out_shape", "grid", "blocks", "layouts", "descriptors", "bias_copy", "scale_copy",
                 "scalars", "constexprs", "launch")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))


_PLANS = plan_cache()


def _plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum: bool, out) -> _GluonPlan:
    """``scaled_matmul_gluon``'s checks and launch plan (also the front door's for a Gluon config)."""
    check_fp8_tma_operands(a_fp8, b_fp8, out)
    (m, k), n = a_fp8.shape, b_fp8.shape[1]
    kind_a, kind_b = fp8_epilogue_kinds(a_fp8, b_fp8, scale_a, scale_b, bias)
    config = resolve_config(config, exact=not use_fast_accum)
    check(out is None or out.dtype == torch.bfloat16, "out.dtype", getattr(out, "dtype", None), "torch.bfloat16")
    plan = _GluonPlan(route="launch", out_shape=(m, n), bias_copy=bias is not None and not bias.is_contiguous(),
                      scale_copy=not (scale_a.is_contiguous() and scale_b.is_contiguous()))
    if m == 0 or n == 0:
        plan.route = "empty"
        return plan
    if k == 0:  # TMA descriptors need every dimension >= 1; the product is the epilogue of a zero accumulator
        plan.route = "zero_k"
        return plan
    check(HAS_GLUON, "triton", triton.__version__, ">= 3.6 with triton.experimental.gluon")
    check(not interpreting(), "TRITON_INTERPRET", "1", "unset: Gluon kernels have no interpreter (use gemm_tma)")
    check(capability(a_fp8.device.index or 0) == (9, 0), "device", f"compute capability "
          f"{capability(a_fp8.device.index or 0)}", "(9, 0): the kernel uses sm_90's wgmma (Hopper only)")
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    plan.blocks = ([bm, bk], [bn, bk], [bm, bn])
    plan.layouts = (_operand_layout(bm, bk), _operand_layout(bn, bk), _output_layout(bm, bn))
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    plan.grid = (min(config.get("NUM_SMS") or sm_count(a_fp8.device.index or 0), tiles),)
    plan.scalars = (m, n, k)
    plan.constexprs = dict(_constexprs(config, exact=not use_fast_accum, has_bias=bias is not None, scale_a=kind_a,
                                       scale_b=kind_b), num_warps=config["num_warps"])
    plan.launch = KernelLaunch(_gemm_fp8_kernel, plan.grid, plan.scalars, plan.constexprs)
    return plan


def _run(plan: _GluonPlan, a_fp8, b_fp8, bias, scale_a, scale_b, out) -> torch.Tensor:
    """Allocate C (or take ``out``), build the descriptors and launch: the per-call work of a cached plan."""
    c = torch.empty(plan.out_shape, dtype=torch.bfloat16, device=a_fp8.device) if out is None else out  # c: [M, N]
    if plan.route != "launch":
        return without_launch(plan, c, bias)
    if not tma_aligned(a_fp8.data_ptr() | b_fp8.data_ptr() | c.data_ptr()):  # the plan checked strides, not addresses
        check_tma_operands(a_fp8, b_fp8, "a_fp8", "b_fp8", out)
    b_t = b_fp8.t()  # [N, K] row-major
    a_desc, b_desc, c_desc = reused_descriptors(plan, GluonTensorDescriptor, a_fp8, b_t, c, plan.blocks, plan.layouts)
    bias, scale_a, scale_b = launch_operands(plan, c, bias, scale_a, scale_b)
    # a, b, c: aligned (checked above); Triton specializes the other pointers on their 16-byte alignment
    plan.launch(pointers_aligned(bias, scale_a, scale_b), a_desc, b_desc, c_desc, bias, scale_a, scale_b)
    return c


def _constexprs(config: dict, *, exact: bool, has_bias: bool, scale_a: str, scale_b: str) -> dict:
    return dict(EXACT=exact, HAS_BIAS=has_bias, SCALE_A=scale_a, SCALE_B=scale_b, GROUP_M=config["GROUP_M"],
                NUM_STAGES=config["NUM_STAGES"],
                MMA=_mma_layout(config["BLOCK_M"], config["BLOCK_N"], config["num_warps"]),
                WARP_SPECIALIZE=bool(config["WARP_SPECIALIZE"]), LOADER_REGISTERS=LOADER_REGISTERS)


@functools.lru_cache(maxsize=32)  # asked by every new plan and by crosscompile: the layouts of a few tile shapes
def _operand_layout(rows: int, block_k: int):
    """Shared layout of an fp8 [rows, BLOCK_K] K-major tile: the widest swizzle TMA and wgmma both take."""
    return gl.NVMMASharedLayout.get_default_for([rows, block_k], gl.float8e4nv)


@functools.lru_cache(maxsize=32)
def _output_layout(block_m: int, block_n: int):
    return gl.NVMMASharedLayout.get_default_for([block_m, block_n], gl.bfloat16)


@functools.lru_cache(maxsize=32)
def _mma_layout(block_m: int, block_n: int, num_warps: int):
    """wgmma accumulator layout: warps stacked along M (4 per 64 rows), one instruction spanning BLOCK_N."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 32])


def supported(device: torch.device | str | None = None) -> bool:
    """True when this kernel can run on ``device``: Triton has Gluon, and the device is an sm_90 GPU."""
    if not HAS_GLUON or interpreting() or torch.version.hip or not torch.cuda.is_available():
        return False
    device = torch.device("cuda") if device is None else torch.device(device)
    return device.type == "cuda" and capability(device.index or 0) == (9, 0)


# ------------------------------------------------------------------------------------------------ config space
KERNEL = GLUON_KERNEL
"""The ``KERNEL`` key of a config for this file (gemm_tma's is "tma"; gemm.py's configs have none)."""


def shared_bytes(config: dict) -> int:
    """Shared memory of a config: NUM_STAGES fp8 A and B tiles, the bf16 output tile, two mbarriers per stage
    (warp specialization adds a few bytes of its own); ``spaces.gluon_shared_bytes``."""
    return gluon_shared_bytes(*(config[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_STAGES")))


def accumulator_registers(config: dict, *, exact: bool) -> int:
    """fp32 accumulator registers per thread: BLOCK_M x BLOCK_N over the threads, three copies when exact
    (the fp32 sum and two partials in flight), one when fast."""
    per_copy = config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])
    return per_copy * (3 if exact else 1)


def resolve_config(config: dict | None, *, exact: bool = True) -> dict:
    """Check a config (None: the first of ``config_space``) and return it; raises ``KernelInputError`` naming
    the key for what sm_90, wgmma and the register file do not allow."""
    if config is None:
        return config_space("exact" if exact else "fast")[0]
    check(isinstance(config, dict), "config", type(config).__name__, "a dict")
    missing = [key for key in _KEYS if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_KEYS} (NUM_SMS optional)")
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = config[key]
        check(is_power_of_two(value, 32), f"config[{key!r}]", value, "a power of two >= 32")
    warps = config["num_warps"]
    check(warps in (4, 8), "config['num_warps']", warps, "4 or 8 (one or two warpgroups)")
    check(config["BLOCK_M"] == WGMMA_ROWS_PER_WARPGROUP * (warps // 4), "config['BLOCK_M']", config["BLOCK_M"],
          f"{WGMMA_ROWS_PER_WARPGROUP * (warps // 4)} with num_warps={warps}: each warpgroup owns 64 rows")
    check(config["BLOCK_N"] <= 256, "config['BLOCK_N']", config["BLOCK_N"], "<= 256 (wgmma's largest N)")
    check(config["BLOCK_K"] <= 256, "config['BLOCK_K']", config["BLOCK_K"], "<= 256 (TMA's largest box)")
    check(isinstance(config["GROUP_M"], int) and config["GROUP_M"] >= 1, "config['GROUP_M']", config["GROUP_M"],
          "an int >= 1")
    check(config["WARP_SPECIALIZE"] in (True, False), "config['WARP_SPECIALIZE']", config["WARP_SPECIALIZE"],
          "True or False")
    # Inline loads refill a slot only after the next block's wgmma is issued and the previous one retired, so
    # two blocks are held while the third loads; the loader warp refills as soon as a block retires.
    least = 2 if config["WARP_SPECIALIZE"] else 3
    check(isinstance(config["NUM_STAGES"], int) and config["NUM_STAGES"] >= least, "config['NUM_STAGES']",
          config["NUM_STAGES"], f"an int >= {least} ({'with' if least == 2 else 'without'} warp specialization; "
          "fewer deadlocks the pipeline)")
    check(shared_bytes(config) <= SM90_SHARED_BYTES, "config", f"{shared_bytes(config)} bytes of shared memory",
          f"at most {SM90_SHARED_BYTES} (sm_90): fewer NUM_STAGES or smaller tiles")
    registers = accumulator_registers(config, exact=exact) + MIN_OTHER_REGISTERS
    limit = WS_CONSUMER_REGISTERS if config["WARP_SPECIALIZE"] else MAX_REGISTERS_PER_THREAD
    check(registers <= limit, "config", f"~{registers} registers per thread ({'exact' if exact else 'fast'} "
          f"accumulation)", f"at most {limit}{' (warp-specialized consumers)' if config['WARP_SPECIALIZE'] else ''}: "
          "a smaller BLOCK_N")
    return config


_BELOW_THE_SELECTOR = {"exact": [(128, 5, False)], "fast": [(256, 3, True), (256, 3, False)]}
"""(BLOCK_N, NUM_STAGES, WARP_SPECIALIZE) of the configs the H200 probe ranked below the selector's
(benchmarks/results/h200/kernels/gluon/summary.txt: exact s5 inline 0.824; fast 128 x 256 s3 ws 1.023 with one
bad shape in the kernel suite, inline 0.702), kept for explicit use and for the probe to re-rank."""


def config_space(accumulation: str = "exact") -> list[dict]:
    """Launch configs for ``accumulation`` "exact" (use_fast_accum=False) or "fast", the default first: the
    selector's configs (``spaces.gluon_config_space``, ranked by the H200 probe, its best first), then the ones
    the probe ranked below them. 128 x 128 x 128 fp8 stages are 32 KiB: 6 fit next to the 32 KiB output tile;
    with one accumulator (fast) 128 x 256 tiles fit too (128 registers per thread)."""
    ranked = gluon_config_space(accumulation)  # checks ``accumulation``
    return ranked + [dict(ranked[0], BLOCK_N=bn, NUM_STAGES=stages, WARP_SPECIALIZE=ws)
                     for bn, stages, ws in _BELOW_THE_SELECTOR[accumulation]]


# ------------------------------------------------------------------------------------- cross-compilation check
def crosscompile(config: dict, *, exact: bool = True, scaling: str = "tensor", bias: bool = False,
                 capability: int = 90):
    """Compile one config for sm_90 on this machine (no GPU needed) with ``triton.compile`` of a
    ``GluonASTSource``; returns the CompiledKernel (``.metadata.shared``, ``.n_regs``/``.n_spills`` are filled in
    only on a GPU, so read registers and spills with ``kernel_resources``; ``.asm['ptx']`` for the main loop)."""
    check(HAS_GLUON, "triton", triton.__version__, ">= 3.6 with triton.experimental.gluon")
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    config = resolve_config(config, exact=exact)
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    descriptors = {"a_desc": f"tensordesc<fp8e4nv[{bm}, {bk}],{_operand_layout(bm, bk)!r}>",
                   "b_desc": f"tensordesc<fp8e4nv[{bn}, {bk}],{_operand_layout(bn, bk)!r}>",
                   "c_desc": f"tensordesc<bf16[{bm}, {bn}],{_output_layout(bm, bn)!r}>"}
    signature = {**descriptors, "bias_ptr": "*bf16", "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32",
                 "M": "i32", "N": "i32", "K": "i32"}
    constexprs = _constexprs(config, exact=exact, has_bias=bias, scale_a=scaling, scale_b=scaling)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _gemm_fp8_kernel.arg_names}
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in ("bias_ptr", "scale_a_ptr", "scale_b_ptr")}
    source = GluonASTSource(_gemm_fp8_kernel, signature, {(names.index(k),): v for k, v in constexprs.items()}, attrs)
    undo_interpreter_patches()  # a CPU kernel run earlier in this process may have left some
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": config["num_warps"]})


def inspect_build(config: dict, *, exact: bool = True, scaling: str = "tensor", bias: bool = False) -> GluonBuild:
    """Compile ``config`` for sm_90 (``crosscompile``) and read shared memory, registers, spills and the wgmma
    waits of the build (``crosscompile.inspect_gluon_build``)."""
    return inspect_gluon_build(crosscompile(config, exact=exact, scaling=scaling, bias=bias), timeout_s=120)
