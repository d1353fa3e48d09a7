"""A ``torch.profiler`` (Kineto) chrome trace of a training job, read into its GPU kernels, each kernel put in
one of the analytical model's op classes, and the same classes summed over a ``workbench.predict`` prediction.

    >>> from workbench.trace import load_trace, class_table
    >>> trace = load_trace("run.json.gz", steps=2)          # ProfilerStep#N annotations give the steps if present
    >>> rows = class_table(trace, predict("llama3.2-1b", "h200", micro_batch=2, seq_len=4096, stack="pytorch-eager"))
    >>> [(r.cls, r.measured_ms, r.predicted_ms) for r in rows]   # ms per step; class_frame(rows) for a DataFrame
    >>> trace_from_bytes(upload_bytes, "run.json.gz", steps=2)     # the same from bytes in memory (an upload)

Pure Python, no torch import: a trace written on the GPU machine is read anywhere. Kernels are the trace's
device events (categories ``kernel``, ``gpu_memcpy``, ``gpu_memset``); nothing is dropped: a kernel no rule knows is
class ``other`` and ``Trace.unknown_kernels`` lists it.

How a kernel finds its class (``classify``; first rule that matches wins):

1. library kernels by name: NCCL / RCCL -> ``communication``; flash / FMHA / cuDNN SDPA / TransformerEngine fused
   attention / aiter and CK FMHA -> ``attention_fwd`` / ``attention_bwd``; cuBLAS(Lt) (``sm90_xmma_gemm_*``,
   ``nvjet_*``), CUTLASS, hipBLASLt / Tensile (``Cijk_*``), CK ``device_gemm``, inductor GEMM templates -> ``gemm``;
   memcpy / memset -> ``copy_cast``;
2. the CPU frames that launched it, where the trace has them (the launch call's enclosing ops and
   ``record_function`` ranges, innermost first): a job's autograd Functions (``RMSNormFunction``...), the fp8 path,
   the optimizer step, FSDP2's copies (``FSDP::...``), embedding ops;
3. inductor's fused Triton kernels by the aten ops in their names (``triton_per_fused__fused_rms_norm_...`` ->
   ``norm``, ``triton_poi_fused_..._mul_silu`` -> ``activation``), else ``fused``;
4. the launching aten op (``aten::mul`` -> ``elementwise``...);
5. ATen / TransformerEngine / aiter kernels by name: layer-norm kernels, SiLU, softmax and NLL, fused AdamW
   (``multi_tensor_apply``), embedding gathers and sorts, reductions, casts and copies, TensorIterator elementwise.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.errors import WorkbenchError
from workbench.fileio import MiB, TABLE_MAX_BYTES, InputFileError, decode_text, parse_json, read_bytes

if TYPE_CHECKING:
    import pandas as pd

TRACE_MAX_BYTES = 1024 * MiB
"""Largest trace accepted once decompressed (a policy: a Kineto trace of a few steps of a 70B job is ~100-300 MB;
a gzip that inflates past this is refused rather than parsed). The file itself is bounded by
``fileio.TABLE_MAX_BYTES`` (256 MiB), the limit for measured tables and traces."""

CLASSES: tuple[str, ...] = (
    "gemm", "attention_fwd", "attention_bwd", "norm", "activation", "elementwise", "rope", "cross_entropy",
    "embedding_fwd", "embedding_bwd", "optimizer", "reduction", "copy_cast", "fp8_quantize", "fsdp",
    "communication", "fused", "other",
)
"""Op classes, in report order. ``activation``: SwiGLU / GELU / ReLU; ``elementwise``: the other pointwise ops
(residual adds, products); ``copy_cast``: dtype casts, copies, fills, memcpy / memset; ``fsdp``: FSDP2's copy-in /
copy-out of parameters and gradients; ``fused``: an inductor kernel whose name names no class; ``other``: a kernel
no rule knows (listed in ``Trace.unknown_kernels``)."""

PHASES: tuple[str, ...] = ("fwd", "bwd", "optimizer", "other")

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
"""Chrome-trace categories of device activity counted as busy time (``gpu_user_annotation`` ranges are not)."""
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"})
"""Host events that make up a launch's stack."""
OP_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
"""Host events whose self time a CPU-only run counts."""
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
"""The range ``torch.profiler.profile.step()`` opens for each step."""

