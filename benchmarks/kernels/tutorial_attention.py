# Adapted from Triton's fused-attention tutorial, python/tutorials/06-fused-attention.py of
# https://github.com/triton-lang/triton (the Hopper path: host-built TMA descriptors in the forward, one backward
# launch with separate dK/dV and dQ loops). Triton's license follows.
#
# Copyright 2018-2020 Philippe Tillet
# Copyright 2020-2022 OpenAI
#
# Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
# documentation files (the "Software"), to deal in the Software without restriction, including without limitation
# the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and
# to permit persons to whom the Software is furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all copies or substantial portions
# of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED
# TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF
# CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS
# IN THE SOFTWARE.
"""The Triton tutorial's fused attention (FlashAttention-2), a candidate next to ``workbench.kernels.attention``
for ``benchmarks/kernels/attention_candidates.py`` (issue 20); not the product kernel.

Kept from the tutorial: the forward's two-stage causal loop (key blocks left of the query block's diagonal
without a mask, then the diagonal block with an additive -1e6 mask), exp2 with log2(e) folded into the scale,
the 1/l normalisation deferred to the epilogue, K and V tiles through host-built TMA descriptors
(``triton.tools.tensor_descriptor.TensorDescriptor``: grid constants, none built on the device), the row
statistic M = m + log2(l) in log2 units; the backward's delta launch, then one launch whose programs first sum
dK, dV for a key block over the query blocks (the causal diagonal in BLOCK_M1 / BLK_SLICE_FACTOR steps), then
compute dQ for a query block over the key blocks, with K pre-scaled by sm_scale * log2(e) on the host (so S
comes out in log2 units and dQ is rescaled by ln 2 once at the end).

Changed: grouped-query attention (query head h reads kv head h // group; a backward program owns one kv head and
loops over its group's query heads for both dK/dV and dQ, so the group sum stays in registers; group 1 is the
tutorial), the input's dtype (bf16 or fp16) instead of fp16, explicit configs instead of autotuning, and an
optional longest-first order of the causal forward's query blocks (``LONGEST_FIRST``, our kernel's). Like the
tutorial: contiguous [B, H, S, D] inputs, S a multiple of every tile (``supports`` says why not).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

RCP_LN2 = 1.4426950408889634  # 1 / ln(2) = log2(e)
PRE_BLOCK = 128
"""Rows per program of the delta launch (the tutorial's)."""


# ----------------------------------------------------------------------------------------------------- forward
@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_kv, start_m, qk_scale,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n,
                    N_CTX):
    """STAGE 1: key blocks left of the diagonal block; 2: the diagonal block (masked); 3: every key block.
    acc: [BLOCK_M, HEAD_DIM] fp32; l_i, m_i: [BLOCK_M] fp32 (m in log2 units)."""
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    offset_y = offset_kv + lo
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([offset_y, 0]).T  # k: [HEAD_DIM, BLOCK_N]
        qk = tl.dot(q, k)  # qk: [BLOCK_M, BLOCK_N], unscaled
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offset_y, 0])  # v: [BLOCK_N, HEAD_DIM]
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij  # after the dot: fewer live registers across it (the tutorial's order)
        m_i = m_ij
        offset_y += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(sm_scale, M, desc_q, desc_k, desc_v, desc_o,  # M: [B, Hq, S] fp32, log2 units
              N_CTX, heads_q, group,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
              LONGEST_FIRST: tl.constexpr):
    """Grid (S // BLOCK_M, B * Hq). desc_q, desc_o: [B * Hq * S, HEAD_DIM] rows, blocks [BLOCK_M, HEAD_DIM];
    desc_k, desc_v: [B * Hkv * S, HEAD_DIM] rows, blocks [BLOCK_N, HEAD_DIM]. STAGE 3: causal, 1: full."""
    start_m = tl.program_id(0)
    if LONGEST_FIRST:
        start_m = tl.num_programs(0) - 1 - start_m
    off_hz = tl.program_id(1)
    off_kv = (off_hz // heads_q) * (heads_q // group) + (off_hz % heads_q) // group  # b * Hkv + h // group
    offset_q = off_hz * N_CTX
    offset_kv = off_kv * N_CTX
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1 / ln(2)
    q = desc_q.load([offset_q + start_m * BLOCK_M, 0])  # q: [BLOCK_M, HEAD_DIM], stays in registers
    # causal (STAGE 3): the off-band blocks (inner stage 1), then the diagonal block (inner stage 2);
    # full (STAGE 1): every block (inner stage 3)
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_kv, start_m, qk_scale,
                                        BLOCK_M, BLOCK_N, 4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_kv, start_m, qk_scale,
                                        BLOCK_M, BLOCK_N, 2, offs_m, offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz.to(tl.int64) * N_CTX + offs_m, m_i)
    desc_o.store([offset_q + start_m * BLOCK_M, 0], acc.to(q.dtype))


