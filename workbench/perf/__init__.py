"""The analytical time model: one function per op class, dispatched by ``op_time``."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.graph.ops import MEMORY_BOUND_KINDS, Op
from workbench.hardware import GPU
from workbench.perf.attention import attention_time
from workbench.perf.efficiency import Constants, derived
from workbench.perf.gemm import gemm_time
from workbench.perf.memory_bound import memory_bound_time
from workbench.perf.roofline import Roofs


@dataclass(frozen=True)
class OpTime:
    """Predicted time of one execution of an op, never below its roofline bound."""

    time_s: float
    roofline_s: float
    bound: str
    """compute or memory: which roof the model's estimate sits under."""
    detail: object = None


def op_time(op: Op, gpu: GPU, constants: Constants) -> OpTime:
    """Predicted device time of one execution of ``op`` on ``gpu``."""
    roof = derived(Roofs, gpu, constants).time(op)  # roofline_time(op, gpu), its roofs looked up once
    if op.kind == "gemm":
        est = gemm_time(op.shape, op.dtype, gpu, constants)
        time_s, bound, detail = est.time_s, est.bound, est
    elif op.kind == "attention":
        time_s, bound = attention_time(op, gpu, constants)
        detail = None
    elif op.kind in MEMORY_BOUND_KINDS:
        time_s, bound, detail = memory_bound_time(op, gpu, constants), "memory", None
    else:
        raise ValueError(f"op {op.name!r} has kind {op.kind!r}; the time model knows gemm, attention and "
                         f"{', '.join(MEMORY_BOUND_KINDS)}")
    timed = object.__new__(OpTime)  # the fields set without the frozen __init__ (a cold recipe search times ~10^3 ops)
    timed.__dict__.update(time_s=max(time_s, roof), roofline_s=roof, bound=bound, detail=detail)
    return timed
