"""Chart data from core results: pure functions from ``Prediction`` objects to small DataFrames.

Nothing here models performance: times, FLOPs, bytes, peaks, ridge points, memory and the largest micro-batch
all come from ``workbench`` (``predict``, ``GPU``, ``memory_breakdown``, ``max_micro_batch``, the calibration
constants). These functions only select, label and reshape them for the charts, and are tested without a
browser in ``tests/widgets/test_data.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from workbench.config import CHECKPOINTING, activation_dtype
from workbench.errors import WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB, max_micro_batch, memory_breakdown
from workbench.models import Model, get_model
from workbench.perf.efficiency import constants_for, profile_path
from workbench.perf.roofline import achievable_roofs, matrix_peak_key
from workbench.precision import get_precision
from workbench.predict import Prediction, predict
from workbench.stacks import get_stack
from widgets.formatting import (
    device_s, gb, gpus_text, host_text, mfu, ms, percent, prediction_stack_label, priced_as_bound,
)
from widgets.state import WorkbenchState

STEP_PARTS: tuple[tuple[str, str], ...] = (
    ("compute_bound_s", "compute-bound"),
    ("memory_bound_s", "memory-bound"),
    ("communication_s", "communication (exposed)"),
    ("optimizer_s", "optimizer"),
    ("bubble_s", "pipeline bubble"),
)
"""StepSummary fields that add up to the device's step time, with their chart labels."""
HOST_PART = "GPU waits for the CPU"
"""The step-chart part of a CPU-bound step: the CPU's launch time beyond the device's (``StepSummary.host_s``)."""
MEMORY_PARTS: tuple[str, ...] = ("params", "grads", "optimizer", "activations", "workspace")


def has_calibration(gpu: GPU) -> bool:
    """True when ``specs/calibration/<gpu>.yaml`` (or the WORKBENCH_CALIBRATION_DIR one) exists."""
    return profile_path(gpu).exists()


@dataclass(frozen=True)
class FitProblem:
    """Why a configuration does not fit one GPU, and the nearest one that does (or why there is none)."""

    needs_bytes: float
    usable_bytes: float
    suggestion: str = ""
    """e.g. "micro-batch 3 fits" (checked by predicting it), or "" when no smaller configuration was found."""

    def text(self) -> str:
        """ "does not fit: needs 165.2 GB of 133.9 GB usable; micro-batch 3 fits" """
        head = f"does not fit: needs {gb(self.needs_bytes)} of {gb(self.usable_bytes)} usable"
        return f"{head}; {self.suggestion}" if self.suggestion else head


@dataclass(frozen=True)
class Comparison:
    """The predictions of one state: one per GPU type, or the reason a GPU has none."""

    state: WorkbenchState
    predictions: dict[str, Prediction]
    """GPU catalog name -> its prediction, in the state's GPU order."""
    errors: dict[str, str] = field(default_factory=dict)
    """GPU catalog name -> why it could not be predicted (e.g. a precision it cannot run, even by fallback)."""
    fit: dict[str, FitProblem] = field(default_factory=dict)
    """GPU catalog name -> what does not fit, for the predictions whose memory exceeds the usable HBM."""


