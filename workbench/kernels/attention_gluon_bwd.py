"""Flash attention backward for Hopper in Gluon, FlashAttention-3 style (Shah et al. 2024, arXiv:2407.08608, the
backward of Sec. 3; FA3's ``hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp``).

Same contract as ``attention.flash_attention_bwd``: dO, q [B, Hq, S, D], k, v [B, Hkv, S, D] (query head h reads kv
head h // (Hq / Hkv)), O and the natural-log lse [B, Hq, S] of a forward (``attention`` or ``attention_gluon``);
bf16 or fp16, D in (64, 128), causal or not; returns dQ, dK, dV in q's dtype. sm_90 only.

Why a second backward. The Triton one (``attention.py``) runs two passes (dQ, then dK/dV: seven GEMMs a tile pair)
through ``tl.dot``; FA3 does the five GEMMs of the paper in one pass, with dQ summed in fp32 by atomics, and
keeps the tensor cores fed with the pieces Gluon exposes:

1. One program per (key block of BLOCK_N rows, batch, kv head); it loops over the query heads of its GQA group
   and, per head, over the query blocks that see its keys (causal: from the diagonal on), so dK and dV of the
   group sum in registers (no atomics for them) and are stored once.
2. Warp specialization: a 1-warp producer TMA-loads K and V once, then Q_i and dO_i of every step into a
   NUM_STAGES ring (``q_ready`` / ``do_ready`` mbarriers per slot, apart so S^T starts before dO lands); the
   consumers arrive on ``empty`` once the GEMMs reading a slot have retired.
3. BLOCK_N // 64 consumer warpgroups, each owning 64 keys (one wgmma M) and sharing the Q/dO ring. Per step, in
   FA3's "SdP_swapAB" orientation (keys on the rows, so P^T and dS^T land in registers as the A operands of the
   dV and dK GEMMs, no shared-memory round trip):

       S^T  = K Q^T                async wgmma                           [64, BLOCK_M]
       dP^T = V dO^T               async wgmma, issued right after
       P^T  = exp2(S^T * scale * log2(e) - lse * log2(e))    under dP^T's GEMM
       dS^T = P^T * (dP^T - delta)
       dV  += P^T dO               register A                            [64, D]
       dK  += dS^T Q               register A
       dQ_i = dS K                 dS^T through shared memory (A transposed) -> fp32 atomics into dQ_acc,
                                   from whole rows (``DQ_ROW_LAYOUT``, through shared memory)

   Each warpgroup adds its 64 keys' part of dQ_i; FA3 instead splits dQ's columns between the warpgroups after a
   barrier and reduces through TMA (``cp.reduce.async.bulk``, which Gluon 3.6/3.7 does not expose): twice the
   atomics here, one cross-warpgroup barrier fewer.
4. Around it, two small Triton launches: ``delta = rowsum(dO * O)`` with dQ_acc zeroed (the paper's
   preprocessing), and dQ = scale * dQ_acc in q's dtype (its postprocessing). With a GQA group split
   (``GROUP_SPLIT``: the group's query heads shared among programs, which then add dK and dV into fp32
   accumulators) the same two launches zero and convert those accumulators too: 3 launches a backward either way.

Blocks and masks: query blocks wholly above the diagonal are never loaded; those crossing it and the sequence tail
are masked (P^T = 0 there); a key block that runs past S is masked on every step (its rows past S belong to the
next head: they would reach dQ otherwise). Query rows past S read the next head's Q/dO rows (or TMA's zeros):
their P^T is 0, so they add nothing, and their dQ rows are not stored.

The 2-stage rings (wrong dQ, dK, dV on the H200, 2026-12-02): a ptxas miscompile, found 2026-12-02 with
compute-sanitizer (``benchmarks/kernels/attention_gluon_bwd_memcheck.py``,
``benchmarks/results/h200/kernels/gluon_attention_bwd_ptxas/``). ``_consumer`` calls ``_step`` twice (masked and
unmasked steps), so the S^T GEMM exists in two branches; the PTX computes Q's wgmma descriptors (the slot's
address, + 32 bytes a k-step) in each. ptxas 12.8 (the one Triton 3.6.0 and 3.7.1 bundle) keeps the k-step-1
descriptor of one branch in a uniform register (UR18 of the 2-stage d=64 build: ``UIADD3 UR18, UR42, 0x2``) and
has the other branch's HGMMAs read it without computing it: a stale slot (wrong Q: the wrong gradients) or, before
the first branch ever ran, garbage (memcheck: an out-of-bounds shared read of 2,048 bytes at 0x3ffc0 by the HGMMA
of line 361). The 3-stage division build happens to recompute it in both branches. ptxas 13.0 (CUDA 13.0's,
``TRITON_PTXAS_PATH``) recomputes it in both for every ring: under it, every variant of
``attention_gluon_bwd_variants.py`` matches the default and SDPA's fp32 gradients on all 20 shapes, and memcheck
and synccheck are clean (``PTXAS_RING_FIX``). The way round it under 12.8: build the step once (``ONE_STEP``, the
default since 2026-12-02): one call of ``_step``, the causal and tail mask behind a runtime test of the step, so
the PTX holds one S^T GEMM a consumer. Under Triton's own ptxas 12.8 on the H200 the 2-stage ring built so is right
on all 20 shapes and the probes (memcheck and synccheck clean) and 1.035x the 3-stage ring (under 13.0: 1.034x,
the two-branch ring 1.044x; ``benchmarks/results/h200/kernels/gluon_attention_bwd_one_step/``). So ``config_space``
offers the 2-stage ring first under any ptxas. The ruled-out hazards (barrier protocol:
``tests/kernels/test_attention_gluon_bwd_protocol.py``; STRICT_ORDER; the guards ``VARIANT_KEYS`` recalls) stay
ruled out.

Host path: the checks, the config, the grids, the descriptor layouts and the three launches are planned once per
distinct call (``_BackwardPlan``); a repeated call builds its six descriptors from the plan's checked fields and
launches the compiled kernels directly (``_launch.KernelLaunch``): 17 us of Python a call instead of 76 us (CPU,
stubbed launches, which leave out the three JIT launches' own binding; ``benchmarks/kernels/
attention_gluon_bwd_host_bench.py``, ``benchmarks/results/cpu/attention_bwd_host/``).

Versions: written against the Gluon API of Triton 3.6.0 (the H200 machine) and 3.7.1 (this repo's CI), the idioms
of ``attention_gluon.py``. Gluon has no interpreter: on the CPU only ``crosscompile`` / ``inspect_build`` run.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from workbench.kernels._common import (check, frozen, interpreting, plan_cache, ptxas_release, reused_descriptors,
                                      sm_count, tensor_key, undo_interpreter_patches)
from workbench.kernels._launch import KernelLaunch, pointers_aligned
from workbench.kernels.attention_gluon import (  # what the forward and backward share: sm_90 limits, checks
    CONSUMER_REGISTERS,
    LOADER_REGISTERS,
    SM90_SHARED_BYTES,
    check_gluon_device,
    supported,
)
from workbench.kernels.checks import check_attention_grads, check_attention_inputs
from workbench.kernels.crosscompile import GluonBuild, inspect_gluon_build
from workbench.kernels.spaces import attention_seq_bucket

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
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    _partition_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier  # renamed in 3.7
    HAS_GLUON = True
except ImportError:  # pragma: no cover - older Triton
    HAS_GLUON = False

_LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
KEYS_PER_WARPGROUP = 64
"""Key rows one consumer warpgroup owns: one wgmma M (PTX ISA, wgmma.mma_async m64nNk16)."""
_KEYS = ("BLOCK_M", "BLOCK_N", "NUM_STAGES")
VARIANT_KEYS = ("STRICT_ORDER", "DS_BUFFERS", "DQ_UNDER_DK", "RING_COUNTERS", "ONE_STEP", "GROUP_SPLIT")
"""Optional config keys of the H200 experiments, in no entry of ``config_space`` (``resolve_config`` refuses them,
GROUP_SPLIT aside, which it takes with an entry of the space;
``check_variant``, ``launch_backward`` and ``crosscompile`` take them; absent, each leaves the default build as it
is): STRICT_ORDER (bool: fenced barrier inits, dS^T stored before the dV/dK GEMMs: the module docstring),
DS_BUFFERS (int: dS^T tiles per consumer, used in turn, instead of one per ring slot: 2 are enough with the split
dQ, 1 without; ``_step``), DQ_UNDER_DK (bool: FA3's order of the last three GEMMs, dQ's atomics under dK's GEMM),
RING_COUNTERS (bool: the consumers carry the ring slot and phase from step to step instead of dividing by
NUM_STAGES: the division by 3 costs the registers that spill at d=128), ONE_STEP (int: 1, absent, the default: the
consumer's step built once, its mask behind a runtime test of the step; 2: every step masked; 0: masked and
unmasked steps built apart, the build before 2026-12-02, whose 2-stage ring ptxas 12.8 miscompiles: the module
docstring), GROUP_SPLIT (int dividing the GQA group, 1 absent: that many programs share a key block of a kv
head, each summing dK, dV over its share of the query heads, added to fp32 accumulators by atomics and converted
after the kernel: more programs where B * Hkv * key blocks leaves SMs idle, as MQA's 128 programs of 16 x 1024,
whose causal key blocks differ 8x in work, do). On the H200 (triton 3.6,
``benchmarks/results/h200/kernels/gluon_attention_bwd_variants/``): DQ_UNDER_DK right on all 20 shapes, 0.990x the
default's speed; RING_COUNTERS wrong on every shape at 3 stages (illegal address at d=64 full) although it computes
the same slots and phases; NUM_STAGES 4 with DS_BUFFERS 2 and 2 stages with DQ_UNDER_DK wrong (all under ptxas
12.8, whose stale-descriptor miscompile the module docstring describes; read then as a timing hazard).

Four more keys, the ring-fault guards (WG_BARRIER: the consumers meet once a step; PROXY_FENCES: proxy fences
before dS^T's store and each release; RELEASE_LAG: a slot released a step late; SERIAL_MMA: every wgmma waited for
at once), each closed one hazard the PTX rules leave open; on the H200 none cured anything
(``benchmarks/results/h200/kernels/gluon_attention_bwd_guards/``), the cause was ptxas's, and they are gone (git
history before 2026-12-02's one-step build has them and the runs' commands)."""
_PRE_ROWS = 64
"""Rows per program of the delta preprocessing (a guess: a [64, D] tile of O and dO per program; calibrate me)."""
_POST_BLOCK = 2048
"""Elements per program of the dQ conversion (a guess; calibrate me)."""


# -------------------------------------------------------------------------------- pre- and postprocessing
@triton.jit
def _bwd_preprocess_kernel(O, DO, DELTA, DQ_ACC, DKV_ACC, n_rows, kv_rows, HEAD_DIM: tl.constexpr,
                           ROWS: tl.constexpr):
    """delta = rowsum(dO * O) (fp32) and dQ_acc = 0 over the 2-D views o, do, dq_acc [B*Hq*S, D]; with a GQA group
    split, also dKV_acc = 0 over its 2-D view [kv_rows, D] (dK's and dV's fp32 accumulators, 2 B*Hkv*S rows: at
    most n_rows, since the group holds 2 heads or more; kv_rows 0 without the split). Grid (cdiv(B*Hq*S, ROWS),)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = rows.to(tl.int64)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    keep = rows[:, None] < n_rows
    o = tl.load(O + offs, mask=keep, other=0.0).to(tl.float32)
    do = tl.load(DO + offs, mask=keep, other=0.0).to(tl.float32)
    tl.store(DELTA + rows, tl.sum(o * do, 1), mask=rows < n_rows)
    zero = tl.zeros([ROWS, HEAD_DIM], tl.float32)
    tl.store(DQ_ACC + offs, zero, mask=keep)
    if kv_rows > 0:
        tl.store(DKV_ACC + offs, zero, mask=rows[:, None] < kv_rows)


