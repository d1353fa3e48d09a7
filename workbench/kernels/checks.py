"""Input validation of the kernel wrappers, apart from the kernels: every function raises ``KernelInputError``
naming the argument, what it got and what was expected (``_common.check``), and returns what the launch plan
needs from the check (a scale's kind, the softmax scale). The wrappers run these once per distinct call: their
launch plans are cached on shapes, strides, dtypes and devices (``_common.PlanCache``).

GEMM operands: ``check_pair`` (2-D, multiplying, one device), ``check_offsets`` (int32 element offsets),
``check_epilogue`` (activation, bias), ``scale_kind`` (fp8 scales); the TMA and Gluon kernels' layout rules:
``check_tma_operands``, ``check_fp8_tma_operands``, ``fp8_epilogue_kinds``. Attention: ``check_attention_inputs``,
``check_attention_grads``.
"""

from __future__ import annotations

import math

import torch

from workbench.kernels._common import check, check_device
from workbench.kernels._tiling import tma_aligned
from workbench.kernels.spaces import HEAD_DIMS

ACTIVATIONS = ("none", "relu", "gelu", "silu")
"""GEMM epilogue activations; gelu is the tanh approximation (``F.gelu(x, approximate="tanh")``)."""
TMA_FP8_DTYPES = (torch.float8_e4m3fn,)
"""OCP e4m3, the fp8 of sm_89+ tensor cores (gemm.py also takes MI300's e4m3fnuz, which NVIDIA has not)."""
ATTENTION_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


# ---------------------------------------------------------------------------------------------------- GEMM
def check_pair(a, b, a_name: str, b_name: str) -> None:
    """a [M, K] and b [K, N]: 2-D tensors that multiply, on one device."""
    for t, name in ((a, a_name), (b, b_name)):
        check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
        check(t.dim() == 2, name, f"a {t.dim()}-D tensor of shape {tuple(t.shape)}", "a 2-D tensor")
    check(a.shape[1] == b.shape[0], f"{b_name}.shape", tuple(b.shape),
          f"[K, N] with K = {a.shape[1]} ({a_name} is {tuple(a.shape)})")
    check_device(a, b, names=(a_name, b_name))


def check_offsets(a, b, a_name: str, b_name: str) -> None:
    """``check_pair``, and every element of both views within 2**31 of its start (gemm.py's offsets are int32)."""
    check_pair(a, b, a_name, b_name)
    for t, name in ((a, a_name), (b, b_name)):
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
        check(last < 2**31, name, f"a view reaching element {last}", "fewer than 2**31 elements from its start")


def check_bias(a, bias, n: int, a_name: str) -> None:
    """bias [N], floating point, on a's device."""
    check(isinstance(bias, torch.Tensor) and tuple(bias.shape) == (n,), "bias",
          tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__, f"a tensor of shape [{n}]")
    check(bias.dtype.is_floating_point, "bias.dtype", bias.dtype, "a floating-point dtype")
    check_device(a, bias, names=(a_name, "bias"))


def check_epilogue(a, b, bias, activation: str, a_name: str) -> None:
    """An activation of ``ACTIVATIONS`` and an optional bias [N]."""
    check(activation in ACTIVATIONS, "activation", repr(activation), f"one of {ACTIVATIONS}")
    if bias is not None:
        check_bias(a, bias, b.shape[1], a_name)


def scale_kind(scale, name: str, rows: int, column_shape: tuple[int, int], a) -> str:
    """An fp32 fp8 scale on a's device: "tensor" (one scalar) or "row" ([rows] or ``column_shape``)."""
    check(isinstance(scale, torch.Tensor), name, type(scale).__name__, "a torch.Tensor")
    check(scale.dtype == torch.float32, f"{name}.dtype", scale.dtype, "torch.float32")
    check_device(a, scale, names=("a_fp8", name))
    if scale.numel() == 1 and scale.dim() <= 1:
        return "tensor"
    check(tuple(scale.shape) in ((rows,), column_shape), f"{name}.shape", tuple(scale.shape),
          f"a scalar (per tensor), [{rows}] or {list(column_shape)} (per row)")
    return "row"


# ------------------------------------------------------------------------------------- TMA and Gluon layouts
def check_tma_operands(a, b, a_name: str, b_name: str, out) -> None:
    """What TMA can address (CUDA driver API, cuTensorMapEncodeTiled): A row-major, B row- or column-major,
    16-byte aligned rows and bases, C's rows (N x 2 bytes) 16-byte aligned; ``out`` a contiguous [M, N]."""
    check_pair(a, b, a_name, b_name)
    (m, k), n = a.shape, b.shape[1]
    size = a.element_size()
    fallback = "(dispatch.triton_matmul / dispatch.triton_scaled_matmul take any strides)"
    if m == 0 or n == 0 or k == 0:
        return
    check(a.stride(1) == 1 or k == 1, f"{a_name}.stride()", tuple(a.stride()),
          f"a row-major [M, K] (unit stride along K): TMA needs a unit inner stride {fallback}")
    check(tma_aligned(a.stride(0) * size) and tma_aligned(a.data_ptr()), a_name,
          f"row stride {a.stride(0) * size} bytes at address {a.data_ptr():#x}",
          f"16-byte aligned rows and base (K * {size} bytes a multiple of 16) for TMA {fallback}")
    if b.stride(0) == 1 and n > 1:  # column-major: TMA reads b.T [N, K], row-major
        outer, where = b.stride(1), "column"
    else:
        check(b.stride(1) == 1 or n == 1, f"{b_name}.stride()", tuple(b.stride()),
              f"row-major or column-major [K, N] for TMA {fallback}")
        outer, where = b.stride(0), "row"
    check(tma_aligned(outer * size) and tma_aligned(b.data_ptr()), b_name,
          f"{where} stride {outer * size} bytes at address {b.data_ptr():#x}",
          f"16-byte aligned {where}s and base for TMA {fallback}")
    check(tma_aligned(n * 2), "N", n, f"a multiple of 8: the output's rows ({n} x 2 bytes) must be 16-byte aligned "
          f"for the TMA store {fallback}")
    if out is not None:
        check(isinstance(out, torch.Tensor) and tuple(out.shape) == (m, n) and out.is_contiguous(), "out",
              tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__,
              f"a contiguous tensor of shape [{m}, {n}]")
        check_device(a, out, names=(a_name, "out"))
        check(tma_aligned(out.data_ptr()), "out", f"address {out.data_ptr():#x}", "16-byte aligned for TMA")


