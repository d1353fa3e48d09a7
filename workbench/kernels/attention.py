"""Flash attention, forward and backward, with grouped-query attention (GQA) and an optional causal mask.

Algorithm: FlashAttention-2 (Dao 2023, arXiv:2307.08691). Forward: one program per (query block, batch, query
head) streams the key/value blocks of its kv head once, keeping a running row max and row sum in fp32 (online
softmax, base-2 exponentials), and writes O and the natural-log log-sum-exp ``lse`` [B, Hq, S] (fp32).
Backward (Sec. 3.1.2 of the paper), two launches:

1. dQ: one program per (query block, batch, query head) loops over the key blocks; it first computes
   ``delta = rowsum(dO * O)`` [B, Hq, S] (fp32) of its rows (the paper's preprocessing, fused: one launch less)
   and stores it for
2. dK, dV: one program per (key block, batch, kv head) holds its K, V tile and loops over the query blocks of
   every query head of its GQA group, so the group sum happens in registers: no atomics, no fp32 buffers.

Computing dQ in its own pass (Triton's fused-attention tutorial does it in a second loop) recomputes S = QK^T
and dP = dO V^T: 7 GEMMs instead of the paper's 5, but deterministic and atomic-free. ``flops`` still counts
the algorithmic 2.5x forward, so the backward's achieved TFLOP/s reads against the same work as
FlashAttention-2's.

Variants, picked by config keys (``VARIANT_KEYS``): ``DQ_BLOCK_M`` / ``DQ_BLOCK_N`` give the dQ pass its own
tiles and ``DQ_NUM_WARPS`` / ``DQ_NUM_STAGES`` its own num_warps / num_stages (``backward_pass_configs`` says what
each pass runs): a 128-query dQ tile may want two warpgroups where the dK/dV pass's 64-key tile wants one (sm_90
builds, triton 3.7.1, d=64: the dQ pass of 128 x 64 uses 255 registers per thread over 4 warps, 126 over 8).
Two variants were dropped (issue 20) after losing on every shape of the H200 sweeps
(benchmarks/results/h200/kernels/attention_fifth/SWEEP.md): the atomic-dQ backward (FlashAttention-2's Algorithm 2,
dS K summed into an fp32 dQ by pointer atomics or TMA reductions: 0.64-0.94 of the two-pass backward's speed) and
Triton's warp specialisation of the key/query loops (0.53-0.95); a config that names ``DQ`` or
``WARP_SPECIALIZE`` is refused.

Causal: query i sees keys 0..i; key blocks wholly above the diagonal are never visited. Every loop is split into
blocks that need no mask (no per-element ``where``, unmasked loads) and the few on the diagonal or the sequence
tail that do. Causal grids launch the longest query blocks first.

Loads: on sm_90 the K/V loop of the forward and dQ passes and the Q/dO loop of the dK/dV pass read their tiles
through device-built TMA descriptors (``tl.make_tensor_descriptor`` over one head's [S, D] rows: the copy engine
zero-fills rows past S, so no load masks; 128 bytes of global scratch each, from ``triton.set_allocator``), where
the strides and base addresses are 16-byte aligned; elsewhere, and with ``config["TMA"] = False``, pointer loads.
A TMA build that fails to compile switches that plan to pointer loads with a RuntimeWarning. Configs for
config=None: the pinned per-bucket table of ``spaces.attention_pinned_config`` (head_dim, causal, sequence
bucket; measured by ``benchmarks/kernels/attention_sweep.py``), then the selector (forward), then the default.
On sm_90 the config=None forward of long sequences (d=128 from 2,048, d=64 above 4,096, contiguous 16-bit inputs)
runs the Gluon kernel of ``attention_gluon`` instead (FA3's structure: a TMA producer warp, two ping-ponged
consumer warpgroups, async wgmma; 0.93-1.13 of cuDNN there against this kernel's 0.72-0.91,
``benchmarks/results/h200/kernels/gluon_attention/``); its O and lse feed this module's backward unchanged.
There too, config=None's backward of the buckets where it measured faster (every d=128 bucket;
``attention_gluon_bwd.BACKWARD_BY_BUCKET``) is the Gluon one of
``attention_gluon_bwd`` (FA3's single pass, dQ by atomics), on the same contiguous 16-bit inputs (its GQA group
split, ``GROUP_SPLIT``, where a launch would leave SMs idle: ``attention_gluon_bwd.group_split``).

Precision: tiles stay in the input dtype into tl.dot (fp32 accumulation); P and dS are rounded to it before
their GEMMs, as in FlashAttention-2. fp32 inputs use IEEE fp32 dots (no TF32): a parity path, slow on the GPU.
Under the interpreter bf16 tiles are upcast to fp32 first (its bf16 tl.dot is broken, triton issue #11584).
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
import triton
import triton.language as tl

from workbench.graph.ops import AttentionShape
from workbench.graph.ops import attention as attention_op
from workbench.kernels import attention_gluon, attention_gluon_bwd, crosscompile
from workbench.kernels._common import backend, capability, check, device_name, frozen, interpreting, plan_cache
from workbench.kernels._launch import KernelLaunch
from workbench.kernels._tiling import TMA_ALIGN_BYTES, is_power_of_two, use_torch_allocator
from workbench.kernels.checks import check_attention_grads, check_attention_inputs
from workbench.kernels.reference import reference_attention, reference_attention_grads  # noqa: F401 - re-exported
from workbench.kernels.spaces import attention_pinned_config
from workbench.kernels.spaces import attention_config_space as config_space
from workbench.select import config_for_device

Pass = Literal["fwd", "bwd", "fwd_bwd"]

_LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
HAS_TENSOR_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor")
"""Device-built tensor descriptors (``tl.make_tensor_descriptor``, Triton >= 3.4)."""
DQ_KEYS = ("DQ_BLOCK_M", "DQ_BLOCK_N", "DQ_NUM_WARPS", "DQ_NUM_STAGES")
"""Backward config keys of the dQ pass alone: its query / key tiles (default: the dK/dV tiles swapped) and its
num_warps / num_stages (default: the config's, which the dK/dV pass runs)."""
VARIANT_KEYS = ("TMA", *DQ_KEYS)
"""Config keys that pick a kernel variant or one pass's launch, not launch options of every kernel; absent keys
mean the original kernels (``DQ_KEYS``: the dQ pass's own tiles and launch options)."""
DROPPED_KEYS = ("DQ", "WARP_SPECIALIZE")
"""Config keys of the dropped variants (atomic dQ, warp specialisation; see the module docstring): refused."""
TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-4}
"""Relative Frobenius error against float64 accepted per input dtype (bench cases: O; fwd_bwd also dQ, dK, dV)."""


