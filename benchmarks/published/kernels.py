"""The per-kernel table (``kernel_throughput.csv``) predicted through ``predict-ops``: one operator row per published
kernel result, priced with spec constants only, compared in the row's own unit and FLOP convention.

Each row becomes a ``predict-ops`` row (``workbench.rows``: ``op=gemm`` m/n/k/dtype, or ``op=attention``
batch/seq/heads_q/heads_kv/head_dim/causal/pass/dtype), priced by ``workbench.rows.predict_row_ms`` on the catalog
GPU with ``constants_for(gpu, calibrated=False)``. Attention rows carry the SDPA backend the row names where the
model has fractions for it (``workbench.perf.attention.SDPA_BACKENDS``); cuDNN, AITER and HipKittens run at the
generic fractions. The CSV format has no backward-only pass: a backward row is priced as its ``fwd_bwd`` row minus
its ``fwd`` row. Predicted TFLOP/s = the FLOPs the *source* counts (its notes: 2mnk for GEMMs; 4 B S^2 Hq D for
attention forward, halved when causal, x2.5 for backward, x3.5 for forward + backward) / the predicted time.
Nothing is fitted. Error = predicted / published - 1.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.fileio import read_csv_text, read_text

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT.parent / "shared" / "reference" / "published" / "kernel_throughput.csv"
EFFICIENCY_SPECS = ROOT / "specs" / "efficiency.yaml"
"""Spec constants whose ``source`` names a row of this table: those rows are in-sample (flagged ``cited``)."""

GPUS: dict[str, str] = {"H100": "h100-sxm", "H200": "h200-sxm", "B200": "b200", "B300": "b300", "GB200": "gb200",
                        "MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x"}
"""The table's GPU column -> catalog name (the H100 rows are SXM5 parts: the FA3 paper and Bekman's table say so)."""

# op text -> (kind, pass, SDPA backend or "" for the generic fractions, how the report names it). Exact texts: a new
# one is an error naming it, never a guess.
OPS: dict[str, tuple[str, str, str, str]] = {
    "gemm (hipBLASLt, NN)": ("gemm", "", "", "gemm hipBLASLt"),
    "torch.matmul (best shape from mamf-finder brute-force)": ("gemm", "", "", "gemm MAMF"),
    "torch.matmul (best shape, older run)": ("gemm", "", "", "gemm MAMF"),
    "torch._scaled_mm (per-tensor scale)": ("gemm", "", "", "gemm cuBLAS"),
    "gemm (torch.matmul -> hipBLASLt)": ("gemm", "", "", "gemm hipBLASLt"),
    "gemm (hipBLASLt)": ("gemm", "", "", "gemm hipBLASLt"),
    "gemm (AITER)": ("gemm", "", "", "gemm AITER"),
    "gemm (HipKittens kernel)": ("gemm", "", "", "gemm HipKittens"),
    "flash attention fwd (AITER aiter.flash_attn_func)": ("attention", "fwd", "", "attn fwd AITER"),
    "flash attention fwd (HipKittens kernel)": ("attention", "fwd", "", "attn fwd HipKittens"),
    "flash attention bwd (AITER aiter.flash_attn_func)": ("attention", "bwd", "", "attn bwd AITER"),
    "flash attention bwd (HipKittens kernel)": ("attention", "bwd", "", "attn bwd HipKittens"),
    "attention fwd (FA3)": ("attention", "fwd", "flash-attn", "attn fwd FA3"),
    "attention fwd (FlashAttention-3)": ("attention", "fwd", "flash-attn", "attn fwd FA3"),
    "attention fwd FP8 (FlashAttention-3)": ("attention", "fwd", "flash-attn", "attn fwd FA3"),
    "attention fwd (flash_v3 via tritonbench)": ("attention", "fwd", "flash-attn", "attn fwd FA3"),
    "attention fwd (FlashAttention-4)": ("attention", "fwd", "flash-attn", "attn fwd FA4"),
    "attention fwd (cuDNN)": ("attention", "fwd", "", "attn fwd cuDNN"),
    "attention fwd (FA2)": ("attention", "fwd", "flash2", "attn fwd FA2"),
    "attention bwd (FlashAttention-3)": ("attention", "bwd", "flash-attn", "attn bwd FA3"),
    "attention bwd (cuDNN)": ("attention", "bwd", "", "attn bwd cuDNN"),
    "attention fwd+bwd in-step (FA3 (flash-attn-3 3.0.0))": ("attention", "fwd_bwd", "flash-attn", "attn fwd+bwd FA3"),
    "attention fwd+bwd in-step (FA4 (flash-attn-4 4.0.0b22))": ("attention", "fwd_bwd", "flash-attn", "attn fwd+bwd FA4"),
}
PASS_FLOPS = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
"""The source's FLOPs of a pass in forward units (HipKittens' notes: 'x2.5 for bwd'; the FA papers count alike)."""


class NotExpressible(Exception):
    """A kernel row the operator model cannot price; the message is the reason the report prints."""


@dataclass(frozen=True)
class KernelResult:
    """One row of the kernel table: what was published, what ``predict-ops`` gives in the row's unit, or why not."""

    id: str
    gpu: str
    """The table's GPU column."""
    catalog_gpu: str
    op_kind: str
    """The report's op group (kind, pass, library), e.g. 'attn fwd FA3'."""
    backend: str
    """The SDPA backend priced (empty: the generic fractions; GEMMs have none)."""
    shape: str
    dtype: str
    confidence: str
    published_tflops: float | None
    predicted_tflops: float | None = None
    predicted_ms: float | None = None
    cited: bool = False
    """A spec constant names this row as its source: in-sample, not a test of the model."""
    reason: str = ""

    @property
    def error(self) -> float | None:
        if self.predicted_tflops is None or not self.published_tflops:
            return None
        return self.predicted_tflops / self.published_tflops - 1


