"""Embedding bag with sum pooling (recsys: DLRM's sparse features).

Bags come in CSR form, torch's ``include_last_offset=True`` convention: bag ``b`` holds
``indices[offsets[b]:offsets[b + 1]]``, so ``offsets`` has B + 1 entries, starts at 0 and ends at ``len(indices)``.
Forward: one program per (bag, D-block) gathers the bag's rows ``BLOCK_N`` at a time and sums them, optionally
weighted by ``per_sample_weights``, in fp32. Backward: the same grid scatters ``grad_out[b] * w_i`` into a dense
fp32 ``dweight`` with atomic adds (indices may repeat within and across bags), then casts to the weight dtype.
"""

from __future__ import annotations

import functools
import itertools
from typing import Literal

import torch
import triton
import triton.language as tl

from workbench.kernels._common import KernelInputError, backend, check, check_device, needs_grad
from workbench.kernels.reference import (  # noqa: F401 - re-exported
    reference_embedding_bag,
    reference_embedding_bag_grad,
)

Pass = Literal["fwd", "bwd", "fwd_bwd"]

_WEIGHT_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_INDEX_DTYPES = (torch.int64, torch.int32)

# Rows gathered per loop step: BLOCK_N independent row loads in flight per program. A guess (16 rows x 512 B at
# D = 128 fp32); calibrate on the GPU next to BLOCK_D and num_warps.
_BLOCK_N = 16