# ------------------------------------------------------------------------------------------ 1. library kernels
_NCCL = re.compile(r"nccl|rccl|msccl", re.I)
_ATTENTION = re.compile(r"flash|fmha|sdpa|attn|attention|_bwd_delta_kernel|cudnn::fusion|mha_(fwd|bwd)|"
                        r"scaled_(upper_triang_)?(masked_|aligned_causal_masked_)?softmax", re.I)
_ATTENTION_BWD = re.compile(r"bwd|backward|bprop|dq_dk|dkdv|dk_dv|_dq_|dot_do_o|convert_dq|reduce_head|delta|cutlassB", re.I)
_ATTENTION_FWD = re.compile(r"fwd|forward|fprop|cutlassF", re.I)
_GEMM = re.compile(r"gemm|cutlass|cublas|xmma|nvjet|wgmma|triton_tem_|triton_mm|splitkreduce|^Cijk_|gemv|"
                   r"_matmul_|matmul_kernel", re.I)
_COPY = re.compile(r"^\[?(memcpy|memset)", re.I)
_INDUCTOR = re.compile(r"^triton_(poi|red|per|for|tem|mm)_")

# ---------------------------------------------------------------------------------- 2. frames (innermost first)
_FRAME_RULES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"workbench_train::fp8_matmul|_Float8LinearFunction|quantize_fp8|fp8_matmul"), "fp8_quantize"),
    (re.compile(r"RMSNormFunction|rms_norm|_norm_(fwd|bwd)_kernel"), "norm"),
    (re.compile(r"SwiGLUFunction|swiglu"), "activation"),
    (re.compile(r"ChunkedCrossEntropy|cross_entropy|binary_cross_entropy|nll_loss|log_softmax"), "cross_entropy"),
    (re.compile(r"apply_rope"), "rope"),
    (re.compile(r"Optimizer\.(step|zero_grad)|train\.optimizer"), "optimizer"),
    (re.compile(r"clip_grad_norm"), "optimizer"),  # gradient clipping: the model's optimizer step holds it
    (re.compile(r"embedding_dense_backward|EmbeddingBackward|EmbeddingBagBackward|_embedding_bag_\w*backward|"
                r"embedding_backward|_embedding_bag_bwd_kernel"), "embedding_bwd"),
    (re.compile(r"aten::embedding|aten::_embedding_bag|aten::embedding_bag|_embedding_bag_fwd_kernel"),
     "embedding_fwd"),
    (re.compile(r"^FSDP::"), "fsdp"),
)

# ------------------------------------------------------------------ 3. inductor names list the aten ops they fused
_INDUCTOR_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("rsqrt",), "norm"),
    (("pow", "mean"), "norm"),
    (("rms", "norm"), "norm"),
    (("layer", "norm"), "norm"),
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
_VIEW_TOKENS = frozenset({"", "to", "copy", "t", "view", "unsafe", "clone", "transpose", "permute", "expand",
                          "reshape", "squeeze", "unsqueeze", "slice", "select", "split", "contiguous", "alias"})
"""Tokens of an inductor name that only move data: a kernel of nothing else is a cast or copy."""

# --------------------------------------------------------------------------------------- 4. the launching aten op
_ATEN_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "_scaled_mm", "linear", "addmv", "_addmm_activation"}),
     "gemm"),
    (frozenset({"silu", "sigmoid", "relu", "gelu", "threshold_backward", "silu_backward", "sigmoid_backward",
                "gelu_backward", "relu_"}), "activation"),
    (frozenset({"copy_", "_to_copy", "to", "clone", "contiguous", "cat", "stack", "fill_", "zero_", "zeros",
                "zeros_like", "empty_like", "full_like", "ones_like", "_foreach_copy_", "split_with_sizes_copy",
                "index_select", "gather", "_local_scalar_dense", "item"}), "copy_cast"),
    (frozenset({"sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var",
                "logsumexp", "all", "any"}), "reduction"),
    (frozenset({"add", "add_", "mul", "mul_", "sub", "sub_", "div", "div_", "neg", "rsqrt", "pow", "exp", "exp_",
                "log", "where", "clamp", "clamp_", "abs", "reciprocal", "sqrt", "square", "lerp_", "addcmul_",
                "addcdiv_", "scatter_add_", "index_add_", "masked_fill_"}), "elementwise"),
)

