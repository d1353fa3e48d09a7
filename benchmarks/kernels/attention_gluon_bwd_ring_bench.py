"""The Gluon attention backward's Q/dO ring depth (``workbench/kernels/attention_gluon_bwd.py``, issue 20): are the
refused 2-stage configs (and a 4-stage one) right on the 20 attention shapes of shapes.yaml, and how fast are they
next to the 3-stage default, the Triton backward and SDPA's cuDNN, on an sm_90 GPU.

    python3 benchmarks/kernels/attention_gluon_bwd_ring_bench.py --out DIR --budget-s 190     # H200: <= 200 s

GPU run. A config that is wrong may also fault (an illegal instruction poisons the CUDA context for good), so every
variant runs in processes of its own (the timed ones one after the other: one process times the GPU at a time):

1. Checks (parallel, one process per job): every variant of ``RING_CONFIGS`` at every (head_dim, causal) whose
   shared memory it fits, on ``PROBE`` and on that bucket's shapes of the 20: its dQ, dK, dV against the 3-stage
   default's on the same inputs (relative Frobenius error within ``attention.TOLERANCE["bf16"]`` per gradient; the
   default itself matched SDPA's fp32 math to 0.0025 on all 20 shapes on the H200), untimed. They also fill
   Triton's disk cache for the timed phases.
2. Baseline process: per shape, the Gluon forward (its pinned config), then forward + backward for the 3-stage
   default (``default_config``), the Triton backward and SDPA's cuDNN backend, timed in the same alternating
   ``broad_shapes.Timer`` rounds (do_bench medians; fwd+bwd ms, as attention_gluon_bwd_bench.py).
3. One process per variant that the checks found right somewhere, in turn while the budget lasts: per shape it
   was right on, its gradients against the default's again, then, if right, its forward + backward timed alone.
   A process that crashes or passes its share of the time leaves its finished rows; the next variant goes on.

Between 1 and 2, where the image has compute-sanitizer, ``SANITIZE_RUNS``: racecheck on the 2-stage ring's NaN
case and memcheck on the ragged sequence's illegal instruction (one backward each, small shapes).

The ring configs go through ``attention_gluon_bwd.launch_backward`` (the checked wrapper refuses them: they are
not in ``config_space``). Writes DIR/ring.csv and DIR/rows.jsonl (one row per check, timing and sanitizer run),
DIR/REPORT.md, DIR/environment.json, DIR/workers.log and DIR/sanitize.log (six files); prints progress. The lead
decides the wiring (``BACKWARD_BY_BUCKET``) from it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

RING_CONFIGS = [((64, 128, 2), False), ((64, 128, 2), True), ((64, 128, 3), True), ((64, 128, 4), False),
                ((64, 64, 2), True), ((64, 64, 2), False), ((64, 64, 3), False), ((128, 128, 2), False)]
"""((BLOCK_M, BLOCK_N, NUM_STAGES), STRICT_ORDER) tried beside the default 64x128x3: the 2-stage rings the H200 run
of 2026-12-02 found wrong, 3- and 4-stage rings of the same tiles (does depth 2 alone fail?), and the kernel's
STRICT_ORDER variant (fenced barrier inits, dS^T stored before the register-A GEMMs: the module docstring's
hypothesis) on 2 and 3 stages. Each runs only at the head dims whose shared memory it fits (``shared_bytes``). In
priority order: the timed phase runs them in turn while the budget lasts (the probe checks all of them)."""
PROBE = dict(id="probe", name="probe-gqa2-s1024", batch=2, seq=1024, heads_q=4, heads_kv=2)
"""The first check input of every (head_dim, causal): GQA 2, 16 query blocks of 64 a head (the ring wraps often)."""
CHECK_SHARE = 0.25
"""Share of the budget the parallel checks may take; a guess (the 2026-12-02 run built and probed 18 configs in 15 s
on 14 processes), calibrate me from the process table of DIR/REPORT.md."""
REPORT_RESERVE_S = 8.0
BASELINE_SHARE = 0.22
SANITIZE_RUNS = {  # worker -> (compute-sanitizer tool, seconds at most): what the 2026-12-02 H200 runs left open
    "sanitize-racecheck-64x128x2": ("racecheck", 22.0),  # the 2-stage ring's NaN dQ at S = 256, d = 64, full
    "sanitize-memcheck-ragged": ("memcheck", 16.0),  # the default's illegal instruction at S = 333, d = 128, GQA 4
}
SANITIZE_SHAPES = {"sanitize-racecheck-64x128x2": ((64, 128, 2), dict(batch=2, heads_q=4, heads_kv=4, seq=256,
                                                                        head_dim=64, causal=False)),
                   "sanitize-memcheck-ragged": ((64, 128, 3), dict(batch=1, heads_q=8, heads_kv=2, seq=333,
                                                                     head_dim=128, causal=False))}
"""Share of the budget the baseline process may take; a guess (the 2026-12-02 run timed 6 candidates on 20 shapes
in ~110 s), calibrate me from DIR/REPORT.md's process times."""
FIELDS = ["id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "impl", "config", "ms",
          "tflops", "flops", "rel_err_dq", "rel_err_dk", "rel_err_dv", "status", "error", "seconds"]
