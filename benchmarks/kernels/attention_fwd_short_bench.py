"""The attention forward on short and mid sequences (issue 20): the new Gluon variants and configs of
``attention_gluon.short_config_space`` (two CTAs an SM, 64-key tiles with deeper rings) and a few Triton forward
configs, against the forward as wired (``flash_attention_fwd`` config=None) and SDPA's flash, cuDNN and
memory-efficient backends, on the 20 attention shapes of shapes.yaml, on an sm_90 GPU; and a proposed rule.

    python3 benchmarks/kernels/attention_fwd_short_bench.py --out DIR --budget-s 200      # H200: <= 220 s
    python3 benchmarks/kernels/attention_fwd_short_bench.py --cpu-host --out DIR [--tree PATH]   # no GPU

GPU run. 1. Precompile: one spawned worker per (head_dim, causal, candidate) runs it once on a small GQA input with a
ragged tail (``PROBE``) and checks it against SDPA's math backend; a candidate that fails, is wrong or does not answer
within PRECOMPILE_SHARE of the budget (a hung pipeline) is left out, with the reason. 2. Per shape: every candidate
runs once and is checked against the first SDPA backend that runs (relative Frobenius error within
``attention.TOLERANCE["bf16"]``, else not timed); then all are timed in the same alternating do_bench rounds
(``broad_shapes.Timer``: L2 flushed before each launch), and a burst of back-to-back calls gives each one's host
and GPU time per call (host-bound where they meet). ``gluon-pinned-replanned`` re-plans every call (checks,
descriptors from scratch, the JIT launch): the per-call host cost before the plan cache, to set against
``gluon-pinned``. Triton configs run only where S <= TRITON_MAX_SEQ. 3. Rule: per (head_dim, sequence bucket)
(``SEQ_BUCKETS``), the choice with the lowest geometric mean of time / the row's fastest choice over the bucket's
FIT shapes of ``attention_candidates_split.json`` (on all of them); REPORT.md judges it on the TEST shapes apart.

CPU host mode (``--cpu-host``): the Gluon forward's wrapper on CPU tensors with its kernel stubbed and an H200
simulated (``host_overhead._fake_h200``; ``Tensor.is_cuda`` patched true in this process), thread CPU time per call,
least of ROUNDS rounds: the cached call, the first (planning) call, and a call that re-plans; ``--tree`` imports
``workbench`` from another checkout (the tree before the plan cache) for before/after.

Writes DIR/rows.csv, DIR/precompile.json, DIR/rule.json, DIR/REPORT.md, DIR/environment.json (or DIR/host_cpu.md
and .json); prints progress and the summary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

PRECOMPILE_SHARE = 0.40
"""Share of the budget the precompile workers may take; a guess, calibrate me from DIR/precompile.json."""
REPORT_RESERVE_S = 6.0
PROBE = dict(batch=1, seq=1040, heads_q=4, heads_kv=2)
"""The probe input: GQA 2, a ragged tail on every tile (1040 = 8 x 128 + 16), divisible by 16 like every shape."""
SEQ_BUCKETS = (("short", 1024), ("mid", 4096), ("long", None))
"""The rule's sequence buckets: S <= 1024, S <= 4096, longer (the set has 512-1k, 2k-4k, 8k-32k)."""
TRITON_MAX_SEQ = 4096
TRITON_CANDIDATES = [  # attention.py's forward kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA); guesses
    (128, 64, 4, 3, True), (128, 128, 8, 3, True), (128, 64, 8, 2, True), (64, 64, 4, 3, False)]
FIELDS = ["id", "name", "split", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "choice", "config", "ms",
          "tflops", "host_us", "burst_gpu_us", "rel_err", "error"]


def _lib():
    """The benchmark helpers of this folder and the report helpers (imported after sys.path is set)."""
    sys.path.insert(0, str(HERE))
    import attention_candidates
    import broad_shapes

    from workbench.kernels import broad_report
    return attention_candidates, broad_shapes, broad_report


