#!/usr/bin/env python3
"""Measure ground-truth GPU times for a fixed plan of operator rows.

The rows (GEMMs, attention, memory-bound elementwise/reduction/norm ops) are the
shapes the analytical performance model is validated against.  Every row is
first checked for correctness against a float64 reference on fresh random
inputs, then timed with ``triton.testing.do_bench`` (median, L2 flushed between
repetitions, inputs rotated so they are cold).

Output (see ``CSV_COLUMNS``)::

    DIR/measured_ops.csv    one line per row, rewritten atomically every ~20 rows
    DIR/environment.json    GPU, driver, library versions, command line

Usage::

    python3 benchmarks/model/measure_ops.py --out DIR [--only gemm,attention,memory]
        [--dtypes bf16,fp8,...] [--quick] [--limit N]
    python3 benchmarks/model/measure_ops.py --plan          # row counts, no GPU needed
    python3 benchmarks/model/measure_ops.py --cpu-smoke --out /tmp/smoke

Only the standard library, torch, pandas and (on the GPU path, imported lazily)
``triton.testing.do_bench`` are used: the script does not import the project.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime as dt
import gc
import inspect
import itertools
import json
import math
import os
import platform
import random
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Callable, Iterable, Iterator, Optional, Sequence

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------- #
# Constants
# --------------------------------------------------------------------------- #

CSV_COLUMNS = [
    "op", "m", "n", "k", "batch", "seq", "heads_q", "heads_kv", "head_dim",
    "causal", "pass", "rows", "cols", "dtype", "shape_set",
    "measured_ms", "tflops", "gb_s", "rel_err",
]

SEED = 20240917                      # fixed seed: plan and inputs are deterministic
MiB = 1 << 20
GiB = 1 << 30

DO_BENCH_WARMUP_MS = 25              # triton.testing.do_bench defaults
DO_BENCH_REP_MS = 100
COLD_INPUT_BYTES = 256 * MiB         # rotate input sets until they span this much (4x the L2)
MAX_INPUT_SETS = 64                  # cap on rotated input sets (keeps set-up cheap)
CHECKPOINT_EVERY = 20                # rows between CSV rewrites / progress lines
MAX_MEMORY_OP_BYTES = 16 * GiB       # memory-bound rows moving more than this are skipped

GEMM_CHECK_ROWS = 1024               # GEMM check: sampled output rows vs. float64 reference
REF_CHUNK_BYTES = 1 * GiB            # float64 temporaries in a reference are chunked to this
ATTN_CHECK_MAX_SCORES = 1 << 31      # attention check only if batch*heads_q*seq^2 <= this
ATTN_TOKENS = 16384                  # attention batch is chosen so batch*seq = this
NORM_EPS = 1e-5                      # layernorm / rmsnorm epsilon (Llama uses 1e-5)
FP8_MAX = 448.0                      # largest finite float8_e4m3fn value
FP8_ALIGN = 16                       # torch._scaled_mm needs m, n, k multiples of 16
FLOAT_FORMAT = "{:.6g}"              # CSV number formatting
CSV_FILE_MODE = 0o644                # rw-r--r--, like a plain open() under the usual umask

# Relative-error tolerance per dtype (||out - ref|| / ||ref||).
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 2e-2, "fp16": 2e-2, "fp8": 5e-2}

# Element type of the (input) tensors for each dtype tag; fp8 outputs are bf16.
TORCH_DTYPE = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "tf32": torch.float32,
    "fp32": torch.float32,
    "fp8": getattr(torch, "float8_e4m3fn", None),
}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp8": 1}

MEMORY_OPS = ("copy", "add", "gelu", "sum", "layernorm", "rmsnorm", "softmax")
# Bytes moved per element of the (rows x cols) tensor, in units of the element
# size: each input read once plus the output written once.
MEMORY_OP_TRAFFIC = {
    "copy": 2, "add": 3, "gelu": 2, "sum": 1,
    "layernorm": 2, "rmsnorm": 2, "softmax": 2,
}
# Attention: backward costs 2.5x the forward FLOPs, so fwd+bwd is 3.5x.
ATTN_FWD_BWD_FLOP_FACTOR = 3.5


# --------------------------------------------------------------------------- #
# Rows of the plan
# --------------------------------------------------------------------------- #

@dataclasses.dataclass
class Row:
    """One line of the output CSV: the operator spec plus what was measured."""

    op: str
    dtype: str
    shape_set: str
    m: Optional[int] = None
    n: Optional[int] = None
    k: Optional[int] = None
    batch: Optional[int] = None
    seq: Optional[int] = None
    heads_q: Optional[int] = None
    heads_kv: Optional[int] = None
    head_dim: Optional[int] = None
    causal: Optional[bool] = None
    pass_: Optional[str] = None       # "pass" is a Python keyword
    rows: Optional[int] = None
    cols: Optional[int] = None
    measured_ms: Optional[float] = None
    tflops: Optional[float] = None
    gb_s: Optional[float] = None
    rel_err: Optional[float] = None

    def csv_record(self) -> dict:
        """The row as CSV strings, empty where a column does not apply."""
        record = {}
        for column in CSV_COLUMNS:
            value = getattr(self, "pass_" if column == "pass" else column)
            if value is None:
                record[column] = ""
            elif isinstance(value, bool):
                record[column] = "true" if value else "false"
            elif isinstance(value, float):
                record[column] = FLOAT_FORMAT.format(value)
            else:
                record[column] = str(value)
        return record

    def describe(self) -> str:
        """Short human-readable label for log lines."""
        if self.op == "gemm":
            shape = f"m={self.m} n={self.n} k={self.k}"
        elif self.op == "attention":
            shape = (f"b={self.batch} s={self.seq} hq={self.heads_q} "
                     f"hkv={self.heads_kv} d={self.head_dim} "
                     f"causal={self.causal} {self.pass_}")
        else:
            shape = f"{self.rows}x{self.cols}"
        return f"{self.op} {self.dtype} {shape} [{self.shape_set}]"


def gemm_row(m: int, n: int, k: int, dtype: str, shape_set: str) -> Row:
    """A GEMM row C[m,n] = A[m,k] @ B[k,n]."""
    return Row(op="gemm", dtype=dtype, shape_set=shape_set, m=int(m), n=int(n), k=int(k))


# --------------------------------------------------------------------------- #
# Plan: GEMM shapes
# --------------------------------------------------------------------------- #

# Llama 3 model dimensions (Dubey et al. 2024, Table 3).
LLAMA3 = {
    # name: (hidden, ffn, heads_q, heads_kv, head_dim, vocab)
    "8b": (4096, 14336, 32, 8, 128, 128256),
    "70b": (8192, 28672, 64, 8, 128, 128256),
    "405b": (16384, 53248, 128, 8, 128, 128256),
}
LLAMA_TOKENS = (2048, 8192)          # tokens per GEMM (micro-batch x sequence)


def llama_linear_layers(hidden, ffn, heads_q, heads_kv, head_dim, vocab):
    """(in_features, out_features) of the linear layers of one Llama 3 block + head."""
    return [
        (hidden, (heads_q + 2 * heads_kv) * head_dim),   # fused q, k, v projection
        (heads_q * head_dim, hidden),                    # attention output projection
        (hidden, 2 * ffn),                               # fused SwiGLU gate + up
        (ffn, hidden),                                   # SwiGLU down projection
        (hidden, vocab),                                 # LM head
    ]


def training_gemms(tokens: int, fan_in: int, fan_out: int) -> list:
    """The three GEMMs a linear layer costs in a training step, as (pass, m, n, k).

    fwd   Y[T,out]  = X[T,in]    @ W[in,out]
    dgrad dX[T,in]  = dY[T,out]  @ W^T[out,in]
    wgrad dW[in,out] = X^T[in,T] @ dY[T,out]
    """
    return [
        ("fwd", tokens, fan_out, fan_in),
        ("dgrad", tokens, fan_in, fan_out),
        ("wgrad", fan_in, fan_out, tokens),
    ]


def llama_gemm_rows(dtype: str) -> list:
    """Training-step GEMMs of Llama 3 8B / 70B / 405B for T in LLAMA_TOKENS (90 rows)."""
    rows = []
    for name, dims in LLAMA3.items():
        for tokens in LLAMA_TOKENS:
            for fan_in, fan_out in llama_linear_layers(*dims):
                for pass_, m, n, k in training_gemms(tokens, fan_in, fan_out):
                    rows.append(gemm_row(m, n, k, dtype, f"llama3-{name}-{pass_}"))
    return rows


SQUARE_SIZES = (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
SKINNY_M = (16, 32, 64, 128)                     # decode-like / small-batch rows
SKINNY_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
ODD_MNK = (                                      # non-power-of-two, tile-unfriendly
    (1000, 1000, 1000),
    (4095, 4097, 4093),
    (1537, 3001, 2049),
    (777, 5555, 3333),
    (8191, 8191, 127),
    (127, 8191, 8191),
    (96, 12345, 4321),
    (12289, 769, 6143),
)


def square_rows(dtype: str) -> list:
    """m = n = k over SQUARE_SIZES (10 rows)."""
    return [gemm_row(s, s, s, dtype, "square") for s in SQUARE_SIZES]


def skinny_rows(dtype: str) -> list:
    """Small m against Llama-sized weights (16 rows)."""
    return [gemm_row(m, n, k, dtype, "skinny") for m in SKINNY_M for n, k in SKINNY_NK]


def odd_rows(dtype: str) -> list:
    """Awkward sizes that do not divide the tile shapes (8 rows)."""
    return [gemm_row(m, n, k, dtype, "odd") for m, n, k in ODD_MNK]


# DLRM-DCNv2 (MLPerf recommendation_v2): 13 dense features, bottom MLP 512-256-128,
# top MLP 1024-1024-512-256-1.
DLRM_BOTTOM = (13, 512, 256, 128)
DLRM_TOP = (1024, 1024, 512, 256, 1)
DLRM_BATCHES = (2048, 65536)


def dlrm_rows(dtype: str) -> list:
    """fwd/dgrad/wgrad GEMMs of the DLRM MLPs at two batch sizes (40 rows, 34 unique).

    The first bottom layer gets no dgrad: its input (dense features) needs no gradient.
    """
    rows = []
    for batch in DLRM_BATCHES:
        for widths in (DLRM_BOTTOM, DLRM_TOP):
            for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
                for pass_, m, n, k in training_gemms(batch, fan_in, fan_out):
                    if widths is DLRM_BOTTOM and layer == 0 and pass_ == "dgrad":
                        continue
                    rows.append(gemm_row(m, n, k, dtype, f"dlrm-mlp-{pass_}"))
    return rows


RANDOM_GEMMS = 30
RANDOM_DIM_RANGE = (64, 16384)       # each of m, n, k drawn log-uniform in this range
RANDOM_MAX_MNK = 1 << 40             # rejects shapes above ~2 TFLOP (keeps runtime bounded)


def random_rows(dtype: str, seed: int = SEED) -> list:
    """RANDOM_GEMMS log-uniform (m, n, k) with m*n*k <= RANDOM_MAX_MNK (deterministic)."""
    rng = random.Random(seed)
    lo, hi = (math.log(v) for v in RANDOM_DIM_RANGE)
    rows = []
    while len(rows) < RANDOM_GEMMS:
        m, n, k = (int(round(math.exp(rng.uniform(lo, hi)))) for _ in range(3))
        if m * n * k <= RANDOM_MAX_MNK:
            rows.append(gemm_row(m, n, k, dtype, "random"))
    return rows


def gemm_shape_rows(dtype: str) -> list:
    """The full GEMM shape list (188 rows) in a fixed order.

    Exact repeats within a shape_set are dropped (the DLRM bottom and top MLPs
    both have a 512->256 layer); the same shape under two tags is kept.
    """
    rows = (llama_gemm_rows(dtype) + square_rows(dtype) + skinny_rows(dtype)
            + odd_rows(dtype) + dlrm_rows(dtype) + random_rows(dtype))
    seen, unique = set(), []
    for r in rows:
        key = (r.m, r.n, r.k, r.shape_set)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


SUBSET_STRIDE = 4                    # other dtypes: every 4th shape of the bf16 list


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= value."""
    return -(-value // multiple) * multiple


def gemm_plan() -> list:
    """bf16 on every shape; fp16, tf32, fp32 and fp8 on every SUBSET_STRIDE-th shape."""
    rows = gemm_shape_rows("bf16")
    for dtype in ("fp16", "tf32", "fp32", "fp8"):
        for shape in gemm_shape_rows(dtype)[::SUBSET_STRIDE]:
            if dtype == "fp8":
                shape.m, shape.n, shape.k = (round_up(v, FP8_ALIGN)
                                             for v in (shape.m, shape.n, shape.k))
            rows.append(shape)
    return rows


# --------------------------------------------------------------------------- #
# Plan: attention and memory-bound rows
# --------------------------------------------------------------------------- #

ATTN_MODELS = {
    # shape_set: (heads_q, heads_kv, head_dim)
    "llama3-8b-attn": (32, 8, 128),
    "llama3-70b-attn": (64, 8, 128),
    "llama3-405b-attn": (128, 8, 128),
    "gpt2-small-attn": (12, 12, 64),
}
ATTN_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
ATTN_NONCAUSAL_SEQS = (1024, 2048, 4096, 8192)   # bidirectional rows (fewer than causal)
ATTN_PASSES = ("fwd", "fwd_bwd")


def attention_plan() -> list:
    """40 configs (24 causal, 16 non-causal) x 2 passes = 80 rows, batch*seq = ATTN_TOKENS."""
    rows = []
    for shape_set, (heads_q, heads_kv, head_dim) in ATTN_MODELS.items():
        configs = [(s, True) for s in ATTN_SEQS] + [(s, False) for s in ATTN_NONCAUSAL_SEQS]
        for seq, causal in configs:
            for pass_ in ATTN_PASSES:
                rows.append(Row(op="attention", dtype="bf16", shape_set=shape_set,
                                batch=max(1, ATTN_TOKENS // seq), seq=seq,
                                heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim,
                                causal=causal, pass_=pass_))
    return rows


MEMORY_SHAPES = ((1024, 1024), (4096, 4096), (8192, 8192), (16384, 8192),
                 (32768, 8192), (4096, 4096 * 4))
VOCAB_SHAPE = (8192, 128256)         # logits of 8192 tokens over the Llama 3 vocabulary
VOCAB_OPS = ("softmax", "copy")
MEMORY_DTYPES = ("bf16", "fp32")


def memory_traffic_bytes(op: str, rows: int, cols: int, dtype: str) -> int:
    """Minimal DRAM bytes of a memory-bound row (inputs read once, output written once)."""
    return MEMORY_OP_TRAFFIC[op] * rows * cols * ELEMENT_BYTES[dtype]


def memory_plan() -> list:
    """7 ops x 6 shapes + 2 vocab rows, for bf16 and fp32 (88 rows)."""
    rows = []
    for dtype in MEMORY_DTYPES:
        cases = [(op, shape) for shape in MEMORY_SHAPES for op in MEMORY_OPS]
        cases += [(op, VOCAB_SHAPE) for op in VOCAB_OPS]
        for op, (r, c) in cases:
            if memory_traffic_bytes(op, r, c, dtype) > MAX_MEMORY_OP_BYTES:
                continue
            rows.append(Row(op=op, dtype=dtype, shape_set="memory", rows=r, cols=c))
    return rows


def full_plan() -> list:
    """Every GPU row, GEMMs first, then attention, then memory-bound ops."""
    return gemm_plan() + attention_plan() + memory_plan()


def smoke_plan() -> list:
    """A handful of tiny rows of every op, for --cpu-smoke (no fp8, no tf32)."""
    rows = [gemm_row(64, 48, 32, dt_, "smoke") for dt_ in ("bf16", "fp16", "fp32")]
    rows.append(gemm_row(33, 17, 129, "fp32", "smoke"))
    for heads_q, heads_kv, causal in ((4, 2, True), (4, 4, False)):
        for pass_ in ATTN_PASSES:
            rows.append(Row(op="attention", dtype="bf16", shape_set="smoke", batch=2,
                            seq=64, heads_q=heads_q, heads_kv=heads_kv, head_dim=32,
                            causal=causal, pass_=pass_))
    for dtype in MEMORY_DTYPES:
        for op in MEMORY_OPS:
            rows.append(Row(op=op, dtype=dtype, shape_set="smoke", rows=64, cols=256))
    return rows


def op_group(op: str) -> str:
    """The --only group an op belongs to: gemm, attention or memory."""
    return op if op in ("gemm", "attention") else "memory"


QUICK_STRIDE = 5                     # --quick keeps every 5th row of each op/dtype


def select_rows(plan: list, only: Optional[set], dtypes: Optional[set],
                quick: bool, limit: Optional[int]) -> list:
    """Apply --only, --dtypes, --quick (every 5th row per op/dtype) and --limit."""
    rows = [r for r in plan
            if (only is None or op_group(r.op) in only)
            and (dtypes is None or r.dtype in dtypes)]
    if quick:
        seen = Counter()
        kept = []
        for r in rows:
            if seen[(r.op, r.dtype)] % QUICK_STRIDE == 0:
                kept.append(r)
            seen[(r.op, r.dtype)] += 1
        rows = kept
    return rows[:limit] if limit is not None else rows


def print_plan(rows: list) -> None:
    """Row counts per op / dtype / shape_set, then per op and in total."""
    by_set = Counter((r.op, r.dtype, r.shape_set) for r in rows)
    print(f"{'op':<10} {'dtype':<6} {'shape_set':<20} rows")
    for (op, dtype, shape_set), count in sorted(by_set.items()):
        print(f"{op:<10} {dtype:<6} {shape_set:<20} {count}")
    print()
    for key, count in sorted(Counter((r.op, r.dtype) for r in rows).items()):
        print(f"{key[0]:<10} {key[1]:<6} {count}")
    print()
    for group, count in sorted(Counter(op_group(r.op) for r in rows).items()):
        print(f"{group:<10} {count}")
    print(f"total rows: {len(rows)}")


# --------------------------------------------------------------------------- #
# Numerics helpers
# --------------------------------------------------------------------------- #

def rel_err_from_chunks(pairs: Iterable) -> float:
    """||out - ref|| / ||ref|| accumulated over (out_chunk, ref_chunk) pairs in float64.

    NaNs (e.g. from an unwritten poisoned output) propagate into the result.
    """
    num = den = None
    for out, ref in pairs:
        out, ref = out.to(torch.float64), ref.to(torch.float64)
        d_num = (out - ref).square().sum()
        d_den = ref.square().sum()
        num = d_num if num is None else num + d_num
        den = d_den if den is None else den + d_den
    return math.sqrt(num.item()) / math.sqrt(den.item())


def flat_chunks(out: torch.Tensor, ref: torch.Tensor) -> Iterator:
    """Pairs of matching flat slices of out and ref, each <= REF_CHUNK_BYTES in float64."""
    out, ref = out.reshape(-1), ref.reshape(-1)
    step = REF_CHUNK_BYTES // 8
    for start in range(0, out.numel(), step):
        yield out[start:start + step], ref[start:start + step]


def poisoned(shape, dtype, device) -> torch.Tensor:
    """An output buffer full of NaN, so unwritten elements fail the check."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def n_input_sets(set_bytes: int) -> int:
    """How many independent input sets to rotate through so they span COLD_INPUT_BYTES."""
    return max(1, min(MAX_INPUT_SETS, math.ceil(COLD_INPUT_BYTES / max(1, set_bytes))))


def tensor_bytes(tensors: Sequence) -> int:
    """Total bytes of the tensors in a sequence."""
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def fp32_matmul_mode(dtype: str):
    """Set torch.backends.cuda.matmul.allow_tf32 for tf32/fp32 GEMMs; restore after."""
    if dtype not in ("tf32", "fp32"):
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


# --------------------------------------------------------------------------- #
# Operator cases: inputs, the timed call, the correctness check, FLOPs and bytes
# --------------------------------------------------------------------------- #

class OpCase:
    """How to run and check one row.  Subclasses fill in the op-specific parts."""

    def __init__(self, row: Row, device: torch.device):
        self.row = row
        self.device = device

    def make_inputs(self) -> tuple:
        """One fresh set of random inputs (torch.randn based, never zeros)."""
        raise NotImplementedError

    def run(self, inputs: tuple):
        """The timed operation on one input set."""
        raise NotImplementedError

    def rel_err(self) -> Optional[float]:
        """Relative error against a float64 reference on fresh inputs (None: skipped)."""
        raise NotImplementedError

    def flops(self) -> Optional[float]:
        """FLOPs of one run (None where not meaningful)."""
        return None

    def bytes_moved(self) -> Optional[float]:
        """Minimal DRAM bytes of one run (None where not defined)."""
        return None

    def grad_tensors(self, inputs: tuple) -> list:
        """Leaves whose .grad must be reset between repetitions."""
        return []

    def precision(self):
        """Context manager wrapping both the check and the timing."""
        return contextlib.nullcontext()

    def randn(self, *shape, dtype=None) -> torch.Tensor:
        """Standard-normal tensor on the case's device, in the row's dtype by default."""
        dtype = TORCH_DTYPE[self.row.dtype] if dtype is None else dtype
        return torch.randn(*shape, dtype=dtype, device=self.device)


class GemmCase(OpCase):
    """C[m,n] = A[m,k] @ B[k,n]; A row-major, B row-major (fp8: column-major)."""

    def make_inputs(self) -> tuple:
        m, n, k = self.row.m, self.row.n, self.row.k
        if self.row.dtype == "fp8":
            a, scale_a = self.quantise_fp8(self.randn(m, k, dtype=torch.float32))
            # B must be column-major for _scaled_mm: make [n, k] and view it as [k, n].
            b_t, scale_b = self.quantise_fp8(self.randn(n, k, dtype=torch.float32))
            return a, b_t.t(), scale_a, scale_b
        return self.randn(m, k), self.randn(k, n)

    @staticmethod
    def quantise_fp8(x: torch.Tensor) -> tuple:
        """Per-tensor scaled cast to float8_e4m3fn: x ~= x_fp8 * scale."""
        scale = (x.abs().amax() / FP8_MAX).to(torch.float32)
        return (x / scale).to(TORCH_DTYPE["fp8"]), scale

    def run(self, inputs: tuple):
        if self.row.dtype == "fp8":
            a, b, scale_a, scale_b = inputs
            out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b,
                                   out_dtype=torch.bfloat16)
            return out[0] if isinstance(out, tuple) else out   # torch<2.4 returned (out, amax)
        a, b = inputs
        return torch.matmul(a, b)

    def precision(self):
        return fp32_matmul_mode(self.row.dtype)

    def rel_err(self) -> float:
        """Check up to GEMM_CHECK_ROWS evenly spaced output rows (all columns)."""
        inputs = self.make_inputs()
        if self.row.dtype == "fp8":
            out = self.run(inputs)
            a, b, scale_a, scale_b = inputs
            a64 = lambda rows: a[rows].to(torch.float32).to(torch.float64) * scale_a.double()
            b64 = lambda cols: b[:, cols].to(torch.float32).to(torch.float64) * scale_b.double()
        else:
            a, b = inputs
            out = poisoned((self.row.m, self.row.n), a.dtype, self.device)
            torch.matmul(a, b, out=out)
            a64 = lambda rows: a[rows].to(torch.float64)
            b64 = lambda cols: b[:, cols].to(torch.float64)
        m, n, k = self.row.m, self.row.n, self.row.k
        rows = torch.linspace(0, m - 1, min(m, GEMM_CHECK_ROWS), device=self.device)
        rows = rows.round().long().unique()
        a_rows, out_rows = a64(rows), out[rows]
        col_step = max(1, REF_CHUNK_BYTES // (8 * k))           # float64 B chunk <= 1 GiB

        def pairs():
            for start in range(0, n, col_step):
                cols = slice(start, min(n, start + col_step))
                yield out_rows[:, cols], a_rows @ b64(cols)

        return rel_err_from_chunks(pairs())

    def flops(self) -> float:
        return 2.0 * self.row.m * self.row.n * self.row.k

    def bytes_moved(self) -> float:
        m, n, k = self.row.m, self.row.n, self.row.k
        out_bytes = 2 if self.row.dtype == "fp8" else ELEMENT_BYTES[self.row.dtype]
        return (m * k + k * n) * ELEMENT_BYTES[self.row.dtype] + m * n * out_bytes


class AttentionCase(OpCase):
    """F.scaled_dot_product_attention on q [b, hq, s, d], k/v [b, hkv, s, d]."""

    def make_inputs(self) -> tuple:
        r = self.row
        needs_grad = r.pass_ == "fwd_bwd"
        q = self.randn(r.batch, r.heads_q, r.seq, r.head_dim).requires_grad_(needs_grad)
        k = self.randn(r.batch, r.heads_kv, r.seq, r.head_dim).requires_grad_(needs_grad)
        v = self.randn(r.batch, r.heads_kv, r.seq, r.head_dim).requires_grad_(needs_grad)
        if not needs_grad:
            return q, k, v
        grad_out = self.randn(r.batch, r.heads_q, r.seq, r.head_dim)
        return q, k, v, grad_out

    def forward(self, q, k, v) -> torch.Tensor:
        """The attention forward with torch's default backend choice."""
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=self.row.causal,
            enable_gqa=self.row.heads_q != self.row.heads_kv)

    def run(self, inputs: tuple):
        if self.row.pass_ == "fwd":
            return self.forward(*inputs)          # inputs do not require grad: no graph
        q, k, v, grad_out = inputs
        self.forward(q, k, v).backward(grad_out)
        return None

    def grad_tensors(self, inputs: tuple) -> list:
        return list(inputs[:3]) if self.row.pass_ == "fwd_bwd" else []

    def rel_err(self) -> Optional[float]:
        """Forward output vs. float64 math attention, chunked over (batch, head)."""
        r = self.row
        if r.batch * r.heads_q * r.seq * r.seq > ATTN_CHECK_MAX_SCORES:
            return None
        q, k, v = (t.detach() for t in self.make_inputs()[:3])
        with torch.no_grad():
            out = self.forward(q, k, v)
        group = r.heads_q // r.heads_kv           # query heads per kv head (GQA)
        flat = lambda t: t.reshape(-1, r.seq, r.head_dim)
        q_f = flat(q)
        k_f = flat(k.repeat_interleave(group, dim=1))
        v_f = flat(v.repeat_interleave(group, dim=1))
        out_f = flat(out)
        heads_per_chunk = max(1, REF_CHUNK_BYTES // (8 * r.seq * r.seq))
        mask = None
        if r.causal:
            mask = torch.ones(r.seq, r.seq, dtype=torch.bool, device=self.device).triu(1)

        def pairs():
            for start in range(0, q_f.shape[0], heads_per_chunk):
                sl = slice(start, start + heads_per_chunk)
                scores = q_f[sl].double() @ k_f[sl].double().transpose(-1, -2)
                scores /= math.sqrt(r.head_dim)
                if mask is not None:
                    scores.masked_fill_(mask, float("-inf"))
                yield out_f[sl], torch.softmax(scores, dim=-1) @ v_f[sl].double()

        return rel_err_from_chunks(pairs())

    def flops(self) -> float:
        r = self.row
        fwd = 4.0 * r.batch * r.heads_q * r.seq * r.seq * r.head_dim   # QK^T and PV
        if r.causal:
            fwd /= 2
        return fwd * (ATTN_FWD_BWD_FLOP_FACTOR if r.pass_ == "fwd_bwd" else 1.0)

    def bytes_moved(self) -> float:
        """fwd: read q, k, v, write o.  bwd: read q, k, v, o, do; write dq, dk, dv."""
        r = self.row
        q_like = r.batch * r.heads_q * r.seq * r.head_dim * ELEMENT_BYTES[r.dtype]
        kv_like = r.batch * r.heads_kv * r.seq * r.head_dim * ELEMENT_BYTES[r.dtype]
        fwd = 2 * q_like + 2 * kv_like
        bwd = 4 * q_like + 4 * kv_like
        return fwd + (bwd if r.pass_ == "fwd_bwd" else 0)


class MemoryCase(OpCase):
    """Memory-bound ops on a [rows, cols] tensor."""

    def make_inputs(self) -> tuple:
        r = self.row
        x = self.randn(r.rows, r.cols)
        if r.op == "sum":
            # Shift the mean off zero so the scalar reference is far from 0 and the
            # relative error measures the reduction, not cancellation luck.
            x += 1
        if r.op in ("copy", "add"):
            return x, self.randn(r.rows, r.cols)       # copy: destination; add: 2nd operand
        if r.op == "layernorm":
            return x, self.randn(r.cols), self.randn(r.cols)
        if r.op == "rmsnorm":
            return x, self.randn(r.cols)
        return (x,)

    def run(self, inputs: tuple):
        op = self.row.op
        if op == "copy":
            x, y = inputs
            return y.copy_(x)
        if op == "add":
            x, y = inputs
            return x + y
        return self.reference_fn()(*inputs)

    def reference_fn(self) -> Callable:
        """The op as a function of its inputs (used in any precision)."""
        cols = self.row.cols
        return {
            "copy": lambda x, y: x.clone(),
            "add": lambda x, y: x + y,
            "gelu": lambda x: F.gelu(x),
            "sum": lambda x: x.sum(),
            "layernorm": lambda x, w, b: F.layer_norm(x, (cols,), w, b, eps=NORM_EPS),
            "rmsnorm": lambda x, w: F.rms_norm(x, (cols,), w, eps=NORM_EPS),
            "softmax": lambda x: torch.softmax(x, dim=-1),
        }[self.row.op]

    def rel_err(self) -> float:
        inputs = self.make_inputs()
        op = self.row.op
        if op == "copy":                       # poison the destination first
            x, y = inputs
            y.fill_(float("nan"))
            out = y.copy_(x)
        elif op == "add":                      # out= variant with a poisoned buffer
            x, y = inputs
            out = torch.add(x, y, out=poisoned(x.shape, x.dtype, self.device))
        else:
            out = self.run(inputs)
        ref = self.reference_fn()(*(t.to(torch.float64) for t in inputs))
        return rel_err_from_chunks(flat_chunks(out, ref))

    def bytes_moved(self) -> float:
        return memory_traffic_bytes(self.row.op, self.row.rows, self.row.cols, self.row.dtype)


def make_case(row: Row, device: torch.device) -> OpCase:
    """The OpCase subclass for a row's op."""
    if row.op == "gemm":
        return GemmCase(row, device)
    if row.op == "attention":
        return AttentionCase(row, device)
    return MemoryCase(row, device)


# --------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------- #

def gpu_timer(warmup_ms: float = DO_BENCH_WARMUP_MS, rep_ms: float = DO_BENCH_REP_MS):
    """A function (fn, grad_to_none) -> median ms built on triton.testing.do_bench.

    The keyword set is chosen from the installed do_bench's signature: newer
    versions take return_mode="median", older ones quantiles=[0.5].
    """
    from triton.testing import do_bench       # lazy: triton is only on the GPU machine

    params = inspect.signature(do_bench).parameters
    base = {"warmup": warmup_ms, "rep": rep_ms}
    if "return_mode" in params:
        base["return_mode"] = "median"
    elif "quantiles" in params:
        base["quantiles"] = [0.5]

    def time_ms(fn: Callable, grad_to_none: Optional[list] = None) -> float:
        kwargs = dict(base)
        if grad_to_none:
            if "grad_to_none" in params:
                kwargs["grad_to_none"] = grad_to_none
            else:                              # very old triton: reset grads inside fn
                inner = fn

                def fn():
                    for t in grad_to_none:
                        t.grad = None
                    inner()
        result = do_bench(fn, **kwargs)
        if isinstance(result, (list, tuple)):
            result = result[0]
        return float(result)

    return time_ms


CPU_TIMING_REPS = 5                  # --cpu-smoke: median of this many perf_counter runs


def cpu_timer(fn: Callable, grad_to_none: Optional[list] = None) -> float:
    """Median wall time in ms of CPU_TIMING_REPS runs after one warm-up (smoke test only)."""
    fn()
    times = []
    for _ in range(CPU_TIMING_REPS):
        for t in grad_to_none or ():
            t.grad = None
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# --------------------------------------------------------------------------- #
# Measuring rows
# --------------------------------------------------------------------------- #

def timed_callable(case: OpCase) -> tuple:
    """Build rotated cold input sets and a zero-argument callable cycling through them.

    Returns (fn, grad_leaves, sets); the caller drops `sets` after timing.
    """
    first = case.make_inputs()
    sets = [first] + [case.make_inputs() for _ in range(n_input_sets(tensor_bytes(first)) - 1)]
    cycle = itertools.cycle(sets)
    grads = [t for s in sets for t in case.grad_tensors(s)]
    return (lambda: case.run(next(cycle))), grads, sets


def measure_row(row: Row, device: torch.device, time_ms: Callable, seed: int) -> list:
    """Check and time one row in place; returns warning strings (empty when clean)."""
    warnings = []
    case = make_case(row, device)
    torch.manual_seed(seed)
    with case.precision():
        err = case.rel_err()
        row.rel_err = err
        if err is not None and not err <= TOLERANCE[row.dtype]:   # also catches NaN
            warnings.append(f"rel_err {err:.3e} > {TOLERANCE[row.dtype]:g}")
        fn, grads, sets = timed_callable(case)
        row.measured_ms = time_ms(fn, grads)
        del fn, grads, sets
    seconds = row.measured_ms / 1e3
    flops, nbytes = case.flops(), case.bytes_moved()
    row.tflops = flops / seconds / 1e12 if flops is not None and seconds > 0 else None
    row.gb_s = nbytes / seconds / 1e9 if nbytes is not None and seconds > 0 else None
    return warnings


def release_memory(device: torch.device) -> None:
    """Collect garbage and return cached blocks to the driver (after a failure)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def write_csv_atomic(path: str, rows: Iterable) -> None:
    """Write rows to path via a temp file in the same folder and os.replace."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".measured_ops.", suffix=".csv", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow(row.csv_record())
        os.chmod(tmp, CSV_FILE_MODE)            # mkstemp creates files private (0600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run_plan(rows: list, device: torch.device, time_ms: Callable, csv_path: str) -> dict:
    """Measure every row, checkpointing the CSV; returns counters for the summary."""
    done, failures, warned = [], 0, 0
    start = time.perf_counter()
    for index, row in enumerate(rows):
        failed = False
        try:
            for message in measure_row(row, device, time_ms, SEED + index):
                warned += 1
                print(f"warning: {row.describe()}: {message}", flush=True)
        except Exception as exc:              # OOM, unsupported shape, backend error...
            failures += 1
            failed = True
            row.measured_ms = row.tflops = row.gb_s = None
            print(f"error: {row.describe()}: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
        if failed:
            release_memory(device)           # outside `except`: traceback frames are gone
        done.append(row)
        if len(done) % CHECKPOINT_EVERY == 0 or len(done) == len(rows):
            write_csv_atomic(csv_path, done)
            print(f"[{len(done)}/{len(rows)}] {time.perf_counter() - start:.1f}s elapsed, "
                  f"{failures} errors, {warned} warnings", flush=True)
    return {"rows": len(done), "errors": failures, "warnings": warned,
            "elapsed_s": round(time.perf_counter() - start, 1)}


# --------------------------------------------------------------------------- #
# Environment and summary
# --------------------------------------------------------------------------- #

NVIDIA_SMI_QUERY = ["nvidia-smi",
                    "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                    "--format=csv,noheader"]
NVIDIA_SMI_FIELDS = ("driver_version", "max_sm_clock", "max_mem_clock", "power_limit")


def nvidia_smi_info() -> dict:
    """Driver version, max clocks and power limit from nvidia-smi ({} on failure)."""
    try:
        text = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    info = dict(zip(NVIDIA_SMI_FIELDS, (f.strip() for f in lines[0].split(","))))
    info["nvidia_smi_lines"] = lines
    return info


# Environment variables that can change what the kernels do (TF32 overrides,
# cuBLAS workspace / algorithm choices, visible devices, allocator settings).
RELEVANT_ENV_PREFIXES = ("TORCH", "PYTORCH", "CUBLAS", "CUDNN", "NVIDIA_TF32",
                         "CUDA_VISIBLE", "CUDA_LAUNCH", "CUDA_MODULE", "TRITON")


def environment(device: torch.device, args: argparse.Namespace) -> dict:
    """Everything needed to interpret the numbers later."""
    env = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "command_line": shlex.join([sys.executable] + sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_type": device.type,
        "seed": SEED,
        "do_bench": {"warmup_ms": DO_BENCH_WARMUP_MS, "rep_ms": DO_BENCH_REP_MS,
                     "return_mode": "median"},
        "cold_input_bytes": COLD_INPUT_BYTES,
        "env_vars": {key: value for key, value in os.environ.items()
                     if key.startswith(RELEVANT_ENV_PREFIXES)},
        "args": vars(args),
    }
    if device.type != "cuda":
        env["cpu_smoke"] = True
        return env
    import triton                               # lazy: only on the GPU machine
    props = torch.cuda.get_device_properties(device)
    env.update({
        "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu_name": torch.cuda.get_device_name(device),
        "sm_count": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "compute_capability": f"{props.major}.{props.minor}",
        "matmul_flags": {
            "allow_tf32_default": torch.backends.cuda.matmul.allow_tf32,
            "allow_bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "allow_fp16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        },
    })
    env.update(nvidia_smi_info())
    return env


def write_json_atomic(path: str, data: dict) -> None:
    """json.dump via a temp file and os.replace."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
    os.replace(tmp, path)


def print_summary(rows: list) -> None:
    """Rows per op, and median ms / TFLOP/s / GB/s per op and dtype."""
    import pandas as pd

    df = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    table = df.groupby(["op", "dtype"], sort=True).agg(
        rows=("op", "size"),
        ok=("measured_ms", "count"),
        median_ms=("measured_ms", "median"),
        median_tflops=("tflops", "median"),
        median_gb_s=("gb_s", "median"),
        max_rel_err=("rel_err", "max"),
    )
    print("\nrows per op:")
    print(df.groupby("op").size().to_string())
    print("\nper op / dtype:")
    with pd.option_context("display.width", 120, "display.float_format", "{:.4g}".format):
        print(table.to_string())


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #

def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="output folder (created if missing)")
    parser.add_argument("--only", help="comma list of groups: gemm,attention,memory")
    parser.add_argument("--dtypes", help="comma list of dtypes: bf16,fp16,tf32,fp32,fp8")
    parser.add_argument("--quick", action="store_true",
                        help=f"keep every {QUICK_STRIDE}th row of each op/dtype")
    parser.add_argument("--limit", type=int, help="measure only the first N selected rows")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny rows on the CPU with perf_counter timing (no triton)")
    parser.add_argument("--plan", action="store_true",
                        help="print row counts of the selected plan and exit")
    args = parser.parse_args(argv)
    if not args.plan and not args.out:
        parser.error("--out is required unless --plan is given")
    return args


def comma_set(text: Optional[str]) -> Optional[set]:
    """'a,b' -> {'a', 'b'}; None stays None."""
    return None if text is None else {p.strip() for p in text.split(",") if p.strip()}


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    plan = smoke_plan() if args.cpu_smoke else full_plan()
    rows = select_rows(plan, comma_set(args.only), comma_set(args.dtypes),
                       args.quick, args.limit)
    if args.plan:
        print_plan(rows)
        if len(rows) != len(plan):
            print(f"(full plan: {len(plan)} rows)")
        return 0

    if args.cpu_smoke:
        device, time_ms = torch.device("cpu"), cpu_timer
    else:
        if not torch.cuda.is_available():
            print("error: no CUDA device (use --cpu-smoke to test on the CPU)", file=sys.stderr)
            return 2
        device, time_ms = torch.device("cuda"), gpu_timer()

    os.makedirs(args.out, exist_ok=True)
    env_path = os.path.join(args.out, "environment.json")
    csv_path = os.path.join(args.out, "measured_ops.csv")
    env = environment(device, args)
    write_json_atomic(env_path, env)
    print(f"full plan: {len(full_plan())} rows; measuring {len(rows)} rows on "
          f"{env.get('gpu_name', device.type)}", flush=True)

    counters = run_plan(rows, device, time_ms, csv_path)
    env["run"] = counters
    write_json_atomic(env_path, env)
    print_summary(rows)
    print(f"\nwrote {csv_path} ({counters['rows']} rows, {counters['errors']} errors, "
          f"{counters['warnings']} warnings) in {counters['elapsed_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
