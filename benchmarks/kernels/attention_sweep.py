"""Flash attention on one GPU (issue 20): (a) a small forward and backward config sweep on shapes outside the
committed set, best config per (pass, head_dim, causal, sequence bucket), printed in the format of
``workbench.kernels.spaces._ATTENTION_PINNED`` so they can be pinned there; (b) the committed 20 attention shapes of
``benchmarks/kernels/shapes.yaml``, ours against the best SDPA backend (flash, cuDNN, memory-efficient; forward and
forward + backward), with the sweep's picks in effect, and FlashAttention-3's published H100 figures next to ours.

    python3 benchmarks/kernels/attention_sweep.py --out DIR [--budget-s 235]     # on an sm_90 GPU
    python3 benchmarks/kernels/attention_sweep.py --dry-run --out DIR            # CPU: every code path, tiny shapes

(a) Sweep shapes (``SWEEP_SHAPES``) share no row with shapes.yaml, so (b) judges the picks on shapes they were not
chosen on. Per shape and pass, each candidate (``FWD_CANDIDATES`` / ``BWD_CANDIDATES`` of its head_dim: tiles, TMA
flag and kernel variant, the original kernels among them: the dQ pass's own tiles)
is checked against SDPA (relative Frobenius error within
``attention.TOLERANCE``; the backward's dQ, dK, dV against SDPA's autograd gradients) and timed alone:
``flash_attention_fwd`` / ``flash_attention_bwd`` with an explicit config, ``do_bench`` median. A bucket's pick is the
candidate with the lowest geometric mean of time / the shape's best over the bucket's shapes (a candidate that
failed on one of them is out). A TMA candidate whose build fell back to pointer loads counts as failed.

(b) is ``broad_shapes.attention_cases`` (the same timing and checks as ``broad_shapes.py --ops attention``) with the
picks written into the pinned table of this process (what pinning them into spaces.py runs), config=None calls.
Kernels are compiled first in worker processes (which apply the same picks). Writes DIR/sweep.csv, DIR/picks.json,
DIR/SWEEP.md (picks, the original kernels' best against the variants' per shape, every candidate),
DIR/broad/{attention.csv, environment.json, REPORT.md}; prints the picks and the summary last.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import broad_shapes  # noqa: E402  (same folder: shapes, timer, SDPA cases, CSV log)

from workbench.kernels import broad_report  # noqa: E402

# (id, batch, seq, heads_q, heads_kv, head_dim, causal): none of them is a row of shapes.yaml. Two per head_dim
# and causal flag where it matters most (d=128 causal: Llama-style training), across the three sequence buckets.
SWEEP_SHAPES = [
    ("s01", 8, 1024, 16, 4, 128, True),
    ("s02", 4, 2048, 16, 16, 128, False),
    ("s03", 2, 4096, 32, 8, 128, True),
    ("s04", 1, 16384, 32, 8, 128, True),
    ("s05", 1, 8192, 32, 4, 128, False),
    ("s06", 8, 1024, 16, 16, 64, True),
    ("s07", 2, 4096, 16, 4, 64, False),
    ("s08", 1, 16384, 16, 2, 64, True),
]
# (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA, variant): the tiles an entry of config_space("cuda"), the variant
# a dict of attention.VARIANT_KEYS ({}: the original kernels, so one run compares old and new). The first of each
# list is the pinned pick of the fourth sweep (benchmarks/results/h200/kernels/attention_fourth/SWEEP.md). Chosen
# with sm_90a builds ahead of time (triton 3.7.1, bf16): at d=128 every original dK/dV tile spills but 16 x 64
# (32 x 64: 24 bytes). The atomic-dQ and warp-specialised candidates of the fifth sweep are gone with their kernels
# (they lost on every shape: attention_fifth/SWEEP.md).
FWD_CANDIDATES = {
    64: [(128, 64, 8, 3, False, {}), (64, 64, 4, 3, False, {}), (128, 64, 8, 3, True, {}), (128, 64, 4, 3, True, {}),
         (128, 128, 8, 2, True, {}), (128, 128, 8, 3, True, {})],
    128: [(64, 64, 4, 3, False, {}), (64, 64, 4, 3, True, {}), (128, 64, 8, 3, False, {}), (128, 64, 8, 3, True, {}),
          (128, 128, 8, 2, True, {}), (128, 128, 8, 3, True, {})],
}
BWD_CANDIDATES = {
    64: [(64, 64, 4, 3, True, {}), (64, 128, 8, 3, True, {}),
         (64, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 64})],
    128: [(32, 64, 4, 3, True, {}), (16, 64, 4, 3, True, {}),
          (32, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 32}),
          (16, 64, 4, 3, True, {"DQ_BLOCK_M": 64, "DQ_BLOCK_N": 64})],
}
WARMUP_MS, REP_MS = 5, 15
SWEEP_SHARE = 0.5
"""Fraction of the budget the sweep (compiles and timing) may use; (b) gets the rest."""
PRECOMPILE_SHARE = 0.6
"""Of each phase, the share its worker processes may spend compiling."""
REPORT_RESERVE_S = 5.0


# ------------------------------------------------------------------------------------------------------ sweep
def sweep_shapes(dry_run: bool) -> list[dict]:
    rows = [dict(id=i, name=i, batch=b, seq=s, heads_q=hq, heads_kv=hkv, head_dim=d, causal=c)
            for i, b, s, hq, hkv, d, c in SWEEP_SHAPES]
    if dry_run:  # tiny stand-ins with the same head_dim, causal flag and GQA group
        rows = [dict(r, batch=1, seq=40, heads_q=r["heads_q"] // r["heads_kv"], heads_kv=1) for r in rows[::4]]
    return rows


def compile_classes(shapes: list[dict]) -> list[dict]:
    """One shape per set of shapes that build the same kernels: Triton specialises on the constexprs (head_dim,
    causal, the config) and on integer arguments equal to 1 (group, heads_kv) or divisible by 16, so the sweep's
    other shapes load the first one's builds from the cache."""
    classes = {}
    for shape in shapes:
        key = (shape["head_dim"], shape["causal"], shape["heads_q"] == shape["heads_kv"], shape["heads_kv"] == 1,
               shape["seq"] % 16 == 0)
        classes.setdefault(key, shape)
    return list(classes.values())


