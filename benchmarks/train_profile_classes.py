"""Where a training step's device time goes: a torch.profiler chrome trace read into kernels, each kernel put in
an operator class of the analytical model, and the model's own per-op prediction summed into the same classes.

Pure Python (no torch import): ``benchmarks/train_profile.py`` runs the job under the profiler and calls
``read_trace``; the tests feed it hand-made traces of both kinds (CUDA kernels, CPU-only ops).

How a kernel finds its class (first rule that matches wins):

1. its name: NCCL -> ``communication``; flash / fmha / cuDNN SDPA / the project's attention kernels ->
   ``attention_fwd`` / ``attention_bwd``; cuBLAS / CUTLASS / nvjet / xmma / the project's ``_gemm_kernel`` /
   inductor GEMM templates -> ``gemm``; memcpy / memset -> ``copy_cast``;
2. the CPU frames that launched it (the launch call's enclosing ops, record_function ranges and, with
   ``with_stack``, Python frames; innermost first): the job's autograd Functions (``RMSNormFunction``,
   ``SwiGLUFunction``, ``ChunkedCrossEntropy``), ``apply_rope``, the fp8 path (``workbench_train::fp8_matmul``,
   ``_Float8LinearFunction``: everything but the GEMM is ``fp8_quantize``), the optimizer step, FSDP2's own
   copies (``FSDP::...``), embedding ops;
3. inductor's fused Triton kernels by the aten ops in their names (``triton_red_fused__to_copy_mean_mul_pow_rsqrt``
   -> ``norm``), else ``fused``;
4. the launching aten op (``aten::mul`` -> ``elementwise``, ``aten::_to_copy`` -> ``copy_cast``...), else ``other``.

On a CPU-only run there are no kernels: every CPU op's self time (its time minus its child ops') counts instead,
classified by the same rules with the op itself as the innermost frame.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

CLASSES: tuple[str, ...] = (
    "gemm", "attention_fwd", "attention_bwd", "norm", "activation", "elementwise", "rope", "cross_entropy",
    "embedding_fwd", "embedding_bwd", "optimizer", "reduction", "copy_cast", "fp8_quantize", "fsdp",
    "communication", "fused", "other",
)
"""Operator classes, in report order. ``activation``: SwiGLU / GELU / ReLU; ``elementwise``: the rest of the
pointwise ops (residual adds, DCN's mix); ``fsdp``: FSDP2's copy-in / copy-out / casts of parameters and
gradients (the model has no such op on one GPU); ``fused``: an inductor kernel whose name names no class."""

PHASES: tuple[str, ...] = ("fwd", "bwd", "optimizer", "other")

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
"""Chrome-trace categories of device activity counted as busy time (``gpu_user_annotation`` ranges are not)."""
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"})
"""Host events that make up a launch's stack."""
OP_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
"""Host events whose self time a CPU-only run counts."""

# ------------------------------------------------------------------------------------------ kernel names
_NCCL = re.compile(r"nccl", re.I)
_ATTENTION = re.compile(r"flash|fmha|sdpa|attn|attention|_bwd_delta_kernel", re.I)
_ATTENTION_BWD = re.compile(r"bwd|backward|dq_dk|dkdv|_dq_|delta", re.I)
_ATTENTION_FWD = re.compile(r"fwd|forward", re.I)
_GEMM = re.compile(r"gemm|cutlass|cublas|xmma|nvjet|wgmma|triton_tem_|splitkreduce", re.I)
_COPY = re.compile(r"^memcpy|^memset|^\[?memcpy|^\[?memset", re.I)
_INDUCTOR = re.compile(r"^triton_(poi|red|per|for|tem|mm)_")

# ------------------------------------------------------------------------------------- frames (innermost first)
_FRAME_RULES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"workbench_train::fp8_matmul|_Float8LinearFunction|quantize_fp8|fp8_matmul"), "fp8_quantize"),
    (re.compile(r"RMSNormFunction|rms_norm|_norm_(fwd|bwd)_kernel"), "norm"),
    (re.compile(r"SwiGLUFunction|swiglu"), "activation"),
    (re.compile(r"ChunkedCrossEntropy|cross_entropy|binary_cross_entropy|nll_loss|log_softmax"), "cross_entropy"),
    (re.compile(r"apply_rope"), "rope"),
    (re.compile(r"Optimizer\.(step|zero_grad)|train\.optimizer"), "optimizer"),
    (re.compile(r"clip_grad_norm"), "reduction"),
    (re.compile(r"embedding_dense_backward|EmbeddingBackward|EmbeddingBagBackward|_embedding_bag_\w*backward|"
                r"embedding_backward|_embedding_bag_bwd_kernel"), "embedding_bwd"),
    (re.compile(r"aten::embedding|aten::_embedding_bag|aten::embedding_bag|_embedding_bag_fwd_kernel"),
     "embedding_fwd"),
    (re.compile(r"^FSDP::"), "fsdp"),
)

