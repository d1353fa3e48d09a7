"""An FSDP recipe on 2 GPUs against its predictions, eager and compiled (issue #6, the 2-GPU item).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 benchmarks/train/multi_gpu_proof.py --out DIR [--gpus 2] [--compile both|on|off]
    PYTHONPATH=. python3 benchmarks/train/multi_gpu_proof.py --out /tmp/m --dry-run     # CPU: recipes, predictions, plan

Runs one recipe -- Llama 3 8B cut to 8 layers, 4k tokens, micro-batch 2 per GPU, bf16, no checkpointing, synthetic
data -- with the reference job (``python -m workbench.train``, FSDP2; torchrun for more than one GPU), per compile
mode: on one GPU, on ``--gpus`` GPUs, then a torch.profiler pass of a few steps on ``--gpus`` GPUs (this script's
``--profile-worker``: the job's own ``train_step`` on rank 0's trace). Compares

- step time and peak memory with the recipe's prediction (the fused step: ``predicted`` in the job's metrics) and
  the job-level one (``predict_recipe(recipe, calibrated=True, job=True)``: ``predicted_job``);
- communication, two ways: the difference method (the ``--gpus`` step minus the one-GPU step plus the optimizer
  time sharding saves, against the same difference predicted) and the profiler's NCCL kernel time per step and the
  part of it no other kernel on the GPU overlaps (``nccl_overlap``), against the predicted total and exposed
  communication (``workbench.perf.overlap``).

Writes three files under ``--out``, rewritten after every run: ``MULTI_GPU.md``, ``multi_gpu.json`` and
``logs.tar.gz`` (recipes, job logs, metrics JSONs, profile summaries; no traces: they are read and deleted).
Work files live in ``--work`` (default: a temporary folder). ``--budget-s`` skips runs that would not fit. The
allocator follows the caller's ``PYTORCH_CUDA_ALLOC_CONF`` (the report names it): session 2's run used the defaults;
``expandable_segments:True`` is what the single-GPU proof uses, and the memory model's allocator slack assumes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from workbench.config import Parallelism, TrainingConfig  # noqa: E402
from workbench.memory import GB  # noqa: E402
from workbench.recipe import save_recipe  # noqa: E402
from workbench.recipe.build import make_recipe, predict_recipe  # noqa: E402
from workbench.schema import write_atomic  # noqa: E402
from workbench.train.nccl_overlap import device_activity, nccl_overlap  # noqa: E402

MODEL, OVERRIDES, SEQ, MICRO_BATCH, GPU = "llama3-8b", {"num_layers": 8}, 4096, 2, "h200-sxm"
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast off (the device notes: multicast objects are not available on the lent machines)."""
BUDGET_S = 290.0
"""Whole-script budget: about 5 minutes on an nvidia-h200-x2 machine."""
RUN_TIMEOUT_S = {"eager": 90.0, "compiled": 150.0}
"""One run's limit (start, build, compile, warm-up, steps; the profile pass also the trace's export and reading)."""
MIN_RUN_S = 25.0
"""A run with less time left than this is skipped (process start and model build alone take ~15 s)."""
MODES = {"both": ("eager", "compiled"), "off": ("eager",), "on": ("compiled",)}
PER_COLLECTIVE = ("all_gather_ms", "reduce_scatter_ms", "all_reduce_ms")
"""Keys of the per-collective totals: predicted (``prediction_summary``) and measured (``nccl_<key>``)."""


@dataclass(frozen=True)
class Run:
    """One process (or torchrun job) of the plan."""

    mode: str
    """eager or compiled."""
    gpus: int
    kind: str
    """job: ``python -m workbench.train``; profile: this script's ``--profile-worker`` under torchrun."""

    @property
    def name(self) -> str:
        return f"{self.mode}_{self.kind}{self.gpus}"