def load_table(path: Path = TABLE) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_csv_text(path))))


def _dtype(text: str) -> str:
    """'fp8 (e4m3fnuz)' -> fp8, 'bf16/fp16' -> bf16 (one peak for both)."""
    base = text.split("(")[0].strip().lower()
    return "bf16" if base == "bf16/fp16" else base


def _causal(text: str) -> str:
    """'true (inferred)' -> 'true'; an unstated flag is not expressible."""
    word = text.split("(")[0].strip().lower()
    if word not in ("true", "false"):
        raise NotExpressible(f"causal flag not given ({text!r})")
    return word


def _heads(text: str) -> tuple[str, str]:
    """'16' -> (16, 16); '64q/8kv' -> (64, 8)."""
    grouped = re.fullmatch(r"(\d+)q/(\d+)kv", text.strip())
    if grouped:
        return grouped.group(1), grouped.group(2)
    if not text.strip().isdigit():
        raise NotExpressible(f"heads not given ({text!r})")
    return text.strip(), text.strip()


def operator_row(row: dict[str, str]) -> tuple[dict[str, str], str, str]:
    """(the ``predict-ops`` row, pass, SDPA backend) for one kernel row, or ``NotExpressible``."""
    kind, pass_, backend, _ = OPS[row["op"]]
    dtype = _dtype(row["dtype"])
    if kind == "gemm":
        if (row.get("batch") or "1") != "1":
            raise NotExpressible(f"batched GEMM (batch={row['batch']})")
        return {"op": "gemm", "m": row["m"], "n": row["n"], "k": row["k"], "dtype": dtype}, "", ""
    if not row.get("seq") or not row.get("head_dim") or not row.get("batch"):
        raise NotExpressible("attention shape not given (batch, seq or head_dim missing)")
    heads_q, heads_kv = _heads(row["heads"])
    return ({"op": "attention", "batch": row["batch"], "seq": row["seq"], "heads_q": heads_q, "heads_kv": heads_kv,
             "head_dim": row["head_dim"], "causal": _causal(row["causal"]), "dtype": dtype}, pass_, backend)