# ---------------------------------------------------------------------------------------------------- backward
@triton.jit
def _attn_bwd_preprocess(O, DO, Delta, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Grid (S // BLOCK_M, B * Hq): delta = rowsum(O * dO) [B, Hq, S] fp32."""
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1).to(tl.int64)
    off_n = tl.arange(0, HEAD_DIM)
    rows = off_hz * HEAD_DIM * N_CTX + off_m[:, None] * HEAD_DIM + off_n[None, :]
    o = tl.load(O + rows)
    do = tl.load(DO + rows).to(tl.float32)
    tl.store(Delta + off_hz * N_CTX + off_m, tl.sum(o * do, axis=1))


@triton.jit
def _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, start_n, start_m, num_steps,
                   BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, HEAD_DIM: tl.constexpr, MASK: tl.constexpr):
    """num_steps query blocks of BLOCK_M1 rows from start_m against key block start_n; tiles transposed:
    qT [HEAD_DIM, BLOCK_M1], k, v, dk, dv [BLOCK_N1, HEAD_DIM] (k pre-scaled)."""
    offs_m = start_m + tl.arange(0, BLOCK_M1)
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, HEAD_DIM)
    qT_ptrs = Q + offs_m[None, :] * HEAD_DIM + offs_k[:, None]
    do_ptrs = DO + offs_m[:, None] * HEAD_DIM + offs_k[None, :]
    tl.static_assert(BLOCK_N1 % BLOCK_M1 == 0)
    curr_m = start_m
    for blk_idx in range(num_steps):
        qT = tl.load(qT_ptrs)
        offs_m = curr_m + tl.arange(0, BLOCK_M1)
        m = tl.load(M + offs_m)  # before the dot: hides the load
        qkT = tl.dot(k, qT)  # log2 units (k pre-scaled)
        pT = tl.math.exp2(qkT - m[None, :])
        if MASK:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(do_ptrs)
        dv += tl.dot(pT.to(do.dtype), do)
        Di = tl.load(D + offs_m)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = pT * (dpT - Di[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
        curr_m += BLOCK_M1
        qT_ptrs += BLOCK_M1 * HEAD_DIM
        do_ptrs += BLOCK_M1 * HEAD_DIM
    return dk, dv


@triton.jit
def _attn_bwd_dq(dq, q, K, V, do, m, D, start_m, start_n, num_steps,
                 BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, HEAD_DIM: tl.constexpr, MASK: tl.constexpr):
    """num_steps key blocks of BLOCK_N2 rows from start_n against query block start_m: q, do, dq
    [BLOCK_M2, HEAD_DIM]; kT, vT [HEAD_DIM, BLOCK_N2] (k pre-scaled: dq is rescaled by the caller)."""
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_n = start_n + tl.arange(0, BLOCK_N2)
    offs_k = tl.arange(0, HEAD_DIM)
    kT_ptrs = K + offs_n[None, :] * HEAD_DIM + offs_k[:, None]
    vT_ptrs = V + offs_n[None, :] * HEAD_DIM + offs_k[:, None]
    Di = tl.load(D + offs_m)
    tl.static_assert(BLOCK_M2 % BLOCK_N2 == 0)
    curr_n = start_n
    for blk_idx in range(num_steps):
        kT = tl.load(kT_ptrs)
        vT = tl.load(vT_ptrs)
        qk = tl.dot(q, kT)
        p = tl.math.exp2(qk - m)
        if MASK:
            offs_n = curr_n + tl.arange(0, BLOCK_N2)
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = p * (dp - Di[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT))
        curr_n += BLOCK_N2
        kT_ptrs += BLOCK_N2 * HEAD_DIM
        vT_ptrs += BLOCK_N2 * HEAD_DIM
    return dq


@triton.jit
def _attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, M, D,  # q, do, dq: [B, Hq, S, D]; k (pre-scaled), v, dk, dv:
              N_CTX, group,                              # [B, Hkv, S, D]; M, D: [B, Hq, S] fp32
              BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
              BLK_SLICE_FACTOR: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    """Grid (S // BLOCK_N1, B * Hkv), BLOCK_N1 == BLOCK_M2: program (i, kv head) sums dK, dV of key block i over
    the query heads of its kv head, then computes dQ of query block i for each of them."""
    LN2: tl.constexpr = 0.6931471824645996  # ln(2)
    pid = tl.program_id(0)
    off_kv = tl.program_id(1).to(tl.int64)
    offs_k = tl.arange(0, HEAD_DIM)
    kv_rows = off_kv * N_CTX * HEAD_DIM

    # dK, dV of key block pid
    start_n = pid * BLOCK_N1
    MASK_BLOCK_M1: tl.constexpr = BLOCK_M1 // BLK_SLICE_FACTOR
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    k = tl.load(K + kv_rows + offs_n[:, None] * HEAD_DIM + offs_k[None, :])  # k, v stay in registers
    v = tl.load(V + kv_rows + offs_n[:, None] * HEAD_DIM + offs_k[None, :])
    for g in range(group):
        off_hz = off_kv * group + g  # b * Hq + h
        q_base = Q + off_hz * N_CTX * HEAD_DIM
        do_base = DO + off_hz * N_CTX * HEAD_DIM
        m_base = M + off_hz * N_CTX
        d_base = D + off_hz * N_CTX
        start_m = 0
        if CAUSAL:  # the diagonal block in finer steps (masked); query blocks above it see none of these keys
            num_steps = BLOCK_N1 // MASK_BLOCK_M1
            dk, dv = _attn_bwd_dkdv(dk, dv, q_base, k, v, do_base, m_base, d_base, start_n, start_n, num_steps,
                                    MASK_BLOCK_M1, BLOCK_N1, HEAD_DIM, MASK=True)
            start_m = start_n + num_steps * MASK_BLOCK_M1
        num_steps = (N_CTX - start_m) // BLOCK_M1
        dk, dv = _attn_bwd_dkdv(dk, dv, q_base, k, v, do_base, m_base, d_base, start_n, start_m, num_steps,
                                BLOCK_M1, BLOCK_N1, HEAD_DIM, MASK=False)
    tl.store(DV + kv_rows + offs_n[:, None] * HEAD_DIM + offs_k[None, :], dv.to(DV.dtype.element_ty))
    dk *= sm_scale
    tl.store(DK + kv_rows + offs_n[:, None] * HEAD_DIM + offs_k[None, :], dk.to(DK.dtype.element_ty))

    # dQ of query block pid, per query head of this kv head
    start_m = pid * BLOCK_M2
    MASK_BLOCK_N2: tl.constexpr = BLOCK_N2 // BLK_SLICE_FACTOR
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    k_base = K + kv_rows
    v_base = V + kv_rows
    for g in range(group):
        off_hz = off_kv * group + g
        q_rows = off_hz * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_k[None, :]
        q = tl.load(Q + q_rows)
        do = tl.load(DO + q_rows)
        m = tl.load(M + off_hz * N_CTX + offs_m)[:, None]
        d_base = D + off_hz * N_CTX
        dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
        end_n = N_CTX
        if CAUSAL:  # the diagonal block in finer steps (masked), then the key blocks left of it
            num_steps = BLOCK_M2 // MASK_BLOCK_N2
            end_n = start_m + BLOCK_M2 - num_steps * MASK_BLOCK_N2
            dq = _attn_bwd_dq(dq, q, k_base, v_base, do, m, d_base, start_m, end_n, num_steps,
                              BLOCK_M2, MASK_BLOCK_N2, HEAD_DIM, MASK=True)
        num_steps = end_n // BLOCK_N2
        dq = _attn_bwd_dq(dq, q, k_base, v_base, do, m, d_base, start_m, end_n - num_steps * BLOCK_N2, num_steps,
                          BLOCK_M2, BLOCK_N2, HEAD_DIM, MASK=False)
        dq *= LN2
        tl.store(DQ + q_rows, dq.to(DQ.dtype.element_ty))


# ------------------------------------------------------------------------------------------------------ wrappers
FWD_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
BWD_KEYS = ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "BLK_SLICE_FACTOR", "num_warps", "num_stages")


def supports(q: torch.Tensor, k: torch.Tensor, causal: bool, fwd_config: dict, bwd_config: dict | None = None) -> str:
    """'' where the tutorial kernel takes these inputs and configs, else why not (the sweep records it)."""
    b, hq, s, d = q.shape
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {q.dtype}: the tutorial kernel takes bf16 or fp16"
    if hq % k.shape[1]:
        return f"heads_q {hq} not a multiple of heads_kv {k.shape[1]}"
    bm, bn = fwd_config["BLOCK_M"], fwd_config["BLOCK_N"]
    if s % bm or s % bn or (causal and bm % bn):
        return f"seq {s}, forward tiles {bm} x {bn}: S % BLOCK_M, S % BLOCK_N (causal: BLOCK_M % BLOCK_N) must be 0"
    if bwd_config is not None:
        m1, n1, m2, n2, f = (bwd_config[key] for key in BWD_KEYS[:5])
        if n1 != m2 or s % n1 or s % PRE_BLOCK or n1 % m1 or m2 % n2 or m1 % f or n2 % f:
            return (f"seq {s} and backward tiles {m1}/{n1}/{m2}/{n2} / {f}: BLOCK_N1 == BLOCK_M2, S % BLOCK_N1, "
                    f"S % {PRE_BLOCK}, BLOCK_N1 % BLOCK_M1, BLOCK_M2 % BLOCK_N2 and slices must be 0")
    return ""


def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, config: dict,
                  sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B, Hq, S, D] and M [B, Hq, S] (fp32, log2 units: lse / ln 2) from contiguous q [B, Hq, S, D] and
    k, v [B, Hkv, S, D]. ``config``: BLOCK_M, BLOCK_N, num_warps, num_stages[, LONGEST_FIRST]."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    o = torch.empty_like(q)
    m = torch.empty((b, hq, s), device=q.device, dtype=torch.float32)
    desc_q = TensorDescriptor(q, shape=[b * hq * s, d], strides=[d, 1], block_shape=[bm, d])
    desc_o = TensorDescriptor(o, shape=[b * hq * s, d], strides=[d, 1], block_shape=[bm, d])
    desc_k = TensorDescriptor(k, shape=[b * hkv * s, d], strides=[d, 1], block_shape=[bn, d])
    desc_v = TensorDescriptor(v, shape=[b * hkv * s, d], strides=[d, 1], block_shape=[bn, d])
    _attn_fwd[(s // bm, b * hq)](sm_scale, m, desc_q, desc_k, desc_v, desc_o, s, hq, hq // hkv,
                                 HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGE=3 if causal else 1,
                                 LONGEST_FIRST=bool(config.get("LONGEST_FIRST", False)) and causal,
                                 num_warps=config["num_warps"], num_stages=config["num_stages"])
    return o, m


def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  m: torch.Tensor, causal: bool, config: dict,
                  sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from contiguous dO and the forward's O and M. ``config``: BWD_KEYS (the tutorial's backward
    is BLOCK_M1 32, BLOCK_N1 128, BLOCK_M2 128, BLOCK_N2 32, BLK_SLICE_FACTOR 2, 4 warps, 5 stages)."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    do = do.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    arg_k = k * (sm_scale * RCP_LN2)  # pre-scaled: S = q k^T comes out in log2 units
    delta = torch.empty_like(m)
    _attn_bwd_preprocess[(s // PRE_BLOCK, b * hq)](o, do, delta, s, BLOCK_M=PRE_BLOCK, HEAD_DIM=d)
    _attn_bwd[(s // config["BLOCK_N1"], b * hkv)](
        q, arg_k, v, sm_scale, do, dq, dk, dv, m, delta, s, hq // hkv,
        BLOCK_M1=config["BLOCK_M1"], BLOCK_N1=config["BLOCK_N1"], BLOCK_M2=config["BLOCK_M2"],
        BLOCK_N2=config["BLOCK_N2"], BLK_SLICE_FACTOR=config["BLK_SLICE_FACTOR"], HEAD_DIM=d, CAUSAL=causal,
        num_warps=config["num_warps"], num_stages=config["num_stages"])
    return dq, dk, dv
