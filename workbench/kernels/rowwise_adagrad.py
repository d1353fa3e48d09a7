"""Embedding-bag backward fused with the row-wise Adagrad update of the table (FBGEMM's "exact row-wise Adagrad"
for split table-batched embeddings, without its hot-row splitting).

For sum-pooled bags in CSR form (``embedding_bag``'s convention: bag ``b`` holds ``indices[offsets[b]:offsets[b + 1]]``)
the gradient of table row ``r`` is ``g_r = sum of grad_out[bag(i)] over the lookups i with indices[i] == r``, and
row-wise Adagrad keeps one fp32 accumulator per row: ``acc[r] += mean(g_r^2)``, ``w_r -= lr * g_r / (sqrt(acc[r]) + eps)``.

torch's way (``F.embedding_bag(sparse=True)`` + ``coalesce`` + an optimizer over the values) writes one gradient row
per lookup, sorts and sums them, then walks the summed rows three more times and scatters them back with fp32
atomics. Here the host side only sorts the lookups by row (``segment_by_row``: a radix sort of int32 keys, the bag
of each lookup in sorted order, one host sync for the number of distinct rows), and one kernel does the rest: each
program takes ``BLOCK_R`` touched rows, sums their lookups' ``grad_out`` rows in fp32, then updates the rows'
accumulators and weights in place -- one read and one write of each touched row, no per-lookup tensor, no atomics
(each row belongs to exactly one program). A hot row (a tiny table hit by the whole batch) is summed by its program
alone, ``BLOCK_N`` lookups at a time: those programs are the tail.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from workbench.kernels._common import check, check_device, interpreting
from workbench.kernels.reference import reference_rowwise_adagrad  # noqa: F401 - re-exported

# Touched rows per program: BLOCK_R rows gathered side by side, so a program keeps BLOCK_R gradient rows in flight
# even when every row is looked up once (most rows of the large tables). SHORT: lookups a row sums side by side with
# the others (loop steps); a hot row's lookups beyond that are summed BLOCK_N at a time by its program alone (the
# tiny tables a whole batch hits). Guesses, picked by register use on sm_90 (``crosscompile``: BLOCK_R 16, BLOCK_N
# 16, 2 warps: 168 registers, no spills, 6 programs = 96 rows in flight per SM; BLOCK_N 64 or 4 warps hold fewer);
# ``benchmarks/train/dlrm_fused_update_check.py`` times the alternatives on the GPU.
_BLOCK_R = 16
_SHORT = 8
_BLOCK_N = 16
_NUM_WARPS = 2


@triton.jit
def _rowwise_adagrad_kernel(
    weight_ptr,  # [num_rows, D], row stride `stride_weight`, unit column stride; updated in place
    acc_ptr,  # [num_rows] fp32, updated in place
    grad_ptr,  # [bags, D] gradient of the pooled bags, row stride `stride_grad`
    rows_ptr,  # [U] distinct rows, ascending
    segments_ptr,  # [U + 1] int64: row u's lookups are sorted positions segments[u] .. segments[u + 1]
    bags_ptr,  # [L] bag of each lookup, in row-sorted order
    U,
    D,
    stride_weight,
    stride_grad,
    lr,
    eps,
    BLOCK_R: tl.constexpr,
    SHORT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,  # >= D: the row norm needs the whole row in one program
):
    """Program p: rows u = p * BLOCK_R + [0, BLOCK_R). g [BLOCK_R, BLOCK_D] fp32 sums, per step, one gathered
    grad_out row of each row (up to SHORT steps); lookups beyond SHORT of a hot row add [BLOCK_N, BLOCK_D] tiles
    row by row. Then the rows' accumulators [BLOCK_R] and weights [BLOCK_R, BLOCK_D] in place."""
    pid = tl.program_id(0).to(tl.int64)
    slots = tl.arange(0, BLOCK_R)
    u = pid * BLOCK_R + slots  # [BLOCK_R]
    u_mask = u < U
    start = tl.load(segments_ptr + u, mask=u_mask, other=0)
    count = tl.load(segments_ptr + u + 1, mask=u_mask, other=0) - start  # [BLOCK_R]
    cols = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    col_mask = cols < D

    g = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    longest = tl.max(count, axis=0)
    for j in range(tl.minimum(longest, SHORT)):
        active = j < count  # [BLOCK_R]
        bags = tl.load(bags_ptr + start + j, mask=active, other=0).to(tl.int64)
        g += tl.load(grad_ptr + bags[:, None] * stride_grad + cols[None, :],
                     mask=active[:, None] & col_mask[None, :], other=0.0).to(tl.float32)  # [BLOCK_R, BLOCK_D]
    if longest > SHORT:  # hot rows: the lookups past SHORT, row by row (an empty loop for the others)
        for r in range(BLOCK_R):
            in_range = pid * BLOCK_R + r < U
            first = tl.load(segments_ptr + pid * BLOCK_R + r, mask=in_range, other=0)
            last = tl.load(segments_ptr + pid * BLOCK_R + r + 1, mask=in_range, other=0)
            extra = tl.zeros([BLOCK_D], dtype=tl.float32)
            for i in range(first + SHORT, last, BLOCK_N):
                lookup = i + tl.arange(0, BLOCK_N)  # [BLOCK_N] sorted positions
                lookup_mask = lookup < last
                bags = tl.load(bags_ptr + lookup, mask=lookup_mask, other=0).to(tl.int64)
                tile = tl.load(grad_ptr + bags[:, None] * stride_grad + cols[None, :],
                               mask=lookup_mask[:, None] & col_mask[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
                extra += tl.sum(tile.to(tl.float32), axis=0)
            g = tl.where((slots == r)[:, None], g + extra[None, :], g)

    rows = tl.load(rows_ptr + u, mask=u_mask, other=0).to(tl.int64)  # [BLOCK_R]
    acc = tl.load(acc_ptr + rows, mask=u_mask, other=0.0) + tl.sum(g * g, axis=1) / D
    tl.store(acc_ptr + rows, acc, mask=u_mask)
    step = lr / (tl.sqrt(acc) + eps)  # [BLOCK_R]
    w_ptrs = weight_ptr + rows[:, None] * stride_weight + cols[None, :]
    w_mask = u_mask[:, None] & col_mask[None, :]
    w = tl.load(w_ptrs, mask=w_mask, other=0.0).to(tl.float32)
    tl.store(w_ptrs, (w - step[:, None] * g).to(weight_ptr.dtype.element_ty), mask=w_mask)


def segment_by_row(indices: torch.Tensor, offsets: torch.Tensor, num_rows: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lookups grouped by row: (rows [U] ascending, segments [U + 1] int64 CSR into the sorted lookups, bags [L]:
    the bag of each lookup in that order). One host sync (``unique_consecutive`` returns U)."""
    lookups, num_bags = indices.shape[0], offsets.shape[0] - 1
    bag_of_lookup = torch.repeat_interleave(torch.arange(num_bags, device=indices.device), offsets.diff(),
                                            output_size=lookups)  # [L]
    keys = indices.to(torch.int32) if num_rows <= torch.iinfo(torch.int32).max else indices  # half the sort bytes
    sorted_rows, order = torch.sort(keys)  # [L], [L] int64
    rows, counts = torch.unique_consecutive(sorted_rows, return_counts=True)  # [U], [U]: the host sync
    segments = torch.zeros(rows.shape[0] + 1, dtype=torch.int64, device=indices.device)
    torch.cumsum(counts, 0, out=segments[1:])
    return rows, segments, bag_of_lookup[order]


def rowwise_adagrad_update(weight: torch.Tensor, acc: torch.Tensor, grad_out: torch.Tensor, indices: torch.Tensor,
                           offsets: torch.Tensor, lr: float, eps: float = 1e-8, config: dict | None = None,
                           *, use_triton: bool | None = None) -> None:
    """In place: row-wise Adagrad on ``weight`` [num_rows, D] and ``acc`` [num_rows] (fp32) for the gradient of
    ``embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True)`` given ``grad_out`` [bags, D].

    ``use_triton``: the fused kernel (default on a GPU or under the interpreter); else the same algorithm in torch
    ops (``embedding_bag`` over ``grad_out`` sums each row's lookups, then the [U] and [U, D] update)."""
    check(weight.dim() == 2 and weight.stride(1) == 1, "weight", f"shape {tuple(weight.shape)}, strides "
          f"{weight.stride()}", "a [num_rows, D] tensor with unit column stride")
    check(acc.shape == (weight.shape[0],) and acc.dtype == torch.float32, "acc", f"{tuple(acc.shape)} {acc.dtype}",
          f"float32 [{weight.shape[0]}]")
    check(grad_out.dim() == 2 and grad_out.shape == (offsets.shape[0] - 1, weight.shape[1]), "grad_out",
          f"shape {tuple(grad_out.shape)}", f"[{offsets.shape[0] - 1}, {weight.shape[1]}] (bags, D)")
    if indices.numel() == 0:
        return
    if grad_out.stride(1) != 1:
        grad_out = grad_out.contiguous()
    rows, segments, bags = segment_by_row(indices, offsets, weight.shape[0])
    if use_triton is None:
        use_triton = weight.is_cuda or interpreting()
    if not use_triton:
        g = F.embedding_bag(bags, grad_out.float(), segments, mode="sum", include_last_offset=True)  # [U, D]
        new_acc = acc[rows] + g.square().sum(1) / g.shape[1]  # [U]
        acc[rows] = new_acc
        weight.index_add_(0, rows, (g * (-lr / (new_acc.sqrt() + eps)).unsqueeze(1)).to(weight.dtype))  # rows distinct
        return
    check_device(weight, acc, grad_out, indices, names=("weight", "acc", "grad_out", "indices"))
    config = config or config_space()[0]
    dim = weight.shape[1]
    unique, block_r = rows.shape[0], config.get("BLOCK_R", _BLOCK_R)
    _rowwise_adagrad_kernel[(triton.cdiv(unique, block_r),)](
        weight, acc, grad_out, rows, segments, bags, unique, dim, weight.stride(0), grad_out.stride(0), float(lr),
        float(eps), BLOCK_R=block_r, SHORT=config.get("SHORT", _SHORT), BLOCK_N=config.get("BLOCK_N", _BLOCK_N),
        BLOCK_D=triton.next_power_of_2(dim), num_warps=config.get("num_warps", _NUM_WARPS))


def config_space() -> list[dict]:
    """BLOCK_R x SHORT x num_warps (BLOCK_N fixed; BLOCK_D is the row, rounded up to a power of two). First entry:
    the default, a guess."""
    default = {"BLOCK_R": _BLOCK_R, "SHORT": _SHORT, "BLOCK_N": _BLOCK_N, "num_warps": _NUM_WARPS}
    space = [{"BLOCK_R": r, "SHORT": s, "BLOCK_N": _BLOCK_N, "num_warps": w}
             for r in (4, 8, 16, 32) for s in (4, 8, 16) for w in (1, 2, 4, 8)]
    return [default] + [c for c in space if c != default]


def bytes_moved(lookups: int, rows: int, dim: int, grad_bytes: int = 4, weight_bytes: int = 4) -> float:
    """The fused kernel's traffic: per lookup its bag id (8 B) and a gathered grad_out row; per touched row its id
    (4 B), segment bound (8 B), accumulator read + write (8 B) and the weight row read + written."""
    return float(lookups * (8 + dim * grad_bytes) + rows * (4 + 8 + 8 + 2 * dim * weight_bytes))