def source_tflop(op_row: dict[str, str], pass_: str) -> float:
    """The FLOPs (in units of 1e12) the source divides by its time: 2mnk, or 4 B S^2 Hq D (/2 causal) per pass."""
    if op_row["op"] == "gemm":
        return 2 * int(op_row["m"]) * int(op_row["n"]) * int(op_row["k"]) / 1e12
    fwd = 4 * int(op_row["batch"]) * int(op_row["seq"]) ** 2 * int(op_row["heads_q"]) * int(op_row["head_dim"])
    if op_row["causal"] == "true":
        fwd /= 2
    return fwd * PASS_FLOPS[pass_] / 1e12


def predicted_ms(op_row: dict[str, str], pass_: str, backend: str, gpu, constants, index: int) -> float:
    """``predict-ops``' time of the row; backward-only = its fwd_bwd row minus its fwd row."""
    from workbench.rows import predict_row_ms, row_to_op

    def price(passes: str) -> float:
        op = row_to_op({**op_row, "pass": passes} if op_row["op"] == "attention" else op_row, index, gpu)
        if backend:
            op = dataclasses.replace(op, extra={"sdpa_backend": backend})
        return predict_row_ms(op, gpu, constants)

    if op_row["op"] == "gemm":
        return price("")
    if pass_ == "bwd":
        return price("fwd_bwd") - price("fwd")
    return price(pass_)


def evaluate_row(row: dict[str, str], index: int, cited_text: str = "") -> KernelResult:
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for

    if row["op"] not in OPS:
        raise WorkbenchError(f"kernel row {row['id']}: op {row['op']!r} is not in benchmarks/published/kernels.py "
                             f"OPS; expected one of {', '.join(sorted(OPS))}")
    _, _, backend, label = OPS[row["op"]]
    catalog = GPUS.get(row["gpu"], "")
    shape = "x".join(row[c] for c in ("m", "n", "k") if row[c]) or "/".join(
        f"{c}={row[c].split(' (')[0]}" for c in ("batch", "seq", "heads", "head_dim", "causal") if row[c])
    unit = row["unit"].split("(")[0].strip()
    published = float(row["value"]) if unit == "TFLOP/s" else None
    base = dict(id=row["id"], gpu=row["gpu"], catalog_gpu=catalog, op_kind=label, backend=backend, shape=shape,
                dtype=row["dtype"], confidence=row["confidence"], published_tflops=published,
                cited=bool(cited_text) and row["id"] in cited_text)
    try:
        if published is None:
            raise NotExpressible(f"unit {row['unit']!r}: expected TFLOP/s")
        if not catalog:
            raise NotExpressible(f"GPU {row['gpu']!r} has no catalog entry mapped ({', '.join(GPUS)})")
        op_row, pass_, backend = operator_row(row)
        gpu = get_gpu(catalog)
        ms = predicted_ms(op_row, pass_, backend, gpu, constants_for(gpu, calibrated=False), index)
    except NotExpressible as e:
        return KernelResult(**base, reason=str(e))
    except WorkbenchError as e:  # a dtype the GPU lacks, a shape past its HBM: the operator model refuses it
        return KernelResult(**base, reason=str(e).splitlines()[0])
    return KernelResult(**base, predicted_ms=ms, predicted_tflops=source_tflop(op_row, pass_) / (ms * 1e-3))


def evaluate(table: Path = TABLE) -> list[KernelResult]:
    cited = read_text(EFFICIENCY_SPECS) if EFFICIENCY_SPECS.exists() else ""
    return [evaluate_row(row, index, cited) for index, row in enumerate(load_table(table), start=1)]


