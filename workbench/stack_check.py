"""Measured CUDA kernels of a stack run against the kernels ``workbench.graph.stack_kernels`` says it launches.

A profile row (``benchmarks/stacks/plain_pytorch.py``'s ``kernels``: name, calls and microseconds per step) is
sorted into the model's op classes by kernel name (``classify``); the stack's ops are priced by the existing timer
(``workbench.perf.op_time`` with ``constants_for(gpu, calibrated)``) and sorted into the same classes by what the
op is (``op_class``). ``compare`` gives, per class, measured and predicted microseconds and kernel counts.
No torch import: the benchmark scripts and the tests use this on recorded JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.graph.ops import Op
from workbench.graph.stack_kernels import StackFlavor, pytorch_flavor, stack_step_ops, torchtitan_flavor
from workbench.hardware import get_gpu
from workbench.perf import op_time
from workbench.perf.efficiency import constants_for

CLASSES: tuple[str, ...] = ("gemm", "attention", "norm", "rope/elementwise", "cast/copy", "loss", "optimizer",
                            "embedding", "fsdp copies", "other")

# first match wins: (class, regular expression on the kernel name)
_RULES: tuple[tuple[str, str], ...] = (
    ("gemm", r"^nvjet_|gemm|cutlass|sm90_xmma|cublas"),
    ("attention", r"sdpa|flash|fmha|cudnn::fusion|attention"),
    ("optimizer", r"FusedOptimizerTensorListMetadata|FusedAdam|LpNormFunctor|lpnorm_cleanup|"
                  r"multi_tensor_apply_kernel<.*TensorListMetadata<1>"),
    ("loss", r"SoftMax|softmax|nll_loss|cross_entropy|log_softmax"),
    ("fsdp copies", r"chunk_cat|all_gather_copy|split_with_sizes_copy|foreach_copy|nccl"),
    ("embedding", r"embedding|gather_kernel|compute_grad_weight|sum_and_scatter|radix_sort|unique_by_key|"
                  r"krn_partial|compute_num_of_partial|DeviceScan|DeviceCompact|arange_cuda"),
    ("norm", r"layer_norm|GammaBeta|rms_norm|RowwiseMoments|reduce_kernel<.*sum_functor"),
    ("cast/copy", r"_copy_kernel|direct_copy|bfloat16_copy|triton_poi_fused__to_copy|"
                  r"triton_poi_fused_clone|Memcpy|FillFunctor"),
    ("rope/elementwise", r"elementwise_kernel|CatArrayBatchedCopy|triton_poi|triton_red|triton_per|neg_kernel|silu|"
                         r"conj_kernel"),
)
_COMPILED = [(c, re.compile(p)) for c, p in _RULES]


def classify(kernel_name: str) -> str:
    """The op class of a measured CUDA kernel name (one of ``CLASSES``)."""
    # inductor names its fused kernels after the aten ops in them: read the dominant one first
    if kernel_name.startswith("triton_"):
        if "rms_norm" in kernel_name:
            return "norm"
        if "log_softmax" in kernel_name or "nll_loss" in kernel_name:
            return "loss"
        if re.search(r"fused__to_copy(_t|_view)?_\d+$", kernel_name) or "clone_transpose" in kernel_name:
            return "cast/copy"
        return "rope/elementwise"
    for cls, pattern in _COMPILED:
        if pattern.search(kernel_name):
            return cls
    return "other"


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
