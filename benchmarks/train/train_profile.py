"""Where the training proof's measured step time goes: each recipe of ``benchmarks/train/train_proof.py`` run with the
reference job's own model, data and optimizers (``workbench.train``) under torch.profiler, its device time per
step split into the analytical model's operator classes beside the model's prediction for the same classes.

    python benchmarks/train/train_profile.py --out $OUT/profile                     # one H200, all 7 runs, < 4 min
    python benchmarks/train/train_profile.py --out /tmp/p --runs dlrm-mb32k-compiled,llama1b-mb4-fp8-eager
    python benchmarks/train/train_profile.py --out /tmp/p --recipe my.yaml --device cpu --in-process   # any recipe

Per run: warm-up steps (compilation, autotuning), ``--timed`` steps timed as the job times them (host wall time
between two ``torch.cuda.synchronize()``), then ``--steps`` steps under torch.profiler (CPU + CUDA activity;
Python frames too on eager runs, which is how RoPE's ops are found). Writes, under ``--out``:

- ``<run>_kernels.csv``: every kernel / memcpy / memset: name, class, phase, launching op, ms and count per step;
- ``<run>_classes.csv``: per class (``workbench.trace.CLASSES``) measured and predicted ms per step, split
  fwd / bwd / optimizer, then total kernel time, device busy time (union of kernel intervals), step wall time
  (the unprofiled timed steps' median) and the idle gap = wall - busy (launch- and CPU-bound time);
- ``<run>_trace.json.gz``: the chrome trace (chrome://tracing or ui.perfetto.dev);
- ``<run>_summary.json``; and for all runs ``classes.csv`` (long form) and ``REPORT.md``.

The prediction is ``workbench.recipe.build.predict_recipe(recipe, calibrated=True, job=True)``: the step as the
reference job runs it (eager or compiled, its loss, FSDP2 copies, fp8 quantization). Each run is its own process (``--in-process`` runs them here), so an OOM or a
hung compile costs that run only; ``--budget-s`` skips what would not finish in time.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from train_proof import run_logged  # noqa: E402

from workbench.trace import busy_us, kernel_rows, measured_by_class, read_trace  # noqa: E402
from workbench.train.profile_classes import class_rows, predicted_by_class  # noqa: E402

RECIPES = REPO / "benchmarks" / "results" / "h200" / "train" / "recipes"
"""The recipes the H200 proof ran (``train_proof.py`` wrote them; their predictions are calibrated)."""
RUNS: tuple[str, ...] = ("dlrm-mb32k-compiled", "llama1b-mb4-fp8-eager", "llama8b-4l-mb2-selective-eager",
                         "llama1b-mb8-full-eager", "llama1b-mb2-none-compiled", "port-h100-recipe", "codesigned-h200")
"""The proof's predicted-vs-measured runs, furthest off first (a budget cut drops the nearly-right ones)."""
BUDGET_S = 235.0
"""Whole-script budget: under the 4 minutes the lead's device slot gives this script."""
RUN_TIMEOUT_S = 75.0
"""One run's limit (build, compile, warm-up, timed and profiled steps, trace export); the proof's slowest run,
the compiled 12-layer Llama 8B, took 39 s with 9 steps."""


# ------------------------------------------------------------------------------------------------ one run
def _warmup_for(spec) -> int:
    """Compiled runs: 3 (the proof's count; compilation is in the first); eager: 2 (cuBLAS, Triton JIT)."""
    return 3 if spec.compile else 2


