"""What a step prediction returns: every op's predicted time (``OpPrediction``), the step's summary
(``StepSummary``) and both together with the configuration (``Prediction``); and the plausibility checks every
prediction passes (``ImplausiblePredictionError``). ``workbench.step.StepModel`` makes them, ``workbench.predict``
returns them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.config import TrainingConfig
from workbench.errors import WorkbenchError
from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.memory import MemoryBreakdown
from workbench.models import Model
from workbench.precision import ResolvedPrecision
from workbench.step_comm import CommPrediction

if TYPE_CHECKING:
    import pandas as pd

MODEL_VERSION = "workbench-model 0.1"
"""Names the analytical model that made a prediction (recipes record it)."""


@dataclass(frozen=True)
class OpPrediction:
    """One op of the step with its predicted time per execution and in total."""

    op: Op
    time_s: float
    """One execution."""
    roofline_s: float
    bound: str
    executions: int
    """Executions per step: op.count x micro-batches."""

    @property
    def total_s(self) -> float:
        return self.time_s * self.executions


@dataclass(frozen=True)
class StepSummary:
    step_time_s: float
    compute_bound_s: float
    memory_bound_s: float
    communication_s: float
    """Exposed communication: what compute does not hide (a part of ``step_time_s``)."""
    communication_total_s: float
    """All collectives of the step, hidden and exposed (``communication_s`` is the exposed part)."""
    optimizer_s: float
    bubble_s: float
    samples_per_s: float
    tokens_per_s: float
    mfu: float
    model_flops_per_step: float
    memory: MemoryBreakdown
    max_micro_batch: int
    """The largest micro-batch that fits (0: not even 1); -1 where not computed (``StepModel.summary(...,
    max_micro_batch=False)``, recipe search's fast path)."""
    gpus: int
    host_s: float = 0.0
    """CPU seconds to launch the step's kernels (stacks that launch from eager Python); the step is the longer of
    this and the device time."""
    stack: str = "ideal"
    """The stack the step was predicted for (``workbench.stacks``); ``ideal`` is a bound, not a stack."""
    priced_as_bound: bool = True
    """Whether the step is the fused-step bound: the ``ideal`` stack, or a configuration outside the named stack's
    kernel tables (its notes say which part)."""

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "memory"}
        out["memory_gb"] = self.memory.as_gb()
        out["fits"] = self.memory.fits
        return out


@dataclass(frozen=True)
class Prediction:
    model: Model
    gpu: GPU
    config: TrainingConfig
    precision: ResolvedPrecision
    ops: list[OpPrediction]
    comms: list[CommPrediction]
    summary: StepSummary
    calibrated: bool
    notes: list[str] = field(default_factory=list)
    model_version: str = MODEL_VERSION

    def ops_frame(self) -> pd.DataFrame:
        """One row per op: name, kind, phase, shape, FLOPs, bytes, intensity, bound, predicted time and share."""
        import pandas as pd

        step = self.summary.step_time_s
        rows = [{
            "name": p.op.name, "kind": p.op.kind, "phase": p.op.phase, "layer": p.op.layer,
            "shape": p.op.describe_shape(), "dtype": p.op.dtype, "count": p.executions,
            "flops": p.op.flops, "bytes": p.op.bytes, "arithmetic_intensity": p.op.arithmetic_intensity,
            "bound": p.bound, "roofline_ms": p.roofline_s * 1e3, "time_ms": p.time_s * 1e3,
            "total_ms": p.total_s * 1e3, "achieved_tflops": p.op.flops / p.time_s / 1e12,
            "share": p.total_s / step,
        } for p in self.ops]
        rows += [{
            "name": c.name, "kind": c.collective, "phase": "comm", "layer": "communication",
            "shape": f"{c.size_bytes / 1e6:.1f} MB x{c.group} ({c.link})", "dtype": "", "count": 1,
            "flops": 0.0, "bytes": c.size_bytes, "arithmetic_intensity": 0.0, "bound": "communication",
            "roofline_ms": float("nan"), "time_ms": c.time_s * 1e3, "total_ms": c.exposed_s * 1e3,
            "achieved_tflops": 0.0, "share": c.exposed_s / step,
        } for c in self.comms]
        return pd.DataFrame(rows)



