"""Flash attention forward for Hopper in Gluon, FlashAttention-3 style (Shah et al. 2024, arXiv:2407.08608).

Same contract as ``attention.flash_attention_fwd``: q [B, Hq, S, D], k and v [B, Hkv, S, D] (query head h reads kv
head h // (Hq / Hkv)), bf16 or fp16, D in (64, 128), causal or not; returns O [B, Hq, S, D] in q's dtype and the
natural-log log-sum-exp lse [B, Hq, S] (fp32) the backward of ``attention.py`` consumes. sm_90 only.

Why a second forward. Triton's ``tl.dot`` lowering tops out near 0.8 of cuDNN on an H200: it cannot keep the
tensor cores busy during the softmax. FA3 (and cuDNN) do it with three pieces Gluon exposes directly:

1. Warp specialization: a 1-warp producer partition TMA-loads Q once and K, V blocks into a NUM_STAGES ring,
   signalling ``ready`` mbarriers (one per slot, K and V apart so QK^T starts before V lands); the consumers
   arrive on ``empty`` mbarriers once their wgmma has read a slot.
2. Two consumer warpgroups (BLOCK_M = 128: 64 query rows each, one partition each, sharing the K/V ring), so one
   warpgroup's softmax runs while the other's wgmma does. PINGPONG=True orders them explicitly (FA3's
   "pingpong" schedule): a warpgroup issues its two GEMMs of a step only after the other has issued its own,
   through a pair of mbarriers (``turn``); without it the warp schedulers interleave them as they come.
3. Intra-warpgroup overlap (FA3's Algorithm 2), per consumer, with P_{j-1} held in registers as wgmma's A
   operand (no shared-memory round trip):

       S_j = Q K_j^T            async wgmma, issued first
       O  += P_{j-1} V_{j-1}    async wgmma (register A)
       wait(1)                  S_j retired; P_{j-1} V_{j-1} still runs ...
       softmax(S_j) -> P_j      ... under this softmax
       wait(0); O *= alpha_j    the running rescale

   The running max is in log2 units with the softmax scale folded in (exp2(s * qk_scale - m), one FMA a score).
   O is rescaled every step: on Hopper it lives in registers, so the multiply is 64 FMULs a thread, and
   Blackwell's lazy rescaling (skip unless the max grows by > 8, ``01-attention-forward.py``) saves little here.

Blocks and masks: key blocks every row of the query tile sees whole run unmasked; block 0 (the pipeline's
prologue), the causal diagonal and the sequence tail are masked; key blocks wholly above the diagonal are never
loaded. With 64-key blocks (causal) each consumer counts its own 64 rows' blocks: the first skips the tile's last
block (above all its rows; it only releases the ring slot and passes its ping-pong turn), the second runs one more
block unmasked (``_own_blocks``).

Order: causal grids run the longest query tiles first (query-tile axis reversed and outermost); with config
``L2_SECTION_MIB`` > 0 they do so per section of heads whose K/V fit in that much L2 (FA3's L2 swizzle,
``_causal_tile``). With config ``PERSISTENT=True`` one program per SM (x CTAS_PER_SM) walks the tiles in that
order instead (``attention_gluon_persistent``): the same per-tile partitions (``_load_tile``, ``_attend_tile``),
the rings and ping-pong turns counted across tiles, the next tile's Q and K/V loaded under the current tile's last
steps; with ``BALANCED_TILES`` each program its run of a host-built table of that order, dealt out by cost.

Loads: host TMA descriptors over the 2-D views q [B*Hq*S, D], k, v [B*Hkv*S, D] (contiguous copies when the inputs
are not). A K/V block past a head's end reads the next head's rows (or zeros past the tensor): the tail mask
zeroes their probabilities, so they add nothing. Q rows past S are computed and dropped: O and lse are stored from
registers with row masks (a TMA store of the 2-D view would overwrite the next head's rows), or, persistent with
``O_TMA_STORE`` and S a multiple of 64 (what config=None runs), through shared memory and one TMA store a consumer
tile (``_store_o_tma``). Host side: checks,
config, grid, layouts and the descriptors' checked fields are planned once per distinct call (``_ForwardPlan``);
a repeated call builds its three descriptors from those fields and launches the compiled kernel directly
(``_launch.KernelLaunch``): ~9 us of Python a call instead of ~38 us (CPU, stubbed launch;
``benchmarks/kernels/attention_fwd_short_bench.py --cpu-host``).

Versions: written against the Gluon API of Triton 3.6.0 (the H200 machine) and 3.7.1 (this repo's CI), the
idioms of ``gemm_gluon.py``. Gluon has no interpreter: on the CPU only ``crosscompile`` / ``inspect_build`` run.
"""

from __future__ import annotations

import functools

import torch
import triton

from workbench.kernels._common import (capability, check, frozen, interpreting, plan_cache, reused_descriptors,
                                       sm_count, tensor_key, undo_interpreter_patches)
from workbench.kernels._launch import KernelLaunch, pointers_aligned
from workbench.kernels.checks import check_attention_inputs
from workbench.kernels.crosscompile import GluonBuild, inspect_gluon_build

try:  # Gluon: Triton >= 3.5 (the 3.6 / 3.7 API used here)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    _partition_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier  # renamed in 3.7
    HAS_GLUON = True
except ImportError:  # pragma: no cover - older Triton
    HAS_GLUON = False

_LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
ROWS_PER_WARPGROUP = 64
"""Query rows one consumer warpgroup owns: one wgmma M (PTX ISA, wgmma.mma_async m64nNk16)."""
SM90_SHARED_BYTES = 227 * 1024
"""Shared memory one CTA may use on sm_90 (CUDA programming guide, compute capability 9.0)."""
LOADER_REGISTERS = 24
"""Registers per thread of the TMA producer warp (setmaxnreg, a multiple of 8 in [24, 256]): it only issues
copies and waits (FA3's producer takes 24-56; Triton's Gluon tutorials 24)."""
CONSUMER_REGISTERS = 240
"""Registers per thread asked for the second consumer warpgroup (setmaxnreg; FA3 gives its consumers 240 with
two of them). The default partition (the first consumer) gets what Triton leaves; ``inspect_build`` reads both."""
SM90_SHARED_BYTES_PER_SM = 228 * 1024
SM90_RESERVED_SHARED_BYTES = 1024
"""Shared memory of one sm_90 SM, and what the driver reserves of it per resident CTA (CUDA programming guide,
compute capability 9.0): CTAS_PER_SM CTAs fit when CTAS_PER_SM x (their bytes + the reserve) <= 228 KiB."""
SM90_REGISTERS = 65536
"""32-bit registers of one sm_90 SM (CUDA programming guide, compute capability 9.0), shared by its resident CTAs."""
_KEYS = ("BLOCK_M", "BLOCK_N", "NUM_STAGES", "PINGPONG")
OPTIONAL_KEYS = {"CTAS_PER_SM": 1, "PERSISTENT": False, "L2_SECTION_MIB": 0, "BALANCED_TILES": False,
                 "CARRY_TILES": False, "L2_STAGGER": False, "O_TMA_STORE": False}
"""Config keys with a default. CTAS_PER_SM: how many CTAs an SM is to hold at once (1 or 2). With 1, a short
sequence's tiles run their prologue (Q and the first K/V loads, the lone S_0) and epilogue (the last P V, the O
store) with nothing to hide them behind; a second resident CTA runs its main loop meanwhile. It caps the launch's
registers per thread (``register_budget``) and must fit twice in shared memory (``fits_shared_memory``).
PERSISTENT: launch SMs x CTAS_PER_SM programs that each loop over tiles (``attention_gluon_persistent``), the
producer loading the next tile's Q and K/V under the current tile's last steps; one more Q buffer of shared
memory. L2_SECTION_MIB (causal only): walk the heads in sections whose K and V fit in this many MiB of L2, every
section's tiles longest first (``section_heads``, ``_causal_tile``); 0: one section, every head's longest tile
before any head's next one, which at B=16, S=512, 32 heads (134 MB of K/V against the H200's 50 MB L2) evicts a
head's K/V before its next tile reads it: 335 MB of K/V reads from HBM instead of 134. BALANCED_TILES (PERSISTENT
only): each program walks its run of a host-built table (``attention_gluon_persistent.balanced_tile_table``: the
launch order dealt out to the least-loaded program) instead of every num_programs-th tile. CARRY_TILES
(PERSISTENT only; not with causal 64-key tiles): a tile's last P V goes with the next tile's first Q K^T in one
ping-pong turn, the next tile's first softmax under it (``attention_gluon_persistent._carried_tiles``).
L2_STAGGER (PERSISTENT, causal, with L2_SECTION_MIB): the sections staggered, each round one section's longest
tiles beside the shorter tiles of the query-tile-count - 1 sections before it (a host-built table,
``attention_gluon_persistent.staggered_launch_order``; that many sections' K/V live in L2 at once).
O_TMA_STORE (PERSISTENT only, not with CARRY_TILES): each consumer writes its O tile to a shared-memory slot of its
own and one TMA store takes it to global memory, as FA3's epilogue does, instead of 32 4-byte stores a thread from
registers (two half-sector writes per 32-byte sector of O: Nsight Compute counted twice cuDNN's L2 write sectors at
a01). One more [64, D] tile a consumer; sequences not a multiple of 64 keep the register stores (a TMA store of the
2-D view would write a ragged tile's rows into the next head's)."""
L2_SECTION_CANDIDATES_MIB = (32, 16, 8)
"""L2_SECTION_MIB values to try: FA3's 32 MiB for K and V (``hopper/tile_scheduler.hpp``,
DynamicPersistentTileScheduler: of the H100's 50 MB L2, the H200's too, ``shared/reference/gpu_specs.md``), and
smaller sections that leave more of L2 to the Q and O streams (guesses, calibrate me)."""