# ----------------------------------------------------------------------------------------------------- forward
@triton.jit
def _rows_source(base, stride_s, seq_len, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, TMA: tl.constexpr):
    """Where a loop reads [BLOCK, HEAD_DIM] row tiles of one head's [S, HEAD_DIM] rows: a device-built TMA
    descriptor (rows past S read as zeros) or the base pointer itself."""
    if TMA:
        return tl.make_tensor_descriptor(base, shape=[seq_len, HEAD_DIM], strides=[stride_s, 1],
                                         block_shape=[BLOCK, HEAD_DIM])
    else:
        return base


@triton.jit
def _load_rows(src, start, stride_s, seq_len, offs_d, MASKED: tl.constexpr, BLOCK: tl.constexpr,
               TMA: tl.constexpr, UPCAST: tl.constexpr):
    """Rows [start, start + BLOCK) of ``_rows_source``'s head: [BLOCK, HEAD_DIM]. Pointer loads mask rows past S
    only where MASKED (the tail block); TMA zero-fills them in hardware."""
    if TMA:
        tile = src.load([start, 0])
    else:
        offs = start + tl.arange(0, BLOCK)
        ptrs = src + offs[:, None] * stride_s + offs_d[None, :]
        if MASKED:
            tile = tl.load(ptrs, mask=offs[:, None] < seq_len, other=0.0)
        else:
            tile = tl.load(ptrs)
    if UPCAST:
        tile = tile.to(tl.float32)
    return tile


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d, start, end, seq_len,
               qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
               UPCAST: tl.constexpr):
    """Key blocks [start, end) of one query block. acc: [BLOCK_M, HEAD_DIM] fp32; l_i, m_i: [BLOCK_M] fp32."""
    for start_n in range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_rows(k_src, start_n, stride_ks, seq_len, offs_d, MASKED, BLOCK_N, TMA, UPCAST)  # [BLOCK_N, D]
        s = tl.dot(q, tl.trans(k), input_precision="ieee")  # s: [BLOCK_M, BLOCK_N], unscaled
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            s = tl.where(keep, s, float("-inf"))
        # The first block visited holds key 0 or a key below the query block, so m_new is finite for every row.
        # m_i is in log2 units; the scale (> 0) goes onto the row max and into exp2's argument, one FMA per
        # score (s * qk_scale - m) instead of a multiply and a subtract (Triton's fused-attention tutorial).
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_rows(v_src, start_n, stride_vs, seq_len, offs_d, MASKED, BLOCK_N, TMA, UPCAST)  # [BLOCK_N, D]
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(Q, K, V, O, LSE,  # q, o: [B, Hq, S, D]; k, v: [B, Hkv, S, D]; lse: [B, Hq, S] fp32
                     stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                     stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
                     seq_len, heads_q, group, qk_scale,
                     CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     TMA: tl.constexpr, UPCAST: tl.constexpr):
    """Grid (cdiv(S, BLOCK_M), B * Hq). Tiles: q, acc [BLOCK_M, HEAD_DIM]; k, v [BLOCK_N, HEAD_DIM]. GQA by
    program mapping: query head h reads kv head h // group (no repeated K/V)."""
    pid_m = tl.program_id(0)
    if CAUSAL:  # the last query blocks do the most work: launch them first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // heads_q).to(tl.int64)
    h = (bh % heads_q).to(tl.int64)
    h_kv = h // group
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)

    q_src = _rows_source(Q + b * stride_qb + h * stride_qh, stride_qs, seq_len, HEAD_DIM, BLOCK_M, TMA)
    q = _load_rows(q_src, start_m, stride_qs, seq_len, offs_d, True, BLOCK_M, TMA, UPCAST)  # q: [BLOCK_M, D]
    k_src = _rows_source(K + b * stride_kb + h_kv * stride_kh, stride_ks, seq_len, HEAD_DIM, BLOCK_N, TMA)
    v_src = _rows_source(V + b * stride_vb + h_kv * stride_vh, stride_vs, seq_len, HEAD_DIM, BLOCK_N, TMA)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # Key blocks every row of this query block sees in full (off the diagonal: no mask), then the diagonal and
    # tail blocks (masked).
    if CAUSAL:
        unmasked_end = (tl.minimum(start_m + 1, seq_len) // BLOCK_N) * BLOCK_N
        end = tl.minimum(start_m + BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d,
                               0, unmasked_end, seq_len, qk_scale, False, CAUSAL, BLOCK_N, TMA, UPCAST)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d,
                               unmasked_end, end, seq_len, qk_scale, True, CAUSAL, BLOCK_N, TMA, UPCAST)

    o = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=offs_m[:, None] < seq_len)
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634  # back to natural log
    tl.store(LSE + bh.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)


