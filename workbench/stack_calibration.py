"""Calibrating a training stack on one GPU from a profiler trace of the user's own job: measured kernel time per
op class against the model's prediction of the same configuration, one scale factor per class, the step's idle
gap (or, when the CPU held the step back, a scale on the stack's host time), written as a profile in the user's
folder and applied by ``predict(..., stack=S, calibrated=True)``.

    >>> from workbench.trace import load_trace
    >>> fit = fit_trace(load_trace("run.json.gz", steps=2), "llama3.2-1b", "h200",
    ...                 TrainingConfig(3, 2048), stack="pytorch-eager")
    >>> write_stack_profile(fit.profile)      # ~/.config/workbench/calibration/h200-sxm-stack-pytorch-eager.yaml

The model of the calibrated step (one configuration informs it, so it is kept to one factor per class):

- each op's time is its predicted time x the factor of its class group (``FIT_GROUPS``: the trace's classes
  that a name-only trace tells apart the same way the model's tables do), never below its roofline time;
  library kernels (GEMM, attention, collectives) carry over to the other compile mode, the inductor- and
  ATen-generated ones only to the mode the trace ran in;
- the trace's idle time (wall minus busy, per step) is held constant per step, in two parts
  (``workbench.trace.idle_split``): the step boundary (``step_gap_ms``: the GPU idle before the step's first kernel
  and after its last, the trainer's data loading, logging and synchronize; torchtitan's trace: 7.3 of its 10.0 ms)
  is host work between steps, the same in both compile modes and whether the step is host- or device-bound; the
  in-step idle (``idle_gap_ms``) and the measured kernel time of groups the model has no op for (``unmatched_ms``)
  belong to the traced mode. A trace of steps run back to back gives the in-step idle of its first step, which
  starts on an empty queue as a synchronized step does (the plain loop's 1B trace: 4.47 ms, the later step 3.24):
  step = max(calibrated device time + in-step idle, host time) + step boundary;
- host time is not fitted: a device-bound trace does not show it, and a host-bound one (the GPU idle between
  kernels more than ``HOST_BOUND_IDLE`` of the step) overstates it, the profiler's CUPTI callbacks slowing every
  launch (the plain loop's host-bound bf16 trace: 120.4 ms a step, 102.2 ms unprofiled). A host-bound trace keeps
  neither its in-step idle nor its kernel factors: its idle GPU runs the kernels faster than a busy one does (that
  trace's GEMMs 0.82 x the model, 0.94 in the same loop at twice the tokens, device-bound), so its factors do not
  carry to the device-bound configurations a prediction is for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import SpecError, WorkbenchError
from workbench.fileio import check_output, load_yaml, write_text
from workbench.hardware import GPU, get_gpu
from workbench.paths import find_calibration_file, user_calibration_dir
from workbench.profile_fit import NO_FIT, StackFit  # StackFit re-exported: how a prediction applies a profile
from workbench.schema import Fields
from workbench.trace import CLASSES, Trace, idle_split, op_class

SCHEMA_VERSION = 1
FIT_GROUPS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm",),
    "attention_fwd": ("attention_fwd",),
    "attention_bwd": ("attention_bwd",),
    "norm": ("norm",),
    "pointwise": ("activation", "elementwise", "rope", "copy_cast", "reduction", "fused", "fp8_quantize"),
    "cross_entropy": ("cross_entropy",),
    "embedding": ("embedding_fwd", "embedding_bwd"),
    "optimizer": ("optimizer",),
    "fsdp": ("fsdp",),
    "communication": ("communication",),
    "other": ("other",),
}
"""One scale factor per group. ``pointwise`` is one group because a trace without CPU frames cannot tell a RoPE
product from a SwiGLU product, and inductor fuses casts, adds and activations into one kernel whose name lists
them all: split finer, the classes' factors would trade time between them from one configuration to the next."""
GROUP_OF = {cls: group for group, classes in FIT_GROUPS.items() for cls in classes}
assert set(GROUP_OF) == set(CLASSES), "every trace class has a fit group"
LIBRARY_GROUPS = frozenset({"gemm", "attention_fwd", "attention_bwd", "communication"})
"""Groups whose kernels come from libraries (cuBLAS, cuDNN / flash, NCCL), the same with and without compile."""
HOST_BOUND_IDLE = 0.10
"""A policy: a trace whose GPU idles between the step's kernels more than this share of the step's wall time is
host-bound (the committed device-bound traces idle 1.0-3.6% in-step; the plain loop's host-bound bf16 trace 31%);
neither its in-step idle nor its kernel factors are kept (see the module docstring)."""


