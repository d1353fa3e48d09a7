"""Operator rows in CSV form (the ``predict-ops`` / ``calibrate`` format) and their predicted times.

Row format (other columns pass through unchanged):

- ``op=gemm``: ``m,n,k,dtype`` with dtype in bf16, fp16, tf32, fp32, fp8. C = A @ B, A m x k row-major, as
  torch.matmul; fp8 as torch._scaled_mm with bf16 output.
- ``op=attention``: ``batch,seq,heads_q,heads_kv,head_dim,causal,dtype,pass`` (causal true/false, pass fwd or
  fwd_bwd), as torch scaled_dot_product_attention.
- ``op=copy|add|gelu|sum|layernorm|rmsnorm|softmax``: ``rows,cols,dtype`` (norms and softmax over the last
  dimension; sum reduces every element to one).
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Iterable

from workbench.errors import WorkbenchError
from workbench.graph.ops import ROW_OP_TRAFFIC, AttentionShape, Op, attention, gemm, rows_op
from workbench.hardware import GPU
from workbench.perf import op_time
from workbench.perf.efficiency import Constants
from workbench.precision import UnsupportedPrecisionError, resolve_precision

GEMM_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")
ATTENTION_DTYPES = ("bf16", "fp16", "fp32")
ROW_DTYPES = ("bf16", "fp16", "fp32")
ROW_OPS = ("gemm", "attention", *ROW_OP_TRAFFIC)
MAX_DIM = 1 << 40
"""Largest size a row may give one dimension: past any tensor a GPU holds, short of float overflow in FLOP counts."""


class RowError(WorkbenchError):
    """A CSV row that cannot be predicted; names the row (1-based, header excluded) and the column."""

    def __init__(self, row: int, column: str, value: object, expected: str):
        self.row, self.column = row, column
        super().__init__(f"row {row}, column {column!r}: got {value!r}, expected {expected}")


def _int(row: dict, index: int, column: str) -> int:
    value = (row.get(column) or "").strip()
    try:
        number = int(value)
    except ValueError:
        raise RowError(index, column, value[:40], "a positive integer") from None
    if not 1 <= number <= MAX_DIM:
        raise RowError(index, column, value[:40], f"a positive integer up to 2^40 = {MAX_DIM:,}")
    return number


def _choice(row: dict, index: int, column: str, choices: Iterable[str]) -> str:
    value = (row.get(column) or "").strip().lower()
    choices = tuple(choices)
    if value not in choices:
        raise RowError(index, column, row.get(column), f"one of {', '.join(choices)}")
    return value


def _plain(value: str) -> str:
    """'8192.0' -> '8192' (pandas writes integer columns with gaps as floats), 'True' -> 'true'."""
    if value.endswith(".0") and value[:-2].isdigit():
        return value[:-2]
    return value.lower() if value in ("True", "False") else value


def row_to_op(row: dict, index: int, gpu: GPU | None = None) -> Op:
    """The op a CSV row describes; ``gpu`` (optional) checks that it runs the row's dtype."""
    kind = _choice(row, index, "op", ROW_OPS)
    if kind == "gemm":
        dtype = _choice(row, index, "dtype", GEMM_DTYPES)
        op = gemm(f"row{index}", _int(row, index, "m"), _int(row, index, "n"), _int(row, index, "k"), dtype)
    elif kind == "attention":
        dtype = _choice(row, index, "dtype", ATTENTION_DTYPES)
        causal = _choice(row, index, "causal", ("true", "false", "1", "0")) in ("true", "1")
        pass_ = _choice(row, index, "pass", ("fwd", "fwd_bwd"))
        heads_q, heads_kv = _int(row, index, "heads_q"), _int(row, index, "heads_kv")
        if heads_q % heads_kv:
            raise RowError(index, "heads_kv", heads_kv, f"a divisor of heads_q={heads_q}")
        shape = AttentionShape(_int(row, index, "batch"), _int(row, index, "seq"), heads_q, heads_kv,
                               _int(row, index, "head_dim"), causal, pass_)
        op = attention(f"row{index}", shape, dtype, phase="fwd")
    else:
        dtype = _choice(row, index, "dtype", ROW_DTYPES)
        op = rows_op(kind, _int(row, index, "rows"), _int(row, index, "cols"), dtype, name=f"row{index}")
    if gpu is not None:
        try:
            resolve_precision(gpu, op.dtype)
        except UnsupportedPrecisionError as exc:
            raise RowError(index, "dtype", op.dtype, f"a precision {gpu.name} runs ({exc})") from None
        capacity = gpu.hbm_capacity_gb.value * 1e9
        if op.bytes > capacity:  # its operands and result live in HBM at once: it cannot run on one GPU
            raise RowError(index, "shape", op.describe_shape(), f"operands that fit {gpu.name}'s "
                           f"{gpu.hbm_capacity_gb.value:g} GB of HBM (these are {op.bytes / 1e9:,.1f} GB)")
    return op


