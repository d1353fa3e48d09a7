"""The torch references the kernels are checked against, apart from the kernels: float64 torch math (or
torch's own op on float64 inputs), written for clarity, not speed; and the eager torch baselines the fused
elementwise kernels replace (``torch_swiglu``, ``torch_gelu``). Each kernel module re-exports its references
(``gemm.reference_matmul`` is this ``reference_matmul``); ``norms.py`` still keeps its own.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from workbench.kernels._common import KernelInputError
from workbench.kernels.checks import ACTIVATIONS

Reduction = Literal["mean", "sum", "none"]


# ------------------------------------------------------------------------------------------------------------ GEMM
def reference_matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
                     activation: str = "none") -> torch.Tensor:
    """``act(a @ b + bias)`` in float64 (returns float64)."""
    out = a.double() @ b.double()
    if bias is not None:
        out = out + bias.double()
    return _reference_activation(out, activation)


def reference_scaled_matmul(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor,
                            scale_b: torch.Tensor, *, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in float64 from the dequantised inputs."""
    sa = scale_a.double().reshape(-1, 1) if scale_a.numel() > 1 else scale_a.double().reshape(())  # [M, 1] or scalar
    sb = scale_b.double().reshape(1, -1) if scale_b.numel() > 1 else scale_b.double().reshape(())  # [1, N] or scalar
    return reference_matmul(a_fp8.double() * sa, b_fp8.double() * sb, bias=bias)


def _reference_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if activation == "silu":
        return torch.nn.functional.silu(x)
    if activation != "none":
        raise KernelInputError(f"activation: got {activation!r}, expected one of {ACTIVATIONS}")
    return x


# ------------------------------------------------------------------------------------------------------- attention
_REFERENCE_SCORE_ELEMENTS = 1 << 28
"""float64 scores per chunk of (batch, head) pairs (2 GiB), so a 70B-size reference fits next to the inputs."""


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, return_lse: bool = False):
    """Attention in float64 torch math (differentiable); kv heads repeated per query head for GQA.
    Returns O [B, Hq, S, D] float64, and with ``return_lse`` also lse [B, Hq, S]."""
    b, hq, s, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    group = hq // k.shape[1]
    q64 = q.double().flatten(0, 1)  # [B*Hq, S, D]
    k64 = k.double().repeat_interleave(group, dim=1).flatten(0, 1)
    v64 = v.double().repeat_interleave(group, dim=1).flatten(0, 1)
    visible = torch.ones(s, s, dtype=torch.bool, device=q.device).tril() if causal else None
    chunk = max(1, _REFERENCE_SCORE_ELEMENTS // (s * s))
    outs, lses = [], []
    for i in range(0, b * hq, chunk):
        scores = q64[i:i + chunk] @ k64[i:i + chunk].transpose(-1, -2) * scale  # [chunk, S, S]
        if causal:
            scores = scores.masked_fill(~visible, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ v64[i:i + chunk])
        lses.append(torch.logsumexp(scores, dim=-1))
    o = torch.cat(outs).view(b, hq, s, d)
    return (o, torch.cat(lses).view(b, hq, s)) if return_lse else o


def reference_attention_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                              causal: bool = False, scale: float | None = None) -> tuple[torch.Tensor, ...]:
    """O, dQ, dK, dV in float64 by the closed form, chunked like ``reference_attention`` and without autograd
    (whose saved scores would not fit at benchmark sizes): dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)),
    dQ = scale * dS K, dK = scale * dS^T Q; the query heads of a GQA group sum into their kv head."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    scale = d ** -0.5 if scale is None else scale
    with torch.no_grad():
        q64, do64 = (t.double().flatten(0, 1) for t in (q, do))  # [B*Hq, S, D]
        k64, v64 = (t.double().repeat_interleave(group, dim=1).flatten(0, 1) for t in (k, v))
        o, dq, dk, dv = (torch.empty_like(q64) for _ in range(4))
        visible = torch.ones(s, s, dtype=torch.bool, device=q.device).tril() if causal else None
        chunk = max(1, _REFERENCE_SCORE_ELEMENTS // (s * s))
        for i in range(0, b * hq, chunk):
            c = slice(i, i + chunk)
            scores = q64[c] @ k64[c].transpose(-1, -2) * scale  # [chunk, S, S]
            if causal:
                scores = scores.masked_fill(~visible, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            del scores
            o[c] = p @ v64[c]
            dv[c] = p.transpose(-1, -2) @ do64[c]
            ds = p * (do64[c] @ v64[c].transpose(-1, -2) - (do64[c] * o[c]).sum(-1, keepdim=True))
            dq[c] = ds @ k64[c] * scale
            dk[c] = ds.transpose(-1, -2) @ q64[c] * scale
        kv_shape = (b, hkv, group, s, d)
        return (o.view(b, hq, s, d), dq.view(b, hq, s, d), dk.view(kv_shape).sum(2), dv.view(kv_shape).sum(2))


# ------------------------------------------------------------------------------------------------- SwiGLU and GELU
def reference_swiglu(gate_up_or_gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """F.silu(gate) * up in float64 (same argument forms as swiglu)."""
    if up is None:
        gate, up = gate_up_or_gate.double().chunk(2, dim=-1)
    else:
        gate, up = gate_up_or_gate.double(), up.double()
    return F.silu(gate) * up


def reference_gelu(x: torch.Tensor) -> torch.Tensor:
    """F.gelu(approximate="tanh") in float64."""
    return F.gelu(x.double(), approximate="tanh")


# The torch baselines the fused kernels replace (eager torch, in the input dtype).
def torch_swiglu(gate_up_or_gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """The torch baseline: F.silu(gate) * up (eager, two kernels)."""
    if up is None:
        gate, up = gate_up_or_gate.chunk(2, dim=-1)
    else:
        gate = gate_up_or_gate
    return F.silu(gate) * up


def torch_gelu(x: torch.Tensor) -> torch.Tensor:
    """The torch baseline: F.gelu(x, approximate="tanh")."""
    return F.gelu(x, approximate="tanh")


# --------------------------------------------------------------------------------------------------- cross-entropy
def reference_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                            reduction: Reduction = "mean") -> torch.Tensor:
    """torch's cross-entropy on the same logits promoted to float64."""
    return torch.nn.functional.cross_entropy(logits.detach().double(), targets.long(), ignore_index=ignore_index,
                                             reduction=reduction)