if HAS_GLUON:

    @gluon.jit
    def _own_blocks(first_row, seq_len, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
        """Causal: (key blocks every one of rows [first_row, first_row + ROWS) sees whole, key blocks any of them
        sees): keys <= first_row are seen by every row, keys past the last row by none. For a tile's rows
        (``_tile_geometry``) or one consumer warpgroup's (``_attend_tile``)."""
        return (gl.minimum(first_row + 1, seq_len) // BLOCK_N,
                gl.cdiv(gl.minimum(first_row + ROWS, seq_len), BLOCK_N))

    @gluon.jit
    def _tile_geometry(pid_m, bh, seq_len, heads_q, group, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                       CAUSAL: gl.constexpr):
        """Query tile pid_m of head bh = b * Hq + h: (start_m, first q row, first k/v row of its kv head in the
        2-D views, key blocks seen unmasked by every row, key blocks visited)."""
        start_m = pid_m * BLOCK_M
        b = bh // heads_q
        h_kv = (bh % heads_q) // group
        heads_kv = heads_q // group
        if CAUSAL:
            n_full, n_blocks = _own_blocks(start_m, seq_len, BLOCK_M, BLOCK_N)
        else:
            n_full = seq_len // BLOCK_N
            n_blocks = gl.cdiv(seq_len, BLOCK_N)
        return start_m, bh * seq_len, (b * heads_kv + h_kv) * seq_len, n_full, n_blocks

    @gluon.jit
    def _causal_tile(tile, tiles_m, batch_heads, section_heads):
        """(query tile, b * Hq + h) of causal tile number ``tile`` in launch order: the heads in sections of
        section_heads consecutive ones (the last section may hold fewer), each section's tiles longest first
        (every head's last query tile, then every head's one before, ...). section_heads = batch_heads: one
        section, the order of the unsectioned grid. FA3 ``hopper/tile_scheduler.hpp`` (L2 swizzle)."""
        first = tile // (section_heads * tiles_m) * section_heads  # the section's first head
        rank = tile - first * tiles_m  # the tile's place in its section
        heads = gl.minimum(section_heads, batch_heads - first)
        return tiles_m - 1 - rank // heads, first + rank % heads

    @gluon.jit
    def _tile_schedule(seq_len, heads_q, group, section_heads, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                       CAUSAL: gl.constexpr, SECTIONED: gl.constexpr):
        """This program's query tile (``_tile_geometry``). Causal grids are (B * Hq, tiles) with the tile axis
        reversed (longest first; SECTIONED: per section of heads, ``_causal_tile``, on the launch order
        x + y B * Hq); full ones (tiles, B * Hq), neighbours sharing K/V."""
        if CAUSAL and SECTIONED:
            pid_m, bh = _causal_tile(gl.program_id(1) * gl.num_programs(0) + gl.program_id(0), gl.num_programs(1),
                                     gl.num_programs(0), section_heads)
        elif CAUSAL:
            bh = gl.program_id(0)
            pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
        else:
            pid_m = gl.program_id(0)
            bh = gl.program_id(1)
        return _tile_geometry(pid_m, bh, seq_len, heads_q, group, BLOCK_M, BLOCK_N, CAUSAL)

    # ----------------------------------------------------------------------------------------- producer
    @gluon.jit
    def _load_tile(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty,
                   q_slot, q_row, kv_row, n_blocks, it, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr):
        """One tile's loads: consumer i's Q rows into q_smem[q_slot + i] (q_row: its first row), then K_j, V_j of
        key blocks j < n_blocks in the consumers' order. The rings are counted across tiles: block j is the
        ring's load it + j, slot (it + j) % NUM_STAGES, and waits for empty[slot] at the parity of that slot's
        previous round (a fresh mbarrier passes parity 1 at once)."""
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        for i in gl.static_range(NUM_CONSUMERS):
            mbarrier.expect(q_bar.index(q_slot + i), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [q_row + i * ROWS, 0], q_bar.index(q_slot + i),
                                            q_smem.index(q_slot + i))
        for j in range(n_blocks):
            slot = (it + j) % NUM_STAGES
            parity = (((it + j) // NUM_STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(slot), parity)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(slot), k_ring.index(slot))
            mbarrier.wait(v_empty.index(slot), parity)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(slot), v_ring.index(slot))

    @gluon.jit
    def _load_partition(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty,
                        seq_len, heads_q, group, section_heads, CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                        NUM_STAGES: gl.constexpr, SECTIONED: gl.constexpr):
        """The TMA warp of the one-tile kernel: this program's tile (``_load_tile``), the rings from load 0."""
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        start_m, q_row, kv_row, n_full, n_blocks = _tile_schedule(seq_len, heads_q, group, section_heads,
                                                                  ROWS * NUM_CONSUMERS, BLOCK_N, CAUSAL, SECTIONED)
        _load_tile(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, 0,
                   q_row + start_m, kv_row, n_blocks, 0, NUM_CONSUMERS, NUM_STAGES)

    # ----------------------------------------------------------------------------------------- consumers
    @gluon.jit
    def _release(empty, slot):
        """Every warp of this warpgroup is past the wait that retired the wgmma reading ``slot``: one arrive
        (the partition barrier first, as gemm_gluon's ``_release``)."""
        _partition_barrier()
        mbarrier.arrive(empty.index(slot), count=1)

    @gluon.jit
    def _softmax(s, m_i, l_i, offs_m, start_n, seq_len, qk_scale, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
        """Online softmax of one score tile s [ROWS, BLOCK_N] (unscaled, fp32): (P, alpha, l, m), m in log2
        units. Masked tiles drop keys past S and, causal, keys after the query."""
        BLOCK_N: gl.constexpr = s.shape[1]
        if MASKED:
            offs_n = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
            keep = gl.expand_dims(offs_n, 0) < seq_len
            if CAUSAL:
                keep = keep & (gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0))
            s = gl.where(keep, s, float("-inf"))
        # Block 0 holds key 0, which every row sees: m_new is finite from the first block on.
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, l_i * alpha + gl.sum(p, axis=1), m_new

    @gluon.jit
    def _take_turn(turn, steps, WG: gl.constexpr, PINGPONG: gl.constexpr):
        """Ping-pong: wait until the other warpgroup has issued its GEMMs of the step before (warpgroup 0 goes
        first: its first wait, parity 1 on a fresh barrier, passes)."""
        if PINGPONG:
            mbarrier.wait(turn.index(WG), (steps & 1) ^ (1 - WG))

    @gluon.jit
    def _pass_turn(turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - WG), count=1)

    @gluon.constexpr_function
    def _mma_layout(width):
        """wgmma's accumulator layout of a [64, width] fp32 tile on one warpgroup: S (width BLOCK_N), O (HEAD_DIM)."""
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, width, 16])

    @gluon.constexpr_function
    def _p_layout(head_dim):
        """P's layout as the register A operand of O += P V (O [64, head_dim])."""
        return gl.DotOperandLayout(operand_index=0, parent=_mma_layout(head_dim), k_width=2)

    @gluon.jit
    def _overlapped_step(j, it, step, q_tile, k_ring, v_ring, k_ready, v_ready, k_empty, v_empty, turn, p_op, acc,
                         m_i, l_i, offs_m, seq_len, qk_scale, zero_s, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
                         WG: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                         HANDOVER: gl.constexpr):
        """Key block j (the rings' load it + j, ping-pong turn step + j): issue S_j = Q K_j^T and
        O += P_{j-1} V_{j-1}, softmax S_j while the second runs. HANDOVER (config ``CARRY_TILES``): block j = 0
        of a tile, and P, V, acc the previous tile's last block (load it - 1): acc comes back finished, not
        rescaled by this tile's first softmax (m_i, l_i: a fresh row max and sum)."""
        BLOCK_N: gl.constexpr = zero_s.shape[1]
        k_load = it + j
        v_load = k_load - 1
        k_slot = k_load % NUM_STAGES
        v_slot = v_load % NUM_STAGES
        mbarrier.wait(k_ready.index(k_slot), (k_load // NUM_STAGES) & 1)
        _take_turn(turn, step + j, WG, PINGPONG)
        s_tok = warpgroup_mma(q_tile, k_ring.index(k_slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(v_slot), (v_load // NUM_STAGES) & 1)
        o_tok = warpgroup_mma(p_op, v_ring.index(v_slot), acc, is_async=True)
        _pass_turn(turn, WG, PINGPONG)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))  # S_j, issued first, has retired
        _release(k_empty, k_slot)
        p, alpha, l_i, m_i = _softmax(s, m_i, l_i, offs_m, j * BLOCK_N, seq_len, qk_scale, MASKED, CAUSAL)
        acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op))  # p_op: read until here
        _release(v_empty, v_slot)
        if not HANDOVER:
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout)), 1)
        p_op = gl.convert_layout(p.to(q_tile.dtype), p_op.type.layout)
        return p_op, acc, m_i, l_i

    @gluon.jit
    def _first_block(q_tile, k_ring, k_ready, k_empty, turn, it, step, m_i, l_i, offs_m, seq_len, qk_scale, zero_s,
                     CAUSAL: gl.constexpr, WG: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr):
        """Turn ``step``: a tile's S_0 = Q K_0^T alone (the rings' load it; masked: block 0 may hold the diagonal or
        the tail) and its softmax: (P_0 as O += P V's register operand, l, m). The caller has waited for Q."""
        HEAD_DIM: gl.constexpr = q_tile.shape[1]
        first = it % NUM_STAGES
        mbarrier.wait(k_ready.index(first), (it // NUM_STAGES) & 1)
        _take_turn(turn, step, WG, PINGPONG)
        s_tok = warpgroup_mma(q_tile, k_ring.index(first).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        _pass_turn(turn, WG, PINGPONG)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
        _release(k_empty, first)
        p, alpha, l_i, m_i = _softmax(s, m_i, l_i, offs_m, 0, seq_len, qk_scale, True, CAUSAL)
        return gl.convert_layout(p.to(q_tile.dtype), _p_layout(HEAD_DIM)), l_i, m_i

    @gluon.jit
    def _tile_steps(n_full, n_own, it, step, q_tile, k_ring, v_ring, k_ready, v_ready, k_empty, v_empty, turn, p_op,
                    acc, m_i, l_i, offs_m, seq_len, qk_scale, zero_s, CAUSAL: gl.constexpr, WG: gl.constexpr,
                    NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr):
        """Key blocks 1 .. n_own - 1 of a tile whose block 0 was the rings' load it at turn step
        (``_overlapped_step``): first those every row sees whole (below n_full), then the diagonal and the tail."""
        for j in range(1, n_full):
            p_op, acc, m_i, l_i = _overlapped_step(j, it, step, q_tile, k_ring, v_ring, k_ready, v_ready, k_empty,
                                                   v_empty, turn, p_op, acc, m_i, l_i, offs_m, seq_len, qk_scale,
                                                   zero_s, False, CAUSAL, WG, NUM_STAGES, PINGPONG, False)
        for j in range(gl.maximum(n_full, 1), n_own):
            p_op, acc, m_i, l_i = _overlapped_step(j, it, step, q_tile, k_ring, v_ring, k_ready, v_ready, k_empty,
                                                   v_empty, turn, p_op, acc, m_i, l_i, offs_m, seq_len, qk_scale,
                                                   zero_s, True, CAUSAL, WG, NUM_STAGES, PINGPONG, False)
        return p_op, acc, m_i, l_i

    @gluon.jit
    def _last_pv(p_op, acc, v_ring, v_ready, v_empty, turn, load, step, WG: gl.constexpr, NUM_STAGES: gl.constexpr,
                 PINGPONG: gl.constexpr):
        """Turn ``step``: a tile's last O += P V alone (V: the rings' load ``load``); the finished acc."""
        v_slot = load % NUM_STAGES
        mbarrier.wait(v_ready.index(v_slot), (load // NUM_STAGES) & 1)
        _take_turn(turn, step, WG, PINGPONG)
        o_tok = warpgroup_mma(p_op, v_ring.index(v_slot), acc, is_async=True)
        _pass_turn(turn, WG, PINGPONG)
        acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op))
        _release(v_empty, v_slot)
        return acc

    @gluon.jit
    def _store_o(acc, l_i, rows, q_row, o_ptr, seq_len):
        """O = acc / l of one warpgroup's rows (a head's query positions, in acc's row layout; rows past S dropped),
        stored from registers; q_row is the head's first row of the 2-D views."""
        HEAD_DIM: gl.constexpr = acc.shape[1]
        O_LAYOUT: gl.constexpr = acc.type.layout
        o = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT)), 1)
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, O_LAYOUT))
        o_offs = gl.expand_dims((q_row + rows).to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
        gl.store(o_ptr + o_offs, o.to(o_ptr.dtype.element_ty), mask=gl.expand_dims(rows < seq_len, 1))

    @gluon.jit
    def _store_o_tma(acc, l_i, o_desc, o_tile, row):
        """O = acc / l through the consumer's own shared tile o_tile and one TMA store to rows [row, row + 64) of
        O's 2-D view. The previous tile's store has left o_tile first (its issuing thread waits, then the whole
        warpgroup), and every warp's part is written before the one thread issues the copy."""
        O_LAYOUT: gl.constexpr = acc.type.layout
        o = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT)), 1)
        tma.store_wait(0)
        _partition_barrier()
        o_tile.store(o.to(o_desc.dtype))
        fence_async_shared()
        _partition_barrier()
        tma.async_copy_shared_to_global(o_desc, [row, 0], o_tile)

    @gluon.jit
    def _store_lse(l_i, m_i, offs_m, q_row, lse_ptr, seq_len):
        """lse (natural log) of the rows offs_m, from the softmax's running sum l and max m (log2 units)."""
        lse = (m_i + gl.log2(l_i)) * 0.6931471805599453  # ln(2): back to natural log
        gl.store(lse_ptr + q_row.to(gl.int64) + offs_m, lse, mask=offs_m < seq_len)

    @gluon.jit
    def _skip_blocks(k_ready, v_ready, k_empty, v_empty, it, n_own, n_blocks, NUM_STAGES: gl.constexpr):
        """Release key blocks n_own .. n_blocks - 1 of the tile unread (the rings' loads it + j). Each waits for
        its load first: an early arrive would count towards the slot's previous round, which the other consumer
        may still be reading. After the O store, so the wait holds up nothing of this tile."""
        for j in range(n_own, n_blocks):
            slot = (it + j) % NUM_STAGES
            parity = ((it + j) // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(slot), parity)
            _release(k_empty, slot)
            mbarrier.wait(v_ready.index(slot), parity)
            _release(v_empty, slot)

    @gluon.jit
    def _attend_tile(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr,
                     o_desc, q_slot, q_phase, start_m, q_row, n_full, n_blocks, it, step, seq_len, qk_scale,
                     CAUSAL: gl.constexpr, WG: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                     O_TMA: gl.constexpr, O_SLOT: gl.constexpr):
        """Consumer warpgroup WG on one tile: query rows [start_m + 64 WG, + 64) (Q in q_smem[q_slot + WG], its
        barrier at parity q_phase) against key blocks 0 .. n_blocks - 1, the rings' loads it .. it + n_blocks - 1,
        ping-pong turns step .. step + n_blocks; stores O (O_TMA: through q_smem[O_SLOT] and o_desc, else from
        registers at o_ptr; the other is never read) and lse. Tiles: q [64, D] (shared), S, P [64, BLOCK_N] and
        O [64, D] fp32 (registers, wgmma layouts).

        Causal with BLOCK_N <= 64, the blocks are this warpgroup's own (``_own_blocks``): the first consumer's rows
        end a key block (or more) before the tile's last row, so it computes n_own <= n_blocks blocks and only
        releases the rest (``_skip_blocks``); the second sees one more block whole. Bitwise the same O and lse:
        a block wholly above the diagonal adds p = 0 to l and O and leaves the max (alpha = 1)."""
        ROWS: gl.constexpr = q_smem.shape[1]
        HEAD_DIM: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_ring.shape[1]
        S_LAYOUT: gl.constexpr = _mma_layout(BLOCK_N)
        offs_m = start_m + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, S_LAYOUT))
        q_tile = q_smem.index(q_slot + WG)
        zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=S_LAYOUT)  # use_acc=False reads nothing
        m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, S_LAYOUT))
        l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, S_LAYOUT))
        n_own = n_blocks
        if CAUSAL and BLOCK_N <= ROWS:  # BLOCK_N = 128: every consumer's rows reach the tile's last block
            n_full, n_own = _own_blocks(start_m + WG * ROWS, seq_len, ROWS, BLOCK_N)

        mbarrier.wait(q_bar.index(q_slot + WG), q_phase)
        p_op, l_i, m_i = _first_block(q_tile, k_ring, k_ready, k_empty, turn, it, step, m_i, l_i, offs_m, seq_len,
                                      qk_scale, zero_s, CAUSAL, WG, NUM_STAGES, PINGPONG)
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=_mma_layout(HEAD_DIM))
        p_op, acc, m_i, l_i = _tile_steps(n_full, n_own, it, step, q_tile, k_ring, v_ring, k_ready, v_ready, k_empty,
                                          v_empty, turn, p_op, acc, m_i, l_i, offs_m, seq_len, qk_scale, zero_s,
                                          CAUSAL, WG, NUM_STAGES, PINGPONG)
        acc = _last_pv(p_op, acc, v_ring, v_ready, v_empty, turn, it + n_own - 1, step + n_own, WG, NUM_STAGES,
                       PINGPONG)
        for j in range(n_own, n_blocks):  # the other warpgroup's steps on blocks above this one's rows
            _take_turn(turn, step + j + 1, WG, PINGPONG)
            _pass_turn(turn, WG, PINGPONG)
        if O_TMA:  # S is a multiple of 64 (the plan): this warpgroup's rows are all in the head or all past it
            if start_m + WG * ROWS < seq_len:
                _store_o_tma(acc, l_i, o_desc, q_smem.index(O_SLOT), q_row + start_m + WG * ROWS)
        else:
            _store_o(acc, l_i, gl.convert_layout(offs_m, gl.SliceLayout(1, acc.type.layout)), q_row, o_ptr,
                     seq_len)
        _store_lse(l_i, m_i, offs_m, q_row, lse_ptr, seq_len)
        _skip_blocks(k_ready, v_ready, k_empty, v_empty, it, n_own, n_blocks, NUM_STAGES)

    @gluon.jit
    def _consumer(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr, seq_len,
                  heads_q, group, section_heads, qk_scale, CAUSAL: gl.constexpr, WG: gl.constexpr,
                  NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                  SECTIONED: gl.constexpr):
        """Consumer warpgroup WG of the one-tile kernel: this program's tile (``_attend_tile``), from load 0."""
        ROWS: gl.constexpr = q_smem.shape[1]
        BLOCK_N: gl.constexpr = k_ring.shape[1]
        start_m, q_row, kv_row, n_full, n_blocks = _tile_schedule(seq_len, heads_q, group, section_heads,
                                                                  ROWS * NUM_CONSUMERS, BLOCK_N, CAUSAL, SECTIONED)
        _attend_tile(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr, o_ptr,
                     0, 0, start_m, q_row, n_full, n_blocks, 0, 0, seq_len, qk_scale, CAUSAL, WG, NUM_STAGES, PINGPONG,
                     False, 0)

    @gluon.jit
    def _second_consumer(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr,
                         seq_len, heads_q, group, section_heads, qk_scale, CAUSAL: gl.constexpr,
                         NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr, SECTIONED: gl.constexpr):
        _consumer(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr, seq_len,
                  heads_q, group, section_heads, qk_scale, CAUSAL, 1, 2, NUM_STAGES, PINGPONG, SECTIONED)

    @gluon.jit(do_not_specialize=["seq_len", "heads_q", "group", "section_heads"])  # one build per config, layout
    def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, seq_len, heads_q, group, section_heads, qk_scale,
                         CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                         PINGPONG: gl.constexpr, SECTIONED: gl.constexpr, LOADER_REGS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr):
        """Grid: causal (B * Hq, cdiv(S, BLOCK_M)), else (cdiv(S, BLOCK_M), B * Hq); BLOCK_M = 64 NUM_CONSUMERS.

        q_desc: q [B*Hq*S, D], block [64, D]; k_desc, v_desc: [B*Hkv*S, D], block [BLOCK_N, D]; o_ptr: O
        [B, Hq, S, D] contiguous; lse_ptr: [B, Hq, S] fp32; section_heads: heads per section of the causal tile
        order, read when SECTIONED (``section_heads``). Launched with num_warps=4 (the first consumer); workers:
        the second consumer (4 warps, CONSUMER_REGS) when NUM_CONSUMERS == 2, the TMA warp (LOADER_REGS).
        """
        ROWS: gl.constexpr = q_desc.block_type.shape[0]
        HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        q_smem = gl.allocate_shared_memory(q_desc.dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], q_desc.layout)
        k_ring = gl.allocate_shared_memory(k_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_ring = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_CONSUMERS):
            mbarrier.init(q_bar.index(i), count=1)
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)  # every consumer releases every slot
            mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        # The partition lists are written out in each call: a JIT function cannot be bound to a variable.
        if NUM_CONSUMERS == 2:
            gl.warp_specialize([
                (_consumer, (q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr,
                             seq_len, heads_q, group, section_heads, qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES,
                             PINGPONG, SECTIONED)),
                (_second_consumer, (q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr,
                                    lse_ptr, seq_len, heads_q, group, section_heads, qk_scale, CAUSAL, NUM_STAGES,
                                    PINGPONG, SECTIONED)),
                (_load_partition, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty,
                                   v_empty, seq_len, heads_q, group, section_heads, CAUSAL, NUM_CONSUMERS, NUM_STAGES,
                                   SECTIONED)),
            ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
        else:
            gl.warp_specialize([
                (_consumer, (q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turn, o_ptr, lse_ptr,
                             seq_len, heads_q, group, section_heads, qk_scale, CAUSAL, 0, NUM_CONSUMERS, NUM_STAGES,
                             False, SECTIONED)),
                (_load_partition, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty,
                                   v_empty, seq_len, heads_q, group, section_heads, CAUSAL, NUM_CONSUMERS, NUM_STAGES,
                                   SECTIONED)),
            ], [1], [LOADER_REGS])
        for i in gl.static_range(NUM_CONSUMERS):
            mbarrier.invalidate(q_bar.index(i))
        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(k_ready.index(i))
            mbarrier.invalidate(v_ready.index(i))
            mbarrier.invalidate(k_empty.index(i))
            mbarrier.invalidate(v_empty.index(i))
        for i in gl.static_range(2):
            mbarrier.invalidate(turn.index(i))


