"""The per-vendor GEMM shim (issue 20): one front door that runs each GEMM on the project's Triton kernels or on
the vendor library, whichever is predicted faster for its shape, dtype and GPU.

    from workbench.kernels import dispatch
    c = dispatch.matmul(a, b)                              # bf16 / fp16: gemm.matmul or torch.matmul / addmm
    c = dispatch.scaled_matmul(a8, b8, scale_a, scale_b)   # fp8: gemm.scaled_matmul or torch._scaled_mm

Triton means ``gemm.matmul`` / ``gemm.scaled_matmul`` with config=None (gemm.py, the TMA or the Gluon kernel, as the
selector picks). The vendor library is what torch calls on the GPU: cuBLAS / cuBLASLt on NVIDIA, hipBLASLt on ROCm
builds, through ``torch.matmul``, ``torch.addmm`` (+ the activation) and ``torch._scaled_mm``.

The rule, ``gemm_choice``, is a pure function of (m, n, k, dtype, GPU, layout, accumulation), cached:
``workbench.select.vendor_choice`` prices the selector's best Triton config (its fitted selection profile,
``specs/calibration/<gpu>-select.yaml``) against the vendor-library model of ``workbench.perf.gemm`` (calibrated
on the H200, ``specs/calibration/h200-sxm.yaml``; validated in benchmarks/results/h200/model_eval.md) and takes
Triton only when it is predicted faster by ``workbench.select.VENDOR_MARGIN`` (10%, a guess) and every dimension is
at least ``TRITON_MIN_DIM`` (a guess) or the vendor's operands are unaligned. Shapes the vendor call refuses
(``vendor_takes``) go to Triton. Calibrate both guesses from a broad-shape run on the GPU: the report of
``benchmarks/kernels/broad_shapes.py`` lists the regret each margin and threshold would have had on the measured
times (its gemm.csv keeps both predictions next to both measurements).

Where the rule has nothing to go on it keeps the safe side: a GPU outside the catalog runs the vendor library;
fp32 inputs run Triton (the vendor's fp32 precision follows torch's global TF32 flags, which the shim cannot see
through ``precision``); CPU tensors under TRITON_INTERPRET=1 run Triton (``gpu=`` forces the rule of a catalog GPU).
"""

from __future__ import annotations

import functools
import math

import torch

from workbench.graph.ops import GemmShape
from workbench.kernels import gemm
from workbench.kernels._common import device_name, interpreting, plan_cache, tensor_key
from workbench.perf.gemm import is_aligned
from workbench.select import ShimChoice, select_config, vendor_choice

GEMM_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
"""Dtypes the rule prices for matmul (fp8 goes through scaled_matmul; fp32 always runs Triton, see above)."""
TRITON_MIN_DIM = 2048
"""Triton is taken only for GEMMs whose every dimension is at least this, unless the vendor's operands are not
16-byte aligned (its fallback kernels are 2-5x slower; gemm.py pads instead). A guess from issue 20's H200 run: the
Triton kernels matched cuBLAS on GEMMs with every dimension >= 2048 and fell to 0.1-0.6 of it below (skinny M <= 256,
DLRM's N, K <= 1024, small cubes), where the selector's predictions, fitted mostly on large shapes, are optimistic.
Calibrate it from a broad-shape run: the report lists the regret of each threshold on the measured times."""
VENDOR_FP8_MULTIPLE = 16
"""torch._scaled_mm on CUDA needs K and N multiples of 16 ("mat2 shape ... must be divisible by 16",
aten/src/ATen/native/cuda/ScaledBlas.cpp)."""


