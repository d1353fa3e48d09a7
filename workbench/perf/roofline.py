"""The roofline bound of an op (Williams, Waterman, Patterson 2009): max(FLOPs / peak, bytes / bandwidth) at
the datasheet peaks. No achievable-fraction or overhead enters it; every model prediction is at least this.
"""

from __future__ import annotations

from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.precision import get_precision


def matrix_peak_key(op: Op) -> str:
    return get_precision(op.dtype).peak_key


def compute_peak_flops(op: Op, gpu: GPU) -> float:
    """The roof an op's FLOPs run against: the matrix peak for GEMM/attention, fp32 vector math otherwise."""
    key = matrix_peak_key(op) if op.kind in ("gemm", "attention") else "fp32"
    return gpu.peak_tflops(key) * 1e12


def roofline_time(op: Op, gpu: GPU) -> float:
    """Seconds at the roofline bound (peak compute, peak HBM bandwidth)."""
    return Roofs(gpu).time(op)


class Roofs:
    """``roofline_time`` for many ops of one GPU: its roofs looked up once per dtype, not once per op (``op_time``
    keeps one per GPU and constants: ``efficiency.derived``). ``constants`` is not read: the roofline has none."""

    __slots__ = ("gpu", "bandwidth", "peaks")

    def __init__(self, gpu: GPU, constants: object = None):
        self.gpu = gpu
        self.bandwidth = gpu.hbm_bandwidth_tb_s.value * 1e12
        self.peaks: dict[str | None, float] = {}
        """``compute_peak_flops`` by op dtype for GEMM and attention, under None for every other op (fp32 vector
        math), filled as ops come."""

    def time(self, op: Op) -> float:
        """Seconds at the roofline bound (peak compute, peak HBM bandwidth)."""
        key = op.dtype if op.kind in ("gemm", "attention") else None
        peak = self.peaks.get(key)
        if peak is None:
            peak = self.peaks[key] = compute_peak_flops(op, self.gpu)
        compute = op.flops / peak
        memory = op.bytes / self.bandwidth
        return max(compute, memory)


def roofline_bound(op: Op, gpu: GPU) -> str:
    compute = op.flops / compute_peak_flops(op, gpu)
    memory = op.bytes / (gpu.hbm_bandwidth_tb_s.value * 1e12)
    return "compute" if compute >= memory else "memory"


def achievable_roofs(gpu: GPU, constants, peak_keys, memory_dtype: str) -> tuple[dict[str, float], float]:
    """({peak key: achievable TFLOP/s}, achievable HBM TB/s) under ``constants`` (e.g. a calibration profile's):
    each peak times the large-GEMM fraction ``gemm_fraction.<key>``, the bandwidth times the copy kernel's
    ``memory_fraction.copy.<dtype>``. The roofs that measured points should meet, below the datasheet's."""
    peaks = {key: gpu.peak_tflops(key) * constants[f"gemm_fraction.{key}"] for key in peak_keys}
    return peaks, gpu.hbm_bandwidth_tb_s.value * constants[f"memory_fraction.copy.{memory_dtype}"]