GRADS = ("dq", "dk", "dv")


def label(tiles: tuple, strict: bool = False) -> str:
    return "gluon {}x{} s{}".format(*tiles) + (" strict" if strict else "")


def worker_name(tiles: tuple, strict: bool) -> str:
    return "x".join(map(str, tiles)) + ("-strict" if strict else "")


def as_config(tiles: tuple, strict: bool = False) -> dict:
    return dict(zip(("BLOCK_M", "BLOCK_N", "NUM_STAGES"), tiles), STRICT_ORDER=strict)


def fits(tiles: tuple, head_dim: int) -> bool:
    from workbench.kernels.attention_gluon import SM90_SHARED_BYTES
    from workbench.kernels.attention_gluon_bwd import shared_bytes

    return shared_bytes(as_config(tiles), head_dim) <= SM90_SHARED_BYTES


# ------------------------------------------------------------------------------------------------ GPU workers
def _shape_base(shape: dict) -> dict:
    from workbench.kernels.attention import flops

    b, s, hq, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "head_dim", "causal"))
    return dict({key: shape[key] for key in ("id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim")},
                causal=int(bool(causal)), flops=flops(b, hq, s, d, bool(causal), "fwd_bwd"))


def _forward(q, k, v, causal: bool):
    from workbench.kernels import attention_gluon

    config = getattr(attention_gluon, "PINNED_FORWARD", {}).get((q.shape[-1], causal))
    return attention_gluon.gluon_attention_forward(q, k, v, causal, config=config)


def _gluon(tiles: tuple, do, q, k, v, causal: bool, strict: bool = False):
    """fwd+bwd-ready backward of a ring config, past the checked wrapper's config_space (module doc)."""
    from workbench.kernels import attention_gluon_bwd as bwd

    config, scale = as_config(tiles, strict), q.shape[-1] ** -0.5
    return lambda o, lse: bwd.launch_backward(do, q, k, v, o, lse, causal, scale, config)