@functools.lru_cache(maxsize=4096)
def gemm_choice(m: int, n: int, k: int, dtype: str, gpu: str, layout: str = "nn", accumulation: str = "exact",
                gluon: bool = True) -> ShimChoice:
    """Triton or the vendor library for C[m, n] = A[m, k] @ B[k, n] in ``dtype`` ("bf16", "fp16" or "fp8") on the
    catalog GPU ``gpu``, A and B in ``layout`` (nn, nt, tn); ``accumulation``: fp8's ("exact" or "fast");
    ``gluon``: whether the Gluon kernel runs here. Pure and cached (do not mutate the result's config)."""
    shape = {"m": m, "n": n, "k": k}
    if min(m, n, k) < 1:  # nothing to price: an empty product is the vendor's (or anyone's) no-op
        return ShimChoice("vendor", None, 0.0, 0.0, "empty")
    if not vendor_takes(m, n, k, dtype):
        best = select_config("gemm", shape, dtype, gpu, layout=layout, accumulation=accumulation, gluon=gluon)
        return ShimChoice("triton", best.config, best.time_s, math.inf, f"{best.source}, the vendor refuses it")
    choice = vendor_choice(shape, dtype, gpu, layout=layout, accumulation=accumulation, gluon=gluon)
    if choice.choice == "triton" and min(m, n, k) < TRITON_MIN_DIM and is_aligned(GemmShape(m, n, k), dtype):
        return ShimChoice("vendor", None, choice.triton_s, choice.vendor_s, f"{choice.source}, below TRITON_MIN_DIM")
    return choice


def vendor_takes(m: int, n: int, k: int, dtype: str) -> bool:
    """Whether the vendor call accepts the shape: torch._scaled_mm needs K and N multiples of 16 (fp8);
    torch.matmul takes any."""
    return dtype != "fp8" or (k % VENDOR_FP8_MULTIPLE == 0 and n % VENDOR_FP8_MULTIPLE == 0)


@functools.lru_cache(maxsize=16)
def device_gpu(index: int) -> str | None:
    """The catalog name of local GPU ``index`` (``workbench.bench.match_catalog``), or None outside the catalog."""
    from workbench.bench import match_catalog

    gpu = match_catalog(device_name(index))
    return gpu.name if gpu is not None else None


def _layout(a: torch.Tensor, b: torch.Tensor) -> str:
    return ("t" if a.stride(1) != 1 else "n") + ("t" if b.stride(1) != 1 else "n")


