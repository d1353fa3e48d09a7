"""The DLRM job's fused table update on the GPU: what it does to the two DLRM recipes, where their step time goes,
and that it is correct at full size.

    python benchmarks/train/dlrm_fused_update_check.py --out $OUT            # one H200, ~2 min
    python benchmarks/train/dlrm_fused_update_check.py --out /tmp/q --quick  # CPU, tiny sizes, seconds

Every GPU stage is its own process, in this order, each starting from a free GPU (this process never touches it):

1. ``<run>.json``: the two DLRM recipes of the H200 proof (``benchmarks/results/h200/train/job_model_run/recipes``)
   through ``python -m workbench.train`` as ``train_proof.py`` runs them (8 timed steps, warm-up 3 compiled / 2
   eager, ``expandable_segments``): measured step time and peak memory beside ``predicted_job``.
2. ``profile_{classes,kernels}.csv`` and ``profile_summary.json``: ``train_profile.py`` on both (the eager one
   first; one worker process each, no Python stacks, no chrome trace), merged with a ``run`` column.
3. ``check.json``: one micro-batch of dlrm-dcnv2 at 32k samples (7.0 M lookups over the full tables' row ranges,
   remapped onto the distinct rows they touch, so the table is 2.8 GB instead of 102 GB and the duplicates are the
   job's), updated by the fused kernel (``workbench.kernels.rowwise_adagrad``), by the torch fallback and by the
   job's former torch path (sparse gradient, ``coalesce``, ``RowWiseAdagrad``), each against the float64 reference;
   device times of each; ``segment_by_row`` alone and queued behind other work as the job runs it (its host
   sync then costs only the idle after it); the fused kernel alone per config (bytes / time = its achieved
   bandwidth: ``memory_gather_efficiency.triton.rowwise_adagrad``).
4. ``REPORT.md`` and ``run.log``. Eight files at most.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

RECIPES = REPO / "benchmarks" / "results" / "h200" / "train" / "job_model_run" / "recipes"
RUNS = (("dlrm-mb32k-compiled", 3), ("holdout-dlrm-mb16k-eager", 2))
"""(recipe, warm-up steps) as ``train_proof.py`` runs them, 8 timed steps each."""
STEPS = 8
BUDGET_S = 140.0
RECIPE_TIMEOUT_S = 60.0
"""The compiled recipe's limit (compiling 5 dense modules, 11 steps); the eager one gets ``EAGER_TIMEOUT_S``."""
EAGER_TIMEOUT_S = 40.0
CHECK_RESERVE_S = 25.0
"""Seconds kept for the update check after the profiles."""