def candidates(pass_: str, head_dim: int, dry_run: bool) -> list[dict]:
    table = FWD_CANDIDATES if pass_ == "fwd" else BWD_CANDIDATES
    entries = table[64 if head_dim <= 64 else 128]
    if dry_run:  # the interpreter: one original and one variant candidate per pass, tiles it runs quickly
        entries = [(16, 16, 1, 1, False, {}), (16, 32, 1, 1, True, {"DQ_BLOCK_M": 32, "DQ_BLOCK_N": 16}
                                                                  if pass_ == "bwd" else {})]
    return [dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s, TMA=tma, **variant)
            for m, n, w, s, tma, variant in entries]


def bucket_of(pass_: str, shape: dict) -> tuple:
    from workbench.kernels.spaces import attention_seq_bucket

    d = 64 if shape["head_dim"] <= 64 else shape["head_dim"]
    return (pass_, d, bool(shape["causal"]), attention_seq_bucket(shape["seq"]))


def _tma_fell_back(caught: list) -> str:
    texts = [str(w.message) for w in caught if "TMA build failed" in str(w.message)]
    return texts[0][:200] if texts else ""


def sweep_shape(shape: dict, timer_gpu: bool, device: str, deadline: float, dry_run: bool) -> list[dict]:
    """Rows (one per pass and candidate) of one sweep shape: time, relative error, error text."""
    import torch

    from workbench.kernels._common import clear_plan_caches
    from workbench.kernels.attention import TOLERANCE, flash_attention_bwd, flash_attention_fwd, flops

    b, s, hq, hkv, d, causal = (shape[k] for k in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    q, k, v, do = broad_shapes.attention_inputs(shape, device)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ref_o = sdpa(qg, kg, vg, is_causal=causal, enable_gqa=hq != hkv)
    ref_grads = torch.autograd.grad(ref_o, (qg, kg, vg), do)
    ref_o = ref_o.detach()
    o, lse = flash_attention_fwd(q, k, v, causal)  # the backward candidates' O and lse: the default forward's
    rows = []
    for pass_ in ("fwd", "bwd"):
        for config in candidates(pass_, d, dry_run):
            row = dict(id=shape["id"], pass_=pass_, batch=b, seq=s, heads_q=hq, heads_kv=hkv, head_dim=d,
                       causal=int(causal), bucket=json.dumps(bucket_of(pass_, shape)),
                       config=json.dumps(config, sort_keys=True),
                       flops=flops(b, hq, s, d, causal, "fwd" if pass_ == "fwd" else "bwd"))
            if time.monotonic() > deadline:
                row["error"] = "budget"
                rows.append(row)
                continue
            if pass_ == "fwd":
                fn = lambda c=config: flash_attention_fwd(q, k, v, causal, config=c)  # noqa: E731
            else:
                fn = lambda c=config: flash_attention_bwd(do, q, k, v, o, lse, causal, config=c)  # noqa: E731
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = fn()
                fell_back = _tma_fell_back(caught)
                pairs = [(out[0], ref_o)] if pass_ == "fwd" else list(zip(out, ref_grads))
                row["rel_err"] = max(broad_shapes.relative_error(a, r) for a, r in pairs)
                del out
                if fell_back:
                    row["error"] = f"tma fell back: {fell_back}"
                elif not row["rel_err"] <= TOLERANCE["bf16"]:
                    row["error"] = f"wrong result (relative error {row['rel_err']:.2e})"
                else:
                    row["ms"] = _time(fn, timer_gpu)
            except Exception as exc:  # noqa: BLE001 - a config that does not build or run is a result
                row["error"] = broad_shapes._error_text(exc)
                if timer_gpu:
                    torch.cuda.synchronize()
            rows.append(row)
        clear_plan_caches()  # the candidates' plans: the next shape's never hit them
    return rows


def _time(fn, gpu: bool) -> float:
    if not gpu:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))


