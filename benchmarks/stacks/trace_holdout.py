"""The held-out configurations of the closed loop from a trace (`trace_holdout.json`), measured on the local GPU the
way the committed rows were: plain-loop rows by `plain_pytorch.py --row` (its own process each; median of 10 steps,
each timed between two `cuda.synchronize()`, after 3 warm-up steps), torchtitan rows by torchtitan itself through
`torchtitan_runs.py` (its logged tokens per second over the steps after the warm-up). `trace_loop.py` predicts them.

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # torchtitan rows only
    PYTHONPATH=/tmp/site python3 benchmarks/stacks/trace_holdout.py --out DIR [--budget-s 230]

Writes DIR/trace_holdout.jsonl (one line per configuration: `"kind": "plain"` or `"torchtitan"`, the measured row or
its error or `"skipped"`), DIR/environment.json and each torchtitan run's TOML and log (DIR/NAME/); torchtitan's
data and outputs go to a temporary folder. A failed row is recorded and the next
one runs; a row that would start with too little of the budget left is skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import plain_pytorch  # noqa: E402
import torchtitan_runs  # noqa: E402

CONFIGS = HERE / "trace_holdout.json"
PLAIN_MIN_S, TORCHTITAN_MIN_S = 25, 50
"""A row does not start with less than this left of the budget (a policy: the longest committed rows' wall time)."""


def plain_row(config: dict, left_s: float) -> dict:
    row = plain_pytorch.Row(**config)
    try:
        proc = subprocess.run([sys.executable, str(HERE / "plain_pytorch.py"), "--row", json.dumps(asdict(row))],
                              capture_output=True, text=True, timeout=left_s)
    except subprocess.TimeoutExpired:
        return {**asdict(row), "error": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    return {**asdict(row), "error": (proc.stderr or proc.stdout)[-600:]}


def torchtitan_row(config: dict, out: Path, work: Path, left_s: float) -> dict:
    run = torchtitan_runs.Run(**config)
    folder = out / run.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(torchtitan_runs.toml(run, HERE / "torchtitan_assets", trace=False))
    log, outcome = torchtitan_runs.train(folder / "run.toml", work, left_s)
    (folder / "log.txt").write_text(log)
    return {**asdict(run), **torchtitan_runs.parse(log, run), **outcome}


def brief(record: dict) -> str:
    if "step_time_s" in record:
        return f"{record['step_time_s'] * 1e3:8.1f} ms"
    return str(record.get("skipped") or record.get("error", "no step time")).strip().splitlines()[-1][:100]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="results folder (required unless --list)")
    p.add_argument("--budget-s", type=float, default=230)
    p.add_argument("--list", action="store_true", help="print the configurations in run order")
    args = p.parse_args()
    configs = json.loads(CONFIGS.read_text())
    order = [(kind, configs[kind][int(i)]) for kind, i in (item.split(":") for item in configs["order"])]
    if args.list:
        for kind, config in order:
            print(kind, json.dumps(config))
        return
    if not args.out:
        p.error("--out DIR is required")
    deadline = time.time() + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "environment.json").write_text(json.dumps({**plain_pytorch.environment(), "command": " ".join(sys.argv)},
                                                     indent=2))
    work = Path(tempfile.mkdtemp(prefix="trace-holdout-torchtitan-"))  # its data and outputs stay out of DIR
    if any(kind == "torchtitan" for kind, _ in order):
        torchtitan_runs.write_dataset(work)
    results = out / "trace_holdout.jsonl"
    for kind, config in order:
        left = deadline - time.time()
        start = time.time()
        if left < (PLAIN_MIN_S if kind == "plain" else TORCHTITAN_MIN_S):
            record = {**config, "skipped": "time budget"}
        else:
            try:
                record = plain_row(config, left) if kind == "plain" else torchtitan_row(config, out, work, left)
            except Exception as exc:  # one broken row must not end the run: record it and go on
                record = {**config, "error": f"{type(exc).__name__}: {exc}"}
        record = {"kind": kind, **record, "row_wall_s": round(time.time() - start, 1)}
        with results.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"{kind:10} {json.dumps(config)[:110]:110} {brief(record)} ({record['row_wall_s']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