# ---------------------------------------------------------------------------------------------------- backward
@triton.jit
def _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs, stride_dos, offs_n, offs_d,
                start, end, seq_len, qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, TMA: tl.constexpr, UPCAST: tl.constexpr):
    """Query blocks [start, end) of one query head against a key block; tiles are transposed: [keys, queries]."""
    for start_m in range(start, end, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _load_rows(q_src, start_m, stride_qs, seq_len, offs_d, MASKED, BLOCK_M, TMA, UPCAST)  # [BLOCK_M, D]
        if MASKED:
            lse = tl.load(lse_base + offs_m, mask=offs_m < seq_len, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=offs_m < seq_len, other=0.0)
        else:
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        s_t = tl.dot(k, tl.trans(q), input_precision="ieee")  # s_t: [BLOCK_N, BLOCK_M]
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASKED:
            keep = offs_m[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        do = _load_rows(do_src, start_m, stride_dos, seq_len, offs_d, MASKED, BLOCK_M, TMA, UPCAST)  # [BLOCK_M, D]
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision="ieee")
        dp_t = tl.dot(v, tl.trans(do), input_precision="ieee")  # dp_t: [BLOCK_N, BLOCK_M]
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision="ieee")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,  # dk, dv like k, v; lse, delta [B, Hq, S]
                          stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                          stride_vb, stride_vh, stride_vs, stride_dob, stride_doh, stride_dos,
                          stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
                          seq_len, heads_kv, group, sm_scale, qk_scale,
                          CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, TMA: tl.constexpr, UPCAST: tl.constexpr):
    """Grid (cdiv(S, BLOCK_N), B * Hkv). Tiles: k, v, dk, dv [BLOCK_N, HEAD_DIM]; q, do [BLOCK_M, HEAD_DIM]. Runs
    after the dQ pass, which writes delta."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = (bh // heads_kv).to(tl.int64)
    h_kv = (bh % heads_kv).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < seq_len
    k = tl.load(K + b * stride_kb + h_kv * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                mask=keys, other=0.0)
    v = tl.load(V + b * stride_vb + h_kv * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
                mask=keys, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)

    # Query blocks: [lo, diag_end) cross the diagonal (masked), [diag_end, full_end) are unmasked, the tail
    # block [full_end, S) is masked. Causal: query blocks wholly above the diagonal (before lo) are skipped. Key
    # rows past S only pollute dk/dv rows that are never stored.
    full_end = (seq_len // BLOCK_M) * BLOCK_M
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        diag_end = tl.maximum(lo, tl.minimum(tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M, full_end))
        full_end = tl.maximum(diag_end, full_end)
    else:
        lo = 0
        diag_end = 0
    heads_q = heads_kv * group
    for g in range(0, group):  # the query heads of this kv head: their dK, dV sum here
        h = h_kv * group + g
        q_src = _rows_source(Q + b * stride_qb + h * stride_qh, stride_qs, seq_len, HEAD_DIM, BLOCK_M, TMA)
        do_src = _rows_source(DO + b * stride_dob + h * stride_doh, stride_dos, seq_len, HEAD_DIM, BLOCK_M, TMA)
        lse_base = LSE + (b * heads_q + h) * seq_len
        delta_base = DELTA + (b * heads_q + h) * seq_len
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs, stride_dos, offs_n,
                             offs_d, lo, diag_end, seq_len, qk_scale, True, CAUSAL, HEAD_DIM, BLOCK_M, TMA, UPCAST)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs, stride_dos, offs_n,
                             offs_d, diag_end, full_end, seq_len, qk_scale, False, CAUSAL, HEAD_DIM, BLOCK_M, TMA,
                             UPCAST)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs, stride_dos, offs_n,
                             offs_d, full_end, seq_len, seq_len, qk_scale, True, CAUSAL, HEAD_DIM, BLOCK_M, TMA, UPCAST)

    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + h_kv * stride_dkh + offs_n[:, None] * stride_dks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=keys)
    tl.store(DV + b * stride_dvb + h_kv * stride_dvh + offs_n[:, None] * stride_dvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=keys)


@triton.jit
def _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d, start, end, seq_len,
              qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
              UPCAST: tl.constexpr):
    """Key blocks [start, end) of one query block. dq: [BLOCK_M, HEAD_DIM] fp32."""
    for start_n in range(start, end, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_rows(k_src, start_n, stride_ks, seq_len, offs_d, MASKED, BLOCK_N, TMA, UPCAST)  # [BLOCK_N, D]
        v = _load_rows(v_src, start_n, stride_vs, seq_len, offs_d, MASKED, BLOCK_N, TMA, UPCAST)  # [BLOCK_N, D]
        s = tl.dot(q, tl.trans(k), input_precision="ieee")  # s: [BLOCK_M, BLOCK_N]
        p = tl.math.exp2(s * qk_scale - lse[:, None] * 1.4426950408889634)
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")  # dp: [BLOCK_M, BLOCK_N]
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision="ieee")
    return dq


@triton.jit
def _attn_bwd_dq_kernel(Q, K, V, O, DO, LSE, DELTA, DQ,  # delta [B, Hq, S] fp32: written here, read by dK/dV
                        stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                        stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
                        stride_dob, stride_doh, stride_dos,
                        stride_dqb, stride_dqh, stride_dqs,
                        seq_len, heads_q, group, sm_scale, qk_scale,
                        CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, TMA: tl.constexpr, UPCAST: tl.constexpr):
    """Grid (cdiv(S, BLOCK_M), B * Hq). Tiles: q, o, do, dq [BLOCK_M, HEAD_DIM]; k, v [BLOCK_N, HEAD_DIM].
    Runs first: each program owns whole rows, so it computes delta = rowsum(dO * O) of its query block itself
    (FlashAttention-2's preprocessing step, without a launch of its own) and stores it for the dK/dV pass."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // heads_q).to(tl.int64)
    h = (bh % heads_q).to(tl.int64)
    h_kv = h // group
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < seq_len
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=rows, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                 mask=rows, other=0.0)
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=rows, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # delta: [BLOCK_M] fp32
    tl.store(DELTA + bh.to(tl.int64) * seq_len + offs_m, delta, mask=offs_m < seq_len)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse = tl.load(LSE + bh.to(tl.int64) * seq_len + offs_m, mask=offs_m < seq_len, other=0.0)
    k_src = _rows_source(K + b * stride_kb + h_kv * stride_kh, stride_ks, seq_len, HEAD_DIM, BLOCK_N, TMA)
    v_src = _rows_source(V + b * stride_vb + h_kv * stride_vh, stride_vs, seq_len, HEAD_DIM, BLOCK_N, TMA)

    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:  # same split as the forward pass: key blocks above the diagonal are skipped
        unmasked_end = (tl.minimum(start_m + 1, seq_len) // BLOCK_N) * BLOCK_N
        end = tl.minimum(start_m + BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d, 0, unmasked_end,
                   seq_len, qk_scale, False, CAUSAL, BLOCK_N, TMA, UPCAST)
    dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_vs, offs_m, offs_d, unmasked_end, end,
                   seq_len, qk_scale, True, CAUSAL, BLOCK_N, TMA, UPCAST)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=rows)


# ----------------------------------------------------------------------------------------------------- wrappers