# ------------------------------------------------------------- 5. ATen / TransformerEngine / aiter kernel names
_NAME_RULES: tuple[tuple[str, re.Pattern], ...] = tuple((cls, re.compile(pattern, re.I)) for cls, pattern in (
    ("fp8_quantize", r"fp8|float8|e4m3|e5m2|cast_transpose|quantize|mxfp"),
    ("fsdp", r"chunk_cat|all_gather_copy_in|split_with_sizes_copy"),
    ("optimizer", r"FusedOptimizerTensorListMetadata|FusedAdam|fused_adam|multi_tensor_adam|AdamFunctor|"
                  r"LpNormFunctor|lpnorm_cleanup|multi_tensor_apply_kernel<.*TensorListMetadata<1>"),
    ("norm", r"layer_norm|layernorm|rms_?norm|GammaBeta|RowwiseMoments|ComputeInvStd|ln_(fwd|bwd)"),
    ("cross_entropy", r"SoftMax|softmax|nll_loss|cross_entropy|log_softmax|logsumexp"),
    ("embedding_fwd", r"vectorized_gather_kernel|embedding_fwd|indexSelect"),
    ("embedding_bwd", r"embedding_backward|embedding_bwd|indexing_backward|compute_grad_weight|sum_and_scatter|"
                      r"radix_sort|unique_by_key|krn_partial|compute_num_of_partial|DeviceScan|DeviceCompact|"
                      r"arange_cuda"),
    ("rope", r"rope|rotary"),
    ("activation", r"silu|gelu|relu|swiglu|geglu|act_and_mul|sigmoid|swish|gated_act"),
    ("copy_cast", r"copy_kernel|direct_copy|bfloat16_copy|CatArrayBatchedCopy|FillFunctor|fill_kernel|"
                  r"transpose|_to_copy|cast_kernel|CopyFunctor"),
    ("reduction", r"reduce_kernel|ReduceOp|reduction|sum_functor"),
    ("elementwise", r"elementwise|BinaryFunctor|Functor_add|MulFunctor|neg_kernel|conj_kernel|pointwise|"
                    r"where_kernel|multi_tensor_apply"),
))


def classify(name: str, frames: tuple[str, ...] = ()) -> str:
    """The class (one of ``CLASSES``) of a kernel named ``name`` launched under ``frames`` (innermost first; on a
    CPU-only run the op itself first; empty for a trace of CUDA activity only)."""
    if _NCCL.search(name):
        return "communication"
    if _ATTENTION.search(name) and not name.startswith("aten::") and not _INDUCTOR.match(name):
        return attention_pass(name, frames)
    if _ATTENTION.search(name) and name.startswith("triton_tem_"):  # flex attention's template
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
        return _inductor_class(name)
    aten = _aten_class(launch) or _aten_class(name)
    if aten:
        return aten
    for cls, pattern in _NAME_RULES:
        if pattern.search(name):
            return cls
    return "other"


def _inductor_class(name: str) -> str:
    tokens = set(name.split("_"))
    for needed, cls in _INDUCTOR_RULES:
        if all(t in tokens for t in needed):
            return cls
    if name.startswith(("triton_tem_", "triton_mm_")):
        return "gemm"
    ops = {t for t in tokens - {"triton", "poi", "red", "per", "for", "fused"} if not t.isdigit()}
    return "copy_cast" if ops and ops <= _VIEW_TOKENS and ops & {"copy", "clone"} else "fused"


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


# --------------------------------------------------------------------------------- the model's ops in the classes
COPY_KERNELS = frozenset({"logits.float", "dlogits.to_bf16", "zero_grad_input", "zero_table_grad", "cos.to",
                          "sin.to", "x.float", "grad.float", "to_bf16", "cat"})
"""Kernels of the model's tables that a trace shows as casts, copies or fills whatever op they belong to (the loss's
``logits.float()``, the embedding's zeroed gradient, RoPE's casts and ``torch.cat``)."""
_KIND_CLASSES = {"rmsnorm": "norm", "layernorm": "norm", "swiglu": "activation", "gelu": "activation",
                 "silu": "activation", "relu": "activation", "add": "elementwise", "mul": "elementwise",
                 "rope": "rope", "cross_entropy": "cross_entropy", "softmax": "cross_entropy",
                 "optimizer": "optimizer", "copy": "copy_cast", "permute": "copy_cast", "sum": "reduction",
                 "fsdp": "fsdp", "fp8_quantize": "fp8_quantize"}


