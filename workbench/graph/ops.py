"""Operators of a training step: what each one computes, on which shape, and how many FLOPs and bytes.

FLOP counts follow the usual conventions: a GEMM is 2*m*n*k; flash attention forward is 4*b*h*s^2*d (two
GEMMs; causal skips the fully masked key blocks); its backward is 2.5x the forward (five GEMMs, the score
recomputation included: Dao 2023, FlashAttention-2, Sec. 3.1.2). Bytes are the fewest an op must move through
HBM: each input read once, each output written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Union

from workbench.precision import get_precision, linear_gemm_precisions

Phase = Literal["fwd", "bwd", "optimizer"]

# Memory-bound operator classes the time model knows; each has its own achievable-bandwidth constant.
MEMORY_BOUND_KINDS: tuple[str, ...] = (
    "copy", "add", "gelu", "swiglu", "sum", "layernorm", "rmsnorm", "softmax", "cross_entropy", "rope",
    "embedding", "optimizer", "permute", "relu", "silu", "mul", "fsdp", "fp8_quantize",
)

ATTENTION_BLOCK = 128
"""Query/key block of flash attention kernels: the granule of the causal mask (FlashAttention-2/3 use 128)."""


@dataclass(frozen=True)
class GemmShape:
    """C[m, n] = A[m, k] @ B[k, n], ``groups`` independent GEMMs of that shape (grouped MoE experts)."""

    m: int
    n: int
    k: int
    groups: int = 1


@dataclass(frozen=True)
class AttentionShape:
    """Scaled-dot-product attention: q [batch, heads_q, seq, head_dim], k/v [batch, heads_kv, seq, head_dim]."""

    batch: int
    seq: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool
    pass_: Literal["fwd", "bwd", "fwd_bwd"] = "fwd"

    def causal_fraction(self) -> float:
        """Fraction of the score matrix a block-skipping causal kernel computes."""
        if not self.causal:
            return 1.0
        blocks = math.ceil(self.seq / ATTENTION_BLOCK)
        return (blocks + 1) / (2 * blocks)


@dataclass(frozen=True)
class RowsShape:
    """An elementwise, normalization or reduction op over a [rows, cols] tensor (norms over cols)."""

    rows: int
    cols: int


@dataclass(frozen=True)
class FlatShape:
    """A memory-bound op over ``elements`` items (optimizer, embedding rows)."""

    elements: int


Shape = Union[GemmShape, AttentionShape, RowsShape, FlatShape]


@dataclass(frozen=True)
class Op:
    """One operator of a step. ``count`` repeats it (e.g. once per layer) without listing it again."""

    name: str
    kind: str
    """gemm, attention, or one of MEMORY_BOUND_KINDS."""
    phase: Phase
    shape: Shape
    dtype: str
    flops: float
    bytes_read: float
    bytes_written: float
    count: int = 1
    layer: str = ""
    """Which block the op belongs to (attention, mlp, head, embedding, optimizer...)."""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    def describe_shape(self) -> str:
        s = self.shape
        if isinstance(s, GemmShape):
            text = f"{s.m}x{s.n}x{s.k}"
            return f"{s.groups} x {text}" if s.groups > 1 else text
        if isinstance(s, AttentionShape):
            return (f"b{s.batch} s{s.seq} hq{s.heads_q} hkv{s.heads_kv} d{s.head_dim}"
                    f"{' causal' if s.causal else ''}")
        if isinstance(s, RowsShape):
            return f"{s.rows}x{s.cols}"
        return f"{s.elements:,}"


_OP_FIELDS = frozenset(Op.__dataclass_fields__)


def new_op(name: str, kind: str, phase: Phase, shape: Shape, dtype: str, flops: float, bytes_read: float,
           bytes_written: float, count: int = 1, layer: str = "", extra: dict | None = None) -> Op:
    """``Op(...)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field): the same
    fields, so an equal, equally hashed op. The graph builders make tens of thousands of ops in a cold recipe
    search, and ``__init__`` was half the time of making one."""
    new = object.__new__(Op)
    new.__dict__.update(name=name, kind=kind, phase=phase, shape=shape, dtype=dtype, flops=flops,
                        bytes_read=bytes_read, bytes_written=bytes_written, count=count, layer=layer,
                        extra={} if extra is None else extra)
    return new


def flat_shape(elements: int) -> FlatShape:
    """``FlatShape(elements)`` without the frozen dataclass's ``__init__`` (as ``new_op``): an equal shape. The
    kernel tables make one per kernel op."""
    shape = object.__new__(FlatShape)
    shape.__dict__["elements"] = elements
    return shape


def gemm_shape(m: int, n: int, k: int, groups: int = 1) -> GemmShape:
    """``GemmShape(m, n, k, groups)`` without the frozen dataclass's ``__init__`` (as ``new_op``): an equal shape.
    Every block graph makes one per GEMM."""
    shape = object.__new__(GemmShape)
    shape.__dict__.update(m=m, n=n, k=k, groups=groups)
    return shape


def replace_op(op: Op, **changes) -> Op:
    """``dataclasses.replace(op, **changes)`` without calling ``__init__``: an ``Op`` derives nothing from its
    fields, so they are copied and ``changes`` set (``extra`` shared, as ``replace`` shares it). The recomputation
    and float8 builders copy thousands of ops per recipe search; ``replace`` was most of their time."""
    unknown = changes.keys() - _OP_FIELDS
    if unknown:
        raise TypeError(f"replace_op: Op has no field {', '.join(sorted(unknown))}")
    new = object.__new__(Op)
    fields = new.__dict__
    fields.update(op.__dict__)
    fields.update(changes)
    return new


_BYTES_PER_ELEMENT: dict[str, float] = {}
"""``get_precision(dtype).bytes_per_element`` by the dtype name asked for, filled on first use: the graph builders
ask it for every op they make (thousands per recipe search). Safe: the precision table is fixed at import, and an
unknown name still raises, from ``get_precision``, since only found names are kept."""


def nbytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (``workbench.precision``)."""
    size = _BYTES_PER_ELEMENT.get(dtype)
    if size is None:
        size = _BYTES_PER_ELEMENT[dtype] = get_precision(dtype).bytes_per_element
    return size


