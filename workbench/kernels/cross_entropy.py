"""Fused softmax + cross-entropy over large vocabularies (Llama 3: V = 128256).

Forward: one program per row streams the row's logits once in ``BLOCK_V`` chunks, keeping a running max and a
running sum of exponentials in fp32 (online log-sum-exp), and writes the row's loss and its log-sum-exp ``lse``.
Backward: one more pass over the row using the saved ``lse``: ``dlogits = (softmax - onehot(target)) * grad``,
written in the logits dtype, optionally into the logits buffer itself (``inplace_backward=True``).
Neither pass materialises the [N, V] probabilities, which is where torch's log_softmax + nll_loss spends memory.

When the logits need a gradient and the loss is a mean or a sum, the forward also writes the gradient (as
Liger-Kernel and unsloth do): right after a row's log-sum-exp pass, a second pass over the same row, walked from
its end so that its most recently read chunks come from L2, writes ``dlogits`` for an upstream gradient of 1.
The logits are then not kept for the backward, which only scales ``dlogits`` by the upstream gradient
(``_scale_kernel``, which returns at once when that is 1, the usual case: no host sync to find out).
Both loops are software-pipelined (``tl.range(num_stages=)``: the next chunks load while one is reduced).

Without the gradient (no grad wanted, ``reduction="none"``, or ``inplace_backward``) the forward only reads: its
loop is not pipelined (``FORWARD_NUM_STAGES``), and a long row is split over several programs of ``SPLIT_V``
columns each (``_cross_entropy_partial_kernel``), whose partial maxima and sums ``_cross_entropy_combine_kernel``
folds into the row's log-sum-exp and loss. With one program per 256 KB row (V = 128256) the last rows ran alone
for tens of microseconds, a fixed cost that showed at 1 GB of logits (0.70-0.83 of copy bandwidth).

Exponentials are base 2 (``tl.exp2`` of ``(x - max) * log2(e)``: FADD, FMUL and MUFU.EX2 a logit on sm_90, where
``tl.exp(x - max)`` also guards denormals, two more instructions a logit; near copy bandwidth the forward is bound
by instruction issue as much as by memory). The subtraction comes first so the max logit's term is exactly 1.
"""

from __future__ import annotations

import itertools
from typing import Literal

import torch
import triton
import triton.language as tl

from workbench.kernels._common import KernelInputError, backend, check, check_device
from workbench.kernels.reference import (  # noqa: F401 - re-exported
    reference_cross_entropy,
    reference_cross_entropy_grad,
)

Reduction = Literal["mean", "sum", "none"]
Pass = Literal["fwd", "bwd", "fwd_bwd"]

_LOGIT_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_TARGET_DTYPES = (torch.int64, torch.int32)