class ImplausiblePredictionError(WorkbenchError):
    """A prediction came out non-finite, zero or past what the hardware allows: some input figure is far out of
    range (a unit mistake in a GPU file, an extreme model field). Raised instead of returning the number."""


MFU_CEILING = 1.0 + 1e-9
"""Model FLOPs can never run faster than the peak they are counted against (float rounding allowed)."""
PLAUSIBLE_STEP_S = 1e6
"""A policy: a predicted step over ~11.6 days is noted as implausible (some input is probably out of range)."""
PLAUSIBLE_MFU = 1e-6
"""A policy: an MFU under one millionth of peak is noted as implausible (launch-bound toy models sit near 1e-4)."""


def implausible_notes(s: StepSummary) -> list[str]:
    """Notes for finite numbers no real training step has: an input (a GPU figure in the wrong unit, an extreme
    batch or model field) is probably out of range. Noted rather than raised: the arithmetic holds."""
    notes = []
    if s.step_time_s > PLAUSIBLE_STEP_S:
        notes.append(f"implausible: the step takes {s.step_time_s:.3g} s ({s.step_time_s / 86400:.3g} days); check the "
                     "inputs (GPU figures' units, batch, sequence length)")
    if s.mfu < PLAUSIBLE_MFU:
        notes.append(f"implausible: MFU {s.mfu:.3g}, under one millionth of the GPU's peak; check the GPU's peak "
                     "TFLOP/s (dense, in TFLOP/s, not FLOP/s) and the model's sizes")
    return notes


def check_plausible(s: StepSummary, model: Model, gpu: GPU) -> None:
    """Raise ``ImplausiblePredictionError`` naming the first summary figure that is not finite and positive, or an
    MFU that is zero or above 1."""
    # recipe search checks every candidate: the common case, every figure finite and in range, in one expression
    # (``0 < x < inf`` is False for NaN), and the figures named only when one is not
    if (0 < s.step_time_s < math.inf and 0 < s.tokens_per_s < math.inf and 0 < s.samples_per_s < math.inf
            and 0 < s.mfu <= MFU_CEILING and 0 < s.model_flops_per_step < math.inf and 0 < s.memory.total < math.inf
            and 0 <= s.compute_bound_s < math.inf and 0 <= s.memory_bound_s < math.inf
            and 0 <= s.optimizer_s < math.inf and 0 <= s.communication_s < math.inf and 0 <= s.bubble_s < math.inf):
        return
    figures = {"step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s, "samples_per_s": s.samples_per_s,
               "mfu": s.mfu, "model_flops_per_step": s.model_flops_per_step, "memory.total": s.memory.total}
    parts = {"compute_bound_s": s.compute_bound_s, "memory_bound_s": s.memory_bound_s, "optimizer_s": s.optimizer_s,
             "communication_s": s.communication_s, "bubble_s": s.bubble_s}
    where = f"{getattr(model, 'name', model)} on {gpu.name} ({gpu.origin})"
    for name, value in {**figures, **parts}.items():
        if not math.isfinite(value) or value < 0 or (name in figures and value == 0):
            raise ImplausiblePredictionError(
                f"{where}: the predicted {name} is {value!r}, not a finite positive number; a figure of the GPU or "
                "model is far out of range (check units: TB/s, GB, dense TFLOP/s)")
    if s.mfu > MFU_CEILING:
        raise ImplausiblePredictionError(f"{where}: the predicted MFU is {s.mfu:.3g}, above 1 (faster than the GPU's "
                                         "peak); a figure of the GPU or model is inconsistent")
