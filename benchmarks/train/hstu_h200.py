"""An HSTU training step of the public generative-recommenders implementation, timed on the local GPU and set
against the workbench's ``hstu-gr`` prediction (issue 17: within 15%).

The step (``hstu_step.py``): item-table gather, the upstream ``STUStack`` of 16 ``STULayer``s with its Triton
kernels (fused layer norm + uvqk addmm + HSTU attention, fused norm-mul-dropout + output addmm; vendored in
``hstu_vendor/``), l2 norm, a sampled softmax over 512 negatives, backward, fused AdamW on the dense params and
row-wise Adagrad on the table. Shapes come from the catalog (``specs/models/hstu-gr.yaml``): d 512, 8 heads,
attention and linear dims 64, 16 layers; the table is cut to ``ITEM_ROWS_H200`` rows (the catalog's 100M fp32 rows,
205 GB, do not fit one H200), and the prediction is made for the same cut model.

Each row runs in its own process (clean peak memory; an OOM or a Triton failure ends only its row, recorded with
its error; a failed Triton row is retried once with the TMA attention path off). A row: warm-up steps (Triton
compilation and autotuning), then ``steps`` steps timed by CUDA events (median), peak allocated / reserved memory,
and one profiled step's CUDA kernel time per kernel. The prediction is ``workbench.predict`` on the same
configuration, bf16, twice: with the ``generative-recommenders`` stack (upstream's kernels and recompute,
``workbench/graph/hstu_gr_kernels.py``), its kernel fractions from ``--kernels``' fit when one ran, and with
``ideal`` (the fused-step bound).

``--kernels`` first times upstream's attention and norm-mul-dropout kernels alone on the fit shapes of
``hstu_kernel_split.json`` (``hstu_kernels.py``, in a child process: it also fills the Triton cache the step rows
then reuse), derives the stack's fractions from them, and writes every row's prediction to ``predictions.json``
before any step row runs: the step rows are the test.

    python benchmarks/train/hstu_h200.py --out DIR [--budget-s 290]       # the H200 sweep (re-run: the rest)
    python benchmarks/train/hstu_h200.py --kernels --out DIR --only ...   # kernel fit, predictions, then the rows
    python benchmarks/train/hstu_h200.py --dry-run --out DIR              # tiny shapes on the CPU, no timing claims
    python benchmarks/train/hstu_h200.py --row '{"label": ...}'           # one row, one JSON line on stdout

Writes under ``--out``: ``rows.jsonl`` (one line per row), ``kernels_<label>.csv``, ``environment.json``,
``REPORT.md``; with ``--kernels`` also ``kernels_fit.jsonl``, ``fitted_constants.json``, ``predictions.json``;
progress on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for path in (REPO, HERE):  # the workbench from this checkout (no pip install on the device), and hstu_*.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
from hstu_kernels import fitted_values  # noqa: E402
from hstu_report import kernel_groups, report  # noqa: E402
from workbench.benchmarking import append_jsonl, environment, measured_labels, read_jsonl  # noqa: E402
from workbench.fileio import write_text  # noqa: E402

ITEM_ROWS_H200 = 10_000_000
"""Item-table rows on the H200: 10M x 512 fp32 = 20.5 GB (+ its row-wise Adagrad state), beside activations."""
TINY = dict(embedding_dim=64, num_layers=2, num_heads=2, attention_dim=32, linear_dim=32, item_table_rows=10_000)
"""The dry run's model (CPU): the catalog model with these fields replaced."""


