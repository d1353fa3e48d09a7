"""Tiled GEMM: C[M, N] = act(A[M, K] @ B[K, N] (* scales) + bias[N]) in bf16, fp16, fp32 (IEEE or TF32) and fp8.

One kernel serves every dtype: each program owns one [BLOCK_M, BLOCK_N] tile of C, walks K in BLOCK_K steps
with an fp32 accumulator, and applies the epilogue (fp8 scales, bias, activation) before the single store.
Programs are ordered in groups of GROUP_M tile rows (the "grouped ordering" of Triton's matmul tutorial), so
consecutive programs share A row panels and B column panels in L2.

fp8 follows ``torch._scaled_mm``: ``out = (A_fp8 * scale_a) @ (B_fp8 * scale_b) + bias`` in bf16, with scales
either per tensor (scalars) or per row of A / per column of B.

A config with ``KERNEL="tma"`` runs Hopper's persistent TMA GEMM instead (``gemm_tma.py``), one with
``KERNEL="gluon"`` the Gluon fp8 GEMM (``gemm_gluon.py``); with ``config=None`` the selector picks among all of
them for fp8 on Hopper when the operands suit TMA (``workbench.select``; Gluon only where it runs), and between
gemm.py and TMA for bf16/fp16 without bias or activation (the TMA kernel serves B column-major, the dgrad layout,
where gemm.py's per-thread loads are slow).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from workbench.kernels._common import (BenchCase, KernelInputError, backend, check, check_device, device_name,
                                       frozen, interpreting, plan_cache, tensor_key)
from workbench.kernels.spaces import gemm_config_space as config_space
from workbench.kernels.spaces import is_gluon, is_tma
from workbench.kernels.spaces import tma_eligible as is_tma_eligible
from workbench.kernels.tiling import grouped_tile
from workbench.models import get_model
from workbench.select import config_for_device

ACTIVATIONS = ("none", "relu", "gelu", "silu")
"""Epilogue activations; gelu is the tanh approximation (``F.gelu(x, approximate="tanh")``)."""
PRECISIONS = ("ieee", "tf32")
"""fp32 matmul precision (``tl.dot`` input_precision); ignored for 16-bit and fp8 inputs."""
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
"""OCP e4m3 (NVIDIA sm_89+, AMD gfx950) and the MI300 (gfx942) e4m3fnuz variant."""
MATMUL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_AMD_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
_BLOCK_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K, M_LOAD, N_LOAD,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    SCALE_A: tl.constexpr, SCALE_B: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr, MAX_IMPRECISE_ACC: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DIV_M: tl.constexpr = 1, DIV_N: tl.constexpr = 1, DIV_K: tl.constexpr = 1,
    DIV_AM: tl.constexpr = 1, DIV_AK: tl.constexpr = 1, DIV_BK: tl.constexpr = 1, DIV_BN: tl.constexpr = 1,
    SPLIT_K: tl.constexpr = 1,
):
    """One program computes C[pid_m*BLOCK_M : +BLOCK_M, pid_n*BLOCK_N : +BLOCK_N].

    Per K step it loads an A tile [BLOCK_M, BLOCK_K] and a B tile [BLOCK_K, BLOCK_N] and accumulates their
    product into acc [BLOCK_M, BLOCK_N] (fp32). SCALE_A / SCALE_B are "none", "tensor" (one fp32 scalar) or
    "row" (scale_a [M], scale_b [N]). UPCAST turns the operand tiles into fp32 before the dot (the CPU
    interpreter's bf16 dot is wrong). EVEN_K (K % BLOCK_K == 0) drops the K masks.

    DIV_*: a power of two (2, 4 or 8) that divides M, N, K or a stride which Triton's own specialisation
    (divisible by 16) misses, 1 otherwise. Without the hint the compiler must assume such rows are unaligned:
    no vector loads, no cp.async pipeline, 2-6x slower (a K of 2008 in bf16). ``divisibility_hints`` sets them.

    SPLIT_K > 1 (split-K, for GEMMs with too few output tiles to fill the GPU: skinny M, small M x N): program
    (pid, pid_k) of the [tiles, SPLIT_K] grid walks only K slice pid_k (whole BLOCK_K steps, the last slice
    shorter or empty) and stores its fp32 partial tile, scales applied and the bias added by slice 0 only (both
    linear), into slab pid_k of c_ptr, an fp32 workspace [SPLIT_K, M, N]; ``_split_k_reduce_kernel`` sums the
    slabs in fp32 and casts. No activation (it is not linear): the wrapper refuses one.
    """
    tl.static_assert(SPLIT_K == 1 or ACTIVATION == "none", "split-K sums partial tiles: no activation")
    # Grouped ordering: program ids walk down GROUP_M tile rows before moving one tile column right.
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] rows of A and C
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] columns of B and C
    # Rows/columns past the edge wrap onto valid ones: the loads need no M/N mask, the store drops them.
    rows_safe = rows % M_LOAD
    cols_safe = cols % N_LOAD
    ks = tl.arange(0, BLOCK_K)
    # Hints where Triton's own specialisation misses them (see DIV_*): runs of DIV_M rows start at multiples of it.
    if DIV_M > 1:
        rows_safe = tl.max_contiguous(tl.multiple_of(rows_safe, [DIV_M]), [DIV_M])
    if DIV_N > 1:
        cols_safe = tl.max_contiguous(tl.multiple_of(cols_safe, [DIV_N]), [DIV_N])
    a_rows, a_ks = rows_safe * stride_am, ks * stride_ak  # [BLOCK_M], [BLOCK_K] element offsets into A
    b_ks, b_cols = ks * stride_bk, cols_safe * stride_bn  # [BLOCK_K], [BLOCK_N] element offsets into B
    if DIV_AM > 1:
        a_rows = tl.multiple_of(a_rows, [DIV_AM])
    if DIV_AK > 1:
        a_ks = tl.multiple_of(a_ks, [DIV_AK])
    if DIV_BK > 1:
        b_ks = tl.multiple_of(b_ks, [DIV_BK])
    if DIV_BN > 1:
        b_cols = tl.multiple_of(b_cols, [DIV_BN])
    a_ptrs = a_ptr + a_rows[:, None] + a_ks[None, :]  # [BLOCK_M, BLOCK_K]
    b_ptrs = b_ptr + b_ks[:, None] + b_cols[None, :]  # [BLOCK_K, BLOCK_N]

    k_end = K  # this program's K range: [k_start, k_end)
    if SPLIT_K > 1:
        pid_k = tl.program_id(1)
        k_per_slice = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K  # whole BLOCK_K steps per slice
        k_start = pid_k * k_per_slice
        k_end = tl.minimum(K, k_start + k_per_slice)  # <= k_start for an empty last slice: no steps
        a_ptrs += k_start * stride_ak
        b_ptrs += k_start * stride_bk
        k_end = tl.maximum(k_end - k_start, 0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(k_end, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = k_end - step * BLOCK_K
            if DIV_K > 1:
                k_left = tl.multiple_of(k_left, DIV_K)
            a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, max_num_imprecise_acc=MAX_IMPRECISE_ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # Epilogue on the fp32 tile, in torch._scaled_mm's order: scales, bias, then the activation.
    if SCALE_A == "tensor":
        acc = acc * tl.load(scale_a_ptr)
    elif SCALE_A == "row":
        acc = acc * tl.load(scale_a_ptr + rows % M)[:, None]
    if SCALE_B == "tensor":
        acc = acc * tl.load(scale_b_ptr)
    elif SCALE_B == "row":
        acc = acc * tl.load(scale_b_ptr + cols % N)[None, :]
    if HAS_BIAS:
        if SPLIT_K == 1:
            acc = acc + tl.load(bias_ptr + cols % N).to(tl.float32)[None, :]
        elif tl.program_id(1) == 0:  # the bias once, in slice 0's partial
            acc = acc + tl.load(bias_ptr + cols % N).to(tl.float32)[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":
        # 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): no tanh needed.
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn  # [BLOCK_M, BLOCK_N]
    if SPLIT_K > 1:  # slab pid_k of the fp32 workspace [SPLIT_K, M, N]
        c_ptrs += tl.program_id(1) * M * N
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _split_k_reduce_kernel(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """C[i] = sum over s of WS[s, i] in fp32, cast to C's dtype: the split-K partials [SPLIT_K, M*N] (contiguous)
    into C [M*N] (row-major [M, N])."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] elements of C
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


SPLIT_K_REDUCE_BLOCK = 1024
"""Elements of C per program of the split-K reduction (a streaming kernel: 4 warps, 8 fp32 per thread)."""
MAX_SPLIT_K = 16


def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str = "none",
           precision: str = "ieee", config: dict | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``act(a @ b + bias)`` for bf16, fp16 or fp32 a [M, K] and b [K, N] of any strides; returns [M, N] in
    ``out_dtype`` (default: the input dtype). ``precision`` ("ieee" or "tf32") applies to fp32 inputs.
    A row- or column-major operand whose rows are not 16-byte aligned is first copied into a padded buffer
    (``pad_unaligned``: one extra pass and that buffer's memory, for loads 2-5x faster).

    The checks, the config (``config=None``: the selector's pick), padding, grid and constexprs are worked out
    once per distinct (shapes, strides, dtypes, devices, options, config) and cached (``_GemmPlan``); a repeated
    call costs a dictionary lookup, the output allocation and the launch."""
    try:
        key = (tensor_key(a), tensor_key(b), tensor_key(bias),
               activation, precision, out_dtype, frozen(config))
        plan = _MATMUL_PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable option: the checks below say which
        key = plan = None
    if plan is None:
        plan = _plan_matmul(a, b, bias, activation, precision, config, out_dtype)
        if key is not None:
            _MATMUL_PLANS.put(key, plan)
    if plan.backend is not None:  # a TMA config: gemm_tma's wrapper (and its own plan cache)
        return plan.backend(plan.backend_plan, a, b)
    return _run(plan, a, b, bias, None, None)


def scaled_matmul(a_fp8: torch.Tensor, b_fp8: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                  bias: torch.Tensor | None = None, config: dict | None = None,
                  use_fast_accum: bool = False) -> torch.Tensor:
    """``(a_fp8 * scale_a) @ (b_fp8 * scale_b) + bias`` in bf16, as ``torch._scaled_mm(..., out_dtype=bf16)``.

    Scales are fp32: one scalar each (per tensor), or scale_a [M] (or [M, 1]) per row of A and scale_b [N]
    (or [1, N]) per column of B. ``use_fast_accum`` as in ``_scaled_mm``: on sm_90 the fp8 tensor cores then
    accumulate the whole K in their reduced-precision accumulator; False adds each BLOCK_K partial into fp32.
    Cached per distinct call like ``matmul``; the plan also says which kernel runs (gemm.py, TMA or Gluon).
    """
    try:
        key = (tensor_key(a_fp8), tensor_key(b_fp8), tensor_key(scale_a), tensor_key(scale_b), tensor_key(bias),
               bool(use_fast_accum), frozen(config))
        plan = _SCALED_PLANS.get(key)
    except (AttributeError, TypeError):
        key = plan = None
    if plan is None:
        plan = _plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum)
        if key is not None:
            _SCALED_PLANS.put(key, plan)
    if plan.backend is not None:  # a TMA or Gluon config: that kernel's wrapper (and its own plan cache)
        return plan.backend(plan.backend_plan, a_fp8, b_fp8, scale_a, scale_b, bias)
    return _run(plan, a_fp8, b_fp8, bias, scale_a, scale_b)


class _GemmPlan:
    """One gemm.py launch, minus the tensors: what ``_run`` needs besides them. ``backend`` is set instead when
    the config runs another kernel: one of the routes below, with ``backend_plan`` (the config, use_fast_accum)."""

    __slots__ = ("backend", "backend_plan", "out_shape", "out_dtype", "grid", "pad_a", "pad_b", "bias_copy",
                 "scale_copy", "scalars", "constexprs", "split_k", "reduce_grid")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))


def _run(plan: _GemmPlan, a, b, bias, scale_a, scale_b) -> torch.Tensor:
    """Allocate C [M, N] and launch one program per output tile (the per-call work of a cached plan)."""
    c = torch.empty(plan.out_shape, dtype=plan.out_dtype, device=a.device)  # c: [M, N] row-major
    if plan.grid is None:  # M or N is 0
        return c
    if plan.pad_a is not None:  # rows that are not 16-byte aligned would be loaded element by element
        a = _padded(a, *plan.pad_a)
    if plan.pad_b is not None:
        b = _padded(b, *plan.pad_b)
    if bias is None:
        bias = c
    elif plan.bias_copy:  # the kernel reads bias[N] with unit stride
        bias = bias.contiguous()
    if scale_a is None:
        scale_a = scale_b = c
    elif plan.scale_copy:  # a strided scale view: the kernel reads scale[i] at element i (a scalar at 0)
        scale_a, scale_b = scale_a.reshape(-1).contiguous(), scale_b.reshape(-1).contiguous()
    if plan.split_k:  # fp32 partials [SPLIT_K, M, N], summed and cast into c by a second launch
        (m, n), split = plan.out_shape, plan.split_k
        ws = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        _gemm_kernel[plan.grid](a, b, ws, bias, scale_a, scale_b, *plan.scalars, **plan.constexprs)
        _split_k_reduce_kernel[plan.reduce_grid](ws, c, m * n, SPLIT_K=split, BLOCK=SPLIT_K_REDUCE_BLOCK)
        return c
    _gemm_kernel[plan.grid](a, b, c, bias, scale_a, scale_b, *plan.scalars, **plan.constexprs)
    return c


# Routes of a TMA or Gluon config: that module's public wrapper, looked up at each call (its own plan cache
# makes the second lookup cheap, ~2 us; tests replace the wrapper to watch the routing).
def _tma_matmul(config, a, b):
    from workbench.kernels import gemm_tma  # imports this module

    return gemm_tma.matmul_tma(a, b, config)


def _tma_matmul_or_gemm(plan, a, b):
    """config=None's TMA pick for bf16/fp16: TMA needs 16-byte aligned bases, which a plan keyed on shapes and
    strides cannot promise (a view may start mid-row), so a misaligned call runs gemm.py's pick instead."""
    config, fallback = plan
    if (a.data_ptr() | b.data_ptr()) % 16:
        return _run(fallback, a, b, None, None, None)
    return _tma_matmul(config, a, b)


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
    if any(r * a.element_size() % 16 for r in rows) or not is_tma_eligible(m, n, k, layout, a.element_size()):
        return False
    return _tma_runs(a.device)


def _tma_runs(device: torch.device) -> bool:
    """Whether ``gemm_tma.py`` runs on ``device`` (imported here: it imports this module)."""
    from workbench.kernels import gemm_tma

    return gemm_tma.supported(device)


def _tma_scaled_matmul(plan, a_fp8, b_fp8, scale_a, scale_b, bias):
    from workbench.kernels import gemm_tma

    return gemm_tma.scaled_matmul_tma(a_fp8, b_fp8, scale_a, scale_b, bias, plan[0], use_fast_accum=plan[1])


def _gluon_scaled_matmul(plan, a_fp8, b_fp8, scale_a, scale_b, bias):
    from workbench.kernels import gemm_gluon  # imports this module

    return gemm_gluon.scaled_matmul_gluon(a_fp8, b_fp8, scale_a, scale_b, bias, plan[0], use_fast_accum=plan[1])


_MATMUL_PLANS = plan_cache()
_SCALED_PLANS = plan_cache()


def _plan_matmul(a, b, bias, activation, precision, config, out_dtype) -> _GemmPlan:
    """``matmul``'s checks and launch plan for these inputs (raises ``KernelInputError`` naming the argument)."""
    _check_operands(a, b, "a", "b")
    check(a.dtype in MATMUL_DTYPES, "a.dtype", a.dtype,
          f"one of {', '.join(map(str, MATMUL_DTYPES))} (fp8: use scaled_matmul)")
    check(b.dtype == a.dtype, "b.dtype", b.dtype, f"a's dtype {a.dtype}")
    check(precision in PRECISIONS, "precision", repr(precision), f"one of {PRECISIONS}")
    out_dtype = a.dtype if out_dtype is None else out_dtype
    check(out_dtype in MATMUL_DTYPES, "out_dtype", out_dtype, f"one of {', '.join(map(str, MATMUL_DTYPES))}")
    _check_epilogue(a, b, bias, activation, "a")
    # fp32 takes the precision asked for; 16-bit inputs take the compiler default (the argument is ignored).
    input_precision = precision if a.dtype == torch.float32 else None
    if input_precision == "tf32" and backend() == "hip" and _amd_arch(a.device) == "gfx950":
        input_precision = "bf16x3"  # CDNA4 dropped XF32; Triton emulates fp32 with three bf16 products
    check(not is_gluon(config), "config", "a Gluon config (KERNEL='gluon')",
          "a gemm.py or TMA config: the Gluon kernel is fp8-only (use scaled_matmul)")
    if is_tma(config):
        check(bias is None and activation == "none" and out_dtype == a.dtype, "config", "a TMA config (KERNEL='tma')",
              "a gemm.py config: the TMA kernel has no bias, activation or other output dtype for bf16/fp16")
        from workbench.kernels import gemm_tma  # imports this module
        gemm_tma._plan_matmul(a, b, config, None)  # its checks, now (the call goes through its own cache)
        return _GemmPlan(backend=_tma_matmul, backend_plan=config)
    if config is None and bias is None and activation == "none" and out_dtype == a.dtype and _tma_takes(a, b):
        picked = _default_config(a, b, backend(), tma=True)  # bf16/fp16 on Hopper: TMA configs ranked too
        if is_tma(picked):
            from workbench.kernels import gemm_tma  # imports this module

            gemm_tma._plan_matmul(a, b, picked, None)  # its checks, now
            fallback = _plan_gemm(a, b, out_dtype, None, input_precision=input_precision,
                                  upcast=interpreting() and a.dtype == torch.bfloat16)
            return _GemmPlan(backend=_tma_matmul_or_gemm, backend_plan=(picked, fallback))
    return _plan_gemm(a, b, out_dtype, config, bias=bias, activation=activation, input_precision=input_precision,
                      upcast=interpreting() and a.dtype == torch.bfloat16)


def _plan_scaled_matmul(a_fp8, b_fp8, scale_a, scale_b, bias, config, use_fast_accum) -> _GemmPlan:
    """``scaled_matmul``'s checks and launch plan, or the TMA / Gluon kernel's for their configs."""
    _check_operands(a_fp8, b_fp8, "a_fp8", "b_fp8")
    check(a_fp8.dtype in FP8_DTYPES, "a_fp8.dtype", a_fp8.dtype, f"one of {', '.join(map(str, FP8_DTYPES))}")
    check(b_fp8.dtype == a_fp8.dtype, "b_fp8.dtype", b_fp8.dtype, f"a_fp8's dtype {a_fp8.dtype}")
    (m, _), n = a_fp8.shape, b_fp8.shape[1]
    kinds = [_scale_kind(scale, name, rows, (rows, 1) if name == "scale_a" else (1, rows), a_fp8)
             for scale, name, rows in ((scale_a, "scale_a", m), (scale_b, "scale_b", n))]
    _check_epilogue(a_fp8, b_fp8, bias, "none", "a_fp8")
    accumulation = "fast" if use_fast_accum else "exact"
    config = _default_config(a_fp8, b_fp8, backend(), accumulation) if config is None else config
    if is_gluon(config):  # the selector's pick on Hopper when Gluon runs here (``spaces.gluon_eligible``)
        check(config.get("ACCUMULATION", accumulation) == accumulation, "config",
              f"a Gluon config for {config.get('ACCUMULATION')} accumulation",
              f"one for {accumulation} accumulation (use_fast_accum={use_fast_accum}): "
              f"spaces.gluon_config_space({accumulation!r})")
        return _GemmPlan(backend=_gluon_scaled_matmul, backend_plan=(config, bool(use_fast_accum)))
    if is_tma(config):  # the selector's pick on Hopper for TMA-aligned operands (``spaces.tma_eligible``)
        return _GemmPlan(backend=_tma_scaled_matmul, backend_plan=(config, bool(use_fast_accum)))
    return _plan_gemm(a_fp8, b_fp8, torch.bfloat16, config, bias=bias, upcast=interpreting(), scale_kinds=kinds,
                      scale_copy=not (scale_a.is_contiguous() and scale_b.is_contiguous()),
                      promote_every_block_k=not use_fast_accum)


def _check_operands(a, b, a_name: str, b_name: str) -> None:
    check_pair(a, b, a_name, b_name)
    for t, name in ((a, a_name), (b, b_name)):  # the kernel's offsets are int32
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
        check(last < 2**31, name, f"a view reaching element {last}", "fewer than 2**31 elements from its start")


def check_pair(a, b, a_name: str, b_name: str) -> None:
    """a [M, K] and b [K, N]: 2-D tensors that multiply, on one device."""
    for t, name in ((a, a_name), (b, b_name)):
        check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
        check(t.dim() == 2, name, f"a {t.dim()}-D tensor of shape {tuple(t.shape)}", "a 2-D tensor")
    check(a.shape[1] == b.shape[0], f"{b_name}.shape", tuple(b.shape),
          f"[K, N] with K = {a.shape[1]} ({a_name} is {tuple(a.shape)})")
    check_device(a, b, names=(a_name, b_name))


def _check_epilogue(a, b, bias, activation: str, a_name: str) -> None:
    check(activation in ACTIVATIONS, "activation", repr(activation), f"one of {ACTIVATIONS}")
    if bias is not None:
        n = b.shape[1]
        check(isinstance(bias, torch.Tensor) and bias.shape == (n,), "bias",
              tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__, f"a tensor of shape [{n}]")
        check(bias.dtype.is_floating_point, "bias.dtype", bias.dtype, "a floating-point dtype")
        check_device(a, bias, names=(a_name, "bias"))


def _scale_kind(scale, name: str, rows: int, column_shape: tuple[int, int], a) -> str:
    check(isinstance(scale, torch.Tensor), name, type(scale).__name__, "a torch.Tensor")
    check(scale.dtype == torch.float32, f"{name}.dtype", scale.dtype, "torch.float32")
    check_device(a, scale, names=("a_fp8", name))
    if scale.numel() == 1 and scale.dim() <= 1:
        return "tensor"
    check(tuple(scale.shape) in ((rows,), column_shape), f"{name}.shape", tuple(scale.shape),
          f"a scalar (per tensor), [{rows}] or {list(column_shape)} (per row)")
    return "row"


def _plan_gemm(a, b, out_dtype: torch.dtype, config: dict | None, *, bias=None, activation: str = "none",
               scale_kinds: list[str] | None = None, scale_copy: bool = False, input_precision: str | None = None,
               promote_every_block_k: bool = False, upcast: bool = False) -> _GemmPlan:
    """The launch of one program per output tile for checked inputs. scale_kinds: the two scales' kinds
    ("tensor" / "row") or None; promote_every_block_k: fp8 partial products leave the tensor cores' accumulator
    every BLOCK_K (sm_90)."""
    (m, k), n = a.shape, b.shape[1]
    plan = _GemmPlan(out_shape=(m, n), out_dtype=out_dtype)
    if m == 0 or n == 0:
        return plan
    pad_a, pad_b = _k_major_copies(a, b) if input_precision == "tf32" and backend() != "hip" else _padding(a, b)
    a_shape, a_stride = _padded_layout(a, pad_a)
    b_shape, b_stride = _padded_layout(b, pad_b)
    (m_load, k), n_load = a_shape, b_shape[1]
    meta, launch = _resolve_config(config, a, b, split_k=activation == "none")
    scale_a, scale_b = scale_kinds or ("none", "none")
    split = meta.pop("SPLIT_K", 1)
    plan.grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
    if split > 1:
        check(activation == "none", "config['SPLIT_K']", split,
              f"1 with activation={activation!r}: split-K sums partial tiles, so no activation in the epilogue")
        check(split * m * n < 2**31, "config['SPLIT_K']", split,
              f"a split whose workspace ({split} x {m} x {n} fp32) has fewer than 2**31 elements")
        plan.grid += (split,)
        plan.split_k = split
        plan.reduce_grid = (triton.cdiv(m * n, SPLIT_K_REDUCE_BLOCK),)
    plan.pad_a, plan.pad_b = pad_a, pad_b
    plan.bias_copy = bias is not None and not bias.is_contiguous()
    plan.scale_copy = scale_copy
    plan.scalars = (m, n, k, m_load, n_load, *a_stride, *b_stride, n, 1)  # c: [M, N] row-major
    plan.constexprs = dict(
        HAS_BIAS=bias is not None, ACTIVATION=activation, SCALE_A=scale_a, SCALE_B=scale_b,
        UPCAST=upcast, INPUT_PRECISION=input_precision,
        MAX_IMPRECISE_ACC=meta["BLOCK_K"] if promote_every_block_k else None,
        EVEN_K=k % meta["BLOCK_K"] == 0, **meta, **launch,
        **divisibility_hints(m_load, n_load, k, *a_stride, *b_stride), **({"SPLIT_K": split} if split > 1 else {}))
    return plan


def pad_unaligned(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) with every row- or column-major operand whose leading stride is not a multiple of 16 bytes copied
    into a buffer padded to one: its rows then get vector loads and the cp.async pipeline instead of element
    loads (2-5x slower on the H200). A padded K is zero in both operands, so the product is unchanged; padded
    rows of A (a column-major A) and columns of B (a row-major B) only reach output rows/columns that the kernel
    does not store (it wraps its loads over the padded M_LOAD x N_LOAD and masks its stores to M x N). The
    copies cost one pass over the operands; other strided views are left as they are."""
    pad_a, pad_b = _padding(a, b)
    return (a if pad_a is None else _padded(a, *pad_a)), (b if pad_b is None else _padded(b, *pad_b))


def _padding(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple | None, tuple | None]:
    """``pad_unaligned``'s decision from shapes and strides alone: (rows, cols, row_major) of each operand's
    padded buffer, or None where it is used as it is."""
    step = max(1, 16 // a.element_size())  # elements per 16 bytes

    def unaligned(stride: int) -> bool:
        return stride % step != 0

    a_rows, b_rows = a.stride(1) == 1, b.stride(1) == 1  # row-major (else column-major, if the other stride is 1)
    a_major, b_major = a_rows or a.stride(0) == 1, b_rows or b.stride(0) == 1
    pad_k = a_major and b_major and ((a_rows and unaligned(a.stride(0))) or (not b_rows and unaligned(b.stride(1))))
    pad_m = a_major and not a_rows and unaligned(a.stride(1))
    pad_n = b_major and b_rows and unaligned(b.stride(0))
    if not (pad_k or pad_m or pad_n):
        return None, None
    up = lambda size: -(-size // step) * step  # noqa: E731
    (m, k), n = a.shape, b.shape[1]
    k_to = up(k) if pad_k else k
    pad_a = (up(m) if pad_m else m, k_to, a_rows) if pad_k or pad_m else None
    pad_b = (k_to, up(n) if pad_n else n, b_rows) if pad_k or pad_n else None
    return pad_a, pad_b


def _padded_layout(t: torch.Tensor, pad: tuple | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """(shape, strides) of t as the kernel sees it: t's own, or those of its ``_padded`` copy."""
    if pad is None:
        return tuple(t.shape), t.stride()
    rows, cols, row_major = pad
    return (rows, cols), ((cols, 1) if row_major else (1, rows))


def _k_major_copies(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple | None, tuple | None]:
    """``_padding``'s decision for tf32 on NVIDIA: both operands K-major (A row-major, B column-major), K padded to
    16 bytes where it is not. Hopper's wgmma reads tf32 operands only K-major (PTX ISA, wgmma: the transpose
    flags are for 16-bit types), so Triton stages an N-major B into shared memory with 4-byte cp.async copies,
    one element each, where a K-major B takes 16-byte copies (64 of 80 copies 4-byte against 0 of 32 in the sm_90
    PTX of the 128x128x32 tile); that B ran 0.26 of cuBLAS (benchmarks/results/h200/kernels/kernels_quick.csv).
    A copy costs one pass over the operand (~4% of an 8192 x 4096 x 4096 GEMM)."""
    (m, k), n = a.shape, b.shape[1]
    k_to = -(-k // 4) * 4  # fp32: 4 elements per 16 bytes
    a_k_major = a.stride(1) == 1 and a.stride(0) % 4 == 0 and k_to == k
    b_k_major = b.stride(0) == 1 and b.stride(1) % 4 == 0 and k_to == k
    return (None if a_k_major else (m, k_to, True)), (None if b_k_major else (k_to, n, False))


def _padded(t: torch.Tensor, rows: int, cols: int, row_major: bool) -> torch.Tensor:
    """A [rows, cols] copy of t in its top-left corner, zero elsewhere, row-major or column-major as asked."""
    alloc = torch.empty if (rows, cols) == tuple(t.shape) else torch.zeros  # no padding: every element is copied
    out = (alloc((rows, cols), dtype=t.dtype, device=t.device) if row_major
           else alloc((cols, rows), dtype=t.dtype, device=t.device).t())
    out[: t.shape[0], : t.shape[1]].copy_(t)
    return out


def divisibility_hints(m: int, n: int, k: int, stride_am: int, stride_ak: int, stride_bk: int,
                       stride_bn: int) -> dict[str, int]:
    """The kernel's DIV_* arguments: for each size or stride, the power of two (2, 4 or 8) dividing it when
    Triton's specialisation (divisible by 16, or equal to 1) does not cover it, else 1 (no hint)."""
    def hint(value: int) -> int:
        if value % 16 == 0 or value == 1:
            return 1
        return min(8, value & -value)

    values = {"DIV_M": m, "DIV_N": n, "DIV_K": k, "DIV_AM": stride_am, "DIV_AK": stride_ak, "DIV_BK": stride_bk,
              "DIV_BN": stride_bn}
    return {name: hint(value) for name, value in values.items()}


def _resolve_config(config: dict | None, a: torch.Tensor, b: torch.Tensor, *,
                    split_k: bool = True) -> tuple[dict, dict]:
    """Split a config into kernel meta-parameters and launch options (AMD-only keys only on hip); ``split_k``:
    whether config=None may pick a split-K config."""
    kind = backend()
    if config is None:
        config = _default_config(a, b, kind, split_k=split_k)
    missing = [key for key in (*_BLOCK_KEYS, "num_warps", "num_stages") if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_BLOCK_KEYS} + num_warps, num_stages")
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = config[key]
        check(isinstance(value, int) and value >= 16 and value & (value - 1) == 0, f"config[{key!r}]", value,
              "a power of two >= 16 (tl.dot's smallest tile)")
    meta = {key: config[key] for key in _BLOCK_KEYS}
    split = config.get("SPLIT_K", 1)
    check(isinstance(split, int) and not isinstance(split, bool) and 1 <= split <= MAX_SPLIT_K,
          "config['SPLIT_K']", split, f"an integer from 1 to {MAX_SPLIT_K} (K slices per output tile)")
    if split > 1:
        meta["SPLIT_K"] = split
    launch = {key: config[key] for key in ("num_warps", "num_stages")}
    if kind == "hip":
        launch.update({key: config[key] for key in _AMD_KEYS if key in config})
    return meta, launch


_SELECTED_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8",
                    torch.float8_e4m3fnuz: "fp8"}


def _default_config(a: torch.Tensor, b: torch.Tensor, kind: str, accumulation: str = "exact", *,
                    tma: bool | None = None, split_k: bool = True) -> dict:
    """``config=None``: the zero-warmup selector's pick for this shape, layout and GPU (``workbench.select``, no
    benchmark, cached per shape); the static default of ``config_space`` when the GPU is not in the catalog, for
    fp32 inputs, or under the interpreter. fp8 picks are for ``accumulation`` ("exact" or "fast"); the Gluon
    kernel's configs are offered only where it runs (``gemm_gluon.supported``: Triton with Gluon, an sm_90 GPU).
    ``tma``: whether the TMA kernel's configs are ranked (default: for fp8 only; ``_plan_matmul`` asks for bf16
    and fp16 when ``_tma_takes`` the call); ``split_k``: whether split-K configs are ranked (not with an
    activation)."""
    dtype = _SELECTED_DTYPES.get(a.dtype)
    picked = None
    if kind != "interpreter" and dtype is not None:
        layout = ("t" if a.stride(1) != 1 else "n") + ("t" if b.stride(1) != 1 else "n")
        (m, k), n = a.shape, b.shape[1]
        gluon = dtype == "fp8" and _gluon_runs(a.device)
        tma = dtype == "fp8" if tma is None else tma
        picked = config_for_device("gemm", {"m": m, "n": n, "k": k}, dtype, device_name(a.device.index or 0),
                                   layout=layout, accumulation=accumulation, gluon=gluon, tma=tma,
                                   split_k=split_k)
    if picked is not None:
        return picked
    arch = _amd_arch(a.device) if kind == "hip" else "gfx942"
    return config_space(kind, arch=arch, dtype_bytes=a.element_size())[0]


def _gluon_runs(device: torch.device) -> bool:
    """Whether ``gemm_gluon.py`` runs on ``device`` (imported here: it imports this module)."""
    from workbench.kernels import gemm_gluon

    return gemm_gluon.supported(device)


def _amd_arch(device: torch.device) -> str:
    """'gfx942' (MI300X/MI325X) or 'gfx950' (MI350X/MI355X) from the device's gcnArchName."""
    return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]


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


DTYPE_BYTES = {"bf16": (2, 2), "fp16": (2, 2), "tf32": (4, 4), "fp32": (4, 4), "fp8": (1, 2)}
"""(operand, output) bytes per element; fp8 GEMMs write bf16."""
TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "tf32": 5e-3, "fp32": 1e-5, "fp8": 5e-2}
"""Accepted relative Frobenius error ||out - ref|| / ||ref|| against the float64 reference."""


def flops(m: int, n: int, k: int) -> float:
    """Multiply-adds of C = A @ B, two FLOPs each (the epilogue's M*N work is left out)."""
    return 2.0 * m * n * k


def bytes_moved(m: int, n: int, k: int, dtype: str) -> float:
    """A and B read once, C written once (the ideal HBM traffic; bias and scales are negligible)."""
    check(dtype in DTYPE_BYTES, "dtype", repr(dtype), f"one of {tuple(DTYPE_BYTES)}")
    operand, output = DTYPE_BYTES[dtype]
    return float((m * k + k * n) * operand + m * n * output)


TOKENS = 8192
"""Tokens per GEMM in the Llama cases: one 8k-token microbatch (e.g. 1 x 8192 or 2 x 4096)."""


def _llama_gemms(model_name: str) -> list[tuple[str, int, int]]:
    """(layer, N, K) of one Llama block's projections, derived from the model catalog."""
    model = get_model(model_name)
    hidden = model.hidden_size
    return [("qkv", model.q_size + 2 * model.kv_size, hidden), ("o", hidden, model.q_size),
            ("gate_up", 2 * model.ffn_hidden_size, hidden), ("down", hidden, model.ffn_hidden_size)]


def _case(name: str, dtype: str, m: int, n: int, k: int, make_inputs, run, baseline, reference,
          **extra) -> BenchCase:
    return BenchCase(op="gemm", name=f"{name} {m}x{n}x{k}", dtype=dtype,
                     row={"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}, make_inputs=make_inputs, run=run,
                     baseline=baseline, reference=reference, flops=flops(m, n, k), bytes=bytes_moved(m, n, k, dtype),
                     tolerance=TOLERANCE[dtype], extra=extra)


def _dense_inputs(m: int, n: int, k: int, dtype: torch.dtype, bias: bool = False):
    def make(device: str) -> tuple:
        a = torch.randn(m, k, device=device, dtype=dtype)  # a: [M, K] row-major
        b = torch.randn(k, n, device=device, dtype=dtype)  # b: [K, N] row-major
        return (a, b, torch.randn(n, device=device, dtype=dtype)) if bias else (a, b)
    return make


def _fp8_inputs(m: int, n: int, k: int):
    def make(device: str) -> tuple:
        fp8 = _fp8_dtype(device)
        a = torch.randn(m, k, device=device).to(fp8)  # a: [M, K] row-major
        b = torch.randn(n, k, device=device).to(fp8).t()  # b: [K, N] column-major, as _scaled_mm requires
        scale_a = torch.rand((), device=device) + 0.5  # per-tensor scales: fp32 scalars
        scale_b = torch.rand((), device=device) + 0.5
        return a, b, scale_a, scale_b
    return make


def _fp8_dtype(device: str) -> torch.dtype:
    """e4m3fn, except e4m3fnuz on MI300-class GPUs (gfx942), whose hardware and _scaled_mm take only that."""
    if torch.version.hip and _amd_arch(torch.device(device)) == "gfx942":
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def _torch_tf32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # cuBLAS may use TF32
    try:
        return torch.matmul(a, b)
    finally:
        torch.set_float32_matmul_precision(previous)


def _torch_addmm_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.addmm(bias, a, b))


def _torch_scaled_mm(a, b, scale_a, scale_b, use_fast_accum: bool = False) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=use_fast_accum)


