"""Speed variants of the Gluon attention backward (``workbench/kernels/attention_gluon_bwd.py``; issue 20: fwd+bwd
geometric mean 0.80 of cuDNN, target 0.85): its ``VARIANT_KEYS`` and ring depths beside the default (the 2-stage ring),
checked and timed on the 20 attention shapes of shapes.yaml on an sm_90 GPU.

    python3 benchmarks/kernels/attention_gluon_bwd_variants.py --out DIR --budget-s 150     # H200: <= 160 s

A wrong kernel may fault, and a fault poisons the CUDA context for good, so every variant runs in processes of its
own (the ring bench's harness, ``attention_gluon_bwd_ring_bench.py``):

1. Checks (parallel, one process per variant and (head_dim, causal) it fits): on the ring bench's PROBE and that
   bucket's shapes, dQ, dK, dV against the default's on the same inputs (relative Frobenius error within
   ``attention.TOLERANCE["bf16"]`` each), untimed; they also fill Triton's disk cache for the phases after.
2. Baseline process: per shape, forward + backward of the default, the Triton backward and SDPA's cuDNN in the same
   alternating rounds (the ring bench's ``baseline_rows``); then SDPA's fp32 math gradients of batch 0's first kv
   group (``attention_gluon_bwd_bench.reference_grads``), saved to a scratch folder outside DIR, with the default
   checked against them.
3. One process per variant that the checks found right somewhere, in turn while the budget lasts: per shape it was
   right on, its gradients against the default's and against SDPA's fp32 ones, then, if right on both, the variant
   and the default timed in the same alternating rounds (fwd+bwd behind the same Gluon forward).

Inputs are seeded per shape (``SEED``): every process builds the same q, k, v, dO. Writes DIR/variants.csv,
DIR/rows.jsonl, DIR/REPORT.md, DIR/environment.json and DIR/workers.log; prints progress. The lead decides the
wiring (``config_space``, ``BACKWARD_BY_BUCKET``) from it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import attention_gluon_bwd_ring_bench as ring  # noqa: E402  (same folder: the harness this bench reuses)

DEFAULT = dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2)
"""The default of every bucket (``attention_gluon_bwd.default_config``: the 2-stage ring, its step built once),
the yardstick of every variant. (Until 2026-12-02 the 3-stage ring: the runs before this list's.)"""
VARIANTS = {
    "split2": dict(DEFAULT, GROUP_SPLIT=2),
    "split4": dict(DEFAULT, GROUP_SPLIT=4),
    "split8": dict(DEFAULT, GROUP_SPLIT=8),
}
"""Variant name -> config (``attention_gluon_bwd.VARIANT_KEYS``), in priority order (the timed phase runs them in
turn while the budget lasts); each runs on the shapes ``applies`` lets it. This list: the GQA group's query heads
split between GROUP_SPLIT programs per key block (dK, dV added by atomics), for shapes whose B * Hkv * key blocks
programs leave SMs idle or unevenly loaded (a05, MQA 16 x 1024 causal: 128 programs, 8x apart in work). The earlier
runs, with their own lists (git history of this file): the GEMM-order and buffer variants
(``benchmarks/results/h200/kernels/gluon_attention_bwd_variants/``: DQ_UNDER_DK right, 0.990x), the ring-fault guards
(``gluon_attention_bwd_guards/``: none cured anything under ptxas 12.8), those guards under 13.0
(``gluon_attention_bwd_ptxas/variants_ptxas13/``: every variant right; the 2-stage ring 1.049x the 3-stage), the
speed list under 13.0 (``speed_variants_ptxas13/``: nothing beats the 2-stage ring, 1.052x) and the one-step build
(``gluon_attention_bwd_one_step/``: the 2-stage ring right under ptxas 12.8, 1.035x the 3-stage)."""
SEED = 20_26_12_02
CHECK_SHARE = 0.4
"""Share of the budget the parallel checks may take; a guess (22 jobs took 25 s on 14 processes, the variants run
of 2026-12-02; this list makes 46), calibrate me from the process table of DIR/REPORT.md."""
BASELINE_SHARE = 0.33
"""Share of the budget the baseline process may take; a guess (the ring bench's timed 17 of the 20 shapes in 24 s
without SDPA references), calibrate me from DIR/REPORT.md."""
TIMED_ROUNDS = 2
"""Alternating do_bench rounds of a variant and the default (the baseline takes broad_shapes' default): fewer, so
that the variants fit the budget; the two share every round, so their ratio keeps its precision (a guess)."""
REPORT_RESERVE_S = 8.0
BASELINE = "baseline"
DEFAULT_LABEL = ring.label(tuple(DEFAULT[key] for key in ("BLOCK_M", "BLOCK_N", "NUM_STAGES")))
"""The default's name in the rows (the ring bench's baseline rows name it so)."""
FIELDS = ["id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "impl", "config", "phase", "ms",
          "default_ms", "tflops", "flops", "rel_err_dq", "rel_err_dk", "rel_err_dv", "sdpa_err_dq", "sdpa_err_dk",
          "sdpa_err_dv", "status", "error", "seconds"]
GRADS = ("dq", "dk", "dv")


def fits(config: dict, head_dim: int) -> bool:
    """The config passes ``check_variant`` at this head dim (keys, DS_BUFFERS, shared memory)."""
    from workbench.kernels._common import KernelInputError
    from workbench.kernels.attention_gluon_bwd import check_variant

    try:
        check_variant(config, head_dim)
    except KernelInputError:
        return False
    return True


def applies(config: dict, shape: dict) -> bool:
    """The config fits the shape's head dim and, with a GROUP_SPLIT, splits its GQA group (> 1) evenly."""
    split, group = config.get("GROUP_SPLIT", 1), shape["heads_q"] // shape["heads_kv"]
    return fits(config, shape["head_dim"]) and group % split == 0 and (split == 1 or group > 1)


# ------------------------------------------------------------------------------------------------ GPU workers
def shape_inputs(shape: dict):
    """q, k, v, dO (bf16, CUDA) of a shape, the same in every process (seeded by the shape's id)."""
    import attention_candidates
    import torch

    torch.manual_seed(SEED + zlib.crc32(shape["id"].encode()))
    return attention_candidates.inputs(shape, "cuda", torch.bfloat16)


def _backward(config: dict, do, q, k, v, causal: bool):
    """The backward of a checked variant config behind a forward's (o, lse)."""
    from workbench.kernels import attention_gluon_bwd as bwd

    bwd.check_variant(config, q.shape[-1])
    scale = q.shape[-1] ** -0.5
    return lambda o, lse: bwd.launch_backward(do, q, k, v, o, lse, causal, scale, config)


def _errors(grads, reference, prefix: str) -> dict:
    import broad_shapes

    return {f"{prefix}_{g}": broad_shapes.relative_error(got, ref) for g, got, ref in zip(GRADS, grads, reference)}


def _sdpa_errors(grads, reference) -> dict:
    """Errors of (dq, dk, dv) on ``reference_grads``' slice (batch 0's first kv group), as sdpa_err_*."""
    import attention_gluon_bwd_bench

    return {key.replace("rel_err", "sdpa_err"): value
            for key, value in attention_gluon_bwd_bench.grad_errors(grads, reference).items()}


def _status(row: dict, tolerance: float) -> str:
    errors = [row[key] for key in row if key.startswith(("rel_err_", "sdpa_err_")) and row[key] is not None]
    return "right" if errors and max(errors) <= tolerance else "wrong"


def variant_worker(name: str, shapes: list[dict], emit, deadline: float, cache: Path | None, time_it: bool) -> None:
    """Per shape: the variant's gradients against the default's (and, with ``cache``, SDPA's fp32 ones the baseline
    saved there), then (``time_it``) if right, the variant and the default timed in the same rounds."""
    import broad_shapes
    import torch

    from workbench.kernels.attention import TOLERANCE

    config, timer = VARIANTS[name], broad_shapes.Timer(True, rounds=TIMED_ROUNDS)
    for shape in shapes:
        base, causal = ring._shape_base(shape), bool(shape["causal"])
        row = dict(base, impl=name, config=json.dumps(config), phase="timed" if time_it else "check")
        if time.monotonic() > deadline:
            emit(dict(row, status="not run", error="budget: not run"))
            continue
        try:
            q, k, v, do = shape_inputs(shape)
            o, lse = ring._forward(q, k, v, causal)
            default, variant = _backward(DEFAULT, do, q, k, v, causal), _backward(config, do, q, k, v, causal)
            reference = default(o, lse)
            grads = variant(o, lse)
            torch.cuda.synchronize()  # a fault surfaces here (and stays: every later shape records it too)
            row.update(_errors(grads, reference, "rel_err"))
            if cache is not None:
                path = cache / f"{shape['id']}.pt"
                if path.exists():
                    row.update(_sdpa_errors(grads, torch.load(path)))
                else:
                    row["error"] = "no SDPA reference (the baseline did not reach this shape)"
            row["status"] = _status(row, TOLERANCE["bf16"])
            del grads, reference
            if row["status"] == "right" and time_it:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    times = timer.rounds({"default": lambda: default(*ring._forward(q, k, v, causal)),
                                          "variant": lambda: variant(*ring._forward(q, k, v, causal))})
                row.update(ms=times["variant"], default_ms=times["default"], tflops=row["flops"] / times["variant"]
                           / 1e9)
        except Exception as exc:  # noqa: BLE001 - recorded, the next shape goes on
            row.update(status="error", error=broad_shapes._error_text(exc))
        emit(row)
        q = k = v = do = o = lse = None
        torch.cuda.empty_cache()


def baseline_worker(shapes: list[dict], emit, deadline: float, cache: Path) -> None:
    """The ring bench's baseline rows (default, Triton backward, cuDNN; timed) per shape on the seeded inputs, then
    SDPA's fp32 gradients into ``cache`` and the default checked against them (a "reference" row)."""
    import attention_gluon_bwd_bench
    import broad_shapes
    import torch

    from workbench.kernels.attention import TOLERANCE

    timer = broad_shapes.Timer(True)
    for shape in shapes:
        base, causal = ring._shape_base(shape), bool(shape["causal"])
        if time.monotonic() > deadline:
            emit(dict(base, impl=BASELINE, status="not run", error="budget: not run"))
            continue
        try:
            q, k, v, do = shape_inputs(shape)
            rows = ring.baseline_rows(shape, timer, (q, k, v, do))
            reference = attention_gluon_bwd_bench.reference_grads(q, k, v, do, causal)
            torch.save(reference, cache / f"{shape['id']}.pt")
            o, lse = ring._forward(q, k, v, causal)
            row = dict(base, impl=DEFAULT_LABEL, config=json.dumps(DEFAULT), phase="reference",
                       **_sdpa_errors(_backward(DEFAULT, do, q, k, v, causal)(o, lse), reference))
            rows.append(dict(row, status=_status(row, TOLERANCE["bf16"])))
        except Exception as exc:  # noqa: BLE001 - recorded, the next shape goes on
            rows = [dict(base, impl=BASELINE, status="error", error=broad_shapes._error_text(exc))]
        for row in rows:
            emit(row)
        q = k = v = do = o = lse = reference = None
        torch.cuda.empty_cache()


def worker_main(args) -> int:
    """One worker process (``--worker baseline`` or ``--worker <variant>``): rows to --rows as JSON lines."""
    import broad_shapes

    deadline = time.monotonic() + args.budget_s
    rows_file = open(args.rows, "a", buffering=1)  # noqa: SIM115 - one line per row, flushed as it lands

    def emit(row: dict) -> None:
        rows_file.write(json.dumps(row) + "\n")
        print(f"  {row['id']} {row['impl']} {row.get('phase', '')}: {row.get('status', '')} {row.get('ms', '')} "
              f"{row.get('error', '')}", flush=True)

    shapes = broad_shapes.load_shapes()["attention"]
    if args.worker == BASELINE:
        baseline_worker(shapes, emit, deadline, args.cache)
        return 0
    ids = set(args.ids.split(",")) if args.ids else None
    config = VARIANTS[args.worker]
    variant_worker(args.worker, [s for s in shapes if applies(config, s) and (ids is None or s["id"] in ids)],
                   emit, deadline, args.cache, time_it=True)
    return 0


def _check_job(job: tuple) -> list[dict]:
    """Check worker (a process of its own): one variant at one (head_dim, causal), on the ring bench's PROBE and the
    bucket's shapes, against the default's gradients, untimed, within ``deadline`` (monotonic seconds)."""
    name, head_dim, causal, deadline = job
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import broad_shapes

    shapes = [s for s in broad_shapes.load_shapes()["attention"]
              if s["head_dim"] == head_dim and bool(s["causal"]) == causal]
    rows, started = [], time.perf_counter()
    try:
        probe = dict(ring.PROBE, head_dim=head_dim, causal=causal)
        variant_worker(name, [s for s in (probe, *shapes) if applies(VARIANTS[name], s)], rows.append, deadline,
                       None, time_it=False)
    except Exception as exc:  # noqa: BLE001 - a variant that does not build or run is a result
        rows.append(dict(id="probe", impl=name, head_dim=head_dim, causal=int(causal), phase="check", status="error",
                         error=broad_shapes._error_text(exc)))
    for row in rows:
        row["seconds"] = round(time.perf_counter() - started, 1)
    return rows


def check_all(out: Path, limit_s: float, processes: int) -> dict:
    """Every variant at every (head_dim, causal) it fits (``_check_job``), in parallel processes, one per job; their
    rows go to rows.jsonl. A job without an answer by ``limit_s`` is recorded as timed out; its process is killed."""
    import multiprocessing

    import broad_shapes

    deadline = time.monotonic() + limit_s - 10.0  # a job stops starting shapes here; the pool waits until limit_s
    shapes = broad_shapes.load_shapes()["attention"]
    jobs = [(name, d, causal, deadline) for name, config in VARIANTS.items() for d in (64, 128) if fits(config, d)
            for causal in (False, True)
            if any(applies(config, s) for s in (dict(ring.PROBE, head_dim=d), *shapes)
                   if s["head_dim"] == d and bool(s.get("causal", causal)) == causal)]
    started, rows = time.monotonic(), []
    pool = multiprocessing.get_context("spawn").Pool(max(1, processes), maxtasksperchild=1)
    try:
        pending = {pool.apply_async(_check_job, (job,)): job for job in jobs}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                name, d, causal, _ = pending.pop(handle)
                try:
                    new = handle.get()
                except Exception as exc:  # noqa: BLE001 - a crashed worker (a fault kills it)
                    new = [dict(id="probe", impl=name, head_dim=d, causal=int(causal), phase="check", status="error",
                                error=f"{type(exc).__name__}: {exc}"[:300])]
                rows += new
                statuses = [r.get("status") for r in new]
                last = new[-1].get("error", "") if new else "no shape"
                print(f"  checked {name} d{d} {'causal' if causal else 'full'}: {statuses.count('right')} right, "
                      f"{statuses.count('wrong')} wrong of {len(new)} {last[:80]}", flush=True)
            time.sleep(0.2)
        rows += [dict(id="probe", impl=name, head_dim=d, causal=int(causal), phase="check", status="timeout",
                      error=f"no answer within {limit_s:.0f} s (a slow compile or a hung pipeline)")
                 for name, d, causal, _ in pending.values()]
    finally:
        pool.terminate()
        pool.join()
    with open(out / "rows.jsonl", "a") as stream:
        for row in rows:
            stream.write(json.dumps(row) + "\n")
    return dict(worker=f"checks ({len(jobs)} jobs)", status="ok", seconds=round(time.monotonic() - started, 1),
                tail=[f"{sum(r.get('status') == 'right' for r in rows)} right, "
                      f"{sum(r.get('status') == 'wrong' for r in rows)} wrong rows of {len(jobs)} jobs"])


# ------------------------------------------------------------------------------------------------ parent, report
def _worst(row: dict | None, prefix: str) -> float | None:
    errors = [row[f"{prefix}_{g}"] for g in GRADS if row and row.get(f"{prefix}_{g}") is not None]
    return max(errors) if errors else None


def _bucket(row: dict) -> str:
    return f"d{row.get('head_dim')} {'causal' if row.get('causal') else 'full'}"


def report(rows: list[dict], workers: list[dict], env: dict) -> str:
    """REPORT.md: per variant its checks (right / wrong against the default, worst error against SDPA fp32), its
    fwd+bwd speed against the default (same rounds) and cuDNN (the baseline's rounds), per bucket and over the
    shapes; per shape the times side by side."""
    from workbench.kernels import broad_report

    fmt, geomean = broad_report._fmt, broad_report.geomean
    baseline: dict[str, dict[str, dict]] = {}  # id -> impl -> baseline row (timed or reference)
    checks: dict[str, list[dict]] = {}  # variant -> its check rows
    timed: dict[str, dict[str, dict]] = {}  # variant -> id -> its timed-phase row
    for row in rows:
        phase = row.get("phase")
        if phase == "check":
            checks.setdefault(row["impl"], []).append(row)
        elif phase == "timed" and row["impl"] in VARIANTS:
            timed.setdefault(row["impl"], {})[row["id"]] = row
        elif phase in ("timed", "reference"):
            baseline.setdefault(row["id"], {})[row["impl"] + (" vs sdpa" if phase == "reference" else "")] = row
    cudnn = {sid: entries["sdpa_cudnn"]["ms"] for sid, entries in baseline.items()
             if entries.get("sdpa_cudnn", {}).get("ms")}
    default_ms = {sid: entries[DEFAULT_LABEL]["ms"] for sid, entries in baseline.items()
                  if entries.get(DEFAULT_LABEL, {}).get("ms")}
    reference = [entries[f"{DEFAULT_LABEL} vs sdpa"] for entries in baseline.values()
                 if f"{DEFAULT_LABEL} vs sdpa" in entries]
    ratio = [cudnn[sid] / default_ms[sid] for sid in cudnn if sid in default_ms]
    lines = ["# Gluon attention backward: speed variants against the default on the 20 attention shapes", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}, {env.get('gpu', '?')}). fwd+bwd ms behind the same Gluon forward, do_bench "
             "medians (broad_shapes.Timer); each variant checked against the default's dQ, dK, dV on the same seeded "
             "inputs and against SDPA's fp32 math gradients (batch 0's first kv group), tolerance "
             "attention.TOLERANCE['bf16'], each in processes of its own.", "",
             f"Baseline: the default is right against SDPA fp32 on "
             f"{sum(r.get('status') == 'right' for r in reference)} of {len(reference)} shapes (worst "
             f"{fmt(max((_worst(r, 'sdpa_err') or 0.0) for r in reference) if reference else None, 4)}); its fwd+bwd "
             f"geomean cuDNN ms / default ms {fmt(geomean(ratio) if ratio else None)} over {len(ratio)} shapes "
             "(target 0.85, no shape below 0.75).", "",
             "## Variants", "",
             "Speed-up: geomean default ms / variant ms over the shapes it was timed on (same rounds); vs cuDNN: "
             "geomean cuDNN ms / variant ms there, the default's in brackets.", "",
             "| variant | config | checks right / wrong / other (vs default) | right vs SDPA (worst error) | timed | "
             "speed-up | d64 full | d64 causal | d128 full | d128 causal | vs cuDNN (default) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, config in VARIANTS.items():
        mine = [r for r in checks.get(name, []) if r["id"] != "probe"]
        right = sum(r.get("status") == "right" for r in mine)
        wrong = sum(r.get("status") == "wrong" for r in mine)
        done = [r for r in timed.get(name, {}).values() if r.get("sdpa_err_dq") is not None]
        sdpa_right = sum(r.get("status") == "right" for r in done)
        worst = max((_worst(r, "sdpa_err") or 0.0 for r in done), default=None)
        fast = [r for r in timed.get(name, {}).values() if r.get("ms") and r.get("default_ms")]
        speed = {key: [r["default_ms"] / r["ms"] for r in fast if key is None or _bucket(r) == key]
                 for key in (None, "d64 full", "d64 causal", "d128 full", "d128 causal")}
        mine_cudnn = [cudnn[r["id"]] / r["ms"] for r in fast if r["id"] in cudnn]
        theirs = [cudnn[r["id"]] / default_ms[r["id"]] for r in fast if r["id"] in cudnn and r["id"] in default_ms]
        cells = [fmt(geomean(v)) if v else "" for v in speed.values()]
        lines.append(f"| {name} | `{json.dumps({k: v for k, v in config.items() if DEFAULT.get(k) != v})}` | "
                     f"{right} / {wrong} / {len(mine) - right - wrong} | {sdpa_right} of {len(done)} ({fmt(worst, 4)})"
                     f" | {len(fast)} | " + " | ".join(cells) + f" | {fmt(geomean(mine_cudnn) if mine_cudnn else None)}"
                     f" ({fmt(geomean(theirs) if theirs else None)}) |")
    lines += ["", "## Probe (the ring bench's PROBE: GQA 2, S = 1024): worst error against the default", "",
              "| variant | d64 full | d64 causal | d128 full | d128 causal |", "|---|---|---|---|---|"]
    for name in VARIANTS:
        cells = []
        for bucket in ("d64 full", "d64 causal", "d128 full", "d128 causal"):
            r = next((p for p in checks.get(name, []) if p["id"] == "probe" and _bucket(p) == bucket), None)
            worst = _worst(r, "rel_err")
            cells.append("-" if r is None else f"{r.get('status')}" + (f" {worst:.1e}" if worst is not None else "")
                         + (f" ({r['error'][:50]})" if r.get("error") else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    names = list(VARIANTS)
    lines += ["", "## Per shape (fwd+bwd ms; a variant: its ms / the default's ms of the same rounds, or its check)",
              "",
              "| id | shape | default | triton_bwd | sdpa_cudnn | " + " | ".join(names) + " |",
              "|---|---|---|---|---|" + "---|" * len(names)]
    ids = sorted({r["id"] for r in rows if r.get("id") not in (None, "probe")})
    for sid in ids:
        entries = baseline.get(sid, {})
        any_row = next((r for r in rows if r.get("id") == sid), {})
        cells = [fmt(entries.get(impl, {}).get("ms"), 4) for impl in (DEFAULT_LABEL, "triton_bwd", "sdpa_cudnn")]
        for name in names:
            r = timed.get(name, {}).get(sid) or next((c for c in checks.get(name, []) if c["id"] == sid), None)
            if r is None:
                cells.append("")
            elif r.get("ms") and r.get("default_ms"):
                cells.append(f"{fmt(r['ms'], 4)} / {fmt(r['default_ms'], 4)}")
            else:
                worst = max(_worst(r, "rel_err") or 0.0, _worst(r, "sdpa_err") or 0.0)
                cells.append(f"{r.get('status')} ({worst:.1e})" if r.get("status") in ("right", "wrong")
                             else (r.get("error") or r.get("status") or "-")[:40])
        shape = (f"{any_row.get('batch')} x {any_row.get('seq')}, {any_row.get('heads_q')}/{any_row.get('heads_kv')} "
                 f"x {any_row.get('head_dim')}, {'causal' if any_row.get('causal') else 'full'}")
        lines.append(f"| {sid} | {shape} | " + " | ".join(cells) + " |")
    lines += ["", "## Processes", "", "| process | status | s | last lines |", "|---|---|---|---|"]
    lines += [f"| {w['worker']} | {w['status']} | {w['seconds']} | {' / '.join(w['tail'])[:160]} |" for w in workers]
    return "\n".join(lines) + "\n"


def gpu_main(args) -> int:
    import broad_shapes

    from workbench.kernels.attention_gluon_bwd import supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset)", file=sys.stderr)
        return 2
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.jsonl").unlink(missing_ok=True)
    args.dry_run = False  # broad_shapes.environment reads it
    env = broad_shapes.environment(True, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    cache = Path(tempfile.mkdtemp(prefix="gluon_bwd_sdpa_"))  # the SDPA references: scratch, not results
    script = Path(__file__).resolve()
    try:
        workers = [check_all(args.out, args.budget_s * CHECK_SHARE, args.workers)]
        workers.append(ring.run_worker(BASELINE, args.out, args.budget_s * BASELINE_SHARE, script=script,
                                       extra=("--cache", str(cache))))
        right: dict[str, list[str]] = {}  # variant -> the shapes its checks found right: the ones it is timed on
        for row in ring.load_rows(args.out):
            if row.get("phase") == "check" and row.get("status") == "right" and row["id"] != "probe":
                right.setdefault(row["impl"], []).append(row["id"])
        queue = [name for name in VARIANTS if right.get(name)]
        workers += [dict(worker=name, status="not timed: no shape right in the checks", seconds=0, tail=[])
                    for name in VARIANTS if name not in queue]
        for i, name in enumerate(queue):
            share = (started + args.budget_s - REPORT_RESERVE_S - time.monotonic()) / (len(queue) - i)
            if share < 8:
                workers.append(dict(worker=name, status="budget: not run", seconds=0, tail=[]))
                continue
            workers.append(ring.run_worker(name, args.out, share, ids=right[name], script=script,
                                           extra=("--cache", str(cache))))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    rows = ring.load_rows(args.out)
    with open(args.out / "variants.csv", "w", newline="") as stream:
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
    parser.add_argument("--budget-s", type=float, default=150.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="check processes")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one worker process
    parser.add_argument("--ids", default=None, help=argparse.SUPPRESS)  # internal: the shapes a worker times
    parser.add_argument("--rows", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, default=None, help=argparse.SUPPRESS)  # internal: SDPA references
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
