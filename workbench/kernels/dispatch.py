"""The GEMM front door: the only module that imports all three GEMM backends (``gemm.py``, ``gemm_tma.py``,
``gemm_gluon.py``). Two entry points each for bf16/fp16/fp32 and fp8:

    from workbench.kernels import dispatch
    c = dispatch.triton_matmul(a, b, config=None)          # our Triton GEMMs: gemm.py, TMA (or Gluon for fp8)
    c = dispatch.triton_scaled_matmul(a8, b8, scale_a, scale_b)
    c = dispatch.matmul(a, b)                              # the per-vendor shim: triton_matmul or torch.matmul
    c = dispatch.scaled_matmul(a8, b8, scale_a, scale_b)   # ... or torch._scaled_mm

**The Triton route** (``triton_matmul``, ``triton_scaled_matmul``) checks the inputs (``checks``) and picks the
kernel: a config's ``KERNEL`` key ("tma": Hopper's persistent TMA GEMM, "gluon": the Gluon fp8 GEMM, none: gemm.py),
or for ``config=None`` the selector's pick (``workbench.select``): among all three for fp8 on Hopper when the
operands suit TMA (Gluon only where it runs), and between gemm.py and TMA for bf16/fp16 without bias or activation
(the TMA kernel serves B column-major, the dgrad layout, where gemm.py's per-thread loads are slow). Checks, config
and route are cached per distinct call.

**The per-vendor shim** (issue 20; ``matmul``, ``scaled_matmul``) runs each GEMM on the Triton route or on the
vendor library, whichever is predicted faster for its shape, dtype and GPU. Triton means the Triton route with
config=None. The vendor library is what torch calls on the GPU: cuBLAS / cuBLASLt on NVIDIA, hipBLASLt on ROCm
builds, through ``torch.matmul``, ``torch.addmm`` (+ the activation) and ``torch._scaled_mm``.

The rule, ``gemm_choice``, is a pure function of (m, n, k, dtype, GPU, layout, accumulation), cached:
``workbench.select.vendor_choice`` prices the selector's best Triton config (its fitted selection profile,
``specs/calibration/<gpu>-select.yaml``) against the vendor-library model of ``workbench.perf.gemm`` (calibrated
on the H200, ``specs/calibration/h200-sxm.yaml``; validated in benchmarks/results/h200/model_eval.md), each side
priced per call as max(GPU time, the host time of its path: ``workbench.select.host``), and takes
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
from workbench.kernels import gemm, gemm_gluon, gemm_tma
from workbench.kernels._common import (amd_arch, backend, check, device_name, frozen, interpreting, plan_cache,
                                       tensor_key)
from workbench.kernels.checks import check_epilogue, check_offsets, scale_kind
from workbench.kernels.spaces import is_gluon, is_tma, tma_config_space, tma_eligible
from workbench.perf.gemm import is_aligned
from workbench.select import ShimChoice, select_config, vendor_choice


# --------------------------------------------------------------------- the Triton route: gemm.py, TMA or Gluon
def triton_matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str = "none",
                  precision: str = "ieee", config: dict | None = None,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` for bf16, fp16 or fp32 a [M, K] and b [K, N] of any strides; returns [M, N] in
    ``out_dtype`` (default: the input dtype). ``precision`` ("ieee" or "tf32") applies to fp32 inputs.
    A row- or column-major operand whose rows are not 16-byte aligned is first copied into a padded buffer
    (``gemm.pad_unaligned``: one extra pass and that buffer's memory, for loads 2-5x faster).

    The checks, the config (``config=None``: the selector's pick), the kernel, padding, grid and constexprs are
    worked out once per distinct (shapes, strides, dtypes, devices, options, config) and cached (``_plan_matmul``);
    a repeated call costs a dictionary lookup, the output allocation and the launch."""
    try:
        key = (tensor_key(a), tensor_key(b), tensor_key(bias),
               activation, precision, out_dtype, frozen(config))
        route = _MATMUL_PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable option: the checks below say which
        key = route = None
    if route is None:
        route = _plan_matmul(a, b, bias, activation, precision, config, out_dtype)
        if key is not None:
            _MATMUL_PLANS.put(key, route)
    run, plan = route
    return run(plan, a, b, bias)