def _resolve_config(config: dict | None, pass_: str, head_dim: int, q: torch.Tensor | None = None,
                    k: torch.Tensor | None = None, causal: bool = False) -> dict:
    """An explicit config, checked; or for config=None the pinned config of the shape's bucket on sm_90
    (``spaces.attention_pinned_config``), else (forward) the selector's zero-warmup pick for this shape on a catalog
    GPU (``workbench.select``), else the static default of ``config_space``. A config may carry ``TMA`` (bool):
    whether sm_90 loads go through TMA descriptors (``_use_tma``)."""
    if config is None:
        kind = backend()
        picked = None
        if q is not None and kind == "cuda" and q.dtype in (torch.bfloat16, torch.float16):
            b, hq, s, d = q.shape
            if capability(q.device.index or 0) == (9, 0):
                picked = attention_pinned_config("sm_90", pass_, d, causal, s)
            if picked is None and pass_ == "fwd":
                shape = dict(batch=b, seq=s, heads_q=hq, heads_kv=k.shape[1], head_dim=d, causal=causal)
                dtype = "bf16" if q.dtype == torch.bfloat16 else "fp16"
                picked = config_for_device("attention", shape, dtype, device_name(q.device.index or 0))
        return picked or config_space(kind, pass_, head_dim)[0]
    check(isinstance(config, dict) and "BLOCK_M" in config and "BLOCK_N" in config, f"config ({pass_})",
          repr(config), "a dict with BLOCK_M and BLOCK_N, e.g. an entry of config_space()")
    for key in ("BLOCK_M", "BLOCK_N"):
        value = config[key]
        check(is_power_of_two(value, 16), f"config ({pass_})", f"{key}={value!r}",
              "a power of two >= 16 (tl.dot's smallest tile)")
    check(config.get("TMA", False) in (True, False), f"config ({pass_})", f"TMA={config.get('TMA')!r}",
          "True or False (TMA descriptor loads on sm_90)")
    dropped = sorted(set(config) & set(DROPPED_KEYS))
    check(not dropped, f"config ({pass_})", ", ".join(dropped),
          "no DQ or WARP_SPECIALIZE key (the atomic-dQ and warp-specialised variants were dropped, issue 20)")
    if pass_ == "bwd":
        for key in ("DQ_BLOCK_M", "DQ_BLOCK_N"):
            if key in config:
                check(is_power_of_two(config[key], 16), f"config ({pass_})", f"{key}={config[key]!r}",
                      "a power of two >= 16 (tl.dot's smallest tile)")
        if "DQ_NUM_WARPS" in config:
            check(config["DQ_NUM_WARPS"] in (1, 2, 4, 8, 16), f"config ({pass_})",
                  f"DQ_NUM_WARPS={config['DQ_NUM_WARPS']!r}", "1, 2, 4, 8 or 16 (the dQ pass's num_warps)")
        if "DQ_NUM_STAGES" in config:
            stages = config["DQ_NUM_STAGES"]
            check(isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= 8, f"config ({pass_})",
                  f"DQ_NUM_STAGES={stages!r}", "an int from 1 to 8 (the dQ pass's num_stages)")
    else:
        extra = sorted(set(config) & set(DQ_KEYS))
        check(not extra, f"config ({pass_})", ", ".join(extra), "no backward-only keys in a forward config")
    return config


def backward_pass_configs(config: dict) -> dict[str, dict]:
    """What each backward pass runs for a (checked) backward config: {"dq": ..., "dkdv": ...}, each with its
    BLOCK_M (the pass's query tile in dQ, query tile streamed in dK/dV), BLOCK_N and launch options (num_warps,
    num_stages and, on AMD, the rest). The dQ pass takes ``DQ_KEYS`` where given, else the dK/dV tiles swapped and
    the config's launch options. ``TMA`` is not included (``_use_tma`` decides it per plan)."""
    options = {key: value for key, value in config.items() if key not in ("BLOCK_M", "BLOCK_N", *VARIANT_KEYS)}
    dq_options = dict(options)
    for key, option in (("DQ_NUM_WARPS", "num_warps"), ("DQ_NUM_STAGES", "num_stages")):
        if key in config:
            dq_options[option] = config[key]
    return {"dq": dict(BLOCK_M=config.get("DQ_BLOCK_M", config["BLOCK_N"]),
                       BLOCK_N=config.get("DQ_BLOCK_N", config["BLOCK_M"]), **dq_options),
            "dkdv": dict(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], **options)}


def _use_tma(config: dict, q: torch.Tensor, strides: tuple) -> bool:
    """Whether the K/V (forward, dQ pass) and Q/dO (dK/dV pass) loops load through device-built TMA descriptors:
    the config's ``TMA`` flag (default: on for 16-bit inputs on sm_90+, off under the interpreter and on AMD), and
    only where TMA can address every head: 16-byte aligned batch, head and row strides (CUDA driver API,
    cuTensorMapEncodeTiled). Base addresses are checked per call (``_forward``, ``_backward``)."""
    kind = backend()
    wanted = config.get("TMA")
    if wanted is None:
        wanted = (kind == "cuda" and q.dtype in (torch.bfloat16, torch.float16)
                  and capability(q.device.index or 0) >= (9, 0))
    possible = kind == "interpreter" or (kind == "cuda" and capability(q.device.index or 0) >= (9, 0))
    return bool(wanted) and possible and HAS_TENSOR_DESCRIPTORS and all(
        stride * q.element_size() % TMA_ALIGN_BYTES == 0 for stride in strides)


class _AttentionPlan:
    """Everything the launches of one (shape, strides, dtype, device, causal, scale, configs) need besides the
    tensors, worked out and checked once (``_plan``): which inputs need a copy with unit last stride, the shape
    of lse, and the forward, dQ and dK/dV launches (``KernelLaunch``: grid, scalar arguments, constexprs; after
    their first launch they call the compiled kernels directly). ``fwd_tma`` / ``bwd_tma``: whether each pass
    loads through TMA descriptors (its constexprs say TMA=True then; a call whose tensors are not TMA-aligned
    launches with TMA=False). The backward launches are built for a contiguous dO (``do_strides``, the layout
    autograd hands over); another layout launches through the JIT with its own strides."""

    __slots__ = ("copy_q", "copy_k", "copy_v", "lse_shape", "device_index", "causal", "scale", "bwd_config",
                 "fwd_tma", "bwd_tma", "fwd", "dq", "dkdv", "do_strides", "fwd_parts", "bwd_parts", "gluon",
                 "gluon_bwd", "gluon_fwd_plan", "gluon_bwd_plans")