@triton.jit
def _embedding_bag_fwd_kernel(
    weight_ptr,  # [num_rows, D], row stride `stride_weight`, unit column stride
    indices_ptr,  # [total] int
    offsets_ptr,  # [B + 1] int, CSR bag boundaries
    sample_weights_ptr,  # [total] float (unused unless HAS_SAMPLE_WEIGHTS)
    out_ptr,  # [B, D] out, row stride `stride_out`
    D,
    stride_weight,
    stride_out,
    HAS_SAMPLE_WEIGHTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program (bag, d_block); per step a [BLOCK_N, BLOCK_D] tile of gathered rows, summed into [BLOCK_D] fp32."""
    bag = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # [BLOCK_D]
    col_mask = cols < D
    start = tl.load(offsets_ptr + bag).to(tl.int64)
    end = tl.load(offsets_ptr + bag + 1).to(tl.int64)

    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for i in range(start, end, BLOCK_N):
        lookup = i + tl.arange(0, BLOCK_N)  # [BLOCK_N] positions in indices
        row_mask = lookup < end
        rows = tl.load(indices_ptr + lookup, mask=row_mask, other=0).to(tl.int64)
        tile_mask = row_mask[:, None] & col_mask[None, :]
        tile = tl.load(weight_ptr + rows[:, None] * stride_weight + cols[None, :], mask=tile_mask,
                       other=0.0).to(tl.float32)  # tile: [BLOCK_N, BLOCK_D]
        if HAS_SAMPLE_WEIGHTS:
            w = tl.load(sample_weights_ptr + lookup, mask=row_mask, other=0.0).to(tl.float32)  # [BLOCK_N]
            tile = tile * w[:, None]
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + bag * stride_out + cols, acc.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _embedding_bag_bwd_kernel(
    grad_out_ptr,  # [B, D], row stride `stride_grad_out`
    indices_ptr,  # [total] int
    offsets_ptr,  # [B + 1] int
    sample_weights_ptr,  # [total] float (unused unless HAS_SAMPLE_WEIGHTS)
    dweight_ptr,  # [num_rows, D] fp32, zero-initialised, contiguous (row stride D)
    D,
    stride_grad_out,
    HAS_SAMPLE_WEIGHTS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program (bag, d_block); per step atomically adds a [BLOCK_N, BLOCK_D] tile into dweight's gathered rows."""
    bag = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # [BLOCK_D]
    col_mask = cols < D
    start = tl.load(offsets_ptr + bag).to(tl.int64)
    end = tl.load(offsets_ptr + bag + 1).to(tl.int64)
    grad = tl.load(grad_out_ptr + bag * stride_grad_out + cols, mask=col_mask, other=0.0).to(tl.float32)

    for i in range(start, end, BLOCK_N):
        lookup = i + tl.arange(0, BLOCK_N)
        row_mask = lookup < end
        rows = tl.load(indices_ptr + lookup, mask=row_mask, other=0).to(tl.int64)
        tile = tl.broadcast_to(grad[None, :], (BLOCK_N, BLOCK_D))  # tile: [BLOCK_N, BLOCK_D]
        if HAS_SAMPLE_WEIGHTS:
            w = tl.load(sample_weights_ptr + lookup, mask=row_mask, other=0.0).to(tl.float32)
            tile = tile * w[:, None]
        # Each element is its own atomic, so a row repeated inside one tile is added once per occurrence.
        tl.atomic_add(dweight_ptr + rows[:, None] * D + cols[None, :], tile,
                      mask=row_mask[:, None] & col_mask[None, :], sem="relaxed")


def _launch_options(config: dict) -> tuple[int, int, dict]:
    """Split a config into BLOCK_N, BLOCK_D and the compiler options (num_warps, and waves_per_eu on AMD)."""
    unknown = set(config) - {"BLOCK_N", "BLOCK_D", "num_warps", "num_stages", "waves_per_eu"}
    check(not unknown, "config", sorted(unknown), "only BLOCK_N, BLOCK_D, num_warps, num_stages, waves_per_eu")
    block_n, block_d = config.get("BLOCK_N", _BLOCK_N), config.get("BLOCK_D")
    for name, value in (("BLOCK_N", block_n), ("BLOCK_D", block_d)):
        check(isinstance(value, int) and value > 0 and value & (value - 1) == 0, f"config['{name}']", value,
              "a power of two")
    options = {k: v for k, v in config.items() if k in ("num_warps", "num_stages", "waves_per_eu")}
    return block_n, block_d, options


def embedding_bag_forward(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                          per_sample_weights: torch.Tensor | None, config: dict) -> torch.Tensor:
    """out [B, D] in the weight dtype, fp32 accumulation. Inputs already checked; weight has unit column stride."""
    num_bags, dim = offsets.shape[0] - 1, weight.shape[1]
    block_n, block_d, options = _launch_options(config)
    out = torch.empty(num_bags, dim, dtype=weight.dtype, device=weight.device)
    if num_bags == 0 or dim == 0:
        return out
    if indices.numel() == 0:  # every bag empty
        return out.zero_()
    has_weights = per_sample_weights is not None
    grid = (num_bags, triton.cdiv(dim, block_d))
    _embedding_bag_fwd_kernel[grid](weight, indices, offsets, per_sample_weights if has_weights else indices, out,
                                    dim, weight.stride(0), out.stride(0), HAS_SAMPLE_WEIGHTS=has_weights,
                                    BLOCK_N=block_n, BLOCK_D=block_d, **options)
    return out


def embedding_bag_backward(grad_out: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                           per_sample_weights: torch.Tensor | None, num_rows: int, config: dict) -> torch.Tensor:
    """Dense dweight [num_rows, D] in fp32 (the caller casts); grad_out [B, D] with unit column stride."""
    num_bags, dim = grad_out.shape
    block_n, block_d, options = _launch_options(config)
    dweight = torch.zeros(num_rows, dim, dtype=torch.float32, device=grad_out.device)
    if num_bags == 0 or dim == 0 or indices.numel() == 0:
        return dweight
    has_weights = per_sample_weights is not None
    grid = (num_bags, triton.cdiv(dim, block_d))
    _embedding_bag_bwd_kernel[grid](grad_out, indices, offsets, per_sample_weights if has_weights else indices,
                                    dweight, dim, grad_out.stride(0), HAS_SAMPLE_WEIGHTS=has_weights,
                                    BLOCK_N=block_n, BLOCK_D=block_d, **options)
    return dweight


class _EmbeddingBag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, indices, offsets, per_sample_weights, config):
        ctx.save_for_backward(weight, indices, offsets, per_sample_weights)
        ctx.config = config
        return embedding_bag_forward(weight, indices, offsets, per_sample_weights, config)

    @staticmethod
    def backward(ctx, grad_out):
        weight, indices, offsets, per_sample_weights = ctx.saved_tensors
        if grad_out.stride(-1) != 1:
            grad_out = grad_out.contiguous()
        dweight = dsample_weights = None
        if ctx.needs_input_grad[0]:
            dweight = embedding_bag_backward(grad_out, indices, offsets, per_sample_weights, weight.shape[0],
                                             ctx.config).to(weight.dtype)
        if ctx.needs_input_grad[3]:
            # d out[b] / d w_i = weight[indices[i]]: a row-wise dot, done with torch ops (gather + reduce).
            bag_of_lookup = torch.repeat_interleave(torch.arange(offsets.shape[0] - 1, device=offsets.device),
                                                    offsets.diff(), output_size=indices.shape[0])
            dsample_weights = (weight[indices].float() * grad_out[bag_of_lookup].float()).sum(1)
            dsample_weights = dsample_weights.to(per_sample_weights.dtype)
        return dweight, None, None, dsample_weights, None