def _matmul_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return matmul(a, b, bias=bias, activation="relu")


def _reference_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return reference_matmul(a, b, bias=bias, activation="relu")


def bench_cases(suite: str = "quick") -> list[BenchCase]:
    """quick: one case per kind (6); full: bf16 and fp8 on every Llama 3 8B/70B projection plus recsys, fp16
    and tf32 cases, fp8 with and without fast accumulation on both sides (29). Llama GEMMs are M = TOKENS rows of activations times the weight [K, N]."""
    check(suite in ("quick", "full"), "suite", repr(suite), "'quick' or 'full'")
    llama = {model: _llama_gemms(model) for model in ("llama3-8b", "llama3-70b")}
    shapes = {(model, layer): (n, k) for model, gemms in llama.items() for layer, n, k in gemms}
    m = TOKENS

    def dense(model, layer, dtype_name):
        n, k = shapes[model, layer]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype_name]
        run = functools.partial(matmul, precision="tf32") if dtype_name == "tf32" else matmul
        baseline = _torch_tf32_matmul if dtype_name == "tf32" else torch.matmul
        return _case(f"{model} {layer}", dtype_name, m, n, k, _dense_inputs(m, n, k, dtype), run, baseline,
                     reference_matmul, model=model, layer=layer)

    def fp8(model, layer, fast_accum=False):
        n, k = shapes[model, layer]
        run = functools.partial(scaled_matmul, use_fast_accum=fast_accum)
        baseline = functools.partial(_torch_scaled_mm, use_fast_accum=fast_accum)
        label = f"{model} {layer}{' fast-accum' if fast_accum else ''}"
        return _case(label, "fp8", m, n, k, _fp8_inputs(m, n, k), run, baseline, reference_scaled_matmul,
                     model=model, layer=layer, scaling="per-tensor", use_fast_accum=fast_accum)

    rm, rn, rk = 65536, 1024, 1024  # a DLRM-style top-MLP layer over a 64k batch
    recsys = _case("recsys mlp addmm+relu", "bf16", rm, rn, rk, _dense_inputs(rm, rn, rk, torch.bfloat16, bias=True),
                   _matmul_bias_relu, _torch_addmm_relu,
                   _reference_bias_relu, bias=True, activation="relu")
    if suite == "quick":
        return [dense("llama3-8b", "qkv", "bf16"), dense("llama3-70b", "down", "bf16"), recsys,
                dense("llama3-8b", "o", "fp16"), dense("llama3-8b", "o", "tf32"), fp8("llama3-8b", "gate_up")]
    return ([dense(model, layer, "bf16") for model, layer in shapes] + [recsys]
            + [dense("llama3-8b", layer, "fp16") for layer in ("qkv", "o")]
            + [dense("llama3-8b", layer, "tf32") for layer in ("o", "down")]
            + [fp8(model, layer) for model, layer in shapes]
            + [fp8(model, layer, fast_accum=True) for model, layer in shapes])


