"""Recipe search speed (issue #6: >= 10,000 candidates per second on one CPU core), and its agreement with predict().

Each case searches one model on one GPU type and count with a *fresh* evaluator (cold caches: every op shape is
timed for the first time; median of 5 such runs), then again with the warmed evaluator (a UI re-running a search
after a slider move). The module-level caches of model data (``memory._MEMO``, the kernel ops of
``stack_kernels._K_SPECS``, ``_K_OPS`` and ``_BLOCK_LINEARS``, the ``functools`` kernel-table caches, the op graphs
of ``step._shared_graph`` and ``stacked.shared_memo``) outlive an
evaluator (a fresh one still times every op and sums every graph itself), so only the first of the cold runs finds
them empty for this model: ``first_per_cpu_s`` is that run alone (what a command-line search of a new model
costs), ``cold`` the median of the five (a notebook searching the same model with a new evaluator).
"candidates" counts every configuration evaluated, the ones that do not fit included (memory is checked first, and
the micro-batch climb stops at the first that does not fit); "timed" counts those that fit and got a full step
prediction. Rates are given per wall-clock second and per CPU second of this process (``time.process_time``): on a
shared machine the CPU-time rate is the per-core figure the target speaks of. The agreement column is the largest relative difference of step time against ``predict()`` on every
fifth fitting candidate. ``candidates_sha256`` is the sha256 of every candidate's ``repr`` (its configuration and
every predicted number, floats as their shortest exact repr), the first 16 hex digits: every cold run and the warm
run must give the same one (the script stops otherwise), and a change meant to leave the predictions as they were
must leave it as it was. One process, one thread (the interpreter is single-threaded).

    python benchmarks/speed/search_speed.py        # writes benchmarks/results/search_speed.csv and .md, prints the table
    python benchmarks/speed/search_speed.py --out /tmp/speed   # the same files in another folder
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import platform
import statistics
import time
from pathlib import Path

from workbench.fileio import write_text
from workbench.predict import predict
from workbench.recipe.build import revised_model
from workbench.recipe.search import StepEvaluator, search

RESULTS = Path(__file__).resolve().parents[1] / "results" / "search_speed.csv"
COLD_RUNS = 5
# model, gpu, gpus, global batch (0: no accumulation), precisions[, stack (default: the ideal bound, named: the
# default search prices a transformer as torchtitan runs it since torchtitan became the default stack; its rate is
# STACK_CASES')]
CASES = [
    ("llama3-8b@num_layers=8", "h200-sxm", 1, 0, ("bf16",)),
    ("llama3-8b", "h200-sxm", 8, 0, ("bf16", "fp8")),
    ("llama3-70b", "h100-sxm", 64, 512, ("bf16", "fp8")),
    ("llama3-405b", "b200", 512, 1024, ("bf16",)),
    ("mixtral-8x7b", "mi300x", 16, 0, ("bf16", "fp8")),
    ("dlrm-dcnv2", "mi350x", 8, 0, ("bf16",)),
    ("hstu-gr", "b200", 8, 0, ("bf16",)),
]
STACK_CASES = [  # a named stack: its kernel tables (tp = pp = 1, dense bf16) and the bound beyond them
    ("llama3.2-1b", "h200-sxm", 8, 0, ("bf16",), "torchtitan"),
    ("llama3-8b", "h200-sxm", 8, 0, ("bf16", "fp8"), "torchtitan"),
]


def _model(name: str):
    """A catalog name, or ``name@field=value`` for a revised model (the single-GPU H200 proof's reduced Llama)."""
    base, _, override = name.partition("@")
    if not override:
        return base
    key, value = override.split("=")
    return revised_model(base, {key: int(value)})


def candidates_sha256(result) -> str:
    """The first 16 hex digits of the sha256 of every candidate's ``repr``, in search order."""
    return hashlib.sha256("\n".join(map(repr, result.candidates)).encode()).hexdigest()[:16]


def run_case(name: str, gpu: str, gpus: int, global_batch: int, precisions: tuple[str, ...],
             stack: str = "ideal") -> dict:
    search("gpt2-small", gpu, 1)  # load catalogs and constants outside the timing
    model = _model(name)
    colds, cold_cpus, hashes = [], [], set()
    for _ in range(COLD_RUNS):  # the machine is shared: the median of fresh-evaluator runs
        evaluator = StepEvaluator(model, gpu, stack)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = search(model, gpu, gpus, global_batch=global_batch, precisions=precisions, evaluator=evaluator)
        colds.append(time.perf_counter() - start)
        cold_cpus.append(time.process_time() - start_cpu)
        hashes.add(candidates_sha256(result))
    cold, cold_cpu = statistics.median(colds), statistics.median(cold_cpus)
    warm_runs, start, start_cpu = 20, time.perf_counter(), time.process_time()
    for _ in range(warm_runs):
        warm_result = search(model, gpu, gpus, global_batch=global_batch, precisions=precisions, evaluator=evaluator)
    warm = (time.perf_counter() - start) / warm_runs
    warm_cpu = (time.process_time() - start_cpu) / warm_runs
    hashes.add(candidates_sha256(warm_result))
    if len(hashes) != 1:
        raise SystemExit(f"{name} on {gpu} ({stack}): cold and warm searches gave different candidates: {hashes}")
    fitting = [c for c in result.candidates if c.fits]
    worst = max((abs(predict(model, gpu, c.config, stack=stack, compile=c.compile)
                     .summary.step_time_s / c.step_time_s - 1) for c in fitting[::5]), default=0.0)
    n = len(result.candidates)
    return {"model": name, "stack": stack, "gpu": gpu, "gpus": gpus, "global_batch": global_batch, "precisions": "+".join(precisions),
            "candidates": n, "timed": len(fitting), "cold_s": round(cold, 4), "cold_per_s": round(n / cold),
            "cold_cpu_s": round(cold_cpu, 4), "cold_per_cpu_s": round(n / cold_cpu),
            "first_cpu_s": round(cold_cpus[0], 4), "first_per_cpu_s": round(n / cold_cpus[0]),
            "warm_s": round(warm, 4), "warm_per_s": round(n / warm), "warm_cpu_s": round(warm_cpu, 4),
            "warm_per_cpu_s": round(n / warm_cpu), "max_rel_diff_vs_predict": f"{worst:.1e}",
            "best_tokens_per_s": round(result.best.tokens_per_s) if fitting else 0,
            "candidates_sha256": hashes.pop()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS.parent,
                        help="folder for search_speed.csv and .md (default: benchmarks/results)")
    out = parser.parse_args().out / RESULTS.name
    load_before = os.getloadavg()[0]
    rows = [run_case(*case) for case in CASES]
    stack_rows = [run_case(*case) for case in STACK_CASES]
    total = {"model": "ALL", "stack": "ideal", "gpu": "", "gpus": "", "global_batch": "", "precisions": "",
             "candidates": sum(r["candidates"] for r in rows), "timed": sum(r["timed"] for r in rows),
             **{key: round(sum(r[key] for r in rows), 4)
                for key in ("cold_s", "cold_cpu_s", "first_cpu_s", "warm_s", "warm_cpu_s")},
             "max_rel_diff_vs_predict": f"{max(float(r['max_rel_diff_vs_predict']) for r in rows):.1e}",
             "best_tokens_per_s": "", "candidates_sha256": ""}
    for rate, seconds in (("cold_per_s", "cold_s"), ("cold_per_cpu_s", "cold_cpu_s"), ("first_per_cpu_s", "first_cpu_s"),
                          ("warm_per_s", "warm_s"), ("warm_per_cpu_s", "warm_cpu_s")):
        total[rate] = round(total["candidates"] / total[seconds])
    rows.append(total)
    rows += stack_rows  # reported apart: a named stack's candidates inside its tables build the stack's own graph
    header = (f"benchmarks/speed/search_speed.py on {platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}, one core; load average {load_before:.1f} before / "
              f"{os.getloadavg()[0]:.1f} after on {os.cpu_count()} cores (shared machine); "
              "target >= 10,000 candidates/s")
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(out, f"# {header}\n{table.getvalue()}", overwrite=True)
    shown = ("model", "stack", "gpu", "gpus", "precisions", "candidates", "timed", "first_per_cpu_s", "cold_per_cpu_s",
             "warm_per_cpu_s",
             "max_rel_diff_vs_predict", "candidates_sha256")
    lines = [f"# Recipe search speed\n\n{header}. First: the first search of the model in this process (its "
             f"module-level caches empty); cold: a fresh evaluator, median of {COLD_RUNS} runs (the first included); "
             "warm: the same evaluator searching again. Candidates per CPU second of this process.\n",
             "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(str(r[c]) for c in shown) + " |" for r in rows]
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n", overwrite=True)
    columns = list(rows[0])
    print("  ".join(columns))
    for r in rows:
        print("  ".join(str(r[c]) for c in columns))


if __name__ == "__main__":
    main()
