"""A training step's device time in the analytical model's operator classes: the model's own per-op prediction
summed into the classes ``workbench.trace`` puts measured kernels in, and the profile report's classes table
(measured beside predicted, by phase, then the step's totals). Pure Python (no torch import).

The trace reading and the classification live in ``workbench.trace`` (its docstring gives the rules);
``benchmarks/train/train_profile.py`` reads a torch.profiler trace with it and writes these tables.
"""

from __future__ import annotations

from collections import defaultdict

from workbench.trace import CLASSES, PHASES, model_op_class


def predicted_by_class(prediction) -> dict[str, dict[str, float]]:
    """class -> phase -> ms per step from a ``workbench.predict.Prediction`` (exposed communication included)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in prediction.ops:
        op = p.op
        out[model_op_class(op.kind, op.name, op.phase, op.extra)][op.phase] += p.total_s * 1e3
    for c in prediction.comms:
        out["communication"]["other"] += c.exposed_s * 1e3
    return out


def class_rows(measured: dict, predicted: dict, *, wall_ms: float, busy_ms: float, kernel_ms: float,
               predicted_step_ms: float) -> list[dict]:
    """The classes CSV: one row per class (measured and predicted ms per step, split by phase), then the
    step's totals: summed kernel time, device busy time (union), wall time and the idle gap (wall - busy)."""
    rows = []
    for cls in CLASSES:
        m, p = measured.get(cls, {}), predicted.get(cls, {})
        m_total = sum(v for k, v in m.items() if k != "count")
        p_total = sum(p.values())
        if not m_total and not p_total:
            continue
        rows.append({"class": cls, "measured_ms": m_total, "predicted_ms": p_total,
                     "measured_minus_predicted_ms": m_total - p_total,
                     **{f"measured_{ph}_ms": m.get(ph, 0.0) for ph in PHASES},
                     **{f"predicted_{ph}_ms": p.get(ph, 0.0) for ph in PHASES},
                     "events_per_step": m.get("count", 0.0)})
    predicted_ops = sum(sum(p.values()) for p in predicted.values())
    for name, m_ms, p_ms in (("total_kernel_time", kernel_ms, predicted_ops), ("busy", busy_ms, predicted_ops),
                             ("step_wall", wall_ms, predicted_step_ms),
                             ("idle_gap", wall_ms - busy_ms, predicted_step_ms - predicted_ops)):
        rows.append({"class": name, "measured_ms": m_ms, "predicted_ms": p_ms,
                     "measured_minus_predicted_ms": m_ms - p_ms})
    return rows
