"""Re-predict every committed H200 training-proof run with the current model, against what was measured.

    python benchmarks/train/train_repredict.py                 # job_model_run/: REPREDICT.md, REPREDICT.csv, _classes.csv
    python benchmarks/train/train_repredict.py --out /tmp/r    # elsewhere
    python benchmarks/train/train_repredict.py --run DIR       # another train_proof.py output folder

No GPU: the recipes (``<run>/recipes/``), the measured step times and memory (``<run>/results.csv``) and the
per-class profile (``benchmarks/results/h200/train/profile/<run>_classes.csv``) are committed. Per run: the prediction
recorded when the proof ran ("old", calibrated), the current ``predict_recipe(job=True)`` (spec and calibrated
constants; what the reference job runs: eager or compiled, its loss, FSDP2 copies, fp8 quantization, DLRM's sparse
update, see ``workbench.graph.execution``), the measured step, the errors and whether they are within the
issue #6 target (10%). Per class: the profile's measured ms per step beside the current calibrated prediction.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from workbench.recipe.build import predict_recipe  # noqa: E402
from workbench.recipe.io import load_recipe  # noqa: E402
from workbench.trace import CLASSES, model_op_class  # noqa: E402

TRAIN = REPO / "benchmarks" / "results" / "h200" / "train"
RUN = TRAIN / "job_model_run"
"""The latest proof run (session 4: today's job)."""
TARGET = 0.10
"""Issue #6: predicted step within 10% of measured."""
EAGER_LOSS_NOTE = (
    "The compiled runs of `job_model_run/` were measured before the reference job compiled its chunked loss (commit "
    "a1295e0): their steps include the eager loss's 7-12 kernels per chunk, while the current model prices the "
    "compiled loss (`workbench.graph.execution` `CE_COMPILED_*`), so they read fast by the eager loss's cost. The "
    "eager runs are unaffected.")
"""Said in the report of the default run folder (the model is not tuned to these rows)."""


def op_class(kind: str, name: str, phase: str) -> str:
    """The profile's class of a model op, including the reference job's kinds (``workbench.graph.execution``)."""
    if kind in ("fsdp", "fp8_quantize"):
        return kind
    if kind == "optimizer" and phase != "optimizer":
        return "other"
    return model_op_class(kind, name, phase)


def predicted_classes(prediction) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for p in prediction.ops:
        out[op_class(p.op.kind, p.op.name, p.op.phase)] += p.total_s * 1e3
    for c in prediction.comms:
        out["communication"] += c.exposed_s * 1e3
    return out


def measured_classes(run: str) -> dict[str, float]:
    path = TRAIN / "profile" / f"{run}_classes.csv"
    if not path.exists():
        return {}
    return {r["class"]: float(r["measured_ms"]) for r in csv.DictReader(path.open())}


def repredict(run_dir: Path = RUN) -> tuple[list[dict], list[dict]]:
    """Per run of ``run_dir`` (a ``train_proof.py`` output: ``results.csv`` and ``recipes/``), and per class."""
    runs, classes = [], []
    for row in csv.DictReader((run_dir / "results.csv").open()):
        if row["status"] != "ok":
            continue
        name = row["name"]
        recipe = load_recipe(run_dir / "recipes" / f"{name}.yaml")
        measured = float(row["measured_step_s"])
        spec = predict_recipe(recipe, calibrated=False, job=True)
        cal = predict_recipe(recipe, calibrated=True, job=True)
        old = float(row["predicted_step_s_calibrated"])
        runs.append({
            "run": name, "compile": recipe.compile, "precision": row["precision"],
            "checkpointing": row["checkpointing"], "measured_ms": measured * 1e3,
            "old_calibrated_ms": old * 1e3, "old_spec_ms": float(row["predicted_step_s_spec"]) * 1e3,
            "new_spec_ms": spec.summary.step_time_s * 1e3, "new_calibrated_ms": cal.summary.step_time_s * 1e3,
            "old_error": old / measured - 1, "new_spec_error": spec.summary.step_time_s / measured - 1,
            "new_error": cal.summary.step_time_s / measured - 1,
            "within_10pct_old": abs(old / measured - 1) <= TARGET,
            "within_10pct_new": abs(cal.summary.step_time_s / measured - 1) <= TARGET,
            "predicted_memory_gb": cal.summary.memory.total / 1e9,
            "measured_reserved_gb": float(row["measured_reserved_gb"]),
            "ops": len(cal.ops),
        })
        measured_by_class = measured_classes(name)
        predicted = predicted_classes(cal)
        for cls in (*CLASSES, "idle_gap"):
            m = measured_by_class.get(cls, 0.0)
            p = predicted.get(cls, 0.0)
            if m or p:
                classes.append({"run": name, "class": cls, "measured_ms": m, "predicted_ms": p,
                                "measured_minus_predicted_ms": m - p})
    return runs, classes


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()})


