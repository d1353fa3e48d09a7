"""The Triton attention backward's variants (``workbench/kernels/attention.py``: tiles, warps, stages and the dQ
pass's own tiles and launch, ``attention.DQ_KEYS``) on the 20 attention shapes of shapes.yaml (issue 20), forward +
backward against cuDNN with today's config=None wiring as the baseline, on an sm_90 GPU.

    python3 benchmarks/kernels/attention_triton_bwd_bench.py --out DIR --budget-s 120   # on the H200
    python3 benchmarks/kernels/attention_triton_bwd_bench.py --dry-run --out DIR        # CPU: every code path, tiny

1. Precompile (spawned workers): each variant runs forward + backward once on each compile class of the shapes of its
   head_dim (``compile_class``: what Triton specialises on), config=None once per shape, so the disk cache holds
   the builds the timed run launches; and each variant is checked on the ``PROBES`` (ragged sequences, GQA 2 and 8,
   MQA; causal and not) against SDPA's math backward in fp32. The sm_90 build of each variant's two passes
   (registers, spill bytes, shared memory: ``attention.inspect_backward``, this machine's triton) is recorded.
2. Per shape, in priority order (``FOCUS`` first): each variant's gradients against fp32 SDPA math (dQ of batch 0's
   first kv group, dK and dV of its kv head: ``attention_gluon_bwd_bench.reference_grads``), relative Frobenius error
   within ``attention.TOLERANCE["bf16"]`` per gradient, else not timed. Then in the same alternating
   ``broad_shapes.Timer`` rounds (the broad report's do_bench settings): the config=None forward alone, config=None
   forward + backward (the baseline: the Gluon or the Triton backward, as wired), config=None forward + each variant's
   Triton backward (``bwd_config``), and cuDNN's forward + backward (autograd). On the ``FOCUS`` shapes each variant's
   dQ and dK/dV launches are also timed alone (one round).
3. Picks, on the FIT shapes of ``attention_candidates_split.json`` only: per (head_dim, causal) the variant with the
   lowest geometric mean of time / the shape's best variant, and per sequence bucket (``spaces.ATTENTION_SEQ_BUCKETS``)
   the same over the bucket's fit shapes (a bucket without one takes its group's pick). Each bucket then keeps
   today's backward or takes the pick, whichever has the lower geometric mean over the bucket's (else the group's)
   fit shapes; REPORT.md scores that wiring on the TEST shapes (the honest figure) and prints the picks as entries of
   ``spaces._ATTENTION_PINNED``. Nothing here changes the wiring.

Writes DIR/triton_bwd.csv (every row), DIR/precompile.json (probes, builds), DIR/REPORT.md and DIR/environment.json.
A watchdog writes the report from what was measured and exits if the run passes its budget by ``WATCHDOG_GRACE_S``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import attention_gluon_bwd_bench as gluon_bench  # noqa: E402  (same folder: fp32 reference gradients)
import broad_shapes  # noqa: E402  (shapes, timer, SDPA wrappers, CSV log, environment)

from workbench import fileio  # noqa: E402
from workbench.kernels import broad_report  # noqa: E402

SPLIT = HERE / "attention_candidates_split.json"
# (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA, dQ keys) per head_dim: BLOCK_M x BLOCK_N is the dK/dV pass's query x
# key tile; the dQ pass takes them swapped unless DQ_BLOCK_M / DQ_BLOCK_N say otherwise, and the config's warps and
# stages unless DQ_NUM_WARPS / DQ_NUM_STAGES do. Builds (triton 3.7.1, sm_90, bf16, causal, TMA; registers per
# thread, spill bytes, dQ pass / dK/dV pass) from ``attention.inspect_backward`` on the CPU:
VARIANTS = {
    64: [(64, 64, 4, 3, True, {}),  # pinned d64 causal S <= 1,024 and > 4,096: 134 / 234, no spills
         (64, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 64, "DQ_NUM_WARPS": 8}),  # dQ 126 (255 over 4 warps)
         (64, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 128, "DQ_NUM_WARPS": 8}),  # dQ 210, 129 KiB
         (64, 64, 4, 4, True, {}),  # 134 / 244, 81 KiB: a deeper Q/dO pipeline for the long d64 shapes
         (64, 64, 8, 3, True, {"DQ_NUM_WARPS": 4}),  # dK/dV over 8 warps: 134 / 218
         (64, 128, 8, 3, True, {})],  # 126 / 231 (dQ 128 x 64 over 8 warps)
    128: [(32, 64, 4, 3, True, {}),  # pinned d128 causal S <= 4,096: 134 / 255, dK/dV spills 24
          (32, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 32, "DQ_NUM_WARPS": 8}),  # 144 / 255 + 24
          (32, 64, 4, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 64, "DQ_NUM_WARPS": 8}),  # 183, 161 KiB / 255 + 24
          (32, 64, 8, 3, True, {"DQ_NUM_WARPS": 4}),  # dK/dV over 8 warps: 134 / 231, no spills
          (32, 64, 8, 3, True, {"DQ_BLOCK_M": 128, "DQ_BLOCK_N": 32})],  # both passes over 8 warps: 144 / 231
}
"""Today's guessed pins (d64: 32 x 128 w8 s3 for full S > 4,096 and causal 1,025-4,096; 32 x 64 w4 s4 for full
S <= 1,024) are not variants: the baseline rows time them where they are wired (at d64 the 2026-12-01 H200 sweeps
ran 32 x 128 w8 s3 at 0.69-0.73 of 64 x 64 w4 s3's speed: benchmarks/results/h200/kernels/attention_fourth and
attention_fifth, s07 and s08). The 8-warp d128 entries test whether the 8-warp slowdown of those sweeps (32 x 64
w8: 2.1-2.5x the time of w4) was the dQ pass's 64-row tile over two warpgroups, now separable (DQ_NUM_WARPS); the
d64 one the same at 64 x 64."""
DRY_VARIANTS = [(16, 16, 1, 1, False, {}),
                (16, 32, 1, 1, True, {"DQ_BLOCK_M": 32, "DQ_BLOCK_N": 16, "DQ_NUM_WARPS": 2})]
FOCUS = ("a11", "a18", "a01", "a05", "a07", "a10", "a03", "a06")
"""Timed first, and with their dQ and dK/dV passes timed alone: the shapes of issue 20's brief (fwd+bwd below or near
0.75 of cuDNN in benchmarks/results/h200/kernels/broad/REPORT.md, or running the Triton backward). The d128 full
shapes (the Gluon backward's, every bucket) come last: the budget cuts them first."""
SWITCH_MARGIN = 0.02
"""A bucket takes its Triton pick only where today's / the pick's geometric mean over the fit shapes exceeds 1 + this:
the spread of repeated do_bench medians, a guess; calibrate me from the report's 'noise' line (today's Triton rows
against the same config timed as a variant)."""
PROBES = [dict(batch=1, seq=1040, heads_q=4, heads_kv=2, causal=True), dict(batch=2, seq=1000, heads_q=8, heads_kv=1,
                                                                          causal=False)]
"""Correctness probes beyond the 20 shapes: GQA 2 causal on 1040 = 8 x 128 + 16 tokens (a ragged tile on every
block size), MQA 8 full on 1000 (not divisible by 16: another specialisation, masked tails)."""
DRY_PROBE = dict(batch=1, seq=24, heads_q=4, heads_kv=2, causal=True)
PRECOMPILE_SHARE = 0.45
"""Share of the budget the precompile workers may take; a guess, calibrate me from the printed precompile time."""
REPORT_RESERVE_S = 6.0
WATCHDOG_GRACE_S = 15.0
GRADS = gluon_bench.GRADS
FIELDS = ["id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "impl", "config", "backward",
          "ms", "dq_ms", "dkdv_ms", "tflops", "rel_err_dq", "rel_err_dk", "rel_err_dv", "flops", "error"]


def variant_configs(head_dim: int, dry_run: bool = False) -> list[dict]:
    entries = DRY_VARIANTS if dry_run else VARIANTS[64 if head_dim <= 64 else 128]
    return [dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s, TMA=tma, **dq) for m, n, w, s, tma, dq in entries]


