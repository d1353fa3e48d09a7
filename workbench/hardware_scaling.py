"""One figure of a GPU scaled: the what-if GPUs of the monotonicity checks (more of any resource never makes a step
slower; ``benchmarks/model/monotonicity_sweep.py`` over a grid, ``tests/perf/test_properties.py`` by hypothesis).

``resource_fields`` lists every numeric figure of ``workbench.hardware.GPU`` as a dotted name, built from the
dataclass (a new numeric field is swept, or must be named in ``GRANULES``); ``scaled`` multiplies one of them.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.hardware import GPU, Figure

GRANULES: dict[str, str] = {
    "compute_units_alone": "at a fixed peak, more units are slower units: wave quantization may only get worse",
    "warp_size": "threads per warp: a granule, not an amount (unused by the time model)",
    "matrix_instruction_mnk": "the matrix instruction's M x N x K step: larger is coarser padding, not more of anything",
}
"""Numeric figures of the GPU file that are not an amount of a resource, and why."""


def resource_fields(gpu: GPU) -> list[str]:
    """Every numeric figure of ``gpu`` as a dotted name (``peak_dense_tflops.bf16``, ``measured.hbm_bandwidth_tb_s``,
    ...), granules left out. Built from the dataclass, so a new numeric field is swept (or must be named a granule)
    without editing this list; a numeric field that is neither raises."""
    names = []
    for f in dataclasses.fields(GPU):
        value = getattr(gpu, f.name)
        if isinstance(value, Figure):
            entries = {f.name: value}
        elif isinstance(value, dict) and value and all(isinstance(v, Figure) for v in value.values()):
            entries = {f"{f.name}.{k}": v for k, v in value.items()}
        else:
            continue  # names, formats, aliases, the year, the origin: not figures
        for name, figure in entries.items():
            numeric = isinstance(figure.value, (int, float)) and not isinstance(figure.value, bool)
            if name in GRANULES:
                continue
            if not numeric:
                if f.name not in GRANULES and f.name != "matrix_k_major_only":  # a list of precision keys
                    raise TypeError(f"GPU.{name}: a figure of type {type(figure.value).__name__} neither swept nor "
                                    "named a granule")
                continue
            names.append(name)
    return names


def _times(figure: Figure, factor: float, integer: bool = False) -> Figure:
    value = figure.value * factor
    return dataclasses.replace(figure, value=max(figure.value + 1, math.ceil(value)) if integer else value)


def _with_peaks(gpu: GPU, factors: dict[str, float]) -> dict:
    """The fields of ``gpu`` with the dense peaks of ``factors`` scaled, and its measured matmul ceilings of the
    same precisions with them: a GPU with more FLOP/s reaches the same share of them (the GEMM fractions are
    measured ceiling / peak, ``workbench.perf.efficiency.measured_gemm_fractions``)."""
    def ceiling(key: str, figure: Figure) -> Figure:
        precision = key.removeprefix("matmul_tflops.")
        return _times(figure, factors[precision]) if key != precision and precision in factors else figure

    peaks = {k: _times(v, factors[k]) if k in factors else v for k, v in gpu.peak_dense_tflops.items()}
    return {"peak_dense_tflops": peaks, "measured": {k: ceiling(k, v) for k, v in gpu.measured.items()}}


def with_peaks_scaled(gpu: GPU, factor: float) -> GPU:
    """``gpu`` with every dense peak, and the measured matmul ceiling of each, times ``factor`` (``_with_peaks``)."""
    return dataclasses.replace(gpu, **_with_peaks(gpu, dict.fromkeys(gpu.peak_dense_tflops, factor)))


def scaled(gpu: GPU, field: str, factor: float) -> GPU:
    """``gpu`` with one figure ``field`` (a ``resource_fields`` name, or ``compute_units_alone``) times ``factor``;
    integer figures round up to at least one more."""
    if field in ("compute_units", "compute_units_alone"):
        units = _times(gpu.compute_units, factor, integer=True)
        if field == "compute_units_alone":
            return dataclasses.replace(gpu, compute_units=units)
        ratio = units.value / gpu.compute_units.value  # more units of the same kind: the peaks grow with them
        peaks_and_ceilings = _with_peaks(gpu, dict.fromkeys(gpu.peak_dense_tflops, ratio))
        return dataclasses.replace(gpu, compute_units=units, **peaks_and_ceilings)
    top, _, key = field.partition(".")
    value = getattr(gpu, top)
    if top == "peak_dense_tflops":
        return dataclasses.replace(gpu, **_with_peaks(gpu, {key: factor}))
    if key:
        return dataclasses.replace(gpu, **{top: {**value, key: _times(value[key], factor)}})
    integer = isinstance(value.value, int) and not isinstance(value.value, bool)
    return dataclasses.replace(gpu, **{top: _times(value, factor, integer)})
