"""Cold start (issue 16: "``predict`` for a full Llama 3 405B step stays < 20 ms"): what a fresh process pays for
``import workbench`` and for its first ``predict`` of a 405B step, median of N fresh interpreters per case.

The first predict is timed on its own, after the import: it reads the GPU, model and stack it names (and the
efficiency constants), builds the step's op graph and prices every op for the first time. Its target is 20 ms; the
import's is the core speed target's 0.5 s (``benchmarks/speed/speed.py``). The interpreter's own start (``python -c
pass``) is reported beside them, not in them. One more process per case runs with an audit hook and lists the
YAML/JSON files each phase opened (not timed: the hook slows every event): the import must open none.

The layout is Llama 3's own (Dubey et al. 2024, Table 4): 16,384 GPUs as TP 8 x PP 16 x DP 128, 8,192-token
sequences, 2,048 of them per step, on H200 (by name, and by its alias ``h200``, which reads every GPU file).

    python benchmarks/speed/cold_start.py --out DIR [--repeats 7] [--budget-s 300] [--tree OLD_CHECKOUT]

writes ``DIR/cold_start.jsonl`` (one row per process), ``DIR/environment.json`` and ``DIR/REPORT.md`` (the
table), and prints progress. A failed process is recorded as its row's ``error``; the others still run.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_PREDICT_S = 0.020
TARGET_IMPORT_S = 0.5
MODEL = "llama3-405b"
LAYOUT = {"micro_batch": 1, "seq_len": 8192, "global_batch": 2048, "dp": 128, "tp": 8, "pp": 16}
"""Llama 3 405B's pre-training layout at 8K context (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4)."""
CASES: tuple[tuple[str, str, str], ...] = (
    ("torchtitan", "h200-sxm", "the default stack"),
    ("ideal", "h200-sxm", "the fused-step bound"),
    ("torchtitan", "h200", "a GPU alias: every GPU file's aliases are read"),
)

CHILD = r"""
import json, sys, time
case = json.loads(sys.argv[1])
opened = {"import": [], "first_predict": []}
phase = ["import"]
if case["audit"]:
    def audit(event, args):
        if event == "open" and phase[0] in opened and str(args[0]).endswith((".yaml", ".yml", ".json")):
            opened[phase[0]].append(str(args[0]))
    sys.addaudithook(audit)
c0, t0 = time.process_time(), time.perf_counter()
import workbench
from workbench.config import Parallelism, TrainingConfig
c1, t1 = time.process_time(), time.perf_counter()
phase[0] = "first_predict"
layout = case["layout"]
config = TrainingConfig(micro_batch=layout["micro_batch"], seq_len=layout["seq_len"],
                        global_batch=layout["global_batch"],
                        parallelism=Parallelism(dp=layout["dp"], tp=layout["tp"], pp=layout["pp"]))
first = workbench.predict(case["model"], case["gpu"], config, stack=case["stack"])
c2, t2 = time.process_time(), time.perf_counter()
phase[0] = "done"
workbench.predict(case["model"], case["gpu"], config, stack=case["stack"])
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_predict_s": t2 - t1, "warm_predict_s": t3 - t2,
                  "import_cpu_s": c1 - c0, "first_predict_cpu_s": c2 - c1,
                  "step_time_s": first.summary.step_time_s, "files": opened}))
"""