# inductor kernel names list the aten ops they fused (descriptive_names = "original_aten")
_INDUCTOR_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("rsqrt",), "norm"),
    (("pow", "mean"), "norm"),
    (("silu",), "activation"),
    (("sigmoid",), "activation"),
    (("relu",), "activation"),
    (("threshold", "backward"), "activation"),
    (("gelu",), "activation"),
    (("cat", "mul", "sub"), "rope"),
    (("cat", "mul", "neg"), "rope"),
    (("embedding",), "embedding_fwd"),
    (("logsumexp",), "cross_entropy"),
    (("log", "softmax"), "cross_entropy"),
    (("nll",), "cross_entropy"),
)

_ATEN_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "_scaled_mm", "linear", "addmv", "_addmm_activation"}),
     "gemm"),
    (frozenset({"silu", "sigmoid", "relu", "gelu", "threshold_backward", "silu_backward", "sigmoid_backward",
                "gelu_backward", "relu_"}), "activation"),
    (frozenset({"copy_", "_to_copy", "to", "clone", "contiguous", "cat", "stack", "fill_", "zero_", "zeros",
                "zeros_like", "empty_like", "full_like", "ones_like", "_foreach_copy_", "split_with_sizes_copy",
                "index_select", "gather", "_local_scalar_dense", "item"}), "copy_cast"),
    (frozenset({"sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "_foreach_norm", "var",
                "logsumexp", "all", "any"}), "reduction"),
    (frozenset({"add", "add_", "mul", "mul_", "sub", "sub_", "div", "div_", "neg", "rsqrt", "pow", "exp", "exp_",
                "log", "where", "clamp", "clamp_", "abs", "reciprocal", "sqrt", "square", "lerp_", "addcmul_",
                "addcdiv_", "scatter_add_", "index_add_", "masked_fill_"}), "elementwise"),
)


def classify(name: str, frames: tuple[str, ...] = ()) -> str:
    """The class of a kernel (or, on a CPU-only run, of an op) named ``name``, launched under ``frames``
    (innermost first; the op itself first on a CPU-only run)."""
    if _NCCL.search(name):
        return "communication"
    if _ATTENTION.search(name) and not name.startswith("aten::"):
        return attention_pass(name, frames)
    if _GEMM.search(name):
        return "gemm"
    if _COPY.search(name):
        return "copy_cast"
    if frames and _is_attention_op(frames[0]):
        return attention_pass(name, frames)
    launch = frames[0] if frames else ""
    for frame in frames:
        for pattern, cls in _FRAME_RULES:
            if pattern.search(frame):
                if cls == "fp8_quantize" and _aten_class(launch) == "gemm":
                    return "gemm"  # the CPU emulation's matmul inside fp8_matmul
                return cls
    if _INDUCTOR.match(name):
        tokens = set(name.split("_"))
        for needed, cls in _INDUCTOR_RULES:
            if all(t in tokens for t in needed):
                return cls
        return "gemm" if name.startswith(("triton_tem_", "triton_mm_")) else "fused"
    return _aten_class(launch) or _aten_class(name) or "other"


