"""Fused SwiGLU (Llama-style gated FFN activation) and tanh-GELU (GPT-2 MLP), forward and backward, in Triton.

SwiGLU: out = silu(gate) * up, silu(g) = g * sigmoid(g)                          (Shazeer 2020, "GLU Variants")
  gate and up [..., F] as two tensors, or one [..., 2F] tensor (gate first half, up second half), as a fused
  gate_up projection writes it. The backward recomputes sigmoid(gate) instead of saving silu(gate):
  dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dout * silu(g).
GELU (tanh approximation, as GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (Hendrycks & Gimpel 2016)
  computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), the same function without cancellation.

All kernels work on 1-D blocks of BLOCK elements: of the flattened tensors, or, for a concatenated gate_up, of one
row (a program per (row, column block), which saves a per-element division by F). Math is fp32 whatever the
storage dtype (bf16, fp16, fp32). Programs are numbered along memory: for gate_up the column blocks of one row
come one after another (program id = row x blocks + block), so the programs running at once read a few
contiguous stretches, as a flat pointwise kernel does, rather than one block from each of thousands of rows (the
rows-first grid this replaced ran the gate_up forward at 0.94-0.97 of torch.compile's flat kernel and 0.95 of the
two-tensor path, benchmarks/results/h200/kernels/elementwise/REPORT.md and kernels_full.csv).

Without a gradient to record the wrappers launch directly (``autograd.Function.apply`` costs ~25 us of host time
a call) and the default config is resolved once per backend. Each call's launches (grid, scalar arguments,
constexprs) are worked out once per distinct (shapes, strides, dtypes, device, config) (``_Launches``); after its
first launch each calls the compiled kernel's launcher directly (``_launch.KernelLaunch``), skipping the JIT's
per-call argument binding and cache lookup. Host time decides a fwd+bwd up to a few hundred MB: 4096 x 14336 bf16
ran at 0.65 of copy bandwidth end to end, 16384 x 14336 at 1.01
(benchmarks/results/h200/kernels/elementwise_ce_swiglu/REPORT.md).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from workbench.kernels._common import backend, check, check_device, frozen, needs_grad, plan_cache, tensor_key
from workbench.kernels._launch import KernelLaunch, pointers_aligned
from workbench.kernels.reference import reference_gelu, reference_swiglu  # noqa: F401 - re-exported

Pass = Literal["fwd", "bwd", "fwd_bwd"]

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
GELU_C = tl.constexpr(math.sqrt(2.0 / math.pi))
GELU_CUBIC = tl.constexpr(0.044715)


@triton.jit
def _tile(n_cols, ROWS_ON_GRID: tl.constexpr, BLOCK: tl.constexpr):
    """This program's elements (row, first + lanes) of a [rows, n_cols] view of the output, and their mask.

    ROWS_ON_GRID: grid (rows * cdiv(n_cols, BLOCK),), program row * blocks + block (a row's blocks are
    neighbours); used for a gate_up [rows, 2F] whose gate and up halves are strided rows (no per-element division
    by F, one scalar division a program). Otherwise grid (cdiv(n, BLOCK),) over contiguous tensors seen as one row
    of n_cols = n elements. Offsets are a scalar (int64) base plus int32 lanes, to keep registers low.
    """
    if ROWS_ON_GRID:
        blocks = tl.cdiv(n_cols, BLOCK)
        pid = tl.program_id(0)
        row = (pid // blocks).to(tl.int64)
        first = (pid % blocks) * BLOCK
    else:
        row = 0
        first = tl.program_id(0).to(tl.int64) * BLOCK
    lanes = tl.arange(0, BLOCK)
    return row, first, lanes, lanes < n_cols - first


@triton.jit
def _swiglu_fwd_kernel(gate_ptr, up_ptr, out_ptr, n_cols, in_row_stride, out_row_stride,
                       CONCAT: tl.constexpr, BLOCK: tl.constexpr):
    """Block: [BLOCK] elements of one row of gate, up and out (see _tile; CONCAT: up_ptr = gate_ptr + F)."""
    row, first, lanes, mask = _tile(n_cols, CONCAT, BLOCK)
    in_base = row * in_row_stride + first
    g = tl.load(gate_ptr + in_base + lanes, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + in_base + lanes, mask=mask, other=0.0).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(out_ptr + (row * out_row_stride + first) + lanes, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(gate_ptr, up_ptr, dout_ptr, dgate_ptr, dup_ptr, n_cols, in_row_stride, out_row_stride,
                       grad_row_stride, CONCAT: tl.constexpr, BLOCK: tl.constexpr):
    """Block: [BLOCK] elements of one row of gate, up, dout, dgate, dup (see _tile); dout is laid out like out,
    dgate/dup like gate/up but with rows grad_row_stride apart (CONCAT: dup_ptr = dgate_ptr + F)."""
    row, first, lanes, mask = _tile(n_cols, CONCAT, BLOCK)
    in_base = row * in_row_stride + first
    g = tl.load(gate_ptr + in_base + lanes, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + in_base + lanes, mask=mask, other=0.0).to(tl.float32)
    dout = tl.load(dout_ptr + (row * out_row_stride + first) + lanes, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(g)
    silu = g * sig
    dgate = dout * u * sig * (1.0 + g * (1.0 - sig))
    grad_base = row * grad_row_stride + first
    tl.store(dgate_ptr + grad_base + lanes, dgate.to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + grad_base + lanes, (dout * silu).to(dup_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_fwd_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """Block: [BLOCK] elements of x and out, flat and contiguous. 0.5 (1 + tanh(u)) = sigmoid(2u), which has no
    cancellation for large negative x (1 + tanh(u) would lose every digit there)."""
    _, first, lanes, mask = _tile(n_elements, False, BLOCK)
    x = tl.load(x_ptr + first + lanes, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid((x + x * x * x * GELU_CUBIC) * (2.0 * GELU_C))
    tl.store(out_ptr + first + lanes, (x * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_bwd_kernel(x_ptr, dout_ptr, dx_ptr, n_elements, BLOCK: tl.constexpr):
    """Block: [BLOCK] elements of x, dout, dx. With s = sigmoid(2u), u = c (x + a x^3):
    dx = dout * (s + 2 x s (1 - s) c (1 + 3 a x^2))."""
    _, first, lanes, mask = _tile(n_elements, False, BLOCK)
    x = tl.load(x_ptr + first + lanes, mask=mask, other=0.0).to(tl.float32)
    dout = tl.load(dout_ptr + first + lanes, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid((x + x * x * x * GELU_CUBIC) * (2.0 * GELU_C))
    slope = s + 2.0 * x * s * (1.0 - s) * GELU_C * (1.0 + x * x * (3.0 * GELU_CUBIC))
    tl.store(dx_ptr + first + lanes, (dout * slope).to(dx_ptr.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------- #
# Launch wrappers
# --------------------------------------------------------------------------- #

_CONFIG_KEYS = ("BLOCK", "num_warps", "waves_per_eu")


@functools.lru_cache(maxsize=4)
def _default_config(backend_name: str) -> dict:
    return config_space(backend_name)[0]


def _resolve_config(config: dict | None) -> dict:
    default = _default_config(backend())
    if config is None:
        return default  # shared: never modified
    check(isinstance(config, dict), "config", type(config).__name__, "a dict from config_space() or None")
    unknown = sorted(set(config) - set(_CONFIG_KEYS))
    check(not unknown, "config", f"unknown keys {unknown}", f"keys among {', '.join(_CONFIG_KEYS)}")
    config = {**default, **config}
    for key in ("BLOCK", "num_warps"):
        value = config[key]
        check(isinstance(value, int) and value >= 1 and value & (value - 1) == 0, f"config[{key!r}]", value,
              "a power of two")
    return config


class _Launches:
    """One call's forward and backward launches (``KernelLaunch``, or None for an empty output), worked out once
    per distinct (form, shapes, strides, dtypes, device, config): every scalar argument is fixed by those (the
    backward's dout is made contiguous, its gradients are allocated contiguous)."""

    __slots__ = ("fwd", "bwd")

    def __init__(self, fwd: KernelLaunch | None, bwd: KernelLaunch | None):
        self.fwd, self.bwd = fwd, bwd


_PLANS = plan_cache()


def _planned(key: tuple, build) -> _Launches:
    """The cached launches for ``key``, built by ``build()`` the first time (uncached for an unhashable config)."""
    try:
        launches = _PLANS.get(key)
    except TypeError:
        return build()
    return launches if launches is not None else _PLANS.put(key, build())


def _kernel_launch(kernel, rows: int, n_cols: int, config: dict, scalars: tuple,
                   concat: bool | None = None) -> KernelLaunch | None:
    """The launch over a [rows, n_cols] output: rows x column blocks programs for concat, else blocks (rows 1);
    None when the output is empty."""
    if rows * n_cols == 0:
        return None
    options = {"num_warps": config["num_warps"]}
    if backend() == "hip":
        options["waves_per_eu"] = config.get("waves_per_eu", 0)
    block = config["BLOCK"]
    grid = (rows * triton.cdiv(n_cols, block),)
    constexprs = {} if concat is None else {"CONCAT": concat}
    return KernelLaunch(kernel, grid, scalars, {"BLOCK": block, **constexprs, **options})


def _split_rows(gate_up: torch.Tensor) -> tuple[torch.Tensor, int]:
    """[..., 2F] -> ([rows, 2F] with unit column stride, F)."""
    rows2 = gate_up.reshape(-1, gate_up.shape[-1])
    if rows2.stride(-1) != 1:
        rows2 = rows2.contiguous()
    return rows2, gate_up.shape[-1] // 2


def _concat_launches(rows2: torch.Tensor, config: dict) -> _Launches:
    """gate_up as rows2 [rows, 2F]; out and dout [rows, F] and the gradient [rows, 2F], contiguous."""
    rows, ffn = rows2.shape[0], rows2.shape[1] // 2
    return _Launches(
        _kernel_launch(_swiglu_fwd_kernel, rows, ffn, config, (ffn, rows2.stride(0), ffn), concat=True),
        _kernel_launch(_swiglu_bwd_kernel, rows, ffn, config, (ffn, rows2.stride(0), ffn, 2 * ffn), concat=True))


def _swiglu_concat_forward(gate_up: torch.Tensor, config: dict) -> tuple[torch.Tensor, torch.Tensor, _Launches]:
    """gate_up [..., 2F] -> (out [..., F], gate_up as [rows, 2F], the launches)."""
    rows2, ffn = _split_rows(gate_up)
    launches = _planned(("concat", tensor_key(gate_up), frozen(config)), lambda: _concat_launches(rows2, config))
    out = torch.empty((rows2.shape[0], ffn), dtype=gate_up.dtype, device=gate_up.device)
    if launches.fwd is not None:
        up = rows2[:, ffn:]
        launches.fwd(pointers_aligned(rows2, up), rows2, up, out)  # out: torch's allocation, aligned
    return out.view(*gate_up.shape[:-1], ffn), rows2, launches


def _pair_launches(n: int, config: dict) -> _Launches:
    """gate, up, out, dout and the gradients: [n] contiguous."""
    return _Launches(_kernel_launch(_swiglu_fwd_kernel, 1, n, config, (n, 0, 0), concat=False),
                     _kernel_launch(_swiglu_bwd_kernel, 1, n, config, (n, 0, 0, 0), concat=False))


def _swiglu_pair_forward(gate: torch.Tensor, up: torch.Tensor, config: dict) -> tuple[torch.Tensor, _Launches]:
    """gate, up [..., F] (contiguous, up like gate) -> (out [..., F], the launches)."""
    launches = _planned(("pair", tensor_key(gate), frozen(config)), lambda: _pair_launches(gate.numel(), config))
    out = torch.empty_like(gate)
    if launches.fwd is not None:
        launches.fwd(pointers_aligned(gate, up), gate, up, out)
    return out, launches


class _SwiGLUConcat(torch.autograd.Function):
    """gate_up [..., 2F] -> out [..., F]; the gradient has gate_up's shape (dgate | dup)."""

    @staticmethod
    def forward(ctx, gate_up, config):
        out, rows2, launches = _swiglu_concat_forward(gate_up, config)
        ctx.save_for_backward(rows2)
        ctx.launches, ctx.shape = launches, gate_up.shape
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        (rows2,) = ctx.saved_tensors
        ffn = rows2.shape[1] // 2
        dout = dout.reshape(-1, ffn).contiguous()  # [rows, F]
        grad = torch.empty((rows2.shape[0], 2 * ffn), dtype=rows2.dtype, device=rows2.device)
        if ctx.launches.bwd is not None:
            up, dup = rows2[:, ffn:], grad[:, ffn:]
            ctx.launches.bwd(pointers_aligned(rows2, up, dout, dup), rows2, up, dout, grad, dup)
        return grad.view(ctx.shape), None


class _SwiGLUPair(torch.autograd.Function):
    """gate, up [..., F] -> out [..., F]; gradients dgate, dup."""

    @staticmethod
    def forward(ctx, gate, up, config):
        gate, up = gate.contiguous(), up.contiguous()
        out, ctx.launches = _swiglu_pair_forward(gate, up, config)
        ctx.save_for_backward(gate, up)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        gate, up = ctx.saved_tensors
        dout = dout.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        if ctx.launches.bwd is not None:
            ctx.launches.bwd(pointers_aligned(gate, up, dout), gate, up, dout, dgate, dup)
        return dgate, dup, None


def _gelu_launches(n: int, config: dict) -> _Launches:
    """x, out, dout, dx: [n] contiguous."""
    return _Launches(_kernel_launch(_gelu_fwd_kernel, 1, n, config, (n,)),
                     _kernel_launch(_gelu_bwd_kernel, 1, n, config, (n,)))


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, config):
        x = x.contiguous()
        ctx.launches = _planned(("gelu", tensor_key(x), frozen(config)), lambda: _gelu_launches(x.numel(), config))
        out = torch.empty_like(x)
        if ctx.launches.fwd is not None:
            ctx.launches.fwd(pointers_aligned(x), x, out)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        dout = dout.contiguous()
        if ctx.launches.bwd is not None:
            ctx.launches.bwd(pointers_aligned(x, dout), x, dout, dx)
        return dx, None