# -------------------------------------------------------------------------------------------------- the front door
def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str = "none",
           precision: str = "ieee", out_dtype: torch.dtype | None = None, gpu: str | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` as ``gemm.matmul`` (same arguments, same checks), on Triton or the vendor library per
    ``gemm_choice`` for the GPU the tensors are on (``gpu``: a catalog name to use its rule instead). The decision
    is cached per distinct call, so a repeated call costs two dictionary lookups over the kernel it runs."""
    try:
        key = (tensor_key(a), tensor_key(b), tensor_key(bias),
               activation, precision, out_dtype, gpu)
        route = _MATMUL_ROUTES.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable option: gemm.matmul's checks say which
        key = route = None
    if route is None:
        route = _matmul_route(a, b, bias, activation, precision, out_dtype, gpu)
        if key is not None:
            _MATMUL_ROUTES.put(key, route)
    return route(a, b, bias)


def scaled_matmul(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                  bias: torch.Tensor | None = None, use_fast_accum: bool = False,
                  gpu: str | None = None) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16 as ``gemm.scaled_matmul``, on Triton or
    ``torch._scaled_mm`` per ``gemm_choice``."""
    try:
        key = (tensor_key(a_fp8), tensor_key(b_fp8), tensor_key(scale_a), tensor_key(scale_b), tensor_key(bias),
               bool(use_fast_accum), gpu)
        route = _SCALED_ROUTES.get(key)
    except (AttributeError, TypeError):
        key = route = None
    if route is None:
        route = _scaled_route(a_fp8, b_fp8, scale_a, scale_b, bias, use_fast_accum, gpu)
        if key is not None:
            _SCALED_ROUTES.put(key, route)
    return route(a_fp8, b_fp8, scale_a, scale_b, bias)


_MATMUL_ROUTES = plan_cache()
_SCALED_ROUTES = plan_cache()


def choice_for(a: torch.Tensor, b: torch.Tensor, *, fp8: bool = False, use_fast_accum: bool = False,
               gpu: str | None = None) -> ShimChoice | None:
    """The rule's decision for these operands, or None where no rule applies (CPU tensors without ``gpu``, a GPU
    outside the catalog, fp32)."""
    gpu, _ = _rule_gpu(a, gpu)
    dtype = "fp8" if fp8 else GEMM_DTYPES.get(a.dtype)
    if gpu is None or dtype is None:
        return None
    (m, k), n = a.shape, b.shape[1]
    gluon = fp8 and gemm._gluon_runs(a.device)
    return gemm_choice(m, n, k, dtype, gpu, _layout(a, b), "fast" if use_fast_accum else "exact", gluon)


def _rule_gpu(a: torch.Tensor, gpu: str | None) -> tuple[str | None, bool]:
    """(the catalog GPU whose rule applies, or None; whether that is because a's GPU is outside the catalog)."""
    if gpu is not None:
        return gpu, False
    if a.is_cuda and not interpreting():
        name = device_gpu(a.device.index or 0)
        return name, name is None
    return None, False  # CPU tensors (the interpreter): our kernels


def _matmul_route(a, b, bias, activation, precision, out_dtype, gpu):
    """Check the call (gemm.matmul's checks) and pick its route: a function of (a, b, bias)."""
    gemm._plan_matmul(a, b, bias, activation, precision, None, out_dtype)  # raises KernelInputError on bad input
    vendor_ok = a.dtype in GEMM_DTYPES and out_dtype in (None, a.dtype) and (bias is None or bias.dtype == a.dtype)
    _, outside_catalog = _rule_gpu(a, gpu)
    choice = choice_for(a, b, gpu=gpu)
    if vendor_ok and (outside_catalog or (choice is not None and choice.choice == "vendor")):
        return functools.partial(_vendor_matmul, activation=activation)
    return functools.partial(_triton_matmul, activation=activation, precision=precision, out_dtype=out_dtype)


def _triton_matmul(a, b, bias, *, activation, precision, out_dtype):
    return gemm.matmul(a, b, bias=bias, activation=activation, precision=precision, out_dtype=out_dtype)


def _vendor_matmul(a, b, bias, *, activation):
    out = torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b)  # cuBLAS / hipBLASLt
    if activation == "relu":
        return out.relu_()
    if activation == "gelu":
        return torch.nn.functional.gelu(out, approximate="tanh")
    if activation == "silu":
        return torch.nn.functional.silu(out, inplace=True)
    return out


def _scaled_route(a_fp8, b_fp8, scale_a, scale_b, bias, use_fast_accum, gpu):
    """Check the call (gemm.scaled_matmul's checks, config resolution included) and pick its route."""
    gemm._plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, None, use_fast_accum)  # raises on bad input
    (m, k), n = a_fp8.shape, b_fp8.shape[1]
    kinds = {"tensor" if s.numel() == 1 and s.dim() <= 1 else "row" for s in (scale_a, scale_b)}
    # _scaled_mm: both scales per tensor or both per row, A row-major, B column-major, a bf16 bias
    vendor_ok = (len(kinds) == 1 and a_fp8.stride(1) == 1 and b_fp8.stride(0) == 1
                 and vendor_takes(m, n, k, "fp8") and (bias is None or bias.dtype == torch.bfloat16))
    _, outside_catalog = _rule_gpu(a_fp8, gpu)
    choice = choice_for(a_fp8, b_fp8, fp8=True, use_fast_accum=use_fast_accum, gpu=gpu)
    if vendor_ok and (outside_catalog or (choice is not None and choice.choice == "vendor")):
        row = kinds == {"row"}
        return functools.partial(_vendor_scaled_matmul, fast=bool(use_fast_accum),
                                 reshape_a=(m, 1) if row and scale_a.dim() == 1 else None,
                                 reshape_b=(1, n) if row and scale_b.dim() == 1 else None)
    return functools.partial(_triton_scaled_matmul, fast=bool(use_fast_accum))


def _triton_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, *, fast):
    return gemm.scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias=bias, use_fast_accum=fast)


def _vendor_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, *, fast, reshape_a, reshape_b):
    # torch._scaled_mm takes row-wise scales as [M, 1] and [1, N] (ScaledBlas.cpp, is_rowwise_scaling)
    if reshape_a is not None:
        scale_a = scale_a.reshape(reshape_a)
    if reshape_b is not None:
        scale_b = scale_b.reshape(reshape_b)
    return torch._scaled_mm(a_fp8, b_fp8, scale_a, scale_b, bias=bias, out_dtype=torch.bfloat16,
                            use_fast_accum=fast)


def describe(choice: ShimChoice | None) -> str:
    """One line for logs and reports: the route and both predictions."""
    if choice is None:
        return "no rule (default route)"
    vendor = "refused" if math.isinf(choice.vendor_s) else f"{choice.vendor_s * 1e3:.4f} ms"
    return f"{choice.choice}: triton {choice.triton_s * 1e3:.4f} ms, vendor {vendor} predicted ({choice.source})"
