"""Tiling helpers the Triton GEMM kernels share (``gemm.py``, ``gemm_tma.py``).

``grouped_tile`` is the "grouped ordering" of Triton's matmul tutorial: consecutive program (or tile) ids walk down
GROUP_M tile rows before moving one tile column right, so tiles that run at the same time share A row panels and
B column panels in L2. The Gluon kernel (``gemm_gluon.py``) keeps a ``gl`` copy: a ``@gluon.jit`` kernel calls only
Gluon functions.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile ``tile`` of a tiles_m x tiles_n grid in grouped order."""
    tiles_per_group = GROUP_M * tiles_n
    first_m = (tile // tiles_per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)  # the last group may be short
    pid_m = first_m + (tile % tiles_per_group) % rows_in_group
    pid_n = (tile % tiles_per_group) // rows_in_group
    return pid_m, pid_n
