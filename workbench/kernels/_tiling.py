"""Tiling and TMA helpers every kernel shares: the grouped tile order, block-size checks, TMA alignment and the
global-scratch allocator of device-built tensor descriptors.

``grouped_tile`` is the "grouped ordering" of Triton's matmul tutorial: consecutive program (or tile) ids walk down
GROUP_M tile rows before moving one tile column right, so tiles that run at the same time share A row panels and
B column panels in L2. It is written once, as plain Python (``_grouped_tile``: integer arithmetic and the builtin
``min``, which Triton and Gluon both lower to ``minimum``), and compiled twice: ``grouped_tile`` for ``@triton.jit``
kernels (``gemm.py``, ``gemm_tma.py``) and ``grouped_tile_gluon`` for ``@gluon.jit`` ones (``gemm_gluon.py``: a
Gluon kernel calls only Gluon functions).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl  # noqa: F401 - the interpreter looks for it among a jit function's globals

from workbench.kernels._common import interpreting
from workbench.kernels.spaces import TMA_OPERAND_ALIGN_BYTES

try:  # Gluon: Triton >= 3.5
    from triton.experimental import gluon
except ImportError:  # pragma: no cover - older Triton
    gluon = None

TMA_ALIGN_BYTES = TMA_OPERAND_ALIGN_BYTES
"""Base address and outer-stride alignment TMA requires (CUDA driver API, cuTensorMapEncodeTiled)."""


def _grouped_tile(tile, tiles_m, tiles_n, GROUP_M):
    """(pid_m, pid_n) of output tile ``tile`` of a tiles_m x tiles_n grid in grouped order (GROUP_M: constexpr)."""
    tiles_per_group = GROUP_M * tiles_n
    first_m = (tile // tiles_per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)  # the last group may be short
    pid_m = first_m + (tile % tiles_per_group) % rows_in_group
    pid_n = (tile % tiles_per_group) // rows_in_group
    return pid_m, pid_n


grouped_tile = triton.jit(_grouped_tile)
grouped_tile_gluon = gluon.jit(_grouped_tile) if gluon is not None else None


def is_power_of_two(value, low: int = 1, high: int | None = None) -> bool:
    """Whether a block size is an int power of two in [low, high] (tl.arange and tl.dot take only those)."""
    return (isinstance(value, int) and value >= low and (high is None or value <= high)
            and value & (value - 1) == 0)


def tma_aligned(value: int) -> bool:
    """Whether a byte count or address is TMA-aligned (TMA_ALIGN_BYTES)."""
    return value % TMA_ALIGN_BYTES == 0


def _torch_allocator(size: int, alignment: int, stream):
    """Global scratch for device-built descriptors (128 bytes per program), from torch's caching allocator."""
    return torch.empty(size, dtype=torch.int8, device="cpu" if interpreting() else "cuda")


def use_torch_allocator() -> None:
    """Make ``_torch_allocator`` Triton's allocator for the global scratch of device-built tensor descriptors
    (``tl.make_tensor_descriptor``). ``triton.set_allocator`` keeps it in a ``ContextVar``
    (``triton.runtime._allocation``), so the setting is thread-local (and per asyncio context): a launch from
    another thread does not see it. The wrappers therefore call this before every launch that needs scratch (a
    ContextVar set, well under a microsecond)."""
    triton.set_allocator(_torch_allocator)
