"""Measured CUDA kernels of a stack run against the kernels ``workbench.graph.stack_kernels`` says it launches.

A profile row (``benchmarks/stacks/plain_pytorch.py``'s ``kernels``: name, calls and microseconds per step) is
sorted into the model's op classes by kernel name (``classify``: ``workbench.trace.classify``'s
class, coarsened); the stack's ops are priced by the existing timer
(``workbench.perf.op_time`` with ``constants_for(gpu, calibrated)``) and sorted into the same classes by what the
op is (``op_class``). ``compare`` gives, per class, measured and predicted microseconds and kernel counts.
No torch import: the benchmark scripts and the tests use this on recorded JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench import trace
from workbench.graph.ops import Op
from workbench.graph.stack_kernels import StackFlavor, pytorch_flavor, stack_step_ops, torchtitan_flavor
from workbench.hardware import get_gpu
from workbench.perf import op_time
from workbench.perf.efficiency import constants_for

CLASSES: tuple[str, ...] = ("gemm", "attention", "norm", "rope/elementwise", "cast/copy", "loss", "optimizer",
                            "embedding", "fsdp copies", "other")

COARSE_CLASSES: dict[str, str] = {
    "gemm": "gemm", "attention_fwd": "attention", "attention_bwd": "attention", "norm": "norm",
    "reduction": "norm", "activation": "rope/elementwise", "elementwise": "rope/elementwise",
    "rope": "rope/elementwise", "fused": "rope/elementwise", "cross_entropy": "loss", "optimizer": "optimizer",
    "embedding_fwd": "embedding", "embedding_bwd": "embedding", "copy_cast": "cast/copy", "fp8_quantize": "cast/copy",
    "fsdp": "fsdp copies", "communication": "fsdp copies", "other": "other",
}
"""``workbench.trace.CLASSES`` -> ``CLASSES``, the classes ``op_class`` sorts the stack tables' ops into. A reduction
is a norm: the tables' only reductions are RMSNorm's weight-gradient sums (``reduce_kernel<sum_functor>``);
inductor's unnamed fusions, activations and RoPE are ``rope/elementwise``; NCCL goes with the FSDP copies."""
_BY_NAME: tuple[tuple[str, str], ...] = (
    ("CatArrayBatchedCopy", "rope/elementwise"),  # trace: a copy; op_class counts RoPE's torch.cat with RoPE
    ("Memset", "other"),  # trace: a copy; no table op is a memset, so it shows as unmodelled
    ("NormTwoOps", "other"),  # trace: a reduction; gradient clipping's norm, which the tables do not hold
)
"""Kernels ``op_class`` counts in another class than ``COARSE_CLASSES`` of their trace class (substring of the name)."""


def classify(kernel_name: str) -> str:
    """The op class (one of ``CLASSES``) of a measured CUDA kernel name: ``workbench.trace.classify`` (with no CPU
    frames) mapped by ``COARSE_CLASSES``, except the few kernels of ``_BY_NAME``."""
    for part, cls in _BY_NAME:
        if part in kernel_name:
            return cls
    return COARSE_CLASSES[trace.classify(kernel_name)]


COPY_KERNELS = frozenset({"logits.float", "dlogits.to_bf16", "zero_grad_input", "zero_table_grad"})
"""Kernels of the loss and embedding tables that the profile shows as copies or fills (direct_copy, FillFunctor)."""


def op_class(op: Op) -> str:
    """The class of a modelled op, by what it is (its kind and, for eager tables, its torch op)."""
    a = op.extra.get("aten", "")
    if op.name.partition(".")[2] in COPY_KERNELS:  # a cast or fill inside the loss or the embedding's backward
        return "cast/copy"
    if op.kind in ("gemm", "attention"):
        return op.kind
    if a in ("optimizer", "grad_clip"):
        return "optimizer"
    if a == "loss":
        return "loss"
    if a == "embedding":
        return "embedding"
    if op.kind == "fsdp" or op.layer == "fsdp":
        return "fsdp copies"
    if op.kind == "rmsnorm" and "residual" not in op.name:
        return "norm"
    if a in ("cast", "cast_weight", "copy") or op.kind == "copy":
        return "cast/copy"
    return "rope/elementwise"


@dataclass(frozen=True)
class ClassRow:
    cls: str
    measured_us: float
    measured_calls: float
    predicted_us: float
    predicted_calls: float

    @property
    def error(self) -> float:
        return self.predicted_us / self.measured_us - 1 if self.measured_us else float("nan")


def flavor_of(row: dict) -> tuple[StackFlavor, str]:
    """A plain_pytorch.jsonl or torchtitan row's flavor and checkpointing policy."""
    if "ac_mode" in row:  # torchtitan_runs.py
        policy = row["ac_mode"]
        if policy == "selective":
            policy = "selective-op" if row["selective_ac_option"] == "op" else f"selective-{row['selective_ac_option']}"
        return torchtitan_flavor(row["compile"]), policy
    return pytorch_flavor(row["param_dtype"], row["compile"]), row["ac"]


def predicted_ops(model, row: dict) -> list[Op]:
    flavor, policy = flavor_of(row)
    mb = row.get("micro_batch", row.get("local_batch_size"))
    return stack_step_ops(model, mb, row["seq_len"], flavor, policy)


def price(ops: list[Op], gpu: str = "h200", calibrated: bool = False) -> list[tuple[Op, float]]:
    """(op, seconds per step) for each op."""
    g = get_gpu(gpu)
    c = constants_for(g, calibrated)
    return [(op, op_time(op, g, c).time_s * op.count) for op in ops]


def compare(model, row: dict, gpu: str = "h200", calibrated: bool = False,
            kernels: list[dict] | None = None) -> list[ClassRow]:
    """Per class: measured (the row's ``kernels``, or ``kernels``) and predicted microseconds and calls per step."""
    measured = {c: [0.0, 0.0] for c in CLASSES}
    for k in kernels if kernels is not None else row.get("kernels", []):
        m = measured[classify(k["name"])]
        m[0] += k["us"]
        m[1] += k["calls"]
    predicted = {c: [0.0, 0.0] for c in CLASSES}
    for op, seconds in price(predicted_ops(model, row), gpu, calibrated):
        p = predicted[op_class(op)]
        p[0] += seconds * 1e6
        p[1] += op.count
    return [ClassRow(c, *measured[c], *predicted[c]) for c in CLASSES]


def launches(ops: list[Op]) -> dict[str, int]:
    """Kernels launched per step, by where they run: eager outside any checkpoint, eager inside a checkpointed
    block's forward or recompute, and compiled (inductor / library kernels called from a compiled graph)."""
    out = {"eager": 0, "checkpointed": 0, "compiled": 0}
    for op in ops:
        out[op.extra.get("launch", "eager")] += op.count
    return out
