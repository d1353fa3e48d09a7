"""Fit the time model's per-GPU constants to measured rows, and write them as a calibration profile.

Rows are the ``predict-ops`` format plus ``measured_ms``. Each constant the rows inform is fitted by coordinate
descent (golden-section search in log space, a few sweeps) minimising the mean absolute percentage error of
the rows it affects; constants no row informs keep their defaults. The profile lists only fitted values.

Two rules keep a fit honest (issue 15: nine constants fitted from one row; timings faster than the roofline
accepted):

- Rows per constant: the constants fitted on the same rows (their class: every bf16 GEMM, every attention row,
  every bf16 softmax, ...) need ``MIN_ROWS_PER_CONSTANT`` distinct measured ops of that class each. Where a class
  has fewer, its constants are fitted in order of importance as far as its rows go and the rest keep their
  defaults, listed with the reason in ``Calibration.skipped``; when no constant is left to fit, ``calibrate``
  refuses.
- No row faster than its roofline: a row measured more than ``ROOFLINE_TOLERANCE`` below the op's roofline time
  on the GPU (its FLOPs at the datasheet peak, its bytes at the datasheet HBM bandwidth) is physically impossible,
  and ``calibrate`` refuses, naming the rows. It is an error rather than a dropped row because such a time comes
  from a mistake that usually affects more rows than it shows (a unit, the GPU, the dtype, data left in cache
  between timed runs): dropping the rows below the roof would keep the others that the same mistake skewed.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from workbench.errors import WorkbenchError
from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.perf import op_time
from workbench.perf.roofline import roofline_time
from workbench.fileio import check_output, load_yaml, write_text
from workbench.perf.efficiency import Constants, default_constants, profile_path, user_profile_path
from workbench.perf.gemm import is_aligned, needs_layout_fixup, unaligned_width
from workbench.precision import get_precision
from workbench.rows import op_class, row_to_op

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
MIN_ROWS_PER_CONSTANT = 3
"""Distinct measured ops of its class each fitted constant needs (a policy): with three, no single bad row can set
a constant (the least-absolute-error fit of one constant to three rows follows the middle one), and every
constant of the shipped 544-row H200 fit has at least six."""
ROOFLINE_TOLERANCE = 0.05
"""How far below its roofline time a measured row may sit before it is refused: timer granularity, and a clock
above the one the datasheet peak is quoted at (H200: 1,830 MHz matrix clock, 1,980 MHz boost)."""


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
    skipped: dict[str, str] = field(default_factory=dict)
    """Constants the rows inform but too few of them to fit (``MIN_ROWS_PER_CONSTANT``), each with why; they keep
    their defaults."""

    def constants(self) -> Constants:
        return default_constants(self.gpu).with_values(self.fitted)


def measured_ops(rows: Sequence[dict], gpu: GPU) -> list[MeasuredOp]:
    """Rows with a positive ``measured_ms`` as ops; rows without a measurement (failed runs) are skipped. A row
    measured faster than its roofline on ``gpu`` (by more than ``ROOFLINE_TOLERANCE``) is an error naming it."""
    out, impossible = [], []
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
        op = row_to_op(row, index, gpu)
        roof_ms = roofline_time(op, gpu) * 1e3
        if measured < roof_ms * (1 - ROOFLINE_TOLERANCE):
            impossible.append(f"row {index} ({op.kind} {op.describe_shape()} {op.dtype}): measured {measured:.4g} ms, "
                              f"roofline {roof_ms:.4g} ms")
        out.append(MeasuredOp(op, measured, op_class(row)))
    if impossible:
        shown = "; ".join(impossible[:5]) + (f"; and {len(impossible) - 5} more" if len(impossible) > 5 else "")
        raise WorkbenchError(
            f"{len(impossible)} row(s) measured faster than the roofline of {gpu.name} (the op's FLOPs at its datasheet "
            f"peak, its bytes at {gpu.hbm_bandwidth_tb_s.value:g} TB/s) by more than {ROOFLINE_TOLERANCE:.0%}, which no "
            f"run can be: {shown}. Check measured_ms is in milliseconds, the rows were measured on a {gpu.name} in "
            "their dtype, and that each timed run starts with its data out of cache; then remove or remeasure them")
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


def fit_plan(ops: Sequence[MeasuredOp], gpu: GPU) -> tuple[list[tuple[str, Callable[[MeasuredOp], bool]]],
                                                              dict[str, str]]:
    """(the constants to fit, in fitting order; the constants skipped, each with why): ``_parameters`` less those
    whose class lacks ``MIN_ROWS_PER_CONSTANT`` distinct ops per constant. Constants affecting the same rows form one
    class and are kept in ``_parameters``' order (most important first) as far as the class's rows go."""
    params = _parameters(ops, gpu)
    classes: dict[frozenset, list[str]] = {}
    for name, affects in params:
        rows = frozenset(i for i, m in enumerate(ops) if affects(m))
        classes.setdefault(rows, []).append(name)
    skipped: dict[str, str] = {}
    for rows, names in classes.items():
        distinct = len({(ops[i].op.kind, ops[i].op.shape, ops[i].op.dtype) for i in rows})
        for k, name in enumerate(names[distinct // MIN_ROWS_PER_CONSTANT:], start=distinct // MIN_ROWS_PER_CONSTANT):
            others = f", with {len(names) - 1} other constant(s) of the same rows" if len(names) > 1 else ""
            skipped[name] = (f"{distinct} distinct measured op(s) inform it{others}; fitting {k + 1} constant(s) on "
                             f"them needs {MIN_ROWS_PER_CONSTANT * (k + 1)} ({MIN_ROWS_PER_CONSTANT} per constant)")
    return [(name, affects) for name, affects in params if name not in skipped], skipped


def calibrate(rows: Sequence[dict], gpu: GPU) -> Calibration:
    """Fit the constants that ``rows`` (with ``measured_ms``) inform, starting from the spec defaults. Constants with
    too few rows keep their defaults (``Calibration.skipped`` says why); raises ``WorkbenchError`` when no constant
    has enough, or when a row is faster than its roofline (the module docstring)."""
    ops = measured_ops(rows, gpu)
    start = default_constants(gpu)
    params, skipped = fit_plan(ops, gpu)
    if not params:
        reasons = "; ".join(f"{name}: {why}" for name, why in list(skipped.items())[:6])
        more = f"; and {len(skipped) - 6} more" if len(skipped) > 6 else ""
        raise WorkbenchError(f"{len(ops)} measured row(s) are too few to fit any constant ({MIN_ROWS_PER_CONSTANT} "
                             f"distinct ops of a constant's class per constant): {reasons}{more}")
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
    return Calibration(gpu, fitted, len(ops), mape_by_class(ops, gpu, start), mape_by_class(ops, gpu, after),
                       skipped)


def write_profile(result: Calibration, path=None, *, source: str = "", overwrite: bool = False) -> str:
    """Write the fitted constants as a calibration profile, atomically: ``path``, by default the user's
    ``<gpu>.yaml`` (``workbench.paths``; never the shipped specs/). An existing file is replaced only with
    ``overwrite=True`` (CLI: ``--force``). Constants of the profile it replaces (or, for a first user profile,
    of the profile predictions read until now, e.g. the shipped one) that this fit does not set, such as the
    communication constants ``benchmarks/comm/comm_sweep.py`` fits, are kept, listed under ``kept_from_previous``,
    with their ``notes`` (where each came from)."""
    default = user_profile_path(result.gpu)
    path = Path(path or default)
    check_output(path, overwrite=overwrite)  # refuse before reading anything
    base = path if path.exists() else profile_path(result.gpu) if path == default else None
    previous = load_yaml(base) if base is not None and base.is_file() else {}
    if not isinstance(previous, dict) or previous.get("gpu") != result.gpu.name:
        previous = {}
    old_constants, old_notes = previous.get("constants"), previous.get("notes")
    kept = {key: value for key, value in (old_constants if isinstance(old_constants, dict) else {}).items()
            if key not in result.fitted}
    notes = {key: note for key, note in (old_notes if isinstance(old_notes, dict) else {}).items() if key in kept}
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
    write_text(path, header + yaml.safe_dump(document, sort_keys=False), overwrite=overwrite)
    return str(path)