def plan_runs(modes: tuple[str, ...], gpus: int, profile: bool) -> list[Run]:
    """Per mode: the one-GPU job, the ``gpus`` job, then the profile pass on ``gpus`` (eager first: cheapest)."""
    runs = []
    for mode in modes:
        runs += [Run(mode, 1, "job"), Run(mode, gpus, "job")]
        if profile:
            runs.append(Run(mode, gpus, "profile"))
    return runs


def recipe_for(mode: str, gpus: int):
    config = TrainingConfig(MICRO_BATCH, SEQ, parallelism=Parallelism(dp=gpus, sharding="fsdp"))
    # the fused step's prediction in the recipe, as when this proof ran (the default stack is torchtitan since)
    return make_recipe(MODEL, GPU, config, overrides=OVERRIDES, compile=mode == "compiled", calibrated=True,
                       stack="ideal")


def prediction_summary(recipe, job: bool) -> dict[str, float]:
    """Step, peak memory, exposed and total communication and optimizer time (ms, GB) of one prediction."""
    prediction = predict_recipe(recipe, calibrated=True, job=job)
    s = prediction.summary
    out = {"step_ms": s.step_time_s * 1e3, "peak_gb": s.memory.total / GB, "exposed_comm_ms": s.communication_s * 1e3,
           "total_comm_ms": s.communication_total_s * 1e3, "optimizer_ms": s.optimizer_s * 1e3}
    for c in prediction.comms:  # per collective, as the profiler splits NCCL time
        key = f"{c.collective}_ms"
        out[key] = out.get(key, 0.0) + c.time_s * 1e3
    return out


def job_command(run: Run, recipe: Path, metrics: Path, steps: int, warmup: int) -> list[str]:
    job = ["-m", "workbench.train", "--recipe", str(recipe), "--steps", str(steps), "--warmup", str(warmup),
           "--data", "synthetic", "--quiet", "--metrics", str(metrics), "--force"]
    return [sys.executable, *job] if run.gpus == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={run.gpus}", *job]


def profile_command(run: Run, recipe: Path, summary: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={run.gpus}",
            str(Path(__file__).resolve()), "--profile-worker", "--recipe", str(recipe), "--summary", str(summary),
            "--profile-steps", str(steps)]


def run_logged(command: list[str], log: Path, timeout_s: float) -> int:
    """Run ``command`` with its output in ``log``, in its own session (a timeout kills it and its compile workers
    and torchrun ranks); returns its exit code, 124 on a timeout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           **NCCL_ENV}
    with log.open("w") as handle:
        handle.write(" ".join(command) + "\n")
        handle.flush()
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return 124


# ------------------------------------------------------------------------------------------------ profile pass
def profile_worker(recipe_path: Path, summary_path: Path, *, steps: int = 3, timed: int = 3,
                   warmup: int | None = None, device: str = "auto") -> dict | None:
    """One rank of the profile pass: the job's ``train_step`` (``train_profile._step_function``), warm-up, ``timed``
    steps, then ``steps`` steps under torch.profiler on rank 0 only (CUDA activity; CPU ops on a CPU run). Rank 0
    reads the trace (in a temporary folder, then deleted) into NCCL time per step and writes ``summary_path``."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function
    from train_profile import _step_function, _warmup_for

    from workbench.train.build import build_transformer
    from workbench.train.job import RunOptions, _batches
    from workbench.train.parallel import init_world
    from workbench.train.spec import check_supported, load_job_spec

    began = time.monotonic()
    spec = load_job_spec(recipe_path)
    warmup = _warmup_for(spec) if warmup is None else warmup
    options = RunOptions(steps=steps, warmup=warmup, device=device, data="synthetic", progress=False)
    world = init_world(device, need_group=True)
    cuda = world.device.type == "cuda"
    summary = None
    try:
        check_supported(spec, world.world_size)
        torch.manual_seed(0)
        built = build_transformer(spec, world)
        step = _step_function(spec, built, world, _batches(spec, options, world), record_function)
        for i in range(warmup):
            step(i)
        walls = [step(warmup + i) for i in range(timed)]
        activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        profiler = profile(activities=activities) if world.is_main else contextlib.nullcontext()
        with profiler as prof:
            profiled = [step(warmup + timed + i) for i in range(steps)]
        if world.is_main:
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(raw))
                activity = device_activity(json.loads(raw.read_text()))
            summary = {"recipe": str(recipe_path), "world_size": world.world_size, "compile": spec.compile,
                       "device": torch.cuda.get_device_name(world.device) if cuda else "cpu", "warmup": warmup,
                       "timed_steps": timed, "profiled_steps": steps,
                       "step_ms": statistics.median(walls or profiled) * 1e3,
                       "step_ms_profiled": [w * 1e3 for w in profiled], **nccl_overlap(activity, steps),
                       "run_s": time.monotonic() - began}
            write_atomic(summary_path, json.dumps(summary, indent=1) + "\n")
        del step, built
        gc.collect()
        if world.world_size > 1:
            dist.barrier()
    finally:
        if world.initialized_here:
            dist.destroy_process_group()
    return summary