@dataclass(frozen=True)
class Row:
    label: str
    batch: int
    seq_len: int
    lengths: str = "full"  # full (what the workbench prices) or uniform in [1, seq_len]
    loss: str = "shared"  # shared negatives (one GEMM) or per_position (the research trainer's samplers)
    negatives: int = 512  # workbench.graph.recsys.SAMPLED_SOFTMAX_NEGATIVES
    kernel: str = "triton"  # triton (upstream's training default) or pytorch (its reference ops)
    tma: bool | None = None  # None: upstream's auto-detect (on for sm90); False: the non-TMA attention kernels
    steps: int = 10
    warmup: int = 3
    dry_run: bool = False

    def __post_init__(self):
        for name, allowed in (("lengths", ("full", "uniform")), ("loss", ("shared", "per_position")),
                              ("kernel", ("triton", "pytorch"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"row {self.label!r}: {name}={getattr(self, name)!r}: expected one of {allowed}")
        if min(self.batch, self.seq_len, self.negatives, self.steps) < 1 or self.warmup < 0:
            raise ValueError(f"row {self.label!r}: batch, seq_len, negatives, steps >= 1 and warmup >= 0 expected")


def sweep() -> list[Row]:
    """The catalog default first (64 x 2048), then batch and sequence around it, then what the workbench cannot
    express (jagged lengths, per-position negatives) and upstream's PyTorch reference ops."""
    return [
        Row("default-b64-s2048", 64, 2048),
        Row("b32-s2048", 32, 2048),
        Row("b128-s1024", 128, 1024),
        Row("b16-s4096", 16, 4096),
        Row("jagged-b64-s2048", 64, 2048, lengths="uniform"),
        Row("perpos-neg128-b8-s2048", 8, 2048, loss="per_position", negatives=128),
        Row("pytorch-ops-b4-s2048", 4, 2048, kernel="pytorch"),
    ]


def dry_sweep() -> list[Row]:
    return [Row("dry-b4-s64", 4, 64, negatives=16, kernel="pytorch", steps=2, warmup=1, dry_run=True),
            Row("dry-jagged-perpos", 3, 64, lengths="uniform", loss="per_position", negatives=8, kernel="pytorch",
                steps=2, warmup=1, dry_run=True)]


def workbench_model(row: Row):
    """The catalog ``hstu-gr`` with the table this run trains (and, in a dry run, the tiny sizes)."""
    from workbench.models import get_model

    base = get_model("hstu-gr")
    fields = TINY if row.dry_run else {"item_table_rows": ITEM_ROWS_H200}
    return dataclasses.replace(base, name=f"{base.name}-bench", **fields)


# --- one row (the child process) --------------------------------------------------------------------------------

def run_row(row: Row, kernels_csv: Path | None) -> dict:
    import torch

    import hstu_step
    from generative_recommenders.common import HammerKernel
    from workbench.benchmarking import profile_kernels, time_steps

    device = torch.device("cpu" if row.dry_run else "cuda")
    if row.tma is False:
        from generative_recommenders.ops.triton import triton_hstu_preprocess_and_attention as fused

        fused._should_enable_tma = lambda: False
    torch.manual_seed(0)
    shape = hstu_step.HSTUShape.from_workbench(workbench_model(row))
    kernel = HammerKernel.TRITON if row.kernel == "triton" else HammerKernel.PYTORCH
    model, optimizers = hstu_step.build(shape, row.seq_len, device, kernel)
    generator = torch.Generator().manual_seed(0)
    per_position = row.loss == "per_position"
    batches = [hstu_step.make_batch(shape, row.batch, row.seq_len, row.lengths, row.negatives, per_position,
                                    device, generator) for _ in range(2)]

    def step(i: int):
        return hstu_step.train_step(model, optimizers, batches[i % len(batches)], per_position)

    cuda = device.type == "cuda"
    timing = time_steps(step, warmup=row.warmup, repeats=row.steps, clock="cuda" if cuda else "wall",
                        after_warmup=torch.cuda.reset_peak_memory_stats if cuda else None)
    lengths = [b.lengths.double() for b in batches]
    out = {"step_time_s": timing.median_s, "step_times_s": timing.times_s, "warmup_s": timing.warmup_s,
           "loss_last": float(timing.results[-1]),
           "tokens": sum(int(b.lengths.sum()) for b in batches) / len(batches),  # per step, mean of the batches
           # attention work relative to full histories: sum(len^2) / (B * S^2)
           "attention_work_fraction": float(sum((x * x).sum() for x in lengths) / (len(lengths) * row.batch
                                                                                    * row.seq_len ** 2)),
           **hstu_step.count_params(model)}
    out["tokens_per_s"] = out["tokens"] / out["step_time_s"]
    if cuda:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        kernels = profile_kernels(step, 1)
        out["kernel_us_total"] = sum(k["us"] for k in kernels)
        out["kernels_top"] = kernels[:12]
        out["kernel_groups_s"] = kernel_groups(kernels)
        if kernels_csv is not None:
            lines = ["name,calls,us"] + [f'"{k["name"].replace(chr(34), chr(39))}",{k["calls"]:g},{k["us"]:.1f}'
                                         for k in kernels]
            write_text(kernels_csv, "\n".join(lines) + "\n", overwrite=True)
    return out


# --- the prediction ---------------------------------------------------------------------------------------------

def op_group(name: str) -> str:
    """The measured step's parts a predicted op belongs to."""
    head = name.split(".")[0]
    return {"hstu_attention": "attention", "uvqk": "uvqk GEMM", "output": "output GEMM",
            "sampled_softmax": "loss GEMM", "item_embedding": "embedding", "optimizer": "optimizer"}.get(
        head, "elementwise/norm")


STACK = "generative-recommenders"
"""The stack that runs the measured step (``specs/stacks/generative-recommenders.yaml``)."""


def prediction(row: Row, fitted: dict[str, float] | None = None) -> dict:
    """The row as the ``generative-recommenders`` stack runs it (with ``fitted``: the kernel fit's fractions over
    the H200's constants) and the ``ideal`` bound."""
    from workbench import predict
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for

    args = dict(micro_batch=row.batch, seq_len=row.seq_len, precision="bf16")
    constants = constants_for(get_gpu("h200")).with_values(fitted, "fitted") if fitted else None
    p = predict(workbench_model(row), "h200", stack=STACK, constants=constants, **args)
    bound = predict(workbench_model(row), "h200", stack="ideal", **args)
    groups: dict[str, float] = {}
    for o in p.ops:
        groups[op_group(o.op.name)] = groups.get(op_group(o.op.name), 0.0) + o.time_s * o.executions
    mem = p.summary.memory
    return {"predicted_step_s": p.summary.step_time_s, "predicted_stack": p.summary.stack,
            "predicted_with_kernel_fit": bool(fitted), "bound_step_s": bound.summary.step_time_s,
            "priced_as_bound": p.summary.priced_as_bound, "predicted_groups_s": groups,
            "predicted_memory_bytes": mem.params + mem.grads + mem.optimizer + mem.activations + mem.workspace,
            "predicted_notes": list(p.notes)}


def child_env() -> dict[str, str]:
    """Triton's compiled kernels and autotuning timings on disk under the ignored build/ (kept between device calls
    on one machine): the kernel fit compiles what the step rows then reuse, and a later row skips recompiling and
    re-benchmarking what an earlier one tuned."""
    env = dict(os.environ)
    env.setdefault("TRITON_CACHE_DIR", str(REPO / "build" / "hstu_triton_cache"))
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    return env


def kernel_fit(out: Path, budget_s: float) -> dict:
    """``hstu_kernels.py`` in a child process (its own CUDA context, capped at ``budget_s``): the fitted constants,
    or ``{"error": ...}``."""
    cmd = [sys.executable, str(HERE / "hstu_kernels.py"), "--out", str(out), "--budget-s", str(budget_s - 15)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s, env=child_env())
    except subprocess.TimeoutExpired:
        return {"error": f"kernel fit timed out after {budget_s:.0f} s"}
    sys.stderr.write(done.stderr[-4000:])
    path = out / "fitted_constants.json"
    if not path.is_file():
        return {"error": f"kernel fit exit {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads(path.read_text())


# --- the sweep (the parent process) -----------------------------------------------------------------------------

def run_child(row: Row, out: Path, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--row", json.dumps(asdict(row)), "--kernels-csv",
           str(out / f"kernels_{row.label}.csv")]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env())
    except subprocess.TimeoutExpired as exc:
        tail = exc.stderr or b""
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"error": f"timed out after {timeout_s:.0f} s", "stderr_tail": tail[-3000:]}
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}", "stderr_tail": done.stderr[-3000:]}
    return json.loads(lines[-1])