def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                  per_sample_weights: torch.Tensor | None = None, config: dict | None = None, *,
                  check_values: bool = True) -> torch.Tensor:
    """Per-bag sums of ``weight`` [num_rows, D] rows: out [B, D] in the weight dtype.

    ``indices`` [total] and ``offsets`` [B + 1] (int64 or int32) are CSR bags as in
    ``F.embedding_bag(..., mode="sum", include_last_offset=True)``; an empty bag sums to zeros.
    ``per_sample_weights`` [total] scales each looked-up row. Differentiable in ``weight`` (dense gradient) and
    ``per_sample_weights``. ``check_values=False`` skips the checks that read values back from the GPU (offsets
    monotonic and ending at ``len(indices)``, indices in range): one host sync.
    """
    for name, t in (("weight", weight), ("indices", indices), ("offsets", offsets)):
        check(isinstance(t, torch.Tensor), name, type(t).__name__, "a torch.Tensor")
    check(weight.dim() == 2, "weight", f"shape {tuple(weight.shape)}", "a 2-D tensor [num_rows, D]")
    check(weight.dtype in _WEIGHT_DTYPES, "weight", weight.dtype, "float32, bfloat16 or float16")
    check(indices.dim() == 1, "indices", f"shape {tuple(indices.shape)}", "a 1-D tensor [total]")
    check(indices.dtype in _INDEX_DTYPES, "indices", indices.dtype, "int64 or int32")
    check(offsets.dim() == 1 and offsets.shape[0] >= 1, "offsets", f"shape {tuple(offsets.shape)}",
          "a 1-D tensor of B + 1 bag boundaries (include_last_offset=True)")
    check(offsets.dtype in _INDEX_DTYPES, "offsets", offsets.dtype, "int64 or int32")
    tensors, names = [weight, indices, offsets], ["weight", "indices", "offsets"]
    if per_sample_weights is not None:
        check(isinstance(per_sample_weights, torch.Tensor), "per_sample_weights", type(per_sample_weights).__name__,
              "a torch.Tensor or None")
        check(per_sample_weights.shape == indices.shape, "per_sample_weights",
              f"shape {tuple(per_sample_weights.shape)}", f"the shape of indices {tuple(indices.shape)}")
        check(per_sample_weights.dtype in _WEIGHT_DTYPES, "per_sample_weights", per_sample_weights.dtype,
              "float32, bfloat16 or float16")
        tensors.append(per_sample_weights)
        names.append("per_sample_weights")
    check_device(*tensors, names=tuple(names))
    if check_values:
        _check_bags(weight.shape[0], indices, offsets)
    if config is None:
        config = _default_config(backend())
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    if per_sample_weights is not None:
        per_sample_weights = per_sample_weights.contiguous()
    indices, offsets = indices.contiguous(), offsets.contiguous()
    if not needs_grad(weight, per_sample_weights):
        # No gradient wanted: launch directly. autograd.Function.apply costs ~25 us of host time, which is
        # a third of a small lookup's whole kernel (the H200's pooling-1 forward runs in ~85 us).
        return embedding_bag_forward(weight, indices, offsets, per_sample_weights, config)
    return _EmbeddingBag.apply(weight, indices, offsets, per_sample_weights, config)