def check_fp8_tma_operands(a_fp8, b_fp8, out) -> None:
    """``check_tma_operands`` for fp8 e4m3 operands, B column-major (the layout fp8 wgmma and _scaled_mm take)."""
    check_tma_operands(a_fp8, b_fp8, "a_fp8", "b_fp8", out)
    check(a_fp8.dtype in TMA_FP8_DTYPES, "a_fp8.dtype", a_fp8.dtype,
          f"one of {', '.join(map(str, TMA_FP8_DTYPES))} (e4m3fnuz: dispatch.triton_scaled_matmul)")
    check(b_fp8.dtype == a_fp8.dtype, "b_fp8.dtype", b_fp8.dtype, f"a_fp8's dtype {a_fp8.dtype}")
    check(b_fp8.stride(0) == 1 or b_fp8.shape[0] == 1, "b_fp8", f"strides {tuple(b_fp8.stride())}",
          "column-major [K, N] (b = w.t() of a row-major w [N, K]), the layout fp8 wgmma and _scaled_mm take")


def fp8_epilogue_kinds(a_fp8, b_fp8, scale_a, scale_b, bias) -> tuple[str, str]:
    """The two scales' kinds (``scale_kind``: scale_a [M] or [M, 1], scale_b [N] or [1, N] per row) after
    checking them and an optional bias [N]."""
    (m, _), n = a_fp8.shape, b_fp8.shape[1]
    kind_a = scale_kind(scale_a, "scale_a", m, (m, 1), a_fp8)
    kind_b = scale_kind(scale_b, "scale_b", n, (1, n), a_fp8)
    if bias is not None:
        check_bias(a_fp8, bias, n, "a_fp8")
    return kind_a, kind_b


# ------------------------------------------------------------------------------------------------ attention
def check_attention_inputs(q, k, v, causal, scale) -> float:
    """q [B, Hq, S, D], k and v [B, Hkv, S, D] (Hq % Hkv == 0, D in HEAD_DIMS, one dtype and device), a bool
    ``causal``; returns the softmax scale (default 1/sqrt(D))."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
        check(t.dim() == 4, name, f"shape {tuple(t.shape)}", "a 4-D tensor [batch, heads, seq, head_dim]")
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    check(v.shape == k.shape, "v", f"shape {tuple(v.shape)}", f"k's shape {tuple(k.shape)}")
    check(k.shape[0] == b, "k", f"batch {k.shape[0]}", f"q's batch {b}")
    check(k.shape[2] == s, "k", f"seq {k.shape[2]}", f"q's seq {s} (self-attention)")
    check(k.shape[3] == d, "k", f"head_dim {k.shape[3]}", f"q's head_dim {d}")
    check(d in HEAD_DIMS, "q", f"head_dim {d}", f"one of {', '.join(map(str, HEAD_DIMS))}")
    check(min(b, hq, s, hkv) > 0, "q", f"shape {tuple(q.shape)} with k {tuple(k.shape)}", "no empty dimension")
    check(hq % hkv == 0, "k", f"{hkv} heads", f"a divisor of q's {hq} heads (grouped-query attention)")
    check(q.dtype in ATTENTION_DTYPES, "q", f"dtype {q.dtype}", "torch.bfloat16, torch.float16 or torch.float32")
    for name, t in (("k", k), ("v", v)):
        check(t.dtype == q.dtype, name, f"dtype {t.dtype}", f"q's dtype {q.dtype}")
    check_device(q, k, v, names=("q", "k", "v"))
    check(isinstance(causal, bool), "causal", repr(causal), "True or False")
    if scale is None:
        return d ** -0.5
    check(isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0, "scale", repr(scale),
          "a positive finite float, or None for 1/sqrt(head_dim)")
    return float(scale)


def check_attention_grads(q, do, o, lse) -> None:
    """The backward's extra inputs: do and o shaped and typed like q, lse a contiguous fp32 [B, Hq, S]."""
    for name, t in (("do", do), ("o", o)):
        check(isinstance(t, torch.Tensor) and t.shape == q.shape and t.dtype == q.dtype, name,
              f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__,
              f"q's shape {tuple(q.shape)} and dtype {q.dtype}")
    check(isinstance(lse, torch.Tensor) and lse.shape == q.shape[:3] and lse.dtype == torch.float32
          and lse.is_contiguous(), "lse", f"{tuple(lse.shape)} {lse.dtype}" if isinstance(lse, torch.Tensor)
          else type(lse).__name__, f"a contiguous fp32 tensor of shape {tuple(q.shape[:3])}")
    check_device(q, do, o, lse, names=("q", "do", "o", "lse"))
