"""Tiled GEMM: C[M, N] = act(A[M, K] @ B[K, N] (* scales) + bias[N]) in bf16, fp16, fp32 (IEEE or TF32) and fp8.

One kernel serves every dtype: each program owns one [BLOCK_M, BLOCK_N] tile of C, walks K in BLOCK_K steps
with an fp32 accumulator, and applies the epilogue (fp8 scales, bias, activation) before the single store.
Programs are ordered in groups of GROUP_M tile rows (the "grouped ordering" of Triton's matmul tutorial), so
consecutive programs share A row panels and B column panels in L2.

fp8 follows ``torch._scaled_mm``: ``out = (A_fp8 * scale_a) @ (B_fp8 * scale_b) + bias`` in bf16, with scales
either per tensor (scalars) or per row of A / per column of B.

This file is one of three GEMM backends (with ``gemm_tma.py`` and ``gemm_gluon.py``) and imports neither of the
others: it plans and launches its own kernel for inputs already checked (``plan_gemm``, ``run``). The public entry
points, with the input checks and the choice among the three kernels (a config's ``KERNEL`` key, or the
selector's pick for ``config=None``), are the front door's: ``dispatch.triton_matmul`` and
``dispatch.triton_scaled_matmul``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from workbench.kernels import crosscompile
from workbench.kernels._common import amd_arch, backend, check, device_name, launch_operands
from workbench.kernels._launch import KernelLaunch, pointers_aligned
from workbench.kernels._tiling import grouped_tile, is_power_of_two
from workbench.kernels.checks import ACTIVATIONS  # noqa: F401 - the epilogue's activations, re-exported
from workbench.kernels.reference import reference_matmul, reference_scaled_matmul  # noqa: F401 - re-exported
from workbench.kernels.spaces import gemm_config_space as config_space
from workbench.select import config_for_device

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
    SPLIT_K: tl.constexpr = 1, BIAS_PER_ROW: tl.constexpr = False,
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

    BIAS_PER_ROW: the bias runs along C's rows (bias [M]) instead of its columns: a swap-AB launch (``plan_gemm``)
    computes C^T = B^T A^T, so the caller's bias over N lands on this kernel's rows.
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
        if SPLIT_K == 1 or tl.program_id(1) == 0:  # split-K: the bias once, in slice 0's partial
            if BIAS_PER_ROW:
                acc = acc + tl.load(bias_ptr + rows % M).to(tl.float32)[:, None]
            else:
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


class GemmPlan:
    """One gemm.py launch, minus the tensors: what ``run`` needs besides them (``plan_gemm`` works it out). Its
    kernels' launches (``launch``, and ``reduce_launch`` for split-K) are ``_launch.KernelLaunch`` objects: after
    the first launch they call the compiled kernel's launcher directly, skipping ``JITFunction.run``."""

    __slots__ = ("out_shape", "out_dtype", "grid", "pad_a", "pad_b", "bias_copy",
                 "scale_copy", "scalars", "constexprs", "split_k", "reduce_grid", "swap_ab", "launch",
                 "reduce_launch")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))


def run(plan: GemmPlan, a, b, bias=None, scale_a=None, scale_b=None) -> torch.Tensor:
    """Allocate C [M, N] and launch one program per output tile (the per-call work of a cached plan)."""
    c = torch.empty(plan.out_shape, dtype=plan.out_dtype, device=a.device)  # c: [M, N] row-major
    if plan.grid is None:  # M or N is 0
        return c
    if plan.swap_ab:  # C^T = B^T A^T: the kernel's A is B^T [N, K], its B is A^T [K, M] (see plan_gemm)
        a, b, scale_a, scale_b = b.t(), a.t(), scale_b, scale_a
    if plan.pad_a is not None:  # rows that are not 16-byte aligned would be loaded element by element
        a = _padded(a, *plan.pad_a)
    if plan.pad_b is not None:
        b = _padded(b, *plan.pad_b)
    bias, scale_a, scale_b = launch_operands(plan, c, bias, scale_a, scale_b)
    # Triton specializes every pointer on its 16-byte alignment: a view may start mid-row (c is torch's: aligned)
    aligned = pointers_aligned(a, b, bias, scale_a, scale_b)
    if plan.split_k:  # fp32 partials [SPLIT_K, M, N], summed and cast into c by a second launch
        (m, n), split = plan.out_shape, plan.split_k
        ws = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        plan.launch(aligned, a, b, ws, bias, scale_a, scale_b)
        # the slabs use C's own addressing (transposed or not), so the reduction is element-wise over C's memory
        plan.reduce_launch(True, ws, c)
        return c
    plan.launch(aligned, a, b, c, bias, scale_a, scale_b)
    return c