def model_op_class(kind: str, name: str, phase: str, extra: dict | None = None) -> str:
    """The class of one of the analytical model's ops (``workbench.graph.ops.Op`` kind, name, phase, extra).

    Ops of the stack kernel tables (``workbench.graph.stack_kernels``: they carry ``extra["aten"]``) get the class
    their kernel's name gets from ``classify`` in a trace of CUDA activity only (an eager SwiGLU's product is an
    elementwise kernel, its SiLU an activation; RoPE's casts and ``cat`` are copies); the reference job's ops
    (``workbench.graph.execution``) the class of the op they belong to, as a trace with CPU frames assigns them
    (every kernel under ``RMSNormFunction`` is ``norm``)."""
    extra = extra or {}
    kernel = name.rsplit(".", 1)[-1]
    if kind == "gemm":
        return "gemm"
    if kind == "attention":
        return "attention_fwd" if ".fwd" in name else "attention_bwd"
    if kind == "copy" and "cast_fp8" in name:
        return "fp8_quantize"
    if "aten" in extra:
        if kernel in COPY_KERNELS or ".".join(name.split(".")[-2:]) in COPY_KERNELS:
            return "copy_cast"
        if extra["aten"] in ("optimizer", "grad_clip"):
            return "optimizer"
        if kernel == "dw_sum":  # a compiled RMSNorm's weight gradient: reduce_kernel<sum_functor>
            return "reduction"
        if kind == "swiglu" and kernel in ("mul", "mul_up", "mul_silu"):  # eager: BinaryFunctor<MulFunctor>
            return "elementwise"
        if kind == "rope" and kernel not in ("rope", "rope_bwd"):  # eager RoPE: products, sums, negations
            return "elementwise"
    if kind == "embedding":
        return "embedding_fwd" if phase == "fwd" else "embedding_bwd"
    return _KIND_CLASSES.get(kind, "other")


def op_class(op: Any) -> str:
    """``model_op_class`` of an ``Op``."""
    return model_op_class(op.kind, op.name, op.phase, op.extra)


# ------------------------------------------------------------------------------------------------ the trace
@dataclass(frozen=True)
class DeviceEvent:
    """One kernel / memcpy / memset (or, on a CPU-only run, one op's self time)."""

    name: str
    start_us: float
    duration_us: float
    stream: str
    launch_op: str
    """Innermost host op that launched it (the op itself on a CPU-only run; empty without CPU activity)."""
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
    """Host events with their parent (the innermost event on the same thread that contains them) and the index of
    each launch call by its correlation id (and of each op by ("external", its External id): the fallback when a
    kernel's launch call is missing from the trace)."""
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


def _first_op(frames: tuple[str, ...]) -> str:
    for f in frames:
        if f.startswith("aten::") or "::" in f:
            return f
    return frames[0] if frames else ""


def _is_step_range(name: str) -> bool:
    return name.startswith(("train.", "ProfilerStep"))