# ------------------------------------------------------------------------------------------------ candidates
def candidates(head_dim: int, causal: bool, seq: int) -> dict[str, tuple[str, dict | None]]:
    """{choice: (impl, config)} for one shape. impl: "wired" (config=None as shipped), "triton" (attention.py's
    kernel, explicit config; None: the config its config=None resolves), "gluon" (attention_gluon, explicit
    config), "gluon-replanned" (the pinned config, planned anew each call)."""
    from workbench.kernels import attention_gluon

    pinned = attention_gluon.PINNED_FORWARD[(head_dim, causal)]
    out = {"wired": ("wired", None), "triton": ("triton", None), "gluon-pinned": ("gluon", pinned),
           "gluon-pinned-replanned": ("gluon-replanned", pinned)}
    for c in attention_gluon.short_config_space(head_dim, causal):
        out["gluon " + json.dumps(c, sort_keys=True)] = ("gluon", c)
    if seq <= TRITON_MAX_SEQ:
        for m, n, w, st, tma in TRITON_CANDIDATES:
            c = dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, TMA=tma)
            out["triton " + json.dumps(c, sort_keys=True)] = ("triton", c)
    return out


def forward_fn(impl: str, config: dict | None, q, k, v, causal: bool):
    """A no-argument call of one candidate on q, k, v, returning O."""
    from workbench.kernels import attention, attention_gluon

    if impl == "wired":
        return lambda: attention.flash_attention_fwd(q, k, v, causal)[0]
    if impl == "triton":
        config = config or attention._resolve_config(None, "fwd", q.shape[-1], q, k, causal)
        return lambda: attention.flash_attention_fwd(q, k, v, causal, config=config)[0]
    if impl == "gluon":
        return lambda: attention_gluon.gluon_attention_forward(q, k, v, causal, config=config)[0]
    if impl == "gluon-replanned":
        return lambda: attention_gluon._run(attention_gluon._plan(q, k, v, causal, None, config), q, k, v)[0]
    raise ValueError(f"impl {impl!r}: expected wired, triton, gluon or gluon-replanned")


# ------------------------------------------------------------------------------------------------ precompile
def probe_key(impl: str, config: dict | None, head_dim: int, causal: bool, seq: int) -> tuple:
    """The precompile probe that builds a candidate's kernel: the wired forward's is the Gluon pinned config's where
    ``pinned_forward_config`` takes the shape, else the Triton kernel's at config=None; a re-planned call's is its
    config's."""
    from workbench.kernels.attention_gluon import pinned_forward_config

    if impl == "wired":
        gluon = pinned_forward_config(head_dim, causal, seq)
        impl, config = ("gluon", gluon) if gluon is not None else ("triton", None)
    elif impl == "gluon-replanned":
        impl = "gluon"
    return impl, head_dim, causal, json.dumps(config, sort_keys=True)