class Predictor:
    """``workbench.predict`` for a state, remembering recent predictions so that a control change only
    recomputes the GPUs it affects (a cache of ``maxsize`` entries, oldest dropped first)."""

    def __init__(self, maxsize: int = 64):
        self.maxsize = maxsize
        self._cache: dict[tuple, Prediction | str] = {}

    def one(self, model: Model, gpu: str, state: WorkbenchState) -> Prediction | str:
        calibrated = state.calibrated and has_calibration(get_gpu(gpu))
        compile = state.compile if get_stack(state.stack).compile == "recipe" else None  # the others ignore it
        key = (model, gpu, state.precision, state.micro_batch, state.seq_len, state.gpu_count, state.checkpointing,
               calibrated, state.stack, compile)
        if key not in self._cache:
            try:
                self._cache[key] = predict(model, gpu, micro_batch=state.micro_batch, seq_len=state.seq_len or 0,
                                           precision=state.precision, gpus=state.gpu_count,
                                           activation_checkpointing=state.checkpointing, calibrated=calibrated,
                                           allow_fallback=True, stack=state.stack, compile=compile)
            except WorkbenchError as exc:
                self._cache[key] = str(exc)
            while len(self._cache) > self.maxsize:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]

    def compare(self, state: WorkbenchState, custom_models: Mapping[str, Model] | None = None) -> Comparison:
        model = (custom_models or {}).get(state.model) or get_model(state.model)
        predictions, errors, fit = {}, {}, {}
        for gpu in state.gpus:
            result = self.one(model, gpu, state)
            if isinstance(result, str):
                errors[gpu] = result
            else:
                predictions[gpu] = result
                if not result.summary.memory.fits:
                    fit[gpu] = self.fit_problem(model, gpu, state, result)
        return Comparison(state, predictions, errors, fit)

    def fit_problem(self, model: Model, gpu: str, state: WorkbenchState, prediction: Prediction) -> FitProblem:
        """What does not fit, and the nearest configuration that does: a smaller micro-batch (the summary's
        ``max_micro_batch``), else more activation checkpointing (``workbench.memory.max_micro_batch`` per mode);
        each suggestion is predicted with the same stack, since a stack's own memory can differ from the memory
        model's."""
        memory = prediction.summary.memory

        def fits(micro_batch: int, mode: str) -> bool:
            trial = self.one(model, gpu, dataclasses.replace(state, micro_batch=micro_batch, checkpointing=mode))
            return not isinstance(trial, str) and trial.summary.memory.fits

        def first_fitting(largest: int, mode: str) -> int:
            while largest >= 1:  # the largest first, then halving (a few predictions at most)
                if fits(largest, mode):
                    return largest
                largest //= 2
            return 0

        largest = prediction.summary.max_micro_batch
        if 0 < largest < state.micro_batch and (mb := first_fitting(largest, state.checkpointing)):
            return FitProblem(memory.total, memory.usable, f"micro-batch {mb} fits")
        for mode in CHECKPOINTING[CHECKPOINTING.index(state.checkpointing) + 1:]:  # the modes that keep less
            cfg = dataclasses.replace(prediction.config, activation_checkpointing=mode)
            largest = min(max_micro_batch(prediction.model, cfg, prediction.gpu), state.micro_batch)
            if largest and (mb := first_fitting(largest, mode)):
                return FitProblem(memory.total, memory.usable,
                                  f"with {mode} activation checkpointing, micro-batch {mb} fits")
        return FitProblem(memory.total, memory.usable,
                          f"no micro-batch fits on {gpus_text(state.gpu_count)} with any checkpointing: add GPUs, or "
                          "see the Recipe tab's search (TP, PP)")


# ---------------------------------------------------------------------------------------------- roofline


def roofline_points(prediction: Prediction) -> pd.DataFrame:
    """One row per op of the step that does arithmetic: where it sits on the roofline (arithmetic intensity,
    predicted achieved TFLOP/s) and its share of the step. Ops without FLOPs (collectives) cannot sit on a
    log-log roofline and are left out; ``roofline_note`` says how much of the step they are."""
    frame = prediction.ops_frame()
    frame = frame[(frame["phase"] != "comm") & (frame["flops"] > 0)]
    out = frame.rename(columns={"name": "op", "arithmetic_intensity": "intensity", "count": "executions",
                                "layer": "block"})
    out.insert(0, "gpu", prediction.gpu.display_name)
    out["kind"] = out["kind"].str.replace("_", " ")  # legend and tooltips in words: "cross entropy"
    out["share_pct"] = out["share"] * 100
    return out[["gpu", "op", "kind", "phase", "block", "shape", "dtype", "executions", "flops", "bytes", "intensity",
                "achieved_tflops", "time_ms", "total_ms", "share_pct", "bound"]].reset_index(drop=True)


def roofline_note(prediction: Prediction, fit: FitProblem | None = None) -> str:
    """What the roofline chart cannot show for this prediction (exposed communication, the CPU's launch time,
    precision fallbacks, memory that does not fit: ``fit``'s text, with what fits instead), or "" when there is
    nothing to say."""
    s = prediction.summary
    parts = [f"exposed communication (not on the roofline) is {percent(s.communication_s / s.step_time_s)} of the "
             "step"] if s.communication_s > 0 else []
    if host := host_text(prediction):
        parts.append(host)
    parts += [n for n in prediction.notes if not (fit and n.startswith("does not fit:"))]
    if fit is not None:
        parts.append(fit.text())
    return f"{prediction.gpu.display_name}: {'; '.join(parts)}" if parts else ""


def _roof_keys(prediction: Prediction) -> list[str]:
    """Peak keys the step's ops run against (matrix precisions for GEMM/attention, fp32 vector math for the
    rest, as ``workbench.perf.roofline.compute_peak_flops`` does), plus the requested precision's own."""
    keys = {matrix_peak_key(o.op) if o.op.kind in ("gemm", "attention") else "fp32" for o in prediction.ops}
    keys.add(prediction.precision.requested.peak_key)
    return [k for k in prediction.gpu.peak_dense_tflops if k in keys]