def read_trace(trace: dict | list) -> tuple[list[DeviceEvent], bool]:
    """(events, on_device): every kernel, memcpy and memset of a parsed chrome trace with its class, phase and
    launching op; on_device is False when the trace has no device activity, and the events are then the CPU ops'
    self times."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    hosts, correlation = _nest(events)
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    out: list[DeviceEvent] = []
    if device:
        for e in device:
            args = e.get("args", {})
            launch = correlation.get(args.get("correlation"), correlation.get(("external", args.get("External id")), -1))
            frames = _frames(hosts, launch) if launch >= 0 else ()
            ops = tuple(f for f in frames if not _is_step_range(f))
            out.append(DeviceEvent(e["name"], float(e["ts"]), float(e.get("dur", 0.0)),
                                   f"{e.get('pid')}:{e.get('tid')}", _first_op(frames),
                                   classify(e["name"], ops), phase_of(frames)))
        return out, True
    child_time: dict[int, float] = defaultdict(float)
    for h in hosts:
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
        ops = tuple(f for f in frames if not _is_step_range(f))
        out.append(DeviceEvent(h.name, h.start, self_us, "cpu", h.name, classify(h.name, ops), phase_of(frames)))
    return out, False


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


@dataclass(frozen=True)
class Trace:
    """The GPU activity of a profiled training job, per step."""

    origin: str
    kernels: tuple[DeviceEvent, ...]
    """Every kernel, memcpy and memset of the trace, classified."""
    steps: int
    steps_from: str
    """Where ``steps`` came from: the trace's ``ProfilerStep#N`` annotations, or the caller."""
    wall_us: float
    """The profiled steps' wall time: the ``ProfilerStep#N`` ranges' total, else first kernel start to last end."""
    device: str = ""
    """The GPU the trace ran on (``deviceProperties[0].name``), when the trace says."""
    has_cpu_events: bool = False
    step_ranges_us: tuple[tuple[float, float], ...] = ()
    """(start, end) of each ``ProfilerStep#N`` range, in step order; empty when the trace has none."""

    @property
    def kernel_ms_per_step(self) -> float:
        return sum(e.duration_us for e in self.kernels) / self.steps / 1e3

    @property
    def busy_ms_per_step(self) -> float:
        """Device busy time per step (the union of kernel intervals)."""
        return busy_us(list(self.kernels)) / self.steps / 1e3

    @property
    def wall_ms_per_step(self) -> float:
        return self.wall_us / self.steps / 1e3

    @property
    def idle_ms_per_step(self) -> float:
        """Wall minus busy: where the GPU waited (launches, Python, syncs)."""
        return max(0.0, self.wall_ms_per_step - self.busy_ms_per_step)

    @property
    def unknown_kernels(self) -> list[tuple[str, float]]:
        """(name, ms per step) of the kernels no rule knows (class ``other``), largest first."""
        times: dict[str, float] = defaultdict(float)
        for e in self.kernels:
            if e.klass == "other":
                times[e.name] += e.duration_us / self.steps / 1e3
        return sorted(times.items(), key=lambda kv: -kv[1])


@dataclass(frozen=True)
class IdleSplit:
    """Where a traced step's GPU idled, per step: at the step's edges, or between its kernels."""

    step_gap_ms: float
    """Idle at the step's boundary: inside a ``ProfilerStep#N`` range before its first kernel and after its last
    (the trainer's data loading, logging, the synchronize that ends the step), else between consecutive steps. The
    host's work between steps: the same with and without compile."""
    in_step_ms: float
    """Idle between the step's first and last kernel (the GPU waiting on launches, the GPU's own gap between
    kernels). Of steps run back to back without step ranges, the first step's: the profiler starts on an empty
    queue, as a step timed between two ``cuda.synchronize()`` does, while the later steps find their first kernels
    queued by the step before."""
    how: str


def idle_split(trace: Trace) -> IdleSplit:
    """The trace's idle time per step (wall minus busy), split into its step boundary and its in-step part."""
    kernels = sorted(trace.kernels, key=lambda e: e.start_us)
    if trace.step_ranges_us:
        edges, inside, counted = 0.0, 0.0, 0
        for start, end in trace.step_ranges_us:
            mine = [k for k in kernels if start <= k.start_us < end]
            if not mine:
                continue
            last = max(k.start_us + k.duration_us for k in mine)
            edge = (mine[0].start_us - start) + max(0.0, end - last)
            edges += edge
            inside += max(0.0, end - start - busy_us(mine) - edge)
            counted += 1
        if counted:
            return IdleSplit(edges / counted / 1e3, inside / counted / 1e3, "ProfilerStep# ranges")
    n = len(kernels)
    if trace.steps >= 2 and n % trace.steps == 0:
        per = n // trace.steps
        chunks = [kernels[i * per:(i + 1) * per] for i in range(trace.steps)]
        spans = [max(k.start_us + k.duration_us for k in c) - c[0].start_us for c in chunks]
        between = max(0.0, trace.wall_us - sum(spans)) / (trace.steps - 1)
        first = max(0.0, spans[0] - busy_us(chunks[0]))
        return IdleSplit(between / 1e3, first / 1e3, f"the first of {trace.steps} steps (split by kernel count)")
    return IdleSplit(0.0, trace.idle_ms_per_step, "wall minus busy, per step")


