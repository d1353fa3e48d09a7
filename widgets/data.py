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
from workbench.models import Model, get_model, list_models
from workbench.perf.efficiency import constants_for, profile_path
from workbench.perf.roofline import achievable_roofs, matrix_peak_key
from workbench.precision import get_precision
from workbench.predict import Prediction, predict
from workbench.stacks import get_stack
from workbench.validation import Uncertainty, uncertainty
from widgets.formatting import (
    count, device_s, gb, gpus_text, host_text, mfu, ms, percent, prediction_stack_label, priced_as_bound,
    uncertainty_short, uncertainty_text,
)
from widgets.state import WorkbenchState, resolved_global_batch, training_config

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
    """e.g. "micro-batch 3 fits" (checked by predicting it with the same stack), or why nothing was found."""
    changes: dict = field(default_factory=dict)
    """The state changes (``Workbench.set``) that give the suggested configuration; {} when there is none."""

    @property
    def over_bytes(self) -> float:
        return self.needs_bytes - self.usable_bytes

    def shortfall(self) -> str:
        """ "does not fit: needs 165.2 GB of 133.9 GB usable (31.3 GB over)" """
        return (f"does not fit: needs {gb(self.needs_bytes)} of {gb(self.usable_bytes)} usable "
                f"({gb(self.over_bytes)} over)")

    def text(self) -> str:
        """ "does not fit: needs 165.2 GB of 133.9 GB usable (31.3 GB over); micro-batch 3 fits" """
        return f"{self.shortfall()}; {self.suggestion}" if self.suggestion else self.shortfall()


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
    uncertainty: dict[str, Uncertainty] = field(default_factory=dict)
    """GPU catalog name -> how far to trust its prediction (``workbench.validation``)."""


def uncertainty_for(prediction: Prediction) -> Uncertainty:
    """The validation record a prediction is judged by: its stack's on its GPU, or the ideal bound's where the
    step was priced as the bound (outside the stack's kernel tables)."""
    stack = "ideal" if prediction.summary.priced_as_bound else prediction.summary.stack
    return uncertainty(prediction.gpu.name, stack, prediction.calibrated)


def split_problem(gpu: GPU, state: WorkbenchState) -> str:
    """Why ``state``'s split cannot run on ``gpu`` (tensor parallelism beyond one scale-up domain), or ""."""
    domain = int(gpu.scale_up_domain_gpus.value)
    if state.tp > domain:
        return (f"tp = {state.tp} is beyond the {gpu.display_name}'s scale-up domain of {gpus_text(domain)}: tensor "
                f"parallelism runs inside one domain (choose tp <= {domain})")
    return ""


