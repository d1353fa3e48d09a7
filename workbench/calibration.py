"""Fit the time model's per-GPU constants to measured rows, and write them as a calibration profile.

Rows are the ``predict-ops`` format plus ``measured_ms``. Each constant the rows inform is fitted by coordinate
descent (golden-section search in log space, a few sweeps) minimising the mean absolute percentage error of
the rows it affects; constants no row informs keep their defaults. The profile lists only fitted values.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.errors import WorkbenchError
from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.perf import op_time
from workbench.perf.efficiency import Constants, default_constants, profile_path
from workbench.perf.gemm import is_aligned, needs_layout_fixup, unaligned_width
from workbench.precision import get_precision
from workbench.rows import op_class, row_to_op
from workbench.schema import write_atomic

# (lower, upper) search bounds per constant family
_BOUNDS = {
    "gemm_fraction": (0.05, 1.0),
    "gemm_memory_fraction": (0.05, 1.0),
    "gemm_launch_us": (0.5, 50.0),
    "gemm_unaligned_efficiency": (0.02, 1.0),
    "gemm_unaligned_memory_efficiency": (0.02, 1.0),
    "gemm_fraction_unthrottled": (0.05, 1.0),
    "gemm_gemv_memory_fraction": (0.02, 1.0),
    "gemm_power_time_constant_us": (0.1, 100000.0),
    "gemm_unaligned_extra_us": (0.01, 50.0),
    "gemm_unaligned_wave_overhead_us": (0.01, 50.0),
    "gemm_wave_overhead_us": (0.01, 20.0),
    "gemm_tail_wave_softening": (0.001, 1.0),
    "gemm_layout_wave_overhead_us": (0.01, 100.0),
    "gemm_overlap_exponent": (1.0, 64.0),
    "gemm_unaligned_width_exponent": (0.01, 1.0),
    "gemm_tile_intensity_saturation": (8.0, 256.0),
    "attention_fwd_fraction": (0.05, 1.0),
    "attention_bwd_fraction": (0.05, 1.0),
    "attention_launch_us": (0.5, 100.0),
    "memory_fraction": (0.05, 1.0),
    "memory_launch_us": (0.5, 50.0),
}
SWEEPS = 3
GOLDEN_STEPS = 24


@dataclass(frozen=True)
class MeasuredOp:
    op: Op
    measured_ms: float
    op_class: str


@dataclass(frozen=True)
class Calibration:
    gpu: GPU
    fitted: dict[str, float]
    rows: int
    mape_before: dict[str, float]
    mape_after: dict[str, float]

    def constants(self) -> Constants:
        return default_constants(self.gpu).with_values(self.fitted)


def measured_ops(rows: Sequence[dict], gpu: GPU) -> list[MeasuredOp]:
    """Rows with a positive ``measured_ms`` as ops; rows without a measurement (failed runs) are skipped."""
    out = []
    for index, row in enumerate(rows, start=1):
        value = (row.get("measured_ms") or "").strip()
        if not value:
            continue
        try:
            measured = float(value)
        except ValueError:
            raise WorkbenchError(f"row {index}, column 'measured_ms': got {value!r}, expected a number of milliseconds") from None
        if not measured > 0 or not math.isfinite(measured):
            raise WorkbenchError(f"row {index}, column 'measured_ms': got {value!r}, expected a positive number")
        out.append(MeasuredOp(row_to_op(row, index, gpu), measured, op_class(row)))
    if not out:
        raise WorkbenchError("no row has a measured_ms value: nothing to calibrate from")
    return out


def predicted_ms(op: Op, gpu: GPU, constants: Constants) -> float:
    return op_time(op, gpu, constants).time_s * 1e3


def mape_by_class(ops: Sequence[MeasuredOp], gpu: GPU, constants: Constants) -> dict[str, float]:
    """Mean absolute percentage error per op class (and 'all'), in percent."""
    errors: dict[str, list[float]] = {}
    for m in ops:
        err = abs(predicted_ms(m.op, gpu, constants) - m.measured_ms) / m.measured_ms * 100
        errors.setdefault(m.op_class, []).append(err)
        errors.setdefault("all", []).append(err)
    return {k: sum(v) / len(v) for k, v in sorted(errors.items())}


def _parameters(ops: Sequence[MeasuredOp], gpu: GPU) -> list[tuple[str, Callable[[MeasuredOp], bool]]]:
    """Constants the rows inform, each with the rows it affects."""
    params: list[tuple[str, Callable[[MeasuredOp], bool]]] = []
    gemm_keys = sorted({get_precision(m.op.dtype).peak_key for m in ops if m.op.kind == "gemm"})
    is_gemm = lambda m: m.op.kind == "gemm"  # noqa: E731
    for key in gemm_keys:
        params.append((f"gemm_fraction.{key}", lambda m, key=key: is_gemm(m) and get_precision(m.op.dtype).peak_key == key))
    if gemm_keys:
        params += [(name, is_gemm) for name in ("gemm_launch_us", "gemm_wave_overhead_us",
                                                "gemm_tile_intensity_saturation", "gemm_memory_fraction",
                                                "gemm_power_time_constant_us", "gemm_overlap_exponent",
                                                "gemm_tail_wave_softening")]
    if any(m.op.kind == "gemm" and min(m.op.shape.m, m.op.shape.n, m.op.shape.k) == 1 for m in ops):
        params.append(("gemm_gemv_memory_fraction",
                       lambda m: m.op.kind == "gemm" and min(m.op.shape.m, m.op.shape.n, m.op.shape.k) == 1))
    for key in gemm_keys:
        of_key = lambda m, key=key: is_gemm(m) and get_precision(m.op.dtype).peak_key == key  # noqa: E731
        params.append((f"gemm_fraction_unthrottled.{key}", of_key))
    for key in sorted({get_precision(m.op.dtype).peak_key for m in ops
                       if m.op.kind == "gemm" and needs_layout_fixup(m.op.dtype, gpu)}):
        params.append((f"gemm_layout_wave_overhead_us.{key}", lambda m, key=key: is_gemm(m)
                       and get_precision(m.op.dtype).peak_key == key and needs_layout_fixup(m.op.dtype, gpu)))
    if any(m.op.kind == "gemm" and not is_aligned(m.op.shape, m.op.dtype) for m in ops):
        unaligned = lambda m: m.op.kind == "gemm" and not is_aligned(m.op.shape, m.op.dtype)  # noqa: E731
        params += [(name, unaligned) for name in ("gemm_unaligned_memory_efficiency", "gemm_unaligned_extra_us",
                                                  "gemm_unaligned_efficiency", "gemm_unaligned_wave_overhead_us")]
        if len({unaligned_width(m.op.shape, m.op.dtype) for m in ops if unaligned(m)}) > 1:
            params.append(("gemm_unaligned_width_exponent", unaligned))
    if any(m.op.kind == "attention" for m in ops):
        is_attention = lambda m: m.op.kind == "attention"  # noqa: E731
        params += [(n, is_attention) for n in ("attention_fwd_fraction", "attention_bwd_fraction", "attention_launch_us")]
    memory_kinds = sorted({(m.op.kind, m.op.dtype) for m in ops if m.op.kind not in ("gemm", "attention")})
    for kind, dtype in memory_kinds:
        params.append((f"memory_fraction.{kind}.{dtype}", lambda m, k=kind, d=dtype: (m.op.kind, m.op.dtype) == (k, d)))
    if memory_kinds:
        params.append(("memory_launch_us", lambda m: m.op.kind not in ("gemm", "attention")))
    return params


def _golden(objective: Callable[[float], float], low: float, high: float) -> float:
    """Minimise ``objective`` over [low, high] in log space."""
    a, b = math.log(low), math.log(high)
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = objective(math.exp(c)), objective(math.exp(d))
    for _ in range(GOLDEN_STEPS):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = objective(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = objective(math.exp(d))
    return math.exp((a + b) / 2)


def calibrate(rows: Sequence[dict], gpu: GPU) -> Calibration:
    """Fit the constants that ``rows`` (with ``measured_ms``) inform, starting from the spec defaults."""
    ops = measured_ops(rows, gpu)
    start = default_constants(gpu)
    params = _parameters(ops, gpu)
    values = {**start.values, **{name: start[name] for name, _ in params}}  # per-dtype keys start at their fallback
    for _ in range(SWEEPS):
        for name, affects in params:
            subset = [m for m in ops if affects(m)]

            def objective(x: float, name=name, subset=subset) -> float:
                trial = Constants({**values, name: x})
                return sum(abs(predicted_ms(m.op, gpu, trial) - m.measured_ms) / m.measured_ms for m in subset)

            low, high = _BOUNDS[name.split(".")[0]]
            best = _golden(objective, low, high)
            if objective(best) < objective(values[name]):
                values[name] = best
    fitted = {name: round(values[name], 6) for name, _ in params}
    after = start.with_values(fitted)
    return Calibration(gpu, fitted, len(ops), mape_by_class(ops, gpu, start), mape_by_class(ops, gpu, after))


def write_profile(result: Calibration, path=None, *, source: str = "", overwrite: bool = True) -> str:
    """Write the fitted constants as ``specs/calibration/<gpu>.yaml`` (or ``path``), atomically. Constants of an
    existing profile that this fit does not set (e.g. the communication constants ``benchmarks/comm_sweep.py``
    fits) are kept, listed under ``kept_from_previous``, with their ``notes`` (where each came from)."""
    path = Path(path or profile_path(result.gpu))
    previous = {}
    if path.exists() and overwrite:
        previous = yaml.safe_load(path.read_text()) or {}
    kept = {key: value for key, value in (previous.get("constants") or {}).items() if key not in result.fitted}
    notes = {key: note for key, note in (previous.get("notes") or {}).items() if key in kept}
    document = {
        "gpu": result.gpu.name,
        "fitted_on": source or "measured rows",
        "rows": result.rows,
        "date": dt.date.today().isoformat(),
        "mape_percent_before": {k: round(v, 2) for k, v in result.mape_before.items()},
        "mape_percent_after": {k: round(v, 2) for k, v in result.mape_after.items()},
        "constants": {**result.fitted, **kept},
    }
    if kept:
        document["kept_from_previous"] = sorted(kept)
    if notes:
        document["notes"] = notes  # where a kept constant came from
    header = (f"# Calibration profile for {result.gpu.display_name}: constants fitted by `workbench calibrate`.\n"
              "# Predictions use it with calibrated=True (CLI: --calibrated). Errors are on the fitting rows.\n")
    write_atomic(path, header + yaml.safe_dump(document, sort_keys=False), overwrite=overwrite)
    return str(path)