def profile_name(stack: str, gpu: GPU) -> str:
    return f"{gpu.name}-stack-{stack}.yaml"


def user_stack_profile_path(stack: str, gpu: GPU) -> Path:
    """Where ``workbench calibrate --trace`` writes a stack's profile for ``gpu`` (the user's folder)."""
    return user_calibration_dir() / profile_name(stack, gpu)


def stack_profile_path(stack: str, gpu: GPU) -> Path:
    """The stack profile calibrated predictions read: the user's, else a shipped one (possibly absent)."""
    return find_calibration_file(profile_name(stack, gpu))


@dataclass(frozen=True)
class StackProfile:
    """Scale factors of one stack on one GPU, fitted on one traced configuration."""

    stack: str
    gpu: str
    compiled: bool
    """Whether the traced run was compiled: non-library factors apply only to runs in the same mode."""
    scales: dict[str, float]
    """Fit group -> measured / predicted kernel time at the traced configuration."""
    gemm_dtypes: tuple[str, ...]
    """The GEMM dtypes of the traced configuration: the gemm factor applies to GEMMs of these only."""
    classes: tuple[str, ...]
    """The op classes the model had ops of at the traced configuration: a group's factor applies to its ops of
    these classes only (the bf16 trace's pointwise factor says nothing of an fp8 run's quantization kernels)."""
    idle_gap_ms: float
    """Per step, the GPU idle between the traced step's kernels: applies to runs in the traced compile mode."""
    unmatched_ms: float
    host_scale: float | None
    base: str
    """The constants the factors multiply: ``calibrated`` (the GPU's profile, what calibrated=True reads) or ``spec``."""
    step_gap_ms: float = 0.0
    """Per step, the GPU idle at the step's boundary (host work between steps): applies to runs in both modes."""
    fitted_on: dict = field(default_factory=dict)
    measured_ms: dict[str, float] = field(default_factory=dict)
    predicted_ms: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    origin: str = ""

    def scale(self, op: Any, compiled: bool) -> float:
        cls = op_class(op)
        group = GROUP_OF[cls]
        if cls not in self.classes or group not in self.scales or (group not in LIBRARY_GROUPS and compiled != self.compiled):
            return 1.0
        if group == "gemm" and op.dtype not in self.gemm_dtypes:
            return 1.0
        return self.scales[group]

    def as_document(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "stack": self.stack, "gpu": self.gpu, "compiled": self.compiled,
                "base_constants": self.base, "fitted_on": self.fitted_on,
                "date": dt.date.today().isoformat(),
                "scales": {k: round(v, 5) for k, v in self.scales.items()}, "gemm_dtypes": list(self.gemm_dtypes),
                "classes": list(self.classes),
                "step_gap_ms": round(self.step_gap_ms, 4),
                "idle_gap_ms": round(self.idle_gap_ms, 4), "unmatched_ms": round(self.unmatched_ms, 4),
                "host_scale": None if self.host_scale is None else round(self.host_scale, 5),
                "measured_ms": {k: round(v, 4) for k, v in self.measured_ms.items()},
                "predicted_ms": {k: round(v, 4) for k, v in self.predicted_ms.items()},
                "not_fitted": self.skipped}


def stack_profile_from_dict(data: object, origin: str = "<dict>") -> StackProfile:
    """A profile from its parsed YAML, checked: unknown keys and bad values name the file and the field."""
    top = Fields(data, origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION}")
    scales_f = top.sub("scales")
    scales = {}
    for name in list(scales_f.data):
        if name not in FIT_GROUPS:
            raise scales_f.error(name, scales_f.data[name], f"a fit group ({', '.join(FIT_GROUPS)})")
        scales[name] = scales_f.number(name, above=0)
    scales_f.finish()
    host = top.raw("host_scale", None)
    if host is not None:
        host = top.number("host_scale", above=0)
    tables = {}
    for key in ("measured_ms", "predicted_ms"):
        table = top.sub(key, default={})
        tables[key] = {name: table.number(name, minimum=0) for name in list(table.data)}
        table.finish()
    fitted_on, skipped = top.raw("fitted_on", {}), top.raw("not_fitted", {})
    profile = StackProfile(
        stack=top.string("stack"), gpu=get_gpu(top.string("gpu")).name, compiled=top.boolean("compiled"),
        scales=scales, gemm_dtypes=top.string_list("gemm_dtypes", default=["bf16"]),
        classes=top.string_list("classes", CLASSES),
        idle_gap_ms=top.number("idle_gap_ms", minimum=0), unmatched_ms=top.number("unmatched_ms", minimum=0),
        host_scale=host, base=top.string("base_constants", ("calibrated", "spec")),
        step_gap_ms=top.number("step_gap_ms", minimum=0, default=0.0),
        fitted_on=fitted_on if isinstance(fitted_on, dict) else {}, measured_ms=tables["measured_ms"],
        predicted_ms=tables["predicted_ms"], skipped=skipped if isinstance(skipped, dict) else {}, origin=origin)
    top.raw("date", None)  # informational; an older or hand-written profile may lack it
    top.finish()
    return profile


