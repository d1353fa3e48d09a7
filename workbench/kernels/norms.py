"""RMSNorm and LayerNorm over the last dimension, forward and backward, in Triton.

x [..., cols] is viewed as [rows, cols]; math is fp32 whatever the input dtype (bf16, fp16, fp32).

- forward: one program per ``ROWS_PER_PROGRAM`` rows; it writes y and the per-row fp32 statistics (rstd, and
  mean for LayerNorm) that the backward reuses.
- backward: a fixed number of programs (a few per SM) each walk a strided set of rows; dx is written per row,
  dweight (and dbias) are summed in fp32 registers per program into a [programs, cols] buffer that torch
  reduces afterwards (no atomics, deterministic).

Rows up to ``MAX_FWD_BLOCK_N`` (forward) / ``MAX_BWD_BLOCK_N`` (backward) columns sit in registers as one tile;
wider rows loop over column tiles (two or three passes over x, mostly from L2, instead of one).

RMSNorm: y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)      (Zhang & Sennrich 2019)
LayerNorm: y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var(x) + eps)       (Ba et al. 2016; biased var)
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from workbench.kernels._common import BenchCase, backend, check, check_device, needs_grad

Norm = Literal["rmsnorm", "layernorm"]
Pass = Literal["fwd", "bwd", "fwd_bwd"]

MAX_FWD_BLOCK_N = 16384
"""Widest row the forward holds in registers as one tile; wider rows loop over tiles of this many columns.
From `ptxas -v` on the sm_90a build with 16 warps (128 registers a thread): no spills up to 16K columns,
44-316 bytes at 32K, 2.4-4.2 KB at 64K."""
MAX_BWD_BLOCK_N = 8192
"""The same for the backward, which holds four to five tiles (x, dy, w, dweight, dbias): no spills at 8K,
0.6-1 KB of spills at 16K (same ptxas check)."""
BWD_PROGRAMS_PER_SM = 4
"""Backward programs per SM (guess: enough rows in flight to hide latency while keeping the dweight partial
buffer small; calibrate by sweeping 1..8 on the GPU)."""
INTERPRETER_BWD_PROGRAMS = 4
"""Backward programs under TRITON_INTERPRET (several, so the tests exercise the partial-sum reduction)."""
DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@triton.jit
def _norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, cols, x_row_stride, y_row_stride, eps,
                     LAYER_NORM: tl.constexpr, ONE_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                     ROWS_PER_PROGRAM: tl.constexpr):
    """Block: [ROWS_PER_PROGRAM, BLOCK_N] of x and y; [BLOCK_N] of w (and b).

    ONE_BLOCK (BLOCK_N >= cols): x is loaded once and kept in registers. Otherwise: one pass for the mean
    (LayerNorm), one for the sum of squares, one to write y. b_ptr and mean_ptr are unused for RMSNorm.
    """
    row = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)  # [R]
    row_mask = row < rows
    x_row = x_ptr + row[:, None] * x_row_stride  # [R, 1]
    y_row = y_ptr + row[:, None] * y_row_stride
    offs = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    if ONE_BLOCK:
        col_mask = offs < cols
        mask = row_mask[:, None] & col_mask[None, :]  # [R, BLOCK_N]
        x = tl.load(x_row + offs[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
        if LAYER_NORM:
            mean = tl.sum(x, axis=1) / cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / cols + eps)  # [R]
        w = tl.load(w_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
        y = xc * rstd[:, None] * w[None, :]
        if LAYER_NORM:
            y += tl.load(b_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_row + offs[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
        if LAYER_NORM:
            total = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            for start in range(0, cols, BLOCK_N):
                mask = row_mask[:, None] & (start + offs < cols)[None, :]
                total += tl.sum(tl.load(x_row + start + offs[None, :], mask=mask, other=0.0).to(tl.float32), axis=1)
            mean = total / cols
        squares = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
        for start in range(0, cols, BLOCK_N):
            mask = row_mask[:, None] & (start + offs < cols)[None, :]
            x = tl.load(x_row + start + offs[None, :], mask=mask, other=0.0).to(tl.float32)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            squares += tl.sum(xc * xc, axis=1)
        rstd = 1.0 / tl.sqrt(squares / cols + eps)
        for start in range(0, cols, BLOCK_N):
            col_mask = start + offs < cols
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_row + start + offs[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :]
            if LAYER_NORM:
                y += tl.load(b_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            tl.store(y_row + start + offs[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if LAYER_NORM:
        tl.store(mean_ptr + row, mean, mask=row_mask)
    tl.store(rstd_ptr + row, rstd, mask=row_mask)


@triton.jit
def _norm_bwd_kernel(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, db_partial_ptr,
                     rows, cols, x_row_stride, dy_row_stride, dx_row_stride,
                     LAYER_NORM: tl.constexpr, ONE_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr):
    """Block: [BLOCK_N] of one row of x, dy, dx; rows pid, pid + programs, ... run one after another.

    With xhat = (x - mean) * rstd and g = dy * w:
      dx = rstd * (g - xhat * mean(g * xhat) - mean(g))     (the mean(g) term only for LayerNorm)
      dw_partial[pid] = sum over this program's rows of dy * xhat;  db_partial[pid] = sum of dy.
    ONE_BLOCK keeps the partials in registers and stores them once (the buffers may start uninitialised);
    otherwise each column block adds into this program's partial row in memory (buffers start at zero).
    """
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    dw_row = dw_partial_ptr + pid.to(tl.int64) * cols
    db_row = db_partial_ptr + pid.to(tl.int64) * cols
    if ONE_BLOCK:
        col_mask = offs < cols
        w = tl.load(w_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK_N], tl.float32)
        db = tl.zeros([BLOCK_N], tl.float32)
        for row in range(pid.to(tl.int64), rows, programs):
            x = tl.load(x_ptr + row * x_row_stride + offs, mask=col_mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * dy_row_stride + offs, mask=col_mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row)
            mean = 0.0
            if LAYER_NORM:
                mean = tl.load(mean_ptr + row)
            xhat = tl.where(col_mask, (x - mean) * rstd, 0.0)
            g = dy * w
            dx = g - xhat * (tl.sum(g * xhat, axis=0) / cols)
            if LAYER_NORM:
                dx -= tl.sum(g, axis=0) / cols
                db += dy
            dw += dy * xhat
            tl.store(dx_ptr + row * dx_row_stride + offs, (dx * rstd).to(dx_ptr.dtype.element_ty), mask=col_mask)
        tl.store(dw_row + offs, dw, mask=col_mask)
        if LAYER_NORM:
            tl.store(db_row + offs, db, mask=col_mask)
    else:
        for row in range(pid.to(tl.int64), rows, programs):
            rstd = tl.load(rstd_ptr + row)
            mean = 0.0
            if LAYER_NORM:
                mean = tl.load(mean_ptr + row)
            sum_g_xhat = 0.0
            sum_g = 0.0
            for start in range(0, cols, BLOCK_N):
                col_mask = start + offs < cols
                x = tl.load(x_ptr + row * x_row_stride + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                g = dy * w
                sum_g_xhat += tl.sum(g * tl.where(col_mask, (x - mean) * rstd, 0.0), axis=0)
                sum_g += tl.sum(g, axis=0)
            for start in range(0, cols, BLOCK_N):
                col_mask = start + offs < cols
                x = tl.load(x_ptr + row * x_row_stride + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                xhat = tl.where(col_mask, (x - mean) * rstd, 0.0)
                dx = dy * w - xhat * (sum_g_xhat / cols)
                if LAYER_NORM:
                    dx -= sum_g / cols
                    db = tl.load(db_row + start + offs, mask=col_mask, other=0.0)
                    tl.store(db_row + start + offs, db + dy, mask=col_mask)
                dw = tl.load(dw_row + start + offs, mask=col_mask, other=0.0)
                tl.store(dw_row + start + offs, dw + dy * xhat, mask=col_mask)
                tl.store(dx_ptr + row * dx_row_stride + start + offs, (dx * rstd).to(dx_ptr.dtype.element_ty),
                         mask=col_mask)


# --------------------------------------------------------------------------- #
# Launch wrappers
# --------------------------------------------------------------------------- #

_CONFIG_KEYS = ("num_warps", "ROWS_PER_PROGRAM", "waves_per_eu", "BLOCK_N")


def _block_n(cols: int, config: dict, limit: int) -> int:
    """Column tile: config["BLOCK_N"] if given, else the row width rounded up to a power of two, up to limit."""
    return config.get("BLOCK_N") or min(triton.next_power_of_2(cols), limit)


def _resolve_config(config: dict | None, cols: int) -> dict:
    if config is None:
        return default_config(cols, backend())
    check(isinstance(config, dict), "config", type(config).__name__, "a dict from config_space() or None")
    unknown = sorted(set(config) - set(_CONFIG_KEYS))
    check(not unknown, "config", f"unknown keys {unknown}", f"keys among {', '.join(_CONFIG_KEYS)}")
    config = {**default_config(cols, backend()), **config}
    for key in ("num_warps", "ROWS_PER_PROGRAM", "BLOCK_N"):
        value = config.get(key)
        check(value is None or (isinstance(value, int) and value >= 1 and value & (value - 1) == 0),
              f"config[{key!r}]", value, "a power of two")
    return config


def _launch_options(config: dict) -> dict:
    options = {"num_warps": config["num_warps"]}
    if backend() == "hip":
        options["waves_per_eu"] = config.get("waves_per_eu", 0)
    return options


def _as_rows(t: torch.Tensor, cols: int) -> torch.Tensor:
    """[..., cols] -> [rows, cols] with unit column stride (a view where possible)."""
    t2 = t.reshape(-1, cols)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _backward_programs(rows: int, device: torch.device) -> int:
    if device.type == "cuda":
        programs = BWD_PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    else:
        programs = INTERPRETER_BWD_PROGRAMS
    return max(1, min(rows, programs))


def _norm_forward(x2, weight, bias, eps, config, layer_norm):
    # x2: [rows, cols] -> y: [rows, cols] (x dtype), mean/rstd: [rows] fp32
    rows, cols = x2.shape
    block_n = _block_n(cols, config, MAX_FWD_BLOCK_N)
    y = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x2.device)
    mean = torch.empty(rows if layer_norm else 0, dtype=torch.float32, device=x2.device)
    if rows == 0:
        return y, mean, rstd
    rows_per_program = config["ROWS_PER_PROGRAM"]
    _norm_fwd_kernel[(triton.cdiv(rows, rows_per_program),)](
        x2, weight, bias if layer_norm else weight, y, mean if layer_norm else rstd, rstd,
        rows, cols, x2.stride(0), y.stride(0), eps,
        LAYER_NORM=layer_norm, ONE_BLOCK=block_n >= cols, BLOCK_N=block_n, ROWS_PER_PROGRAM=rows_per_program,
        **_launch_options(config))
    return y, mean, rstd


def _norm_backward(dy2, x2, weight, mean, rstd, config, layer_norm):
    # dy2, x2: [rows, cols] -> dx [rows, cols], dweight [cols], dbias [cols] or None
    rows, cols = x2.shape
    block_n = _block_n(cols, config, MAX_BWD_BLOCK_N)
    one_block = block_n >= cols
    dx = torch.empty((rows, cols), dtype=x2.dtype, device=x2.device)
    programs = _backward_programs(rows, x2.device)
    new_partials = torch.empty if one_block else torch.zeros  # the loop path adds into them
    dw_partial = new_partials((programs, cols), dtype=torch.float32, device=x2.device)
    db_partial = new_partials((programs if layer_norm else 0, cols), dtype=torch.float32, device=x2.device)
    if rows > 0:
        _norm_bwd_kernel[(programs,)](
            x2, weight, dy2, mean if layer_norm else rstd, rstd, dx, dw_partial, db_partial if layer_norm else dw_partial,
            rows, cols, x2.stride(0), dy2.stride(0), dx.stride(0),
            LAYER_NORM=layer_norm, ONE_BLOCK=one_block, BLOCK_N=block_n, **_launch_options(config))
    else:  # no rows: zero gradients for the weights
        dw_partial.zero_()
        db_partial.zero_()
    dbias = db_partial.sum(0) if layer_norm else None
    return dx, dw_partial.sum(0), dbias


class _NormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, config, layer_norm):
        x2 = _as_rows(x, x.shape[-1])
        y, mean, rstd = _norm_forward(x2, weight, bias, eps, config, layer_norm)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.config, ctx.layer_norm, ctx.x_shape = config, layer_norm, x.shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        dx, dweight, dbias = _norm_backward(_as_rows(dy, x2.shape[1]), x2, weight, mean, rstd, ctx.config,
                                            ctx.layer_norm)
        dbias = None if dbias is None else dbias.to(ctx.bias_dtype)
        return dx.view(ctx.x_shape), dweight.to(weight.dtype), dbias, None, None, None


def _check_inputs(x, weight, bias, eps, layer_norm):
    check(isinstance(x, torch.Tensor), "x", type(x).__name__, "a torch.Tensor")
    check(x.dtype in DTYPES, "x", f"dtype {x.dtype}", "bfloat16, float16 or float32")
    check(x.dim() >= 1 and x.shape[-1] >= 1, "x", f"shape {tuple(x.shape)}", "[..., cols] with cols >= 1")
    cols = x.shape[-1]
    params = {"weight": weight, **({"bias": bias} if layer_norm else {})}
    for name, t in params.items():
        check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
        check(t.dtype in DTYPES, name, f"dtype {t.dtype}", "bfloat16, float16 or float32")
        check(tuple(t.shape) == (cols,), name, f"shape {tuple(t.shape)}", f"({cols},), the last dimension of x")
    check(isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 <= eps < float("inf"), "eps", eps,
          "a finite number >= 0")
    check_device(x, *params.values(), names=("x", *params))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5, config: dict | None = None) -> torch.Tensor:
    """RMSNorm of x [..., cols] with weight [cols]; differentiable in x and weight. Output in x's dtype."""
    _check_inputs(x, weight, None, eps, layer_norm=False)
    config = _resolve_config(config, x.shape[-1])
    if not needs_grad(x, weight):
        return _forward_only(x, weight.contiguous(), None, float(eps), config, False)
    return _NormFunction.apply(x, weight.contiguous(), None, float(eps), config, False)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               config: dict | None = None) -> torch.Tensor:
    """LayerNorm of x [..., cols] with weight and bias [cols]; differentiable in all three. Output in x's dtype."""
    _check_inputs(x, weight, bias, eps, layer_norm=True)
    config = _resolve_config(config, x.shape[-1])
    if not needs_grad(x, weight, bias):
        return _forward_only(x, weight.contiguous(), bias.contiguous(), float(eps), config, True)
    return _NormFunction.apply(x, weight.contiguous(), bias.contiguous(), float(eps), config, True)