def triton_scaled_matmul(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                         bias: torch.Tensor | None = None, config: dict | None = None,
                         use_fast_accum: bool = False) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16, as ``torch._scaled_mm(..., out_dtype=bf16)``.

    Scales are fp32: one scalar each (per tensor), or scale_a [M] (or [M, 1]) per row of A and scale_b [N]
    (or [1, N]) per column of B. ``use_fast_accum`` as in ``_scaled_mm``: on sm_90 the fp8 tensor cores then
    accumulate the whole K in their reduced-precision accumulator; False adds each BLOCK_K partial into fp32.
    Cached per distinct call like ``triton_matmul``; the plan also says which kernel runs (gemm.py, TMA or Gluon).
    """
    try:
        key = (tensor_key(a_fp8), tensor_key(b_fp8), tensor_key(scale_a), tensor_key(scale_b), tensor_key(bias),
               bool(use_fast_accum), frozen(config))
        route = _SCALED_PLANS.get(key)
    except (AttributeError, TypeError):
        key = route = None
    if route is None:
        route = _plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum)
        if key is not None:
            _SCALED_PLANS.put(key, route)
    run, plan = route
    return run(plan, a_fp8, b_fp8, scale_a, scale_b, bias)


_MATMUL_PLANS = plan_cache()
"""Launch routes of ``triton_matmul``: key -> (run, plan), called as run(plan, a, b, bias)."""
_SCALED_PLANS = plan_cache()
"""Launch routes of ``triton_scaled_matmul``: key -> (run, plan), called as run(plan, a, b, scale_a, scale_b, bias)."""


def _plan_matmul(a, b, bias, activation, precision, config, out_dtype) -> tuple:
    """``triton_matmul``'s checks and route for these inputs (raises ``KernelInputError`` naming the argument)."""
    check_offsets(a, b, "a", "b")
    check(a.dtype in gemm.MATMUL_DTYPES, "a.dtype", a.dtype,
          f"one of {', '.join(map(str, gemm.MATMUL_DTYPES))} (fp8: use scaled_matmul)")
    check(b.dtype == a.dtype, "b.dtype", b.dtype, f"a's dtype {a.dtype}")
    check(precision in gemm.PRECISIONS, "precision", repr(precision), f"one of {gemm.PRECISIONS}")
    out_dtype = a.dtype if out_dtype is None else out_dtype
    check(out_dtype in gemm.MATMUL_DTYPES, "out_dtype", out_dtype,
          f"one of {', '.join(map(str, gemm.MATMUL_DTYPES))}")
    check_epilogue(a, b, bias, activation, "a")
    # fp32 takes the precision asked for; 16-bit inputs take the compiler default (the argument is ignored).
    input_precision = precision if a.dtype == torch.float32 else None
    if input_precision == "tf32" and backend() == "hip" and amd_arch(a.device) == "gfx950":
        input_precision = "bf16x3"  # CDNA4 dropped XF32; Triton emulates fp32 with three bf16 products
    check(not is_gluon(config), "config", "a Gluon config (KERNEL='gluon')",
          "a gemm.py or TMA config: the Gluon kernel is fp8-only (use scaled_matmul)")
    if is_tma(config):
        check(bias is None and activation == "none" and out_dtype == a.dtype, "config", "a TMA config (KERNEL='tma')",
              "a gemm.py config: the TMA kernel has no bias, activation or other output dtype for bf16/fp16")
        if a.dtype == torch.float32:  # tf32 only, B K-major (copied per call when it is not: as gemm.py does)
            check(input_precision == "tf32", "config", "a TMA config (KERNEL='tma') for fp32 IEEE inputs",
                  "precision='tf32' (the TMA kernel multiplies fp32 as tf32) or a gemm.py config")
            if b.stride(0) == 1:
                gemm_tma._plan_matmul(a, b, config, None, "tf32")  # its checks, now
            return _tma_tf32_matmul, config
        gemm_tma._plan_matmul(a, b, config, None)  # its checks, now (the call goes through its own cache)
        return _tma_matmul, config
    if config is None and bias is None and activation == "none" and out_dtype == a.dtype and \
            input_precision == "tf32" and _tma_tf32_takes(a, b):  # fp32 as tf32 on sm_90: TF32_TMA_CONFIG
        fallback = gemm.plan_gemm(a, b, out_dtype, None, input_precision=input_precision)
        return _tma_tf32_matmul_or_gemm, (TF32_TMA_CONFIG, fallback)
    if config is None and bias is None and activation == "none" and out_dtype == a.dtype and _tma_takes(a, b):
        picked = _default_config(a, b, backend(), tma=True)  # bf16/fp16 on Hopper: TMA configs ranked too
        if is_tma(picked):
            gemm_tma._plan_matmul(a, b, picked, None)  # its checks, now
            fallback = gemm.plan_gemm(a, b, out_dtype, None, input_precision=input_precision,
                                      upcast=interpreting() and a.dtype == torch.bfloat16)
            return _tma_matmul_or_gemm, (picked, fallback)
    return gemm.run, gemm.plan_gemm(a, b, out_dtype, config, bias=bias, activation=activation,
                                    input_precision=input_precision,
                                    upcast=interpreting() and a.dtype == torch.bfloat16)