def roofs(prediction: Prediction) -> pd.DataFrame:
    """The roofs of one GPU: per peak key its compute roof, the HBM roof, and the ridge point; from the
    datasheet ("spec"), and the achievable roofs of the calibration profile where the GPU has one ("calibrated":
    the fitted large-GEMM fraction of each peak and the fitted copy-kernel fraction of HBM bandwidth)."""
    gpu = prediction.gpu
    rows = []
    bandwidth = gpu.hbm_bandwidth_tb_s.value
    for key in _roof_keys(prediction):
        label = f"{key} {'vector' if key == 'fp32' else 'matrix'}"
        rows.append({"gpu": gpu.display_name, "roof": label, "source": "spec", "peak_tflops": gpu.peak_tflops(key),
                     "bandwidth_tb_s": bandwidth, "ridge": gpu.ridge_point(key)})
    if has_calibration(gpu):
        peaks, achieved_bw = achievable_roofs(gpu, constants_for(gpu, calibrated=True), _roof_keys(prediction),
                                              activation_dtype(prediction.precision.effective.name))
        for key, peak in peaks.items():
            rows.append({"gpu": gpu.display_name, "roof": f"{key} {'vector' if key == 'fp32' else 'matrix'}",
                         "source": "calibrated", "peak_tflops": peak, "bandwidth_tb_s": achieved_bw,
                         "ridge": peak / achieved_bw})
    return pd.DataFrame(rows)


def roof_lines(roof_frame: pd.DataFrame, x_range: tuple[float, float]) -> pd.DataFrame:
    """Each roof as a polyline over ``x_range`` (FLOP/byte): the HBM slope up to the ridge point, then flat.
    Rows: gpu, roof, source, order, intensity, tflops (what altair's line mark draws)."""
    low, high = x_range
    rows = []
    for r in roof_frame.itertuples(index=False):
        # attainable TFLOP/s = min(peak, bandwidth x intensity) at three intensities: the roofline itself
        points = [(low, min(r.peak_tflops, r.bandwidth_tb_s * low)), (r.ridge, r.peak_tflops), (high, r.peak_tflops)]
        for order, (x, y) in enumerate(p for p in points if low <= p[0] <= high):
            rows.append({"gpu": r.gpu, "roof": r.roof, "source": r.source, "order": order, "intensity": x, "tflops": y})
    return pd.DataFrame(rows)


def intensity_range(points: Sequence[pd.DataFrame], roof_frames: Sequence[pd.DataFrame]) -> tuple[float, float]:
    """An x range (FLOP/byte) holding every op and every ridge point, with a factor-2 margin each side."""
    values = [v for f in points for v in f["intensity"]] + [v for f in roof_frames for v in f["ridge"]]
    values = [v for v in values if v > 0 and v != float("inf")] or [1.0]
    return min(values) / 2, max(values) * 2


def op_detail(prediction: Prediction, op_name: str, compiled: bool = False) -> dict[str, object]:
    """Everything the model says about one op of the step (the Roofline tab shows it when a point is clicked);
    ``compiled``: the state's compile flag, for the stack's label."""
    matches = [o for o in prediction.ops if o.op.name == op_name]
    if not matches:
        raise WorkbenchError(f"no op {op_name!r} in the {prediction.gpu.display_name} prediction; ops: "
                             f"{', '.join(o.op.name for o in prediction.ops)}")
    o = matches[0]
    return {
        "GPU": prediction.gpu.display_name, "stack": prediction_stack_label(prediction, compiled), "op": o.op.name,
        "kind": o.op.kind, "phase": o.op.phase,
        "layer": o.op.layer, "shape": o.op.describe_shape(), "dtype": o.op.dtype,
        "GFLOP per execution": o.op.flops / 1e9, "MB moved per execution": o.op.bytes / 1e6,
        "arithmetic intensity (FLOP/byte)": o.op.arithmetic_intensity, "bound": o.bound,
        "roofline time (ms)": o.roofline_s * 1e3, "predicted time (ms)": o.time_s * 1e3,
        "executions per step": o.executions, "total per step (ms)": o.total_s * 1e3,
        "share of step": o.total_s / prediction.summary.step_time_s,
        "achieved TFLOP/s": o.op.flops / o.time_s / 1e12,
    }


# ---------------------------------------------------------------------------------------------- step time