def _forward_only(x, weight, bias, eps, config, layer_norm) -> torch.Tensor:
    """``_NormFunction``'s forward without autograd's bookkeeping (~25 us of host time per call)."""
    y, _, _ = _norm_forward(_as_rows(x, x.shape[-1]), weight, bias, eps, config, layer_norm)
    return y.view(x.shape)


# --------------------------------------------------------------------------- #
# References (float64)
# --------------------------------------------------------------------------- #

def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """F.rms_norm in float64 (differentiable: upcast leaves that require grad keep their graph)."""
    return F.rms_norm(x.double(), (x.shape[-1],), weight.double(), eps=eps)


def reference_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """F.layer_norm in float64."""
    return F.layer_norm(x.double(), (x.shape[-1],), weight.double(), bias.double(), eps=eps)


# --------------------------------------------------------------------------- #
# Config space
# --------------------------------------------------------------------------- #

def config_space(backend: str) -> list[dict]:
    """num_warps x ROWS_PER_PROGRAM; on AMD (hip) also waves_per_eu (0 = no occupancy hint)."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    space = [{"num_warps": w, "ROWS_PER_PROGRAM": r} for r in (1, 2, 4) for w in (1, 2, 4, 8, 16)]
    if backend == "hip":
        space = [{**c, "waves_per_eu": waves} for c in space for waves in (0, 1, 2)]
    return space


def default_config(cols: int, backend: str) -> dict:
    """An entry of config_space(backend) chosen from the row width: wider rows get more warps, narrow rows
    share a program. Guess: about 16 fp32 values of the tile per thread (lanes: 64 per wavefront on AMD, 32 per
    warp on NVIDIA) and a tile of at least ~1K elements; calibrate with a sweep over config_space."""
    block_n = min(triton.next_power_of_2(cols), MAX_FWD_BLOCK_N)
    rows_per_program = 4 if block_n <= 256 else 2 if block_n <= 1024 else 1
    lanes = 64 if backend == "hip" else 32
    num_warps = min(16, max(1, rows_per_program * block_n // (16 * lanes)))
    config = {"num_warps": num_warps, "ROWS_PER_PROGRAM": rows_per_program}
    return {**config, "waves_per_eu": 0} if backend == "hip" else config


# --------------------------------------------------------------------------- #
# FLOP and byte counts
# --------------------------------------------------------------------------- #

# Operations per element, counted from the kernel bodies above (fwd: square-accumulate, scale, weight (+ centre,
# bias); bwd: xhat, g, two reductions, dx, dweight (+ dbias)).
_FLOPS_PER_ELEMENT = {("rmsnorm", "fwd"): 4, ("layernorm", "fwd"): 7, ("rmsnorm", "bwd"): 9, ("layernorm", "bwd"): 13}


def flops(norm: Norm, rows: int, cols: int, pass_: Pass = "fwd") -> float:
    """FLOPs on x [rows, cols] (a memory-bound op: these only place the point on the roofline)."""
    phases = ("fwd", "bwd") if pass_ == "fwd_bwd" else (pass_,)
    return float(sum(_FLOPS_PER_ELEMENT[(norm, phase)] for phase in phases) * rows * cols)


def bytes_moved(norm: Norm, rows: int, cols: int, dtype: str, pass_: Pass = "fwd") -> float:
    """Minimal DRAM traffic in dtype: fwd reads x, weight (and bias), writes y and the fp32 row statistics; bwd
    reads x, dy, weight and the statistics, writes dx, dweight (and dbias). The fp32 partial sums, a few hundred
    rows, are not counted."""
    a = ELEMENT_BYTES[dtype]
    params = (2 if norm == "layernorm" else 1) * cols * a  # weight (+ bias), or their gradients
    stats = (2 if norm == "layernorm" else 1) * rows * 4  # rstd (+ mean) in fp32
    fwd = 2 * rows * cols * a + params + stats
    bwd = 3 * rows * cols * a + cols * a + stats + params
    return float({"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}[pass_])


# --------------------------------------------------------------------------- #
# Benchmark cases
# --------------------------------------------------------------------------- #

TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}
TOLERANCE = {"bf16": 2e-2, "fp16": 2e-2, "fp32": 1e-5}
BENCH_SHAPES = {"quick": [(16384, 4096)], "full": [(16384, 4096), (8192, 8192), (32768, 8192)]}


def _fwd_bwd(norm_fn, *inputs_and_dy):
    """Forward, then the whole backward with a given dy (dx and the weight gradients, through autograd.grad so
    repeated runs do not accumulate into .grad); returns dx, the output the benchmark checks."""
    *inputs, dy = inputs_and_dy
    return torch.autograd.grad(norm_fn(*inputs), inputs, dy)[0]


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The vendor baseline: F.rms_norm over the last dimension."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps=eps)


def torch_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The vendor baseline: F.layer_norm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=eps)


# norm -> (ours, vendor baseline, float64 reference), all with the same default eps (1e-5, as Llama).
_FUNCTIONS = {"rmsnorm": (rms_norm, torch_rms_norm, reference_rms_norm),
              "layernorm": (layer_norm, torch_layer_norm, reference_layer_norm)}


def make_bench_case(norm: Norm, rows: int, cols: int, dtype: str = "bf16", fwd_bwd: bool = False) -> BenchCase:
    """One point. Forward: inputs (x, weight[, bias]), output y. fwd+bwd: inputs (x, weight[, bias], dy) with x
    and the weights requiring grad; run/baseline/reference compute every gradient and return dx (the unit tests
    check dweight and dbias)."""
    layer = norm == "layernorm"
    torch_dtype = TORCH_DTYPES[dtype]
    ours, vendor, ref = _FUNCTIONS[norm]

    def make_inputs(device: str) -> tuple:
        x = torch.randn(rows, cols, dtype=torch_dtype, device=device)
        params = [torch.randn(cols, dtype=torch_dtype, device=device) for _ in range(2 if layer else 1)]
        if not fwd_bwd:
            return (x, *params)
        leaves = [t.requires_grad_(True) for t in (x, *params)]
        return (*leaves, torch.randn(rows, cols, dtype=torch_dtype, device=device))

    def reference(*inputs):
        if not fwd_bwd:
            return ref(*inputs)
        *tensors, dy = inputs
        leaves = [t.detach().double().requires_grad_(True) for t in tensors]
        return _fwd_bwd(ref, *leaves, dy.double())

    pass_ = "fwd_bwd" if fwd_bwd else "fwd"
    return BenchCase(
        op=f"{norm}_fwd_bwd" if fwd_bwd else norm,
        name=f"{norm} {'fwd+bwd' if fwd_bwd else 'fwd'} {rows}x{cols}",
        dtype=dtype,
        row={"op": f"{norm}_fwd_bwd" if fwd_bwd else norm, "rows": rows, "cols": cols, "dtype": dtype},
        make_inputs=make_inputs,
        run=(lambda *inputs: _fwd_bwd(ours, *inputs)) if fwd_bwd else ours,
        baseline=(lambda *inputs: _fwd_bwd(vendor, *inputs)) if fwd_bwd else vendor,
        reference=reference,
        flops=flops(norm, rows, cols, pass_),
        bytes=bytes_moved(norm, rows, cols, dtype, pass_),
        tolerance=TOLERANCE[dtype],
        extra={"pass": pass_, "output": "dx" if fwd_bwd else "y", "eps": 1e-5},
    )


def bench_cases(suite: str = "quick") -> list[BenchCase]:
    """quick: both norms, fwd and fwd+bwd, at 16384x4096 (4 cases); full: the same at three sizes (12)."""
    check(suite in BENCH_SHAPES, "suite", suite, f"one of {', '.join(BENCH_SHAPES)}")
    return [make_bench_case(norm, rows, cols, "bf16", fwd_bwd)
            for rows, cols in BENCH_SHAPES[suite] for norm in ("rmsnorm", "layernorm") for fwd_bwd in (False, True)]
