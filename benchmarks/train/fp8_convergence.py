"""fp8 vs bf16 convergence check, third rule: runs ``results/h200/train/fp8_convergence/PLAN.md`` and judges it.

    PYTHONPATH=. python benchmarks/train/fp8_convergence.py --out benchmarks/results/h200/train/fp8_convergence   # H200
    PYTHONPATH=. python benchmarks/train/fp8_convergence.py --analyze benchmarks/results/h200/train/fp8_convergence
    PYTHONPATH=. python benchmarks/train/fp8_convergence.py --quick --seeds 100,101 --steps 10 --out /tmp/conv  # CPU smoke

The runs are the PLAN's: the ~45M-parameter byte-level Llama of ``train_proof.SMALL_LLAMA`` (micro-batch 8 x 1024,
eager) in bf16, ``rowwise_with_gw_hp`` and ``rowwise`` fp8 (recipes built as ``train_proof.fp8_runs`` builds them),
at seeds 100..107, 300 steps without warm-up at lr 6e-4, with the held-out loss every 10 steps and the job's
deterministic mode; then bf16 at seed 100 once more (the determinism check). Each run is
``python -m workbench.train`` in its own process, ``--workers`` of them at a time on one GPU (round-robin over
the visible GPUs when there are several), seed by seed -- bf16, rowwise_with_gw_hp, rowwise of seed 100, then of
seed 101, ... and the rerun last -- so a short ``--budget-s`` loses the last seeds whole. No run starts after the
budget, or with less time left than 3/4 of what the finished runs of its recipe took (``START_FRACTION``); a run
still going at the budget or past ``--run-timeout-s`` is killed. The outputs are rewritten after every run, so a
killed script leaves them.

``--resume`` keeps the complete runs already in ``--out`` (same settings) and runs the rest: a budget that ran out
before the last seeds costs a second invocation, not the first one's runs. ``--analyze DIR`` judges the metrics
already in DIR (CPU, no runs). The verdict is ``workbench.train.convergence``'s; it needs all 8 planned seeds, so
``--seeds`` subsets report "incomplete". Writes ``recipes/``, ``metrics/``, ``logs/`` (one per run, stdout and
stderr), ``runs.json``, ``REPORT.md``, ``convergence.csv``, ``curves.csv`` and ``summary.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for path in (REPO,):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from workbench.schema import write_atomic  # noqa: E402
from workbench.train.convergence import (  # noqa: E402
    FP8_RECIPES,
    PLAN_EVAL_EVERY,
    PLAN_EVAL_WINDOWS,
    PLAN_LR,
    PLAN_STEPS,
    RECIPES,
    REFERENCE,
    RERUN_SEED,
    STAGES,
    Run,
    curve_of,
    plan_runs,
    run_name,
    schedule_of,
)
from workbench.train.convergence_report import environment, load_metrics, write_outputs  # noqa: E402
from workbench.train.schedule import CONSTANT_LR, LrSchedule  # noqa: E402

PLAN = REPO / "benchmarks" / "results" / "h200" / "train" / "fp8_convergence" / "PLAN.md"
WORKERS = 4
BUDGET_S = 450.0
"""Default whole-run budget: 7.5 minutes, inside an 8-minute device slot."""
RUN_TIMEOUT_S = 240.0
"""Default per-run limit (a guess: ~6x the slowest serial run, 40 s, for runs sharing one GPU)."""
MIN_START_S = 20.0
"""No run starts with less of the budget left than this (a run's start-up alone takes ~10 s)."""
START_FRACTION = 0.75
"""Nor with less left than this fraction of the median wall time of the finished runs of its recipe (a guess: those
shared the GPU with ``--workers`` - 1 others; a run started near the end shares it with fewer)."""
EVAL_DETERMINISM_OVERHEAD = 1.25
"""Guessed factor on ``train_proof.FP8_RUN_WALL_S`` for 31 held-out evaluations (4 forward micro-batches each,
~14% of 300 steps) and deterministic mode; recalibrate from runs.json's wall_s."""
SPEEDUP_GUESS_PER_WORKER, SPEEDUP_GUESS_MAX = 0.65, 3.0
"""Guessed throughput of K processes sharing one H200 against one: min(1 + 0.65 (K - 1), 3). The 45M model runs
launch-bound (27 ms measured steps vs ~6-16 ms predicted), so the GPU has room. Measured since (the runs' wall_s
summed over the elapsed time, in each stage's summary.json): 7.1 runs at a time with 8 workers on two H200s
(stage 1), each run taking 1.0-1.6x ``FP8_RUN_WALL_S``; the guess was not recalibrated."""
QUICK = {"micro_batch": 2, "seq_len": 64, "steps": 20, "eval_every": 2, "eval_windows": 4, "lr": 3e-3}
"""--quick: ``train_proof.TINY_LLAMA`` at these settings (seconds per run on a CPU; tests the script only)."""


@dataclass(frozen=True)
class Settings:
    """What every run gets besides its recipe and seed."""

    steps: int
    eval_every: int
    eval_windows: int
    lr: float
    lr_schedule: LrSchedule = CONSTANT_LR


def build_recipes(recipes: tuple[str, ...], quick: bool) -> dict:
    """Each recipe as ``train_proof.fp8_runs`` builds it (``SMALL_LLAMA``, micro-batch 8 x 1024, eager, H200),
    or on ``TINY_LLAMA`` at ``QUICK``'s batch."""
    from train_proof import SMALL_LLAMA, TINY_LLAMA, _recipe

    from workbench.config import TrainingConfig
    from workbench.recipe.schema import PrecisionPolicy

    model, mb, seq = (TINY_LLAMA, QUICK["micro_batch"], QUICK["seq_len"]) if quick else (SMALL_LLAMA, 8, 1024)
    out = {}
    for recipe in recipes:
        if recipe == REFERENCE:
            out[recipe] = _recipe("llama3-8b", TrainingConfig(mb, seq, precision="bf16"), model, compile=False)
        else:
            policy = PrecisionPolicy(fp8=recipe)
            out[recipe] = _recipe("llama3-8b", TrainingConfig(mb, seq, precision=policy.workbench_precision), model,
                                  compile=False, fp8=recipe)
    return out


def train_command(run: Run, recipe_path: Path, metrics_path: Path, settings: Settings) -> list[str]:
    return [sys.executable, "-m", "workbench.train", "--recipe", str(recipe_path), "--metrics", str(metrics_path),
            "--force", "--steps", str(settings.steps), "--warmup", "0", "--lr", repr(settings.lr), "--seed", str(run.seed),
            "--eval-every", str(settings.eval_every), "--eval-windows", str(settings.eval_windows),
            "--deterministic", "--quiet", "--lr-schedule", settings.lr_schedule.kind,
            "--lr-warmup-steps", str(settings.lr_schedule.warmup_steps), "--lr-min-ratio",
            repr(settings.lr_schedule.min_ratio)]


def visible_devices() -> list[str]:
    """CUDA_VISIBLE_DEVICES's entries, else torch's device indices; [] without a GPU."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no torch CUDA here: CPU runs
        return []


def estimate_wall_s(runs: list[Run], workers: int) -> tuple[float, float]:
    """(serial, with ``workers``) guessed wall time of ``runs`` on an H200 (``EVAL_DETERMINISM_OVERHEAD``,
    ``SPEEDUP_GUESS_*``)."""
    from train_proof import FP8_RUN_WALL_S

    serial = sum(FP8_RUN_WALL_S[r.recipe] for r in runs) * EVAL_DETERMINISM_OVERHEAD
    return serial, serial / min(1 + SPEEDUP_GUESS_PER_WORKER * (workers - 1), SPEEDUP_GUESS_MAX)


# ------------------------------------------------------------------------------------------------ running
@dataclass
class Active:
    run: Run
    proc: subprocess.Popen
    log: object
    slot: int
    started: float
    timeout_s: float


def _child_env(device: str | None, workers: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))  # K processes share the CPUs
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    return env


def _expected_wall_s(recipe: str, rows: dict[str, dict]) -> float:
    """The median wall time of the finished runs of ``recipe``; 0 before one finishes."""
    walls = [r["wall_s"] for r in rows.values() if r["recipe"] == recipe and r["status"] == "ok"]
    return statistics.median(walls) if walls else 0.0


def _kill(active: Active) -> None:
    if active.proc.poll() is None:
        os.killpg(active.proc.pid, signal.SIGKILL)  # its own session: the run and whatever it started
    active.proc.wait()
    active.log.close()


def execute(runs: list[Run], out: Path, recipe_paths: dict[str, Path], settings: Settings, workers: int,
            devices: list[str], budget_s: float, run_timeout_s: float, after_each) -> list[dict]:
    """Run ``runs`` in order, ``workers`` at a time (slot k on ``devices[k % len(devices)]``), within the budget;
    ``after_each(rows)`` after every finished run. Returns one row per run: status ok, failed, timeout, skipped."""
    start = time.monotonic()
    rows = {r.name: {"name": r.name, "recipe": r.recipe, "seed": r.seed, "rerun": r.rerun, "status": "pending",
                     "wall_s": None, "error": "", "device": None} for r in runs}
    pending, active, free = list(runs), [], list(range(workers))
    try:
        while pending or active:
            now = time.monotonic()
            for a in list(active):
                code = a.proc.poll()
                if code is None and now - a.started <= a.timeout_s:
                    continue
                row = rows[a.run.name]
                if code is None:
                    _kill(a)
                    row.update(status="timeout", error=f"killed after {a.timeout_s:.0f} s")
                else:
                    a.log.close()
                    ok = code == 0 and (out / "metrics" / f"{a.run.name}.json").exists()
                    tail = " | ".join((out / "logs" / f"{a.run.name}.log").read_text().strip().splitlines()[-4:])
                    row.update(status="ok" if ok else "failed", error="" if ok else f"exit code {code}: {tail}"[:600])
                row["wall_s"] = time.monotonic() - a.started
                print(f"[conv] {a.run.name}: {row['status']} in {row['wall_s']:.0f} s {row['error']}", flush=True)
                active.remove(a)
                free.append(a.slot)
                after_each(list(rows.values()))
            while pending and free:
                run = pending.pop(0)
                left = start + budget_s - time.monotonic()
                need = max(MIN_START_S, START_FRACTION * _expected_wall_s(run.recipe, rows))
                if left < need:
                    rows[run.name].update(status="skipped",
                                          error=f"time budget: {left:.0f} s left, {need:.0f} s needed")
                    print(f"[conv] {run.name}: skipped ({rows[run.name]['error']})", flush=True)
                    continue
                slot = free.pop(0)
                device = devices[slot % len(devices)] if devices else None
                metrics_path = out / "metrics" / f"{run.name}.json"
                metrics_path.unlink(missing_ok=True)
                cmd = train_command(run, recipe_paths[run.recipe], metrics_path, settings)
                log = open(out / "logs" / f"{run.name}.log", "w")
                log.write(" ".join(cmd) + "\n")
                log.flush()
                proc = subprocess.Popen(cmd, cwd=REPO, env=_child_env(device, workers), stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                active.append(Active(run, proc, log, slot, time.monotonic(), min(run_timeout_s, left)))
                rows[run.name].update(status="running", device=device)
                print(f"[conv] {run.name} started (slot {slot}{f', GPU {device}' if device else ''}, "
                      f"{left:.0f} s of budget left)", flush=True)
            time.sleep(0.2)
    finally:
        for a in active:  # interrupted (SIGTERM, Ctrl-C, an error): no orphan runs
            _kill(a)
            rows[a.run.name].update(status="killed", error="the script stopped")
    return list(rows.values())


# ------------------------------------------------------------------------------------------------ outputs
def report(out: Path, runs: list[dict], context: dict, stage: int = 1, earlier: tuple[Path, ...] = ()) -> dict:
    """Analyse the metrics under ``out`` -- with those of ``earlier`` stages' folders, whose seeds the verdict also
    counts -- and write every output (``workbench.train.convergence_report.write_outputs``) by ``stage``'s rule."""
    metrics = load_metrics(out / "metrics")
    for folder in earlier:
        previous = load_metrics(folder / "metrics")
        clash = sorted(set(previous) & set(metrics))
        if clash:
            raise ValueError(f"--with {folder}: runs {clash} are in {out} too; expected each seed's runs in one folder")
        metrics.update(previous)
    rule = STAGES[stage]
    context = {**context, "stage": stage, "earlier": [str(f) for f in earlier],
               "plan_link": os.path.relpath(PLAN.with_name(rule.plan), out.resolve()),
               "environment": environment(metrics, REPO, context.get("environment", {}))}
    return write_outputs(out, metrics, runs, context, planned_seeds=rule.planned_seeds, confidence=rule.confidence,
                         lr_schedule=rule.lr_schedule)


def same_settings(metrics: dict, settings: Settings) -> bool:
    """Whether a metrics JSON ran with ``settings`` (steps, evaluation, lr): --resume keeps only those."""
    s = metrics.get("settings", {})
    return (metrics.get("steps", 0) + metrics.get("warmup", 0) == settings.steps and s.get("lr") == settings.lr
            and s.get("eval_every") == settings.eval_every and s.get("eval_windows") == settings.eval_windows
            and schedule_of(s) == settings.lr_schedule)


def resume_split(runs: list[Run], metrics: dict[str, dict], previous_rows: list[dict]) -> tuple[list[Run], list[dict]]:
    """--resume: (the runs still to do, the rows of those done -- a complete curve in ``metrics`` -- as the earlier
    invocation recorded them, or plain ok rows)."""
    done = {name for name, m in metrics.items() if curve_of(m)}
    recorded = {r["name"]: r for r in previous_rows}
    kept = [recorded.get(r.name, {"name": r.name, "recipe": r.recipe, "seed": r.seed, "rerun": r.rerun,
                                  "status": "ok", "wall_s": None, "error": "", "device": None})
            for r in runs if r.name in done]
    return [r for r in runs if r.name not in done], kept


def _read_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        seeds = ()
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds {text!r}: expected distinct non-negative integers, comma-separated")
    return seeds


def _parse_recipes(text: str) -> tuple[str, ...]:
    recipes = tuple(r.strip() for r in text.split(",") if r.strip())
    if not recipes or any(r not in RECIPES for r in recipes) or len(set(recipes)) != len(recipes):
        raise ValueError(f"--recipes {text!r}: expected distinct names among {', '.join(RECIPES)}, comma-separated")
    return recipes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output directory (runs)")
    p.add_argument("--analyze", metavar="DIR", help="judge the metrics already in DIR and rewrite its report; no runs")
    p.add_argument("--stage", type=int, choices=sorted(STAGES), default=1,
                   help="1: PLAN.md (seeds 100..107, 95%%); 2: PLAN_STAGE2.md (runs seeds 108..123, judges 100..123 "
                        "at 97.5%% with --with the stage-1 folder); 3: PLAN_SCHEDULE.md (cosine schedule, seeds "
                        "200..223, 97.5%%)")
    p.add_argument("--with", dest="earlier", action="append", default=[], metavar="DIR",
                   help="an earlier stage's output folder whose metrics the verdict also counts (repeatable)")
    p.add_argument("--seeds", default=None, help="comma-separated (default: the stage's seeds)")
    p.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated among {', '.join(RECIPES)}")
    p.add_argument("--steps", type=int, default=None, help=f"steps per run (default {PLAN_STEPS}; --quick "
                                                           f"{QUICK['steps']})")
    p.add_argument("--workers", type=int, default=WORKERS, help=f"concurrent runs (default {WORKERS})")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help=f"no run starts or goes on after this "
                                                                    f"(default {BUDGET_S:.0f})")
    p.add_argument("--run-timeout-s", type=float, default=RUN_TIMEOUT_S,
                   help=f"kill a run after this (default {RUN_TIMEOUT_S:.0f})")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps: tests the script (CPU)")
    p.add_argument("--force", action="store_true", help="--out: delete the metrics already there first")
    p.add_argument("--resume", action="store_true",
                   help="--out: keep the complete runs already there (same settings) and run only the others")
    args = p.parse_args(argv)
    if bool(args.out) == bool(args.analyze):
        p.error("give one of --out DIR (run the check) or --analyze DIR (judge existing metrics)")
    try:
        seeds = _parse_seeds(args.seeds or ",".join(map(str, STAGES[args.stage].seeds)))
        recipes = _parse_recipes(args.recipes)
    except ValueError as exc:
        p.error(str(exc))
    for name in ("steps", "workers", "budget_s", "run_timeout_s"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} {value}: expected a positive number")
    earlier = tuple(Path(d) for d in args.earlier)
    for folder in earlier:
        if not (folder / "metrics").is_dir():
            p.error(f"--with {folder}: no metrics/ folder there; expected an earlier stage's --out folder")
    command = "python benchmarks/train/fp8_convergence.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.analyze:
        out = Path(args.analyze)
        context = {**_read_json(out / "summary.json", {}).get("context", {}), "analyze_command": command,
                   "final": True}
        context.setdefault("command", "(not recorded)")
        summary = report(out, _read_json(out / "runs.json", []), context, args.stage, earlier)
        print(f"[conv] verdicts: {summary['verdicts']}; wrote {out / 'REPORT.md'}")
        return 0
    out = Path(args.out)
    old = load_metrics(out / "metrics") if (out / "metrics").exists() else {}
    if old and not (args.force or args.resume):
        p.error(f"{out / 'metrics'} holds {len(old)} metrics files: pass --force to delete them, --resume to keep "
                "the complete ones, or another --out")
    q = QUICK if args.quick else {}
    settings = Settings(args.steps or q.get("steps", PLAN_STEPS), q.get("eval_every", PLAN_EVAL_EVERY),
                        q.get("eval_windows", PLAN_EVAL_WINDOWS), q.get("lr", PLAN_LR), STAGES[args.stage].lr_schedule)
    runs, kept = plan_runs(seeds, recipes, rerun=args.stage == 1), []  # stage 2: no rerun (PLAN_STAGE2.md)
    order = {r.name: i for i, r in enumerate(runs)}  # rows in the plan's order, kept ones (--resume) included
    if args.resume:
        other = sorted(name for name, m in old.items() if not same_settings(m, settings))
        if other:
            p.error(f"--resume: {other} in {out / 'metrics'} ran with other settings than {settings}; use --force")
        runs, kept = resume_split(runs, old, _read_json(out / "runs.json", []))
        command = f"{_read_json(out / 'summary.json', {}).get('context', {}).get('command', '?')} && {command}"
    else:
        for path in (out / "metrics").glob("*.json"):
            path.unlink()
    for sub in ("recipes", "metrics", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    from workbench.recipe import save_recipe

    recipe_paths = {}
    for recipe, built in build_recipes(recipes, args.quick).items():
        recipe_paths[recipe] = save_recipe(built, out / "recipes" / f"{recipe}.yaml", overwrite=True)
    devices = visible_devices()
    serial, parallel = estimate_wall_s(runs, args.workers)
    notes = [f"{len(runs)} runs, {args.workers} at a time on {', '.join(devices) or 'the CPU'}; guessed H200 wall "
             f"{serial:.0f} s serial, ~{parallel:.0f} s with {args.workers} workers (guesses: "
             "EVAL_DETERMINISM_OVERHEAD, SPEEDUP_GUESS_*); budget {:.0f} s".format(args.budget_s)]
    print(f"[conv] {notes[0]}", flush=True)
    start = time.monotonic()
    context = {"command": command, "final": False, "notes": notes,
               "environment": {"workers": args.workers, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                               "budget_s": args.budget_s}}

    def checkpoint(rows: list[dict]) -> None:
        rows = sorted(kept + rows, key=lambda r: order[r["name"]])
        write_atomic(out / "runs.json", json.dumps(rows, indent=2) + "\n")
        try:
            report(out, rows, {**context, "elapsed_s": time.monotonic() - start}, args.stage, earlier)
        except Exception as exc:  # a report bug must not stop the runs
            print(f"[conv] interim report failed: {type(exc).__name__}: {exc}", flush=True)

    new = execute(runs, out, recipe_paths, settings, args.workers, devices, args.budget_s, args.run_timeout_s,
                  checkpoint)
    rows = sorted(kept + new, key=lambda r: order[r["name"]])
    elapsed = time.monotonic() - start
    walls = sum(r["wall_s"] or 0 for r in new)
    notes.append(f"elapsed {elapsed:.0f} s; the runs' wall times sum to {walls:.0f} s: {walls / elapsed:.2f} runs "
                 "at a time on average" + (f" ({len(kept)} runs kept from before: --resume)" if kept else ""))
    write_atomic(out / "runs.json", json.dumps(rows, indent=2) + "\n")
    summary = report(out, rows, {**context, "final": True, "elapsed_s": elapsed}, args.stage, earlier)
    print(f"[conv] verdicts: {summary['verdicts']}; wrote {out / 'REPORT.md'} in {elapsed:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` and the like: execute() kills its runs
    sys.exit(main())