def _decompress(data: bytes, origin: str) -> bytes:
    """The bytes of a gzip file, at most ``TRACE_MAX_BYTES`` of them; a truncated or corrupt gzip is an error."""
    inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
    out, rest = bytearray(), data
    try:
        while rest:
            out += inflater.decompress(rest, TRACE_MAX_BYTES + 1 - len(out))
            if len(out) > TRACE_MAX_BYTES:
                raise InputFileError(origin, f"inflates to more than {TRACE_MAX_BYTES / MiB:g} MiB "
                                             "(workbench.trace.TRACE_MAX_BYTES): expected a smaller trace "
                                             "(profile fewer steps)")
            if inflater.eof:
                rest = inflater.unused_data
                if rest[:2] == b"\x1f\x8b":  # a second gzip member
                    inflater = zlib.decompressobj(wbits=31)
                    continue
                break
            rest = inflater.unconsumed_tail
    except zlib.error as exc:
        raise InputFileError(origin, f"is not a valid gzip file ({exc}): expected a .json or .json.gz "
                                     "chrome trace") from None
    if not inflater.eof:
        raise InputFileError(origin, "the gzip data ends early (a truncated file: was the copy or the profiler's "
                                     "export interrupted?): expected a complete .json.gz")
    return bytes(out)


def parse_trace(document: Any, origin: str = "<trace>", *, steps: int | None = None) -> Trace:
    """A ``Trace`` from a parsed chrome trace (``{"traceEvents": [...]}``)."""
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        got = "a JSON object without traceEvents" if isinstance(document, dict) else f"a JSON {type(document).__name__}"
        raise InputFileError(origin, f"{got}: expected a torch.profiler chrome trace (an object with a "
                                     "\"traceEvents\" list; prof.export_chrome_trace writes one)")
    events = [e for e in document["traceEvents"] if isinstance(e, dict)]
    for index, e in enumerate(events):
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES | HOST_CATEGORIES:
            for key in ("ts", "dur"):
                value = e.get(key, 0.0)
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                    raise InputFileError(origin, f"traceEvents[{index}] ({str(e.get('name'))[:60]!r}): {key} = "
                                                 f"{str(value)[:40]!r}: expected a number of microseconds")
            if not isinstance(e.get("name"), str):
                raise InputFileError(origin, f"traceEvents[{index}]: name = {str(e.get('name'))[:40]!r}: "
                                             "expected a kernel or op name")
    kernels, on_device = read_trace(events)
    if not on_device:
        raise InputFileError(origin, "has no GPU kernel events (categories kernel, gpu_memcpy, gpu_memset): "
                                     "expected a trace profiled with ProfilerActivity.CUDA (ROCm traces use the "
                                     "same name)")
    step_ranges = {}
    for e in events:
        match = PROFILER_STEP.match(str(e.get("name", "")))
        if match and e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op"):
            start = float(e.get("ts", 0.0))
            step_ranges[int(match.group(1))] = (start, start + float(e.get("dur", 0.0)))
    if step_ranges:
        if steps is not None and steps != len(step_ranges):
            raise WorkbenchError(f"{origin}: the trace's ProfilerStep# annotations mark {len(step_ranges)} step(s), "
                                 f"not the {steps} given: leave steps out, or give {len(step_ranges)}")
        steps_from = f"{len(step_ranges)} ProfilerStep# annotations"
        wall = sum(end - start for start, end in step_ranges.values())
        steps = len(step_ranges)
    else:
        if steps is None:
            raise WorkbenchError(f"{origin}: the trace has no ProfilerStep# annotations (the profiler ran without "
                                 "a schedule or prof.step()): give the number of profiled steps (--steps N)")
        if not isinstance(steps, int) or steps < 1:
            raise WorkbenchError(f"{origin}: steps = {steps!r}: expected a positive number of profiled steps")
        steps_from = "given"
        wall = max(k.start_us + k.duration_us for k in kernels) - min(k.start_us for k in kernels)
    props = document.get("deviceProperties")
    device = props[0].get("name", "") if isinstance(props, list) and props and isinstance(props[0], dict) else ""
    has_cpu = any(e.get("cat") in OP_CATEGORIES for e in events)
    ranges = tuple(step_ranges[n] for n in sorted(step_ranges))
    return Trace(origin, tuple(kernels), steps, steps_from, wall, str(device), has_cpu, ranges)


def load_trace(path: str | os.PathLike, *, steps: int | None = None) -> Trace:
    """Read a ``torch.profiler`` chrome trace (``.json``, or gzipped whatever its name) through the bounded loader.
    ``steps``: how many steps it profiled, needed when it has no ``ProfilerStep#N`` annotations."""
    return trace_from_bytes(read_bytes(path, what="chrome trace", max_bytes=TABLE_MAX_BYTES), str(path), steps=steps)