def pick_per_bucket(rows: list[dict]) -> dict[tuple, dict]:
    """{bucket: {config, score, shapes, ms}}: per bucket the candidate with the lowest geometric mean of time over
    the shape's fastest candidate, among candidates timed on every shape of the bucket."""
    by_bucket: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        by_bucket.setdefault(tuple(json.loads(r["bucket"])), {}).setdefault(r["id"], {})
        if r.get("ms"):
            by_bucket[tuple(json.loads(r["bucket"]))][r["id"]][r["config"]] = r["ms"]
    picks = {}
    for bucket, shapes in by_bucket.items():
        best = {sid: min(times.values()) for sid, times in shapes.items() if times}
        if not best or len(best) < len(shapes):
            continue
        configs = set.intersection(*(set(times) for times in shapes.values()))
        scores = {c: math.exp(sum(math.log(shapes[sid][c] / best[sid]) for sid in shapes) / len(shapes))
                  for c in configs}
        if scores:
            config = min(scores, key=scores.get)
            picks[bucket] = dict(config=json.loads(config), score=scores[config], shapes=sorted(shapes),
                                 ms={sid: shapes[sid][config] for sid in shapes})
    return picks


def pinned_entry(config: dict) -> tuple:
    """The ``_ATTENTION_PINNED`` tuple of a config: tiles, warps, stages, TMA and, for a variant, its keys."""
    variant = {k: v for k, v in sorted(config.items())
               if k not in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA")}
    entry = (config["BLOCK_M"], config["BLOCK_N"], config["num_warps"], config["num_stages"], config["TMA"])
    return (*entry, variant) if variant else entry


def is_original(config: dict) -> bool:
    """Whether a candidate runs the original kernels (no variant key but TMA)."""
    return not any(k in config for k in ("DQ_BLOCK_M", "DQ_BLOCK_N"))


def old_vs_new(rows: list[dict]) -> list[str]:
    """Markdown rows: per shape and pass, the fastest original candidate against the fastest variant."""
    lines = ["| shape | pass | best original | ms | best variant | ms | original / variant |",
             "|---|---|---|---|---|---|---|"]
    for sid in sorted({r["id"] for r in rows}):
        for pass_ in ("fwd", "bwd"):
            timed = [r for r in rows if r["id"] == sid and r["pass_"] == pass_ and r.get("ms")]
            best = [min((r for r in timed if is_original(json.loads(r["config"])) == old), key=lambda r: r["ms"],
                        default=None) for old in (True, False)]
            if not all(best):
                continue
            old, new = best
            lines.append(f"| {sid} | {pass_} | `{pinned_entry(json.loads(old['config']))}` | {old['ms']:.4f} | "
                         f"`{pinned_entry(json.loads(new['config']))}` | {new['ms']:.4f} | "
                         f"{old['ms'] / new['ms']:.3f} |")
    return lines


def picks_text(picks: dict[tuple, dict]) -> str:
    lines = ["# paste into workbench/kernels/spaces.py _ATTENTION_PINNED['sm_90'] (benchmarks/kernels/attention_sweep.py)"]
    for bucket in sorted(picks):
        p = picks[bucket]
        lines.append(f"        {bucket!r}: {pinned_entry(p['config'])!r},  # {p['score']:.3f} of the best over "
                     f"{', '.join(p['shapes'])}")
    return "\n".join(lines)


def apply_picks(picks: dict[tuple, dict]) -> None:
    """Write the picks into this process's pinned table (what pinning them into spaces.py runs)."""
    from workbench.kernels import spaces
    from workbench.kernels._common import clear_plan_caches

    spaces._ATTENTION_PINNED.setdefault("sm_90", {}).update(
        {bucket: pinned_entry(p["config"]) for bucket, p in picks.items()})
    clear_plan_caches()


# ------------------------------------------------------------------------------------------------ precompile
def _compile_job(job: tuple) -> str:
    """Worker: build sweep candidates of one pass on one shape (phase "sweep") or one committed shape's config=None
    calls with the picks in effect (phase "broad"), on uninitialised full-size inputs (Triton's disk cache then
    hands the kernels to the main process)."""
    phase, shape, device, payload = job
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    started = time.perf_counter()
    import torch

    from workbench.kernels.attention import flash_attention, flash_attention_bwd, flash_attention_fwd

    q, k, v, do = broad_shapes.attention_inputs(shape, device, empty=True)
    causal = bool(shape["causal"])
    failures = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if phase == "sweep":
            pass_, configs = payload
            o, lse = flash_attention_fwd(q, k, v, causal)
            for config in configs:
                try:
                    if pass_ == "fwd":
                        flash_attention_fwd(q, k, v, causal, config=config)
                    else:
                        flash_attention_bwd(do, q, k, v, o, lse, causal, config=config)
                except Exception:  # noqa: BLE001 - the timed run records it
                    failures += 1
        else:
            apply_picks({tuple(bucket): dict(config=config) for bucket, config in payload})
            flash_attention(q, k, v, causal=causal)
            qg, kg, vg = (t.requires_grad_() for t in (q, k, v))
            out = flash_attention(qg, kg, vg, causal=causal)
            torch.autograd.grad(out, (qg, kg, vg), do)
    if device == "cuda":
        torch.cuda.synchronize()
    return f"{phase} {shape['id']}: {failures} failed ({time.perf_counter() - started:.1f} s)"


def precompile(jobs: list[tuple], workers: int, limit_s: float) -> None:
    if not jobs or workers < 1 or limit_s <= 0:
        return
    started = time.perf_counter()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(_compile_job, job) for job in jobs]
        done, pending = concurrent.futures.wait(futures, timeout=limit_s)
        for future in done:
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker: the timed run compiles inline
                print("  precompile worker failed:", broad_shapes._error_text(exc), flush=True)
        print(f"precompiled {len(done)}/{len(jobs)} jobs in {time.perf_counter() - started:.0f} s "
              f"({len(pending)} left to compile inline)", flush=True)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------------ report