def main_sweep(rows: list[Row], out: Path, budget_s: float, fresh: bool = False, kernels_s: float = 0.0
               ) -> list[dict]:
    """Run ``rows`` not yet measured in ``out/rows.jsonl`` (all of them with ``fresh``), appending a line per row;
    REPORT.md covers every row of the file (its last line per label), so a re-run finishes a cut-short sweep.
    ``kernels_s`` > 0: first the kernel fit (at most that long), then every row's prediction with its fractions
    into ``predictions.json``, before any row runs; a re-run reads the fit already there."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "rows.jsonl"
    if fresh and jsonl.exists():
        jsonl.unlink()
    done = measured_labels(jsonl)
    write_text(out / "environment.json", json.dumps(environment(), indent=2) + "\n", overwrite=True)
    began = time.perf_counter()
    fitted: dict[str, float] | None = None
    fit_path = out / "fitted_constants.json"
    if kernels_s > 0 and not rows[0].dry_run:
        fit = json.loads(fit_path.read_text()) if fit_path.is_file() and not fresh else kernel_fit(out, kernels_s)
        print(f"[hstu] kernel fit: {json.dumps(fit.get('constants') or fit)[:1500]}", file=sys.stderr, flush=True)
        fitted = fitted_values(fit) or None
    predicted = {}
    for row in rows:
        try:
            predicted[row.label] = prediction(row, fitted)
        except Exception as exc:  # noqa: BLE001 -- a prediction error is recorded with the row
            predicted[row.label] = {"prediction_error": f"{type(exc).__name__}: {exc}"}
    if kernels_s > 0:
        write_text(out / "predictions.json", json.dumps({"made_before_the_step_rows_ran": True, "fitted": fitted,
                                                         "rows": predicted}, indent=2) + "\n", overwrite=True)
        print("[hstu] predictions (before any step row): " + ", ".join(
            f"{k} {v.get('predicted_step_s', float('nan')) * 1e3:.1f} ms" for k, v in predicted.items()),
            file=sys.stderr, flush=True)
    queue = [r for r in rows if r.label not in done]
    if done:
        print(f"[hstu] already measured in {jsonl}: {', '.join(sorted(done))}", file=sys.stderr, flush=True)
    while queue:
        row = queue.pop(0)
        left = budget_s - (time.perf_counter() - began)
        record = {"label": row.label, "row": asdict(row)}
        base = row.label.removesuffix("-notma")
        record.update(predicted.get(base) or prediction(row, fitted))
        if left < 20:
            record["error"] = f"skipped: {left:.0f} s of the budget left"
        else:
            print(f"[hstu] {row.label}: running ({left:.0f} s left)", file=sys.stderr, flush=True)
            record.update(run_child(row, out, left - 5))
            crashed = record.get("error", "").startswith("exit")  # not a timeout: worth one try without TMA
            if crashed and row.kernel == "triton" and row.tma is None and not row.dry_run:
                queue.insert(0, dataclasses.replace(row, label=row.label + "-notma", tma=False))
        if "step_time_s" in record and "predicted_step_s" in record:
            record["error_vs_prediction"] = record["predicted_step_s"] / record["step_time_s"] - 1
            record["error_vs_bound"] = record["bound_step_s"] / record["step_time_s"] - 1
        status = record.get("error") or (f"{record['step_time_s'] * 1e3:.2f} ms measured, "
                                         f"{record.get('predicted_step_s', float('nan')) * 1e3:.2f} ms predicted")
        print(f"[hstu] {row.label}: {status}", file=sys.stderr, flush=True)
        append_jsonl(jsonl, record)
    latest = {r["label"]: r for r in read_jsonl(jsonl)}  # the last line per label
    results = list(latest.values())
    write_text(out / "REPORT.md", report(results, rows[0].dry_run), overwrite=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="results folder (rows.jsonl, REPORT.md, kernels_*.csv)")
    parser.add_argument("--budget-s", type=float, default=290.0, help="wall-clock cap of the whole sweep")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (tests the script)")
    parser.add_argument("--fresh", action="store_true", help="start over: drop the rows already in rows.jsonl")
    parser.add_argument("--only", help="comma-separated row labels to run (default: the whole sweep)")
    parser.add_argument("--kernels", action="store_true",
                        help="first the kernel fit (hstu_kernels.py), then predictions.json, then the rows")
    parser.add_argument("--kernels-budget-s", type=float, default=100.0, help="the kernel fit's share of --budget-s")
    parser.add_argument("--row", help="run one row (JSON of Row) here and print its result as one JSON line")
    parser.add_argument("--kernels-csv", type=Path, help="with --row: write the profiled kernels there")
    args = parser.parse_args(argv)
    if args.row:
        print(json.dumps(run_row(Row(**json.loads(args.row)), args.kernels_csv)))
        return 0
    if args.out is None:
        parser.error("--out DIR is required (or --row)")
    rows = dry_sweep() if args.dry_run else sweep()
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {r.label for r in rows}
        if unknown:
            parser.error(f"--only {','.join(sorted(unknown))}: unknown; rows are {', '.join(r.label for r in rows)}")
        rows = [r for r in rows if r.label in wanted]
    results = main_sweep(rows, args.out, args.budget_s, args.fresh, args.kernels_budget_s if args.kernels else 0.0)
    return 0 if any("step_time_s" in r for r in results) else 1

if __name__ == "__main__":
    sys.exit(main())