def load_stack_profile(stack: str, gpu: GPU, path: str | Path | None = None) -> StackProfile | None:
    """The stack's profile for ``gpu`` (None when there is none); one for another stack or GPU is an error."""
    path = Path(path) if path else stack_profile_path(stack, gpu)
    try:
        info = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    profile = _read_profile(str(path), info.st_mtime_ns, info.st_size)
    if (profile.stack, profile.gpu) != (stack, gpu.name):
        raise SpecError(str(path), "stack/gpu", f"{profile.stack}/{profile.gpu}",
                        f"{stack}/{gpu.name} (the profile's name says so)")
    return profile


@functools.lru_cache(maxsize=32)
def _read_profile(path: str, mtime_ns: int, size: int) -> StackProfile:
    """One parse per version of the file (search predicts thousands of steps with calibrated=True)."""
    return stack_profile_from_dict(load_yaml(path, what="stack calibration profile"), path)


# ------------------------------------------------------------------------------------------- applying a profile
# (``StackFit``, in ``workbench.profile_fit``: an uncalibrated prediction imports that, not this module)

def stack_fit(stack: str, gpu: GPU, compiled: bool, notes: list[str] | None = None) -> StackFit:
    """The stack profile a calibrated prediction of ``stack`` on ``gpu`` applies (``NO_FIT`` without one); says in
    ``notes`` which one and what of it applies."""
    profile = load_stack_profile(stack, gpu)
    if profile is None:
        return NO_FIT
    if notes is not None:
        on = profile.fitted_on
        what = (f"{on.get('model', '?')} mb{on.get('micro_batch', '?')} s{on.get('seq_len', '?')} "
                f"ac={on.get('checkpointing', '?')}{' compiled' if profile.compiled else ''}")
        part = "" if profile.compiled == compiled else (" (GEMM and attention factors and the step boundary only: "
                                                        f"it was fitted on a {'compiled' if profile.compiled else 'eager'} "
                                                        "run)")
        notes.append(f"stack profile {profile.origin} applied{part}: fitted on a trace of {what}")
    return StackFit(profile, compiled)


# ------------------------------------------------------------------------------------------------ fitting one
@dataclass(frozen=True)
class GroupRow:
    group: str
    measured_ms: float
    predicted_ms: float
    scale: float | None
    note: str = ""


@dataclass(frozen=True)
class TraceFit:
    """A fitted profile with what it was fitted on: per group measured and predicted ms per step, the step."""

    profile: StackProfile
    rows: list[GroupRow]
    measured_wall_ms: float
    measured_busy_ms: float
    predicted_step_ms: float
    """The uncalibrated prediction of the traced configuration (its ``base`` constants)."""
    calibrated_step_ms: float
    predicted_host_ms: float
    unknown_kernels: list[tuple[str, float]]
    in_step_idle_ms: float = 0.0
    """The trace's in-step idle (``workbench.trace.idle_split``), kept or not."""


def base_constants(gpu: GPU):
    """(constants, label) the factors multiply: the GPU's calibration profile if there is one, else the spec."""
    from workbench.perf.efficiency import constants_for, profile_path

    if profile_path(gpu).is_file():
        return constants_for(gpu, calibrated=True), "calibrated"
    return constants_for(gpu, calibrated=False), "spec"