def output_dtype(dtype: str) -> str:
    """What a GEMM writes: fp32 for fp32/tf32 inputs, bf16 for 8-bit and 4-bit inputs (scaled mm)."""
    if dtype in ("fp32", "tf32", "fp64"):
        return "fp32" if dtype != "fp64" else "fp64"
    if dtype == "fp16":
        return "fp16"
    return "bf16"


def gemm(name: str, m: int, n: int, k: int, dtype: str, *, phase: Phase = "fwd", groups: int = 1,
         count: int = 1, layer: str = "") -> Op:
    a = nbytes(dtype)
    out = nbytes(output_dtype(dtype))
    return new_op(name, "gemm", phase, gemm_shape(m, n, k, groups), dtype, 2.0 * m * n * k * groups,
                  (m * k + k * n) * a * groups, m * n * out * groups, count, layer)


def gemm_with_grads(name: str, m: int, n: int, k: int, dtype: str, *, groups: int = 1, count: int = 1,
                    layer: str = "") -> list[Op]:
    """y[m, n] = x[m, k] W[k, n] and its two backward GEMMs: dgrad dx = dy W^T and wgrad dW = x^T dy. ``dtype`` is
    a training precision: each GEMM runs in its ``linear_gemm_precisions`` entry (fp8_gw_hp: wgrad in bf16)."""
    p = linear_gemm_precisions(dtype)
    return [
        gemm(f"{name}.fwd", m, n, k, p.forward, groups=groups, count=count, layer=layer),
        gemm(f"{name}.dgrad", m, k, n, p.dgrad, phase="bwd", groups=groups, count=count, layer=layer),
        gemm(f"{name}.wgrad", k, n, m, p.wgrad, phase="bwd", groups=groups, count=count, layer=layer),
    ]