def _is_attention_op(frame: str) -> bool:
    return frame.startswith("aten::") and ("attention" in frame or "flash" in frame)


def attention_pass(name: str, frames: tuple[str, ...]) -> str:
    """attention_fwd or attention_bwd from the kernel's name, else from its launching op, else its phase."""
    for text in (name, *frames[:2]):
        if _ATTENTION_BWD.search(text):
            return "attention_bwd"
        if _ATTENTION_FWD.search(text):
            return "attention_fwd"
    return "attention_bwd" if phase_of(frames) == "bwd" else "attention_fwd"


def _aten_class(op: str) -> str | None:
    if not op.startswith("aten::"):
        return None
    base = op[len("aten::"):]
    for names, cls in _ATEN_RULES:
        if base in names:
            return cls
    return None


def phase_of(frames: tuple[str, ...]) -> str:
    """fwd, bwd, optimizer or other, from the record_function ranges and autograd frames around a launch."""
    for frame in frames:
        if frame.startswith(("train.optimizer", "Optimizer.")):
            return "optimizer"
        if frame.startswith(("autograd::engine::evaluate_function", "train.backward", "FSDP::post_backward")):
            return "bwd"
        if frame.startswith("train.forward"):
            return "fwd"
    return "other"


# ------------------------------------------------------------------------------------------------ the trace
@dataclass(frozen=True)
class DeviceEvent:
    """One kernel / memcpy / memset (or, on a CPU-only run, one op's self time)."""

    name: str
    start_us: float
    duration_us: float
    stream: str
    launch_op: str
    """Innermost host op that launched it (the op itself on a CPU-only run)."""
    klass: str
    phase: str


@dataclass
class _Host:
    name: str
    start: float
    end: float
    category: str
    parent: int = -1


def _nest(events: list[dict]) -> tuple[list[_Host], dict]:
    """Host events with their parent (the innermost event on the same thread that contains them) and the
    index of each launch call by its correlation id (and of each op by ("external", its External id): the
    fallback when a kernel's launch call is missing from the trace)."""
    hosts: list[_Host] = []
    by_thread: dict[tuple, list[int]] = defaultdict(list)
    correlation: dict = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in HOST_CATEGORIES:
            continue
        start = float(e["ts"])
        hosts.append(_Host(e["name"], start, start + float(e.get("dur", 0.0)), e["cat"]))
        by_thread[(e.get("pid"), e.get("tid"))].append(len(hosts) - 1)
        args = e.get("args", {})
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            correlation[args["correlation"]] = len(hosts) - 1
        elif e["cat"] == "cpu_op" and "External id" in args:
            correlation.setdefault(("external", args["External id"]), len(hosts) - 1)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (hosts[i].start, -hosts[i].end))
        open_: list[int] = []
        for i in indices:
            while open_ and hosts[open_[-1]].end <= hosts[i].start:
                open_.pop()
            if open_:
                hosts[i].parent = open_[-1]
            open_.append(i)
    return hosts, correlation


def _frames(hosts: list[_Host], index: int) -> tuple[str, ...]:
    """Names of ``index``'s enclosing host events, innermost first (launch calls themselves left out)."""
    out = []
    while index >= 0:
        h = hosts[index]
        if h.category not in ("cuda_runtime", "cuda_driver"):
            out.append(h.name)
        index = h.parent
    return tuple(out)