class Predictor:
    """``workbench.predict`` for a state, remembering recent predictions so that a control change only
    recomputes the GPUs it affects (a cache of ``maxsize`` entries, oldest dropped first)."""

    def __init__(self, maxsize: int = 64):
        self.maxsize = maxsize
        self._cache: dict[tuple, Prediction | str] = {}
        self._searches: dict[tuple, object] = {}

    def one(self, model: Model, gpu: str, state: WorkbenchState) -> Prediction | str:
        calibrated = state.calibrated and has_calibration(get_gpu(gpu))
        compile = state.compile if get_stack(state.stack).compile == "recipe" else None  # the others ignore it
        key = (model, gpu, state.precision, state.micro_batch, state.seq_len, state.gpu_count, state.tp, state.pp,
               state.ep, state.cp, state.virtual_stages, state.sharding, state.global_batch, state.lora_rank,
               state.checkpointing, calibrated, state.stack, compile, state.param_dtype)
        if key not in self._cache:
            try:
                problem = split_problem(get_gpu(gpu), state)
                self._cache[key] = problem or predict(
                    model, gpu, training_config(state, model), calibrated=calibrated, allow_fallback=True,
                    stack=state.stack, compile=compile, param_dtype=state.param_dtype)
            except WorkbenchError as exc:
                self._cache[key] = str(exc)
            while len(self._cache) > self.maxsize:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]

    def compare(self, state: WorkbenchState, custom_models: Mapping[str, Model] | None = None) -> Comparison:
        model = (custom_models or {}).get(state.model) or get_model(state.model)
        predictions, errors, fit, trust = {}, {}, {}, {}
        for gpu in state.gpus:
            result = self.one(model, gpu, state)
            if isinstance(result, str):
                errors[gpu] = result
            else:
                predictions[gpu] = result
                trust[gpu] = uncertainty_for(result)
                if not result.summary.memory.fits:
                    fit[gpu] = self.fit_problem(model, gpu, state, result)
        return Comparison(state, predictions, errors, fit, trust)

    def fits(self, model: Model, gpu: str, state: WorkbenchState) -> bool:
        trial = self.one(model, gpu, state)
        return not isinstance(trial, str) and trial.summary.memory.fits

    def fit_problem(self, model: Model, gpu: str, state: WorkbenchState, prediction: Prediction) -> FitProblem:
        """What does not fit, and the nearest configuration that does, each checked by predicting it with the
        same stack (a stack's own memory can differ from the memory model's): a smaller micro-batch (from the
        summary's ``max_micro_batch`` down), else more activation checkpointing, else the fitting candidate of
        ``workbench.recipe.search`` (same GPUs, same global batch) that changes the fewest of tp, pp, ep,
        sharding and checkpointing; when none fits, the fewest GPUs (x2, x4) that do."""
        memory = prediction.summary.memory

        def problem(text: str, changes: dict | None = None) -> FitProblem:
            return FitProblem(memory.total, memory.usable, text, changes or {})

        global_batch = resolved_global_batch(state, model)
        per_rank = global_batch // state.dp if state.global_batch else 0  # auto: any micro-batch (re-rounded)

        def first_fitting(largest: int, mode: str) -> int:
            for mb in range(min(largest, state.micro_batch - (mode == state.checkpointing)), 0, -1):
                if per_rank and per_rank % mb:
                    continue  # an explicit global batch: the micro-batch must divide each rank's share
                if self.fits(model, gpu, dataclasses.replace(state, micro_batch=mb, checkpointing=mode)):
                    return mb
                if mb < largest // 4:
                    break  # a few predictions at most: the memory model's estimate is close
            return 0

        largest = prediction.summary.max_micro_batch
        if 0 < largest < state.micro_batch and (mb := first_fitting(largest, state.checkpointing)):
            return problem(f"micro-batch {mb} fits", {"micro_batch": mb})
        for mode in CHECKPOINTING[CHECKPOINTING.index(state.checkpointing) + 1:]:  # the modes that keep less
            cfg = dataclasses.replace(prediction.config, activation_checkpointing=mode)
            largest = min(max_micro_batch(prediction.model, cfg, prediction.gpu), state.micro_batch)
            if largest and (mb := first_fitting(largest, mode)):
                changes = {"checkpointing": mode, **({"micro_batch": mb} if mb != state.micro_batch else {})}
                return problem(f"with {mode} activation checkpointing, micro-batch {mb} fits", changes)
        if state.model not in (m.name for m in list_models()):
            return problem(f"no micro-batch fits on {gpus_text(state.gpu_count)} with any checkpointing: add GPUs "
                           "or tensor/pipeline parallelism")
        for gpus in (state.gpu_count, 2 * state.gpu_count, 4 * state.gpu_count):
            if (changes := self._searched(model, gpu, state, gpus)) is not None:
                where = "" if gpus == state.gpu_count else f"on {gpus_text(gpus)}: "
                shown = {k: v for k, v in changes.items() if k != "gpu_count"}
                return problem(f"{where}{describe_changes(shown)} fits (the nearest fitting configuration of "
                               f"workbench.recipe.search)", changes)
        return problem(f"nothing fits on up to {gpus_text(4 * state.gpu_count)} (workbench.recipe.search): use more "
                       "GPUs or a GPU with more memory")

    def _searched(self, model: Model, gpu: str, state: WorkbenchState, gpus: int) -> dict | None:
        """The state changes to the fitting search candidate on ``gpus`` GPUs nearest to ``state``, checked with
        the state's stack; None when none fits."""
        from workbench.recipe.search import search

        global_batch = state.global_batch if state.global_batch and state.global_batch % gpus == 0 else 0
        key = (model, gpu, gpus, state.precision, state.seq_len, global_batch, state.calibrated)
        if key not in self._searches:
            try:
                self._searches[key] = search(model, gpu, gpus, precision=state.precision, seq_len=state.seq_len,
                                             global_batch=global_batch, calibrated=state.calibrated)
            except WorkbenchError:
                self._searches[key] = None
        result = self._searches[key]
        if result is None:
            return None
        here = {"tp": state.tp, "pp": state.pp, "ep": state.ep, "cp": state.cp, "virtual_stages": state.virtual_stages,
                "sharding": state.sharding, "checkpointing": state.checkpointing, "micro_batch": state.micro_batch}

        def changes_of(c) -> dict:
            p = c.config.parallelism
            there = {"tp": p.tp, "pp": p.pp, "ep": p.ep, "cp": p.cp, "virtual_stages": p.virtual_stages,
                     "sharding": p.sharding, "checkpointing": c.config.activation_checkpointing,
                     "micro_batch": c.config.micro_batch}
            return {k: v for k, v in there.items() if v != here[k]}

        def distance(c) -> tuple:
            changed = changes_of(c)
            return (len([k for k in changed if k != "micro_batch"]), abs(c.config.micro_batch - state.micro_batch),
                    -c.tokens_per_s)

        for candidate in sorted((c for c in result.candidates if c.fits), key=distance)[:4]:
            changes = changes_of(candidate)
            if gpus != state.gpu_count:
                changes["gpu_count"] = gpus
            if state.global_batch and not global_batch:
                changes["global_batch"] = 0
            try:
                trial = state.replace(**changes)
            except WorkbenchError:
                continue
            if self.fits(model, gpu, trial):
                return changes
        return None