def fit_trace(trace: Trace, model: Any, gpu: str | GPU, config: Any, *, stack: str, compile: bool | None = None,
              param_dtype: str | None = None) -> TraceFit:
    """Fit ``stack``'s profile on ``gpu`` from ``trace``, a profile of ``model`` trained with ``config``
    (``workbench.config.TrainingConfig``; ``compile``, ``param_dtype`` as ``predict`` takes them)."""
    from workbench.perf import op_time
    from workbench.predict import predict
    from workbench.stacks import get_stack

    gpu = get_gpu(gpu)
    stack_obj = get_stack(stack)
    constants, base = base_constants(gpu)
    # the stack's own GEMM factors (``Stack.gemm_constants``), as ``StepModel.constants`` applies them to a calibrated
    # prediction: the profile's factors are fitted over what they will multiply
    constants = stack_obj.gemm_constants(constants, gpu.architecture)
    p = predict(model, gpu, config, stack=stack_obj, compile=compile, param_dtype=param_dtype, constants=constants)
    if p.summary.priced_as_bound:
        raise WorkbenchError(f"stack {stack_obj.name} prices this configuration as the fused-step bound "
                             f"({'; '.join(p.notes) or 'the ideal stack'}): a trace cannot calibrate a bound")
    compiled = stack_obj.compiled(bool(compile) if compile is not None else False)
    measured = {g: 0.0 for g in FIT_GROUPS}
    for e in trace.kernels:
        measured[GROUP_OF[e.klass]] += e.duration_us / trace.steps / 1e3
    predicted = {g: 0.0 for g in FIT_GROUPS}
    for o in p.ops:
        predicted[GROUP_OF[op_class(o.op)]] += o.total_s * 1e3
    for c in p.comms:
        predicted["communication"] += c.exposed_s * 1e3
    scales, skipped, rows, unmatched = {}, {}, [], 0.0
    for g in FIT_GROUPS:
        m, q = measured[g], predicted[g]
        if not m and not q:
            continue
        if g == "communication" and m > 0 and q > 0:  # exposed time in the prediction, busy time in the trace
            skipped[g] = "collectives are not rescaled from a trace yet (the trace's time overlaps compute)"
            rows.append(GroupRow(g, m, q, None, "not fitted"))
        elif m > 0 and q > 0:
            scales[g] = m / q
            rows.append(GroupRow(g, m, q, m / q))
        elif m > 0:
            unmatched += m
            skipped[g] = f"the model has no op of this group: its {m:.3g} ms per step are held constant"
            rows.append(GroupRow(g, m, q, None, "held constant"))
        else:
            skipped[g] = "the trace has no kernel of this group: the model's ops keep their time"
            rows.append(GroupRow(g, m, q, None, "not in the trace"))
    wall, busy = trace.wall_ms_per_step, trace.busy_ms_per_step
    host_ms = p.summary.host_s * 1e3
    split = idle_split(trace)
    idle = split.in_step_ms
    host_scale = None  # not fitted from a trace: see HOST_BOUND_IDLE
    if wall > 0 and idle / wall > HOST_BOUND_IDLE:
        skipped["idle_gap"] = (f"the GPU idles {idle / wall:.1%} of the traced step between its kernels: a host-bound "
                               "trace, whose CPU the profiler slowed (CUPTI callbacks on every launch) and whose idle "
                               "GPU ran its kernels faster than a busy one does; neither its in-step idle, a host "
                               "scale nor its kernel factors are kept")
        idle = 0.0
        for g in list(scales):
            skipped[g] = f"measured / predicted {scales.pop(g):.3f} on a host-bound trace: not kept"
        rows = [dataclasses.replace(r, scale=None, note="not kept (host-bound)") if r.scale is not None else r
                for r in rows]
    elif host_ms > 0:
        skipped["host_scale"] = (f"the GPU idles {idle / wall:.1%} of the traced step between its kernels (host-bound "
                                 f"above {HOST_BOUND_IDLE:.0%}): the stack's host constants keep their values")
    gemm_dtypes = tuple(sorted({o.op.dtype for o in p.ops if o.op.kind == "gemm"}))
    classes = tuple(c for c in CLASSES if any(op_class(o.op) == c and o.total_s > 0 for o in p.ops))
    on = {"trace": trace.origin, "steps": trace.steps, "model": p.model.name, "layers": getattr(p.model, "num_layers", 0),
          "micro_batch": p.config.micro_batch, "seq_len": p.config.seq_len, "precision": p.config.precision,
          "checkpointing": p.config.activation_checkpointing, "compile": compiled,
          "param_dtype": stack_obj.param_dtype(param_dtype)}
    on["idle_split"] = split.how
    profile = StackProfile(stack_obj.name, gpu.name, compiled, scales, gemm_dtypes, classes, idle, unmatched, host_scale, base,
                           split.step_gap_ms, on, {g: measured[g] for g in FIT_GROUPS if measured[g]},
                           {g: predicted[g] for g in FIT_GROUPS if predicted[g]}, skipped)
    fit = StackFit(profile, compiled)
    device = 0.0
    for o in p.ops:
        device += fit.op_time(o.op, op_time(o.op, gpu, constants)).time_s * o.executions
    device += sum(c.exposed_s for c in p.comms)
    calibrated = max(device + fit.idle_gap_s, fit.host_s(p.summary.host_s)) * 1e3
    return TraceFit(profile, rows, wall, busy, p.summary.step_time_s * 1e3, calibrated, host_ms,
                    trace.unknown_kernels, split.in_step_ms)