_PLANS = plan_cache()


def _plan(q, k, v, causal, scale, config, bwd_config) -> _AttentionPlan:
    """Look up (or check and build) the plan of a call; raises ``KernelInputError`` naming a bad argument."""
    try:
        key = None
        if causal is True or causal is False:  # 1 == True as a key, but only a bool passes the checks
            key = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device, v.shape,
                   v.stride(), v.dtype, v.device, causal, scale, frozen(config), frozen(bwd_config))
            plan = _PLANS.get(key)
            if plan is not None:
                return plan
    except (AttributeError, TypeError):  # not tensors, or an unhashable argument: the checks below say which
        key = None
    scale = check_attention_inputs(q, k, v, causal, scale)
    gluon = _gluon_forward_config(q, k, v, causal) if config is None else None
    config = _resolve_config(config, "fwd", q.shape[-1], q, k, causal)
    bwd_config, gluon_bwd = _split_bwd_config(bwd_config, q, k, v, causal)
    bwd_config = _resolve_config(bwd_config, "bwd", q.shape[-1], q, k, causal)  # also the Gluon plans' fallback
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    plan = _AttentionPlan()
    plan.copy_q, plan.copy_k, plan.copy_v = (t.stride(-1) != 1 for t in (q, k, v))
    q_strides, k_strides, v_strides = (_contiguous_strides(t.shape) if copy else t.stride()[:3]
                                       for t, copy in ((q, plan.copy_q), (k, plan.copy_k), (v, plan.copy_v)))
    o_strides = _contiguous_strides(q.shape)  # o, dq, and the dO the backward launches are built for
    kv_strides = _contiguous_strides(k.shape)  # dk, dv
    plan.lse_shape = (b, hq, s)
    plan.device_index = q.device.index if q.is_cuda else None
    plan.causal, plan.scale, plan.bwd_config, plan.gluon, plan.gluon_bwd = causal, scale, bwd_config, gluon, gluon_bwd
    plan.gluon_fwd_plan, plan.gluon_bwd_plans = None, {}  # the Gluon kernels' own plans, made by the first calls
    group, qk_scale, upcast = hq // hkv, scale * _LOG2E, _upcast(q)
    options = {key: value for key, value in config.items() if key not in ("BLOCK_M", "BLOCK_N", *VARIANT_KEYS)}
    plan.fwd_tma = _use_tma(config, q, (*q_strides, *k_strides, *v_strides))
    plan.fwd_parts = ((triton.cdiv(s, config["BLOCK_M"]), b * hq),
                      (*q_strides, *k_strides, *v_strides, *o_strides, s, hq, group, qk_scale),
                      dict(CAUSAL=causal, HEAD_DIM=d, UPCAST=upcast, BLOCK_M=config["BLOCK_M"],
                           BLOCK_N=config["BLOCK_N"], TMA=plan.fwd_tma, **options))
    plan.fwd = _fwd_launch(plan, plan.fwd_tma)
    passes = backward_pass_configs(bwd_config)  # the dQ and the dK/dV pass's tiles and launch options
    plan.bwd_tma = _use_tma(bwd_config, q, (*q_strides, *k_strides, *v_strides))  # dO: checked per call
    # (grid, scalars before dO's strides, scalars after them, constexprs) of the dQ and the dK/dV pass
    plan.bwd_parts = (((triton.cdiv(s, passes["dq"]["BLOCK_M"]), b * hq), (*q_strides, *k_strides, *v_strides,
                                                                           *o_strides),
                       (*o_strides, s, hq, group, scale, qk_scale),
                       dict(CAUSAL=causal, HEAD_DIM=d, UPCAST=upcast, TMA=plan.bwd_tma, **passes["dq"])),
                      ((triton.cdiv(s, passes["dkdv"]["BLOCK_N"]), b * hkv), (*q_strides, *k_strides, *v_strides),
                       (*kv_strides, *kv_strides, s, hkv, group, scale, qk_scale),
                       dict(CAUSAL=causal, HEAD_DIM=d, UPCAST=upcast, TMA=plan.bwd_tma, **passes["dkdv"])))
    plan.do_strides = o_strides
    plan.dq, plan.dkdv = _bwd_launches(plan, o_strides, plan.bwd_tma)
    if key is not None:
        _PLANS.put(key, plan)
    return plan


def _gluon_forward_config(q, k, v, causal: bool) -> dict | None:
    """config=None's forward on sm_90 for long sequences: the Gluon kernel's pinned config
    (``attention_gluon.pinned_forward_config``), for contiguous 16-bit inputs (its TMA views are 2-D); else None
    (this module's Triton kernel)."""
    if (backend() != "cuda" or q.dtype not in (torch.bfloat16, torch.float16) or not attention_gluon.HAS_GLUON
            or capability(q.device.index or 0) != (9, 0) or not all(t.is_contiguous() for t in (q, k, v))):
        return None
    return attention_gluon.pinned_forward_config(q.shape[-1], causal, q.shape[2])


BWD_BACKENDS = ("triton", "gluon")
"""Values of an explicit ``bwd_config``'s optional "backend" key: this module's two-pass backward (the default) or
``attention_gluon_bwd``'s (keys BLOCK_M, BLOCK_N, NUM_STAGES of its ``config_space``; sm_90 only)."""