SHARDING_WORDS = {"fsdp": "FSDP", "ddp": "DDP", "zero1": "ZeRO-1"}
PARAM_DTYPE_WORDS = {"fp32": "fp32 parameters (bf16 autocast)", "bf16": "bf16 parameters"}
"""A parameter dtype in words (``WorkbenchState.param_dtype``): fp32 stays the parameters' dtype under
``torch.autocast``; bf16 parameters are cast once."""


def describe_changes(changes: Mapping[str, object]) -> str:
    """State changes in words: "tp 2, selective activation checkpointing, micro-batch 1"."""
    words = {"gpu_count": lambda v: gpus_text(int(v)), "tp": lambda v: f"tp {v}", "pp": lambda v: f"pp {v}",
             "ep": lambda v: f"ep {v}", "cp": lambda v: f"cp {v}", "virtual_stages": lambda v: f"{v} virtual stages",
             "sharding": lambda v: SHARDING_WORDS.get(str(v), str(v)),
             "checkpointing": lambda v: f"{v} activation checkpointing", "micro_batch": lambda v: f"micro-batch {v}",
             "global_batch": lambda v: "global batch auto" if not v else f"global batch {v:,}"}
    return ", ".join(words[k](v) for k, v in changes.items() if k in words) or "the same configuration"


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


STEP_COLUMNS: tuple[str, ...] = ("gpu", "gpu_order", "layer", "part", "order", "ms", "fits", "step_ms",
                                 "uncertainty", "uncertainty_text", "text")
"""The Step time chart's frame (``step_breakdown``)."""


