"""RMSNorm and LayerNorm over the last dimension, forward and backward, in Triton.

x [..., cols] is viewed as [rows, cols]; math is fp32 whatever the input dtype (bf16, fp16, fp32).

Both passes are persistent: as many programs as the GPU holds at once (``_resident_programs``: SMs times the
blocks per SM that the compiled kernel's registers, shared memory and threads allow) each walk the row tiles
pid, pid + programs, ... of ``ROWS_PER_PROGRAM`` rows in a software-pipelined loop (``tl.range(num_stages=)``):
the next ``num_stages - 1`` tiles load into shared memory (cp.async on NVIDIA) while the current one is worked
on. Without it a memory-bound loop is latency-bound: each tile's row reductions wait on its loads and the next
loads wait on the reductions (the previous kernels, one row in flight per program, ran the backward at 0.58 of
torch's, benchmarks/results/h200/kernels/kernels_quick.csv).

- forward: writes y and the per-row fp32 statistics (rstd, and mean for LayerNorm) that the backward reuses.
- backward: writes dx per row; dweight (and dbias) are summed in fp32 registers per program into a
  [programs, cols] buffer that one small kernel (``_partial_sum_kernel``) reduces and casts to the weight's
  (and the bias's) dtype (no atomics, deterministic; one launch for dweight and dbias together).

Rows up to ``MAX_FWD_BLOCK_N`` (forward) / ``MAX_BWD_BLOCK_N`` (backward) columns sit in registers as one tile;
wider rows loop over column tiles (two or three passes over x, mostly from L2, instead of one), not pipelined.

Host time decides the fwd+bwd up to a few hundred MB: on the H200 machine a no-op autograd.Function with
torch.autograd.grad costs ~95 us and a Triton launch ~20 us (benchmarks/results/h200/kernels/host_overhead),
while a 4096x4096 bf16 fwd+bwd moves 168 MB (~40 us at copy bandwidth). So a repeated call only allocates (y
and one statistics buffer; dx, the gradients and one partial-sum buffer) and makes its three launches: config,
constexprs, shapes and grids (from the compiled kernels) are worked out once per distinct call (``_NormPlan``),
and the launches after the first call the compiled kernels' launchers directly (``_launch.KernelLaunch``), skipping
the JIT's per-call argument binding and cache lookup (``config["launch"] = "jit"`` keeps the JIT path). The backward
runs at twice the forward's warps (``_backward_warps``: half the values a thread, about half the registers).

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

from workbench.kernels._common import (BenchCase, backend, check, check_device, frozen, needs_grad, plan_cache,
                                       tensor_key)
from workbench.kernels._launch import KernelLaunch, pointers_aligned

Norm = Literal["rmsnorm", "layernorm"]
Pass = Literal["fwd", "bwd", "fwd_bwd"]

MAX_FWD_BLOCK_N = 16384
"""Widest row the forward holds in registers as one tile; wider rows loop over tiles of this many columns.
From `ptxas -v` on the sm_90a build with 16 warps (128 registers a thread): no spills up to 16K columns,
44-316 bytes at 32K, 2.4-4.2 KB at 64K."""
MAX_BWD_BLOCK_N = 8192
"""The same for the backward, which holds four to five tiles (x, dy, w, dweight, dbias): no spills at 8K,
0.6-1 KB of spills at 16K (same ptxas check)."""
FALLBACK_PROGRAMS_PER_SM = 2
"""Programs per SM/CU where the compiled kernel's resources cannot be read (AMD, or a Triton without
``JITFunction.warmup``): a guess, calibrate by sweeping 1..8 on the GPU."""
INTERPRETER_PROGRAMS = 4
"""Programs under TRITON_INTERPRET (several, so the tests exercise the strided tiles and the partial sums)."""
PARTIAL_SUM_BLOCK = (128, 32)
"""(parts, columns) per step of ``_partial_sum_kernel``: a 16 KB fp32 tile, 4 warps, 128-byte row segments;
cols / 32 programs (64-256 for 2K-8K columns) each summing the ~130-1000 partial rows in a few steps. A guess,
calibrate me (it runs after the backward, so its few microseconds add to every fwd+bwd)."""
DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@triton.jit
def _norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stats_ptr, rows, cols, x_row_stride, y_row_stride, eps,
                     LAYER_NORM: tl.constexpr, ONE_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                     ROWS_PER_PROGRAM: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Block: [ROWS_PER_PROGRAM, BLOCK_N] of x and y; [BLOCK_N] of w (and b). Row tiles pid, pid + programs, ...

    ONE_BLOCK (BLOCK_N >= cols): x is loaded once and kept in registers; the tile loop is software-pipelined
    (NUM_STAGES: the next NUM_STAGES - 1 tiles' x load into shared memory while this one is worked on).
    Otherwise: one pass for the mean (LayerNorm), one for the sum of squares, one to write y. stats: [2, rows]
    fp32, mean then rstd (LayerNorm), or [1, rows], rstd (RMSNorm); b_ptr is unused for RMSNorm.
    """
    mean_ptr = stats_ptr
    rstd_ptr = stats_ptr
    if LAYER_NORM:
        rstd_ptr += rows
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles = tl.cdiv(rows, ROWS_PER_PROGRAM)
    step = programs.to(tl.int64) * ROWS_PER_PROGRAM  # rows from one of this program's tiles to its next
    row = pid.to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)  # [R] rows of its first tile
    offs = tl.arange(0, BLOCK_N)  # [BLOCK_N]
    if ONE_BLOCK:
        col_mask = offs < cols
        w = tl.load(w_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
        b = tl.zeros([BLOCK_N], tl.float32)
        if LAYER_NORM:
            b = tl.load(b_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
        for tile in tl.range(pid, tiles, programs, num_stages=NUM_STAGES):
            row = (tile * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)  # [R]
            row_mask = row < rows
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_ptr + row[:, None] * x_row_stride + offs[None, :], mask=mask, other=0.0).to(tl.float32)
            mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            if LAYER_NORM:
                mean = tl.sum(x, axis=1) / cols
            xc = tl.where(mask, x - mean[:, None], 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / cols + eps)  # [R]
            y = xc * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(y_ptr + row[:, None] * y_row_stride + offs[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
            if LAYER_NORM:
                tl.store(mean_ptr + row, mean, mask=row_mask)
            tl.store(rstd_ptr + row, rstd, mask=row_mask)
    else:
        for _ in range(pid, tiles, programs):
            row_mask = row < rows
            x_row = x_ptr + row[:, None] * x_row_stride  # [R, 1]
            y_row = y_ptr + row[:, None] * y_row_stride
            mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            if LAYER_NORM:
                total = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
                for start in range(0, cols, BLOCK_N):
                    mask = row_mask[:, None] & (start + offs < cols)[None, :]
                    total += tl.sum(tl.load(x_row + start + offs[None, :], mask=mask, other=0.0).to(tl.float32),
                                    axis=1)
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
            row += step


@triton.jit
def _norm_bwd_kernel(x_ptr, w_ptr, dy_ptr, stats_ptr, dx_ptr, partial_ptr, rows, cols, x_row_stride,
                     dy_row_stride, dx_row_stride,
                     LAYER_NORM: tl.constexpr, ONE_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                     ROWS_PER_PROGRAM: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Block: [ROWS_PER_PROGRAM, BLOCK_N] of x, dy, dx; row tiles pid, pid + programs, ... one after another.

    With xhat = (x - mean) * rstd and g = dy * w:
      dx = rstd * (g - xhat * mean(g * xhat) - mean(g))     (the mean(g) term only for LayerNorm)
      partial[0, pid] = sum over this program's rows of dy * xhat;  partial[1, pid] = sum of dy (LayerNorm).
    partial: [1 or 2, programs, cols] fp32; stats: as the forward wrote them. ONE_BLOCK keeps the partials in
    registers and stores them once (the buffer may start uninitialised), and pipelines the tile loop as the
    forward does (x and dy of the next NUM_STAGES - 1 tiles in flight); otherwise each column block adds into
    this program's partial rows in memory (the buffer starts at zero).
    """
    mean_ptr = stats_ptr
    rstd_ptr = stats_ptr
    if LAYER_NORM:
        rstd_ptr += rows
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles = tl.cdiv(rows, ROWS_PER_PROGRAM)
    step = programs.to(tl.int64) * ROWS_PER_PROGRAM
    row = pid.to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)  # [R]
    offs = tl.arange(0, BLOCK_N)
    dw_row = partial_ptr + pid.to(tl.int64) * cols
    db_row = dw_row + programs.to(tl.int64) * cols  # partial[1, pid] (LayerNorm only)
    if ONE_BLOCK:
        col_mask = offs < cols
        w = tl.load(w_ptr + offs, mask=col_mask, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK_N], tl.float32)
        db = tl.zeros([BLOCK_N], tl.float32)
        for tile in tl.range(pid, tiles, programs, num_stages=NUM_STAGES):
            row = (tile * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)).to(tl.int64)  # [R]
            row_mask = row < rows
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_ptr + row[:, None] * x_row_stride + offs[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row[:, None] * dy_row_stride + offs[None, :], mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row, mask=row_mask, other=0.0)  # [R]
            mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            if LAYER_NORM:
                mean = tl.load(mean_ptr + row, mask=row_mask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            g = dy * w[None, :]
            dx = g - xhat * (tl.sum(g * xhat, axis=1) / cols)[:, None]
            if LAYER_NORM:
                dx -= (tl.sum(g, axis=1) / cols)[:, None]
                db += tl.sum(dy, axis=0)
            dw += tl.sum(dy * xhat, axis=0)
            tl.store(dx_ptr + row[:, None] * dx_row_stride + offs[None, :],
                     (dx * rstd[:, None]).to(dx_ptr.dtype.element_ty), mask=mask)
        tl.store(dw_row + offs, dw, mask=col_mask)
        if LAYER_NORM:
            tl.store(db_row + offs, db, mask=col_mask)
    else:
        for _ in range(pid, tiles, programs):
            row_mask = row < rows
            rstd = tl.load(rstd_ptr + row, mask=row_mask, other=0.0)
            mean = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            if LAYER_NORM:
                mean = tl.load(mean_ptr + row, mask=row_mask, other=0.0)
            sum_g_xhat = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            sum_g = tl.zeros([ROWS_PER_PROGRAM], tl.float32)
            for start in range(0, cols, BLOCK_N):
                col_mask = start + offs < cols
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_ptr + row[:, None] * x_row_stride + start + offs[None, :], mask=mask,
                            other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + row[:, None] * dy_row_stride + start + offs[None, :], mask=mask,
                             other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                g = dy * w[None, :]
                sum_g_xhat += tl.sum(g * tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0), axis=1)
                sum_g += tl.sum(g, axis=1)
            for start in range(0, cols, BLOCK_N):
                col_mask = start + offs < cols
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_ptr + row[:, None] * x_row_stride + start + offs[None, :], mask=mask,
                            other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + row[:, None] * dy_row_stride + start + offs[None, :], mask=mask,
                             other=0.0).to(tl.float32)
                w = tl.load(w_ptr + start + offs, mask=col_mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                dx = dy * w[None, :] - xhat * (sum_g_xhat / cols)[:, None]
                if LAYER_NORM:
                    dx -= (sum_g / cols)[:, None]
                    db = tl.load(db_row + start + offs, mask=col_mask, other=0.0)
                    tl.store(db_row + start + offs, db + tl.sum(dy, axis=0), mask=col_mask)
                dw = tl.load(dw_row + start + offs, mask=col_mask, other=0.0)
                tl.store(dw_row + start + offs, dw + tl.sum(dy * xhat, axis=0), mask=col_mask)
                tl.store(dx_ptr + row[:, None] * dx_row_stride + start + offs[None, :],
                         (dx * rstd[:, None]).to(dx_ptr.dtype.element_ty), mask=mask)
            row += step


@triton.jit
def _partial_sum_kernel(partial_ptr, dw_ptr, db_ptr, parts, cols, BLOCK_P: tl.constexpr,
                        BLOCK_C: tl.constexpr):
    """dw[c] = sum over p of partial[0, p, c], db[c] = the same of partial[1, p, c]: the backward's per-program
    weight-gradient sums, partial [groups, parts, cols] fp32 -> dw, db [cols], each in its own dtype (group 1,
    dbias, only for LayerNorm; RMSNorm passes dw as db too).

    Block: [BLOCK_P, BLOCK_C] of partial; grid (cdiv(cols, BLOCK_C), groups).
    """
    group = tl.program_id(1).to(tl.int64)
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)  # [BLOCK_C]
    p = tl.arange(0, BLOCK_P)
    src = partial_ptr + group * parts * cols
    acc = tl.zeros([BLOCK_C], tl.float32)
    for start in range(0, parts, BLOCK_P):
        mask = (start + p < parts)[:, None] & (c < cols)[None, :]
        acc += tl.sum(tl.load(src + (start + p)[:, None] * cols + c[None, :], mask=mask, other=0.0), axis=0)
    if group == 0:
        tl.store(dw_ptr + c, acc.to(dw_ptr.dtype.element_ty), mask=c < cols)
    else:
        tl.store(db_ptr + c, acc.to(db_ptr.dtype.element_ty), mask=c < cols)


# --------------------------------------------------------------------------- #
# Launch wrappers
# --------------------------------------------------------------------------- #

_CONFIG_KEYS = ("num_warps", "ROWS_PER_PROGRAM", "num_stages", "waves_per_eu", "BLOCK_N", "bwd_num_warps", "launch")
LAUNCHES = ("direct", "jit")
"""How a repeated call launches its kernels: "direct" calls the compiled kernel's launcher (``KernelLaunch``),
"jit" goes through ``JITFunction.run`` every time (argument binding, specialization key, cache lookup)."""
MAX_NUM_WARPS = {"cuda": 32, "hip": 16, "interpreter": 32}
"""Warps a program may have: 1024 threads on NVIDIA (32 lanes) and AMD (64 lanes)."""


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
    for key in ("num_warps", "ROWS_PER_PROGRAM", "BLOCK_N", "bwd_num_warps"):
        value = config.get(key)
        check(value is None or (isinstance(value, int) and value >= 1 and value & (value - 1) == 0),
              f"config[{key!r}]", value, "a power of two")
    stages = config["num_stages"]
    check(isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= 8, "config['num_stages']",
          stages, "an integer from 1 (no pipelining) to 8")
    check(config.get("bwd_num_warps") is None or config["bwd_num_warps"] <= MAX_NUM_WARPS[backend()],
          "config['bwd_num_warps']", config.get("bwd_num_warps"), f"at most {MAX_NUM_WARPS[backend()]}")
    launch = config.get("launch", "direct")
    check(launch in LAUNCHES, "config['launch']", repr(launch), " or ".join(map(repr, LAUNCHES)))
    return config


def _backward_warps(config: dict) -> int:
    """config["bwd_num_warps"], else twice the forward's warps (up to MAX_NUM_WARPS): the backward holds x, dy,
    w, xhat and the weight-gradient sums per element where the forward holds x and w, so at the forward's 16 values
    a thread it takes 107-127 registers (sm_90 ptxas, 2K-8K columns: 4 to 1 programs an SM) and at 8 values 50-72
    (at 32 warps, 8K columns: 64)."""
    return config.get("bwd_num_warps") or min(MAX_NUM_WARPS[backend()], 2 * config["num_warps"])


def _launch_options(config: dict, num_warps: int | None = None) -> dict:
    options = {"num_warps": num_warps or config["num_warps"]}
    if backend() == "hip":
        options["waves_per_eu"] = config.get("waves_per_eu", 0)
    return options


def _as_rows(t: torch.Tensor, cols: int) -> torch.Tensor:
    """[..., cols] -> [rows, cols] with unit column stride (t itself when it already is one, else a view where
    possible)."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    t2 = t.reshape(-1, cols)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _row_stride(t: torch.Tensor) -> int | None:
    """The row stride of t [..., cols] as the kernels read it, [rows, cols] with unit column stride, when t can be
    passed as it is ([rows, cols] with unit column stride, or contiguous of any rank); None when it needs
    ``_as_rows`` first. A launch takes only t's address and this stride, so no reshape or view is made."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t.stride(0)
    return t.shape[-1] if t.is_contiguous() else None


def _resident_programs(kernel, args: tuple, kwargs: dict, device: torch.device) -> int:
    """How many programs of ``kernel`` (launched with these arguments and constexprs/options ``kwargs``) the GPU
    runs at once: SMs times the blocks per SM its registers, shared memory and threads allow, read from the
    compiled kernel as Triton's fused-softmax tutorial does. A persistent kernel launched with more programs runs
    a partial second wave. Asked once per plan (it compiles, or finds, the kernel: host time in milliseconds)."""
    if device.type != "cuda":
        return INTERPRETER_PROGRAMS
    props = torch.cuda.get_device_properties(device)
    fallback = FALLBACK_PROGRAMS_PER_SM * props.multi_processor_count
    if backend() == "hip":
        return fallback
    try:
        compiled = kernel.warmup(*args, grid=(1,), **kwargs)
        compiled._init_handles()
        registers, shared = compiled.n_regs, compiled.metadata.shared
    except Exception:  # noqa: BLE001 - an older or newer Triton without these attributes: the guess
        return fallback
    threads = 32 * kwargs["num_warps"]
    registers = -(-max(registers, 1) // 8) * 8  # allocated per warp in units of 256 (8 a thread)
    per_sm = min(getattr(props, "regs_per_multiprocessor", 65536) // (registers * threads),
                 getattr(props, "max_threads_per_multi_processor", 2048) // threads,
                 getattr(props, "shared_memory_per_multiprocessor", 228 * 1024) // shared if shared else 32)
    return max(1, per_sm) * props.multi_processor_count


class _NormPlan:
    """Everything a call works out once per distinct (shapes, strides, dtypes, device, eps, config), so that a
    repeated call only allocates and launches: the resolved config, the constexprs and launch options of each
    kernel, the shapes of what it allocates, and, from the first launch of each pass (which compiles the kernel
    and reads its resources), the grids and the launches (``KernelLaunch``: after their first launch they call the
    compiled kernels' launchers directly). Every integer argument is fixed by the plan's key except dy's row stride
    (dy is not in the key): a backward whose dy has another row stride than the first one's gets a launch of its
    own, through the JIT, as attention's backward does for another dO layout.

    A repeated fwd+bwd does, on the host: the plan lookup (a dict get on shapes, strides, dtypes, device),
    ``autograd.Function.apply`` with ``ctx.save_for_backward`` of x, w and the statistics; allocates y and the
    statistics; one launch; then in the backward ``ctx.saved_tensors``, allocates dx, dweight (and dbias, in the
    bias's dtype: the partial sums' kernel writes each gradient in its own dtype) and the partial sums; two
    launches. Nothing else: no torch op between the launches, no ``contiguous()`` of weights the key says are
    contiguous, no reshape or view of x, y, dy or dx when x is contiguous (any rank) or [rows, cols] with unit
    column stride (y and dx are allocated in x's shape, and a launch takes only addresses and row strides).
    ``empty_like`` where a tensor of the shape and dtype
    is at hand (y, dx, the weight gradients): its argument parsing costs about 2/3 of ``torch.empty``'s (callgrind,
    torch 2.13 CPU: 8.4k against 13.1k instructions). On the H200
    machine a no-op autograd.Function with torch.autograd.grad costs ~95-120 us and a Triton launch through the
    JIT ~20 us, through the compiled launcher ~8-11 us (benchmarks/results/h200/kernels/host_overhead,
    .../kernels/norms)."""

    __slots__ = ("layer_norm", "config", "rows", "cols", "x_shape", "x_passes", "x_row_stride", "device",
                 "bias_dtype", "params_contiguous", "stats_shape", "groups", "tiles", "fwd_kwargs", "bwd_kwargs",
                 "bwd_one_block", "fwd", "bwd", "partial_sum", "partial_shape", "direct")

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: dict | None,
                 layer_norm: bool):
        self.layer_norm = layer_norm
        self.cols = cols = x.shape[-1]
        self.rows = rows = x.numel() // cols
        self.x_shape, self.device = x.shape, x.device  # in the plan's key, as the weights' strides are
        self.x_passes = _row_stride(x) is not None  # x goes to the kernels as it is (else through _as_rows)
        self.bias_dtype = None if bias is None else bias.dtype
        self.params_contiguous = weight.is_contiguous() and (bias is None or bias.is_contiguous())
        self.config = config = _resolve_config(config, cols)
        self.direct = config.get("launch", "direct") == "direct"
        rows_per_program, stages = config["ROWS_PER_PROGRAM"], config["num_stages"]
        fwd_block_n = _block_n(cols, config, MAX_FWD_BLOCK_N)
        bwd_block_n = _block_n(cols, config, MAX_BWD_BLOCK_N)
        self.groups = 2 if layer_norm else 1  # (mean and) rstd; dweight (and dbias)
        self.stats_shape = (self.groups, rows)
        self.tiles = triton.cdiv(rows, rows_per_program)
        self.fwd_kwargs = dict(LAYER_NORM=layer_norm, ONE_BLOCK=fwd_block_n >= cols, BLOCK_N=fwd_block_n,
                               ROWS_PER_PROGRAM=rows_per_program, NUM_STAGES=stages, **_launch_options(config))
        self.bwd_one_block = bwd_block_n >= cols
        self.bwd_kwargs = dict(LAYER_NORM=layer_norm, ONE_BLOCK=self.bwd_one_block, BLOCK_N=bwd_block_n,
                               ROWS_PER_PROGRAM=rows_per_program, NUM_STAGES=stages,
                               **_launch_options(config, _backward_warps(config)))
        # the launches of the first forward / backward (the partial sums': with the backward's, whose grid sets
        # the number of partial rows), and the row stride of x as the kernels read it (set with the forward's)
        self.fwd = self.bwd = self.partial_sum = self.partial_shape = self.x_row_stride = None

    def first_forward(self, tensors: tuple, scalars: tuple, device: torch.device) -> None:
        """The forward's grid, from its compiled kernel, and its launch (tensors, scalars: a launch's arguments)."""
        args = (*tensors, *scalars)
        programs = min(self.tiles, _resident_programs(_norm_fwd_kernel, args, self.fwd_kwargs, device))
        self.fwd = KernelLaunch(_norm_fwd_kernel, (programs,), scalars, self.fwd_kwargs, self.direct)
        self.x_row_stride = scalars[2]

    def first_backward(self, tensors: tuple, scalars: tuple, device: torch.device) -> None:
        """The backward's grid and partial-sum buffer, from its compiled kernel, and the launches of the backward
        and the partial sums (tensors, scalars: a launch's arguments, with an fp32 stand-in for the partial sums,
        whose size depends on the programs this finds)."""
        programs = min(self.tiles, _resident_programs(_norm_bwd_kernel, (*tensors, *scalars), self.bwd_kwargs,
                                                      device))
        self.bwd = KernelLaunch(_norm_bwd_kernel, (programs,), scalars, self.bwd_kwargs, self.direct)
        self.partial_shape = (self.groups, programs, self.cols)
        block_p, block_c = PARTIAL_SUM_BLOCK
        self.partial_sum = KernelLaunch(_partial_sum_kernel, (triton.cdiv(self.cols, block_c), self.groups),
                                        (programs, self.cols), dict(BLOCK_P=block_p, BLOCK_C=block_c, num_warps=4),
                                        self.direct)

    def backward_launch(self, scalars: tuple) -> KernelLaunch:
        """The backward's launch for these scalar arguments: the plan's, or for a dy of another row stride one of
        its own through the JIT (rare: autograd's dy is usually contiguous)."""
        if scalars == self.bwd.scalars:
            return self.bwd
        return KernelLaunch(_norm_bwd_kernel, self.bwd.grid, scalars, self.bwd_kwargs, direct=False)

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        """x as the kernels read it: x itself (contiguous, or [rows, cols] with unit column stride), else
        ``_as_rows(x)`` (a view or a copy)."""
        return x if self.x_passes else _as_rows(x, self.cols)


_PLANS = plan_cache()


def _norm_forward(x, weight, bias, eps, plan):
    # x: [..., cols] as plan.rows_of gives it, read as [rows, cols] -> y: x's shape, contiguous, x's dtype;
    # stats: [groups, rows] fp32 ((mean and) rstd)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    stats = torch.empty(plan.stats_shape, dtype=torch.float32, device=plan.device)
    if plan.rows == 0:
        return y, stats
    tensors = (x, weight, weight if bias is None else bias, y, stats)
    if plan.fwd is None:  # every scalar argument is in the plan's key (rows, cols, x's row stride, eps)
        plan.first_forward(tensors, (plan.rows, plan.cols, _row_stride(x), plan.cols, eps), x.device)
    plan.fwd(pointers_aligned(*tensors[:3]), *tensors)  # y, stats: torch's allocations, aligned
    return y, stats


def _norm_backward(dy, x, weight, stats, plan):
    # dy: y's shape, x: as the forward read it -> dx: x's shape, contiguous; dweight [cols] (weight dtype),
    # dbias [cols] (bias dtype) or None
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight)  # weight (and bias): [cols], contiguous
    dbias = torch.empty_like(weight, dtype=plan.bias_dtype) if plan.layer_norm else None
    if plan.rows == 0:  # no rows: zero gradients for the weights
        for grad in (dweight, dbias)[:plan.groups]:
            grad.zero_()
    else:
        dy_row_stride = _row_stride(dy)  # dy: y's dtype (autograd casts it), any strides (not in the plan's key)
        if dy_row_stride is None:
            dy = _as_rows(dy, plan.cols)
            dy_row_stride = dy.stride(0)
        scalars = (plan.rows, plan.cols, plan.x_row_stride, dy_row_stride, plan.cols)
        if plan.bwd is None:  # stats stand in for the partial sums (same dtype: the same compiled kernel)
            plan.first_backward((x, weight, dy, stats, dx, stats), scalars, x.device)
        # ONE_BLOCK stores each program's partial sums once; the column loop adds into them
        partials = (torch.empty if plan.bwd_one_block else torch.zeros)(plan.partial_shape, dtype=torch.float32,
                                                                          device=plan.device)
        # stats, dx, partials, dweight, dbias: torch's allocations, aligned
        plan.backward_launch(scalars)(pointers_aligned(x, weight, dy), x, weight, dy, stats, dx, partials)
        plan.partial_sum(True, partials, dweight, dweight if dbias is None else dbias)
    return dx, dweight, dbias


class _NormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, plan):
        x = plan.rows_of(x)
        y, stats = _norm_forward(x, weight, bias, eps, plan)
        ctx.save_for_backward(x, weight, stats)
        ctx.plan = plan
        return y if plan.x_passes else y.view(plan.x_shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, stats = ctx.saved_tensors
        dx, dweight, dbias = _norm_backward(dy, x, weight, stats, ctx.plan)
        return dx if ctx.plan.x_passes else dx.view(ctx.plan.x_shape), dweight, dbias, None, None


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


def _norm(x, weight, bias, eps, config, layer_norm: bool) -> torch.Tensor:
    """The checks and the plan once per distinct call (``_NormPlan``), then the launch (through autograd only
    when a gradient is wanted: ``autograd.Function.apply`` costs ~25 us of host time per call)."""
    try:
        key = (tensor_key(x), tensor_key(weight), tensor_key(bias), eps, type(eps), frozen(config), layer_norm)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config: the checks below say which
        key = plan = None
    if plan is None:
        _check_inputs(x, weight, bias, eps, layer_norm)
        plan = _NormPlan(x, weight, bias, config, layer_norm)
        if key is not None:
            _PLANS.put(key, plan)
    if not plan.params_contiguous:  # the plan's key holds the weights' strides
        weight = weight.contiguous()
        bias = None if bias is None else bias.contiguous()
    if not needs_grad(x, weight, bias):
        y, _ = _norm_forward(plan.rows_of(x), weight, bias, float(eps), plan)
        return y if plan.x_passes else y.view(plan.x_shape)
    return _NormFunction.apply(x, weight, bias, float(eps), plan)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5, config: dict | None = None) -> torch.Tensor:
    """RMSNorm of x [..., cols] with weight [cols]; differentiable in x and weight. Output in x's dtype."""
    return _norm(x, weight, None, eps, config, layer_norm=False)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               config: dict | None = None) -> torch.Tensor:
    """LayerNorm of x [..., cols] with weight and bias [cols]; differentiable in all three. Output in x's dtype."""
    return _norm(x, weight, bias, eps, config, layer_norm=True)


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

NUM_STAGES = 3
"""Tiles per program in the pipelined loop (the current one and two loading): a guess, calibrate by timing
config_space on the GPU (benchmarks/kernels/elementwise.py sweeps a few)."""


def config_space(backend: str) -> list[dict]:
    """num_warps x ROWS_PER_PROGRAM x num_stages; on AMD (hip) also waves_per_eu (0 = no occupancy hint)."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    space = [{"num_warps": w, "ROWS_PER_PROGRAM": r, "num_stages": st}
             for r in (1, 2, 4) for w in (1, 2, 4, 8, 16) for st in (1, 2, 3, 4)]
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
    config = {"num_warps": num_warps, "ROWS_PER_PROGRAM": rows_per_program, "num_stages": NUM_STAGES}
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
