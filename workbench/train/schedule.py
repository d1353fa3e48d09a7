"""Learning-rate schedules of the reference training job: constant (the default), or linear warm-up then cosine
decay to a floor -- the shape torchtitan's ``lr_scheduler`` (warmup_steps, decay_type "cosine", min_lr_factor)
and most Llama-family recipes use.

``lr_factor(step, total)`` is the multiplier of the peak learning rate for 0-based optimizer step ``step`` of
``total``: warm-up ramps (step + 1) / warmup_steps up to 1 over the first ``warmup_steps`` steps; cosine then falls
from 1 at the first step after warm-up to ``min_ratio`` at the last step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from workbench.train.spec import JobError

ScheduleKind = Literal["constant", "cosine"]
SCHEDULES: tuple[str, ...] = ("constant", "cosine")


@dataclass(frozen=True)
class LrSchedule:
    kind: ScheduleKind = "constant"
    warmup_steps: int = 0
    """Linear warm-up from peak / warmup_steps to the peak (either kind)."""
    min_ratio: float = 0.1
    """cosine: the last step's learning rate as a fraction of the peak (10%, as in the Llama papers' recipes)."""

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise JobError(f"learning-rate schedule {self.kind!r}: expected one of {', '.join(SCHEDULES)}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise JobError(f"lr warm-up steps {self.warmup_steps!r}: expected an integer >= 0")
        if not 0 <= self.min_ratio <= 1:
            raise JobError(f"lr min_ratio {self.min_ratio!r}: expected a fraction of the peak in [0, 1]")

    def lr_factor(self, step: int, total: int) -> float:
        """Multiplier of the peak learning rate at 0-based optimizer step ``step`` of ``total``."""
        if not 0 <= step < total:
            raise ValueError(f"step {step} of {total}: expected 0 <= step < total")
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        decay_steps = total - self.warmup_steps - 1
        progress = (step - self.warmup_steps) / decay_steps if decay_steps > 0 else 1.0
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


CONSTANT_LR = LrSchedule()
"""The job's default: the peak learning rate from the first step to the last (runs recorded before schedules
existed ran so)."""