def step_breakdown(comparison: Comparison) -> pd.DataFrame:
    """Per GPU, the step's stacked parts in ms (``layer`` "part": rows gpu, gpu_order, part, order, ms), plus one
    ``layer`` "label" row per GPU with the text the chart writes over its bar: the step time with its uncertainty,
    tokens/s in total and per GPU, and MFU against its peak; or, for a configuration that does not fit, no parts
    at all and what does not fit by how much (``fits`` False, no step time, no MFU), its "note" row the nearest
    configuration that fits. A ``layer`` "note" row (written under the bar) says when the step was priced as the
    fused-step bound outside the stack's kernel tables, and the CPU's launch time (``StepSummary.host_s``) where
    the stack has one; a CPU-bound step gets a part for the GPU's wait, so the parts still add up to the step
    time. Each text is one line the chart can hold (``charts.step_chart`` cuts at its width).

    Every row of a GPU carries ``fits`` (bool), ``step_ms`` (the whole step, where an error bar is centred; null
    when it does not fit), ``uncertainty`` (the relative step-time error of the validation record, e.g. 0.039;
    null for a bound, an unvalidated GPU or stack, or a configuration that does not fit) and
    ``uncertainty_text`` (``widgets.formatting.uncertainty_text``)."""
    rows = []
    for gpu_order, (name, p) in enumerate(comparison.predictions.items()):
        gpu = p.gpu.display_name
        problem = comparison.fit.get(name)
        trust = comparison.uncertainty.get(name) or uncertainty_for(p)
        s = p.summary
        if problem is not None:
            common = {"gpu": gpu, "gpu_order": gpu_order, "ms": 0.0, "fits": False, "step_ms": None,
                      "uncertainty": None, "uncertainty_text": ""}
            rows.append({**common, "layer": "label", "text": problem.shortfall()})
            if problem.suggestion:
                rows.append({**common, "layer": "note", "text": problem.suggestion})
            continue
        common = {"gpu": gpu, "gpu_order": gpu_order, "fits": True, "step_ms": s.step_time_s * 1e3,
                  "uncertainty": trust.relative, "uncertainty_text": uncertainty_text(trust, s.gpus)}
        for order, (field_name, label) in enumerate(STEP_PARTS):
            rows.append({**common, "layer": "part", "part": label, "order": order, "ms": getattr(s, field_name) * 1e3})
        rows.append({**common, "layer": "part", "part": HOST_PART, "order": len(STEP_PARTS),
                     "ms": max(0.0, s.host_s - device_s(p)) * 1e3})
        rows.append({**common, "layer": "label", "ms": 0.0, "text": headline(p, trust)})
        below = []  # written under the bar
        if priced_as_bound(p) and not get_stack(s.stack).bound:  # outside the stack's kernel tables
            below.append("outside this stack's kernel tables: priced as the ideal fused step (a bound)")
        if s.host_s > 0:
            below.append(f"CPU-bound: the CPU needs {ms(s.host_s)} to launch the step" if s.host_s >= device_s(p)
                         else f"CPU launch time {ms(s.host_s)}, hidden under the GPU's {ms(device_s(p))}")
        if below:
            rows.append({**common, "layer": "note", "ms": 0.0, "text": " · ".join(below)})
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def headline(prediction: Prediction, trust: Uncertainty) -> str:
    """ "21,540.3 ms ± 3.9% · 97,345 tokens/s total over 8 GPUs (12,168 per GPU) · MFU 59.3% of the bf16 dense
    peak ± 3.9%": every number with its uncertainty (``uncertainty_short``) and what it counts."""
    s = prediction.summary
    plus = f" {uncertainty_short(trust)}" if trust.relative is not None else ""
    tail = "" if plus else f" ({uncertainty_short(trust)})"
    return (f"{ms(s.step_time_s)}{plus} · {count(s.tokens_per_s)} tokens/s total over {gpus_text(s.gpus)}"
            f"{f' ({count(s.tokens_per_s / s.gpus)} per GPU)' if s.gpus > 1 else ''}{plus} · MFU {mfu(prediction)}"
            f"{plus}{tail}")


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