def trace_from_bytes(data: bytes, origin: str = "<trace>", *, steps: int | None = None) -> Trace:
    """``load_trace`` of a file's bytes already in memory (a notebook upload): the same limits (the file at most
    ``fileio.TABLE_MAX_BYTES``, inflated at most ``TRACE_MAX_BYTES``), gzip told by its magic bytes, the same
    errors naming ``origin`` (the upload's file name); empty or non-JSON data is an ``InputFileError``."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputFileError(origin, f"got a {type(data).__name__}: expected the bytes of a .json or .json.gz trace")
    data = bytes(data)
    if not data:
        raise InputFileError(origin, "is empty: expected a .json or .json.gz chrome trace")
    if len(data) > TABLE_MAX_BYTES:
        raise InputFileError(origin, f"{len(data)} bytes is over the {TABLE_MAX_BYTES / MiB:g} MiB limit for a "
                                     "chrome trace: expected a smaller file (profile fewer steps)")
    if data[:2] == b"\x1f\x8b":
        data = _decompress(data, origin)
    elif len(data) > TRACE_MAX_BYTES:
        raise InputFileError(origin, f"over the {TRACE_MAX_BYTES / MiB:g} MiB limit for a trace: expected a smaller one")
    elif origin.endswith(".gz"):
        raise InputFileError(origin, "is named .gz but is not gzip data: expected a gzipped chrome trace")
    return parse_trace(parse_json(decode_text(data, origin), origin), origin, steps=steps)


# ---------------------------------------------------------------------------------- measured next to predicted
@dataclass(frozen=True)
class ClassTime:
    """One op class of a step: measured (from a trace) and predicted (from ``workbench.predict``), per step."""

    cls: str
    measured_ms: float
    measured_kernels: float
    predicted_ms: float = math.nan
    predicted_kernels: float = math.nan
    kernels: list[str] = field(default_factory=list, compare=False)
    """The class's measured kernel names, largest first."""

    @property
    def ratio(self) -> float:
        """Measured over predicted (nan where either is zero)."""
        ok = self.predicted_ms > 0 and self.measured_ms > 0
        return self.measured_ms / self.predicted_ms if ok else math.nan


def predicted_by_class(prediction: Any) -> dict[str, tuple[float, float]]:
    """class -> (ms per step, kernels per step) of a ``workbench.predict.Prediction``'s ops (communication: the
    exposed part)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for p in prediction.ops:
        row = out[op_class(p.op)]
        row[0] += p.total_s * 1e3
        row[1] += p.executions
    for c in prediction.comms:
        out["communication"][0] += c.exposed_s * 1e3
    return {k: (v[0], v[1]) for k, v in out.items()}


def class_table(trace: Trace, prediction: Any = None) -> list[ClassTime]:
    """Per op class (``CLASSES`` order, empty classes left out): the trace's measured ms and kernels per step and,
    given a ``workbench.predict.Prediction`` of the same configuration, the predicted ones. A widget or notebook
    puts these next to ``Prediction.ops``: ``op_class(op_prediction.op)`` is each predicted op's class."""
    measured: dict[str, list] = defaultdict(lambda: [0.0, 0.0, defaultdict(float)])
    for e in trace.kernels:
        row = measured[e.klass]
        row[0] += e.duration_us / trace.steps / 1e3
        row[1] += 1 / trace.steps
        row[2][e.name] += e.duration_us
    predicted = predicted_by_class(prediction) if prediction is not None else {}
    rows = []
    for cls in CLASSES:
        if cls not in measured and cls not in predicted:
            continue
        ms, count, names = measured.get(cls, (0.0, 0.0, {}))
        p_ms, p_count = predicted.get(cls, (0.0, 0.0)) if prediction is not None else (math.nan, math.nan)
        rows.append(ClassTime(cls, ms, count, p_ms, p_count, sorted(names, key=lambda n: -names[n])))
    return rows


def class_frame(rows: list[ClassTime]) -> pd.DataFrame:
    """``class_table`` rows as a DataFrame: class, measured_ms, predicted_ms, ratio, kernels per step."""
    import pandas as pd

    return pd.DataFrame([{"class": r.cls, "measured_ms": r.measured_ms, "predicted_ms": r.predicted_ms,
                          "ratio": r.ratio, "measured_kernels": r.measured_kernels,
                          "predicted_kernels": r.predicted_kernels} for r in rows])