def label(config: dict) -> str:
    """A short name: dK/dV tiles, warps, stages, TMA, then the dQ pass's own keys."""
    text = (f"{config['BLOCK_M']}x{config['BLOCK_N']} w{config['num_warps']} s{config['num_stages']}"
            f"{' tma' if config.get('TMA') else ''}")
    dq = [f"{config['DQ_BLOCK_M']}x{config['DQ_BLOCK_N']}" if "DQ_BLOCK_M" in config else "",
          f"w{config['DQ_NUM_WARPS']}" if "DQ_NUM_WARPS" in config else "",
          f"s{config['DQ_NUM_STAGES']}" if "DQ_NUM_STAGES" in config else ""]
    return text + (f" dq {' '.join(x for x in dq if x)}" if any(dq) else "")


def compile_class(shape: dict) -> tuple:
    """Shapes of one class launch the same builds: Triton specialises on the constexprs (head_dim, causal, config)
    and on integer arguments equal to 1 or divisible by 16 (heads, group, sequence; the strides follow)."""
    hq, hkv, s = shape["heads_q"], shape["heads_kv"], shape["seq"]
    return (shape["head_dim"], bool(shape["causal"]), *((x == 1, x % 16 == 0) for x in (hq, hkv, hq // hkv, s)))


def seq_bucket(seq: int) -> int:
    from workbench.kernels.spaces import attention_seq_bucket

    return attention_seq_bucket(seq)


# ------------------------------------------------------------------------------------------------ precompile
def _fwd_bwd(causal: bool, bwd_config: dict | None):
    """forward + backward through autograd, as the broad report times ours: config=None forward, then the backward
    config=None wires (``bwd_config`` None) or this Triton backward config."""
    from workbench.kernels.attention import flash_attention

    return broad_shapes._fwd_bwd(lambda q, k, v: flash_attention(q, k, v, causal=causal, bwd_config=bwd_config))


def _job(job: tuple) -> dict:
    """Worker: ("warm", shape, config) runs forward + backward once on uninitialised inputs (compiling into Triton's
    disk cache); ("probe", shape, config) checks the gradients against SDPA math in fp32; ("build", head_dim,
    config) compiles both passes for sm_90 and reads their resources."""
    kind, what, config = job
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    started = time.perf_counter()
    out = dict(kind=kind, shape=what, config=config)
    try:
        import torch

        from workbench.kernels.attention import TOLERANCE, inspect_backward

        if kind == "build":
            out["builds"] = {name: b.as_dict() for name, b in inspect_backward(config, what, True).items()}
            out["status"] = "ok" if not any(b["error"] for b in out["builds"].values()) else "error"
        else:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            q, k, v, do = broad_shapes.attention_inputs(what, device, empty=kind == "warm")
            qg, kg, vg = (t.requires_grad_() for t in (q, k, v))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, *grads = _fwd_bwd(bool(what["causal"]), config)(qg, kg, vg, do)
            if kind == "probe":
                out.update(gluon_bench.grad_errors(grads, gluon_bench.reference_grads(q, k, v, do, what["causal"])))
                worst = max(out[f"rel_err_{g}"] for g in GRADS)
                out["status"] = "ok" if worst <= TOLERANCE["bf16"] else "wrong"
            else:
                out["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a config that does not build or run is a result
        out.update(status="error", error=broad_shapes._error_text(exc))
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def precompile_jobs(shapes: list[dict], dry_run: bool) -> list[tuple]:
    """The warm-up runs of config=None on every shape and of every variant on every compile class (what the timed
    run launches), then the probes, then the builds (context only: the last to be cut by the time limit)."""
    head_dims = sorted({s["head_dim"] for s in shapes})
    classes = {}
    for shape in shapes:
        classes.setdefault(compile_class(shape), shape)
    if dry_run:  # the interpreter compiles nothing: one tiny probe per variant
        return [("probe", dict(DRY_PROBE, head_dim=d, id="probe"), c)
                for d in head_dims for c in variant_configs(d, True)]
    # config=None first (it builds every shape's forward), then variant by variant, so that the jobs running at once
    # build different classes (no worker waits on a build another one is making)
    warm = [("warm", shape, None) for shape in shapes]
    warm += [("warm", shape, configs[i]) for i in range(max(len(VARIANTS[d]) for d in VARIANTS))
             for shape in classes.values() for configs in [variant_configs(shape["head_dim"])] if i < len(configs)]
    probes = [("probe", dict(p, head_dim=d, id="probe"), c)
              for d in head_dims for c in variant_configs(d) for p in PROBES]
    builds = [("build", d, c) for d in head_dims for c in variant_configs(d)]
    return warm + probes + builds


def precompile(jobs: list[tuple], workers: int, limit_s: float) -> list[dict]:
    """Every job's result; jobs without an answer by ``limit_s`` are reported as timed out (their workers are
    terminated). ``workers`` 0: inline (the dry run)."""
    started, results = time.monotonic(), []
    if workers < 1:
        return [_job(job) for job in jobs]
    pool = multiprocessing.get_context("spawn").Pool(workers)
    try:
        pending = {pool.apply_async(_job, (job,)): job for job in jobs}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                job = pending.pop(handle)
                try:
                    results.append(handle.get())
                except Exception as exc:  # noqa: BLE001 - a crashed worker
                    results.append(dict(kind=job[0], shape=job[1], config=job[2], status="error",
                                        error=broad_shapes._error_text(exc)))
                if results[-1]["status"] != "ok":
                    print(f"  {job[0]} {label(job[2]) if job[2] else 'config=None'}: {results[-1]['status']} "
                          f"{results[-1].get('error', '')[:160]}", flush=True)
            time.sleep(0.2)
        for job in pending.values():
            results.append(dict(kind=job[0], shape=job[1], config=job[2], status="timeout",
                                error=f"no answer within {limit_s:.0f} s"))
    finally:
        pool.terminate()
        pool.join()
    print(f"precompile: {sum(r['status'] == 'ok' for r in results)}/{len(jobs)} ok in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return results


def refused(results: list[dict]) -> dict[str, str]:
    """{variant json: why} for variants that failed a probe (wrong or error): they are not timed."""
    out = {}
    for r in results:
        if r["kind"] == "probe" and r["status"] in ("wrong", "error") and r.get("config"):
            key = json.dumps(r["config"], sort_keys=True)
            out.setdefault(key, f"probe {r['shape']['seq']}/{r['shape']['heads_q']}/{r['shape']['heads_kv']} "
                                f"{'causal' if r['shape']['causal'] else 'full'}: {r['status']} {r.get('error', '')}")
    return out


# ------------------------------------------------------------------------------------------------------ shapes
def _pass_times(shape: dict, config: dict, tensors: tuple, gpu: bool) -> tuple[float, float]:
    """(dQ ms, dK/dV ms) of this backward config's two launches alone (one do_bench round each), through the plan
    the wrapper caches (``attention._plan``: the launches ``flash_attention_bwd`` makes). ``tensors``: q, k, v, dO
    and the config=None forward's O and lse."""
    import torch

    from workbench.kernels import attention

    q, k, v, do, o, lse = tensors
    plan = attention._plan(q, k, v, bool(shape["causal"]), None, None, config)
    delta, dq, dk, dv = torch.empty_like(lse), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    attention.use_torch_allocator()  # the TMA builds' descriptor scratch
    plan.dq(True, q, k, v, o, do, lse, delta, dq)  # writes delta for the dK/dV pass
    times = broad_shapes.Timer(gpu, warmup_ms=5, rep_ms=20, rounds=1).rounds(
        {"dq": lambda: plan.dq(True, q, k, v, o, do, lse, delta, dq),
         "dkdv": lambda: plan.dkdv(True, q, k, v, do, lse, delta, dk, dv)})
    return times["dq"], times["dkdv"]


def shape_rows(shape: dict, timer, refusals: dict, tolerance: float, dry_run: bool) -> list[dict]:
    """One row per implementation of one shape: ``fwd`` (config=None forward alone), ``baseline`` (config=None
    forward + backward), ``triton`` (one per variant), ``cudnn`` (SDPA, forward + backward)."""
    import torch

    from workbench.kernels import attention_gluon_bwd
    from workbench.kernels.attention import flash_attention, flash_attention_fwd, flops
    from workbench.kernels.spaces import attention_pinned_config

    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    causal = bool(causal)
    device = "cpu" if dry_run else "cuda"
    q, k, v, do = broad_shapes.attention_inputs(shape, device)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    args = (qg, kg, vg, do)
    base = dict(id=shape["id"], name=shape["name"], batch=b, seq=s, heads_q=hq, heads_kv=hkv, head_dim=d,
                causal=int(causal), flops=flops(b, hq, s, d, causal, "fwd_bwd"))
    gluon = attention_gluon_bwd.pinned_backward_config(q, k, v, causal)
    wired = gluon or (attention_pinned_config("sm_90", "bwd", d, causal, s) if not dry_run else None)
    rows = {"fwd": dict(base, impl="fwd", flops=flops(b, hq, s, d, causal, "fwd")),
            "baseline": dict(base, impl="baseline", backward="gluon" if gluon else "triton",
                             config=json.dumps(wired, sort_keys=True) if wired else "")}
    runs = {"baseline": _fwd_bwd(causal, None)}  # built once: the timed call is the broad report's "ours"
    fns = {"fwd": lambda: flash_attention(q, k, v, causal=causal), "baseline": lambda: runs["baseline"](*args)}
    candidates = {"baseline": None}
    for config in variant_configs(d, dry_run):
        key = json.dumps(config, sort_keys=True)
        rows[key] = dict(base, impl="triton", backward="triton", config=key, error=refusals.get(key, ""))
        if not rows[key]["error"]:
            candidates[key] = config
    ref = gluon_bench.reference_grads(q, k, v, do, causal)
    for key, config in candidates.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run = runs.setdefault(key, _fwd_bwd(causal, config))
                _, *grads = run(*args)
            rows[key].update(gluon_bench.grad_errors(grads, ref))
            del grads
            worst = max(rows[key][f"rel_err_{g}"] for g in GRADS)
            if worst <= tolerance:
                fns.setdefault(key, lambda run=run: run(*args))
            else:
                rows[key]["error"] = f"wrong result (relative error {worst:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            rows[key]["error"] = broad_shapes._error_text(exc)
            if not dry_run:
                torch.cuda.synchronize()
    del ref
    cudnn = _cudnn(shape, args, dry_run)
    if isinstance(cudnn, str):
        rows["cudnn"] = dict(base, impl="cudnn", error=cudnn)
    else:
        rows["cudnn"], fns["cudnn"] = dict(base, impl="cudnn"), cudnn
    times = timer.rounds(fns)
    for name, row in rows.items():
        if name in times:
            row["ms"] = times[name]
            row["tflops"] = row["flops"] / times[name] / 1e9
        elif not row.get("error"):
            row["error"] = "did not run"
    if shape["id"] in FOCUS:
        tensors = (q, k, v, do, *flash_attention_fwd(q, k, v, causal))
        for key, config in candidates.items():
            if config is not None and "ms" in rows[key]:
                rows[key]["dq_ms"], rows[key]["dkdv_ms"] = _pass_times(shape, config, tensors, not dry_run)
    return list(rows.values())


def _cudnn(shape: dict, args: tuple, dry_run: bool):
    """cuDNN's SDPA forward + backward (the best SDPA backend on every shape of the broad run), or why not; SDPA math
    in the dry run."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = SDPBackend.MATH if dry_run else SDPBackend.CUDNN_ATTENTION
    fn = broad_shapes._under(backend, broad_shapes._fwd_bwd(broad_shapes._sdpa(
        bool(shape["causal"]), shape["heads_q"] != shape["heads_kv"])), sdpa_kernel)
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - a backend that refuses the shape is recorded
        if not dry_run:
            torch.cuda.synchronize()
        return broad_shapes._error_text(exc)
    return lambda: fn(*args)


# ------------------------------------------------------------------------------------------------ picks, report
def _ms(row: dict | None) -> float | None:
    return broad_report._float(row.get("ms")) if row else None


def per_shape(rows: list[dict]) -> dict[str, dict]:
    """{id: {row, fwd, baseline, cudnn, variants: {config json: row}}} of the timed rows."""
    out: dict[str, dict] = {}
    for r in rows:
        e = out.setdefault(r["id"], dict(row=r, fwd=None, baseline=None, cudnn=None, variants={}))
        if r["impl"] == "triton":
            if _ms(r):
                e["variants"][r["config"]] = r
        else:
            e[r["impl"]] = r
    return out


def _geo_score(shapes: dict, ids: list[str], config: str) -> float | None:
    """Geometric mean over ``ids`` of the config's time / the shape's best variant; None if it missed one."""
    values = []
    for sid in ids:
        variants = shapes[sid]["variants"]
        if config not in variants:
            return None
        values.append(_ms(variants[config]) / min(_ms(r) for r in variants.values()))
    return broad_report.geomean(values)


def pick(shapes: dict, ids: list[str]) -> tuple[str, float] | None:
    """(config json, score) of the variant with the lowest ``_geo_score`` over ``ids``, or None."""
    ids = [i for i in ids if shapes[i]["variants"]]
    scores = {c: _geo_score(shapes, ids, c) for c in {c for i in ids for c in shapes[i]["variants"]}} if ids else {}
    scores = {c: x for c, x in scores.items() if x is not None}
    return min(scores.items(), key=lambda item: item[1]) if scores else None


def wiring(shapes: dict, fit: set[str]) -> dict[tuple, dict]:
    """{(head_dim, causal, bucket): {pick, score, fit ids, keep (today's backward is faster), speedup}} for every
    bucket with a shape: the bucket's pick over its fit shapes (else its group's), taken only where its geometric mean
    over those fit shapes beats today's backward (config=None fwd+bwd) by more than ``SWITCH_MARGIN``."""
    def key(e):
        r = e["row"]
        return int(r["head_dim"]), bool(int(r["causal"])), seq_bucket(int(r["seq"]))

    out = {}
    for bucket in sorted({key(e) for e in shapes.values()}):
        ids = sorted(i for i, e in shapes.items() if i in fit and key(e) == bucket)
        if not ids:  # no fit shape in the bucket: its (head_dim, causal) group's
            ids = sorted(i for i, e in shapes.items() if i in fit and key(e)[:2] == bucket[:2])
        chosen = pick(shapes, ids)
        if chosen is None:
            out[bucket] = dict(pick=None, score=None, fit=ids, keep=True, speedup=None)
            continue
        timed = [i for i in ids if _ms(shapes[i]["baseline"]) and chosen[0] in shapes[i]["variants"]]
        speedup = broad_report.geomean([_ms(shapes[i]["baseline"]) / _ms(shapes[i]["variants"][chosen[0]])
                                        for i in timed])
        out[bucket] = dict(pick=chosen[0], score=chosen[1], fit=ids, keep=not speedup or speedup <= 1 + SWITCH_MARGIN,
                           speedup=speedup)
    return out


def shipped_ms(e: dict, choice: dict | None) -> float | None:
    """fwd+bwd as the bucket would ship: today's, or the bucket's pick where it takes it (today's if that did not
    run on this shape)."""
    if choice and not choice["keep"] and choice["pick"] in e["variants"]:
        return _ms(e["variants"][choice["pick"]])
    return _ms(e["baseline"])


def _pinned_entry(bucket: tuple, config: dict, comment: str) -> str:
    rest = {k: v for k, v in config.items() if k.startswith("DQ_")}
    fields = (config["BLOCK_M"], config["BLOCK_N"], config["num_warps"], config["num_stages"], config["TMA"])
    return (f"        ('bwd', {bucket[0]}, {bucket[1]}, {bucket[2]}): "
            f"{(*fields, rest) if rest else fields},  # {comment}")


def report(rows: list[dict], probes: list[dict], split: dict | None, env: dict) -> str:
    fmt, target, goals = broad_report._fmt, broad_report._target, broad_report.TARGETS
    shapes = per_shape([r for r in rows if r.get("flops")])
    fit, test = (split["fit"], split["test"]) if split else (set(), set())
    choice = wiring(shapes, fit)

    def bucket_of(e):
        r = e["row"]
        return int(r["head_dim"]), bool(int(r["causal"])), seq_bucket(int(r["seq"]))

    def ratio(e, ms):
        return _ms(e["cudnn"]) / ms if ms and _ms(e["cudnn"]) else None

    lines = [f"# The Triton attention backward's variants, forward + backward against cuDNN ({env.get('gpu', '?')})",
             "", f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). {env.get('timing', '')}. Every row runs the config=None forward; today = "
             "config=None's backward as wired (the Gluon or the Triton backward, column 'backward'); a variant = the "
             "Triton backward with that explicit bwd_config. Ratio = cuDNN fwd+bwd time / ours (above 1: faster "
             "than cuDNN). Picks are chosen on the fit ids of `benchmarks/kernels/attention_candidates_split.json` "
             "only.", "",
             "## Targets (issue 20: forward + backward geometric mean >= 0.85, no shape below 0.75; of cuDNN here)",
             "", "| wiring | shapes | geomean | min | timed |", "|---|---|---|---|---|"]
    for title, ms_of, ids in [("today (config=None)", lambda e: _ms(e["baseline"]), None),
                              ("today, test shapes", lambda e: _ms(e["baseline"]), test),
                              ("bucket picks where faster on fit (the proposal), test shapes (the honest figure)",
                               lambda e: shipped_ms(e, choice.get(bucket_of(e))), test),
                              ("bucket picks where faster on fit, all 20", lambda e: shipped_ms(e, choice.get(
                                  bucket_of(e))), None),
                              ("best of today and every variant per shape (a ceiling)", lambda e: min(
                                  [x for x in [_ms(e["baseline"]), *map(_ms, e["variants"].values())] if x],
                                  default=None), None)]:
        values = [ratio(e, ms_of(e)) for sid, e in sorted(shapes.items()) if ids is None or sid in ids]
        measured = [x for x in values if x]
        geo, low = broad_report.geomean(measured), min(measured, default=None)
        lines.append(f"| {title} | {'test' if ids else 'all'} | {target(geo, goals['fwd_bwd'])} | "
                     f"{target(low, goals['attention_min'])} | {len(measured)}/{len(values)} |")
    same = [abs(_ms(e["baseline"]) / _ms(e["variants"][e["baseline"]["config"]]) - 1) for e in shapes.values()
            if e["baseline"] and _ms(e["baseline"]) and e["baseline"].get("backward") == "triton"
            and e["baseline"]["config"] in e["variants"]]
    lines += ["", f"Noise: on {len(same)} shapes today's backward is a variant's config, timed twice: |today / variant "
              f"- 1| median {fmt(sorted(same)[len(same) // 2] if same else None)}, max {fmt(max(same, default=None))} "
              f"(``SWITCH_MARGIN`` = {SWITCH_MARGIN})."]
    lines += ["", "## Per bucket: the pick and whether it beats today's backward on the fit shapes", "",
              "| head_dim | causal | bucket | fit shapes | pick | score | today / pick (fit) | proposal |",
              "|---|---|---|---|---|---|---|---|"]
    pinned = []
    for bucket, c in choice.items():
        config = json.loads(c["pick"]) if c["pick"] else None
        lines.append(f"| {bucket[0]} | {bucket[1]} | {bucket[2]} | {', '.join(c['fit']) or '-'} | "
                     f"{label(config) if config else '-'} | {fmt(c['score'])} | {fmt(c['speedup'])} | "
                     f"{'keep today' if c['keep'] else 'Triton pick'} |")
        if config:
            pinned.append(_pinned_entry(bucket, config, f"{c['score']:.3f} of the best over {', '.join(c['fit'])}; "
                                                        f"today / pick {fmt(c['speedup'])}"))
    lines += ["", "As `spaces._ATTENTION_PINNED['sm_90']` entries (the Triton backward's config of each bucket; "
              "whether a bucket runs it is `attention_gluon_bwd.BACKWARD_BY_BUCKET`'s call):", "", "```", *pinned,
              "```"]
    lines += ["", "## Per shape (fwd+bwd ms; ratio = cuDNN / ours; bwd = fwd+bwd - fwd)", "",
              "| id | shape | split | cuDNN | fwd | today | backward | ratio | bwd | best variant | ms | ratio | bwd | "
              "TFLOP/s | proposal ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for sid, e in sorted(shapes.items()):
        r, fwd = e["row"], _ms(e["fwd"])
        best = min(e["variants"].values(), key=_ms, default=None)
        today = _ms(e["baseline"])
        shape = (f"{r['batch']} x {r['seq']}, {r['heads_q']}/{r['heads_kv']} x {r['head_dim']}, "
                 f"{'causal' if int(r['causal']) else 'full'}")
        half = "fit" if sid in fit else "test" if sid in test else ""
        lines.append(
            f"| {sid} | {shape} | {half} | {fmt(_ms(e['cudnn']), 4)} | {fmt(fwd, 4)} | {fmt(today, 4)} | "
            f"{(e['baseline'] or {}).get('backward', '')} | {fmt(ratio(e, today))} | "
            f"{fmt(today - fwd if today and fwd else None, 4)} | {label(json.loads(best['config'])) if best else ''} | "
            f"{fmt(_ms(best), 4)} | {fmt(ratio(e, _ms(best)))} | {fmt(_ms(best) - fwd if best and fwd else None, 4)} | "
            f"{fmt(broad_report._float(best.get('tflops')) if best else None, 0)} | "
            f"{fmt(ratio(e, shipped_ms(e, choice.get(bucket_of(e)))))} |")
    lines += ["", "## Every variant (fwd+bwd ms; FOCUS shapes also the dQ and dK/dV launches alone, ms)", "",
              "| id | variant | fwd+bwd | / today | dQ | dK/dV | max rel err |", "|---|---|---|---|---|---|---|"]
    for sid, e in sorted(shapes.items()):
        for key, r in sorted(e["variants"].items(), key=lambda item: _ms(item[1])):
            worst = max((broad_report._float(r.get(f"rel_err_{g}")) or 0.0 for g in GRADS))
            today = _ms(e["baseline"])
            lines.append(f"| {sid} | {label(json.loads(key))} | {fmt(_ms(r), 4)} | "
                         f"{fmt(_ms(r) / today if today else None)} | {fmt(broad_report._float(r.get('dq_ms')), 4)} | "
                         f"{fmt(broad_report._float(r.get('dkdv_ms')), 4)} | {fmt(worst, 4)} |")
    lines += ["", "## Probes (fp32 SDPA math reference) and sm_90 builds (this machine's triton, causal)", "",
              "| variant | head_dim | probes ok | worst rel err | dQ regs / spill B / KiB | "
              "dK/dV regs / spill B / KiB |",
              "|---|---|---|---|---|---|"]
    by_variant: dict[tuple, dict] = {}
    for p in probes:
        if p["kind"] in ("probe", "build") and p.get("config"):
            d = p["shape"] if p["kind"] == "build" else p["shape"]["head_dim"]
            v = by_variant.setdefault((d, json.dumps(p["config"], sort_keys=True)), dict(ok=0, n=0, worst=0.0))
            if p["kind"] == "build":
                v["builds"] = p.get("builds", {})
            else:
                v["n"] += 1
                v["ok"] += p["status"] == "ok"
                v["worst"] = max([v["worst"], *(p.get(f"rel_err_{g}") or 0.0 for g in GRADS)])

    def build(b):
        return f"{b.get('registers', '')} / {b.get('spills', '')} / {b.get('shared_bytes', 0) // 1024}" if b else ""

    for (d, key), v in sorted(by_variant.items()):
        builds = v.get("builds", {})
        lines.append(f"| {label(json.loads(key))} | {d} | {v['ok']}/{v['n']} | {fmt(v['worst'], 4)} | "
                     f"{build(builds.get('dq'))} | {build(builds.get('dkdv'))} |")
    errors = [r for r in rows if r.get("error")] + [p for p in probes if p["status"] != "ok"]
    lines += ["", "## Errors", ""]
    lines += [f"- {r.get('id') or r.get('kind')} {r.get('impl', '')} "
              f"{label(r['config']) if isinstance(r.get('config'), dict) else r.get('config') or ''}: "
              f"{r.get('error') or r.get('status')}" for r in errors] or ["none"]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows: list[dict], probes: list[dict], env: dict) -> str:
    split = broad_report.load_split(SPLIT)
    text = report(rows, probes, split, env)
    fileio.write_text(out / "precompile.json", json.dumps(probes, indent=1, default=str) + "\n", overwrite=True)
    fileio.write_text(out / "environment.json", json.dumps(env, indent=1) + "\n", overwrite=True)
    fileio.write_text(out / "REPORT.md", text, overwrite=True)
    return text


# -------------------------------------------------------------------------------------------------------- main
def load_shapes(dry_run: bool) -> list[dict]:
    """The 20 attention shapes, ``FOCUS`` first; the dry run: tiny stand-ins of every fifth (same head_dim, causal
    flag and GQA group)."""
    shapes = broad_shapes.load_shapes()["attention"]
    shapes = sorted(shapes, key=lambda s: (FOCUS.index(s["id"]) if s["id"] in FOCUS else len(FOCUS),
                                           s["head_dim"] == 128 and not s["causal"], s["id"]))
    if dry_run:
        shapes = [dict(s, batch=1, seq=40, heads_q=s["heads_q"] // s["heads_kv"], heads_kv=1) for s in shapes[::5]]
    return shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=120.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="precompile processes")
    parser.add_argument("--dry-run", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny shapes: code paths only")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    started = time.monotonic()
    import torch

    from workbench.kernels.attention import TOLERANCE

    if not args.dry_run and not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("needs an sm_90 GPU (or --dry-run)", file=sys.stderr)
        return 2
    deadline = started + args.budget_s - REPORT_RESERVE_S
    args.out.mkdir(parents=True, exist_ok=True)
    env = broad_shapes.environment(not args.dry_run, args)
    print(json.dumps(env), flush=True)
    rows: list[dict] = []
    probes: list[dict] = []

    def watchdog():  # a kernel that never returns: report what was measured, then leave
        time.sleep(max(0.0, started + args.budget_s + WATCHDOG_GRACE_S - time.monotonic()))
        print("watchdog: over budget, writing the report and exiting", flush=True)
        try:
            write_outputs(args.out, list(rows), list(probes), dict(env, watchdog="fired"))
        finally:
            os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    shapes = load_shapes(args.dry_run)
    probes += precompile(precompile_jobs(shapes, args.dry_run), 0 if args.dry_run else args.workers,
                         args.budget_s * PRECOMPILE_SHARE)
    refusals = refused(probes)
    timer = broad_shapes.Timer(not args.dry_run)
    log = broad_shapes.CsvLog(args.out / "triton_bwd.csv", FIELDS)
    for shape in shapes:
        if time.monotonic() > deadline:
            print(f"budget: stopping before {shape['id']}", flush=True)
            break
        t0 = time.monotonic()
        try:
            new = shape_rows(shape, timer, refusals, TOLERANCE["bf16"], args.dry_run)
        except Exception as exc:  # noqa: BLE001 - one shape that does not run: recorded, the rest goes on
            traceback.print_exc()
            new = [dict(id=shape["id"], name=shape["name"], impl="?", config="", error=broad_shapes._error_text(exc))]
        if not args.dry_run:
            torch.cuda.empty_cache()
        for row in new:
            log.add(row)
        rows.extend(new)
        e = per_shape([r for r in new if r.get("flops")]).get(shape["id"])
        if e:
            best = min(e["variants"].values(), key=_ms, default=None)
            print(f"{shape['id']} {shape['name']}: cudnn {broad_report._fmt(_ms(e['cudnn']), 4)}, today "
                  f"{broad_report._fmt(_ms(e['baseline']), 4)} ({(e['baseline'] or {}).get('backward', '')}), best "
                  f"variant {broad_report._fmt(_ms(best), 4)} {label(json.loads(best['config'])) if best else ''} "
                  f"[{time.monotonic() - t0:.1f} s]", flush=True)
    text = write_outputs(args.out, rows, probes, env)
    print(text.split("## Per shape")[0], flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