def fresh_process(case: dict, tree: Path, timeout_s: float) -> dict:
    """One fresh interpreter importing ``workbench`` from ``tree`` and running ``CHILD`` for ``case``: its
    timings, or ``error``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], capture_output=True, text=True,
                              timeout=timeout_s, env=env, cwd=tree)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-600:]}"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": f"no result line in the output: {done.stdout[-300:]!r}"}


def commit_of(tree: Path) -> str | None:
    """The commit ``tree`` is checked out at (``+dirty`` with uncommitted changes), None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "workbench", "specs"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def bare_start_s(repeats: int) -> float:
    """The median wall time of ``python -c pass``: the interpreter's start, which no workbench change moves."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarize(rows: list[dict]) -> list[dict]:
    """Per case: the medians over its timed rows, and what its audited row opened."""
    out = []
    for stack, gpu, why in CASES:
        mine = [r for r in rows if r["stack"] == stack and r["gpu"] == gpu]
        timed = [r for r in mine if not r["audit"] and "error" not in r]
        audited = next((r for r in mine if r["audit"] and "error" not in r), None)
        summary = {"stack": stack, "gpu": gpu, "why": why, "runs": len(timed),
                   "errors": [r["error"] for r in mine if "error" in r]}
        for key in ("import_s", "first_predict_s", "warm_predict_s", "import_cpu_s", "first_predict_cpu_s"):
            values = [r[key] for r in timed]
            summary[key] = statistics.median(values) if values else None
            summary[f"{key}_range"] = (min(values), max(values)) if values else None
        summary["files"] = audited["files"] if audited else None
        out.append(summary)
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _median_cell(summary: dict, key: str) -> str:
    """``median [min-max]`` in ms."""
    spread = summary[f"{key}_range"]
    return f"{_ms(summary[key])} [{_ms(spread[0])}-{_ms(spread[1])}]" if spread else "-"


def _files_cell(files: dict | None, phase: str) -> str:
    """The files a phase opened: their names when a few, else how many."""
    if files is None:
        return "-"
    names = sorted({Path(f).name for f in files.get(phase, [])})
    return ", ".join(names) if 0 < len(names) <= 6 else str(len(names))


def report(summaries: list[dict], bare_s: float, env: dict, repeats: int) -> str:
    layout = ", ".join(f"{k} {v}" for k, v in LAYOUT.items())
    lines = [
        "# Cold start: `import workbench` and the first `predict` of a Llama 3 405B step",
        "",
        f"Fresh interpreters, median of {repeats} per case [min-max]; `{MODEL}`, {layout}. Python {env['python']} "
        f"on {env['machine']} ({env['cpus']} CPUs), {env['date_utc']}. The interpreter's own start (`python -c "
        f"pass`): {_ms(bare_s)} ms, not included below. Source: `{env['tree']}` at "
        f"{env['commit'] or 'no git commit'}; PyYAML {env.get('pyyaml')}, libyaml {env.get('libyaml')}.",
        "",
        "| stack | GPU | import (ms) | first predict (ms) | target | met | first predict, CPU (ms) | warm predict "
        "(ms) | files the import opened | files the first predict opened |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        first = s["first_predict_s"]
        met = "-" if first is None else ("yes" if first < TARGET_PREDICT_S else "**no**")
        lines.append(f"| {s['stack']} | {s['gpu']} | {_median_cell(s, 'import_s')} | "
                     f"{_median_cell(s, 'first_predict_s')} | < {TARGET_PREDICT_S * 1e3:.0f} | {met} | "
                     f"{_ms(s['first_predict_cpu_s'])} | {_ms(s['warm_predict_s'])} | "
                     f"{_files_cell(s['files'], 'import')} | {_files_cell(s['files'], 'first_predict')} |")
    lines += ["", "Cases: " + "; ".join(f"`{s['stack']}` on `{s['gpu']}`: {s['why']}" for s in summaries) + ".",
              f"Import target: < {TARGET_IMPORT_S * 1e3:.0f} ms (the core speed target). Wall-clock times are judged; "
              "the CPU time of the process (`time.process_time`) is beside them because a shared machine's wall "
              "clock counts other processes' turns."]
    errors = [(s["stack"], s["gpu"], e) for s in summaries for e in s["errors"]]
    if errors:
        lines += ["", "## Errors", ""] + [f"- {stack} / {gpu}: {e}" for stack, gpu, e in errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for cold_start.jsonl, environment.json, REPORT.md")
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per case (>= 5 for the report)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall-clock cap: no new process after it")
    parser.add_argument("--force", action="store_true", help="replace the files of an earlier run in --out")
    parser.add_argument("--tree", default=str(REPO), help="the source tree whose workbench the processes import "
                        "(default: this checkout; an export of an older commit gives the before of a before/after)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from workbench.benchmarking import append_jsonl
    from workbench.fileio import OutputExistsError, check_output, write_text

    out = Path(args.out)
    try:
        for name in ("cold_start.jsonl", "environment.json", "REPORT.md"):
            check_output(out / name, overwrite=args.force)
    except OutputExistsError as exc:
        parser.error(str(exc))  # the earlier run's files stay as they are
    (out / "cold_start.jsonl").unlink(missing_ok=True)
    env = {"python": platform.python_version(), "implementation": platform.python_implementation(),
           "machine": platform.machine(), "cpus": os.cpu_count(), "platform": platform.platform(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": " ".join([Path(sys.executable).name, *sys.argv]), "tree": str(Path(args.tree).resolve()),
           "commit": commit_of(Path(args.tree).resolve())}
    try:
        import yaml

        env["pyyaml"], env["libyaml"] = yaml.__version__, bool(getattr(yaml, "__with_libyaml__", False))
    except ImportError:
        env["pyyaml"] = None
    write_text(out / "environment.json", json.dumps(env, indent=2) + "\n", overwrite=args.force)

    deadline = time.monotonic() + args.budget_s
    bare_s = bare_start_s(5)
    print(f"interpreter start: {bare_s * 1e3:.1f} ms", flush=True)
    tree = Path(args.tree).resolve()
    # a pip install byte-compiles the package; a checkout under PYTHONDONTWRITEBYTECODE=1 never would, and every
    # module a predict imports lazily would then be compiled from source inside the timed first predict
    compiled = compileall.compile_dir(str(tree / "workbench"), quiet=1)
    warmup = fresh_process({"model": MODEL, "gpu": CASES[0][1], "stack": CASES[0][0], "layout": LAYOUT,
                            "audit": False}, tree, max(5.0, deadline - time.monotonic()))
    print(f"bytecode of {tree / 'workbench'} compiled ({'ok' if compiled else 'errors'}); warm-up process (not "
          f"counted): {warmup.get('error', 'ok')}", flush=True)
    rows = []
    for stack, gpu, _ in CASES:
        for index in range(args.repeats + 1):
            if time.monotonic() > deadline:
                print(f"budget of {args.budget_s:.0f} s spent: stopping before {stack}/{gpu} run {index}", flush=True)
                break
            audit = index == args.repeats  # the last run of a case lists the files it opened, untimed
            case = {"model": MODEL, "gpu": gpu, "stack": stack, "layout": LAYOUT, "audit": audit}
            row = {"stack": stack, "gpu": gpu, "audit": audit, "run": index,
                   **fresh_process(case, tree, max(5.0, deadline - time.monotonic()))}
            append_jsonl(out / "cold_start.jsonl", row)
            rows.append(row)
            shown = row.get("error") or (f"import {row['import_s'] * 1e3:.1f} ms, first predict "
                                         f"{row['first_predict_s'] * 1e3:.1f} ms" + (" (audited)" if audit else ""))
            print(f"{stack:>10} {gpu:<9} run {index}: {shown}", flush=True)
    text = report(summarize(rows), bare_s, env, args.repeats)
    write_text(out / "REPORT.md", text, overwrite=args.force)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