def _split_bwd_config(bwd_config: dict | None, q, k, v, causal: bool) -> tuple[dict | None, dict | None]:
    """(this module's backward config, None for its config=None default; the Gluon backward's config or None).
    config=None: ``attention_gluon_bwd.pinned_backward_config`` says which (sm_90, contiguous 16-bit inputs,
    per bucket); an explicit config runs the backend its "backend" key names ("triton" if absent)."""
    if bwd_config is None:
        return None, attention_gluon_bwd.pinned_backward_config(q, k, v, causal)
    check(isinstance(bwd_config, dict), "bwd_config", type(bwd_config).__name__,
          "a dict (an entry of config_space(), or {'backend': 'gluon', ...} for attention_gluon_bwd)")
    name = bwd_config.get("backend", "triton")
    check(name in BWD_BACKENDS, "bwd_config['backend']", repr(name),
          "'triton' (this module's backward) or 'gluon' (attention_gluon_bwd, sm_90)")
    rest = {key: value for key, value in bwd_config.items() if key != "backend"}
    if name == "gluon":
        attention_gluon.check_gluon_device(q)
        attention_gluon_bwd.check_sequence(q.shape[2])
        return None, attention_gluon_bwd.resolve_config(rest, q.shape[-1], causal)
    check("NUM_STAGES" not in rest, "bwd_config", "NUM_STAGES (a Gluon backward key) without 'backend'",
          "'backend': 'gluon' for the Gluon backward's config, or num_stages for this module's")
    return rest, None


def _fwd_launch(plan: _AttentionPlan, tma: bool) -> KernelLaunch:
    """The forward pass's launch, with or without TMA loads."""
    grid, scalars, constexprs = plan.fwd_parts
    return KernelLaunch(_attn_fwd_kernel, grid, scalars, {**constexprs, "TMA": tma})


def _bwd_launches(plan: _AttentionPlan, do_strides: tuple, tma: bool) -> tuple[KernelLaunch, KernelLaunch]:
    """The dQ and dK/dV launches for a dO with these strides, with or without TMA loads."""
    return tuple(KernelLaunch(kernel, grid, (*before, *do_strides, *after), {**constexprs, "TMA": tma})
                 for kernel, (grid, before, after, constexprs) in zip((_attn_bwd_dq_kernel, _attn_bwd_dkdv_kernel),
                                                                      plan.bwd_parts))


def _contiguous_strides(shape) -> tuple[int, int, int]:
    """The first three strides of a contiguous [B, H, S, D] tensor."""
    _, h, s, d = shape
    return h * s * d, s * d, d


def _upcast(t: torch.Tensor) -> bool:
    """The interpreter's tl.dot on bf16 returns garbage (triton issue #11584): feed it fp32 tiles instead."""
    return interpreting() and t.dtype == torch.bfloat16


def _on_other_device(plan: _AttentionPlan) -> bool:
    """Whether the tensors live on a GPU other than the current one (Triton launches on the current one)."""
    return plan.device_index is not None and torch.cuda.current_device() != plan.device_index