def _check_tensor(t, name: str) -> None:
    check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
    check(t.dtype in DTYPES, name, f"dtype {t.dtype}", "bfloat16, float16 or float32")
    check(t.dim() >= 1, name, "a 0-d tensor", "at least one dimension")


def swiglu(gate_up_or_gate: torch.Tensor, up: torch.Tensor | None = None, config: dict | None = None) -> torch.Tensor:
    """silu(gate) * up. With up=None the first argument is gate_up [..., 2F] (gate = first F columns);
    otherwise it is gate [..., F] and up has the same shape and dtype. Differentiable; output [..., F]."""
    if up is None:
        gate_up = gate_up_or_gate
        _check_tensor(gate_up, "gate_up")
        width = gate_up.shape[-1]
        check(width % 2 == 0 and width > 0, "gate_up", f"last dimension {width}",
              "an even width 2F (gate then up); pass up= to give gate and up separately")
        check_device(gate_up, names=("gate_up",))
        if not needs_grad(gate_up):
            return _swiglu_concat_forward(gate_up, _resolve_config(config))[0]
        return _SwiGLUConcat.apply(gate_up, _resolve_config(config))
    gate = gate_up_or_gate
    _check_tensor(gate, "gate")
    _check_tensor(up, "up")
    check(up.shape == gate.shape, "up", f"shape {tuple(up.shape)}", f"gate's shape {tuple(gate.shape)}")
    check(up.dtype == gate.dtype, "up", f"dtype {up.dtype}", f"gate's dtype {gate.dtype}")
    check_device(gate, up, names=("gate", "up"))
    if not needs_grad(gate, up):
        return _swiglu_pair_forward(gate.contiguous(), up.contiguous(), _resolve_config(config))[0]
    return _SwiGLUPair.apply(gate, up, _resolve_config(config))


