"""Host (CPU) time per call of each GEMM path, and the per-call price a runtime pick ranks by.

The selector's time model (``workbench.select.gemm``) predicts GPU time: its profile is fitted on CUDA-graph timings
(``benchmarks/select/select_sweep.py``, ``time_graph``: the graph hides the Python launch cost). A call from Python
costs the host its wrapper's time as well, and that differs by path: on the lent H200 host of 2026-12-04, after the
direct launches and the descriptor maps (``workbench.kernels._launch``), ~18 us through gemm.py, ~31 us for its
split-K (two launches), ~22-23 us through the TMA and Gluon kernels, ~17-19 us for torch.matmul / torch._scaled_mm
(``host_call_us.*``: the least of three runs). Calls are
asynchronous: the host issues the next call while the GPU runs this one, so back-to-back calls run at

    per-call time = max(GPU time, host time)

(``benchmarks/kernels/broad_shapes.py``'s burst: "host-bound when they meet"). That is the price ``config=None``
(``select.config_for_device``) and the per-vendor shim (``dispatch.gemm_choice``) rank by. The sum would be the
latency of one isolated call that is waited on, which neither the benchmarks (do_bench issues each timed call
behind its L2 flush, so the host's time overlaps the GPU's) nor a training step's stream of launches sees. For a
GEMM whose GPU time exceeds every path's host time (every large GEMM) the price is its GPU time and the pick is
unchanged; a small one goes to the path that is cheapest to launch once every path is host-bound.

The host times are a property of the machine (CPU, Python, driver), not of the GPU: ``host_call_us.<path>`` in
specs/efficiency.yaml (``.fp8`` for the scaled_matmul calls), measured on the lent H200 host; a GPU's calibration
profile (``specs/calibration/<gpu>.yaml``, ``constants``) may override them.
"""

from __future__ import annotations

from workbench.hardware import GPU
from workbench.kernels.spaces import is_gluon, is_split_k, is_tma
from workbench.perf.efficiency import Constants, constants_for, profile_path

HOST_PATHS = ("gemm", "gemm_split_k", "tma", "gluon", "vendor")
"""The calls whose host time is priced: gemm.py (one launch), gemm.py split-K (two), the TMA and Gluon kernels,
and the vendor library (torch.matmul / torch._scaled_mm)."""


def host_path(config: dict) -> str:
    """The path (``HOST_PATHS``) a Triton GEMM config launches through."""
    if is_gluon(config):
        return "gluon"
    if is_tma(config):
        return "tma"
    return "gemm_split_k" if is_split_k(config) else "gemm"


def host_constants(gpu: GPU, calibrated: bool = True) -> Constants:
    """The constants the host times come from: specs/efficiency.yaml, under ``gpu``'s calibration profile when
    ``calibrated`` and it has one."""
    return constants_for(gpu, calibrated and profile_path(gpu).exists())


def host_call_s(path: str, dtype: str, constants: Constants) -> float:
    """Host seconds per call of ``path`` for a ``dtype`` GEMM (``host_call_us.<path>.<dtype>``, falling back to
    ``host_call_us.<path>``)."""
    if path not in HOST_PATHS:
        raise ValueError(f"path: got {path!r}, expected one of {HOST_PATHS}")
    return constants[f"host_call_us.{path}.{dtype}"] * 1e-6


def per_call_s(gpu_s: float, host_s: float) -> float:
    """What one of many back-to-back asynchronous calls costs: the slower of the GPU and the host."""
    return max(gpu_s, host_s)