def attention(name: str, shape: AttentionShape, dtype: str, *, phase: Phase, count: int = 1, layer: str = "") -> Op:
    """Flash attention forward or backward (``phase``), or both (``shape.pass_ == 'fwd_bwd'``)."""
    s = shape
    fwd_flops = 4.0 * s.batch * s.heads_q * s.seq * s.seq * s.head_dim * s.causal_fraction()
    a = nbytes(dtype)
    q = s.batch * s.heads_q * s.seq * s.head_dim * a
    kv = 2 * s.batch * s.heads_kv * s.seq * s.head_dim * a
    lse = s.batch * s.heads_q * s.seq * 4  # fp32 log-sum-exp saved for backward
    fwd = (fwd_flops, q + kv, q + lse)  # reads q, k, v; writes o and lse
    bwd = (2.5 * fwd_flops, 2 * q + kv + q + lse, q + kv)  # reads q, k, v, o, do, lse; writes dq, dk, dv
    if s.pass_ == "fwd_bwd":
        flops, read, written = (fwd[i] + bwd[i] for i in range(3))
    else:
        flops, read, written = fwd if phase == "fwd" else bwd
    return new_op(name, "attention", phase, kernel_pass(s, phase), dtype, flops, read, written, count, layer)


def kernel_pass(shape: AttentionShape, phase: Phase) -> AttentionShape:
    """``shape`` carrying the kernel's own pass, which its rate follows (``workbench.perf.attention``): the
    ``phase``'s, so that a recomputed forward (copied into the backward, phase bwd) keeps the forward's rate."""
    if shape.pass_ == "fwd_bwd":
        return shape
    kernel = object.__new__(AttentionShape)  # dataclasses.replace(shape, pass_=...) without the frozen __init__
    kernel.__dict__.update(shape.__dict__)
    kernel.__dict__["pass_"] = "fwd" if phase == "fwd" else "bwd"
    return kernel


# FLOPs per element of the memory-bound ops (rough operation counts; they only matter for the roofline plot).
_FLOPS_PER_ELEMENT = {"copy": 0, "add": 1, "gelu": 8, "swiglu": 6, "sum": 1, "layernorm": 8, "rmsnorm": 5,
                      "softmax": 5, "cross_entropy": 6, "rope": 3, "embedding": 1, "permute": 0, "optimizer": 12,
                      "relu": 1, "silu": 5, "mul": 2, "fsdp": 0, "fp8_quantize": 3}


def memory_op(name: str, kind: str, shape: RowsShape | FlatShape, dtype: str, *, reads: float, writes: float,
              phase: Phase = "fwd", count: int = 1, layer: str = "", extra_bytes: float = 0.0) -> Op:
    """A memory-bound op that reads ``reads`` and writes ``writes`` tensors of the shape's size in ``dtype``."""
    elements = shape.rows * shape.cols if isinstance(shape, RowsShape) else shape.elements
    a = nbytes(dtype)
    return new_op(name, kind, phase, shape, dtype, float(_FLOPS_PER_ELEMENT.get(kind, 1) * elements),
                  reads * elements * a + extra_bytes, writes * elements * a, count, layer)


# The predict-ops row format: per op, how many full-size tensors it reads and writes.
ROW_OP_TRAFFIC: dict[str, tuple[float, float]] = {
    "copy": (1, 1),       # y.copy_(x)
    "add": (2, 1),        # out = x + y
    "gelu": (1, 1),       # out-of-place
    "sum": (1, 0),        # all elements to one scalar
    "layernorm": (1, 1),  # over the last dimension (weights and bias are a row each)
    "rmsnorm": (1, 1),
    "softmax": (1, 1),
}


def rows_op(kind: str, rows: int, cols: int, dtype: str, name: str | None = None) -> Op:
    """One of the predict-ops memory-bound ops on [rows, cols]."""
    reads, writes = ROW_OP_TRAFFIC[kind]
    params = {"layernorm": 2, "rmsnorm": 1}.get(kind, 0) * cols * nbytes(dtype)
    return memory_op(name or kind, kind, RowsShape(rows, cols), dtype, reads=reads, writes=writes, extra_bytes=params)