def _kernel_inputs(plan: _AttentionPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v as the kernels read them: head_dim with stride 1 (coalesced tiles), copied where it is not."""
    return (q.contiguous() if plan.copy_q else q, k.contiguous() if plan.copy_k else k,
            v.contiguous() if plan.copy_v else v)


def _forward(plan: _AttentionPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """O and lse from ``_kernel_inputs``."""
    if _on_other_device(plan):
        with torch.cuda.device(plan.device_index):
            return _forward(plan, q, k, v)
    if plan.gluon is not None:  # this plan's key is the Gluon plan's (q, k, v, causal, scale, config)
        gluon_plan = plan.gluon_fwd_plan
        if gluon_plan is None:
            gluon_plan = plan.gluon_fwd_plan = attention_gluon.forward_plan(q, k, v, plan.causal, plan.scale,
                                                                            plan.gluon)
        return attention_gluon.run_forward(gluon_plan, q, k, v)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)  # o: [B, Hq, S, D]
    lse = q.new_empty(plan.lse_shape, dtype=torch.float32)  # lse: [B, Hq, S] (new_empty: ~1 us under torch.empty)
    aligned = not (q.data_ptr() | k.data_ptr() | v.data_ptr()) % TMA_ALIGN_BYTES  # o, lse: torch's, aligned
    if not plan.fwd_tma:
        plan.fwd(aligned, q, k, v, o, lse)
    elif not aligned:
        _fwd_launch(plan, False)(False, q, k, v, o, lse)
    else:
        use_torch_allocator()  # device-built descriptors take 128 bytes of global scratch each (thread-local)
        try:
            plan.fwd(True, q, k, v, o, lse)
        except _TMA_BUILD_ERRORS as exc:
            _without_tma(plan, exc)
            plan.fwd(True, q, k, v, o, lse)
    return o, lse


def _backward(plan: _AttentionPlan, do, q, k, v, o, lse, saved: bool = False):
    """dQ, dK, dV; q, k, v as the forward pass read them (unit last stride), o and lse as it wrote them (``saved``:
    the forward's own, as autograd hands them back; else flash_attention_bwd's checked arguments)."""
    if _on_other_device(plan):
        with torch.cuda.device(plan.device_index):
            return _backward(plan, do, q, k, v, o, lse, saved)
    if plan.gluon_bwd is not None:  # the plan made its checks
        if saved:
            return attention_gluon_bwd.run_backward(_gluon_backward_plan(plan, do, q, k, v, o), do, q, k, v, o, lse)
        return attention_gluon_bwd.launch_backward(do, q, k, v, o, lse, plan.causal, plan.scale, plan.gluon_bwd)
    if do.stride(-1) != 1:
        do = do.contiguous()
    delta = torch.empty_like(lse)  # delta: [B, Hq, S] fp32
    # dq, dk, dv: contiguous like q, k, v (empty_like parses fewer arguments than torch.empty: ~0.5 us each)
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    tma_aligned = not (q.data_ptr() | k.data_ptr() | v.data_ptr() | do.data_ptr()) % TMA_ALIGN_BYTES
    aligned = tma_aligned and not (o.data_ptr() | lse.data_ptr()) % TMA_ALIGN_BYTES  # the rest: torch's
    do_strides = do.stride()[:3]
    if do_strides == plan.do_strides and (tma_aligned or not plan.bwd_tma):
        dq_pass, dkdv_pass = plan.dq, plan.dkdv
    else:  # another dO layout, or bases TMA cannot take: launches of their own (through the JIT)
        tma = plan.bwd_tma and tma_aligned and all(x * do.element_size() % TMA_ALIGN_BYTES == 0 for x in do_strides)
        dq_pass, dkdv_pass = _bwd_launches(plan, do_strides, tma)
        aligned = False
    if dq_pass.kwargs["TMA"]:
        use_torch_allocator()
    try:  # dQ first: it writes delta, which the dK/dV pass reads (same stream: ordered)
        dq_pass(aligned, q, k, v, o, do, lse, delta, dq)
        dkdv_pass(aligned, q, k, v, do, lse, delta, dk, dv)
    except _TMA_BUILD_ERRORS as exc:
        if not dq_pass.kwargs["TMA"]:
            raise
        _without_tma(plan, exc)
        return _backward(plan, do, q, k, v, o, lse, saved)
    return dq, dk, dv


def gluon_plans() -> tuple[list, list]:
    """(forward plans, backward plans) of the Gluon kernels that flash_attention's cached plans hold: what a probe
    reads to see whether each launch calls its compiled kernel directly."""
    plans = list(_PLANS.values())
    return ([p.gluon_fwd_plan for p in plans if p.gluon_fwd_plan is not None],
            [b for p in plans for b in p.gluon_bwd_plans.values()])


GLUON_BWD_PLANS = 8
"""dO layouts whose Gluon backward plans an attention plan keeps (autograd hands over a contiguous dO, unless the
model's last op before the loss made another layout); past this many it starts over."""


def _gluon_backward_plan(plan: _AttentionPlan, do, q, k, v, o):
    """The Gluon backward's plan for this dO layout, with O and lse the forward's own (contiguous; their layout
    follows from this plan's key, as q's, k's and v's do, and autograd gives dO q's shape, dtype and device)."""
    strides = do.stride()
    found = plan.gluon_bwd_plans.get(strides)
    if found is None:
        if len(plan.gluon_bwd_plans) >= GLUON_BWD_PLANS:
            plan.gluon_bwd_plans.clear()
        found = plan.gluon_bwd_plans[strides] = attention_gluon_bwd.backward_plan(q, k, v, do, o, plan.causal,
                                                                                 plan.scale, plan.gluon_bwd)
    return found


_TMA_BUILD_ERRORS = (triton.compiler.errors.CompilationError, triton.runtime.errors.OutOfResources, RuntimeError)
"""What a TMA build that this Triton or this config cannot compile raises (an MLIR pass failure is a RuntimeError)."""


def _without_tma(plan: _AttentionPlan, exc: BaseException) -> None:
    """Switch a plan whose TMA build failed to pointer loads for good (both passes), with a warning; a plan that
    asked for nothing TMA-specific re-raises (the error is not TMA's)."""
    if not (plan.fwd_tma or plan.bwd_tma):
        raise exc
    warnings.warn(f"flash attention: the TMA build failed ({type(exc).__name__}: {str(exc).strip()[:200]}); "
                  "this shape runs with pointer loads", RuntimeWarning, stacklevel=3)
    plan.fwd_tma = plan.bwd_tma = False
    plan.fwd = _fwd_launch(plan, False)
    plan.dq, plan.dkdv = _bwd_launches(plan, plan.do_strides, False)


def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B, Hq, S, D] in q's dtype and lse [B, Hq, S] (fp32, natural log), without autograd."""
    plan = _plan(q, k, v, causal, scale, config, None)
    return _forward(plan, *_kernel_inputs(plan, q, k, v))


def flash_attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        lse: torch.Tensor, causal: bool = False, scale: float | None = None,
                        config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from dO and the forward's O and lse. ``config`` keys: BLOCK_M = query tile and BLOCK_N = key
    tile of the dK/dV pass (the dQ pass uses them swapped: BLOCK_N queries against BLOCK_M keys, unless ``DQ_KEYS``
    give it its own tiles and launch options); with ``"backend": "gluon"``, a config of ``attention_gluon_bwd``
    instead. None: as ``flash_attention``'s."""
    plan = _plan(q, k, v, causal, scale, None, config)
    if _copy_o(q, do, o, lse):  # the plan reads O as flash_attention_fwd writes it
        o = o.contiguous()
    return _backward(plan, do, *_kernel_inputs(plan, q, k, v), o, lse)


_BWD_CHECKED = plan_cache()
"""(q, do, o, lse) keys whose checks passed -> whether o needs a contiguous copy."""


def _copy_o(q, do, o, lse) -> bool:
    """Check flash_attention_bwd's extra arguments (once per distinct layout); whether o needs a copy."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.device, do.shape, do.stride(), do.dtype, do.device, o.shape,
               o.stride(), o.dtype, o.device, lse.shape, lse.stride(), lse.dtype, lse.device)
        copy = _BWD_CHECKED.get(key)
        if copy is not None:
            return copy
    except (AttributeError, TypeError):  # not tensors: the checks below say which
        key = None
    check_attention_grads(q, do, o, lse)
    copy = o.stride() != (*_contiguous_strides(o.shape), 1)
    if key is not None:
        _BWD_CHECKED.put(key, copy)
    return copy


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan):
        q, k, v = _kernel_inputs(plan, q, k, v)  # saved as the kernels read them
        o, lse = _forward(plan, q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan = plan
        return o

    @staticmethod
    def backward(ctx, do):
        if torch.is_grad_enabled():  # create_graph=True: no double backward (once_differentiable's guard)
            return _FlashAttention._once_differentiable_backward(ctx, do)
        return _FlashAttention._gradients(ctx, do)

    @staticmethod
    def _gradients(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(ctx.plan, do, q, k, v, o, lse, saved=True)
        return dq, dk, dv, None

    # The usual backward runs with grad mode off, where once_differentiable's wrapper (a no_grad block and checks,
    # a few us per call) does nothing; it is kept for the create_graph=True case only.
    _once_differentiable_backward = staticmethod(torch.autograd.function.once_differentiable(_gradients.__func__))


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, config: dict | None = None,
                    bwd_config: dict | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v, differentiable. q: [B, Hq, S, D]; k, v: [B, Hkv, S, D] with Hq % Hkv == 0
    (query head h reads kv head h // (Hq // Hkv)); causal masks key j > query i. ``config`` / ``bwd_config``
    None: on sm_90 the Gluon forward / backward where their rules take the shape
    (``attention_gluon.pinned_forward_config``, ``attention_gluon_bwd.pinned_backward_config``), else the pinned
    config of the bucket, the selector's forward pick (``workbench.select``) or the first entry of
    ``config_space(backend(), pass, D)``. ``bwd_config={"backend": "gluon", ...}`` asks for the Gluon backward
    (``BWD_BACKENDS``). Checks and configs are cached per distinct call (``_AttentionPlan``);
    without a gradient to record, the forward kernel is launched directly (no ``autograd.Function``)."""
    plan = _plan(q, k, v, causal, scale, config, bwd_config)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):  # needs_grad, inlined
        return _FlashAttention.apply(q, k, v, plan)
    return _forward(plan, *_kernel_inputs(plan, q, k, v))[0]


