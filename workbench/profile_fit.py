"""How a prediction applies a stack profile fitted on a trace (``workbench.stack_calibration`` fits and reads the
profiles); apart from it so that an uncalibrated prediction imports none of the trace machinery (issue 16: a fresh
process's first ``predict`` < 20 ms)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.stack_calibration import StackProfile


@dataclass(frozen=True)
class StackFit:
    """How a prediction applies a stack profile (``predict`` asks ``workbench.graph.stacked.trace_fit``)."""

    profile: StackProfile | None = None
    compiled: bool = False

    @property
    def applied(self) -> bool:
        return self.profile is not None

    @property
    def same_mode(self) -> bool:
        return self.profile is not None and self.profile.compiled == self.compiled

    def op_time(self, op: Any, t: Any) -> Any:
        """``t`` (a ``workbench.perf.OpTime``) scaled by the op's class factor, never below its roofline."""
        if self.profile is None:
            return t
        factor = self.profile.scale(op, self.compiled)
        return t if factor == 1.0 else dataclasses.replace(t, time_s=max(t.time_s * factor, t.roofline_s))

    def host_s(self, host_s: float) -> float:
        """The stack's host time of a step, plus the trace's step boundary (a host-bound step waits for it too)."""
        if self.profile is None:
            return host_s
        scale = self.profile.host_scale if self.same_mode else None
        return (host_s * scale if scale else host_s) + self.profile.step_gap_ms / 1e3

    @property
    def idle_gap_s(self) -> float:
        """Per step: the trace's step boundary (both modes) and, in the traced compile mode only, its in-step idle
        and its kernels the model has no op for."""
        if self.profile is None:
            return 0.0
        same = self.profile.idle_gap_ms + self.profile.unmatched_ms if self.same_mode else 0.0
        return (self.profile.step_gap_ms + same) / 1e3


NO_FIT = StackFit()
"""No profile applies: every op and the host time as the model prices them."""