NUM_STAGES = 3
"""Chunks per program in the pipelined loops that write the gradient (the current one and two loading): a guess,
calibrate with a sweep (benchmarks/kernels/elementwise.py times a few); a config's ``num_stages`` overrides it."""
FORWARD_NUM_STAGES = 1
"""The same for the forward that only reads: not pipelined. Pipelined (cp.async through shared memory), its loop
compiles to about twice the non-math instructions a logit (sm_90 SASS from Triton 3.6: FSEL for the masked fill,
P2R/PLOP3/ISETP predicates, IMAD addressing) and 32 KB of shared memory a program; the forward at 8192 x 128256
ran at 0.79 of copy bandwidth pipelined, 0.92-0.94 without (benchmarks/results/h200/kernels/elementwise/REPORT.md
and kernels_full.csv). A config's ``num_stages`` overrides it."""
SPLIT_V = 32768
"""Columns per program of the forward that only reads (64 KB of bf16): V = 128256 takes four programs a row,
V <= 32768 one (then no combine kernel runs). A guess, calibrate with the sweep; a config's ``SPLIT_V``
overrides it (rounded up to a multiple of BLOCK_V)."""
COMBINE_ROWS = 128
"""Rows per program of ``_cross_entropy_combine_kernel`` (a tile of [128, splits] partials; a guess, it moves
N x splits x 8 bytes)."""
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _online_logsumexp(row_ptr, start, end, V, BLOCK_V: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Columns [start, end) of one row, in [BLOCK_V] chunks: (m, s), m = max(x) and s = sum of exp(x - m),
    computed as 2^((x - m) log2(e)); fp32 scalars; (-inf, 0) for an empty range or one of -inf logits only."""
    running_max = -float("inf")
    running_sum = 0.0
    for chunk in tl.range(start, end, BLOCK_V, num_stages=NUM_STAGES):
        cols = chunk + tl.arange(0, BLOCK_V)
        x = tl.load(row_ptr + cols, mask=cols < V, other=-float("inf")).to(tl.float32)  # x: [BLOCK_V]
        new_max = tl.maximum(running_max, tl.max(x, axis=0))
        # while every logit so far is -inf, shift by 0: 2^(-inf - 0) = 0, where -inf - -inf would be nan
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        # 2^(-inf - shift) = 0 on the first step, so the empty initial sum drops out; x - shift first (one FADD
        # and one FMUL, not one FFMA of x log2(e) - shift log2(e)), so the row's max gives exactly 2^0 = 1 on a
        # GPU too, where the fused multiply-add left the rounding of shift log2(e): a one-class row's loss and
        # gradient came out 6e-8, not 0 (tests/kernels/test_cross_entropy.py, on the H200)
        running_sum = (running_sum * tl.exp2((running_max - shift) * LOG2E)
                       + tl.sum(tl.exp2((x - shift) * LOG2E), axis=0))
        running_max = new_max
    return running_max, running_sum


@triton.jit
def _cross_entropy_fwd_kernel(
    logits_ptr,  # [N, V], row stride `stride_row`, unit column stride
    targets_ptr,  # [N] int
    loss_ptr,  # [N] fp32 out
    lse_ptr,  # [N] fp32 out (0 for ignored rows, which are never read)
    dlogits_ptr,  # [N, V] out when WRITE_GRAD, same strides as logits
    valid_rows_ptr,  # [] int64: rows whose target is not ignore_index (read when WRITE_GRAD and MEAN)
    V,
    stride_row,
    ignore_index,
    WRITE_GRAD: tl.constexpr,
    MEAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """Program ``row`` owns one row; block [BLOCK_V] of logits per loop step, scalar fp32 max and sum.

    WRITE_GRAD: then dlogits = (softmax - onehot(target)) * scale, scale = 1 / valid rows (MEAN) or 1 (sum), 0 on
    an ignored row, from the row's last chunk to its first (those read last in the first pass are still in L2).
    """
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    # An ignored row (padding) reads nothing: its loop bound is 0.
    v_end = tl.where(valid, V, 0)

    running_max, running_sum = _online_logsumexp(row_ptr, 0, v_end, V, BLOCK_V, NUM_STAGES)
    lse = running_max + tl.log(tl.where(valid, running_sum, 1.0))  # ignored rows: no log(0)

    target_logit = tl.load(row_ptr + target, mask=valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(valid, lse - target_logit, 0.0))
    lse = tl.where(valid, lse, 0.0)
    tl.store(lse_ptr + row, lse)

    if WRITE_GRAD:
        scale = 1.0
        if MEAN:
            scale = 1.0 / tl.maximum(tl.load(valid_rows_ptr), 1).to(tl.float32)  # none valid: every row ignored
        scale = tl.where(valid, scale, 0.0)  # ignored rows: zeros, their logits unread
        out_ptr = dlogits_ptr + row * stride_row
        last = (V - 1) // BLOCK_V * BLOCK_V  # first column of the row's last chunk
        for back in tl.range(0, V, BLOCK_V, num_stages=NUM_STAGES):
            cols = last - back + tl.arange(0, BLOCK_V)
            in_row = cols < V
            x = tl.load(row_ptr + cols, mask=in_row & valid, other=0.0).to(tl.float32)  # x: [BLOCK_V]
            dx = (tl.exp2((x - lse) * LOG2E) - tl.where(cols == target, 1.0, 0.0)) * scale
            tl.store(out_ptr + cols, dx.to(dlogits_ptr.dtype.element_ty), mask=in_row)


@triton.jit
def _cross_entropy_partial_kernel(
    logits_ptr,  # [N, V], row stride `stride_row`, unit column stride
    targets_ptr,  # [N] int
    partial_ptr,  # [2, N, splits] fp32 out: each split's max, then its sum of exp(x - max)
    N,
    V,
    stride_row,
    ignore_index,
    splits,
    SPLIT_V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """Program ``pid`` owns columns [split * SPLIT_V, (split + 1) * SPLIT_V) of row pid // splits (split =
    pid % splits: neighbouring programs read neighbouring columns); block [BLOCK_V] per loop step. An ignored
    row reads nothing and writes (-inf, 0)."""
    pid = tl.program_id(0)
    row = (pid // splits).to(tl.int64)
    split = pid % splits
    target = tl.load(targets_ptr + row).to(tl.int64)
    start = split * SPLIT_V
    end = tl.where(target != ignore_index, tl.minimum(start + SPLIT_V, V), start)
    m, s = _online_logsumexp(logits_ptr + row * stride_row, start, end, V, BLOCK_V, NUM_STAGES)
    out = row * splits + split
    tl.store(partial_ptr + out, m)
    tl.store(partial_ptr + N * splits + out, s)


@triton.jit
def _cross_entropy_combine_kernel(
    partial_ptr,  # [2, N, splits] fp32 from _cross_entropy_partial_kernel
    logits_ptr,  # [N, V]: the target logits are read here
    targets_ptr,  # [N] int
    loss_ptr,  # [N] fp32 out
    lse_ptr,  # [N] fp32 out (0 for ignored rows)
    N,
    stride_row,
    ignore_index,
    splits,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr,
):
    """Block [BLOCK_ROWS, BLOCK_SPLITS] of partials: lse = m + log(sum_i s_i exp(m_i - m)), m = max_i m_i;
    loss = lse - x[target]."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # [BLOCK_ROWS]
    row_in = rows < N
    parts = tl.arange(0, BLOCK_SPLITS)
    mask = row_in[:, None] & (parts < splits)[None, :]
    offsets = rows[:, None] * splits + parts[None, :]  # [BLOCK_ROWS, BLOCK_SPLITS]
    m = tl.load(partial_ptr + offsets, mask=mask, other=-float("inf"))
    s = tl.load(partial_ptr + N * splits + offsets, mask=mask, other=0.0)
    row_max = tl.max(m, axis=1)  # [BLOCK_ROWS]
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    total = tl.sum(s * tl.exp2((m - shift[:, None]) * LOG2E), axis=1)
    target = tl.load(targets_ptr + rows, mask=row_in, other=ignore_index).to(tl.int64)
    valid = target != ignore_index
    lse = shift + tl.log(tl.where(valid, total, 1.0))  # ignored rows: no log(0)
    target_logit = tl.load(logits_ptr + rows * stride_row + target, mask=row_in & valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + rows, tl.where(valid, lse - target_logit, 0.0), mask=row_in)
    tl.store(lse_ptr + rows, tl.where(valid, lse, 0.0), mask=row_in)