@dataclass(frozen=True)
class KernelScore:
    name: str
    rows: int
    expressed: int
    mape: float | None
    mean_error: float | None
    mape_out_of_sample: float | None
    """MAPE over the expressed rows no spec constant cites."""


def score(name: str, results: list[KernelResult]) -> KernelScore:
    errors = [r.error for r in results if r.error is not None]
    fresh = [abs(r.error) for r in results if r.error is not None and not r.cited]
    if not errors:
        return KernelScore(name, len(results), 0, None, None, None)
    return KernelScore(name, len(results), len(errors), statistics.fmean(abs(e) for e in errors),
                       statistics.fmean(errors), statistics.fmean(fresh) if fresh else None)


def op_group(result: KernelResult) -> str:
    """'attn fwd FA3' -> 'attn fwd', 'gemm cuBLAS' -> 'gemm': the kind and pass without the library."""
    words = result.op_kind.split(" ")
    return words[0] if words[0] == "gemm" else " ".join(words[:2])


def grouped(results: list[KernelResult], key) -> list[KernelScore]:
    names = sorted({key(r) for r in results})
    return [score(n, [r for r in results if key(r) == n]) for n in names]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}" if x < 0 else f"{x:.1%}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"


def render_markdown(results: list[KernelResult]) -> str:
    overall = score("all", results)
    lines = ["## Per-kernel table", "",
             "`../shared/reference/published/kernel_throughput.csv` priced by `predict-ops` "
             "(`benchmarks/published/kernels.py`): spec constants only, no calibration profile; TFLOP/s in each "
             "source's FLOP convention. *cited*: a constant of `specs/efficiency.yaml` names the row as its source "
             "(in-sample); the GEMM fractions also come from Bekman's MAMF rows by value. Error = predicted / "
             "published - 1.", "",
             f"**{overall.expressed} of {overall.rows} rows expressed; MAPE {_pct(overall.mape)} (mean signed "
             f"{_pct(overall.mean_error)}; rows not cited: {_pct(overall.mape_out_of_sample)}).**"]
    for title, key in (("GPU", lambda r: r.gpu), ("op", lambda r: r.op_kind), ("op kind", op_group)):
        lines += ["", f"### By {title}", "", f"| {title} | rows | expressed | MAPE | mean error | MAPE not cited |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {g.name} | {g.rows} | {g.expressed} | {_pct(g.mape)} | {_pct(g.mean_error)} | "
                  f"{_pct(g.mape_out_of_sample)} |" for g in grouped(results, key)]
    lines += ["", "### Rows", "", "| id | GPU | op | backend | shape | dtype | published | predicted | error | flags |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.predicted_tflops is None:
            continue
        flags = ", ".join(f for f, on in (("cited", r.cited), (f"confidence {r.confidence}", r.confidence != "high")) if on)
        lines.append(f"| {r.id} | {r.catalog_gpu} | {r.op_kind} | {r.backend or 'generic'} | {r.shape} | {r.dtype} | "
                     f"{_num(r.published_tflops)} | {_num(r.predicted_tflops)} | {_pct(r.error)} | {flags} |")
    missing = [r for r in results if r.predicted_tflops is None]
    lines += ["", f"### Not expressible ({len(missing)} rows)", "", "| id | GPU | op | reason |", "|---|---|---|---|"]
    lines += [f"| {r.id} | {r.gpu} | {r.op_kind} | {r.reason.replace('|', '/')} |" for r in missing]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("id", "gpu", "catalog_gpu", "op_kind", "backend", "shape", "dtype", "confidence", "published_tflops",
               "predicted_tflops", "predicted_ms", "error", "cited", "reason")


def render_csv(results: list[KernelResult]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in results:
        values = {**dataclasses.asdict(r), "error": r.error}
        writer.writerow(["" if values[c] is None else (f"{values[c]:.6g}" if isinstance(values[c], float) else values[c])
                         for c in CSV_COLUMNS])
    return buf.getvalue()
