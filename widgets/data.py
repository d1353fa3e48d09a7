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
from widgets.state import WorkbenchState

STEP_PARTS: tuple[tuple[str, str], ...] = (
    ("compute_bound_s", "compute-bound"),
    ("memory_bound_s", "memory-bound"),
    ("communication_s", "communication (exposed)"),
    ("optimizer_s", "optimizer"),
    ("bubble_s", "pipeline bubble"),
)
"""StepSummary fields that add up to the step time, with their chart labels."""
MEMORY_PARTS: tuple[str, ...] = ("params", "grads", "optimizer", "activations", "workspace")


def has_calibration(gpu: GPU) -> bool:
    """True when ``specs/calibration/<gpu>.yaml`` (or the WORKBENCH_CALIBRATION_DIR one) exists."""
    return profile_path(gpu).exists()


@dataclass(frozen=True)
class Comparison:
    """The predictions of one state: one per GPU type, or the reason a GPU has none."""

    state: WorkbenchState
    predictions: dict[str, Prediction]
    """GPU catalog name -> its prediction, in the state's GPU order."""
    errors: dict[str, str] = field(default_factory=dict)
    """GPU catalog name -> why it could not be predicted (e.g. a precision it cannot run, even by fallback)."""


class Predictor:
    """``workbench.predict`` for a state, remembering recent predictions so that a control change only
    recomputes the GPUs it affects (a cache of ``maxsize`` entries, oldest dropped first)."""

    def __init__(self, maxsize: int = 64):
        self.maxsize = maxsize
        self._cache: dict[tuple, Prediction | str] = {}

    def one(self, model: Model, gpu: str, state: WorkbenchState) -> Prediction | str:
        calibrated = state.calibrated and has_calibration(get_gpu(gpu))
        key = (model, gpu, state.precision, state.micro_batch, state.seq_len, state.gpu_count, state.checkpointing,
               calibrated)
        if key not in self._cache:
            try:
                self._cache[key] = predict(model, gpu, micro_batch=state.micro_batch, seq_len=state.seq_len or 0,
                                           precision=state.precision, gpus=state.gpu_count,
                                           activation_checkpointing=state.checkpointing, calibrated=calibrated,
                                           allow_fallback=True)
            except WorkbenchError as exc:
                self._cache[key] = str(exc)
            while len(self._cache) > self.maxsize:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]

    def compare(self, state: WorkbenchState, custom_models: Mapping[str, Model] | None = None) -> Comparison:
        model = (custom_models or {}).get(state.model) or get_model(state.model)
        predictions, errors = {}, {}
        for gpu in state.gpus:
            result = self.one(model, gpu, state)
            if isinstance(result, str):
                errors[gpu] = result
            else:
                predictions[gpu] = result
        return Comparison(state, predictions, errors)


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
    out["share_pct"] = out["share"] * 100
    return out[["gpu", "op", "kind", "phase", "block", "shape", "dtype", "executions", "flops", "bytes", "intensity",
                "achieved_tflops", "time_ms", "total_ms", "share_pct", "bound"]].reset_index(drop=True)


def roofline_note(prediction: Prediction) -> str:
    """What the roofline chart cannot show for this prediction (exposed communication, precision fallbacks,
    memory that does not fit), or "" when there is nothing to say."""
    s = prediction.summary
    parts = [f"exposed communication (not on the roofline) is {s.communication_s / s.step_time_s:.1%} of the step"
             ] if s.communication_s > 0 else []
    parts += prediction.notes
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


def op_detail(prediction: Prediction, op_name: str) -> dict[str, object]:
    """Everything the model says about one op of the step (the Roofline tab shows it when a point is clicked)."""
    matches = [o for o in prediction.ops if o.op.name == op_name]
    if not matches:
        raise WorkbenchError(f"no op {op_name!r} in the {prediction.gpu.display_name} prediction; ops: "
                             f"{', '.join(o.op.name for o in prediction.ops)}")
    o = matches[0]
    return {
        "GPU": prediction.gpu.display_name, "op": o.op.name, "kind": o.op.kind, "phase": o.op.phase,
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
    """Per GPU, the step's stacked parts in ms (rows gpu, gpu_order, part, order, ms)."""
    rows = []
    for gpu_order, p in enumerate(comparison.predictions.values()):
        for order, (name, label) in enumerate(STEP_PARTS):
            rows.append({"gpu": p.gpu.display_name, "gpu_order": gpu_order, "part": label, "order": order,
                         "ms": getattr(p.summary, name) * 1e3})
    return pd.DataFrame(rows, columns=["gpu", "gpu_order", "part", "order", "ms"])


def summary_table(comparison: Comparison) -> pd.DataFrame:
    """One row per GPU: step time, tokens/s, samples/s, MFU, memory and fit, largest micro-batch, notes."""
    rows = []
    for name, p in comparison.predictions.items():
        s = p.summary
        rows.append({"gpu": p.gpu.display_name, "precision": p.precision.effective.name,
                     "calibrated": p.calibrated, "step_ms": s.step_time_s * 1e3, "tokens_per_s": s.tokens_per_s,
                     "samples_per_s": s.samples_per_s, "mfu": s.mfu, "memory_gb": s.memory.total / GB,
                     "hbm_gb": s.memory.capacity / GB, "fits": s.memory.fits, "max_micro_batch": s.max_micro_batch,
                     "notes": "; ".join(p.notes)})
    for name, error in comparison.errors.items():
        rows.append({"gpu": get_gpu(name).display_name, "notes": f"not predicted: {error}"})
    return pd.DataFrame(rows)


def summary_text(comparison: Comparison) -> str:
    """A plain-text prediction summary (the widget's text representation, e.g. in saved notebooks)."""
    s = comparison.state
    lines = [f"Workbench: {s.model}, {s.precision}, micro_batch={s.micro_batch}, seq_len={s.seq_len}, "
             f"{s.gpu_count} GPUs each, checkpointing={s.checkpointing}"]
    for p in comparison.predictions.values():
        m = p.summary
        lines.append(f"  {p.gpu.name}: step_time_s={m.step_time_s:.4g} tokens_per_s={m.tokens_per_s:.4g} "
                     f"mfu={m.mfu:.3f} memory_gb={m.memory.total / GB:.1f} fits={m.memory.fits}")
    lines += [f"  {name}: not predicted: {error}" for name, error in comparison.errors.items()]
    return "\n".join(lines)


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