@triton.jit
def _cross_entropy_bwd_kernel(
    logits_ptr,  # [N, V]
    dlogits_ptr,  # [N, V] out, same strides as logits (may alias logits_ptr)
    targets_ptr,  # [N] int
    lse_ptr,  # [N] fp32 from the forward
    grad_ptr,  # [N] fp32 per-row upstream gradient (stride 0 for mean/sum: one shared scalar)
    V,
    stride_row,
    grad_stride,
    ignore_index,
    BLOCK_V: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """Program ``row`` owns one row; block [BLOCK_V]. Each chunk is read, then overwritten by its gradient."""
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    grad = tl.load(grad_ptr + row * grad_stride).to(tl.float32)
    lse = tl.load(lse_ptr + row)
    row_in = logits_ptr + row * stride_row
    row_out = dlogits_ptr + row * stride_row
    for start in tl.range(0, V, BLOCK_V, num_stages=NUM_STAGES):
        cols = start + tl.arange(0, BLOCK_V)
        in_row = cols < V
        # Ignored rows skip the read (masked loads move no data) and write zeros.
        x = tl.load(row_in + cols, mask=in_row & valid, other=0.0).to(tl.float32)  # x: [BLOCK_V]
        probs = tl.exp2((x - lse) * LOG2E)
        dx = (probs - tl.where(cols == target, 1.0, 0.0)) * grad
        dx = tl.where(valid, dx, 0.0)
        tl.store(row_out + cols, dx.to(dlogits_ptr.dtype.element_ty), mask=in_row)


_CONFIG_KEYS = ("BLOCK_V", "SPLIT_V", "num_warps", "num_stages", "waves_per_eu")


def _launch_options(config: dict, default_stages: int = NUM_STAGES) -> tuple[int, int, dict]:
    """Split a config into BLOCK_V, the pipeline depth (``num_stages``, default ``default_stages``) and the
    compiler options (num_warps, and waves_per_eu on AMD)."""
    block_v = config.get("BLOCK_V")
    check(isinstance(block_v, int) and block_v > 0 and block_v & (block_v - 1) == 0, "config['BLOCK_V']",
          block_v, "a power of two")
    unknown = set(config) - set(_CONFIG_KEYS)
    check(not unknown, "config", sorted(unknown), f"only {', '.join(_CONFIG_KEYS)}")
    stages = config.get("num_stages", default_stages)
    check(isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= 8, "config['num_stages']",
          stages, "an integer from 1 (no pipelining) to 8")
    options = {k: v for k, v in config.items() if k in ("num_warps", "waves_per_eu")}
    return block_v, stages, options


def _split_v(config: dict, block_v: int, v: int) -> int:
    """Columns per program of the forward that only reads: config["SPLIT_V"] (default ``SPLIT_V``) rounded up
    to a multiple of BLOCK_V; the whole row (one program) when that covers V."""
    split = config.get("SPLIT_V", SPLIT_V)
    check(isinstance(split, int) and not isinstance(split, bool) and split >= 1, "config['SPLIT_V']", split,
          "a positive number of columns")
    return min(triton.cdiv(split, block_v), triton.cdiv(v, block_v)) * block_v


def cross_entropy_forward(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, config: dict, *,
                          dlogits: torch.Tensor | None = None, valid_rows: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss [N] and log-sum-exp [N], both fp32; ignored rows get loss 0. Inputs already checked.
    With ``dlogits`` ([N, V] like logits) also writes the gradient of the summed loss into it, or of the mean
    over ``valid_rows`` (a device int64 count) when that is given."""
    n, v = logits.shape
    write_grad = dlogits is not None
    block_v, stages, options = _launch_options(config, NUM_STAGES if write_grad else FORWARD_NUM_STAGES)
    loss = torch.empty(n, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n == 0:
        return loss, lse
    split_v = _split_v(config, block_v, v)
    splits = triton.cdiv(v, split_v)
    if write_grad or splits == 1:
        _cross_entropy_fwd_kernel[(n,)](logits, targets, loss, lse, dlogits if write_grad else logits,
                                        valid_rows if valid_rows is not None else targets, v, logits.stride(0),
                                        ignore_index, WRITE_GRAD=write_grad, MEAN=valid_rows is not None,
                                        BLOCK_V=block_v, NUM_STAGES=stages, **options)
        return loss, lse
    partial = torch.empty((2, n, splits), dtype=torch.float32, device=logits.device)  # [2, N, splits]
    _cross_entropy_partial_kernel[(n * splits,)](logits, targets, partial, n, v, logits.stride(0), ignore_index,
                                                 splits, SPLIT_V=split_v, BLOCK_V=block_v, NUM_STAGES=stages,
                                                 **options)
    _cross_entropy_combine_kernel[(triton.cdiv(n, COMBINE_ROWS),)](
        partial, logits, targets, loss, lse, n, logits.stride(0), ignore_index, splits, BLOCK_ROWS=COMBINE_ROWS,
        BLOCK_SPLITS=triton.next_power_of_2(splits), num_warps=4)
    return loss, lse


def cross_entropy_backward(logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, grad_rows: torch.Tensor,
                           ignore_index: int, config: dict, inplace: bool = False) -> torch.Tensor:
    """dlogits [N, V] in the logits dtype; ``grad_rows`` is [N] or [1] (broadcast) fp32. ``inplace`` reuses logits."""
    n, v = logits.shape
    block_v, stages, options = _launch_options(config)
    dlogits = logits if inplace else torch.empty_like(logits)
    if n > 0:
        grad_stride = grad_rows.stride(0) if grad_rows.numel() > 1 else 0
        _cross_entropy_bwd_kernel[(n,)](logits, dlogits, targets, lse, grad_rows, v, logits.stride(0), grad_stride,
                                        ignore_index, BLOCK_V=block_v, NUM_STAGES=stages, **options)
    return dlogits


@triton.jit
def _scale_kernel(x_ptr, n, scale_ptr, BLOCK: tl.constexpr):
    """x *= scale in place over a flat [n] buffer, scale one fp32 value on the device. Block [BLOCK]; programs
    walk blocks pid, pid + programs, ..., and return at once when scale is 1."""
    scale = tl.load(scale_ptr).to(tl.float32)
    if scale != 1.0:
        lanes = tl.arange(0, BLOCK)
        for start in range(tl.program_id(0).to(tl.int64) * BLOCK, n, tl.num_programs(0) * BLOCK):
            mask = start + lanes < n
            x = tl.load(x_ptr + start + lanes, mask=mask, other=0.0).to(tl.float32)
            tl.store(x_ptr + start + lanes, (x * scale).to(x_ptr.dtype.element_ty), mask=mask)


SCALE_BLOCK = 4096
"""Elements per step of ``_scale_kernel``: 32 per thread over 4 warps (a streaming guess)."""
SCALE_PROGRAMS_PER_SM = 4
"""Programs per SM/CU of ``_scale_kernel`` (a guess: enough loads in flight for a streaming pass)."""


def _scale_in_place(x: torch.Tensor, scale: torch.Tensor) -> None:
    """x *= scale (a one-element device tensor) without reading scale on the host."""
    if x.numel() == 0:
        return
    units = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
    programs = min(triton.cdiv(x.numel(), SCALE_BLOCK), SCALE_PROGRAMS_PER_SM * units)
    _scale_kernel[(programs,)](x, x.numel(), scale.float().reshape(1), BLOCK=SCALE_BLOCK, num_warps=4)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction, config, inplace_backward):
        # Counted on the device: no host sync. Mean over zero valid rows is 0/0 = nan, as in torch.
        num_valid = (targets != ignore_index).sum()
        fused = ctx.needs_input_grad[0] and reduction != "none" and not inplace_backward
        ctx.dlogits = torch.empty_like(logits) if fused else None  # the gradient for an upstream gradient of 1
        loss_rows, lse = cross_entropy_forward(logits, targets, ignore_index, config, dlogits=ctx.dlogits,
                                               valid_rows=num_valid if reduction == "mean" else None)
        ctx.save_for_backward(*(() if fused else (logits, targets, lse, num_valid)))
        ctx.ignore_index, ctx.reduction, ctx.config, ctx.inplace = ignore_index, reduction, config, inplace_backward
        if reduction == "none":
            return loss_rows
        if reduction == "sum":
            return loss_rows.sum()
        return loss_rows.sum() / num_valid

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.reduction != "none" and not ctx.inplace:  # the forward wrote the gradient for grad_out = 1
            dlogits, ctx.dlogits = ctx.dlogits, None
            if dlogits is None:
                raise RuntimeError("cross_entropy: a second backward through the same loss; its gradient was "
                                   "written by the forward and handed out by the first backward "
                                   "(pass inplace_backward=True to recompute it from the logits instead)")
            _scale_in_place(dlogits, grad_out)
            return dlogits, None, None, None, None, None
        logits, targets, lse, num_valid = ctx.saved_tensors
        if ctx.reduction == "none":
            grad_rows = grad_out.float()  # [N]
        elif ctx.reduction == "sum":
            grad_rows = grad_out.float().reshape(1)
        else:
            # With no valid rows this is inf, but every row is ignored, so the kernel writes zeros (as torch does).
            grad_rows = (grad_out.float() / num_valid).reshape(1)
        dlogits = cross_entropy_backward(logits, targets, lse, grad_rows, ctx.ignore_index, ctx.config, ctx.inplace)
        return dlogits, None, None, None, None, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                  reduction: Reduction = "mean", config: dict | None = None, *,
                  inplace_backward: bool = False, check_targets: bool = True) -> torch.Tensor:
    """Cross-entropy of ``logits`` [N, V] (fp32/bf16/fp16) against class ``targets`` [N] (int64 or int32).

    Returns the fp32 loss: per row for ``reduction="none"`` (0 on ignored rows), else its sum, or its mean over
    rows whose target is not ``ignore_index`` (nan when every row is ignored, as torch). Differentiable in
    ``logits``; the gradient comes back in the logits dtype. For "mean" and "sum" the forward writes it (the
    logits are then not kept for the backward: the same N x V memory, held from the forward on; one backward per
    forward). ``inplace_backward=True`` instead writes the gradient into the logits buffer in the backward (saves
    N x V memory; the logits values are gone after backward). ``check_targets=False``
    skips the target range check, the one check that copies a value back from the GPU (a host sync).
    """
    check(isinstance(logits, torch.Tensor), "logits", type(logits).__name__, "a torch.Tensor")
    check(isinstance(targets, torch.Tensor), "targets", type(targets).__name__, "a torch.Tensor")
    check(logits.dim() == 2, "logits", f"shape {tuple(logits.shape)}", "a 2-D tensor [N, V]")
    check(logits.dtype in _LOGIT_DTYPES, "logits", logits.dtype, "float32, bfloat16 or float16")
    n, v = logits.shape
    check(v >= 1, "logits", f"shape {tuple(logits.shape)}", "at least one class (V >= 1)")
    check(targets.dim() == 1 and targets.shape[0] == n, "targets", f"shape {tuple(targets.shape)}",
          f"a 1-D tensor of length N = {n}")
    check(targets.dtype in _TARGET_DTYPES, "targets", targets.dtype, "int64 or int32 class indices")
    check(isinstance(ignore_index, int), "ignore_index", repr(ignore_index), "an int")
    check(reduction in ("mean", "sum", "none"), "reduction", repr(reduction), "'mean', 'sum' or 'none'")
    check_device(logits, targets, names=("logits", "targets"))
    if check_targets and n > 0:
        bad = ((targets < 0) | (targets >= v)) & (targets != ignore_index)
        if bool(bad.any()):
            first = int(bad.nonzero()[0, 0])
            raise KernelInputError(f"targets: got {int(targets[first])} at row {first}, expected a class in "
                                   f"[0, {v}) or ignore_index={ignore_index}")
    if config is None:
        config = config_space(backend())[0]
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    return _CrossEntropy.apply(logits, targets.contiguous(), ignore_index, reduction, config, inplace_backward)


def config_space(backend: str) -> list[dict]:
    """BLOCK_V x num_warps; AMD adds waves_per_eu. The first entry is the default (measured best on the H200).
    ``SPLIT_V`` and ``num_stages`` are optional keys (defaults ``SPLIT_V``, ``NUM_STAGES`` / ``FORWARD_NUM_STAGES``)."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    # fastest forward config at 8192 x 128256 on the H200 (benchmarks/results/h200/kernels/config_sweep.csv)
    default = {"BLOCK_V": 8192, "num_warps": 4}
    space = [{"BLOCK_V": b, "num_warps": w} for b, w in itertools.product((1024, 2048, 4096, 8192), (4, 8, 16))]
    if backend == "hip":
        # waves_per_eu 0 leaves occupancy to the compiler; 1-2 ask for fewer, fatter waves per SIMD.
        default = {**default, "waves_per_eu": 0}
        space = [{**c, "waves_per_eu": e} for c, e in itertools.product(space, (0, 1, 2))]
    return [default] + [c for c in space if c != default]


# Rough per-element operation counts (exp counted as one); they only place the point on the roofline.
_FWD_FLOPS_PER_LOGIT = 4  # max, subtract, exp, add
_BWD_FLOPS_PER_LOGIT = 4  # subtract lse, exp, subtract one-hot, multiply by grad


def flops(rows: int, cols: int, pass_: Pass = "fwd") -> float:
    per = {"fwd": _FWD_FLOPS_PER_LOGIT, "bwd": _BWD_FLOPS_PER_LOGIT,
           "fwd_bwd": _FWD_FLOPS_PER_LOGIT + _BWD_FLOPS_PER_LOGIT}[pass_]
    return float(per * rows * cols)


def bytes_moved(rows: int, cols: int, dtype: str, pass_: Pass = "fwd") -> float:
    """Forward reads the logits once; backward reads them once and writes dlogits once (+ per-row vectors)."""
    a = {"fp32": 4, "bf16": 2, "fp16": 2}[dtype]
    logits = rows * cols * a
    fwd = logits + rows * (8 + 4 + 4)  # targets int64 in, loss and lse fp32 out
    bwd = 2 * logits + rows * (8 + 4 + 4)  # targets, lse, per-row grad in
    return float({"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}[pass_])