def baseline_rows(shape: dict, timer, tensors: tuple | None = None) -> list[dict]:
    """One shape's rows: the 3-stage default, the Triton backward and SDPA's cuDNN, fwd+bwd timed together, on
    ``tensors`` (q, k, v, dO) or fresh random inputs."""
    import attention_candidates
    import torch

    from workbench.kernels.attention import flash_attention_bwd
    from workbench.kernels.attention_gluon_bwd import default_config

    base, causal = _shape_base(shape), bool(shape["causal"])
    q, k, v, do = tensors or attention_candidates.inputs(shape, "cuda", torch.bfloat16)
    default = tuple(default_config(shape["head_dim"], causal)[key] for key in ("BLOCK_M", "BLOCK_N", "NUM_STAGES"))
    backwards = {label(default): _gluon(default, do, q, k, v, causal),
                 "triton_bwd": lambda o, lse: flash_attention_bwd(do, q, k, v, o, lse, causal)}
    fns = {name: (lambda bwd=bwd: bwd(*_forward(q, k, v, causal))) for name, bwd in backwards.items()}
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    sdpa, outputs, errors = attention_candidates.sdpa_fns(shape, "fwd_bwd", (qg, kg, vg, do), True)
    outputs.clear()
    sdpa = {name: fn for name, fn in sdpa.items() if name == "sdpa_cudnn"}  # the reference
    rows = {name: dict(base, impl=name, config="") for name in [*fns, *sdpa]}
    if "sdpa_cudnn_error" in errors:
        rows["sdpa_cudnn"] = dict(base, impl="sdpa_cudnn", config="", error=errors["sdpa_cudnn_error"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = timer.rounds({**fns, **sdpa})
    for name, row in rows.items():
        if name in times:
            row.update(ms=times[name], tflops=row["flops"] / times[name] / 1e9, status="timed")
        row["phase"] = "timed"
    return list(rows.values())


def baseline_worker(shapes: list[dict], emit, deadline: float) -> None:
    """``baseline_rows`` of every shape while the budget lasts; a shape that fails is an error row."""
    import broad_shapes
    import torch

    timer = broad_shapes.Timer(True)
    for shape in shapes:
        if time.monotonic() > deadline:
            emit(dict(_shape_base(shape), impl="baseline", error="budget: not run"))
            continue
        try:
            rows = baseline_rows(shape, timer)
        except Exception as exc:  # noqa: BLE001 - recorded, the next shape goes on
            rows = [dict(_shape_base(shape), impl="baseline", error=broad_shapes._error_text(exc))]
        for row in rows:
            emit(row)
        torch.cuda.empty_cache()


def ring_worker(tiles: tuple, strict: bool, shapes: list[dict], emit, deadline: float, time_it: bool = True) -> None:
    """Per shape: the variant's gradients against the default's, then (``time_it``) if right its fwd+bwd time. Rows
    carry ``phase``: "check" (untimed) or "timed"."""
    import attention_candidates
    import broad_shapes
    import torch

    from workbench.kernels.attention import TOLERANCE
    from workbench.kernels.attention_gluon_bwd import default_config

    timer = broad_shapes.Timer(True)
    for shape in shapes:
        base, causal = _shape_base(shape), bool(shape["causal"])
        row = dict(base, impl=label(tiles, strict), config=json.dumps(as_config(tiles, strict)),
                   phase="timed" if time_it else "check")
        if time.monotonic() > deadline:
            emit(dict(row, error="budget: not run"))
            continue
        try:
            q, k, v, do = attention_candidates.inputs(shape, "cuda", torch.bfloat16)
            default = tuple(default_config(shape["head_dim"], causal)[key]
                            for key in ("BLOCK_M", "BLOCK_N", "NUM_STAGES"))
            o, lse = _forward(q, k, v, causal)
            reference = _gluon(default, do, q, k, v, causal)(o, lse)
            ring = _gluon(tiles, do, q, k, v, causal, strict)
            grads = ring(o, lse)
            torch.cuda.synchronize()  # a fault surfaces here (and stays: every later shape records it too)
            errors = {f"rel_err_{g}": broad_shapes.relative_error(got, ref)
                      for g, got, ref in zip(GRADS, grads, reference)}
            worst = max(errors.values())
            row.update(errors, status="right" if worst <= TOLERANCE["bf16"] else "wrong")
            del grads, reference
            if row["status"] == "right" and time_it:
                ms = timer.rounds({"ring": lambda: ring(*_forward(q, k, v, causal))})["ring"]
                row.update(ms=ms, tflops=row["flops"] / ms / 1e9)
        except Exception as exc:  # noqa: BLE001 - recorded, the next shape goes on
            row.update(status="error", error=broad_shapes._error_text(exc))
        emit(row)
        q = k = v = do = o = lse = None
        torch.cuda.empty_cache()


def worker_main(args) -> int:
    """One worker process (``--worker baseline`` or ``--worker 64x128x2``): rows to --rows as JSON lines."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import broad_shapes

    deadline = time.monotonic() + args.budget_s
    rows_file = open(args.rows, "a", buffering=1)  # noqa: SIM115 - one line per row, flushed as it lands

    def emit(row: dict) -> None:
        rows_file.write(json.dumps(row) + "\n")
        print(f"  {row['id']} {row['impl']}: {row.get('status', '')} {row.get('ms', '')} {row.get('error', '')}",
              flush=True)

    shapes = broad_shapes.load_shapes()["attention"]
    if args.worker == "baseline":
        baseline_worker(shapes, emit, deadline)
        return 0
    if args.worker in SANITIZE_SHAPES:
        return sanitize_worker(args.worker, emit)
    name, _, strict = args.worker.partition("-")
    tiles = tuple(int(x) for x in name.split("x"))
    ids = set(args.ids.split(",")) if args.ids else None
    ring_worker(tiles, strict == "strict", [s for s in shapes if fits(tiles, s["head_dim"]) and (ids is None or
                                                                                                s["id"] in ids)],
                emit, deadline)
    return 0


def sanitize_worker(name: str, emit) -> int:
    """One backward of ``SANITIZE_SHAPES[name]`` (O and lse from torch in fp32, so only the backward's kernels and
    torch's run), meant to run under compute-sanitizer (``SANITIZE_RUNS``): its report goes to DIR/sanitize.log."""
    import torch

    from workbench.kernels import attention_gluon_bwd

    tiles, shape = SANITIZE_SHAPES[name]
    b, hq, hkv, s, d, causal = (shape[k] for k in ("batch", "heads_q", "heads_kv", "seq", "head_dim", "causal"))
    generator = torch.Generator(device="cuda").manual_seed(s)
    q, do = (torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, generator=generator) for _ in range(2))
    k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=generator) for _ in range(2))
    scale = d ** -0.5
    scores = (q.float() @ k.float().repeat_interleave(hq // hkv, 1).transpose(-1, -2)) * scale  # [B, Hq, S, S]
    lse = torch.logsumexp(scores, -1).contiguous()  # lse: [B, Hq, S], natural log
    o = (scores.softmax(-1) @ v.float().repeat_interleave(hq // hkv, 1)).to(q.dtype)
    row = dict(id="sanitize", name=name, impl=label(tiles), config=json.dumps(as_config(tiles)), phase="sanitize")
    try:
        grads = attention_gluon_bwd.launch_backward(do, q, k, v, o, lse, causal, scale, as_config(tiles))
        torch.cuda.synchronize()
        row.update(status="ran", error="NaN in a gradient" if any(g.isnan().any().item() for g in grads) else "")
    except Exception as exc:  # noqa: BLE001 - the fault the sanitizer is here to place
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:300])
    emit(row)
    return 0


def _probe_job(job: tuple) -> list[dict]:
    """Check worker (a process of its own: a fault is sticky): one variant at one (head_dim, causal), on PROBE and
    on the shapes of shapes.yaml in that bucket, its gradients against the default's (which it builds too),
    untimed, within ``deadline`` (monotonic seconds)."""
    tiles, strict, head_dim, causal, deadline = job
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import broad_shapes

    shapes = [s for s in broad_shapes.load_shapes()["attention"]
              if s["head_dim"] == head_dim and bool(s["causal"]) == causal]
    rows, started = [], time.perf_counter()
    try:
        ring_worker(tiles, strict, [dict(PROBE, head_dim=head_dim, causal=causal), *shapes], rows.append, deadline,
                    time_it=False)
    except Exception as exc:  # noqa: BLE001 - a variant that does not build or run is a result
        rows.append(dict(id="probe", impl=label(tiles, strict), head_dim=head_dim, causal=int(causal), phase="check",
                         status="error", error=broad_shapes._error_text(exc)))
    for row in rows:
        row["seconds"] = round(time.perf_counter() - started, 1)
    return rows


def check_all(out: Path, limit_s: float, processes: int) -> dict:
    """Every variant at every (head_dim, causal) it fits (``_probe_job``), in parallel processes, one per job;
    their rows go to rows.jsonl. A job without an answer by ``limit_s`` is recorded as timed out (a hung
    pipeline); its process is killed."""
    import multiprocessing

    deadline = time.monotonic() + limit_s - 10.0  # a job stops starting shapes here; the pool waits until limit_s
    jobs = [(tiles, strict, d, causal, deadline) for tiles, strict in RING_CONFIGS for d in (64, 128)
            if fits(tiles, d) for causal in (False, True)]
    started = time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(max(1, processes), maxtasksperchild=1)
    rows = []
    try:
        pending = {pool.apply_async(_probe_job, (job,)): job for job in jobs}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                tiles, strict, d, causal, _ = pending.pop(handle)
                try:
                    new = handle.get()
                except Exception as exc:  # noqa: BLE001 - a crashed worker (a fault kills it)
                    new = [dict(id="probe", impl=label(tiles, strict), head_dim=d, causal=int(causal), phase="check",
                                status="error", error=f"{type(exc).__name__}: {exc}"[:300])]
                rows += new
                statuses = [r.get("status") for r in new]
                print(f"  checked {label(tiles, strict)} d{d} {'causal' if causal else 'full'}: "
                      f"{statuses.count('right')} right, {statuses.count('wrong')} wrong of {len(new)} "
                      f"{new[-1].get('error', '')[:80]}", flush=True)
            time.sleep(0.2)
        for tiles, strict, d, causal, _ in pending.values():
            rows.append(dict(id="probe", impl=label(tiles, strict), head_dim=d, causal=int(causal), phase="check",
                             status="timeout", error=f"no answer within {limit_s:.0f} s (a slow compile or a hung "
                             "pipeline)"))
    finally:
        pool.terminate()
        pool.join()
    with open(out / "rows.jsonl", "a") as stream:
        for row in rows:
            stream.write(json.dumps(row) + "\n")
    return dict(worker=f"checks ({len(jobs)} jobs)", status="ok", seconds=round(time.monotonic() - started, 1),
                tail=[f"{sum(r.get('status') == 'right' for r in rows)} right, "
                      f"{sum(r.get('status') == 'wrong' for r in rows)} wrong of {len(jobs)}"])


# ------------------------------------------------------------------------------------------------ parent, report
def run_worker(name: str, out: Path, seconds: float, prefix: tuple = (), log_name: str = "workers.log",
               ids: list | None = None, script: Path | None = None, extra: tuple = ()) -> dict:
    """Run one worker process (under ``prefix``, e.g. compute-sanitizer) for at most ``seconds``, its output appended
    to DIR/``log_name``; its exit status, wall time and last lines. ``script``: the bench whose ``--worker`` it runs
    (this one by default; attention_gluon_bwd_variants.py reuses this), ``extra``: more arguments for it."""
    started = time.monotonic()
    command = [*prefix, sys.executable, str(script or Path(__file__).resolve()), "--worker", name, "--rows",
               str(out / "rows.jsonl"), "--out", str(out), "--budget-s", str(max(1.0, seconds - 5.0)),
               *(("--ids", ",".join(ids)) if ids else ()), *extra]
    with open(out / log_name, "a") as stream:
        stream.write(f"\n===== {name}: {' '.join(command)}\n")
        stream.flush()
        start = stream.tell()
        try:
            done = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, timeout=seconds, check=False)
            status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        except subprocess.TimeoutExpired:
            status = f"killed after {seconds:.0f} s (a hung pipeline or a slow compile)"
    with open(out / log_name, errors="replace") as stream:
        stream.seek(start)
        tail = stream.read().strip().splitlines()[-3:]
    print(f"{name}: {status} in {time.monotonic() - started:.0f} s", flush=True)
    return dict(worker=name, status=status, seconds=round(time.monotonic() - started, 1), tail=tail)


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH or under /usr/local/cuda*/bin (the H200 image has it: KINDS.md), else None."""
    import glob
    import shutil

    found = shutil.which("compute-sanitizer") or sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def load_rows(out: Path) -> list[dict]:
    path = out / "rows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _worst(row: dict) -> float | None:
    errors = [row[f"rel_err_{g}"] for g in GRADS if row.get(f"rel_err_{g}") is not None]
    return max(errors) if errors else None


def report(rows: list[dict], workers: list[dict], env: dict) -> str:
    """REPORT.md: per variant, right/wrong on the probe per (head_dim, causal) and on the 20 shapes, its fwd+bwd
    time against the default's and cuDNN's; per shape the times side by side."""
    from workbench.kernels import broad_report

    fmt = broad_report._fmt
    probes = [r for r in rows if r["id"] == "probe"]
    checks: dict[str, dict[str, dict]] = {}  # id -> variant -> its check row (phase 1)
    by_shape: dict[str, dict[str, dict]] = {}  # id -> implementation -> its timed row (phases 2 and 3)
    for row in rows:
        if row["id"] not in ("probe", "sanitize"):
            (checks if row.get("phase") == "check" else by_shape).setdefault(row["id"], {})[row["impl"]] = row
    default = label((64, 128, 3))
    variants = [label(tiles, strict) for tiles, strict in RING_CONFIGS]
    lines = ["# Gluon attention backward: ring depth (Q/dO stages) and STRICT_ORDER on the 20 attention shapes", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}, {env.get('gpu', '?')}). fwd+bwd ms behind the same Gluon forward, do_bench "
             "medians (broad_shapes.Timer); every variant checked against the 3-stage default's gradients on the "
             "same inputs (max relative Frobenius error of dQ, dK, dV; tolerance attention.TOLERANCE['bf16']), "
             "each in a process of its own.", "",
             "## Probe (GQA 2, S = 1024), per (head_dim, causal): max relative error against the default", "",
             "| variant | d64 full | d64 causal | d128 full | d128 causal |", "|---|---|---|---|---|"]
    for name in variants:
        cells = []
        for d, causal in ((64, 0), (64, 1), (128, 0), (128, 1)):
            r = next((p for p in probes if p["impl"] == name and p.get("head_dim") == d
                      and int(p.get("causal", -1)) == causal), None)
            worst = _worst(r) if r else None
            cells.append("-" if r is None else f"{r.get('status')}" + (f" {worst:.1e}" if worst is not None else "")
                         + (f" ({r['error'][:50]})" if r.get("error") else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## The 20 shapes (checks of phase 1; times of phase 3)", "", "| variant | right | wrong | "
              "faulted or not run | geomean default ms / variant ms (timed shapes) | geomean cuDNN ms / variant ms |",
              "|---|---|---|---|---|---|"]
    for name in variants:
        mine = [entries[name] for entries in checks.values() if name in entries]
        right = [r for r in mine if r.get("status") == "right"]
        wrong = [r for r in mine if r.get("status") == "wrong"]
        speed, vs_cudnn = [], []
        for r in (entries[name] for entries in by_shape.values() if entries.get(name, {}).get("ms")):
            other = by_shape.get(r["id"], {})
            if r.get("ms") and other.get(default, {}).get("ms"):
                speed.append(other[default]["ms"] / r["ms"])
            if r.get("ms") and other.get("sdpa_cudnn", {}).get("ms"):
                vs_cudnn.append(other["sdpa_cudnn"]["ms"] / r["ms"])
        lines.append(f"| {name} | {len(right)} | {len(wrong)} | {len(mine) - len(right) - len(wrong)} | "
                     f"{fmt(broad_report.geomean(speed) if speed else None)} | "
                     f"{fmt(broad_report.geomean(vs_cudnn) if vs_cudnn else None)} |")
    impls = [default, "triton_bwd", "sdpa_cudnn", *variants]
    lines += ["", "## Per shape (fwd+bwd ms; a variant's max relative error against the default in brackets)",
              "", "| id | shape | " + " | ".join(impls) + " |", "|---|---|" + "---|" * len(impls)]
    for sid in sorted(set(checks) | set(by_shape)):
        entries = {**checks.get(sid, {}), **{k: v for k, v in by_shape.get(sid, {}).items() if v.get("ms")}}
        any_row = next(iter(entries.values()))
        cells = []
        for impl in impls:
            r = entries.get(impl)
            worst = _worst(checks.get(sid, {}).get(impl) or r or {})
            if r is None:
                cells.append("")
            elif worst is not None:
                cells.append(f"{fmt(r.get('ms'), 4) if r.get('ms') else r.get('status')} ({worst:.1e})")
            else:
                cells.append(fmt(r.get("ms"), 4) if r.get("ms") else (r.get("error") or "-")[:40])
        shape = (f"{any_row.get('batch')} x {any_row.get('seq')}, {any_row.get('heads_q')}/{any_row.get('heads_kv')} "
                 f"x {any_row.get('head_dim')}, {'causal' if any_row.get('causal') else 'full'}")
        lines.append(f"| {sid} | {shape} | " + " | ".join(cells) + " |")
    lines += ["", "## compute-sanitizer (DIR/sanitize.log has the reports)", ""]
    lines += [f"- {r['name']}: {r['impl']}, {r.get('status')} {r.get('error', '')}" for r in rows
              if r["id"] == "sanitize"] or ["not run"]
    lines += ["", "## Processes", "", "| process | status | s | last lines |", "|---|---|---|---|"]
    lines += [f"| {w['worker']} | {w['status']} | {w['seconds']} | {' / '.join(w['tail'])[:160]} |" for w in workers]
    return "\n".join(lines) + "\n"


def gpu_main(args) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import broad_shapes

    from workbench.kernels.attention_gluon_bwd import supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset); --cpu-host runs without",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.jsonl").unlink(missing_ok=True)
    args.dry_run = False  # broad_shapes.environment reads it
    env = broad_shapes.environment(True, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    workers = [check_all(args.out, args.budget_s * CHECK_SHARE, args.workers)]
    sanitizer = find_sanitizer()
    for name, (tool, seconds) in SANITIZE_RUNS.items():
        if sanitizer is None:
            workers.append(dict(worker=name, status="no compute-sanitizer found", seconds=0, tail=[]))
            continue
        workers.append(run_worker(name, args.out, seconds, (sanitizer, "--tool", tool, "--print-limit", "40"),
                                  "sanitize.log"))
    workers.append(run_worker("baseline", args.out, args.budget_s * BASELINE_SHARE))
    right = {}  # variant -> the shapes its checks found right: the ones it is timed on
    for row in load_rows(args.out):
        if row.get("phase") == "check" and row.get("status") == "right" and row["id"] != "probe":
            right.setdefault(row["impl"], []).append(row["id"])
    timed = [(tiles, strict) for tiles, strict in RING_CONFIGS if right.get(label(tiles, strict))]
    workers += [dict(worker=label(tiles, strict), status="not timed: no shape right in the checks", seconds=0,
                     tail=[]) for tiles, strict in RING_CONFIGS if (tiles, strict) not in timed]
    for i, (tiles, strict) in enumerate(timed):
        left = started + args.budget_s - REPORT_RESERVE_S - time.monotonic()
        share = left / (len(timed) - i)
        if share < 8:
            workers.append(dict(worker=label(tiles, strict), status="budget: not run", seconds=0, tail=[]))
            continue
        workers.append(run_worker(worker_name(tiles, strict), args.out, share, ids=right[label(tiles, strict)]))
    rows = load_rows(args.out)
    with open(args.out / "ring.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    text = report(rows, workers, env)
    (args.out / "REPORT.md").write_text(text)
    print(text, flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=190.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="check processes")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one worker process
    parser.add_argument("--ids", default=None, help=argparse.SUPPRESS)  # internal: the shapes a worker times
    parser.add_argument("--rows", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        try:
            return worker_main(args)
        except Exception:  # noqa: BLE001 - the parent reads the log's tail
            traceback.print_exc()
            return 1
    return gpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