def profile_recipe(recipe_path: Path, out: Path, name: str, *, steps: int = 3, timed: int = 2,
                   warmup: int | None = None, device: str = "auto", stack: str = "auto",
                   max_table_rows: int | None = None) -> dict:
    """Run one recipe's training steps, profile ``steps`` of them and write the run's outputs; returns its summary."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from workbench.models import DLRMModel
    from workbench.recipe import load_recipe
    from workbench.recipe.build import predict_recipe
    from workbench.train.build import build_dlrm, build_transformer
    from workbench.train.job import RunOptions, _batches
    from workbench.train.parallel import init_world
    from workbench.train.spec import check_supported, load_job_spec

    began = time.monotonic()
    spec = load_job_spec(recipe_path)
    warmup = _warmup_for(spec) if warmup is None else warmup
    is_dlrm = isinstance(spec.model, DLRMModel)
    options = RunOptions(steps=steps, warmup=warmup, device=device, seed=0, max_table_rows=max_table_rows,
                         progress=False)
    world = init_world(device, need_group=not is_dlrm and (spec.sharding == "fsdp" or spec.tp > 1))
    cuda = world.device.type == "cuda"
    with_stack = stack == "on" or (stack == "auto" and not spec.compile)
    try:
        check_supported(spec, world.world_size)
        torch.manual_seed(0)
        built = build_dlrm(spec, world, max_table_rows) if is_dlrm else build_transformer(spec, world)
        next_batch = _batches(spec, options, world)
        step = _step_function(spec, built, world, next_batch, record_function)
        for i in range(warmup):
            step(i)
        if cuda:
            torch.cuda.synchronize(world.device)
            torch.cuda.empty_cache()
        walls = [step(warmup + i) for i in range(timed)]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities, with_stack=with_stack) as prof:
            profiled_walls = [step(warmup + timed + i) for i in range(steps)]
            if cuda:
                torch.cuda.synchronize(world.device)
        raw = out / f"{name}_trace.json"
        prof.export_chrome_trace(str(raw))
        del step, built
        gc.collect()
    finally:
        if world.initialized_here:
            import torch.distributed as dist

            dist.destroy_process_group()
    trace = json.loads(raw.read_text())
    with open(raw, "rb") as src, gzip.open(out / f"{name}_trace.json.gz", "wb", compresslevel=3) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()

    events, on_device = read_trace(trace)
    wall_ms = statistics.median(walls or profiled_walls) * 1e3
    busy_ms = busy_us(events) / steps / 1e3
    kernel_ms = sum(e.duration_us for e in events) / steps / 1e3
    recipe = load_recipe(recipe_path)
    prediction = predict_recipe(recipe, calibrated=True, job=True)
    predicted_step_ms = prediction.summary.step_time_s * 1e3
    _write_csv(out / f"{name}_kernels.csv", kernel_rows(events, steps))
    classes = class_rows(measured_by_class(events, steps), predicted_by_class(prediction), wall_ms=wall_ms,
                         busy_ms=busy_ms, kernel_ms=kernel_ms, predicted_step_ms=predicted_step_ms)
    _write_csv(out / f"{name}_classes.csv", classes)
    summary = {
        "run": name, "recipe": str(recipe_path), "device": torch.cuda.get_device_name(world.device) if cuda else "cpu",
        "torch": torch.__version__, "on_device": on_device, "compile": spec.compile, "with_stack": with_stack,
        "warmup": warmup, "timed_steps": timed, "profiled_steps": steps, "max_table_rows": max_table_rows,
        "wall_ms_timed": [w * 1e3 for w in walls], "wall_ms_profiled": [w * 1e3 for w in profiled_walls],
        "step_wall_ms": wall_ms, "busy_ms": busy_ms, "kernel_ms": kernel_ms, "idle_gap_ms": wall_ms - busy_ms,
        "events_per_step": len(events) / steps, "predicted_step_ms": predicted_step_ms,
        "predicted_step_ms_recipe": recipe.predicted.step_time_s * 1e3 if recipe.predicted else None, "classes": classes,
        "run_s": time.monotonic() - began,
    }
    (out / f"{name}_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _step_function(spec, built, world, next_batch, record_function):
    """One optimizer step as ``workbench.train.job._loop`` runs it (``job.train_step``: batches made before the
    clock starts, phases named train.forward / train.backward / train.optimizer), inside a ``train.step#i``
    range; returns its wall seconds."""
    import torch

    from workbench.train.job import train_step

    cuda = world.device.type == "cuda"
    autocast = (torch.autocast(world.device.type, dtype=built.autocast_dtype) if built.autocast_dtype
                else contextlib.nullcontext())

    def step(index: int) -> float:
        batches = [next_batch() for _ in range(spec.grad_accumulation)]
        if cuda:
            torch.cuda.synchronize(world.device)
        start = time.perf_counter()
        with record_function(f"train.step#{index}"):
            train_step(built, batches, autocast, world.device)
        if cuda:
            torch.cuda.synchronize(world.device)
        return time.perf_counter() - start

    return step


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in row.items()})


# ------------------------------------------------------------------------------------------------ all runs
def _worker_command(args, recipe: Path, name: str) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--recipe", str(recipe), "--name", name,
           "--out", str(args.out), "--steps", str(args.steps), "--timed", str(args.timed), "--device", args.device,
           "--stack", args.stack]
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if args.max_table_rows:
        cmd += ["--max-table-rows", str(args.max_table_rows)]
    return cmd


def write_report(out: Path, results: list[dict], command: str) -> None:
    """``classes.csv`` (run, class, measured, predicted: long form) and ``REPORT.md`` (one table per run)."""
    long_rows = [{"run": r["run"], **c} for r in results if r.get("status") == "ok" for c in r["classes"]]
    _write_csv(out / "classes.csv", long_rows)
    lines = ["# Training step profile: measured device time per operator class vs the analytical model", "",
             f"Command: `{command}`", "",
             ("Per step, in ms. Measured: kernel time per class over the profiled steps (torch.profiler, CUDA "
             "activity); busy = union of kernel intervals; wall = median of the unprofiled timed steps; "
             "idle gap = wall - busy (host-bound time: launches, Python, eager dispatch, syncs). Predicted: "
             "`predict_recipe(recipe, calibrated=True, job=True)` per op (the reference job as it runs), summed per class."), ""]
    for r in results:
        if r.get("status") != "ok":
            lines += [f"## {r['run']}: {r.get('status')}", "", f"{r.get('error', '')}", ""]
            continue
        lines += [f"## {r['run']}", "",
                  (f"{r['device']}, compile {r['compile']}, {r['events_per_step']:.0f} kernels/step; wall "
                  f"{r['step_wall_ms']:.1f} ms (predicted {r['predicted_step_ms']:.1f}), busy {r['busy_ms']:.1f}, "
                  f"idle gap {r['idle_gap_ms']:.1f}"), "",
                  "| class | measured | predicted | measured - predicted | fwd / bwd / opt measured | fwd / bwd / opt predicted |",
                  "|---|---|---|---|---|---|"]
        for c in r["classes"]:
            split = ""
            if "measured_fwd_ms" in c:
                split = (f"| {c['measured_fwd_ms']:.2f} / {c['measured_bwd_ms']:.2f} / {c['measured_optimizer_ms']:.2f} "
                         f"| {c['predicted_fwd_ms']:.2f} / {c['predicted_bwd_ms']:.2f} / {c['predicted_optimizer_ms']:.2f} |")
            else:
                split = "| | |"
            lines.append(f"| {c['class']} | {c['measured_ms']:.2f} | {c['predicted_ms']:.2f} | "
                         f"{c['measured_minus_predicted_ms']:+.2f} {split}")
        lines.append("")
    (out / "REPORT.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated proof runs (default: all {len(RUNS)})")
    p.add_argument("--recipes", type=Path, default=RECIPES, help="folder of <run>.yaml recipes (default: the proof's)")
    p.add_argument("--recipe", type=Path, action="append", default=[],
                   help="profile this recipe file instead (repeatable; the run is named after the file)")
    p.add_argument("--steps", type=int, default=3, help="profiled steps (default 3)")
    p.add_argument("--timed", type=int, default=2, help="unprofiled timed steps for the wall time (default 2)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 3 compiled, 2 eager)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--stack", choices=("auto", "on", "off"), default="auto",
                   help="record Python frames (auto: eager runs only; finds RoPE's ops)")
    p.add_argument("--max-table-rows", type=int, default=None, help="cap DLRM tables (CPU smoke runs)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help=f"whole-script budget (default {BUDGET_S:.0f})")
    p.add_argument("--in-process", action="store_true", help="run every recipe in this process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        profile_recipe(args.recipe[0], args.out, args.name, steps=args.steps, timed=args.timed, warmup=args.warmup,
                       device=args.device, stack=args.stack, max_table_rows=args.max_table_rows)
        return 0
    if args.recipe:
        plan = [(path, path.stem) for path in args.recipe]
    else:
        names = [n for n in args.runs.split(",") if n]
        missing = [n for n in names if not (args.recipes / f"{n}.yaml").exists()]
        if missing:
            p.error(f"--runs: no recipe for {missing} in {args.recipes}; known: {', '.join(RUNS)}")
        plan = [(args.recipes / f"{n}.yaml", n) for n in names]
    start = time.monotonic()
    command = "python benchmarks/train/train_profile.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = []
    for recipe, name in plan:
        left = args.budget_s - (time.monotonic() - start)
        if left < 20:
            results.append({"run": name, "status": "skipped", "error": f"time budget: {left:.0f} s left"})
            print(f"[profile] {name}: skipped ({left:.0f} s left)", flush=True)
            continue
        print(f"[profile] {name} ...", flush=True)
        began = time.monotonic()
        try:
            if args.in_process:
                summary = profile_recipe(recipe, args.out, name, steps=args.steps, timed=args.timed,
                                         warmup=args.warmup, device=args.device, stack=args.stack,
                                         max_table_rows=args.max_table_rows)
            else:
                run_logged(_worker_command(args, recipe, name), args.out / f"{name}.log",
                                min(RUN_TIMEOUT_S, left))
                summary = json.loads((args.out / f"{name}_summary.json").read_text())
            results.append({**summary, "status": "ok"})
            print(f"[profile] {name}: wall {summary['step_wall_ms']:.1f} ms, busy {summary['busy_ms']:.1f}, "
                  f"predicted {summary['predicted_step_ms']:.1f} ({time.monotonic() - began:.0f} s)", flush=True)
        except subprocess.TimeoutExpired:
            results.append({"run": name, "status": "timeout", "error": f"killed after {min(RUN_TIMEOUT_S, left):.0f} s"})
        except Exception as exc:  # one failed run must not lose the others
            traceback.print_exc()
            results.append({"run": name, "status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]})
        write_report(args.out, results, command)
    print(f"[profile] wrote {args.out / 'REPORT.md'} in {time.monotonic() - start:.0f} s", flush=True)
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