def _time_ms(fn, reps: int, cuda: bool) -> float:
    """Median device time of ``fn`` over ``reps`` calls (CUDA events; wall time on the CPU)."""
    import statistics

    import torch

    times = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def _queued_ms(fn, reps: int) -> float:
    """Median device time of ``fn`` launched while the GPU is still busy (a ~2 ms ``torch.cuda._sleep`` queued
    first): its launches overlap that work as they overlap backward in the job, so the time is its kernels plus
    the GPU idle after a host sync in it."""
    import statistics

    import torch

    cycles = 4_000_000  # ~2 ms at the H200's 1.98 GHz: outlasts fn's launches
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check_update(micro_batch: int, max_table_rows: int | None, device: str, reps: int) -> dict:
    """Fused kernel, torch fallback and the former sparse path against the float64 reference on one real batch."""
    import torch
    import torch.nn.functional as F

    from workbench.kernels import rowwise_adagrad as ra
    from workbench.models import get_model
    from workbench.train.data import RecsysBatches
    from workbench.train.dlrm import RowWiseAdagrad, capped_rows

    cuda = device == "cuda"
    m = get_model("dlrm-dcnv2")
    rows = capped_rows(m, max_table_rows)
    batch = RecsysBatches(micro_batch, m.num_dense_features, rows, tuple(t.pooling for t in m.tables),
                          torch.device(device), seed=0)
    _, indices, offsets, _ = batch.next()
    distinct, indices = torch.unique(indices, return_inverse=True)  # the touched rows only: same duplicates
    g = torch.Generator(device=device).manual_seed(1)
    num_rows, dim, bags = distinct.shape[0], m.embedding_dim, offsets.shape[0] - 1
    weight = torch.randn(num_rows, dim, generator=g, device=device) * 0.01
    acc = torch.rand(num_rows, generator=g, device=device) * 1e-4
    grad_out = torch.randn(bags, dim, generator=g, device=device) * 1e-3 / micro_batch ** 0.5
    lr, eps = 0.005, 1e-8
    want_w, want_acc = ra.reference_rowwise_adagrad(weight, acc, grad_out, indices, offsets, lr, eps)
    moved = (want_w - weight.double()).abs().max().item()

    def errors(w, a) -> dict:
        return {"weight_max_abs_err_over_max_update": (w.double() - want_w).abs().max().item() / moved,
                "acc_max_rel_err": ((a.double() - want_acc).abs() / want_acc.clamp_min(1e-30)).max().item()}

    def fused(use_triton: bool):
        w, a = weight.clone(), acc.clone()
        ra.rowwise_adagrad_update(w, a, grad_out, indices, offsets, lr, eps, use_triton=use_triton)
        return w, a

    def former():  # the job's torch path before the fused update: sparse gradient, coalesce, RowWiseAdagrad
        table = torch.nn.Parameter(weight.clone())
        out = F.embedding_bag(indices, table, offsets, mode="sum", sparse=True, include_last_offset=True)
        out.backward(grad_out)
        opt = RowWiseAdagrad([table], lr=lr, eps=eps)
        opt.state[table]["sum"] = acc.clone()
        opt.step()
        return table.detach(), opt.state[table]["sum"]

    result = {"micro_batch": micro_batch, "lookups": indices.shape[0], "touched_rows": num_rows, "bags": bags,
              "dim": dim, "max_lookups_per_row": int(torch.bincount(indices).max())}
    paths = {"fused_triton": lambda: fused(True), "fused_torch": lambda: fused(False), "former_sparse": former}
    if not cuda and not ra.interpreting():
        paths.pop("fused_triton")
    for name, fn in paths.items():
        w, a = fn()
        result[name] = errors(w, a)
        del w, a
    result["ok"] = all(result[n]["weight_max_abs_err_over_max_update"] < 1e-4 and result[n]["acc_max_rel_err"] < 1e-4
                       for n in paths)

    # device time of backward + update as the job runs them (forward included: the same F.embedding_bag in both),
    # in place on one table, no copies timed
    from workbench.train.dlrm import _pooled_with_fused_update

    for name, sparse in (("fused_job", False), ("former_job", True)):
        table = torch.nn.Parameter(weight.clone())
        table.pooled_grads = []
        opt = RowWiseAdagrad([table], lr=lr, eps=eps)

        def step(table=table, opt=opt, sparse=sparse):
            if sparse:
                out = F.embedding_bag(indices, table, offsets, mode="sum", sparse=True, include_last_offset=True)
            else:
                out = _pooled_with_fused_update(table, indices, offsets, False)
            out.backward(grad_out)
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # the accumulator
        result[f"{name}_fwd_bwd_update_ms"] = _time_ms(step, reps, cuda)
        del table, opt, step
    result["forward_ms"] = _time_ms(lambda: F.embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True),
                                    reps, cuda)
    if "fused_triton" in paths:  # the kernel alone, per config: segments made once
        segs = ra.segment_by_row(indices, offsets, num_rows)
        result["segment_by_row_ms"] = _time_ms(lambda: ra.segment_by_row(indices, offsets, num_rows), reps, cuda)
        if cuda:  # as the job runs it: launched behind queued work, so only the idle after its host sync shows
            try:
                result["segment_by_row_queued_ms"] = _queued_ms(lambda: ra.segment_by_row(indices, offsets, num_rows),
                                                                reps)
            except Exception as exc:  # noqa: BLE001 - a row of the report, not a failure
                result["segment_by_row_queued_error"] = f"{type(exc).__name__}: {exc}"[:200]
        nbytes = ra.bytes_moved(indices.shape[0], num_rows, dim)
        sweep = []
        from triton import next_power_of_2

        default = ra.config_space()[0]
        # the first run's sweep (benchmarks/results/h200/train/dlrm_fused_update/check.json): 1 warp and fewer rows
        # per program were fastest; 4 warps, BLOCK_N 64 slower; BLOCK_R 32 did not compile
        variants = [{}, {"BLOCK_R": 8, "num_warps": 1}, {"BLOCK_R": 4, "num_warps": 1}, {"BLOCK_R": 16, "num_warps": 1}]
        for config in [{**default, **v} for v in (variants if cuda else variants[:1])]:
            w, a = weight.clone(), acc.clone()
            block_r = config["BLOCK_R"]

            def kernel(w=w, a=a, config=config, block_r=block_r):
                ra._rowwise_adagrad_kernel[(-(-num_rows // block_r),)](
                    w, a, grad_out, segs[0], segs[1], segs[2], num_rows, dim, w.stride(0), grad_out.stride(0), lr, eps,
                    BLOCK_R=block_r, SHORT=config["SHORT"], BLOCK_N=config["BLOCK_N"], BLOCK_D=next_power_of_2(dim),
                    num_warps=config["num_warps"])

            try:
                ms = _time_ms(kernel, reps, cuda)
                sweep.append({**config, "ms": ms, "gb_s": nbytes / ms / 1e6})
            except Exception as exc:  # noqa: BLE001 - a config that does not compile is a row, not a failure
                sweep.append({**config, "error": f"{type(exc).__name__}: {exc}"[:200]})
        result["kernel_bytes"] = nbytes
        result["kernel_sweep"] = sweep
    return result


def run_logged(cmd: list[str], log, timeout_s: float) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                              check=False).returncode
    except subprocess.TimeoutExpired:
        log.write(f"[check] timed out after {timeout_s:.0f} s\n")
        return 124


def _check_stage(out: Path, quick: bool) -> int:
    """Stage 3 in this process (``--check-only``): ``check.json``."""
    device = "cpu" if quick else "cuda"
    if quick:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the fused kernel on the CPU (before triton is imported)
    try:
        check = check_update(64 if quick else 32768, 1000 if quick else None, device, 1 if quick else 5)
    except Exception as exc:  # noqa: BLE001 - recorded, the report says so
        traceback.print_exc()
        check = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    (out / "check.json").write_text(json.dumps(check, indent=1) + "\n")
    return 0 if check.get("ok") else 1


def _check_report(check: dict) -> list[str]:
    report = [f"## Update at micro-batch {check.get('micro_batch')}: {'ok' if check.get('ok') else 'FAILED'}", ""]
    if check.get("error"):
        report += [check["error"], ""]
    report += ["| path | max weight error / max update | max acc rel. error |", "|---|---|---|"]
    for name in ("fused_triton", "fused_torch", "former_sparse"):
        if name in check:
            c = check[name]
            report.append(f"| {name} | {c['weight_max_abs_err_over_max_update']:.2e} | {c['acc_max_rel_err']:.2e} |")
    if "fused_job_fwd_bwd_update_ms" in check:
        report += ["", (f"Forward + backward + update, ms: fused {check['fused_job_fwd_bwd_update_ms']:.2f}, former "
                        f"{check['former_job_fwd_bwd_update_ms']:.2f} (forward alone {check['forward_ms']:.2f}); "
                        f"segment_by_row {check.get('segment_by_row_ms', float('nan')):.3f} alone, "
                        f"{check.get('segment_by_row_queued_ms', float('nan')):.3f} queued behind other work")]
    if check.get("kernel_sweep"):
        report += ["", f"Fused kernel alone ({check['kernel_bytes'] / 1e9:.2f} GB moved):", "",
                   "| config | ms | GB/s |", "|---|---|---|"]
        for row in check["kernel_sweep"]:
            config = {k: v for k, v in row.items() if k not in ("ms", "gb_s", "error")}
            report.append(f"| {json.dumps(config)} | {row.get('ms', float('nan')):.3f} | "
                          f"{row.get('gb_s', float('nan')):.0f} {row.get('error', '')} |")
    return report


def _merge_profiles(profile_dir: Path, out: Path, names: list[str]) -> list[dict]:
    """train_profile.py's per-run files -> profile_classes.csv (its long form), profile_kernels.csv (a ``run``
    column added) and profile_summary.json (the summaries, a list); returns the summaries."""
    import csv

    if (profile_dir / "classes.csv").exists():
        shutil.copy(profile_dir / "classes.csv", out / "profile_classes.csv")
    rows, summaries = [], []
    for name in names:
        kernels, summary = profile_dir / f"{name}_kernels.csv", profile_dir / f"{name}_summary.json"
        if kernels.exists():
            with open(kernels, newline="") as f:
                rows += [{"run": name, **row} for row in csv.DictReader(f)]
        if summary.exists():
            summaries.append(json.loads(summary.read_text()))
    if rows:
        with open(out / "profile_kernels.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if summaries:
        (out / "profile_summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    return summaries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--quick", action="store_true", help="CPU, tiny sizes: tests the script")
    p.add_argument("--budget-s", type=float, default=BUDGET_S)
    p.add_argument("--check-only", action="store_true", help=argparse.SUPPRESS)  # stage 3, in its own process
    args = p.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.check_only:
        return _check_stage(out, args.quick)
    began = time.monotonic()
    device = "cpu" if args.quick else "cuda"

    def left() -> float:
        return args.budget_s - (time.monotonic() - began)

    log = open(out / "run.log", "w")  # noqa: SIM115 - closed before the report is printed
    report = ["# DLRM fused table update: step time, profile, correctness", ""]
    with tempfile.TemporaryDirectory() as tmp:
        recipes = Path(tmp)
        for name, _ in RUNS:
            if args.quick:
                from train_proof import _shrink

                from workbench.recipe import load_recipe, save_recipe

                save_recipe(_shrink(load_recipe(RECIPES / f"{name}.yaml")), recipes / f"{name}.yaml")
            else:
                shutil.copy(RECIPES / f"{name}.yaml", recipes / f"{name}.yaml")

        # 1. the two recipes, as train_proof.py runs them
        report += ["## Step time and peak memory (metrics JSON: predicted_job is the model now)", "",
                   "| run | measured step | predicted_job | error | reserved / allocated peak | predicted peak |",
                   "|---|---|---|---|---|---|"]
        for (name, warmup), limit in zip(RUNS, (RECIPE_TIMEOUT_S, EAGER_TIMEOUT_S)):
            cmd = [sys.executable, "-m", "workbench.train", "--recipe", str(recipes / f"{name}.yaml"), "--metrics",
                   str(out / f"{name}.json"), "--force", "--steps", str(2 if args.quick else STEPS), "--warmup",
                   str(1 if args.quick else warmup), "--quiet", "--device", device]
            if args.quick:
                cmd += ["--max-table-rows", "1000"]
            code = run_logged(cmd, log, max(10.0, min(limit, left() - 50)))
            if code != 0 or not (out / f"{name}.json").exists():
                report.append(f"| {name} | failed (exit {code}, see run.log) | | | | |")
                continue
            m = json.loads((out / f"{name}.json").read_text())
            meas, pj = m["measured"], m.get("predicted_job", {})
            err = m.get("relative_error_job", {})
            report.append(f"| {name} | {meas['step_time_s'] * 1e3:.2f} ms | {pj.get('step_time_s', float('nan')) * 1e3:.2f} ms | "
                          f"{err.get('step_time_s', float('nan')):+.1%} | {meas['peak_memory_reserved_gb'] or 0:.1f} / "
                          f"{meas['peak_memory_allocated_gb'] or 0:.1f} GB | {pj.get('peak_memory_gb', float('nan')):.1f} GB |")
            print(f"[check] {name}: {meas['step_time_s'] * 1e3:.2f} ms ({time.monotonic() - began:.0f} s)", flush=True)

        # 2. both under the profiler, the eager one first (one worker process each: a free GPU for each)
        names = [name for name, _ in reversed(RUNS)]
        profile_dir = Path(tmp) / "profile"
        budget = left() - CHECK_RESERVE_S
        cmd = [sys.executable, str(HERE / "train_profile.py"), "--out", str(profile_dir), "--recipes", str(recipes),
               "--runs", ",".join(names), "--budget-s", str(budget), "--device", device, "--stack", "off"]
        if args.quick:
            cmd += ["--max-table-rows", "1000", "--warmup", "1", "--steps", "1", "--timed", "1"]
        code = run_logged(cmd, log, budget) if budget >= 25 else f"skipped, {budget:.0f} s left"
        log.writelines(f"\n--- {w.name}\n{w.read_text()[-20000:]}" for w in sorted(profile_dir.glob("*.log")))
        summaries = _merge_profiles(profile_dir, out, names)
        done = {s["run"] for s in summaries}
        for s in summaries:
            walls = ", ".join(f"{w:.1f}" for w in s["wall_ms_profiled"])
            report += ["", f"## Profile of {s['run']}", "",
                       (f"wall {s['step_wall_ms']:.1f} ms (profiled steps {walls}), busy {s['busy_ms']:.1f} ms, "
                        f"kernels {s['kernel_ms']:.1f} ms, idle gap {s['idle_gap_ms']:.2f} ms, "
                        f"{s['events_per_step']:.0f} kernels/step, predicted {s['predicted_step_ms']:.1f} ms"), "",
                       "| class | measured | predicted |", "|---|---|---|"]
            report += [f"| {c['class']} | {c['measured_ms']:.2f} | {c['predicted_ms']:.2f} |" for c in s["classes"]]
        for name in names:
            if name not in done:
                report += ["", f"## Profile of {name}: failed or skipped ({code}, see run.log)"]

        # 3. the update against the float64 reference, in its own process, last
        report.append("")
        if left() >= 20:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--check-only"]
            code = run_logged(cmd + (["--quick"] if args.quick else []), log, max(20.0, left()))
            check = json.loads((out / "check.json").read_text()) if (out / "check.json").exists() else {
                "ok": False, "error": f"check exited {code} without check.json (see run.log)"}
            report += _check_report(check)
        else:
            check = {"ok": None}
            report += [f"## Update check: skipped ({left():.0f} s left)"]
    print(f"[check] update ok={check.get('ok')} ({time.monotonic() - began:.0f} s)", flush=True)
    report += ["", f"Total {time.monotonic() - began:.0f} s."]
    (out / "REPORT.md").write_text("\n".join(report) + "\n")
    log.close()
    print("\n".join(report), flush=True)
    return 1 if check.get("ok") is False else 0


if __name__ == "__main__":
    sys.exit(main())