def sweep_report(rows: list[dict], picks: dict[tuple, dict], env: dict) -> str:
    lines = [f"# Flash attention config sweep ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). do_bench median, warmup {WARMUP_MS} ms / rep {REP_MS} ms, each candidate alone; "
             "bwd = `flash_attention_bwd` (dQ with delta, then dK/dV). Buckets: (pass, head_dim, causal, "
             "sequence bucket 0: S <= 1024, 1: <= 4096, 2: longer).", "", "## Picks", "", "```", picks_text(picks),
             "```", "", "## Original kernels against the variants (above 1: the variant is faster)", "",
             *old_vs_new(rows), "", "## Every candidate", "",
             "| shape | pass | b x s, hq/hkv x d, causal | config | ms | TFLOP/s | rel. err | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = r.get("ms")
        tflops = r["flops"] / ms / 1e9 if ms else None
        lines.append(f"| {r['id']} | {r['pass_']} | {r['batch']} x {r['seq']}, {r['heads_q']}/{r['heads_kv']} x "
                     f"{r['head_dim']}, {'causal' if r['causal'] else 'full'} | `{r['config']}` | "
                     f"{broad_report._fmt(ms, 4)} | {broad_report._fmt(tflops, 0)} | "
                     f"{broad_report._fmt(r.get('rel_err'), 4)} | {r.get('error', '')} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=235.0, help="stop cleanly after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny stand-in shapes")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="processes that compile the kernels before each timed phase (0: compile inline)")
    parser.add_argument("--skip-sweep", action="store_true", help="(b) only, with the pinned table as committed")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    import torch

    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("no GPU: use --dry-run for the CPU code path check", file=sys.stderr)
        return 2
    device = "cuda" if gpu else "cpu"
    deadline = started + args.budget_s - REPORT_RESERVE_S
    args.out.mkdir(parents=True, exist_ok=True)
    env = broad_shapes.environment(gpu, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)

    # (a) the sweep
    rows, picks = [], {}
    if not args.skip_sweep:
        shapes = sweep_shapes(args.dry_run)
        sweep_deadline = started + args.budget_s * SWEEP_SHARE
        jobs = [("sweep", shape, device, (pass_, [config])) for shape in compile_classes(shapes)
                for pass_ in ("fwd", "bwd") for config in candidates(pass_, shape["head_dim"], args.dry_run)]
        precompile(jobs, args.workers, (sweep_deadline - time.monotonic()) * PRECOMPILE_SHARE)
        log = broad_shapes.CsvLog(args.out / "sweep.csv", ["id", "pass_", "batch", "seq", "heads_q", "heads_kv",
                                                           "head_dim", "causal", "bucket", "config", "ms", "rel_err",
                                                           "flops", "error"])
        for shape in shapes:
            t0 = time.monotonic()
            try:
                shape_rows = sweep_shape(shape, gpu, device, sweep_deadline, args.dry_run)
            except Exception as exc:  # noqa: BLE001 - one shape that does not run: recorded, the rest goes on
                traceback.print_exc()
                shape_rows = [dict(id=shape["id"], error=broad_shapes._error_text(exc))]
            for row in shape_rows:
                log.add(row)
            timed = [r for r in shape_rows if r.get("ms")]
            best = {p: min((r for r in timed if r["pass_"] == p), key=lambda r: r["ms"], default=None)
                    for p in ("fwd", "bwd")}
            print(f"{shape['id']} b{shape['batch']} s{shape['seq']} hq{shape['heads_q']}/{shape['heads_kv']} "
                  f"d{shape['head_dim']} {'causal' if shape['causal'] else 'full'}: "
                  + "; ".join(f"{p} best {r['ms']:.4f} ms {r['config']}" for p, r in best.items() if r)
                  + f"  ({len(timed)}/{len(shape_rows)} timed) [{time.monotonic() - t0:.1f} s]", flush=True)
            rows += [r for r in shape_rows if "bucket" in r]
        picks = pick_per_bucket(rows)
        (args.out / "picks.json").write_text(json.dumps(
            [dict(bucket=list(b), **p) for b, p in sorted(picks.items())], indent=1) + "\n")
        (args.out / "SWEEP.md").write_text(sweep_report(rows, picks, env))
        print(picks_text(picks), flush=True)
        apply_picks(picks)

    # (b) the committed shapes, ours (config=None, the picks in effect) against the best SDPA backend
    broad = args.out / "broad"
    broad.mkdir(exist_ok=True)
    (broad / "environment.json").write_text(json.dumps({**env, "pinned_from_sweep": [
        dict(bucket=list(b), entry=list(pinned_entry(p["config"]))) for b, p in sorted(picks.items())]}, indent=1) + "\n")
    committed = broad_shapes.load_shapes()["attention"]
    if args.dry_run:
        committed = [dict(r, batch=1, seq=32, heads_q=r["heads_q"] // r["heads_kv"], heads_kv=1) for r in committed[:3]]
    payload = [(list(b), p["config"]) for b, p in picks.items()]
    precompile([("broad", shape, device, payload) for shape in committed], args.workers,
               (deadline - time.monotonic()) * PRECOMPILE_SHARE * 0.5)
    timer = broad_shapes.Timer(gpu)
    attention_log = broad_shapes.CsvLog(broad / "attention.csv", broad_report.ATTENTION_FIELDS)
    for shape in committed:
        if time.monotonic() > deadline:
            print(f"budget: stopping before attention {shape['id']}", flush=True)
            break
        t0 = time.monotonic()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # SDPA's GQA notes
                case_rows = broad_shapes.attention_cases(shape, timer, device)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            case_rows = [dict(id=shape["id"], name=shape["name"], error=broad_shapes._error_text(exc))]
            if gpu:
                torch.cuda.empty_cache()
        for row in case_rows:
            attention_log.add(row)
            print(broad_report.attention_line(row) + f"  [{time.monotonic() - t0:.1f} s]", flush=True)
    summary = broad_report.write_report(broad, None)
    print(summary, flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