def reference_cross_entropy_grad(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                                 reduction: Reduction = "mean") -> torch.Tensor:
    """d(mean/sum loss)/d logits in float64 (for "none", the gradient of the summed per-row losses)."""
    x = logits.detach().double().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x, targets.long(), ignore_index=ignore_index, reduction=reduction)
    (grad,) = torch.autograd.grad(loss.sum(), x)
    return grad


# --------------------------------------------------------------------------------------------------- embedding bag
def reference_embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                            per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
    """torch's embedding_bag (sum, include_last_offset=True) on float64 weight and sample weights."""
    return torch.nn.functional.embedding_bag(
        indices.long(), weight.detach().double(), offsets.long(), mode="sum", include_last_offset=True,
        per_sample_weights=None if per_sample_weights is None else per_sample_weights.detach().double())


def reference_embedding_bag_grad(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                                 grad_out: torch.Tensor,
                                 per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
    """d(<out, grad_out>)/d weight in float64, through torch's autograd."""
    w = weight.detach().double().requires_grad_(True)
    psw = None if per_sample_weights is None else per_sample_weights.detach().double()
    out = torch.nn.functional.embedding_bag(indices.long(), w, offsets.long(), mode="sum", include_last_offset=True,
                                            per_sample_weights=psw)
    (grad,) = torch.autograd.grad(out, w, grad_out.double())
    return grad


# ------------------------------------------------------------------------------------------------ row-wise Adagrad
def reference_rowwise_adagrad(weight: torch.Tensor, acc: torch.Tensor, grad_out: torch.Tensor,
                              indices: torch.Tensor, offsets: torch.Tensor, lr: float, eps: float = 1e-8
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(updated weight, updated acc) in float64 the straightforward way: the sparse gradient through torch's
    autograd, ``coalesce``, then the row-wise update of the coalesced rows."""
    w = weight.detach().double().requires_grad_(True)
    out = F.embedding_bag(indices.long(), w, offsets.long(), mode="sum", include_last_offset=True, sparse=True)
    (grad,) = torch.autograd.grad(out, w, grad_out.double())
    grad = grad.coalesce()
    rows, values = grad.indices()[0], grad.values()  # [U], [U, D]
    new_acc = acc.double().clone()
    new_acc[rows] += values.square().mean(1)
    new_weight = weight.detach().double().clone()
    new_weight[rows] -= lr * values / (new_acc[rows].sqrt() + eps).unsqueeze(1)
    return new_weight, new_acc