@functools.lru_cache(maxsize=None)
def _default_config(backend_name: str) -> dict:
    """``config_space(backend)[0]``, built once per backend (the wrapper runs on every launch); read only."""
    return config_space(backend_name)[0]


def _check_bags(num_rows: int, indices: torch.Tensor, offsets: torch.Tensor) -> None:
    """The value checks: offsets start at 0, never decrease, end at len(indices); indices in [0, num_rows).

    The four facts are gathered on the device and read back together (one host sync); only a failure reads more.
    """
    total = indices.shape[0]
    steps = offsets.diff()
    bad_index = (indices < 0) | (indices >= num_rows)
    first, last, decreasing, out_of_range = torch.stack([
        offsets[0].long(), offsets[-1].long(), (steps < 0).any().long(), bad_index.any().long()]).tolist()
    check(first == 0, "offsets", f"offsets[0] = {first}", "0 (the first bag starts at the first index)")
    check(last == total, "offsets", f"offsets[-1] = {last}", f"len(indices) = {total} (include_last_offset=True)")
    if decreasing:
        b = int((steps < 0).nonzero()[0, 0])
        raise KernelInputError(f"offsets: got offsets[{b}] = {int(offsets[b])} > offsets[{b + 1}] = "
                               f"{int(offsets[b + 1])}, expected non-decreasing bag boundaries")
    if out_of_range:
        i = int(bad_index.nonzero()[0, 0])
        raise KernelInputError(f"indices: got {int(indices[i])} at position {i}, expected a row in "
                               f"[0, {num_rows}) of weight")


def config_space(backend: str) -> list[dict]:
    """BLOCK_D x num_warps (BLOCK_N fixed); AMD adds waves_per_eu. First entry is the default, a guess for D 128."""
    check(backend in ("cuda", "hip", "interpreter"), "backend", repr(backend), "'cuda', 'hip' or 'interpreter'")
    # best geometric mean over the DLRM forward cases on the H200 (benchmarks/results/h200/kernels/config_sweep.csv)
    default = {"BLOCK_N": _BLOCK_N, "BLOCK_D": 64, "num_warps": 2}
    space = [{"BLOCK_N": _BLOCK_N, "BLOCK_D": d, "num_warps": w}
             for d, w in itertools.product((32, 64, 128, 256), (1, 2, 4, 8))]
    if backend == "hip":
        default = {**default, "waves_per_eu": 0}
        space = [{**c, "waves_per_eu": e} for c, e in itertools.product(space, (0, 1, 2))]
    return [default] + [c for c in space if c != default]


def flops(lookups: int, dim: int, pass_: Pass = "fwd", weighted: bool = False) -> float:
    """One add per gathered element (two with a per-sample multiply); backward the same on the scatter side."""
    per = 2 if weighted else 1
    return float(per * lookups * dim * {"fwd": 1, "bwd": 1, "fwd_bwd": 2}[pass_])


def bytes_moved(lookups: int, bags: int, dim: int, dtype: str, pass_: Pass = "fwd", num_rows: int = 0,
                weighted: bool = False) -> float:
    """Forward: gathered rows (lookups x D) + indices + offsets (+ sample weights) in, B x D out.

    Backward: grad_out (B x D), indices, offsets in; per lookup an fp32 atomic read-modify-write of D values; the
    dense fp32 dweight zero-fill (num_rows x D), and for non-fp32 weights the cast to the weight dtype.
    """
    a = {"fp32": 4, "bf16": 2, "fp16": 2}[dtype]
    index_bytes = lookups * 8 + (bags + 1) * 8 + (lookups * a if weighted else 0)
    fwd = lookups * dim * a + index_bytes + bags * dim * a
    dense = num_rows * dim * 4 + (num_rows * dim * (4 + a) if dtype != "fp32" else 0)
    bwd = bags * dim * a + index_bytes + 2 * lookups * dim * 4 + dense
    return float({"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}[pass_])
