"""A loaded profiler trace beside the prediction of the configuration it was taken of: pure functions, no widgets.

A trace (``workbench.trace.Trace``) is measured for one configuration on one GPU: the model, the stack, the
micro-batch, sequence, checkpointing, compile, the split and the global batch (``TRACE_FIELDS``), on one of the
chosen GPUs. ``TraceContext`` keeps the trace with that configuration; once the state moves away from it the
trace is *stale* (kept, said so, and drawn nowhere against a prediction it was not measured for).

    >>> ctx = TraceContext(load_trace("run.json.gz", steps=2), "h200-sxm", state)
    >>> ctx.stale_reason(wb_state)                  # "" while the state is the trace's configuration
    >>> rows = class_table(ctx.trace, prediction)   # workbench.trace: measured vs predicted ms per op class
    >>> trace_points(rows, prediction, ctx.name)    # the roofline's "measured (trace)" diamonds

Every number comes from ``workbench.trace`` (measured kernel time per class) and ``workbench.predict`` (the
class's FLOPs and bytes): a class's measured point sits at its predicted arithmetic intensity (the same FLOPs and
bytes as the predicted class) and at the TFLOP/s those FLOPs reach in the measured time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.fileio import read_text
from workbench.hardware import get_gpu
from workbench.predict import Prediction
from workbench.trace import ClassTime, Trace, op_class
from widgets.data import SHARDING_WORDS
from widgets.formatting import count, stack_label
from widgets.state import WorkbenchState

TRACE_FIELDS: tuple[str, ...] = (
    "model", "precision", "micro_batch", "seq_len", "checkpointing", "stack", "compile", "gpu_count", "tp", "pp",
    "ep", "cp", "virtual_stages", "sharding", "global_batch", "lora_rank",
)
"""The state fields a trace's configuration is made of: change one and the trace no longer matches (the GPU must
stay chosen too). ``calibrated`` is not one: it changes the prediction, not what was measured."""
MEASURED_LABEL = "measured (trace)"
"""The roofline legend's entry for a trace's per-class points."""
FAR_RATIO = (0.5, 2.0)
"""Measured / predicted outside this range on a class of more than 1 ms per step: the configuration given is
probably not the one traced (the same check ``workbench.stack_calibration.describe`` makes)."""
TRACE_LOOP = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "h200" / "stacks" / "TRACE_LOOP.md"
"""The core's evaluation of trace calibration (``benchmarks/stacks/trace_loop.py``); its summary line is quoted
next to the calibrate button."""
_SUMMARY = re.compile(r"^All (?:test|new holdout) rows: .*$", re.M)


@dataclass(frozen=True)
class TraceContext:
    """A trace and the configuration it was measured for (the state when it was loaded) on one GPU."""

    trace: Trace
    gpu: str
    """The catalog name of the GPU it ran on (one of the state's GPUs when loaded)."""
    state: WorkbenchState
    name: str = ""
    """The file name shown (an upload's name, or the path's)."""

    def configuration(self) -> dict[str, object]:
        return {f: getattr(self.state, f) for f in TRACE_FIELDS}

    def stale_reason(self, state: WorkbenchState) -> str:
        """Why ``state`` is no longer the trace's configuration ("" while it is): the fields that changed."""
        changed = [f"{f.replace('_', ' ')} {_value(getattr(self.state, f))} -> {_value(getattr(state, f))}"
                   for f in TRACE_FIELDS if getattr(self.state, f) != getattr(state, f)]
        if self.gpu not in state.gpus:
            changed.append(f"{get_gpu(self.gpu).display_name} no longer chosen")
        return "; ".join(changed)

    def restore(self, state: WorkbenchState) -> dict[str, object]:
        """The ``Workbench.set`` changes that bring ``state`` back to the trace's configuration (the trace's GPU
        put first among the chosen if it was dropped)."""
        gpus = list(state.gpus) if self.gpu in state.gpus else [self.gpu, *state.gpus]
        return {**self.configuration(), "gpus": gpus}


def _value(v: object) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else f"{v:,}" if isinstance(v, int) else str(v)


def default_trace_gpu(state: WorkbenchState, gpu: str | None = None) -> str:
    """The GPU a trace is for: ``gpu`` (a catalog name or alias, which must be chosen), else the first chosen."""
    if gpu is None:
        return state.gpus[0]
    name = get_gpu(gpu).name  # an unknown name lists the catalog's
    if name not in state.gpus:
        raise WorkbenchError(f"GPU {gpu!r} is not chosen ({', '.join(state.gpus)}): choose it first, or load the "
                             "trace for one of those")
    return name


def configuration_words(ctx: TraceContext, model_name: str) -> str:
    """The configuration a trace is for, in words: "Llama 3.2 1B on 1 x NVIDIA H200 SXM 141GB, Plain PyTorch,
    eager, micro-batch 3, sequence 2,048, ..."."""
    s = ctx.state
    split = ", ".join(f"{f} {getattr(s, f)}" for f in ("tp", "pp", "cp", "ep") if getattr(s, f) > 1)
    batch = "global batch auto" if not s.global_batch else f"global batch {s.global_batch:,}"
    return (f"{model_name} on {s.gpu_count:,} x {get_gpu(ctx.gpu).display_name}, "
            f"{stack_label(s.stack, s.compile)}, {s.precision}, micro-batch {s.micro_batch}, sequence "
            f"{s.seq_len:,}, activation checkpointing {s.checkpointing}, compile {'on' if s.compile else 'off'}"
            f"{', ' + split if split else ''}, {SHARDING_WORDS.get(s.sharding, s.sharding)}, {batch}"
            f"{f', LoRA rank {s.lora_rank}' if s.lora_rank else ''}")


def class_flops(prediction: Prediction) -> dict[str, tuple[float, float]]:
    """Op class (``workbench.trace.op_class``) -> (FLOPs, bytes) per step of the prediction's ops."""
    out: dict[str, list[float]] = {}
    for p in prediction.ops:
        row = out.setdefault(op_class(p.op), [0.0, 0.0])
        row[0] += p.op.flops * p.executions
        row[1] += p.op.bytes * p.executions
    return {k: (v[0], v[1]) for k, v in out.items()}


def trace_points(rows: list[ClassTime], prediction: Prediction, trace_name: str = "") -> pd.DataFrame:
    """The roofline's measured points: one per op class the trace measured and the prediction has FLOPs for, at
    the predicted class's arithmetic intensity (its FLOPs over its bytes, per step) and at FLOPs / measured time
    (the measured achieved TFLOP/s, column ``achieved_tflops`` as ``roofline_points``). Classes without FLOPs (copies, collectives) have no place on a roofline."""
    flops = class_flops(prediction)
    out = []
    for r in rows:
        f, b = flops.get(r.cls, (0.0, 0.0))
        if f <= 0 or b <= 0 or not r.measured_ms > 0:
            continue
        out.append({"gpu": prediction.gpu.display_name, "cls": r.cls.replace("_", " "), "measured": MEASURED_LABEL,
                    "intensity": f / b, "achieved_tflops": f / (r.measured_ms * 1e-3) / 1e12,
                    "predicted_tflops": f / (r.predicted_ms * 1e-3) / 1e12 if r.predicted_ms > 0 else math.nan,
                    "measured_ms": r.measured_ms, "predicted_ms": r.predicted_ms, "ratio": r.ratio,
                    "measured_kernels": r.measured_kernels, "trace": trace_name})
    return pd.DataFrame(out, columns=["gpu", "cls", "measured", "intensity", "achieved_tflops", "predicted_tflops",
                                      "measured_ms", "predicted_ms", "ratio", "measured_kernels", "trace"])


def _ms(value: float) -> str:
    return "" if not math.isfinite(value) else f"{value:,.2f}"


def class_rows(rows: list[ClassTime]) -> list[dict[str, str]]:
    """The Step time tab's table: per op class measured vs predicted ms per step, ratio, kernels per step, and a
    total row (headers in words; ms with two decimals: classes of a few tenths of a ms are common)."""
    out = [{"op class": r.cls.replace("_", " "), "measured (ms per step)": _ms(r.measured_ms),
            "predicted (ms per step)": _ms(r.predicted_ms),
            "measured / predicted": "" if not math.isfinite(r.ratio) else f"{r.ratio:.3f}",
            "kernels per step (measured / predicted)": f"{count(r.measured_kernels)} / {count(r.predicted_kernels)}"}
           for r in rows]
    measured = sum(r.measured_ms for r in rows)
    predicted = sum(r.predicted_ms for r in rows if math.isfinite(r.predicted_ms))
    out.append({"op class": "all kernels", "measured (ms per step)": _ms(measured),
                "predicted (ms per step)": _ms(predicted),
                "measured / predicted": f"{measured / predicted:.3f}" if predicted > 0 else "",
                "kernels per step (measured / predicted)": ""})
    return out


def trace_warnings(rows: list[ClassTime], prediction: Prediction) -> list[str]:
    """What suggests the prediction is not of the traced configuration: a step of several micro-batches
    (gradient accumulation) and classes whose measured / predicted is far from 1."""
    out = []
    accumulation = prediction.config.grad_accumulation
    if accumulation > 1:
        out.append(f"the predicted step runs {accumulation:,} micro-batches (gradient accumulation to the global "
                   f"batch): a trace of one micro-batch per step needs global batch = micro-batch x dp "
                   f"({prediction.config.micro_batch * prediction.config.parallelism.dp:,})")
    far = [r.cls.replace("_", " ") for r in rows if math.isfinite(r.ratio) and r.measured_ms > 1.0
           and not FAR_RATIO[0] <= r.ratio <= FAR_RATIO[1]]
    if far:
        out.append(f"measured / predicted is below {FAR_RATIO[0]} or above {FAR_RATIO[1]} for {', '.join(far)}: "
                   "check that this is the configuration traced (model and its layers, micro-batch, sequence, steps)")
    return out


def calibration_warning() -> str:
    """The core's finding on calibrating from one trace, quoted from its evaluation (``TRACE_LOOP``) where the
    repository has it, so the numbers are the evaluation's and never copied here."""
    head = ("Calibrating from one trace fits this configuration; how well it carries to the job's other "
            "configurations is the core's evaluation")
    try:
        found = [m.group(0).rstrip(".") for m in _SUMMARY.finditer(read_text(TRACE_LOOP, what="trace-loop evaluation"))]
    except WorkbenchError:
        found = []
    where = "benchmarks/results/h200/stacks/TRACE_LOOP.md"
    if not found:
        return f"{head} (see {where})."
    return f"{head}: {'; '.join(line[0].lower() + line[1:] for line in found)} ({where})."