# ------------------------------------------------------------------------------------------------ report
def _ms(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _predicted(predicted: float, measured: float | None) -> str:
    """``predicted`` and, where measured, the error measured / predicted - 1 in brackets."""
    return f"{predicted:.1f}" + (f" ({measured / predicted - 1:+.1%})" if measured and predicted else "")


def communication(mode: str, gpus: int, predictions: dict, results: dict) -> dict:
    """Measured and predicted communication of one mode: difference method and profiler, where they ran."""
    one, many = results.get(f"{mode}_job1", {}), results.get(f"{mode}_job{gpus}", {})
    p1, pn = predictions[f"{mode}_1"]["job"], predictions[f"{mode}_{gpus}"]["job"]
    saving = p1["optimizer_ms"] - pn["optimizer_ms"]
    out = {"predicted_optimizer_saving_ms": saving, "predicted_exposed_ms": pn["exposed_comm_ms"],
           "predicted_total_ms": pn["total_comm_ms"],
           "predicted_difference_ms": pn["step_ms"] - p1["step_ms"] + saving,
           **{f"predicted_{k}": v for k, v in pn.items() if k in PER_COLLECTIVE}}
    m1, mn = one.get("metrics"), many.get("metrics")
    if m1 and mn:
        out["measured_difference_ms"] = (mn["measured"]["step_time_s"] - m1["measured"]["step_time_s"]) * 1e3 + saving
    profiled = results.get(f"{mode}_profile{gpus}", {}).get("profile")
    if profiled:
        out.update({f"measured_{k}": v for k, v in profiled.items()
                    if k.startswith(("nccl_", "device_", "step_ms")) and isinstance(v, float)})
    return out


def report(args, modes: tuple[str, ...], predictions: dict, results: dict) -> str:
    rows = []
    for mode in modes:
        for gpus in (1, args.gpus):
            pr, pj = predictions[f"{mode}_{gpus}"]["recipe"], predictions[f"{mode}_{gpus}"]["job"]
            r = results.get(f"{mode}_job{gpus}", {})
            m = (r.get("metrics") or {}).get("measured", {})
            step = m.get("step_time_s") and m["step_time_s"] * 1e3
            peak = m.get("peak_memory_gb")
            status = "" if m else f" ({r.get('status', 'not run')})"
            rows.append(f"| {mode} | {gpus} | {_ms(step) or '-'}{status} | {_predicted(pr['step_ms'], step)} | "
                        f"{_predicted(pj['step_ms'], step)} | {_ms(peak) or '-'} | {_predicted(pr['peak_gb'], peak)} | "
                        f"{_predicted(pj['peak_gb'], peak)} |")
    comm_rows, per_collective = [], []
    for mode in modes:
        c = communication(mode, args.gpus, predictions, results)
        comm_rows.append(
            f"| {mode} | {_ms(c.get('measured_difference_ms')) or '-'} | {c['predicted_difference_ms']:.1f} | "
            f"{_ms(c.get('measured_nccl_kernel_ms')) or '-'} | {c['predicted_total_ms']:.1f} | "
            f"{_ms(c.get('measured_nccl_exposed_ms')) or '-'} | {c['predicted_exposed_ms']:.1f} | "
            f"{_ms(c.get('measured_nccl_busy_ms')) or '-'} | {_ms(c.get('measured_step_ms')) or '-'} |")
        split = [f"{k[:-3]} {_ms(c.get(f'measured_nccl_{k}')) or '-'} measured, {c.get(f'predicted_{k}', 0.0):.1f} "
                 "predicted" for k in PER_COLLECTIVE if c.get(f"predicted_{k}") or c.get(f"measured_nccl_{k}")]
        per_collective.append(f"- {mode}, NCCL kernel time per collective (ms per step): " + "; ".join(split))
    intro = (f"Recipe: {MODEL} with {OVERRIDES}, seq {SEQ}, micro-batch {MICRO_BATCH} per GPU, bf16, no "
             f"checkpointing, FSDP2, synthetic data; the job's {args.steps} timed steps after {args.warmup} warm-up "
             "(median). Predictions: H200-calibrated; *recipe* = the fused step the recipe records, *job* = "
             "`predict_recipe(recipe, calibrated=True, job=True)` (what the reference job runs). Errors are measured / "
             "predicted - 1. Allocator: `PYTORCH_CUDA_ALLOC_CONF="
             f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}` ({'set' if os.environ.get('PYTORCH_CUDA_ALLOC_CONF') else 'the defaults'}).")
    header = ("| mode | GPUs | measured step ms | recipe-predicted ms (error) | job-predicted ms (error) | "
              "measured peak GB (reserved) | recipe-predicted GB (error) | job-predicted GB (error) |")
    method = ("Difference = the FSDP step - the one-GPU step + the optimizer time sharding saves (predicted), measured "
              "from the job runs and predicted from the job-level predictions (it also holds FSDP's copies, which "
              "shrink with the shard). Profiler (rank 0, `nccl_overlap`): NCCL kernel time (sum of kernels), the part "
              "of it no other kernel/memcpy of the GPU overlaps (exposed), and the NCCL busy time (union); against the "
              "job-level prediction's total and exposed communication (`workbench.perf.overlap`).")
    comm_header = ("| mode | difference measured | difference predicted | NCCL kernel time | predicted total | "
                   "NCCL not overlapped | predicted exposed | NCCL busy (union) | profiled run's step |")
    return "\n".join([
        f"# FSDP on {args.gpus} H200s: predicted vs measured ({' and '.join(modes)})", "", intro, "",
        header, "|---|---|---|---|---|---|---|---|", *rows, "",
        f"## Communication on {args.gpus} GPUs, ms per step", "", method, "",
        comm_header, "|---|---|---|---|---|---|---|---|---|", *comm_rows, "", *per_collective, ""])


def write_outputs(out: Path, work: Path, text: str, data: dict) -> None:
    """MULTI_GPU.md, multi_gpu.json and logs.tar.gz (the work folder's small files), each written atomically."""
    write_atomic(out / "MULTI_GPU.md", text)
    write_atomic(out / "multi_gpu.json", json.dumps(data, indent=1, default=str) + "\n")
    fd, tmp = tempfile.mkstemp(prefix=".logs.", dir=out)
    os.close(fd)
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(work.iterdir()):
            if path.is_file() and path.stat().st_size < 20e6:
                tar.add(path, arcname=f"logs/{path.name}")
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / "logs.tar.gz")


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="where MULTI_GPU.md, multi_gpu.json and logs.tar.gz go")
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--compile", choices=tuple(MODES), default="both",
                        help="compiled runs: both (default), on, off")
    parser.add_argument("--steps", type=int, default=10, help="the job's timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="the job's warm-up steps, compilation included")
    parser.add_argument("--profile", choices=("on", "off"), default="on", help="the profiler pass (default on)")
    parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps (default 3)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"whole-script budget (default {BUDGET_S:.0f})")
    parser.add_argument("--timeout-s", type=float, default=None, help="cap on every run's limit (default per mode)")
    parser.add_argument("--dry-run", action="store_true", help="recipes, predictions and the plan; run nothing")
    parser.add_argument("--profile-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--recipe", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--summary", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile_worker:
        profile_worker(args.recipe, args.summary, steps=args.profile_steps, device=args.device)
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.gpus < 2:
        parser.error(f"--gpus = {args.gpus}: expected 2 or more (the one-GPU run is always made)")
    start = time.monotonic()
    modes = MODES[args.compile]
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="multi_gpu_"))
    work.mkdir(parents=True, exist_ok=True)

    recipes, predictions = {}, {}
    for mode in modes:
        for gpus in (1, args.gpus):
            recipe = recipe_for(mode, gpus)
            recipes[(mode, gpus)] = save_recipe(recipe, work / f"{mode}_fsdp{gpus}.yaml", overwrite=True)
            predictions[f"{mode}_{gpus}"] = {"recipe": prediction_summary(recipe, False),
                                             "job": prediction_summary(recipe, True)}
    runs = plan_runs(modes, args.gpus, args.profile == "on")
    commands = {}
    for run in runs:
        recipe = recipes[(run.mode, run.gpus)]
        commands[run.name] = (job_command(run, recipe, work / f"{run.name}_metrics.json", args.steps, args.warmup)
                              if run.kind == "job" else
                              profile_command(run, recipe, work / f"{run.name}_profile.json", args.profile_steps))
        print(f"[multi] plan {run.name}: {' '.join(commands[run.name])}", flush=True)
    command = "python benchmarks/train/multi_gpu_proof.py " + " ".join(sys.argv[1:] if argv is None else argv)
    data = {"command": command, "model": MODEL, "overrides": OVERRIDES, "seq_len": SEQ, "micro_batch": MICRO_BATCH,
            "predictions": predictions, "runs": {}}
    if args.dry_run:
        print(report(args, modes, predictions, {}))
        return 0

    results: dict[str, dict] = data["runs"]
    for run in runs:
        left = args.budget_s - (time.monotonic() - start)
        limit = min(RUN_TIMEOUT_S[run.mode], args.timeout_s or float("inf"), left)
        if limit < MIN_RUN_S:
            results[run.name] = {"status": "skipped", "error": f"time budget: {left:.0f} s left"}
            print(f"[multi] {run.name}: skipped ({left:.0f} s left)", flush=True)
            continue
        began = time.monotonic()
        rc = run_logged(commands[run.name], work / f"{run.name}.log", limit)
        result = {"status": "ok" if rc == 0 else ("timeout" if rc == 124 else f"exit {rc}"), "rc": rc,
                  "seconds": time.monotonic() - began, "limit_s": limit}
        produced = work / (f"{run.name}_metrics.json" if run.kind == "job" else f"{run.name}_profile.json")
        if produced.exists():
            result["metrics" if run.kind == "job" else "profile"] = json.loads(produced.read_text())
        results[run.name] = result
        print(f"[multi] {run.name}: {result['status']} in {result['seconds']:.0f} s", flush=True)
        data["communication"] = {mode: communication(mode, args.gpus, predictions, results) for mode in modes}
        write_outputs(args.out, work, report(args, modes, predictions, results), data)
    text = report(args, modes, predictions, results)
    write_outputs(args.out, work, text, data)
    print(text)
    print(f"[multi] done in {time.monotonic() - start:.0f} s; work files in {work}", flush=True)
    return 0 if all(r.get("status") == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