def step_breakdown(comparison: Comparison) -> pd.DataFrame:
    """Per GPU, the step's stacked parts in ms (``layer`` "part": rows gpu, gpu_order, part, order, ms), plus one
    ``layer`` "label" row per GPU with the text the chart writes over its bar: the step time, tokens/s and MFU,
    or, for a configuration that does not fit, no parts at all and what does not fit by how much (``fits``
    False). A ``layer`` "note" row (written under the bar) says when the step was priced as the fused-step bound
    outside the stack's kernel tables, and the CPU's launch time (``StepSummary.host_s``) where the stack has one; a
    CPU-bound step gets a part for the GPU's wait, so the parts still add up to the step time."""
    rows = []
    for gpu_order, (name, p) in enumerate(comparison.predictions.items()):
        gpu = p.gpu.display_name
        problem = comparison.fit.get(name)
        if problem is not None:
            rows.append({"gpu": gpu, "gpu_order": gpu_order, "layer": "label", "ms": 0.0, "fits": False,
                         "text": problem.text()})
            continue
        s = p.summary
        for order, (field_name, label) in enumerate(STEP_PARTS):
            rows.append({"gpu": gpu, "gpu_order": gpu_order, "layer": "part", "part": label, "order": order,
                         "ms": getattr(s, field_name) * 1e3, "fits": True})
        rows.append({"gpu": gpu, "gpu_order": gpu_order, "layer": "part", "part": HOST_PART, "order": len(STEP_PARTS),
                     "ms": max(0.0, s.host_s - device_s(p)) * 1e3, "fits": True})
        text = (f"{ms(s.step_time_s)} · {s.tokens_per_s:,.0f} tokens/s total over {gpus_text(s.gpus)}"
                f"{f' ({s.tokens_per_s / s.gpus:,.0f} per GPU)' if s.gpus > 1 else ''} · MFU {mfu(p)}")
        rows.append({"gpu": gpu, "gpu_order": gpu_order, "layer": "label", "ms": 0.0, "fits": True, "text": text})
        below = []  # written under the bar
        if priced_as_bound(p) and not get_stack(s.stack).bound:  # outside the stack's kernel tables
            below.append("outside this stack's kernel tables: priced as the ideal fused step (a bound)")
        if s.host_s > 0:
            below.append(f"CPU-bound: the CPU needs {ms(s.host_s)} to launch the step" if s.host_s >= device_s(p)
                         else f"CPU launch time {ms(s.host_s)}, hidden under the GPU's {ms(device_s(p))}")
        if below:
            rows.append({"gpu": gpu, "gpu_order": gpu_order, "layer": "note", "ms": 0.0, "fits": True,
                         "text": " · ".join(below)})
    return pd.DataFrame(rows, columns=["gpu", "gpu_order", "layer", "part", "order", "ms", "fits", "text"])


# ---------------------------------------------------------------------------------------------- memory


def memory_by_checkpointing(prediction: Prediction) -> pd.DataFrame:
    """Per activation-checkpointing mode, the GB per GPU each holder needs (params, grads, optimizer states,
    activations, workspace), the GPU's HBM capacity and usable share, whether it fits, and the largest
    micro-batch that fits in that mode (``workbench.memory``). Rows: gpu, mode, part, gb and per-mode columns."""
    rows = []
    for mode in CHECKPOINTING:
        cfg = dataclasses.replace(prediction.config, activation_checkpointing=mode)
        mem = memory_breakdown(prediction.model, cfg, prediction.gpu)
        largest = max_micro_batch(prediction.model, cfg, prediction.gpu)
        label = f"fits, largest micro-batch {largest}" if mem.fits else "does not fit"
        for order, part in enumerate(MEMORY_PARTS):
            rows.append({"gpu": prediction.gpu.display_name, "mode": mode, "part": part, "part_order": order,
                         "gb": getattr(mem, part) / GB, "total_gb": mem.total / GB, "capacity_gb": mem.capacity / GB,
                         "usable_gb": mem.usable / GB, "fits": mem.fits, "max_micro_batch": largest,
                         "label": label})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- kernels


def measured_points(bench: pd.DataFrame) -> pd.DataFrame:
    """Benchmarked kernels (``workbench.bench.run_suite`` rows that ran) as roofline points: intensity
    (the case's FLOPs over its bytes) and the achieved TFLOP/s of our kernel and of the vendor baseline."""
    if bench.empty or "triton_ms" not in bench:
        return pd.DataFrame(columns=["case", "module", "dtype", "intensity", "tflops", "kernel"])
    ran = bench[bench["triton_ms"].notna() & (bench["flops"] > 0)]
    rows = []
    for r in ran.itertuples(index=False):
        for kernel, ms in (("triton", r.triton_ms), ("vendor", r.baseline_ms)):
            rows.append({"case": r.name, "module": r.module, "dtype": r.dtype, "intensity": r.flops / r.bytes,
                         "tflops": r.flops / ms / 1e9, "kernel": kernel})
    return pd.DataFrame(rows)


def precision_label(name: str) -> str:
    """``bf16 (2 bytes)``: a precision with its storage size, for the precision dropdown."""
    return f"{name} ({get_precision(name).bytes_per_element:g} bytes)"