def plan_gemm(a, b, out_dtype: torch.dtype, config: dict | None, *, bias=None, activation: str = "none",
              scale_kinds: list[str] | None = None, scale_copy: bool = False, input_precision: str | None = None,
              promote_every_block_k: bool = False, upcast: bool = False) -> GemmPlan:
    """The launch of one program per output tile for checked inputs (``dispatch`` checks them; ``config=None``:
    ``default_config``, gemm.py's configs only). scale_kinds: the two scales' kinds
    ("tensor" / "row") or None; promote_every_block_k: fp8 partial products leave the tensor cores' accumulator
    every BLOCK_K (sm_90).

    A config with ``SWAP_AB`` (the skinny family, ``spaces.skinny_config_space``) launches C^T = B^T A^T: the
    kernel's rows walk N and its columns M, so a GEMM with M <= 64 gets 64- or 128-row tiles along N and a 16- or
    32-wide tile along M instead of a 64-row tile that is mostly padding. C is written through transposed strides
    (the kernel's C [N, M] is C [M, N] row-major), the scales and the bias swap sides with the operands."""
    (m, k), n = a.shape, b.shape[1]
    plan = GemmPlan(out_shape=(m, n), out_dtype=out_dtype)
    if m == 0 or n == 0:
        return plan
    meta, launch = _resolve_config(config, a, b, split_k=activation == "none")
    plan.swap_ab = meta.pop("SWAP_AB", False)
    c_strides = (n, 1)  # c: [M, N] row-major
    scale_a, scale_b = scale_kinds or ("none", "none")
    if plan.swap_ab:  # the kernel's problem: C^T [N, M] = B^T [N, K] @ A^T [K, M]
        a, b, m, n = b.t(), a.t(), n, m
        c_strides, (scale_a, scale_b) = (1, m), (scale_b, scale_a)
    pad_a, pad_b = _k_major_copies(a, b) if input_precision == "tf32" and backend() != "hip" else _padding(a, b)
    a_shape, a_stride = _padded_layout(a, pad_a)
    b_shape, b_stride = _padded_layout(b, pad_b)
    (m_load, k), n_load = a_shape, b_shape[1]
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
    plan.scalars = (m, n, k, m_load, n_load, *a_stride, *b_stride, *c_strides)
    plan.constexprs = dict(
        HAS_BIAS=bias is not None, ACTIVATION=activation, SCALE_A=scale_a, SCALE_B=scale_b,
        UPCAST=upcast, INPUT_PRECISION=input_precision,
        MAX_IMPRECISE_ACC=meta["BLOCK_K"] if promote_every_block_k else None,
        EVEN_K=k % meta["BLOCK_K"] == 0, **meta, **launch,
        **divisibility_hints(m_load, n_load, k, *a_stride, *b_stride), **({"SPLIT_K": split} if split > 1 else {}),
        **({"BIAS_PER_ROW": True} if plan.swap_ab and bias is not None else {}))
    plan.launch = KernelLaunch(_gemm_kernel, plan.grid, plan.scalars, plan.constexprs)
    if plan.split_k:
        plan.reduce_launch = KernelLaunch(_split_k_reduce_kernel, plan.reduce_grid, (m * n,),
                                          dict(SPLIT_K=split, BLOCK=SPLIT_K_REDUCE_BLOCK))
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
        config = default_config(a, b, kind, split_k=split_k)
    missing = [key for key in (*_BLOCK_KEYS, "num_warps", "num_stages") if key not in config]
    check(not missing, "config", f"a dict without {missing}", f"keys {_BLOCK_KEYS} + num_warps, num_stages")
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        value = config[key]
        check(is_power_of_two(value, 16), f"config[{key!r}]", value, "a power of two >= 16 (tl.dot's smallest tile)")
    meta = {key: config[key] for key in _BLOCK_KEYS}
    split = config.get("SPLIT_K", 1)
    check(isinstance(split, int) and not isinstance(split, bool) and 1 <= split <= MAX_SPLIT_K,
          "config['SPLIT_K']", split, f"an integer from 1 to {MAX_SPLIT_K} (K slices per output tile)")
    if split > 1:
        meta["SPLIT_K"] = split
    swap = config.get("SWAP_AB", False)
    check(isinstance(swap, bool), "config['SWAP_AB']", swap, "True or False (launch C^T = B^T A^T)")
    if swap:
        meta["SWAP_AB"] = True
    launch = {key: config[key] for key in ("num_warps", "num_stages")}
    if kind == "hip":
        launch.update({key: config[key] for key in _AMD_KEYS if key in config})
    return meta, launch