def report(runs: list[dict], classes: list[dict], note: str = "") -> str:
    ok_old = sum(r["within_10pct_old"] for r in runs)
    ok_new = sum(r["within_10pct_new"] for r in runs)
    lines = [
        "# H200 training proof re-predicted with the current model",
        "",
        "`python benchmarks/train/train_repredict.py` (no GPU). Measured: `results.csv` (median timed step). Old: the "
        "calibrated prediction recorded when the proof ran (fused step, `compile` ignored). New: "
        "`predict_recipe(recipe, job=True)` today, which predicts what the reference job runs (`workbench.graph.execution`: "
        "eager blocks unfused, the chunked fp32 loss and final norm outside the compiled blocks, FSDP2's copies on "
        "one GPU, fp8 quantize kernels for all three GEMMs, DLRM's sorted lookups and fused row-wise Adagrad). Error = "
        "predicted / measured - 1.",
        "",
        f"Within 10%: **{ok_old} of {len(runs)} before, {ok_new} of {len(runs)} now** (calibrated).",
        "",
        "What is not independent of these runs: `memory_transpose_efficiency` (fp8's K-major copies) is read off the "
        "fp8 run's own kernel profile, and the choice of which kernels take TensorIterator's non-vectorized path "
        "follows the kernel names in these profiles; `memory_unvectorized_efficiency` (0.6) is a guess; DLRM's "
        "fused-update bandwidth and `dlrm_step_host_idle_us` come from H200 measurements of the DLRM job "
        "(`dlrm_fused_update/`), and its eager pieces were priced after seeing the 16k eager run. No constant was "
        "fitted to a step time. Not modelled: the host idle gap of the other runs.",
        "",
        *([note, ""] if note else []),
        "| run | compile | measured ms | old ms (err) | new spec ms (err) | new calibrated ms (err) | within 10% "
        "| peak memory: measured reserved / predicted GB (err) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        memory_error = r["predicted_memory_gb"] / r["measured_reserved_gb"] - 1
        lines.append(
            f"| {r['run']} | {r['compile']} | {r['measured_ms']:.1f} | {r['old_calibrated_ms']:.1f} "
            f"({r['old_error']:+.1%}) | {r['new_spec_ms']:.1f} ({r['new_spec_error']:+.1%}) | "
            f"{r['new_calibrated_ms']:.1f} ({r['new_error']:+.1%}) | "
            f"{'yes' if r['within_10pct_new'] else 'no'} (was {'yes' if r['within_10pct_old'] else 'no'}) | "
            f"{r['measured_reserved_gb']:.1f} / {r['predicted_memory_gb']:.1f} ({memory_error:+.1%}) |")
    memory_ok = sum(abs(r["predicted_memory_gb"] / r["measured_reserved_gb"] - 1) <= TARGET for r in runs)
    lines += ["", f"Peak memory within 10% of the measured `max_memory_reserved`: **{memory_ok} of {len(runs)}**."]
    lines += ["", "## Per operator class, ms per step: profile (measured) vs the current calibrated prediction", "",
              "Classes as `workbench.trace` assigns kernels; the model's FSDP2 copy-outs and "
              "copies are `copy_cast` (the profile sees them as DtoD memcpys). `idle_gap` (wall - device busy) has "
              "no model term.", ""]
    by_run: dict[str, list[dict]] = defaultdict(list)
    for c in classes:
        by_run[c["run"]].append(c)
    for run, rows in by_run.items():
        lines += [f"### {run}", "", "| class | measured | predicted | measured - predicted |", "|---|---|---|---|"]
        for c in rows:
            lines.append(f"| {c['class']} | {c['measured_ms']:.2f} | {c['predicted_ms']:.2f} | "
                         f"{c['measured_minus_predicted_ms']:+.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=RUN, help="a train_proof.py output folder (results.csv, recipes/)")
    parser.add_argument("--out", type=Path, help="where to write (default: --run)")
    args = parser.parse_args(argv)
    args.out = args.out or args.run
    runs, classes = repredict(args.run)
    args.out.mkdir(parents=True, exist_ok=True)
    _write_csv(args.out / "REPREDICT.csv", runs)
    _write_csv(args.out / "REPREDICT_classes.csv", classes)
    text = report(runs, classes, EAGER_LOSS_NOTE if args.run.resolve() == RUN.resolve() else "")
    (args.out / "REPREDICT.md").write_text(text + "\n")
    print(text.split("## Per operator class")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