def _probe_job(job: tuple) -> dict:
    """Worker: run one candidate on the probe input, check it against SDPA's math backend."""
    impl, head_dim, causal, config = job
    sys.path.insert(0, str(ROOT))
    attention_candidates, broad_shapes, _ = _lib()
    started, out = time.perf_counter(), dict(impl=impl, head_dim=head_dim, causal=causal, config=config)
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v, _ = attention_candidates.inputs(dict(PROBE, head_dim=head_dim, causal=causal), "cuda", torch.bfloat16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            o = forward_fn(impl, config, q, k, v, causal)()
        group = q.shape[1] // k.shape[1]
        with sdpa_kernel([SDPBackend.MATH]):
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1),
                is_causal=causal)
        torch.cuda.synchronize()
        out["rel_err"] = broad_shapes.relative_error(o, ref)
        out["status"] = "ok" if out["rel_err"] <= 2e-2 else "wrong"
    except Exception as exc:  # noqa: BLE001 - a candidate that does not build or run is a result
        out.update(status="error", error=broad_shapes._error_text(exc))
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def precompile(workers: int, limit_s: float) -> tuple[dict[tuple, str], list[dict]]:
    """({(impl, head_dim, causal, config json): "" if usable else why not}, the probe results); workers still
    running at ``limit_s`` are killed (a kernel that never returns dies with its process)."""
    jobs = {}
    for d in (64, 128):
        for causal in (False, True):
            for impl, config in candidates(d, causal, PROBE["seq"]).values():
                key = probe_key(impl, config, d, causal, PROBE["seq"])
                jobs[key] = (key[0], d, causal, json.loads(key[3]))
    results, started = {}, time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(max(1, workers))
    try:
        pending = {pool.apply_async(_probe_job, (job,)): key for key, job in jobs.items()}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                key = pending.pop(handle)
                try:
                    results[key] = handle.get()
                except Exception as exc:  # noqa: BLE001 - a crashed worker
                    results[key] = dict(status="error", error=repr(exc)[:300])
                print(f"  precompiled {key}: {results[key]['status']} ({results[key].get('seconds', '?')} s)",
                      flush=True)
            time.sleep(0.2)
        for key in pending.values():
            results[key] = dict(status="timeout", error=f"no answer within {limit_s:.0f} s (slow build or a hang)")
    finally:
        pool.terminate()
        pool.join()
    print(f"precompile: {sum(r['status'] == 'ok' for r in results.values())}/{len(jobs)} ok in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return {key: "" if r["status"] == "ok" else f"precompile {r['status']}: {r.get('error') or r.get('rel_err')}"
            for key, r in results.items()}, [dict(zip(("impl", "head_dim", "causal", "config"), k), **r)
                                              for k, r in results.items()]


# ------------------------------------------------------------------------------------------------------ shapes
def shape_rows(shape: dict, split: str, timer, probes: dict, tolerance: float) -> list[dict]:
    """One row per candidate and SDPA backend of one shape: ms (do_bench), host and GPU us per call (burst)."""
    import torch

    from workbench.kernels.attention import flops

    attention_candidates, broad_shapes, _ = _lib()
    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    causal = bool(causal)
    q, k, v, _ = attention_candidates.inputs(shape, "cuda", torch.bfloat16)
    base = dict(id=shape["id"], name=shape["name"], split=split, batch=b, seq=s, heads_q=hq, heads_kv=hkv,
                head_dim=d, causal=int(causal))
    work = flops(b, hq, s, d, causal, "fwd")
    fns, refs, sdpa_errors = attention_candidates.sdpa_fns(shape, "fwd", (q, k, v), True)
    ref = next(iter(refs.values()), None)
    rows = {name: dict(base, choice=name, config="") for name in fns}
    for key, error in sdpa_errors.items():
        rows.setdefault(key.removesuffix("_error"), dict(base, choice=key.removesuffix("_error"), config="",
                                                         error=error))
    for name in fns:
        rows[name]["rel_err"] = broad_shapes.relative_error(refs[name], ref)
    refs.clear()
    for choice, (impl, config) in candidates(d, causal, s).items():
        config_json = json.dumps(config, sort_keys=True)
        row = rows[choice] = dict(base, choice=choice, config=config_json if config else "")
        why = probes.get(probe_key(impl, config, d, causal, s), "not precompiled")
        if why or ref is None:
            row["error"] = why or "no SDPA backend ran: nothing to check against"
            continue
        fn = forward_fn(impl, config, q, k, v, causal)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row["rel_err"] = broad_shapes.relative_error(fn(), ref)
            if row["rel_err"] <= tolerance:
                fns[choice] = fn
            else:
                row["error"] = f"wrong result (relative error {row['rel_err']:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            row["error"] = broad_shapes._error_text(exc)
            torch.cuda.synchronize()
    times = timer.rounds(fns)
    for choice, fn in fns.items():
        row = rows[choice]
        row["ms"] = times[choice]
        row["tflops"] = work / times[choice] / 1e9
        row["host_us"], row["burst_gpu_us"] = timer.burst(fn)
    return list(rows.values())


# -------------------------------------------------------------------------------------------------- rule, report
def seq_bucket(seq: int) -> str:
    return next(name for name, bound in SEQ_BUCKETS if bound is None or seq <= bound)