SELECTED_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8",
                   torch.float8_e4m3fnuz: "fp8"}
"""Dtypes the selector ranks configs for (fp32 takes the static default)."""


def default_config(a: torch.Tensor, b: torch.Tensor, kind: str, accumulation: str = "exact", *,
                   tma: bool = False, gluon: bool = False, split_k: bool = True) -> dict:
    """``config=None``: the zero-warmup selector's pick for this shape, layout and GPU (``workbench.select``, no
    benchmark, cached per shape); the static default of ``config_space`` when the GPU is not in the catalog, for
    fp32 inputs, or under the interpreter. fp8 picks are for ``accumulation`` ("exact" or "fast"). ``tma`` /
    ``gluon``: whether the TMA / Gluon kernels' configs are ranked too (the front door says, ``dispatch``: it
    knows where they run); ``split_k``: whether split-K configs are ranked (not with an activation)."""
    dtype = SELECTED_DTYPES.get(a.dtype)
    picked = None
    if kind != "interpreter" and dtype is not None:
        layout = ("t" if a.stride(1) != 1 else "n") + ("t" if b.stride(1) != 1 else "n")
        (m, k), n = a.shape, b.shape[1]
        picked = config_for_device("gemm", {"m": m, "n": n, "k": k}, dtype, device_name(a.device.index or 0),
                                   layout=layout, accumulation=accumulation, gluon=gluon, tma=tma,
                                   split_k=split_k)
    if picked is not None:
        return picked
    arch = amd_arch(a.device) if kind == "hip" else "gfx942"
    return config_space(kind, arch=arch, dtype_bytes=a.element_size())[0]


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


# ---------------------------------------------------------------------------------------- cross-compilation
def crosscompile_source(config: dict, dtype: str, target: str) -> crosscompile.CompileSource:
    """What ``crosscompile.inspect_config("gemm", config, target, dtype)`` compiles: ``_gemm_kernel`` for
    row-major operands with every size and outer stride divisible by 16, as Triton specialises them at run time."""
    operand = crosscompile.triton_type(dtype, target)
    out = "bf16" if dtype == "fp8" else crosscompile.TRITON_DTYPES[dtype]
    signature = {"a_ptr": f"*{operand}", "b_ptr": f"*{operand}", "c_ptr": f"*{out}", "bias_ptr": f"*{out}",
                 "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32"}
    signature.update({name: "i32" for name in ("M", "N", "K", "M_LOAD", "N_LOAD", "stride_am", "stride_bk",
                                               "stride_cm")})
    scale = "tensor" if dtype == "fp8" else "none"
    precision = {"tf32": "tf32" if target != "gfx950" else "bf16x3", "fp32": "ieee"}.get(dtype)
    # Row-major operands: Triton specialises the unit inner strides to constants at run time, so do we here
    constexprs = dict(stride_ak=1, stride_bn=1, stride_cn=1, HAS_BIAS=False, ACTIVATION="none", SCALE_A=scale,
                      SCALE_B=scale, UPCAST=False, INPUT_PRECISION=precision, MAX_IMPRECISE_ACC=None, EVEN_K=True,
                      **dict.fromkeys(("DIV_M", "DIV_N", "DIV_K", "DIV_AM", "DIV_AK", "DIV_BK", "DIV_BN"), 1),
                      **{k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
                      SPLIT_K=config.get("SPLIT_K", 1), BIAS_PER_ROW=False)
    signature.update({name: "constexpr" for name in constexprs})
    signature = {name: signature[name] for name in _gemm_kernel.arg_names}  # the kernel's parameter order
    divisible = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "M_LOAD", "N_LOAD", "stride_am", "stride_bk", "stride_cm"]
    return crosscompile.CompileSource(_gemm_kernel, signature, constexprs, divisible)
