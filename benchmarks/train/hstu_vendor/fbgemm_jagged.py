"""Torch equivalents of the two fbgemm_gpu jagged ops that generative-recommenders' PyTorch HSTU attention calls
(``ops/pytorch/pt_hstu_attention.py``): ``torch.ops.fbgemm.jagged_to_padded_dense`` and
``torch.ops.fbgemm.dense_to_jagged``, for one jagged dimension. Not upstream code: written here because the H200
has no fbgemm_gpu. Registered as CompositeImplicitAutograd ops, so autograd runs through the torch ops below.
The Triton HSTU path (the one timed on the GPU) calls neither; the PyTorch path (CPU dry run, reference rows) does.

    jagged_to_padded_dense(values [L, D], offsets [B + 1], max_lengths [N]) -> dense [B, N, D]
    dense_to_jagged(dense [B, N, D], offsets [B + 1], total_L) -> (values [L, D], offsets)

Schemas follow fbgemm_gpu's ``sparse_ops.cpp`` (``jagged_to_padded_dense``, ``dense_to_jagged``).
"""

from __future__ import annotations

import torch

_LIB: torch.library.Library | None = None


def _positions(offsets: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of the ``total`` jagged rows: its sequence index and its position in that sequence."""
    lengths = offsets[1:] - offsets[:-1]  # [B]
    seq = torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device), lengths, output_size=total)
    pos = torch.arange(total, device=offsets.device) - offsets[:-1].repeat_interleave(lengths, output_size=total)
    return seq, pos


def _jagged_to_padded_dense(values: torch.Tensor, offsets: list[torch.Tensor], max_lengths: list[int],
                            padding_value: float = 0.0) -> torch.Tensor:
    if len(offsets) != 1:
        raise NotImplementedError(f"one jagged dimension only, got {len(offsets)} offsets tensors")
    off, n = offsets[0], int(max_lengths[0])
    total, d = values.shape[0], values.shape[1:]
    seq, pos = _positions(off, total)
    keep = pos < n  # rows past max_length are truncated, as fbgemm does
    flat = seq * n + pos  # [L] row of the [B * N, D] dense
    dense = values.new_full(((off.numel() - 1) * n, *d), padding_value)
    dense = dense.index_put((flat[keep],), values[keep])  # out of place: differentiable in values
    return dense.view(off.numel() - 1, n, *d)


def _dense_to_jagged(dense: torch.Tensor, x_offsets: list[torch.Tensor], total_L: int | None = None
                     ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    if len(x_offsets) != 1:
        raise NotImplementedError(f"one jagged dimension only, got {len(x_offsets)} offsets tensors")
    off = x_offsets[0]
    total = int(off[-1]) if total_L is None else int(total_L)
    seq, pos = _positions(off, total)
    n = dense.shape[1]
    values = dense.reshape(dense.shape[0] * n, *dense.shape[2:])[seq * n + pos]  # [L, D]
    return values, [off]


def register() -> bool:
    """Define ``torch.ops.fbgemm.{jagged_to_padded_dense,dense_to_jagged}`` unless fbgemm_gpu already has;
    returns whether this module defined them."""
    global _LIB
    if _LIB is not None:
        return True
    try:
        torch.ops.fbgemm.jagged_to_padded_dense  # noqa: B018 -- fbgemm_gpu present: keep its kernels
        return False
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("fbgemm", "DEF")
    lib.define("jagged_to_padded_dense(Tensor values, Tensor[] offsets, SymInt[] max_lengths, "
               "float padding_value=0) -> Tensor")
    lib.define("dense_to_jagged(Tensor dense, Tensor[] x_offsets, SymInt? total_L=None) -> (Tensor, Tensor[])")
    lib.impl("jagged_to_padded_dense", _jagged_to_padded_dense, "CompositeImplicitAutograd")
    lib.impl("dense_to_jagged", _dense_to_jagged, "CompositeImplicitAutograd")
    _LIB = lib
    return True