def _plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum) -> tuple:
    """``triton_scaled_matmul``'s checks and route: gemm.py's launch, or the TMA / Gluon kernel's for their
    configs."""
    check_offsets(a_fp8, b_fp8, "a_fp8", "b_fp8")
    check(a_fp8.dtype in gemm.FP8_DTYPES, "a_fp8.dtype", a_fp8.dtype,
          f"one of {', '.join(map(str, gemm.FP8_DTYPES))}")
    check(b_fp8.dtype == a_fp8.dtype, "b_fp8.dtype", b_fp8.dtype, f"a_fp8's dtype {a_fp8.dtype}")
    (m, _), n = a_fp8.shape, b_fp8.shape[1]
    kinds = [scale_kind(scale, name, rows, (rows, 1) if name == "scale_a" else (1, rows), a_fp8)
             for scale, name, rows in ((scale_a, "scale_a", m), (scale_b, "scale_b", n))]
    check_epilogue(a_fp8, b_fp8, bias, "none", "a_fp8")
    accumulation = "fast" if use_fast_accum else "exact"
    config = _default_config(a_fp8, b_fp8, backend(), accumulation) if config is None else config
    if is_gluon(config):  # the selector's pick on Hopper when Gluon runs here (``spaces.gluon_eligible``)
        check(config.get("ACCUMULATION", accumulation) == accumulation, "config",
              f"a Gluon config for {config.get('ACCUMULATION')} accumulation",
              f"one for {accumulation} accumulation (use_fast_accum={use_fast_accum}): "
              f"spaces.gluon_config_space({accumulation!r})")
        # the route carries the Gluon plan (its checks, now): a call looks up this route and nothing else
        return _gluon_scaled_matmul, gemm_gluon._plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config,
                                                             bool(use_fast_accum), None)
    if is_tma(config):  # the selector's pick on Hopper for TMA-aligned operands (``spaces.tma_eligible``)
        # the route carries the TMA plan (its checks, now): a call looks up this route and nothing else
        return _tma_scaled_matmul, gemm_tma._plan_scaled(a_fp8, b_fp8, scale_a, scale_b, bias, config,
                                                         bool(use_fast_accum), None)
    return _gemm_scaled_matmul, gemm.plan_gemm(
        a_fp8, b_fp8, torch.bfloat16, config, bias=bias, upcast=interpreting(), scale_kinds=kinds,
        scale_copy=not (scale_a.is_contiguous() and scale_b.is_contiguous()), promote_every_block_k=not use_fast_accum)


def _default_config(a: torch.Tensor, b: torch.Tensor, kind: str, accumulation: str = "exact", *,
                    tma: bool | None = None, split_k: bool = True) -> dict:
    """``config=None``: ``gemm.default_config`` (the selector's pick, or the static default) with the kernels that
    run here ranked too: the Gluon kernel's configs only where it runs (``gemm_gluon.supported``: Triton with
    Gluon, an sm_90 GPU); ``tma``: whether the TMA kernel's configs are ranked (default: for fp8 only;
    ``_plan_matmul`` asks for bf16 and fp16 when ``_tma_takes`` the call)."""
    fp8 = a.dtype in gemm.FP8_DTYPES
    gluon = fp8 and kind != "interpreter" and _gluon_runs(a.device)
    return gemm.default_config(a, b, kind, accumulation, tma=fp8 if tma is None else tma, gluon=gluon,
                               split_k=split_k)