def gelu(x: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """GELU with the tanh approximation (F.gelu(x, approximate="tanh")), elementwise; differentiable."""
    _check_tensor(x, "x")
    check_device(x, names=("x",))
    return _GELU.apply(x, _resolve_config(config))


# --------------------------------------------------------------------------- #
# Config space
# --------------------------------------------------------------------------- #

def config_space(backend: str) -> list[dict]:
    """BLOCK x num_warps; on AMD (hip) also waves_per_eu (0 = no occupancy hint). The first entry is the default.
    CUDA: 1024 elements over 4 warps (inductor's choice for a pointwise kernel), at or above 4096 over 8 on every
    row of the H200 sweep (benchmarks/results/h200/kernels/elementwise_ce_swiglu/sweeps.csv: 1.01x forward, 1.58x
    forward+backward at 4096 x 14336). hip: 4096 over 8 (16 per thread, two 16-byte bf16 loads per tensor; a
    guess, calibrate with a sweep)."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    blocks = (1024, 4096, 2048, 8192) if backend == "cuda" else (4096, 1024, 2048, 8192)
    warps_first = (4, 8) if backend == "cuda" else (8, 4)
    space = [{"BLOCK": block, "num_warps": warps} for block in blocks for warps in warps_first]
    if backend == "hip":
        space = [{**c, "waves_per_eu": waves} for c in space for waves in (0, 1, 2)]
    return space


# --------------------------------------------------------------------------- #
# FLOP and byte counts
# --------------------------------------------------------------------------- #

# Operations per output element counted from the kernel bodies (exp and division count one each): swiglu fwd
# sigmoid 3 + 2 multiplies; bwd sigmoid 3, silu 1, dgate 6, dup 1; gelu fwd polynomial 5, tanh 5, outer 3;
# bwd the forward's t plus 9 for the slope and 1 for dout.
_FLOPS_PER_ELEMENT = {("swiglu", "fwd"): 5, ("swiglu", "bwd"): 11, ("gelu", "fwd"): 13, ("gelu", "bwd"): 20}
# Full-size tensors read and written: swiglu fwd reads gate, up, writes out; bwd reads gate, up, dout, writes
# dgate, dup. gelu fwd reads x, writes out; bwd reads x, dout, writes dx.
_TENSORS_MOVED = {("swiglu", "fwd"): 3, ("swiglu", "bwd"): 5, ("gelu", "fwd"): 2, ("gelu", "bwd"): 3}


def _phases(pass_: Pass) -> tuple[str, ...]:
    return ("fwd", "bwd") if pass_ == "fwd_bwd" else (pass_,)


def flops(op: Literal["swiglu", "gelu"], rows: int, cols: int, pass_: Pass = "fwd") -> float:
    """FLOPs on [rows, cols] outputs (cols = F for swiglu)."""
    return float(sum(_FLOPS_PER_ELEMENT[(op, p)] for p in _phases(pass_)) * rows * cols)


def bytes_moved(op: Literal["swiglu", "gelu"], rows: int, cols: int, dtype: str, pass_: Pass = "fwd") -> float:
    """Minimal DRAM bytes on [rows, cols] outputs in dtype (every tensor read or written once)."""
    return float(sum(_TENSORS_MOVED[(op, p)] for p in _phases(pass_)) * rows * cols * ELEMENT_BYTES[dtype])


# --------------------------------------------------------------------------- #
# Accepted error
# --------------------------------------------------------------------------- #

TOLERANCE = {"bf16": 2e-2, "fp16": 2e-2, "fp32": 1e-5}
