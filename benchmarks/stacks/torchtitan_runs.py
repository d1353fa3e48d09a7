"""torchtitan 0.2.2 itself on the local GPU: the `torchtitan` stack's ground truth (issues 16 and 18).

Each run writes a job TOML (the fields torchtitan documents, shown in the run's folder), starts
`torchrun --standalone --nproc_per_node 1 torchtitan_entry.py --job.config_file run.toml` in a work folder that
holds the offline assets, and parses torchtitan's own per-step log line (`memory: X GiB(..) tps: N ...`): step time
= local_batch_size x seq_len / tps over the steps after the warm-up (median), peak memory = torchtitan's
max_reserved (GiB, converted to GB). One run (`--trace-run`) also keeps torchtitan's profiler trace of one step.

Offline, as on a machine without a package index (how a user does it too):
- wheels: torchtitan 0.2.2, torchdata 0.11.0, datasets 4.7.0, dill, multiprocess, tyro 1.0.17, docstring-parser,
  typeguard, shtab, tomli, torchao 0.16.0 (`pip download --no-deps` them elsewhere, `pip install --no-index
  --no-deps --target DIR *.whl` there, `PYTHONPATH=DIR`); the rest of torchtitan's needs ship with torch images;
- tokenizer: torchtitan's test tokenizer (`torchtitan_assets/tokenizer`, from its repository's tests/assets,
  BSD-3-Clause), given as `model.hf_assets_path`;
- data: `dataset = "c4_test"` reads `tests/assets/c4_test/data.json` (JSON lines with a `text` field) under the
  working folder; this script writes one of generated sentences. Step time does not depend on the text.

    python benchmarks/stacks/torchtitan_runs.py --out DIR [--budget-s 540] [--only NAME] [--holdout]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Run:
    name: str
    flavor: str  # 8B_4L or 1B (torchtitan_entry.py), or a torchtitan flavor
    local_batch_size: int
    seq_len: int
    ac_mode: str  # none, selective, full
    selective_ac_option: str = "op"  # "op" (per-op policy) or "N" (every N-th layer)
    compile: bool = False
    float8_recipe: str | None = None  # rowwise, tensorwise, rowwise_with_gw_hp
    steps: int = 20
    warmup: int = 5
    extra: dict = field(default_factory=dict)


RUNS = [
    Run("8b4l-bf16-full-compile", "8B_4L", 2, 4096, "full", compile=True),
    Run("8b4l-bf16-selop-eager", "8B_4L", 2, 4096, "selective"),
    Run("8b4l-preset-eager", "8B_4L", 1, 8192, "selective"),  # llama3_8b.toml's own settings, 4 layers
    Run("8b4l-fp8row-full-compile", "8B_4L", 2, 4096, "full", compile=True, float8_recipe="rowwise"),
    Run("8b4l-bf16-none-compile", "8B_4L", 1, 8192, "none", compile=True),
    Run("1b-bf16-none-compile", "1B", 2, 8192, "none", compile=True),
    Run("1b-bf16-full-eager", "1B", 4, 4096, "full"),
    Run("1b-fp8row-selop-compile", "1B", 4, 4096, "selective", compile=True, float8_recipe="rowwise"),
    Run("1b-bf16-sel2-eager", "1B", 2, 4096, "selective", selective_ac_option="2"),
]
HOLDOUT = [  # chosen after the stack tables were written, none of them in RUNS: a held-out check
    Run("h-8b4l-bf16-none-eager", "8B_4L", 1, 4096, "none"),
    Run("h-1b-bf16-selop-compile", "1B", 2, 8192, "selective", compile=True),
    Run("h-8b4l-bf16-sel2-compile", "8B_4L", 2, 4096, "selective", selective_ac_option="2", compile=True),
]
FP8 = [  # torchao float8 (rowwise) runs for the fp8 kernel tables, each with its profiler trace: the first two are
    # RUNS' fp8 configurations again (the tables' fit rows), the other two test them (benchmarks/stacks/fp8_split.json)
    Run("f-8b4l-fp8row-full-compile", "8B_4L", 2, 4096, "full", compile=True, float8_recipe="rowwise"),
    Run("f-1b-fp8row-selop-compile", "1B", 4, 4096, "selective", compile=True, float8_recipe="rowwise"),
    Run("f-8b4l-fp8row-none-compile", "8B_4L", 1, 8192, "none", compile=True, float8_recipe="rowwise"),
    Run("f-1b-fp8row-full-eager", "1B", 2, 4096, "full", float8_recipe="rowwise"),
]
TRACE_RUN = "8b4l-bf16-full-compile"


def toml(run: Run, assets: Path, trace: bool) -> str:
    converters = '["quantize.linear.float8"]' if run.float8_recipe else "[]"
    text = f"""[job]
dump_folder = "./outputs/{run.name}"
description = "{run.name}"

[profiling]
enable_profiling = {str(trace).lower()}
save_traces_folder = "profile_trace"
profile_freq = {run.steps - 2}

[metrics]
log_freq = 1
enable_tensorboard = false

[model]
name = "llama3"
flavor = "{run.flavor}"
hf_assets_path = "{assets / 'tokenizer'}"
converters = {converters}