def predict_row_ms(op: Op, gpu: GPU, constants: Constants) -> float:
    return op_time(op, gpu, constants).time_s * 1e3


def read_rows(text: str) -> tuple[list[str], list[dict]]:
    """Parse CSV text into (header, rows); a missing ``op`` column is an error.

    A ``workbench bench`` results CSV (columns ``row_op``, ``row_m``, ..., ``baseline_ms``) is read as the rows of
    its vendor baselines, with ``measured_ms`` = ``baseline_ms``: what the model predicts is the vendor library.
    Its cases that are not predict-ops ops (fused kernels, fwd+bwd passes of norms) are left out."""
    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff")))  # the byte-order mark spreadsheets write
    header = list(reader.fieldnames or [])
    if "row_op" in header and "baseline_ms" in header:
        rows = []
        for row in reader:
            converted = {k[4:]: _plain(v) for k, v in row.items() if k.startswith("row_") and v not in ("", None)}
            if converted.get("op") in ROW_OPS and row.get("baseline_ms"):
                converted["measured_ms"] = row["baseline_ms"]
                rows.append(converted)
        return ["op", "m", "n", "k", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "pass", "rows",
                "cols", "dtype", "measured_ms"], rows
    if "op" not in header:
        found = ", ".join(header) or "none"
        raise WorkbenchError(f"the CSV needs an 'op' column (found columns: {found[:300]})")
    return header, list(reader)


def predict_rows(text: str, gpu: GPU, constants: Constants) -> str:
    """The CSV ``text`` with a ``predicted_ms`` column added (replaced if present)."""
    header, rows = read_rows(text)
    out = io.StringIO()
    columns = [c for c in header if c != "predicted_ms"] + ["predicted_ms"]
    writer = csv.DictWriter(out, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for index, row in enumerate(rows, start=1):
        row = dict(row)
        row["predicted_ms"] = f"{predict_row_ms(row_to_op(row, index, gpu), gpu, constants):.6g}"
        writer.writerow(row)
    return out.getvalue()


def op_class(row: dict) -> str:
    """The class an evaluation reports a row under: gemm.<dtype>, attention.<pass>, or memory."""
    kind = (row.get("op") or "").strip().lower()
    if kind == "gemm":
        return f"gemm.{row.get('dtype', '').strip().lower()}"
    if kind == "attention":
        return f"attention.{row.get('pass', '').strip().lower()}"
    return "memory"


ROW_KEY = ("op", "m", "n", "k", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "pass", "rows", "cols",
           "dtype")
"""The columns that name a measured row's operator: rows of two runs with equal values are the same measurement."""


def merge_repeats(rows: list[dict], repeats: list[list[dict]]) -> list[dict]:
    """``rows`` with each ``measured_ms`` replaced by the median over the runs that measured that row (the rows
    themselves and each run in ``repeats``); rows no repeat measured keep their value."""
    runs: dict[tuple, list[float]] = defaultdict(list)
    for run in repeats:
        for row in run:
            if (row.get("measured_ms") or "").strip():
                runs[tuple(row.get(c, "") for c in ROW_KEY)].append(float(row["measured_ms"]))
    merged = []
    for row in rows:
        others = runs.get(tuple(row.get(c, "") for c in ROW_KEY))
        if others:
            row = {**row, "measured_ms": f"{statistics.median([float(row['measured_ms']), *others]):.6g}"}
        merged.append(row)
    return merged