def read_trace(trace: dict) -> tuple[list[DeviceEvent], bool]:
    """(events, on_device): every kernel, memcpy and memset of a chrome trace with its class, phase and launching
    op; on_device is False when the trace has no device activity, and the events are then the CPU ops' self
    times."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    hosts, correlation = _nest(events)
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    out: list[DeviceEvent] = []
    if device:
        for e in device:
            args = e.get("args", {})
            launch = correlation.get(args.get("correlation"), correlation.get(("external", args.get("External id")), -1))
            frames = _frames(hosts, launch) if launch >= 0 else ()
            ops = tuple(f for f in frames if not f.startswith(("train.", "ProfilerStep")))
            out.append(DeviceEvent(e["name"], float(e["ts"]), float(e.get("dur", 0.0)),
                                   f"{e.get('pid')}:{e.get('tid')}", _first_op(frames),
                                   classify(e["name"], ops), phase_of(frames)))
        return out, True
    child_time: dict[int, float] = defaultdict(float)
    for i, h in enumerate(hosts):
        if h.category in OP_CATEGORIES and h.parent >= 0:
            p = h.parent
            while p >= 0 and hosts[p].category not in OP_CATEGORIES:
                p = hosts[p].parent
            if p >= 0:
                child_time[p] += h.end - h.start
    for i, h in enumerate(hosts):
        if h.category != "cpu_op":
            continue
        self_us = max(0.0, h.end - h.start - child_time[i])
        frames = _frames(hosts, i)
        ops = tuple(f for f in frames if not f.startswith(("train.", "ProfilerStep")))
        out.append(DeviceEvent(h.name, h.start, self_us, "cpu", h.name, classify(h.name, ops), phase_of(frames)))
    return out, False


def _first_op(frames: tuple[str, ...]) -> str:
    for f in frames:
        if f.startswith("aten::") or "::" in f:
            return f
    return frames[0] if frames else ""


def busy_us(events: list[DeviceEvent]) -> float:
    """Time at least one event runs (the union of their intervals: overlapping streams counted once)."""
    total, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e.start_us):
        stop = e.start_us + e.duration_us
        if stop <= end:
            continue
        total += stop - max(e.start_us, end)
        end = stop
    return total


# ------------------------------------------------------------------------------------------------ tables
def kernel_rows(events: list[DeviceEvent], steps: int) -> list[dict]:
    """One row per (kernel name, class, phase, launching op): time and count per step, largest first."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for e in events:
        groups[(e.name, e.klass, e.phase, e.launch_op)].append(e.duration_us)
    rows = [{"name": name, "class": klass, "phase": phase, "launch_op": op,
             "ms_per_step": sum(d) / steps / 1e3, "count_per_step": len(d) / steps,
             "mean_us": sum(d) / len(d)} for (name, klass, phase, op), d in groups.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def measured_by_class(events: list[DeviceEvent], steps: int) -> dict[str, dict[str, float]]:
    """class -> phase -> ms per step (plus ``count`` -> events per step)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        out[e.klass][e.phase] += e.duration_us / steps / 1e3
        out[e.klass]["count"] += 1 / steps
    return out


def model_op_class(kind: str, name: str, phase: str) -> str:
    """The class of one of the analytical model's ops (``workbench.graph.ops.Op`` kind, name, phase)."""
    if kind == "gemm":
        return "gemm"
    if kind == "attention":
        return "attention_fwd" if ".fwd" in name else "attention_bwd"
    if kind == "copy" and "cast_fp8" in name:
        return "fp8_quantize"
    if kind == "embedding":
        return "embedding_fwd" if phase == "fwd" else "embedding_bwd"
    return {"rmsnorm": "norm", "layernorm": "norm", "swiglu": "activation", "gelu": "activation",
            "silu": "activation", "relu": "activation", "add": "elementwise", "mul": "elementwise", "rope": "rope",
            "cross_entropy": "cross_entropy", "softmax": "cross_entropy", "optimizer": "optimizer",
            "copy": "copy_cast", "permute": "copy_cast", "sum": "reduction"}.get(kind, "other")


def predicted_by_class(prediction) -> dict[str, dict[str, float]]:
    """class -> phase -> ms per step from a ``workbench.predict.Prediction`` (exposed communication included)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in prediction.ops:
        op = p.op
        out[model_op_class(op.kind, op.name, op.phase)][op.phase] += p.total_s * 1e3
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