[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 2

[training]
local_batch_size = {run.local_batch_size}
seq_len = {run.seq_len}
max_norm = 1.0
steps = {run.steps}
dataset = "c4_test"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable = false

[compile]
enable = {str(run.compile).lower()}
components = ["model", "loss"]

[activation_checkpoint]
mode = "{run.ac_mode}"
selective_ac_option = "{run.selective_ac_option}"
"""
    if run.float8_recipe:
        text += f"""
[quantize.linear.float8]
recipe_name = "{run.float8_recipe}"
filter_fqns = ["output"]
"""
    return text


def write_dataset(work: Path, lines: int = 4000) -> None:
    """JSON lines of generated sentences (about 6 MB): more tokens than the longest run reads."""
    rng = random.Random(0)
    words = ("the model trains on many tokens while the optimizer updates every weight of each layer and the "
             "gradient flows back through attention and the feed forward network").split()
    path = work / "tests" / "assets" / "c4_test" / "data.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for _ in range(lines):
            handle.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(250))}) + "\n")


LINE = re.compile(r"step:\s*(\d+)\s+loss:\s*([\d.]+).*?memory:\s*([\d.]+)GiB.*?tps:\s*([\d,]+)\s+tflops:\s*([\d,.]+)"
                  r"\s+mfu:\s*([\d.]+)%")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse(log: str, run: Run) -> dict:
    steps = []
    for line in ANSI.sub("", log).splitlines():
        m = LINE.search(line)
        if m:
            steps.append({"step": int(m[1]), "loss": float(m[2]), "reserved_gib": float(m[3]),
                          "tps": float(m[4].replace(",", "")), "tflops": float(m[5].replace(",", "")),
                          "mfu": float(m[6])})
    timed = [s for s in steps if s["step"] > run.warmup]
    if not timed:
        return {"steps_logged": len(steps)}
    tps = statistics.median(s["tps"] for s in timed)
    return {"steps_logged": len(steps), "tokens_per_s": tps,
            "step_time_s": run.local_batch_size * run.seq_len / tps,
            "peak_reserved_gb": max(s["reserved_gib"] for s in steps) * 2**30 / 1e9,
            "tflops": statistics.median(s["tflops"] for s in timed), "mfu_pct": statistics.median(s["mfu"] for s in timed),
            "loss_first": steps[0]["loss"], "loss_last": steps[-1]["loss"], "per_step": steps}


def train(config: Path, work: Path, timeout_s: float) -> tuple[str, dict]:
    """torchtitan's trainer on one GPU with ``config`` (a job TOML), in ``work`` (the offline assets' folder): its
    log, and the return code and wall time (or the error: the log's tail, or "timeout")."""
    command = ["torchrun", "--standalone", "--nproc_per_node", "1", str(HERE / "torchtitan_entry.py"),
               "--job.config_file", str(config)]
    start = time.time()
    try:
        proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout or "", exc.stderr or ""
        log = out.decode() + err.decode() if isinstance(out, bytes) else out + err
        return log, {"error": "timeout"}
    log = proc.stdout + proc.stderr
    outcome = {"returncode": proc.returncode, "wall_s": time.time() - start}
    if proc.returncode != 0:
        outcome["error"] = log[-1500:]
    return log, outcome


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument("--only", help="runs whose name contains this")
    p.add_argument("--list", action="store_true")
    p.add_argument("--holdout", action="store_true", help="the held-out runs (HOLDOUT) instead of RUNS")
    p.add_argument("--fp8", action="store_true", help="the fp8 runs (FP8), each with its trace, instead of RUNS")
    args = p.parse_args()
    chosen, label = (HOLDOUT, "holdout") if args.holdout else (FP8, "fp8") if args.fp8 else (RUNS, "")
    runs = [r for r in chosen if not args.only or args.only in r.name]
    if args.list:
        for r in runs:
            print(json.dumps(asdict(r)))
        return
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    write_dataset(work)
    deadline = time.time() + args.budget_s
    results = out / (f"torchtitan_{label}.jsonl" if label else "torchtitan.jsonl")
    for run in runs:
        folder = out / run.name
        folder.mkdir(exist_ok=True)
        (folder / "run.toml").write_text(toml(run, HERE / "torchtitan_assets", run.name == TRACE_RUN or args.fp8))
        left = deadline - time.time()
        record = {**asdict(run)}
        if left < 45:
            record["skipped"] = "time budget"
        else:
            log, outcome = train(folder / "run.toml", work, left)
            record.update(parse(log, run), **outcome)
            (folder / "log.txt").write_text(log)
        with results.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        brief = (f"{record['step_time_s'] * 1e3:8.1f} ms {record['peak_reserved_gb']:6.1f} GB "
                 f"mfu {record['mfu_pct']:.1f}%" if "step_time_s" in record
                 else record.get("skipped") or record.get("error", "")[-200:])
        print(f"{run.name:28} {brief}", flush=True)
    for run in runs:  # each traced run's last profiled step, gzipped beside its log
        traces = sorted((work / "outputs" / run.name).glob("**/profile_trace/**/*.json"))
        if traces:
            with traces[-1].open("rb") as raw, gzip.open(out / run.name / "trace.json.gz", "wb") as packed:
                shutil.copyfileobj(raw, packed)
            print(f"{run.name}: trace {traces[-1]}")


if __name__ == "__main__":
    main()