TMA_MIN_MACS = 2**32
"""config=None hands a bf16/fp16 GEMM to the TMA kernel only from this many multiply-adds (~14 us at 600 TFLOP/s):
below, the host time decides, and the TMA wrapper costs 20-30 us above a bare launch on the H200 against gemm.py's
10-15 (benchmarks/results/h200/kernels/host_overhead/host_overhead.md). A guess."""


def _tma_takes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether config=None may hand this bf16/fp16 call to ``gemm_tma.py``: it runs here and the operands' strides
    suit it (``spaces.tma_eligible``: A row-major, B row- or column-major, 16-byte aligned rows; base alignment is
    checked per call, ``_tma_matmul_or_gemm``)."""
    if a.dtype not in (torch.bfloat16, torch.float16) or backend() != "cuda" or interpreting():
        return False
    (m, k), n = a.shape, b.shape[1]
    if m * n * k < TMA_MIN_MACS or a.stride(1) != 1 or not (b.stride(1) == 1 or b.stride(0) == 1):
        return False
    layout = "nt" if b.stride(0) == 1 and b.stride(1) != 1 else "nn"
    rows = (a.stride(0), b.stride(1) if layout == "nt" else b.stride(0))
    if any(r * a.element_size() % 16 for r in rows) or not tma_eligible(m, n, k, layout, a.element_size()):
        return False
    return gemm_tma.supported(a.device)


TF32_TMA_CONFIG = next(c for c in tma_config_space(4, warp_specialize=False)
                       if (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"]) == (128, 256, 32, 3))
"""config=None's tf32 config on sm_90 (``tma 128x256x32 g8 w8 s3 sub2``): the TMA tf32 config with the best
geometric-mean ratio to cuBLAS over the fit half of benchmarks/kernels/tma_pricing_split.json; on its test half
0.974 of cuBLAS against gemm.py's static default's 0.837, ahead on all 3 shapes
(benchmarks/select/fit_tma_pricing.py over benchmarks/results/h200/kernels/skinny/sweep.csv)."""


def _tma_tf32_takes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether config=None may run this fp32-as-tf32 call on ``gemm_tma.py`` (TF32_TMA_CONFIG): an sm_90 GPU
    (the only one measured), at least TMA_MIN_MACS multiply-adds, A row-major, and K and N 16-byte aligned (B is
    copied K-major in the call unless it is: its rows are then K long)."""
    if a.dtype != torch.float32 or backend() != "cuda" or interpreting() or not gemm_tma.supported(a.device):
        return False
    if torch.cuda.get_device_capability(a.device) != (9, 0):
        return False
    (m, k), n = a.shape, b.shape[1]
    return (m * n * k >= TMA_MIN_MACS and a.stride(1) == 1 and a.stride(0) * 4 % 16 == 0
            and tma_eligible(m, n, k, "nt", 4) and n * 4 % 16 == 0)


def _tma_tf32_matmul_or_gemm(plan, a, b, bias=None):
    """config=None's tf32 route on sm_90: the TMA kernel, or gemm.py's tf32 default for a base that is not
    16-byte aligned (as ``_tma_matmul_or_gemm``)."""
    config, fallback = plan
    if (a.data_ptr() | b.data_ptr()) % 16:
        return gemm.run(fallback, a, b)
    return _tma_tf32_matmul(config, a, b)


def _gluon_runs(device: torch.device) -> bool:
    """Whether ``gemm_gluon.py`` runs on ``device``."""
    return gemm_gluon.supported(device)


# Routes: run(plan, a, b, bias) and run(plan, a_fp8, b_fp8, scale_a, scale_b, bias). The fp8 TMA and Gluon routes
# run the plan they carry (one plan lookup a call, this module's). The bf16/fp16 TMA route calls that module's public
# wrapper, looked up at each call (its own plan cache makes the second lookup cheap, ~2 us; tests replace the
# wrapper to watch the routing).
def _tma_matmul(config, a, b, bias=None):
    return gemm_tma.matmul_tma(a, b, config)


def _tma_tf32_matmul(config, a, b, bias=None):
    """An fp32 product on the TMA kernel in tf32: B copied K-major first unless it is (tf32 wgmma reads B only
    K-major; ``gemm._k_major_copies`` says why), the copy inside the call as gemm.py's tf32 path has it."""
    if b.stride(0) != 1:
        b = b.t().contiguous().t()  # [K, N] column-major
    return gemm_tma.matmul_tma(a, b, config, input_precision="tf32")