def _ms(row: dict) -> float | None:
    try:
        return float(row["ms"]) if row.get("ms") not in (None, "") and not row.get("error") else None
    except ValueError:
        return None


def _is_choice(name: str) -> bool:
    """A candidate the rule may pick (not SDPA, not the as-wired or re-planned reference rows)."""
    return not name.startswith("sdpa_") and name not in ("wired", "gluon-pinned-replanned")


def propose_rule(rows: list[dict], fit_ids: set[str], geomean) -> dict[str, dict]:
    """{"d{head_dim} {bucket}": {choice, score, shapes}} chosen on the fit shapes only (see the module doc)."""
    per_bucket: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r["id"] in fit_ids and _is_choice(r["choice"]) and _ms(r):
            key = f"d{r['head_dim']} {seq_bucket(int(r['seq']))}"
            per_bucket.setdefault(key, {}).setdefault(r["id"], {})[r["choice"]] = _ms(r)
    rule = {}
    for key, per_shape in sorted(per_bucket.items()):
        common = set.intersection(*(set(t) for t in per_shape.values()))
        scores = {c: geomean([t[c] / min(t.values()) for t in per_shape.values()]) for c in common}
        if scores:
            best = min(scores, key=scores.get)
            rule[key] = dict(choice=best, score=round(scores[best], 4), shapes=sorted(per_shape))
    return rule


def per_shape(rows: list[dict], rule: dict) -> list[dict]:
    """Per shape: best SDPA, the wired forward, the rule's choice, the fastest choice (ms, ratio = SDPA / it)."""
    out = []
    for sid in sorted({r["id"] for r in rows}):
        rs = {r["choice"]: r for r in rows if r["id"] == sid}
        first = next(iter(rs.values()))
        timed = {c: _ms(r) for c, r in rs.items() if _ms(r)}
        sdpa = min((c for c in timed if c.startswith("sdpa_")), key=timed.get, default=None)
        picked = rule.get(f"d{first['head_dim']} {seq_bucket(int(first['seq']))}", {}).get("choice")
        fastest = min((c for c in timed if _is_choice(c)), key=timed.get, default=None)
        e = dict(id=sid, first=first, sdpa=sdpa, sdpa_ms=timed.get(sdpa), picked=picked, fastest=fastest,
                 host=rs.get("gluon-pinned", {}).get("host_us"),
                 host_replanned=rs.get("gluon-pinned-replanned", {}).get("host_us"),
                 wired_host=rs.get("wired", {}).get("host_us"))
        for key, choice in (("wired", "wired"), ("rule", picked), ("fastest", fastest)):
            e[f"{key}_ms"] = timed.get(choice)
            e[f"{key}_ratio"] = timed[sdpa] / timed[choice] if sdpa and choice in timed else None
        out.append(e)
    return out