@triton.jit
def _convert_kernel(DQ_ACC, DQ, DKV_ACC, DKV, n, kv_n, scale, BLOCK: tl.constexpr):
    """dQ = scale * dQ_acc in dQ's dtype, elementwise over n values, and with a GQA group split dKV = dKV_acc
    over kv_n more (0 without). Grid (cdiv(n, BLOCK) + cdiv(kv_n, BLOCK),): the programs past dQ's convert dKV."""
    block = tl.program_id(0)
    q_blocks = tl.cdiv(n, BLOCK)
    if block < q_blocks:
        offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        keep = offs < n
        tl.store(DQ + offs, (tl.load(DQ_ACC + offs, mask=keep) * scale).to(DQ.dtype.element_ty), mask=keep)
    else:
        offs = (block - q_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        keep = offs < kv_n
        tl.store(DKV + offs, tl.load(DKV_ACC + offs, mask=keep).to(DKV.dtype.element_ty), mask=keep)


DQ_COLUMNS = 64
"""Columns of the dQ tile a consumer adds at a time (``_consumer``'s DQ_COLS: one wgmma N of 64)."""
DQ_SCRATCH_BYTES = 64 * DQ_COLUMNS * 4
"""Shared memory a consumer's conversion of its fp32 [64 queries, 64] dQ tile to ``DQ_ROW_LAYOUT`` takes (the
compiler's scratch for ``convert_layout``; BLOCK_M 64, the only query block of ``config_space``)."""

if HAS_GLUON:
    DQ_ROW_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0]))
    """The layout dQ's atomics leave in (``DQ_COALESCED``): 4 adjacent fp32 a thread, 16 threads a 64-column row,
    so one ``atom.add.v4.f32`` of a warp covers two whole 256-byte rows of dQ_acc. In wgmma's accumulator layout a
    thread holds 2 adjacent fp32 (``atom.add.v2.f32``) and a warp's instruction touches 8 rows, 32 bytes of each.
    On the H200 the backward takes 0.92-0.98 of the time it took with the atomics in wgmma's layout (d128, 8
    shapes; ``benchmarks/kernels/attention_bwd_dq_cost.py``, ``benchmarks/results/h200/kernels/dq_coalesced/``)."""

    @gluon.jit
    def _kv_schedule(seq_len, heads_kv, group, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
                     GROUP_SPLIT: gl.constexpr):
        """This program's key block and query loop: (first key, first k/v row in the 2-D views, b * Hq + first
        query head, query heads, lo, diag_end, full_end, end). Per query head the steps run over query blocks
        [lo, end): [lo, diag_end) cross the diagonal (masked), [diag_end, full_end) need no mask, [full_end, end)
        is the sequence tail (masked); a key block past S masks every step. GROUP_SPLIT programs share a kv head's
        key block, each taking group / GROUP_SPLIT of its query heads (program_id(1) = (b * Hkv + kv head) *
        GROUP_SPLIT + part)."""
        start_n = gl.program_id(0) * BLOCK_N
        if GROUP_SPLIT == 1:
            bh_kv = gl.program_id(1)  # b * Hkv + kv head
            heads = group
            q_head0 = (bh_kv // heads_kv) * heads_kv * group + (bh_kv % heads_kv) * group
        else:
            bh_kv = gl.program_id(1) // GROUP_SPLIT
            heads = group // GROUP_SPLIT
            q_head0 = ((bh_kv // heads_kv) * heads_kv * group + (bh_kv % heads_kv) * group
                       + (gl.program_id(1) % GROUP_SPLIT) * heads)
        end = gl.cdiv(seq_len, BLOCK_M) * BLOCK_M
        full_end = (seq_len // BLOCK_M) * BLOCK_M
        if CAUSAL:  # queries before start_n see none of these keys; from the key block's last key on, all
            lo = (start_n // BLOCK_M) * BLOCK_M
            diag_end = gl.maximum(lo, gl.minimum(gl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M, full_end))
            full_end = gl.maximum(diag_end, full_end)
        else:
            lo = start_n * 0
            diag_end = start_n * 0
        ragged = start_n + BLOCK_N > seq_len
        diag_end = gl.where(ragged, end, diag_end)
        full_end = gl.where(ragged, end, full_end)
        return start_n, bh_kv * seq_len, q_head0, heads, lo, diag_end, full_end, end

    # ----------------------------------------------------------------------------------------- producer
    @gluon.jit
    def _load_partition(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_smem, v_smem, q_ring, do_ring,
                        lse_ring, delta_ring, kv_bar, q_ready, do_ready, empty, seq_len, heads_kv, group,
                        CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                        GROUP_SPLIT: gl.constexpr):
        """The TMA warp: each consumer's K and V rows once, then Q_i with its lse rows and dO_i with its delta
        rows for every (query head, query block) step in the consumers' order, slot step % NUM_STAGES, waiting
        for empty[slot] (a fresh mbarrier passes parity 1 at once)."""
        KEYS: gl.constexpr = k_desc.block_type.shape[0]
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        start_n, kv_row, q_head0, heads, lo, diag_end, full_end, end = _kv_schedule(
            seq_len, heads_kv, group, KEYS * NUM_CONSUMERS, BLOCK_M, CAUSAL, GROUP_SPLIT)
        mbarrier.expect(kv_bar, NUM_CONSUMERS * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
        for i in gl.static_range(NUM_CONSUMERS):
            tma.async_copy_global_to_shared(k_desc, [kv_row + start_n + i * KEYS, 0], kv_bar, k_smem.index(i))
            tma.async_copy_global_to_shared(v_desc, [kv_row + start_n + i * KEYS, 0], kv_bar, v_smem.index(i))
        steps = (end - lo) // BLOCK_M
        for g in range(heads):
            q_row = (q_head0 + g) * seq_len + lo
            for j in range(steps):
                step = g * steps + j
                slot = step % NUM_STAGES
                mbarrier.wait(empty.index(slot), ((step // NUM_STAGES) & 1) ^ 1)
                row = q_row + j * BLOCK_M
                mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(q_desc, [row, 0], q_ready.index(slot), q_ring.index(slot))
                tma.async_copy_global_to_shared(lse_desc, [row], q_ready.index(slot), lse_ring.index(slot))
                mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(do_desc, [row, 0], do_ready.index(slot), do_ring.index(slot))
                tma.async_copy_global_to_shared(delta_desc, [row], do_ready.index(slot), delta_ring.index(slot))

    # ----------------------------------------------------------------------------------------- consumers
    @gluon.jit
    def _add_dq(ptrs, dq, rows, seq_len, MASKED: gl.constexpr, DQ_COALESCED: gl.constexpr):
        """dQ_acc += dq (fp32 atomics; rows past S dropped on masked steps). DQ_COALESCED: ``ptrs`` and ``rows`` are
        in ``DQ_ROW_LAYOUT`` (``_dq_addresses``), and dq goes there first, through shared memory."""
        if DQ_COALESCED:
            dq = gl.convert_layout(dq, DQ_ROW_LAYOUT)
        if MASKED:
            gl.atomic_add(ptrs, dq, mask=gl.expand_dims(rows < seq_len, 1), sem="relaxed")
        else:
            gl.atomic_add(ptrs, dq, sem="relaxed")

    @gluon.jit
    def _publish_ds(ds_tile, ds_t, ds_ready, SPLIT_DQ: gl.constexpr):
        """dS^T [64 keys, BLOCK_M] to shared memory (dQ's A operand, read transposed), visible to the async proxy
        and, with SPLIT_DQ, announced to the other consumer (``ds_ready``)."""
        ds_tile.store(ds_t)
        fence_async_shared()
        _partition_barrier()  # every warp's part of dS^T is written before a wgmma reads it
        if SPLIT_DQ:  # the other warpgroup reads this dS^T too
            mbarrier.arrive(ds_ready, count=1)

    @gluon.jit
    def _dq_addresses(dq_ptr, q_row, start_m, zero_dq, HEAD_DIM: gl.constexpr, DQ_COALESCED: gl.constexpr):
        """dQ_acc rows of a query block: one 64-bit base and [BLOCK_M, DQ_COLS] 32-bit offsets (a tile of 64-bit
        addresses would take 64 registers a thread) in dQ's wgmma layout (DQ_COALESCED: in ``DQ_ROW_LAYOUT``),
        and the rows' query indices."""
        BLOCK_M: gl.constexpr = zero_dq.shape[0]
        DQ_COLS: gl.constexpr = zero_dq.shape[1]
        if DQ_COALESCED:
            DQ_LAYOUT: gl.constexpr = DQ_ROW_LAYOUT
        else:
            DQ_LAYOUT: gl.constexpr = zero_dq.type.layout
        dq_block = dq_ptr + (q_row + start_m).to(gl.int64) * HEAD_DIM
        rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, DQ_LAYOUT))
        dq_offs = gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(gl.arange(0, DQ_COLS, layout=gl.SliceLayout(
            0, DQ_LAYOUT)), 0)
        return dq_block, dq_offs, start_m + rows

    @gluon.jit
    def _dq_tile(ds_smem, k_smem, ds_ready, ds_index, slot, phase, c, zero_dq, WG: gl.constexpr,
                 NUM_CONSUMERS: gl.constexpr, SPLIT_DQ: gl.constexpr):
        """Issue (async) the dQ_i GEMM of column chunk ``c``: dS [BLOCK_M, keys] (dS^T tiles read transposed)
        times K [keys, DQ_COLS]; SPLIT_DQ: columns [DQ_COLS WG, + DQ_COLS) over every consumer's keys, else this
        warpgroup's 64 keys, columns [DQ_COLS c, + DQ_COLS). SPLIT_DQ first waits until every consumer has
        stored its dS^T of the step (``ds_ready``). Returns the token."""
        DQ_COLS: gl.constexpr = zero_dq.shape[1]
        HEAD_DIM: gl.constexpr = k_smem.shape[2]
        if SPLIT_DQ:
            mbarrier.wait(ds_ready.index(slot), phase)
            for i in gl.static_range(NUM_CONSUMERS):
                dq_tok = warpgroup_mma(ds_smem.index(ds_index * NUM_CONSUMERS + i).permute((1, 0)),
                                       k_smem.index(i).slice(WG * DQ_COLS, DQ_COLS, dim=1),
                                       zero_dq if i == 0 else dq_tok, use_acc=i > 0, is_async=True)
        else:
            if DQ_COLS == HEAD_DIM:
                k_cols = k_smem.index(WG)
            else:
                k_cols = k_smem.index(WG).slice(c * DQ_COLS, DQ_COLS, dim=1)
            dq_tok = warpgroup_mma(ds_smem.index(ds_index * NUM_CONSUMERS + WG).permute((1, 0)), k_cols, zero_dq,
                                   use_acc=False, is_async=True)
        return dq_tok

    @gluon.jit
    def _mask_p(p_t, offs_m, offs_n, seq_len, CAUSAL: gl.constexpr):
        """P^T with the entries of masked (key, query) pairs set to 0: above the diagonal (causal) and past S."""
        if CAUSAL:  # a query at or after the key and before S is a key before S too
            keep = (gl.expand_dims(offs_m, 0) >= gl.expand_dims(offs_n, 1)) & gl.expand_dims(offs_m < seq_len, 0)
        else:
            keep = gl.expand_dims(offs_m < seq_len, 0) & gl.expand_dims(offs_n < seq_len, 1)
        return gl.where(keep, p_t, 0.0)

    @gluon.jit
    def _step(step, ring_slot, ring_phase, start_m, q_row, k_smem, v_smem, ds_smem, q_ring, do_ring, lse_ring,
              delta_ring, q_ready, do_ready, ds_ready, empty, dk, dv, offs_n, zero_s, zero_dq, dq_ptr, seq_len,
              qk_scale, mask_now, MASKED: gl.constexpr, ONE_STEP: gl.constexpr,
              CAUSAL: gl.constexpr, WG: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
              SPLIT_DQ: gl.constexpr, STRICT_ORDER: gl.constexpr, DS_BUFFERS: gl.constexpr,
              DQ_UNDER_DK: gl.constexpr, RING_COUNTERS: gl.constexpr, DQ_COALESCED: gl.constexpr):
        """One query block [start_m, + BLOCK_M) of query head ``q_row / S`` against this warpgroup's 64 keys:
        dK, dV accumulate; dQ_i goes to dQ_acc by atomics, [BLOCK_M, 64] at a time. Tiles: S^T, dP^T [64,
        BLOCK_M] and dK, dV [64, D] fp32 (registers, wgmma layouts); Q_i, dO_i [BLOCK_M, D] and dS^T [64, BLOCK_M]
        (DS_BUFFERS per consumer, used in turn) in shared memory. SPLIT_DQ (two consumers, D = 128): each
        warpgroup takes 64 columns of dQ_i over both consumers' keys, after both have written dS^T (``ds_ready``).

        The order of the register-A GEMMs and dQ's: by default dV, dK (dS^T stored under them; STRICT_ORDER: before
        them), wait, then dQ_i and its atomics. DQ_UNDER_DK (FA3's ``bwd_step``): dS^T stored first, then dV, dQ_i
        (of the first column chunk), dK issued back to back, and dQ_i's atomics run while dK's GEMM does.
        RING_COUNTERS: the ring slot and phase are the caller's loop-carried counters (FA3's PipelineState), not
        ``step % NUM_STAGES`` and its quotient's parity.
        ONE_STEP (1 or 2; the caller's single call site, MASKED then True): ``mask_now`` (runtime: a diagonal or
        tail step) gates the mask (1), or every step is masked (2); 0: MASKED alone decides."""
        BLOCK_M: gl.constexpr = q_ring.shape[1]
        HEAD_DIM: gl.constexpr = q_ring.shape[2]
        S_LAYOUT: gl.constexpr = zero_s.type.layout
        ACC_LAYOUT: gl.constexpr = dk.type.layout
        DQ_COLS: gl.constexpr = zero_dq.shape[1]
        OP_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=ACC_LAYOUT, k_width=2)
        k_tile = k_smem.index(WG)
        v_tile = v_smem.index(WG)
        if RING_COUNTERS:
            slot = ring_slot
            phase = ring_phase
        else:
            slot = step % NUM_STAGES
            phase = (step // NUM_STAGES) & 1
        q_tile = q_ring.index(slot)
        do_tile = do_ring.index(slot)
        COLUMNS: gl.constexpr = gl.SliceLayout(0, S_LAYOUT)  # per query: 16 registers a thread at BLOCK_M = 64
        offs_m = start_m + gl.arange(0, BLOCK_M, layout=COLUMNS)

        mbarrier.wait(q_ready.index(slot), phase)
        s_tok = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.wait(do_ready.index(slot), phase)
        dp_tok = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))  # S^T retired; dP^T still runs ...
        # lse and delta come from shared memory just before their use (FA3 keeps them there too): held in
        # registers across the step they would take 32 of a consumer's 240
        lse = lse_ring.index(slot).load(COLUMNS)
        p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(lse * 1.4426950408889634, 0))  # ... under this
        if MASKED:
            if ONE_STEP == 1:  # one build of the step: the mask alone behind the runtime test
                if mask_now:
                    p_t = _mask_p(p_t, offs_m, offs_n, seq_len, CAUSAL)
            else:  # ONE_STEP 2: every step masked (all true off the diagonal and the tails); 0: two builds
                p_t = _mask_p(p_t, offs_m, offs_n, seq_len, CAUSAL)
        dp_t = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
        delta = delta_ring.index(slot).load(COLUMNS)
        ds_t = (p_t * (dp_t - gl.expand_dims(delta, 0))).to(q_tile.dtype)
        if DS_BUFFERS == NUM_STAGES:  # one dS^T tile per ring slot (the default)
            ds_index = slot
        else:
            ds_index = step % DS_BUFFERS
        ds_tile = ds_smem.index(ds_index * NUM_CONSUMERS + WG)
        # SPLIT_DQ: FA3's split, columns [64 WG, + 64) of dQ_i over all BLOCK_N keys, one chunk; else this
        # warpgroup's 64 keys' part of dQ_i, 64 columns at a time (32 fp32 registers a thread)
        CHUNKS: gl.constexpr = 1 if SPLIT_DQ else HEAD_DIM // DQ_COLS
        FIRST_COLS: gl.constexpr = WG * DQ_COLS if SPLIT_DQ else 0
        if DQ_UNDER_DK:
            _publish_ds(ds_tile, ds_t, ds_ready.index(slot), SPLIT_DQ)
            p_op = gl.convert_layout(p_t.to(q_tile.dtype), OP_LAYOUT)
            dv_tok = warpgroup_mma(p_op, do_tile, dv, is_async=True)
            dq_tok = _dq_tile(ds_smem, k_smem, ds_ready, ds_index, slot, phase, 0, zero_dq, WG, NUM_CONSUMERS,
                              SPLIT_DQ)
            ds_op = gl.convert_layout(ds_t, OP_LAYOUT)
            dk_tok = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
            dv, dq, p_op = warpgroup_mma_wait(num_outstanding=1, deps=(dv_tok, dq_tok, p_op))  # dK's still runs
            dq_block, dq_offs, rows = _dq_addresses(dq_ptr, q_row, start_m, zero_dq, HEAD_DIM, DQ_COALESCED)
            _add_dq(dq_block + FIRST_COLS + dq_offs, dq, rows, seq_len, MASKED, DQ_COALESCED)
            dk, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dk_tok, ds_op))
            for c in gl.static_range(1, CHUNKS):  # one consumer at D = 128: the second 64 columns
                dq_tok = _dq_tile(ds_smem, k_smem, ds_ready, ds_index, slot, phase, c, zero_dq, WG, NUM_CONSUMERS,
                                  SPLIT_DQ)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
                _add_dq(dq_block + c * DQ_COLS + dq_offs, dq, rows, seq_len, MASKED, DQ_COALESCED)
        else:
            if STRICT_ORDER:  # dS^T stored before its registers become an in-flight wgmma's A operand
                _publish_ds(ds_tile, ds_t, ds_ready.index(slot), SPLIT_DQ)
            p_op = gl.convert_layout(p_t.to(q_tile.dtype), OP_LAYOUT)
            dv_tok = warpgroup_mma(p_op, do_tile, dv, is_async=True)
            ds_op = gl.convert_layout(ds_t, OP_LAYOUT)
            dk_tok = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
            if not STRICT_ORDER:  # the store overlaps the dV and dK GEMMs
                _publish_ds(ds_tile, ds_t, ds_ready.index(slot), SPLIT_DQ)
            dv, dk, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, p_op, ds_op))
            dq_block, dq_offs, rows = _dq_addresses(dq_ptr, q_row, start_m, zero_dq, HEAD_DIM, DQ_COALESCED)
            for c in gl.static_range(CHUNKS):
                dq_tok = _dq_tile(ds_smem, k_smem, ds_ready, ds_index, slot, phase, c, zero_dq, WG, NUM_CONSUMERS,
                                  SPLIT_DQ)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ))
                _add_dq(dq_block + FIRST_COLS + c * DQ_COLS + dq_offs, dq, rows, seq_len, MASKED, DQ_COALESCED)
        # Q_i, dO_i and every dS^T of this step read. A dS^T tile is written again DS_BUFFERS steps later: by then
        # its writer's own dQ GEMM has retired, and (SPLIT_DQ) so has the other consumer's, which stored its dS^T
        # of the step in between (``ds_ready``) only after this step; one tile a consumer is enough without the
        # split (its only reader is its writer).
        _partition_barrier()  # as attention_gluon's _release: every warp is past its last wait
        mbarrier.arrive(empty.index(slot), count=1)
        return dk, dv

    @gluon.jit
    def _consumer(k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready, do_ready, ds_ready,
                  empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group, sm_scale, qk_scale, CAUSAL: gl.constexpr,
                  WG: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                  STRICT_ORDER: gl.constexpr, DS_BUFFERS: gl.constexpr, DQ_UNDER_DK: gl.constexpr,
                  RING_COUNTERS: gl.constexpr, ONE_STEP: gl.constexpr, GROUP_SPLIT: gl.constexpr,
                  DQ_COALESCED: gl.constexpr):
        """Consumer warpgroup WG: keys [start_n + 64 WG, + 64) against every query block of every query head of
        the kv group (GROUP_SPLIT > 1: of this program's share of them); stores its dK, dV rows at the end
        (GROUP_SPLIT > 1: adds them to the fp32 dK, dV accumulators the programs of a key block share)."""
        KEYS: gl.constexpr = k_smem.shape[1]
        HEAD_DIM: gl.constexpr = k_smem.shape[2]
        BLOCK_M: gl.constexpr = q_ring.shape[1]
        S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_M, 16])
        ACC_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_DIM, 16])
        DQ_COLS: gl.constexpr = 64  # DQ_COLUMNS
        DQ_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, DQ_COLS, 16])
        SPLIT_DQ: gl.constexpr = NUM_CONSUMERS == 2 and HEAD_DIM == 2 * DQ_COLS
        start_n, kv_row, q_head0, heads, lo, diag_end, full_end, end = _kv_schedule(
            seq_len, heads_kv, group, KEYS * NUM_CONSUMERS, BLOCK_M, CAUSAL, GROUP_SPLIT)
        first_key = start_n + WG * KEYS
        offs_n = first_key + gl.arange(0, KEYS, layout=gl.SliceLayout(1, S_LAYOUT))
        zero_s = gl.zeros([KEYS, BLOCK_M], gl.float32, layout=S_LAYOUT)  # use_acc=False reads nothing
        zero_dq = gl.zeros([BLOCK_M, DQ_COLS], gl.float32, layout=DQ_LAYOUT)
        dk = gl.zeros([KEYS, HEAD_DIM], gl.float32, layout=ACC_LAYOUT)
        dv = gl.zeros([KEYS, HEAD_DIM], gl.float32, layout=ACC_LAYOUT)
        steps = (end - lo) // BLOCK_M
        mbarrier.wait(kv_bar, 0)  # (SPLIT_DQ reads the other consumer's K too)
        ring_slot = steps * 0  # RING_COUNTERS: step % NUM_STAGES and the parity of its quotient, carried
        ring_phase = steps * 0
        for step in range(heads * steps):  # (query head, query block) pairs; the group's dK, dV sum here
            g = step // steps
            start_m = lo + (step - g * steps) * BLOCK_M
            q_row = (q_head0 + g) * seq_len
            mask_now = (start_m < diag_end) | (start_m >= full_end)  # the diagonal, the tails
            if ONE_STEP != 0:  # one build of the step (ptxas 12.8 builds the 2-stage ring right then?)
                dk, dv = _step(step, ring_slot, ring_phase, start_m, q_row, k_smem, v_smem, ds_smem, q_ring, do_ring,
                               lse_ring, delta_ring, q_ready, do_ready, ds_ready, empty, dk, dv, offs_n, zero_s,
                               zero_dq, dq_ptr, seq_len, qk_scale, mask_now, True, ONE_STEP, CAUSAL, WG,
                               NUM_CONSUMERS, NUM_STAGES, SPLIT_DQ, STRICT_ORDER, DS_BUFFERS, DQ_UNDER_DK,
                               RING_COUNTERS, DQ_COALESCED)
            elif mask_now:
                dk, dv = _step(step, ring_slot, ring_phase, start_m, q_row, k_smem, v_smem, ds_smem, q_ring, do_ring,
                               lse_ring, delta_ring, q_ready, do_ready, ds_ready, empty, dk, dv, offs_n, zero_s,
                               zero_dq, dq_ptr, seq_len, qk_scale, mask_now, True, 0, CAUSAL, WG, NUM_CONSUMERS,
                               NUM_STAGES, SPLIT_DQ, STRICT_ORDER, DS_BUFFERS, DQ_UNDER_DK, RING_COUNTERS,
                               DQ_COALESCED)
            else:
                dk, dv = _step(step, ring_slot, ring_phase, start_m, q_row, k_smem, v_smem, ds_smem, q_ring, do_ring,
                               lse_ring, delta_ring, q_ready, do_ready, ds_ready, empty, dk, dv, offs_n, zero_s,
                               zero_dq, dq_ptr, seq_len, qk_scale, mask_now, False, 0, CAUSAL, WG, NUM_CONSUMERS,
                               NUM_STAGES, SPLIT_DQ, STRICT_ORDER, DS_BUFFERS, DQ_UNDER_DK, RING_COUNTERS,
                               DQ_COALESCED)
            if RING_COUNTERS:
                ring_slot += 1
                if ring_slot == NUM_STAGES:
                    ring_slot = ring_slot * 0
                    ring_phase = ring_phase ^ 1

        # dK, dV rows from a 64-bit base and 32-bit offsets, as dQ's
        rows = gl.arange(0, KEYS, layout=gl.SliceLayout(1, ACC_LAYOUT))
        offs = gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(
            0, ACC_LAYOUT)), 0)
        keep = gl.expand_dims(first_key + rows < seq_len, 1)
        base = (kv_row + first_key).to(gl.int64) * HEAD_DIM
        if GROUP_SPLIT == 1:
            gl.store(dk_ptr + base + offs, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=keep)
            gl.store(dv_ptr + base + offs, dv.to(dv_ptr.dtype.element_ty), mask=keep)
        else:  # fp32 accumulators, zeroed: the key block's other programs add theirs
            gl.atomic_add(dk_ptr + base + offs, dk * sm_scale, mask=keep, sem="relaxed")
            gl.atomic_add(dv_ptr + base + offs, dv, mask=keep, sem="relaxed")

    @gluon.jit
    def _second_consumer(k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready,
                         do_ready, ds_ready, empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group, sm_scale,
                         qk_scale, CAUSAL: gl.constexpr, NUM_STAGES: gl.constexpr, STRICT_ORDER: gl.constexpr,
                         DS_BUFFERS: gl.constexpr, DQ_UNDER_DK: gl.constexpr, RING_COUNTERS: gl.constexpr,
                         ONE_STEP: gl.constexpr, GROUP_SPLIT: gl.constexpr, DQ_COALESCED: gl.constexpr):
        _consumer(k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready, do_ready, ds_ready,
                  empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group, sm_scale, qk_scale, CAUSAL, 1, 2, NUM_STAGES,
                  STRICT_ORDER, DS_BUFFERS, DQ_UNDER_DK, RING_COUNTERS, ONE_STEP, GROUP_SPLIT, DQ_COALESCED)

    @gluon.jit(do_not_specialize=["seq_len", "heads_kv", "group"])  # one build per config and layout
    def _attn_bwd_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_ptr, dk_ptr, dv_ptr, seq_len,
                         heads_kv, group, sm_scale, qk_scale, CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                         NUM_STAGES: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         STRICT_ORDER: gl.constexpr = False, DS_BUFFERS: gl.constexpr = 0,
                         DQ_UNDER_DK: gl.constexpr = False, RING_COUNTERS: gl.constexpr = False,
                         ONE_STEP: gl.constexpr = 1, GROUP_SPLIT: gl.constexpr = 1,
                         DQ_COALESCED: gl.constexpr = False):
        """Grid (cdiv(S, 64 NUM_CONSUMERS), B * Hkv * GROUP_SPLIT).

        q_desc, do_desc: q, dO [B*Hq*S, D], block [BLOCK_M, D]; k_desc, v_desc: [B*Hkv*S, D], block [64, D];
        lse_desc, delta_desc: lse, delta [B*Hq*S] fp32, block [BLOCK_M]; dq_ptr: dQ_acc [B, Hq, S, D] fp32
        (zeroed); dk_ptr, dv_ptr: [B, Hkv, S, D] contiguous (GROUP_SPLIT > 1: fp32, zeroed). Launched with
        num_warps=4 (the first consumer); workers: the second consumer (4 warps, CONSUMER_REGS) when
        NUM_CONSUMERS == 2, the TMA warp (LOADER_REGS).
        DS_BUFFERS: dS^T tiles per consumer (0: NUM_STAGES, one per ring slot); DQ_UNDER_DK, RING_COUNTERS,
        ONE_STEP: ``_step``'s; DQ_COALESCED: dQ's atomics from ``DQ_ROW_LAYOUT`` (``dq_coalesced``)."""
        BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
        HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
        KEYS: gl.constexpr = k_desc.block_type.shape[0]
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [NUM_CONSUMERS, KEYS, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [NUM_CONSUMERS, KEYS, HEAD_DIM], v_desc.layout)
        q_ring = gl.allocate_shared_memory(q_desc.dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
        do_ring = gl.allocate_shared_memory(do_desc.dtype, [NUM_STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
        lse_ring = gl.allocate_shared_memory(lse_desc.dtype, [NUM_STAGES, BLOCK_M], lse_desc.layout)
        delta_ring = gl.allocate_shared_memory(delta_desc.dtype, [NUM_STAGES, BLOCK_M], delta_desc.layout)
        # dS^T [64, BLOCK_M] per consumer, DS_BUFFERS of them: 16-bit rows of >= 128 bytes like Q's, so Q's swizzle
        DS_TILES: gl.constexpr = NUM_STAGES if DS_BUFFERS == 0 else DS_BUFFERS
        ds_smem = gl.allocate_shared_memory(q_desc.dtype, [DS_TILES * NUM_CONSUMERS, KEYS, BLOCK_M], q_desc.layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        ds_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(do_ready.index(i), count=1)
            mbarrier.init(ds_ready.index(i), count=NUM_CONSUMERS)  # (used with two consumers at D = 128)
            mbarrier.init(empty.index(i), count=NUM_CONSUMERS)  # every consumer releases every slot
        if STRICT_ORDER:  # the inits visible to the async proxy (TMA's complete_tx) before the first copy
            fence_async_shared()
        # The partition lists are written out in each call: a JIT function cannot be bound to a variable.
        if NUM_CONSUMERS == 2:
            gl.warp_specialize([
                (_consumer, (k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready,
                             do_ready, ds_ready, empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group, sm_scale,
                             qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES, STRICT_ORDER, DS_TILES, DQ_UNDER_DK,
                             RING_COUNTERS, ONE_STEP, GROUP_SPLIT, DQ_COALESCED)),
                (_second_consumer, (k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready,
                                    do_ready, ds_ready, empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group,
                                    sm_scale, qk_scale, CAUSAL, NUM_STAGES, STRICT_ORDER, DS_TILES,
                                    DQ_UNDER_DK, RING_COUNTERS, ONE_STEP, GROUP_SPLIT, DQ_COALESCED)),
                (_load_partition, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_smem, v_smem, q_ring,
                                   do_ring, lse_ring, delta_ring, kv_bar, q_ready, do_ready, empty, seq_len, heads_kv,
                                   group, CAUSAL, NUM_CONSUMERS, NUM_STAGES, GROUP_SPLIT)),
            ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
        else:
            gl.warp_specialize([
                (_consumer, (k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, ds_smem, kv_bar, q_ready,
                             do_ready, ds_ready, empty, dq_ptr, dk_ptr, dv_ptr, seq_len, heads_kv, group, sm_scale,
                             qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES, STRICT_ORDER, DS_TILES, DQ_UNDER_DK,
                             RING_COUNTERS, ONE_STEP, GROUP_SPLIT, DQ_COALESCED)),
                (_load_partition, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_smem, v_smem, q_ring,
                                   do_ring, lse_ring, delta_ring, kv_bar, q_ready, do_ready, empty, seq_len, heads_kv,
                                   group, CAUSAL, NUM_CONSUMERS, NUM_STAGES, GROUP_SPLIT)),
            ], [1], [LOADER_REGS])
        mbarrier.invalidate(kv_bar)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(q_ready.index(i))
            mbarrier.invalidate(do_ready.index(i))
            mbarrier.invalidate(ds_ready.index(i))
            mbarrier.invalidate(empty.index(i))


# ---------------------------------------------------------------------------------------------- launch wrapper
def gluon_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                             config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (q's dtype; dK, dV shaped like k) from dO and a forward's O and lse, as
    ``attention.flash_attention_bwd``; ``config`` None: ``default_config(D, causal)``. sm_90 only. The checks, the
    config and the three launches are planned once per distinct call (``_BackwardPlan``)."""
    key = plan = None
    try:
        if causal is True or causal is False:  # 1 == True as a key, but only a bool passes the checks
            key = ("checked", *(tensor_key(t) for t in (do, q, k, v, o, lse)), causal, scale, frozen(config))
            plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config value: the checks say which
        key = None
    if plan is not None:  # outside the try: an error of the launch itself is not a reason to plan again
        return _run(plan, do, q, k, v, o, lse)
    scale = check_attention_inputs(q, k, v, causal, scale)
    check_attention_grads(q, do, o, lse)
    check_gluon_device(q)
    check_sequence(q.shape[2])
    plan = _plan(q, k, v, do, o, causal, scale, resolve_config(config, q.shape[-1], causal))
    if key is not None:
        _PLANS.put(key, plan)
    return _run(plan, do, q, k, v, o, lse)


def check_sequence(seq_len: int) -> None:
    """The sequence lengths this kernel takes: whole 128-row blocks. On the H200 a ragged one (S = 333, d = 128,
    GQA 4; tests/kernels/test_attention_gluon_bwd.py) raised an illegal instruction on 2026-12-02, cause not found:
    refused until it is (the Triton backward takes every length)."""
    check(seq_len % GLUON_MIN_BLOCKS == 0, "sequence length", seq_len,
          f"a multiple of {GLUON_MIN_BLOCKS} for the Gluon backward (the Triton backward takes any)")


def launch_backward(do, q, k, v, o, lse, causal: bool, scale: float, config: dict):
    """``gluon_attention_backward`` after its checks (``attention.flash_attention``'s plan made them once): the
    preprocessing, the kernel and the dQ conversion, for a resolved ``config`` and scale; planned once per
    distinct call like it. ``config`` may also carry ``VARIANT_KEYS`` (the H200 experiments; ``resolve_config``
    refuses them): the caller checks it (``check_variant``)."""
    key = ("unchecked", *(tensor_key(t) for t in (do, q, k, v, o, lse)), causal, scale, frozen(config))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(q, k, v, do, o, causal, scale, config)
        _PLANS.put(key, plan)
    return _run(plan, do, q, k, v, o, lse)


def backward_plan(q, k, v, do, o, causal: bool, scale: float, config: dict) -> "_BackwardPlan":
    """``launch_backward``'s plan for an owner that keys the layouts itself (``attention.flash_attention``'s plan
    holds one per dO layout, with O and lse the forward's own): uncached here."""
    return _plan(q, k, v, do, o, causal, scale, config)


def run_backward(plan: "_BackwardPlan", do, q, k, v, o, lse):
    """dQ, dK, dV of tensors laid out as ``plan``'s (the owner's key guarantees it): the per-call work alone."""
    return _run(plan, do, q, k, v, o, lse)


class _Descriptors:
    """The checked fields of three host TMA descriptors of a plan (``_common.reused_descriptors`` keeps them)."""

    __slots__ = ("descriptors",)

    def __init__(self):
        self.descriptors = None  # built by the plan's first launch


class _BackwardPlan:
    """One backward minus the tensors: which of q, k, v, dO, O need a contiguous copy (the TMA views are 2-D), the
    2-D views' shapes, the six descriptors' blocks and layouts (q, dO, k; v, lse, delta: ``tiles``, ``rows``), and
    the three launches (``KernelLaunch``: after its first launch each calls its compiled kernel directly)."""

    __slots__ = ("copy", "views", "blocks", "layouts", "tiles", "rows", "device_index", "split", "preprocess",
                 "kernel", "convert")


_PLANS = plan_cache()


def _plan(q, k, v, do, o, causal: bool, scale: float, config: dict) -> _BackwardPlan:
    """The launch plan of checked inputs and a resolved config."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    rows, kv_rows = b * hq * s, b * hkv * s
    block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
    gl_dtype = _GL_DTYPES[q.dtype]
    plan = _BackwardPlan()
    plan.copy = tuple(not t.is_contiguous() for t in (q, k, v, do, o))
    plan.views = ((rows, d), (kv_rows, d), (rows,))  # q, dO [B*Hq*S, D]; k, v [B*Hkv*S, D]; lse, delta [B*Hq*S]
    q_layout = _tile_layout((block_m, d), gl_dtype)
    kv_layout = _tile_layout((KEYS_PER_WARPGROUP, d), gl_dtype)
    row_layout = _tile_layout((block_m,), gl.float32)
    plan.blocks = (([block_m, d], [block_m, d], [KEYS_PER_WARPGROUP, d]),  # q, dO, k
                   ([KEYS_PER_WARPGROUP, d], [block_m], [block_m]))  # v, lse, delta
    plan.layouts = ((q_layout, q_layout, kv_layout), (kv_layout, row_layout, row_layout))
    plan.tiles, plan.rows = _Descriptors(), _Descriptors()
    plan.device_index = q.device.index
    split = config.get("GROUP_SPLIT", 1)
    check((hq // hkv) % split == 0, "config['GROUP_SPLIT']", split,
          f"a divisor of the GQA group {hq // hkv} (query heads {hq} / kv heads {hkv})")
    plan.split = split > 1  # dK, dV summed by the group's programs in fp32 accumulators (zeroed, then converted)
    acc_kv_rows = 2 * kv_rows if plan.split else 0  # dKV_acc [2, B, Hkv, S, D]: at most dQ_acc's rows (group >= 2)
    plan.preprocess = KernelLaunch(_bwd_preprocess_kernel, (triton.cdiv(rows, _PRE_ROWS),), (rows, acc_kv_rows),
                                   dict(HEAD_DIM=d, ROWS=_PRE_ROWS))
    plan.kernel = KernelLaunch(_attn_bwd_kernel, (triton.cdiv(s, block_n), b * hkv * split),
                               (s, hkv, hq // hkv, scale, scale * _LOG2E),
                               {**_constexprs(config, causal, d), "num_warps": 4})
    plan.convert = KernelLaunch(_convert_kernel, (triton.cdiv(rows * d, _POST_BLOCK)
                                                  + triton.cdiv(acc_kv_rows * d, _POST_BLOCK),),
                                (rows * d, acc_kv_rows * d, scale), dict(BLOCK=_POST_BLOCK))
    return plan


def _run(plan: _BackwardPlan, do, q, k, v, o, lse):
    """Allocate delta, dQ_acc (and with the split dKV_acc) and the gradients, build the descriptors over the call's
    tensors and launch the preprocessing, the kernel and the conversion: the per-call work of a plan."""
    if plan.device_index != torch.cuda.current_device():  # Triton launches on the current device
        with torch.cuda.device(plan.device_index):
            return _run(plan, do, q, k, v, o, lse)
    copy_q, copy_k, copy_v, copy_do, copy_o = plan.copy
    q, k, v = q.contiguous() if copy_q else q, k.contiguous() if copy_k else k, v.contiguous() if copy_v else v
    do, o = do.contiguous() if copy_do else do, o.contiguous() if copy_o else o
    if not pointers_aligned(q, k, v, do, lse):  # TMA takes 16-byte aligned bases only (the plan checked strides)
        q, k, v, do, lse = (t if pointers_aligned(t) else t.clone() for t in (q, k, v, do, lse))
    delta = torch.empty_like(lse)  # delta: [B, Hq, S] fp32
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)  # dq_acc: [B, Hq, S, D], zeroed below
    dq = torch.empty_like(q)  # dq: [B, Hq, S, D]
    if plan.split:  # the programs of a key block add into dkv_acc [2, B, Hkv, S, D] fp32 (dK, dV), zeroed below
        dkv_acc = torch.empty((2, *k.shape), device=k.device, dtype=torch.float32)
        dkv = torch.empty((2, *k.shape), device=k.device, dtype=k.dtype)
        dk, dv = dkv_acc[0], dkv_acc[1]
    else:  # the kernel stores them
        dkv_acc = dkv = dq_acc  # the preprocessing and the conversion leave them alone (0 dKV rows)
        dk, dv = torch.empty_like(k), torch.empty_like(v)  # dk, dv: [B, Hkv, S, D], contiguous like k, v
    plan.preprocess(pointers_aligned(o), o, do, delta, dq_acc, dkv_acc)
    tensors = (q, do, k), (v, lse, delta)
    if plan.tiles.descriptors is None:  # the first launch builds and checks the descriptors over the 2-D views
        (rows, d), (kv_rows, _), flat = plan.views
        tensors = ((q.view(rows, d), do.view(rows, d), k.view(kv_rows, d)),
                   (v.view(kv_rows, d), lse.view(flat), delta.view(flat)))
    # later launches keep the checked fields and take the call's tensors as bases (the launcher reads only
    # base.data_ptr() of them; a view shares its tensor's)
    q_desc, do_desc, k_desc = reused_descriptors(plan.tiles, GluonTensorDescriptor, *tensors[0], plan.blocks[0],
                                                 plan.layouts[0])
    v_desc, lse_desc, delta_desc = reused_descriptors(plan.rows, GluonTensorDescriptor, *tensors[1], plan.blocks[1],
                                                      plan.layouts[1])
    plan.kernel(True, q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_acc, dk, dv)
    plan.convert(True, dq_acc, dq, dkv_acc, dkv)  # torch's allocations: aligned
    if plan.split:
        dk, dv = dkv[0], dkv[1]
    return dq, dk, dv


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16} if HAS_GLUON else {}


@functools.lru_cache(maxsize=32)
def _tile_layout(shape: tuple, dtype):
    """Shared layout of a TMA tile ([rows, head_dim] 16-bit, or [rows] fp32): the widest swizzle TMA and wgmma
    both take."""
    return gl.NVMMASharedLayout.get_default_for(list(shape), dtype)


def _constexprs(config: dict, causal: bool, head_dim: int) -> dict:
    """The kernel's constexprs of a config; DS_BUFFERS 0 (one dS^T tile per ring slot) unless the config asks for
    another count; DQ_COALESCED where the conversion's scratch fits (``dq_coalesced``)."""
    stages = config["NUM_STAGES"]
    ds_buffers = config.get("DS_BUFFERS", stages)
    return dict(CAUSAL=bool(causal), NUM_CONSUMERS=config["BLOCK_N"] // KEYS_PER_WARPGROUP,
                NUM_STAGES=stages, LOADER_REGS=LOADER_REGISTERS, CONSUMER_REGS=CONSUMER_REGISTERS,
                STRICT_ORDER=bool(config.get("STRICT_ORDER", False)),
                DS_BUFFERS=0 if ds_buffers == stages else ds_buffers,
                DQ_UNDER_DK=bool(config.get("DQ_UNDER_DK", False)),
                RING_COUNTERS=bool(config.get("RING_COUNTERS", False)),
                ONE_STEP=config.get("ONE_STEP", 1), GROUP_SPLIT=config.get("GROUP_SPLIT", 1),
                DQ_COALESCED=dq_coalesced(config, head_dim))


# ------------------------------------------------------------------------------------------------ config space
def shared_bytes(config: dict, head_dim: int) -> int:
    """Shared memory of a config: its tiles (``tile_bytes``) and, where dQ leaves from whole rows
    (``dq_coalesced``), each consumer's conversion scratch."""
    scratch = config["BLOCK_N"] // KEYS_PER_WARPGROUP * DQ_SCRATCH_BYTES if dq_coalesced(config, head_dim) else 0
    return tile_bytes(config, head_dim) + scratch


def dq_coalesced(config: dict, head_dim: int) -> bool:
    """Whether a config's consumers convert each dQ tile to ``DQ_ROW_LAYOUT`` before its atomics: wherever the
    scratch (``DQ_SCRATCH_BYTES`` a consumer) fits beside the config's tiles (``tile_bytes``) with
    ``COMPILER_SCRATCH_BYTES`` to spare. Every 2-stage ring does; the 3-stage ring at d=128 does not (213 KB of
    tiles) and keeps the atomics in wgmma's layout."""
    consumers = config["BLOCK_N"] // KEYS_PER_WARPGROUP
    return config["BLOCK_M"] == 64 and (tile_bytes(config, head_dim) + consumers * DQ_SCRATCH_BYTES
                                        + COMPILER_SCRATCH_BYTES <= SM90_SHARED_BYTES)


COMPILER_SCRATCH_BYTES = 4096
"""Shared memory the compiler adds above ``shared_bytes`` (layout conversions, alignment): 1-2.5 KiB in the sm_90
builds of triton 3.7.1 (``test_every_config_compiles_for_sm90_within_its_known_spills`` bounds it by this)."""


def tile_bytes(config: dict, head_dim: int) -> int:
    """Shared memory of a config's tiles: K and V (BLOCK_N rows), NUM_STAGES Q and dO tiles, DS_BUFFERS (default
    NUM_STAGES) dS^T tiles ([64, BLOCK_M] per consumer; all 16-bit), 8 bytes per mbarrier."""
    stages = config["NUM_STAGES"]
    ds_buffers = config.get("DS_BUFFERS", stages)
    tiles = (2 * config["BLOCK_N"] * head_dim + 2 * stages * config["BLOCK_M"] * head_dim
             + ds_buffers * config["BLOCK_N"] * config["BLOCK_M"])
    barriers = 1 + 4 * stages
    return 2 * tiles + 8 * barriers


def config_space(head_dim: int, causal: bool) -> list[dict]:
    """Launch configs for one (head_dim, causal) bucket, the default first: the configs whose dQ, dK, dV matched
    the float64 reference on every shape of the H200 runs. That is 64 queries x 128 keys (two consumer
    warpgroups), FA3's sm_90 backward tile (``hopper/flash_bwd_launch_template.h``, ``run_mha_bwd_hdim128`` /
    ``hdim64``), over FA3's own 2-stage ring and a 3-stage one, the step built once (``ONE_STEP``).

    Built with the step twice (ONE_STEP 0), every 2-stage ring gave wrong gradients under ptxas 12.8 (Triton
    3.6.0's and 3.7.1's; ``benchmarks/results/h200/kernels/gluon_attention_bwd/``: 64x128 and 128x128 in every
    bucket, 64x64 on causal shapes), and so did the 3-stage ring with the slot carried (RING_COUNTERS): ptxas's
    stale descriptor (the module docstring). ``KNOWN_SPILL_BYTES`` lists the entries whose sm_90 build spills."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    space = [dict(zip(_KEYS, (64, 128, stages))) for stages in (2, 3)]  # 2 first: 1.035x (the module docstring)
    return [c for c in space if shared_bytes(c, head_dim) <= SM90_SHARED_BYTES]


PTXAS_RING_FIX = (13, 0)
"""The first ptxas release seen to build this kernel's 2-stage ring right with the step built twice (ONE_STEP 0):
CUDA 13.0's (the module docstring). 12.8, the one Triton 3.6 and 3.7 bundle, miscompiles it; releases in between
were not tried and count as 12.8. Under
13.0 on the H200 (``benchmarks/results/h200/kernels/gluon_attention_bwd_ptxas/``) the 2-stage 64x128 ring is right
on all 20 shapes and faster than the 3-stage one on the fit shapes of
``benchmarks/kernels/attention_candidates_split.json``, geometric means of fwd+bwd ms: d64 full 1.023x (a02, a08),
d64 causal 1.042x (a11, a20), d128 full 1.150x (a09), d128 causal 1.063x (a01, a05, a07, a13, a17)."""


def rings_build_right() -> bool:
    """Whether Triton's ptxas builds the 2-stage ring of the two-branch step (ONE_STEP 0) right
    (``PTXAS_RING_FIX``); the default one-step build is right under 12.8 too."""
    release = ptxas_release()
    return release is not None and release >= PTXAS_RING_FIX


KNOWN_SPILL_BYTES: dict[tuple[int, bool, int, int, int], int] = {
    (128, False, 64, 128, 2): 8, (128, True, 64, 128, 2): 8,
    (128, False, 64, 128, 3): 120, (128, True, 64, 128, 3): 128,
}
"""(head_dim, causal, BLOCK_M, BLOCK_N, NUM_STAGES) -> spill-store bytes of the bf16 sm_90 build (ptxas of triton
3.7.1, ``inspect_build``; the 2-stage builds spilled 28 and 16 bytes before dQ left from whole rows
(``DQ_COALESCED``); the H200's triton 3.6.0 reported 20, 8, 60 and 64 then); every other entry of ``config_space``
builds without spills. Two consumers at d=128 hold dK, dV (128 registers) beside S^T, dP^T (64) in 240: the few
bytes are loop-invariant scalars and ring-slot arithmetic reloaded from L1 once a step. The one-step build
(``ONE_STEP``) holds the step's mask test and the masked dQ atomics on every step: the two-branch build spilled 0,
0, 64 and 72 bytes (3.6.0: 0, 0, 56, 72). At 3 stages much of it is the division by 3: with RING_COUNTERS (the slot
and phase carried) the two-branch build spills 8 and 16 bytes, and a 4-deep ring (``step & 3``) 8 and 12. The CPU
test checks these figures as upper bounds and the rest at zero."""


def default_config(head_dim: int, causal: bool) -> dict:
    return config_space(head_dim, causal)[0]


def resolve_config(config: dict | None, head_dim: int, causal: bool) -> dict:
    """Check a config (None: ``default_config``) and return it: ``check_variant``'s checks, then an entry of
    ``config_space``, with or without a ``GROUP_SPLIT`` (the other ``VARIANT_KEYS`` refused); raises
    ``KernelInputError`` naming the key."""
    if config is None:
        return default_config(head_dim, causal)
    check_variant(config, head_dim)
    space = config_space(head_dim, causal)
    check({key: value for key, value in config.items() if key != "GROUP_SPLIT"} in space, "config", config,
          f"one of config_space({head_dim}, {causal}) = {space} (the others gave wrong gradients on the H200; "
          f"{VARIANT_KEYS} are experiments: see config_space and VARIANT_KEYS)")
    return config


def check_variant(config: dict, head_dim: int) -> dict:
    """Check a config that may carry ``VARIANT_KEYS``, in config_space or not (the H200 experiments'
    ``launch_backward`` and ``crosscompile``): the keys, their values, shared memory. Returns it."""
    check(isinstance(config, dict), "config", type(config).__name__, "a dict")
    missing = [key for key in _KEYS if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_KEYS}")
    check(config["BLOCK_M"] in (64, 128), "config['BLOCK_M']", config["BLOCK_M"],
          "64 or 128 (query rows per step: the N of the S^T and dP^T wgmmas)")
    check(config["BLOCK_N"] in (64, 128), "config['BLOCK_N']", config["BLOCK_N"],
          "64 or 128 (one or two consumer warpgroups of 64 keys)")
    check(isinstance(config["NUM_STAGES"], int) and config["NUM_STAGES"] >= 2, "config['NUM_STAGES']",
          config["NUM_STAGES"], "an int >= 2 (the producer refills a slot while the consumers read the other)")
    unknown = sorted(set(config) - set(_KEYS) - set(VARIANT_KEYS))
    check(not unknown, "config", f"keys {unknown}", f"only {_KEYS} and the experiments' {VARIANT_KEYS}")
    for key in ("STRICT_ORDER", "DQ_UNDER_DK", "RING_COUNTERS"):
        check(isinstance(config.get(key, False), bool), f"config['{key}']", config.get(key), "True or False")
    split = config.get("GROUP_SPLIT", 1)
    check(type(split) is int and split >= 1, "config['GROUP_SPLIT']", repr(split),
          "an int >= 1 that divides the GQA group (programs sharing a key block)")
    one_step = config.get("ONE_STEP", 1)
    check(type(one_step) is int and one_step in (0, 1, 2), "config['ONE_STEP']", repr(one_step),
          "0 (masked and unmasked steps built apart), 1 (one build, the mask behind a runtime test) or 2 (one "
          "build, every step masked)")
    stages, split_dq = config["NUM_STAGES"], config["BLOCK_N"] == 128 and head_dim == 128
    fewest = 2 if split_dq else 1
    ds_buffers = config.get("DS_BUFFERS", stages)
    check(isinstance(ds_buffers, int) and not isinstance(ds_buffers, bool) and fewest <= ds_buffers <= stages,
          "config['DS_BUFFERS']", ds_buffers,
          f"an int in [{fewest}, NUM_STAGES = {stages}] (dS^T tiles per consumer; with two consumers at head_dim "
          "128 each reads the other's tile of the step before, so 2 at least)")
    check(shared_bytes(config, head_dim) <= SM90_SHARED_BYTES, "config",
          f"{shared_bytes(config, head_dim)} bytes of shared memory at head_dim {head_dim}",
          f"at most {SM90_SHARED_BYTES} (sm_90): fewer NUM_STAGES or DS_BUFFERS, or a smaller BLOCK_M")
    return config


# ------------------------------------------------------------------------------------------ config=None's choice
BACKWARD_BY_BUCKET: dict[tuple[int, bool], tuple[str, str, str]] = {
    (64, False): ("triton", "triton", "triton"),
    (64, True): ("triton", "triton", "triton"),
    (128, False): ("gluon", "gluon", "gluon"),
    (128, True): ("gluon", "gluon", "gluon"),
}
"""Per (head_dim, causal), the backward of ``attention.flash_attention``'s config=None on sm_90 in each sequence
bucket of ``spaces.ATTENTION_SEQ_BUCKETS`` (S <= 1,024, <= 4,096, longer): this kernel at ``default_config`` (the
2-stage ring) or the Triton backward of ``attention.py``. Chosen on the FIT shapes of
``benchmarks/kernels/attention_candidates_split.json`` only: per bucket the backward with the lower geometric mean
over the bucket's fit shapes, a bucket without a fit shape taking its (head_dim, causal) group's pick. From the H200
run of the 2-stage ring under ptxas 13.0 (``benchmarks/results/h200/kernels/gluon_attention_bwd_ptxas/
variants.csv``: fwd+bwd ms behind the same Gluon forward, Triton backward -> this one at 64x128 s2), whose speed
the one-step build matches within 1% under either ptxas (the module docstring):

- d64 full: a02 0.280 -> 0.288, a08 0.637 -> 0.795: Triton (the group's pick where a bucket has no fit shape).
- d64 causal: a11 2.872 -> 3.493, a20 20.00 -> 22.21: Triton.
- d128 full: a09 2.466 -> 2.267: this kernel, every bucket.
- d128 causal: a01 0.709 -> 0.660 and a05 0.544 -> 0.553 (geometric mean 0.973): this kernel; a07 5.648 -> 5.541;
  a13 9.697 -> 9.010 and a17 8.903 -> 8.716: this kernel.

The table of the 3-stage ring (before 2-stage rings built right under ptxas 12.8: git history) left d128 causal
to Triton up to 4,096."""
GLUON_MIN_BLOCKS = 128
"""config=None takes this kernel only for sequences a whole number of 128-key blocks long (as the Gluon forward's
``pinned_forward_config``): a ragged last key block reads the next head's K/V rows, where a non-finite value
would reach dS as 0 x inf."""


def backward_rule(head_dim: int, causal: bool, seq_len: int) -> dict | None:
    """The table's choice for a shape (``BACKWARD_BY_BUCKET``): this kernel's config, or None for the Triton
    backward; devices and dtypes aside (``pinned_backward_config`` adds them)."""
    choices = BACKWARD_BY_BUCKET.get((head_dim, bool(causal)))
    if choices is None or seq_len % GLUON_MIN_BLOCKS or choices[attention_seq_bucket(seq_len)] != "gluon":
        return None
    return default_config(head_dim, bool(causal))


GROUP_SPLIT_MIN = 2
"""config=None splits every GQA group of an even size at least this many ways (``GROUP_SPLIT``): each program then
walks half the group's query heads, so the last programs of a launch (a causal key block near the start of the
sequence takes the most steps) leave the SMs idle half as long, for one fp32 dK/dV accumulation that the
preprocessing zeroes and the conversion converts (no launch of their own)."""
GROUP_SPLIT_FILL = 2.0
"""... and further, until the launch has at least this many programs per SM, where the group allows: with fewer,
SMs idle or wait on the longest causal key block.

Both chosen on the fit shapes of ``benchmarks/kernels/attention_candidates_split.json`` (a05, a07, a13 among the
split's), once the split's accumulators had no launches of their own (``benchmarks/results/h200/kernels/
split_fold/``):
- ``benchmarks/kernels/attention_split_fold.py`` (fwd+bwd through autograd, every split against split 1 in the
  same alternating rounds) put minimum 2 with fills up to 1 first on the fit shapes (0.947 of split 1), minimum 2
  with a fill of 2 next (0.960), the former rule (a fill of 2 alone, which split only a05, 4 ways) at 0.991; on the
  test shapes (a03, a06, a10, a16, a19) 0.980, 0.980 and 1.0. But its split-1 times ran 2-5% above the same
  shapes' config=None times in the broad runs, and its a05 split 4 (0.531 ms) above theirs (0.468-0.478).
- The broad runs (``broad_shapes.py``, config=None) then decided the fill: a05 takes 0.509 ms split 2 (minimum 2,
  fill 1) against 0.468-0.478 split 4 (fill 2); the 1,024-program fit shapes gain little from their split of 2
  (a07 5.40 ms against 5.42-5.49 unsplit, a13 8.85 against 8.82-9.02).
Before the fold (5 launches split, 3 unsplit; session 18, ``gluon_attention_bwd_split/``) splits of 2 were
0.97-1.03 on the test shapes, and the fill of 2 alone was chosen. The split lost its gain through autograd until
the launches passed their TMA maps encoded once per base address (``_launch.DescriptorMaps``,
``benchmarks/results/h200/kernels/descriptor_maps/``)."""


def group_split(programs: int, group: int, sms: int) -> int:
    """The smallest divisor of the GQA group, ``GROUP_SPLIT_MIN`` or more (where the group has one), that brings
    ``programs`` (key blocks x B x Hkv) to ``GROUP_SPLIT_FILL`` x ``sms`` programs; the whole group (one query head
    a program) where none does."""
    check(programs >= 1 and group >= 1 and sms >= 1, "programs, group, sms", (programs, group, sms),
          "positive counts")
    least = next((split for split in range(GROUP_SPLIT_MIN, group + 1) if group % split == 0), 1)
    return next((split for split in range(least, group + 1)
                 if group % split == 0 and programs * split >= GROUP_SPLIT_FILL * sms), group)


def pinned_backward_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> dict | None:
    """config=None's backward for these inputs: ``backward_rule``'s config where this kernel can run them
    (contiguous bf16/fp16 q, k, v on an sm_90 GPU with Gluon, the conditions of the Gluon forward's rule in
    ``attention._gluon_forward_config``), with the GQA group split ``group_split`` picks, else None: the Triton
    backward, also on every other device."""
    if (q.dtype not in (torch.bfloat16, torch.float16) or not all(t.is_contiguous() for t in (q, k, v))
            or not supported(q.device)):
        return None
    config = backward_rule(q.shape[-1], causal, q.shape[2])
    if config is None:
        return None
    b, hq, s, _ = q.shape
    hkv = k.shape[1]
    split = group_split(triton.cdiv(s, config["BLOCK_N"]) * b * hkv, hq // hkv, sm_count(q.device.index))
    return config if split == 1 else {**config, "GROUP_SPLIT": split}


# ------------------------------------------------------------------------------------- cross-compilation check
def crosscompile(config: dict, head_dim: int, causal: bool, dtype: str = "bf16", capability: int = 90,
                 strict_order: bool = False):
    """Compile one config for sm_90 on this machine (no GPU needed): ``triton.compile`` of a GluonASTSource with
    the launch's descriptor types; returns the CompiledKernel (``.metadata.shared``, ``.asm['ptx']``). The config
    may be outside config_space and carry ``VARIANT_KEYS`` (``check_variant``); ``strict_order``: STRICT_ORDER."""
    check(HAS_GLUON, "triton", triton.__version__, ">= 3.6 with triton.experimental.gluon")
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    config = default_config(head_dim, causal) if config is None else check_variant(config, head_dim)
    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]
    block_m, keys = config["BLOCK_M"], KEYS_PER_WARPGROUP
    q_type = f"tensordesc<{dtype}[{block_m}, {head_dim}],{_tile_layout((block_m, head_dim), gl_dtype)!r}>"
    kv_type = f"tensordesc<{dtype}[{keys}, {head_dim}],{_tile_layout((keys, head_dim), gl_dtype)!r}>"
    row_type = f"tensordesc<fp32[{block_m}],{_tile_layout((block_m,), gl.float32)!r}>"
    kv_out = "*fp32" if config.get("GROUP_SPLIT", 1) > 1 else f"*{dtype}"  # GROUP_SPLIT: fp32 accumulators
    signature = {"q_desc": q_type, "k_desc": kv_type, "v_desc": kv_type, "do_desc": q_type, "lse_desc": row_type,
                 "delta_desc": row_type, "dq_ptr": "*fp32", "dk_ptr": kv_out, "dv_ptr": kv_out,
                 "seq_len": "i32", "heads_kv": "i32", "group": "i32", "sm_scale": "fp32", "qk_scale": "fp32"}
    constexprs = _constexprs({**config, "STRICT_ORDER": strict_order or config.get("STRICT_ORDER", False)}, causal,
                             head_dim)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _attn_bwd_kernel.arg_names}
    names = list(signature)
    pointers = ("dq_ptr", "dk_ptr", "dv_ptr")
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in pointers}
    source = GluonASTSource(_attn_bwd_kernel, signature, {(names.index(k),): v for k, v in constexprs.items()}, attrs)
    undo_interpreter_patches()  # a CPU kernel run earlier in this process may have left some
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": 4})


def inspect_build(config: dict, head_dim: int, causal: bool, dtype: str = "bf16",
                  strict_order: bool = False) -> GluonBuild:
    """Compile ``config`` for sm_90 (``crosscompile``) and read shared memory, registers, spills and the wgmma
    waits of the build (``crosscompile.inspect_gluon_build``)."""
    return inspect_gluon_build(crosscompile(config, head_dim, causal, dtype, strict_order=strict_order))