def _tma_matmul_or_gemm(plan, a, b, bias=None):
    """config=None's TMA pick for bf16/fp16: TMA needs 16-byte aligned bases, which a plan keyed on shapes and
    strides cannot promise (a view may start mid-row), so a misaligned call runs gemm.py's pick instead."""
    config, fallback = plan
    if (a.data_ptr() | b.data_ptr()) % 16:
        return gemm.run(fallback, a, b)
    return _tma_matmul(config, a, b)


def _gemm_scaled_matmul(plan, a_fp8, b_fp8, scale_a, scale_b, bias):
    return gemm.run(plan, a_fp8, b_fp8, bias, scale_a, scale_b)


def _tma_scaled_matmul(plan, a_fp8, b_fp8, scale_a, scale_b, bias):
    return gemm_tma._run(plan, a_fp8, b_fp8, bias, scale_a, scale_b, None)  # what scaled_matmul_tma runs


def _gluon_scaled_matmul(plan, a_fp8, b_fp8, scale_a, scale_b, bias):
    return gemm_gluon._run(plan, a_fp8, b_fp8, bias, scale_a, scale_b, None)  # what scaled_matmul_gluon runs


# ----------------------------------------------------------------------------------------- the per-vendor shim
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
    ``gluon``: whether the Gluon kernel runs here. Both sides are priced per call, max(GPU time, host time of the
    path) (``workbench.select.host``). Pure and cached (do not mutate the result's config)."""
    shape = {"m": m, "n": n, "k": k}
    if min(m, n, k) < 1:  # nothing to price: an empty product is the vendor's (or anyone's) no-op
        return ShimChoice("vendor", None, 0.0, 0.0, "empty")
    if not vendor_takes(m, n, k, dtype):
        best = select_config("gemm", shape, dtype, gpu, layout=layout, accumulation=accumulation, gluon=gluon,
                             host_bound=True)
        return ShimChoice("triton", best.config, best.call_s, math.inf, f"{best.source}, the vendor refuses it")
    choice = vendor_choice(shape, dtype, gpu, layout=layout, accumulation=accumulation, gluon=gluon, host_bound=True)
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


def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str = "none",
           precision: str = "ieee", out_dtype: torch.dtype | None = None, gpu: str | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` as ``triton_matmul`` (same arguments, same checks), on Triton or the vendor library per
    ``gemm_choice`` for the GPU the tensors are on (``gpu``: a catalog name to use its rule instead). The decision
    is cached per distinct call, so a repeated call costs two dictionary lookups over the kernel it runs."""
    try:
        key = (tensor_key(a), tensor_key(b), tensor_key(bias),
               activation, precision, out_dtype, gpu)
        route = _MATMUL_ROUTES.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable option: triton_matmul's checks say which
        key = route = None
    if route is None:
        route = _matmul_route(a, b, bias, activation, precision, out_dtype, gpu)
        if key is not None:
            _MATMUL_ROUTES.put(key, route)
    return route(a, b, bias)


def scaled_matmul(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                  bias: torch.Tensor | None = None, use_fast_accum: bool = False,
                  gpu: str | None = None) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16 as ``triton_scaled_matmul``, on Triton or
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
    gluon = fp8 and _gluon_runs(a.device)
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
    """Check the call (triton_matmul's checks) and pick its route: a function of (a, b, bias)."""
    _plan_matmul(a, b, bias, activation, precision, None, out_dtype)  # raises KernelInputError on bad input
    vendor_ok = a.dtype in GEMM_DTYPES and out_dtype in (None, a.dtype) and (bias is None or bias.dtype == a.dtype)
    _, outside_catalog = _rule_gpu(a, gpu)
    choice = choice_for(a, b, gpu=gpu)
    if vendor_ok and (outside_catalog or (choice is not None and choice.choice == "vendor")):
        return functools.partial(_vendor_matmul, activation=activation)
    return functools.partial(_triton_matmul, activation=activation, precision=precision, out_dtype=out_dtype)


def _triton_matmul(a, b, bias, *, activation, precision, out_dtype):
    return triton_matmul(a, b, bias=bias, activation=activation, precision=precision, out_dtype=out_dtype)


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
    """Check the call (triton_scaled_matmul's checks, config resolution included) and pick its route."""
    _plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, None, use_fast_accum)  # raises on bad input
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
    return triton_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias=bias, use_fast_accum=fast)


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