def report(rows: list[dict], rule: dict, probes: list[dict], split: dict, env: dict) -> str:
    _, _, br = _lib()
    fmt, entries = br._fmt, per_shape(rows, rule)
    lines = [f"# Attention forward, short and mid sequences ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). {env.get('timing', '')}; host / GPU us per call from a burst of back-to-back "
             "calls without flushes. Ratio = best SDPA time / the candidate's. The rule is chosen on the fit ids of "
             "`benchmarks/kernels/attention_candidates_split.json`; the test ids are the honest figure.", "",
             "## Targets (issue 20: forward geometric mean >= 0.95, no shape below 0.75)", "",
             "| forward | shapes | geomean | min | shapes timed |", "|---|---|---|---|---|"]
    lines += br.forward_target_rows(entries, split, (
        ("as wired (config=None)", "wired"),
        ("proposed rule", "rule"),
        ("fastest choice per shape (a ceiling)", "fastest"),
    ))
    lines += ["", "## Proposed rule (per head_dim and sequence bucket: S <= 1024 short, <= 4096 mid, else long)", "",
              "| bucket | choice | geomean of time / fastest, fit shapes | fit shapes |", "|---|---|---|---|"]
    lines += [f"| {key} | `{r['choice']}` | {r['score']:.3f} | {', '.join(r['shapes'])} |" for key, r in rule.items()]
    lines += ["", "`gluon-pinned` is `attention_gluon.PINNED_FORWARD[(head_dim, causal)]`; `triton` is attention.py's "
              "kernel at the config its config=None resolves.", "",
              "## Per shape (ms; ratio = best SDPA / it; host us per call of the Gluon pinned config, cached plan vs "
              "re-planned each call, and of the wired call)", "",
              "| id | split | d | causal | seq | SDPA best | wired | ratio | rule choice | ms | ratio | "
              "fastest choice | "
              "ms | ratio | host us gluon cached / replanned / wired |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        r = e["first"]
        lines.append(f"| {e['id']} | {r['split']} | {r['head_dim']} | {r['causal']} | {r['seq']} | "
                     f"{fmt(e['sdpa_ms'], 4)} {e['sdpa'] or ''} | {fmt(e['wired_ms'], 4)} | {fmt(e['wired_ratio'])} | "
                     f"`{e['picked']}` | {fmt(e['rule_ms'], 4)} | {fmt(e['rule_ratio'])} | `{e['fastest']}` | "
                     f"{fmt(e['fastest_ms'], 4)} | {fmt(e['fastest_ratio'])} | {fmt(e['host'], 1)} / "
                     f"{fmt(e['host_replanned'], 1)} / {fmt(e['wired_host'], 1)} |")
    failed = [p for p in probes if p["status"] != "ok"]
    lines += ["", f"## Precompile ({len(probes) - len(failed)}/{len(probes)} ok)", ""]
    lines += [f"- {p['impl']} d{p['head_dim']} {'causal' if p['causal'] else 'full'} `{p['config']}`: "
              f"{p['status']} {p.get('error') or p.get('rel_err', '')}" for p in failed] or [
                  "every probe ran and matched"]
    errors = [r for r in rows if r.get("error") and not str(r["error"]).startswith("precompile")]
    lines += ["", "## Rows with errors", ""]
    lines += [f"- {r['id']} {r['choice']}: {r['error']}" for r in errors] or ["none"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ CPU host mode
def cpu_host(out: Path, rounds: int, calls: int) -> int:
    """Thread CPU time per call of the Gluon forward's wrapper, kernel stubbed, an H200 simulated (module doc)."""
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, str(HERE))
    import host_overhead
    import torch

    from workbench.kernels import _common, _launch, attention_gluon, checks

    host_overhead._fake_h200({"_common": _common, "checks": checks, "attention_gluon": attention_gluon,
                              "_launch": _launch})
    torch.Tensor.is_cuda = property(lambda self: True)  # the wrapper's device check, on CPU tensors
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index
    attention_gluon._attn_fwd_kernel = host_overhead._Launches(attention_gluon._attn_fwd_kernel, [], stub=True)
    shape = dict(batch=16, seq=512, heads_q=16, heads_kv=16, head_dim=64)  # a02's, CPU-sized data
    q = torch.randn(shape["batch"], shape["heads_q"], shape["seq"], shape["head_dim"], dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    config = attention_gluon.PINNED_FORWARD[(64, False)]
    cases = {"cached call (gluon_attention_forward)": lambda: attention_gluon.gluon_attention_forward(
        q, k, v, False, None, config)}
    if hasattr(attention_gluon, "_plan"):
        cases["re-planned each call (_run(_plan(...)))"] = lambda: attention_gluon._run(
            attention_gluon._plan(q, k, v, False, None, config), q, k, v)
    results = {}
    for name, fn in cases.items():
        fn()
        best = float("inf")
        for _ in range(rounds):
            start = time.thread_time_ns()
            for _ in range(calls):
                fn()
            best = min(best, (time.thread_time_ns() - start) / calls / 1e3)
        results[name] = round(best, 2)
        print(f"{name}: {best:.2f} us", flush=True)
    env = dict(tree=str(Path(attention_gluon.__file__).resolve().parents[2]), torch=torch.__version__,
               cpu_count=os.cpu_count(), date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               command=" ".join(sys.argv), rounds=rounds, calls=calls, shape=shape, config=config)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_cpu.json").write_text(json.dumps(dict(env=env, us_per_call=results), indent=1) + "\n")
    lines = ["# Gluon attention forward: host CPU time per call (stubbed launch, simulated H200)", "",
             f"`{env['command']}` ({env['date_utc']}, tree {env['tree']}); thread CPU time, least of {rounds} "
             f"rounds of {calls} calls; the launch itself is a no-op stub (Triton's launcher and the JIT's "
             "specialization are not in these figures: the GPU run's host_us column has them).", "",
             "| case | us per call |", "|---|---|"] + [f"| {n} | {t} |" for n, t in results.items()]
    (out / "host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


# -------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="precompile processes")
    parser.add_argument("--cpu-host", action="store_true", help="the wrapper's host time on CPU (no GPU)")
    parser.add_argument("--tree", type=Path, default=None, help="--cpu-host: import workbench from this checkout")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    started = time.monotonic()
    sys.path.insert(0, str(args.tree or ROOT))
    if args.cpu_host:
        return cpu_host(args.out, args.rounds, args.calls)
    attention_candidates, broad_shapes, broad_report = _lib()
    import torch

    from workbench.kernels.attention import TOLERANCE
    from workbench.kernels.attention_gluon import supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset); --cpu-host runs without",
              file=sys.stderr)
        return 2
    deadline = started + args.budget_s - REPORT_RESERVE_S
    args.out.mkdir(parents=True, exist_ok=True)
    args.dry_run = False  # broad_shapes.environment reads it
    env = broad_shapes.environment(True, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)
    probes, probe_rows = precompile(args.workers, args.budget_s * PRECOMPILE_SHARE)
    (args.out / "precompile.json").write_text(json.dumps(probe_rows, indent=1) + "\n")
    split = broad_report.load_split(attention_candidates.SPLIT)
    timer = broad_shapes.Timer(True)
    log = broad_shapes.CsvLog(args.out / "rows.csv", FIELDS)
    rows = []
    for shape in broad_shapes.load_shapes()["attention"]:
        if time.monotonic() > deadline:
            print(f"budget: stopping before {shape['id']}", flush=True)
            break
        t0 = time.monotonic()
        half = "fit" if shape["id"] in split["fit"] else "test"
        try:
            new = shape_rows(shape, half, timer, probes, TOLERANCE["bf16"])
        except Exception as exc:  # noqa: BLE001 - one shape that does not run: recorded, the rest goes on
            traceback.print_exc()
            new = [dict(id=shape["id"], name=shape["name"], split=half, choice="?",
                        error=broad_shapes._error_text(exc))]
            torch.cuda.empty_cache()
        for row in new:
            log.add(row)
        rows += [r for r in new if "head_dim" in r]
        e = next(iter(per_shape([r for r in new if "head_dim" in r], {})), None)
        if e:
            fmt = broad_report._fmt
            print(f"{shape['id']} {shape['name']}: sdpa {fmt(e['sdpa_ms'], 4)} ({e['sdpa']}), wired "
                  f"{fmt(e['wired_ms'], 4)} ({fmt(e['wired_ratio'])}), fastest {e['fastest']} "
                  f"{fmt(e['fastest_ms'], 4)} "
                  f"({fmt(e['fastest_ratio'])}); gluon host us cached {fmt(e['host'], 1)} / replanned "
                  f"{fmt(e['host_replanned'], 1)}  [{time.monotonic() - t0:.1f} s]", flush=True)
    rule = propose_rule(rows, split["fit"], broad_report.geomean)
    (args.out / "rule.json").write_text(json.dumps(rule, indent=1) + "\n")
    text = report(rows, rule, probe_rows, split, env)
    (args.out / "REPORT.md").write_text(text)
    print(text.split("## Per shape")[0], flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