# ---------------------------------------------------------------------------------------------- launch wrapper
def gluon_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            scale: float | None = None,
                            config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B, Hq, S, D] in q's dtype and lse [B, Hq, S] (fp32, natural log) of softmax(q k^T * scale) v, as
    ``attention.flash_attention_fwd``; ``config`` None: ``default_config(D, causal)``. sm_90 only. Checks, config,
    grid, descriptor layouts and the launch are worked out once per distinct call (``_ForwardPlan``)."""
    key = plan = None
    try:
        if causal is True or causal is False:  # 1 == True as a key, but only a bool passes the checks
            key = (tensor_key(q), tensor_key(k), tensor_key(v), causal, scale, frozen(config))
            plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config value: the checks say which
        key = None
    if plan is not None:  # outside the try: an error of the launch itself is not a reason to plan again
        return _run(plan, q, k, v)
    plan = _plan(q, k, v, causal, scale, config)
    if key is not None:
        _PLANS.put(key, plan)
    return _run(plan, q, k, v)


def forward_plan(q, k, v, causal: bool, scale: float, config: dict) -> "_ForwardPlan":
    """The launch plan of a call whose owner keys the layouts of q, k, v, causal, scale and config itself
    (``attention.flash_attention``'s plan holds it): checks and plans, uncached here."""
    return _plan(q, k, v, causal, scale, config)


def run_forward(plan: "_ForwardPlan", q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """O and lse of tensors laid out as ``plan``'s (the owner's key guarantees it): the per-call work alone."""
    return _run(plan, q, k, v)


class _ForwardPlan:
    """One forward launch minus the tensors: which inputs need a contiguous copy (the TMA views are 2-D), the
    views' shapes, the descriptors' block shapes and layouts (``descriptors``: their checked fields, as
    ``_common.reused_descriptors`` keeps them), lse's shape, and the launch (``KernelLaunch``: grid, scalars,
    constexprs; after its first launch it calls the compiled kernel directly)."""

    __slots__ = ("copy", "views", "blocks", "layouts", "descriptors", "lse_shape", "device_index", "launch", "order",
                 "o_tma", "o_fields")


_PLANS = plan_cache()


def _plan(q, k, v, causal, scale, config) -> _ForwardPlan:
    """``gluon_attention_forward``'s checks and launch plan; raises ``KernelInputError`` naming a bad argument."""
    scale = check_attention_inputs(q, k, v, causal, scale)
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    check_gluon_device(q)
    config = resolve_config(config, d, causal)
    plan = _ForwardPlan()
    plan.copy = tuple(not t.is_contiguous() for t in (q, k, v))
    plan.views = ((b * hq * s, d), (b * hkv * s, d), (b * hkv * s, d))  # q [B*Hq*S, D], k and v [B*Hkv*S, D]
    block_n, gl_dtype = config["BLOCK_N"], _GL_DTYPES[q.dtype]
    plan.blocks = ([ROWS_PER_WARPGROUP, d], [block_n, d], [block_n, d])
    plan.layouts = tuple(_tile_layout(rows, d, gl_dtype) for rows, _ in plan.blocks)
    plan.descriptors = None  # built by the first launch
    plan.lse_shape = (b, hq, s)
    plan.device_index = q.device.index
    tiles = triton.cdiv(s, config["BLOCK_M"])
    options = {**_constexprs(config, causal), **launch_options(config)}
    section = section_heads(config, s, d, hq // hkv, b * hq)
    plan.order = ()  # the persistent kernel's table pointer (``_tile_order``); the one-tile kernel has none
    plan.o_tma, plan.o_fields = None, None  # the persistent kernel's O descriptor: O's (O_TMA) or q's (unread)
    if config.get("PERSISTENT", False):
        options["O_TMA"] = plan.o_tma = options["O_TMA"] and s % ROWS_PER_WARPGROUP == 0
        programs = min(tiles * b * hq, sm_count(q.device.index or 0) * config.get("CTAS_PER_SM", 1))
        plan.order = (_tile_order(config, s, b * hq, section, programs, causal, q.device),)
        plan.launch = KernelLaunch(_persistent_kernel(), (programs,),
                                   (s, hq, hq // hkv, b * hq, section, scale * _LOG2E), options)
    else:
        grid = (b * hq, tiles) if causal else (tiles, b * hq)
        plan.launch = KernelLaunch(_attn_fwd_kernel, grid, (s, hq, hq // hkv, section, scale * _LOG2E), options)
    return plan


def _tile_order(config: dict, seq_len: int, batch_heads: int, section: int, programs: int, causal: bool,
                device) -> torch.Tensor:
    """The persistent kernel's order_ptr: with BALANCED_TILES or L2_STAGGER its ``tile_table`` (int32, on the
    device, built once per plan), else one int32 the kernel never reads."""
    stagger, greedy = config.get("L2_STAGGER", False), config.get("BALANCED_TILES", False)
    if not (stagger or greedy):
        return torch.zeros(1, dtype=torch.int32, device=device)
    from workbench.kernels.attention_gluon_persistent import tile_table

    table = tile_table(seq_len, batch_heads, section, programs, config["BLOCK_M"], config["BLOCK_N"], causal,
                       stagger=stagger, greedy=greedy)
    return torch.tensor(table, dtype=torch.int32, device=device)


def _persistent_kernel():
    """The persistent kernel (its module imports this one's partitions, so it is imported on first use)."""
    from workbench.kernels.attention_gluon_persistent import attn_fwd_persistent_kernel

    return attn_fwd_persistent_kernel


def _run(plan: _ForwardPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate O and lse, build the descriptors over the call's tensors and launch: the per-call work of a plan."""
    if plan.device_index != torch.cuda.current_device():  # Triton launches on the current device
        with torch.cuda.device(plan.device_index):
            return _run(plan, q, k, v)
    copy_q, copy_k, copy_v = plan.copy
    q, k, v = q.contiguous() if copy_q else q, k.contiguous() if copy_k else k, v.contiguous() if copy_v else v
    if not pointers_aligned(q, k, v):  # TMA takes 16-byte aligned bases only (the plan checked the strides)
        q, k, v = (t if pointers_aligned(t) else t.clone() for t in (q, k, v))
    o = torch.empty_like(q)  # o: [B, Hq, S, D], contiguous like q
    lse = q.new_empty(plan.lse_shape, dtype=torch.float32)  # lse: [B, Hq, S]
    if plan.descriptors is None:  # the first launch builds and checks the descriptors over the 2-D views
        (q_rows, d), (kv_rows, _), _ = plan.views
        q, k, v = q.view(q_rows, d), k.view(kv_rows, d), v.view(kv_rows, d)
    # later launches keep the checked shapes and strides and take the call's tensors as bases: the launcher
    # reads only base.data_ptr() of them (3.6 and 3.7), and the 4-D tensors share the views' (views: ~1 us each)
    descriptors = reused_descriptors(plan, GluonTensorDescriptor, q, k, v, plan.blocks, plan.layouts)
    if plan.o_tma is None:  # the one-tile kernel
        plan.launch(True, *descriptors, o, lse)  # every base aligned (above); o, lse: torch's
    else:  # the persistent kernel: its tile table and O's descriptor (q's stands in, unread, without O_TMA)
        plan.launch(True, *descriptors, o, lse, *plan.order, _o_descriptor(plan, o) if plan.o_tma else descriptors[0])
    return o, lse


def _o_descriptor(plan: _ForwardPlan, o: torch.Tensor):
    """O_TMA: the TMA descriptor over O's 2-D view [B*Hq*S, D] (q's block and layout), its checked fields kept in
    the plan after the first launch, as ``reused_descriptors`` keeps q's, k's and v's."""
    if plan.o_fields is None:
        descriptor = GluonTensorDescriptor.from_tensor(o.view(plan.views[0]), plan.blocks[0], plan.layouts[0])
        plan.o_fields = {**vars(descriptor), "base": None}
        return descriptor
    descriptor = object.__new__(GluonTensorDescriptor)
    descriptor.__dict__.update(plan.o_fields)
    descriptor.base = o
    return descriptor


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16} if HAS_GLUON else {}


@functools.lru_cache(maxsize=32)
def _tile_layout(rows: int, head_dim: int, dtype):
    """Shared layout of a [rows, head_dim] 16-bit tile: the widest swizzle TMA and wgmma both take."""
    return gl.NVMMASharedLayout.get_default_for([rows, head_dim], dtype)


def _constexprs(config: dict, causal: bool) -> dict:
    """The kernel's constexprs. A staggered order (L2_STAGGER) is a table of unsectioned tile numbers: SECTIONED
    off, TABLE on."""
    stagger = config.get("L2_STAGGER", False)
    return dict(CAUSAL=bool(causal), NUM_CONSUMERS=config["BLOCK_M"] // ROWS_PER_WARPGROUP,
                NUM_STAGES=config["NUM_STAGES"], PINGPONG=bool(config["PINGPONG"]),
                SECTIONED=config.get("L2_SECTION_MIB", 0) > 0 and not stagger, LOADER_REGS=LOADER_REGISTERS,
                CONSUMER_REGS=register_budget(config)[1],
                **({"TABLE": config.get("BALANCED_TILES", False) or stagger, "CARRY": config.get("CARRY_TILES", False),
                    "O_TMA": config.get("O_TMA_STORE", False)} if config.get("PERSISTENT", False) else {}))


def section_heads(config: dict, seq_len: int, head_dim: int, group: int, batch_heads: int) -> int:
    """Query heads (consecutive b * Hq + h) per section of the causal tile order (config ``L2_SECTION_MIB``): the
    largest power of two of kv heads whose K and V (16-bit, seq_len x head_dim each) fit in L2_SECTION_MIB MiB, at
    least one, times the group of query heads sharing each (FA3 ``hopper/tile_scheduler.hpp``: power-of-two
    sections ran faster there); at most every head. Option off: every head, one section."""
    budget = config.get("L2_SECTION_MIB", 0) * 2**20
    if not budget:
        return batch_heads
    kv_heads = max(1, budget // (2 * seq_len * head_dim * 2))
    return min((1 << (kv_heads.bit_length() - 1)) * group, batch_heads)


def launch_options(config: dict) -> dict:
    """The launch's options: 4 warps (the first consumer; the workers add theirs), and with CTAS_PER_SM > 1 the
    per-thread register cap (``register_budget``) that lets that many CTAs share an SM's register file."""
    if config.get("CTAS_PER_SM", 1) == 1:
        return dict(num_warps=4)  # Triton caps the launch at the register file / the CTA's threads itself
    return dict(num_warps=4, maxnreg=register_budget(config)[0])


def check_gluon_device(q: torch.Tensor) -> None:
    """The Gluon attention kernels' dtype and device conditions on q (wgmma's 16-bit operands, an sm_90 GPU, Triton
    with Gluon); the backward (``attention_gluon_bwd``) checks the same."""
    check(q.dtype in (torch.bfloat16, torch.float16), "q", f"dtype {q.dtype}",
          "torch.bfloat16 or torch.float16 (wgmma's 16-bit operands)")
    check(HAS_GLUON, "triton", triton.__version__, ">= 3.6 with triton.experimental.gluon")
    check(not interpreting(), "TRITON_INTERPRET", "1", "unset: Gluon kernels have no interpreter")
    check(q.is_cuda and capability(q.device.index or 0) == (9, 0), "device",
          f"{q.device}" + (f" (compute capability {capability(q.device.index or 0)})" if q.is_cuda else ""),
          "an sm_90 GPU: the kernel uses Hopper's wgmma and TMA")


def supported(device: torch.device | str | None = None) -> bool:
    """True when this kernel can run on ``device``: Triton has Gluon, and the device is an sm_90 GPU."""
    if not HAS_GLUON or interpreting() or torch.version.hip or not torch.cuda.is_available():
        return False
    device = torch.device("cuda") if device is None else torch.device(device)
    return device.type == "cuda" and capability(device.index or 0) == (9, 0)


# ------------------------------------------------------------------------------------------------ config space
def shared_bytes(config: dict, head_dim: int) -> int:
    """Shared memory of a config: the Q tiles (two buffers of them when PERSISTENT; with O_TMA_STORE one O tile a
    consumer beside them), NUM_STAGES K and V tiles
    (16-bit), 8 bytes per mbarrier (ready and, PERSISTENT, empty per Q tile; four per stage; two turns)."""
    q_buffers = 2 if config.get("PERSISTENT", False) else 1  # attention_gluon_persistent.Q_BUFFERS
    q_tiles = q_buffers * (config["BLOCK_M"] // ROWS_PER_WARPGROUP)  # one [64, D] tile per consumer and buffer
    o_tiles = config["BLOCK_M"] // ROWS_PER_WARPGROUP if config.get("O_TMA_STORE", False) else 0
    kv_tiles = 2 * config["NUM_STAGES"] * config["BLOCK_N"] * head_dim
    tiles = (q_tiles + o_tiles) * ROWS_PER_WARPGROUP * head_dim + kv_tiles
    barriers = q_tiles * (2 if q_buffers > 1 else 1) + 4 * config["NUM_STAGES"] + 2
    return 2 * tiles + 8 * barriers


def fits_shared_memory(config: dict, head_dim: int) -> bool:
    """One CTA within sm_90's per-CTA limit, and CTAS_PER_SM of them, with the driver's reserve each, in one SM."""
    ctas, used = config.get("CTAS_PER_SM", 1), shared_bytes(config, head_dim)
    return used <= SM90_SHARED_BYTES and ctas * (used + SM90_RESERVED_SHARED_BYTES) <= SM90_SHARED_BYTES_PER_SM


def register_budget(config: dict) -> tuple[int | None, int]:
    """(registers per thread the launch is capped at, None: Triton's own cap of the register file over the CTA's
    threads; the second consumer's setmaxnreg). The CTA launches 4 warps per consumer plus the producer's
    warpgroup (its one warp is padded to four: ``inspect_build``'s launched_warps); with CTAS_PER_SM CTAs on an SM
    each gets SM90_REGISTERS / CTAS_PER_SM, rounded down to a multiple of 8 per thread (setmaxnreg's unit, PTX ISA);
    the producer keeps LOADER_REGISTERS and the consumers share the rest. One CTA: FA3's 240 (CONSUMER_REGISTERS,
    what that split gives for two consumers: (168 x 384 - 24 x 128) / 256)."""
    ctas = config.get("CTAS_PER_SM", 1)
    if ctas == 1:
        return None, CONSUMER_REGISTERS
    consumers = config["BLOCK_M"] // ROWS_PER_WARPGROUP
    threads = 128 * (consumers + 1)
    per_thread = SM90_REGISTERS // (ctas * threads) // 8 * 8
    consumer = (per_thread * threads - 128 * LOADER_REGISTERS) // (128 * consumers) // 8 * 8
    return per_thread, min(consumer, 256)


def config_space(head_dim: int, causal: bool) -> list[dict]:
    """Launch configs for one (head_dim, causal) bucket, the default first (a guess until the H200 sweep of
    ``benchmarks/kernels/attention_gluon_bench.py`` ranks them; calibrate me): FA3's sm_90 forward tiles are
    128 x 128 (d=128, causal; 176 keys otherwise, not a power of two here) and 128 x 128 at d=64 (FA3
    ``hopper/tile_size.h``), two consumer warpgroups, 2 stages; the rest vary one knob each. One single-consumer
    entry (BLOCK_M=64) is kept as the contrast: its 8 warps take 255 registers each at launch, so one CTA per SM
    and nothing to hide its softmax behind. Every entry fits sm_90's shared memory (``shared_bytes``; d=128 with
    128-key tiles: 3 stages is 224 KiB of 227)."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    entries = [(128, 128, 2, True), (128, 128, 2, False), (128, 64, 2, True), (128, 64, 2, False),
               (128, 64, 3, True), (128, 128, 3, True), (64, 128, 2, False)]
    space = [dict(zip(_KEYS, e)) for e in entries]
    return [c for c in space if fits_shared_memory(c, head_dim)]


def short_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates for short sequences (a few key blocks per query tile), beside ``config_space`` until the H200
    sweep of ``benchmarks/kernels/attention_fwd_short_bench.py`` ranks them (guesses, calibrate me): two CTAs per
    SM (``CTAS_PER_SM``) so one tile's prologue and epilogue run under another's main loop, with the tiles that
    fit twice in shared memory and registers (d=128: one consumer of 64 rows, 232 registers; d=64 also two
    consumers at 104), and 64-key tiles with deeper rings (more loads in flight over a short loop)."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    entries = [(64, 64, 2, False, 2), (64, 64, 3, False, 2), (128, 64, 4, True, 1), (128, 64, 4, False, 1)]
    if head_dim == 64:
        entries += [(64, 128, 2, False, 2), (64, 128, 3, False, 2), (64, 64, 2, False, 3), (128, 128, 4, True, 1)]
    space = [dict(zip((*_KEYS, "CTAS_PER_SM"), e)) for e in entries]
    return [c for c in space if fits_shared_memory(c, head_dim)]


def persistent_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates of the persistent kernel (``PERSISTENT``), beside ``config_space`` until the H200 run of
    ``benchmarks/kernels/attention_persistent_bench.py`` ranks them (guesses, calibrate me): the pinned one-tile
    configs' tiles (d=128: 128 x 128, 2 stages, ping-pong; d=64: 64 x 128 at two CTAs an SM), without ping-pong,
    and 64-key tiles with deeper rings; every entry holds its second Q buffer (``shared_bytes``)."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    entries = [(128, 128, 2, True, 1), (128, 128, 2, False, 1), (128, 64, 3, True, 1), (128, 64, 4, True, 1),
               (64, 64, 2, False, 2)]
    if head_dim == 64:
        entries += [(128, 128, 3, True, 1), (64, 128, 2, False, 2)]
    space = [dict(zip((*_KEYS, "CTAS_PER_SM"), e), PERSISTENT=True) for e in entries]
    return [c for c in space if fits_shared_memory(c, head_dim)]


def l2_section_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates of the sectioned causal tile order (``L2_SECTION_MIB``), beside ``config_space`` until the H200
    run of ``benchmarks/kernels/attention_l2_section_bench.py`` ranks them: the wired d=128 causal persistent
    config at each of ``L2_SECTION_CANDIDATES_MIB``, every other ``persistent_config_space`` entry at FA3's
    32 MiB (64-key tiles with deeper rings, whose first consumer skips the key block above its rows:
    ``_attend_tile``; no ping-pong; 64-row tiles at two CTAs an SM, half the causal tail a tile), the ping-pong
    ones of those again with ``BALANCED_TILES``, and the one-tile pinned config at 32 MiB. Empty for full
    attention (no option there) and d=64 (whose short and mid causal forward is the Triton kernel)."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    if not causal or head_dim != 128:
        return []
    persistent = PERSISTENT_FORWARD[(head_dim, causal)][-1][2]  # the mid bucket's: unsectioned
    budget = L2_SECTION_CANDIDATES_MIB[0]
    space = [{**persistent, "L2_SECTION_MIB": mib} for mib in L2_SECTION_CANDIDATES_MIB]
    space += [{**c, "L2_SECTION_MIB": budget} for c in persistent_config_space(head_dim, causal) if c != persistent]
    space += [{**c, "BALANCED_TILES": True} for c in space if c["PINGPONG"] and c["L2_SECTION_MIB"] == budget]
    space.append({**PINNED_FORWARD[(head_dim, causal)], "L2_SECTION_MIB": budget})
    return [c for c in space if fits_shared_memory(c, head_dim)]


def o_tma_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates of O's TMA store (``O_TMA_STORE``), beside their twins until the H200 run of
    ``benchmarks/kernels/attention_option_bench.py --option otma`` ranks them: the bucket's wired persistent configs
    (``PERSISTENT_FORWARD``) and the other ``persistent_config_space`` entries with the option, where one more
    [64, D] tile a consumer still fits sm_90's shared memory. Empty at d=64, where no persistent config is wired."""
    return [c for c in _persistent_twins(head_dim, causal, "O_TMA_STORE") if fits_shared_memory(c, head_dim)]


def _persistent_twins(head_dim: int, causal: bool, key: str, drop: str = "", runs_every_block: bool = False):
    """The bucket's wired persistent configs (``PERSISTENT_FORWARD``), then the other ``persistent_config_space``
    entries, each once, with option ``key`` on and option ``drop`` off; ``runs_every_block``: only those whose two
    consumers run every key block (not causal 64-key tiles). [] at d=64, where no persistent config is wired."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    if head_dim != 128:
        return []
    space = []
    for config in [c for _, _, c in PERSISTENT_FORWARD.get((head_dim, causal), ())] + persistent_config_space(
            head_dim, causal):
        twin = {**{k: v for k, v in config.items() if k != drop}, key: True}
        if twin not in space and not (runs_every_block and causal and config["BLOCK_N"] <= ROWS_PER_WARPGROUP):
            space.append(twin)
    return space


L2_STAGGER_CANDIDATES_MIB = (16, 8, 4)
"""L2_SECTION_MIB values to try staggered: at a01 (4 query tiles, 256 KiB of K/V a head) 64, 32 and 16 MiB of K/V
live in the H200's 50 MB L2 (guesses, calibrate me)."""


def stagger_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates of the staggered sections (``L2_STAGGER``), beside the wired short causal config until the H200
    run of ``benchmarks/kernels/attention_stagger_bench.py`` ranks them: that config (d=128 causal, S <= 1024:
    ``PERSISTENT_FORWARD``) staggered at each of ``L2_STAGGER_CANDIDATES_MIB``, dealt by stride, and at the middle
    one also greedily (``BALANCED_TILES``) and without ping-pong. Empty where no sectioned config is wired."""
    check(head_dim in (64, 128), "head_dim", head_dim, "64 or 128")
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    wired = [c for _, _, c in PERSISTENT_FORWARD.get((head_dim, causal), ()) if c.get("L2_SECTION_MIB")]
    if not wired:
        return []
    space = [{**wired[0], "L2_SECTION_MIB": mib, "L2_STAGGER": True} for mib in L2_STAGGER_CANDIDATES_MIB]
    middle = {**wired[0], "L2_SECTION_MIB": L2_STAGGER_CANDIDATES_MIB[1], "L2_STAGGER": True}
    space += [{**middle, "BALANCED_TILES": True}, {**middle, "PINGPONG": False}]
    return [c for c in space if fits_shared_memory(c, head_dim)]


def carry_config_space(head_dim: int, causal: bool) -> list[dict]:
    """Candidates of the carried tile boundaries (``CARRY_TILES``), beside their twins until the H200 run of
    ``benchmarks/kernels/attention_option_bench.py --option carry`` ranks them: the twin of the bucket's wired
    persistent configs (``PERSISTENT_FORWARD``, storing O from registers: the options exclude each other) and of
    every ``persistent_config_space`` entry whose consumers both run every key block (not causal 64-key tiles), and
    the sectioned ones again with ``BALANCED_TILES``. Empty at d=64, where no persistent config is wired (and whose
    causal 128 x 128 twins spill 4 bytes a thread, triton 3.7.1)."""
    space = _persistent_twins(head_dim, causal, "CARRY_TILES", drop="O_TMA_STORE", runs_every_block=True)
    space += [{**c, "BALANCED_TILES": True} for c in space if c.get("L2_SECTION_MIB")]
    return [c for c in space if fits_shared_memory(c, head_dim)]


PINNED_FORWARD: dict[tuple[int, bool], dict] = {
    (64, False): {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": False, "CTAS_PER_SM": 2},
    (64, True): {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": False, "CTAS_PER_SM": 2},
    (128, False): {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 3, "PINGPONG": True},
    (128, True): {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": True},
}
"""Per (head_dim, causal), the config picked on the fit shapes of
``benchmarks/kernels/attention_candidates_split.json`` (H200, triton 3.6). d=128:
``benchmarks/results/h200/kernels/gluon_attention/picks.json`` (each within 3% of the fit shapes' per-shape best).
d=64: the long-sequence pick of ``benchmarks/results/h200/kernels/attention_fwd_short/rule.json`` (one consumer
of 64 rows, two CTAs an SM), the fastest candidate on its fit shape a20 (4.81 ms; the former 128x128 pick took
4.67-4.97 ms in the same run); test shapes a15 1.024, a18 0.905 of SDPA."""
MIN_SEQ_LEN: dict[int, int] = {64: 4097, 128: 2048}
"""Per head_dim, the shortest sequence ``attention.flash_attention``'s config=None forward runs here instead of the
Triton kernel; from fit shapes. d=128 (``gluon_attention/REPORT.md``): this kernel was faster from 2,048 (a07,
a09) and slower at 512-1,024 (a01, a05: launch and per-tile costs on small grids). d=64
(``attention_fwd_short/rule.json``, buckets S <= 1,024 / <= 4,096 / longer): the Triton kernel at 64x64, 3
stages, pointer loads (``spaces``' pinned entry) up to 4,096 (a02 0.647 -> 0.906, a08 0.935, a11 0.880 -> 0.980 of
SDPA), this kernel's ``PINNED_FORWARD`` above (a20); test shapes a04 0.765 -> 0.925, a15 0.983 -> 1.024, a18 0.882
-> 0.905."""


_PERSISTENT_128 = {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "CTAS_PER_SM": 1, "PERSISTENT": True,
                   "O_TMA_STORE": True}
PERSISTENT_FORWARD: dict[tuple[int, bool], tuple[tuple[int, int, dict], ...]] = {
    (128, True): ((1, 1024, {**_PERSISTENT_128, "PINGPONG": True, "L2_SECTION_MIB": 32}),
                  (1025, 4096, {**_PERSISTENT_128, "PINGPONG": True})),
    (128, False): ((1025, 4096, {**_PERSISTENT_128, "PINGPONG": False}),),
}
"""Per (head_dim, causal): the (shortest, longest sequence, config) ranges where the persistent kernel is the
config=None forward, ahead of ``PINNED_FORWARD`` / ``MIN_SEQ_LEN``. The rule of ``benchmarks/results/h200/kernels/
attention_persistent/rule.json`` (buckets S <= 1,024 short, <= 4,096 mid, longer long; each bucket's choice the
least geometric mean of time / fastest over its fit shapes of ``attention_candidates_split.json``): d=128 causal
short and mid (fit a01, a05, a07), d=128 full mid (fit a09); every other bucket kept what was wired. In that run,
test shapes: a03 0.772 -> 0.884, a06 0.879 -> 0.934 of the best SDPA; a10 0.987 -> 0.950 and a12 0.951 -> 0.920
lose; all 20 shapes 0.947 -> 0.962 (fit a01 0.702 -> 0.672). d=128 causal short walks its tiles in L2 sections of
32 MiB (``L2_SECTION_MIB``, FA3's rule): the rule of ``benchmarks/results/h200/kernels/attention_l2_section/rule.json``
on the same fit shapes (a01 0.679 -> 0.726, a05 0.917 -> 0.916; test a03 0.871 -> 0.868; mid keeps the unsectioned
order, fit a07 0.907 vs 0.866 sectioned). Every bucket stores O by TMA (``O_TMA_STORE``): the rule of
``benchmarks/results/h200/kernels/attention_o_tma/rule.json`` on the same fit shapes (time against the register
stores: a01 0.900, a05 0.876, a07 0.868, a09 0.947; test a03 0.881, a06 0.906, a10 0.964, a12 0.985)."""


def pinned_forward_config(head_dim: int, causal: bool, seq_len: int) -> dict | None:
    """The bucket's config where this kernel is the config=None forward (``PERSISTENT_FORWARD``, then
    ``MIN_SEQ_LEN``), else None. Only sequences a whole number of key blocks long: a ragged last block would read
    the next head's K/V rows (masked to probability 0, but a non-finite value there would still reach O as 0 x
    inf)."""
    config = next((c for lo, hi, c in PERSISTENT_FORWARD.get((head_dim, causal), ()) if lo <= seq_len <= hi), None)
    if config is None:
        config = PINNED_FORWARD.get((head_dim, causal))
        if config is None or seq_len < MIN_SEQ_LEN[head_dim]:
            return None
    return None if seq_len % config["BLOCK_N"] else config


def default_config(head_dim: int, causal: bool) -> dict:
    return config_space(head_dim, causal)[0]


def resolve_config(config: dict | None, head_dim: int, causal: bool) -> dict:
    """Check a config (None: ``default_config``) and return it; raises ``KernelInputError`` naming the key."""
    if config is None:
        return default_config(head_dim, causal)
    check(isinstance(config, dict), "config", type(config).__name__, "a dict")
    missing = [key for key in _KEYS if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_KEYS}")
    check(config["BLOCK_M"] in (64, 128), "config['BLOCK_M']", config["BLOCK_M"],
          "64 or 128 (one or two consumer warpgroups of 64 rows)")
    check(config["BLOCK_N"] in (32, 64, 128, 256), "config['BLOCK_N']", config["BLOCK_N"], "32, 64, 128 or 256")
    check(isinstance(config["NUM_STAGES"], int) and config["NUM_STAGES"] >= 2, "config['NUM_STAGES']",
          config["NUM_STAGES"], "an int >= 2 (the producer refills a slot while the consumers read the other)")
    check(isinstance(config["PINGPONG"], bool), "config['PINGPONG']", config["PINGPONG"], "True or False")
    check(not config["PINGPONG"] or config["BLOCK_M"] == 128, "config['PINGPONG']", True,
          "False with BLOCK_M=64 (ping-pong orders two consumer warpgroups)")
    check(isinstance(config.get("PERSISTENT", False), bool), "config['PERSISTENT']", config.get("PERSISTENT"),
          "True or False")
    section_mib = config.get("L2_SECTION_MIB", 0)
    check(type(section_mib) is int and 0 <= section_mib <= 1024, "config['L2_SECTION_MIB']", repr(section_mib),
          "an int in [0, 1024]: MiB of L2 a section's K and V fill (0: one section)")
    check(causal or not section_mib, "config['L2_SECTION_MIB']", section_mib,
          "0 with causal=False: a full grid already runs each head's tiles together")
    balanced = config.get("BALANCED_TILES", False)
    check(isinstance(balanced, bool) and (not balanced or config.get("PERSISTENT", False)),
          "config['BALANCED_TILES']", repr(balanced), "True or False, True only with PERSISTENT=True")
    stagger = config.get("L2_STAGGER", False)
    check(isinstance(stagger, bool) and (not stagger or (config.get("PERSISTENT", False) and causal and section_mib)),
          "config['L2_STAGGER']", repr(stagger), "True or False, True only with PERSISTENT=True, causal=True and "
          "L2_SECTION_MIB > 0 (it staggers the sections)")
    o_tma = config.get("O_TMA_STORE", False)
    check(isinstance(o_tma, bool) and (not o_tma or (config.get("PERSISTENT", False)
                                                     and not config.get("CARRY_TILES", False))),
          "config['O_TMA_STORE']", repr(o_tma), "True or False, True only with PERSISTENT=True and without CARRY_TILES")
    carry = config.get("CARRY_TILES", False)
    check(isinstance(carry, bool) and (not carry or config.get("PERSISTENT", False)), "config['CARRY_TILES']",
          repr(carry), "True or False, True only with PERSISTENT=True")
    check(not carry or not causal or config["BLOCK_N"] > ROWS_PER_WARPGROUP, "config['CARRY_TILES']", True,
          f"False with causal=True and BLOCK_N={config['BLOCK_N']} (its first consumer skips a key block the "
          "handover would need): BLOCK_N=128")
    ctas = config.get("CTAS_PER_SM", 1)
    check(ctas in (1, 2, 3), "config['CTAS_PER_SM']", ctas, "1, 2 or 3 (CTAs resident on one SM)")
    check(fits_shared_memory(config, head_dim), "config",
          f"{shared_bytes(config, head_dim)} bytes of shared memory at head_dim {head_dim}, CTAS_PER_SM={ctas}",
          f"at most {SM90_SHARED_BYTES} (sm_90), and {ctas} x (that + {SM90_RESERVED_SHARED_BYTES}) <= "
          f"{SM90_SHARED_BYTES_PER_SM}: fewer NUM_STAGES or a smaller BLOCK_N")
    unknown = sorted(set(config) - set(_KEYS) - set(OPTIONAL_KEYS))
    check(not unknown, "config", f"keys {unknown}", f"only {_KEYS} and {tuple(OPTIONAL_KEYS)}")
    return config


# ------------------------------------------------------------------------------------- cross-compilation check
def crosscompile(config: dict, head_dim: int, causal: bool, dtype: str = "bf16", capability: int = 90):
    """Compile one config for sm_90 on this machine (no GPU needed): ``triton.compile`` of a GluonASTSource with
    the launch's descriptor types; returns the CompiledKernel (``.metadata.shared``, ``.asm['ptx']``)."""
    check(HAS_GLUON, "triton", triton.__version__, ">= 3.6 with triton.experimental.gluon")
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    config = resolve_config(config, head_dim, causal)
    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]
    rows, block_n = ROWS_PER_WARPGROUP, config["BLOCK_N"]
    q_type = f"tensordesc<{dtype}[{rows}, {head_dim}],{_tile_layout(rows, head_dim, gl_dtype)!r}>"
    kv_type = f"tensordesc<{dtype}[{block_n}, {head_dim}],{_tile_layout(block_n, head_dim, gl_dtype)!r}>"
    kernel = _persistent_kernel() if config.get("PERSISTENT", False) else _attn_fwd_kernel
    signature = {"q_desc": q_type, "k_desc": kv_type, "v_desc": kv_type, "o_ptr": f"*{dtype}", "lse_ptr": "*fp32",
                 "order_ptr": "*i32", "o_desc": q_type, "seq_len": "i32", "heads_q": "i32", "group": "i32",
                 "batch_heads": "i32", "section_heads": "i32", "qk_scale": "fp32"}
    constexprs = _constexprs(config, causal)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in kernel.arg_names}
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in ("o_ptr", "lse_ptr", "order_ptr")
             if name in names}
    source = GluonASTSource(kernel, signature, {(names.index(k),): v for k, v in constexprs.items()}, attrs)
    undo_interpreter_patches()  # a CPU kernel run earlier in this process may have left some
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options=launch_options(config))


def inspect_build(config: dict, head_dim: int, causal: bool, dtype: str = "bf16") -> GluonBuild:
    """Compile ``config`` for sm_90 (``crosscompile``) and read shared memory, registers, spills and the wgmma
    waits of the build (``crosscompile.inspect_gluon_build``: the producer's and consumers' setmaxnreg budgets in
    ``partition_registers``)."""
    return inspect_gluon_build(crosscompile(config, head_dim, causal, dtype))