# ------------------------------------------------------------------------------------------------- FLOPs, bytes
def _attention_op(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, pass_: Pass, dtype: str):
    """The analytical model's op for this shape, so measured and predicted points count the same work."""
    check(pass_ in ("fwd", "bwd", "fwd_bwd"), "pass_", repr(pass_), "'fwd', 'bwd' or 'fwd_bwd'")
    shape = AttentionShape(b, s, hq, hkv, d, causal, "fwd_bwd" if pass_ == "fwd_bwd" else "fwd")
    return attention_op("flash_attention", shape, dtype, phase="bwd" if pass_ == "bwd" else "fwd")


def flops(b: int, hq: int, s: int, d: int, causal: bool, pass_: Pass = "fwd") -> float:
    """Forward 4*b*hq*s^2*d (QK^T and PV), causal times (blocks + 1) / (2 * blocks) with 128-token blocks (the
    diagonal blocks counted whole, as a block-skipping kernel computes them); backward 2.5x forward (five GEMMs,
    FlashAttention-2 Sec. 3.1.2; this kernel's separate dQ pass does seven, not counted); fwd_bwd the sum."""
    return _attention_op(b, hq, hq, s, d, causal, pass_, "bf16").flops


def bytes_moved(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, pass_: Pass = "fwd",
                dtype: str = "bf16") -> float:
    """Fewest HBM bytes: fwd reads q, k, v and writes o, lse; bwd reads q, k, v, o, dO, lse (delta not counted)
    and writes dq, dk, dv."""
    return _attention_op(b, hq, hkv, s, d, causal, pass_, dtype).bytes


# ---------------------------------------------------------------------------------------- cross-compilation
def crosscompile_source(config: dict, dtype: str, target: str) -> crosscompile.CompileSource:
    """What ``crosscompile.inspect_config("attention", config, target, dtype)`` compiles: the causal forward kernel
    (``config``'s HEAD_DIM, default 128) with contiguous strides and the sequence divisible by 16."""
    t = crosscompile.TRITON_DTYPES[dtype]
    signature = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "O": f"*{t}", "LSE": "*fp32"}
    strides = [f"stride_{x}{y}" for x in "qkvo" for y in "bhs"]
    signature.update({name: "i32" for name in (*strides, "seq_len", "heads_q", "group")})
    signature["qk_scale"] = "fp32"
    constexprs = dict(CAUSAL=True, HEAD_DIM=config.get("HEAD_DIM", 128), BLOCK_M=config["BLOCK_M"],
                      BLOCK_N=config["BLOCK_N"], TMA=config.get("TMA", False), UPCAST=False)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _attn_fwd_kernel.arg_names}
    divisible = ["Q", "K", "V", "O", "LSE", *strides, "seq_len"]
    return crosscompile.CompileSource(_attn_fwd_kernel, signature, constexprs, divisible)


_BWD_CONSTEXPRS = ("CAUSAL", "HEAD_DIM", "BLOCK_M", "BLOCK_N", "TMA", "UPCAST")
"""The backward kernels' constexpr parameters (upper-case like the pointer arguments)."""


class BackwardPass:
    """One pass of the backward (``"dq"`` or ``"dkdv"``) as ``crosscompile.inspect_config`` compiles it: give it
    the pass's entry of ``backward_pass_configs`` (plus HEAD_DIM, CAUSAL, TMA; defaults 128, True, False). The
    build is the GQA one (group and heads are runtime integers, none specialised to 1) with contiguous strides
    and the sequence divisible by 16, as the committed shapes launch it."""

    KERNELS = {"dq": _attn_bwd_dq_kernel, "dkdv": _attn_bwd_dkdv_kernel}

    def __init__(self, name: str):
        check(name in self.KERNELS, "pass", repr(name), "'dq' or 'dkdv'")
        self.__name__ = f"attention_bwd_{name}"
        self.kernel = self.KERNELS[name]

    def crosscompile_source(self, config: dict, dtype: str, target: str) -> crosscompile.CompileSource:
        t = crosscompile.TRITON_DTYPES[dtype]
        arg_names = self.kernel.arg_names
        pointers = [name for name in arg_names if name.isupper() and name not in _BWD_CONSTEXPRS]
        strides = [name for name in arg_names if name.startswith("stride_")]
        signature = {name: "*fp32" if name in ("LSE", "DELTA") else f"*{t}" for name in pointers}
        signature.update({name: "i32" for name in (*strides, "seq_len", "heads_q", "heads_kv", "group")
                          if name in arg_names})
        signature.update(sm_scale="fp32", qk_scale="fp32")
        constexprs = dict(CAUSAL=config.get("CAUSAL", True), HEAD_DIM=config.get("HEAD_DIM", 128),
                          BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], TMA=config.get("TMA", False),
                          UPCAST=False)
        signature.update({name: "constexpr" for name in constexprs})
        signature = {name: signature[name] for name in arg_names}
        return crosscompile.CompileSource(self.kernel, signature, constexprs, [*pointers, *strides, "seq_len"])


def inspect_backward(config: dict, head_dim: int = 128, causal: bool = True, target: str = "sm_90",
                     dtype: str = "bf16") -> dict[str, crosscompile.Inspection]:
    """Both passes of a backward config compiled for ``target`` on this machine (no GPU needed): {"dq": ...,
    "dkdv": ...} with shared bytes, registers per thread and spill bytes (``crosscompile.inspect_config``)."""
    config = _resolve_config(config, "bwd", head_dim)
    tma = config.get("TMA", target.startswith("sm_"))
    return {name: crosscompile.inspect_config(BackwardPass(name), {**launch, "HEAD_DIM": head_dim,
                                                                   "CAUSAL": causal, "TMA": tma}, target, dtype)
            for name, launch in backward_pass_configs(config).items()}