def shape_cases(shapes: list[dict]) -> list[BenchCase]:
    """Bench cases for user-chosen GEMMs: each a dict with m, n, k and dtype (bf16, fp16 or fp8), row-major
    A [m, k] @ B [k, n] against torch.matmul / torch._scaled_mm."""
    cases = []
    for i, shape in enumerate(shapes):
        check(isinstance(shape, dict), f"shapes[{i}]", type(shape).__name__, "a dict with m, n, k, dtype")
        m, n, k = (shape.get(key) for key in ("m", "n", "k"))
        dtype = shape.get("dtype", "bf16")
        check(all(isinstance(v, int) and v > 0 for v in (m, n, k)), f"shapes[{i}]", shape, "positive integers m, n, k")
        check(dtype in ("bf16", "fp16", "fp8"), f"shapes[{i}]['dtype']", repr(dtype), "'bf16', 'fp16' or 'fp8'")
        if dtype == "fp8":
            cases.append(_case("custom", "fp8", m, n, k, _fp8_inputs(m, n, k), scaled_matmul, _torch_scaled_mm,
                               reference_scaled_matmul, scaling="per-tensor"))
        else:
            torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
            cases.append(_case("custom", dtype, m, n, k, _dense_inputs(m, n, k, torch_dtype), matmul, torch.matmul,
                               reference_matmul))
    return cases