def write_stack_profile(profile: StackProfile, path: str | Path | None = None, *, overwrite: bool = False) -> str:
    """Write ``profile`` atomically: ``path``, by default the user's ``<gpu>-stack-<stack>.yaml`` (never the shipped
    specs/); an existing file is replaced only with ``overwrite=True`` (CLI: ``--force``)."""
    path = Path(path or user_stack_profile_path(profile.stack, get_gpu(profile.gpu)))
    check_output(path, overwrite=overwrite)
    header = (f"# Stack calibration profile: {profile.stack} on {profile.gpu}, fitted by `workbench calibrate --trace`.\n"
              "# Predictions use it with predict(..., stack=..., calibrated=True) (CLI: --stack ... --calibrated).\n"
              "# scales: measured / predicted kernel time per op-class group at the traced configuration.\n")
    write_text(path, header + yaml.safe_dump(profile.as_document(), sort_keys=False), overwrite=overwrite)
    return str(path)


def describe(fit: TraceFit) -> list[str]:
    """The lines ``workbench calibrate --trace`` prints: per group measured vs predicted, then the step."""
    lines = [f"{'class group':<15} {'measured ms':>12} {'predicted ms':>13} {'ratio':>7}"]
    for r in fit.rows:
        ratio = f"{r.scale:7.3f}" if r.scale is not None else f"{'-':>7}"
        lines.append(f"{r.group:<15} {r.measured_ms:12.2f} {r.predicted_ms:13.2f} {ratio}  {r.note}".rstrip())
    pr = fit.profile
    lines.append(f"{'kernels':<15} {sum(r.measured_ms for r in fit.rows):12.2f} "
                 f"{sum(r.predicted_ms for r in fit.rows):13.2f}")
    lines.append(f"step: measured wall {fit.measured_wall_ms:.2f} ms (busy {fit.measured_busy_ms:.2f}, idle "
                 f"{fit.measured_wall_ms - fit.measured_busy_ms:.2f}: step boundary {pr.step_gap_ms:.2f}, in-step "
                 f"{fit.in_step_idle_ms:.2f} from {pr.fitted_on.get('idle_split', '?')}); predicted "
                 f"{fit.predicted_step_ms:.2f} ms ({pr.base} constants, host {fit.predicted_host_ms:.2f}), calibrated "
                 f"{fit.calibrated_step_ms:.2f} ms ({fit.calibrated_step_ms / fit.measured_wall_ms - 1:+.1%})"
                 if fit.measured_wall_ms else "")
    if "idle_gap" in pr.skipped:
        lines.append("warning: a host-bound trace: its kernel factors and in-step idle are not kept (an idle GPU runs "
                     "its kernels faster than a busy one); trace a configuration that keeps the GPU busy")
    far = [r.group for r in fit.rows if r.scale is not None and not 0.5 <= r.scale <= 2.0 and r.measured_ms > 1.0]
    if far:
        lines.append(f"warning: measured / predicted is below 0.5 or above 2 for {', '.join(far)}: check that the "
                     "configuration given is the one traced (model and its layers, micro-batch, sequence, --steps)")
    for name, ms in fit.unknown_kernels[:10]:
        lines.append(f"unknown kernel (class other): {ms:.3f} ms/step {name[:100]}")
    if len(fit.unknown_kernels) > 10:
        lines.append(f"... and {len(fit.unknown_kernels) - 10} more unknown kernels")
    return lines
