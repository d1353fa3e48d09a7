"""The FA3-style Gluon attention forward (``workbench/kernels/attention_gluon.py``) on the 20 attention shapes of
shapes.yaml (issue 20), next to our Triton forward (``attention.flash_attention_fwd``, config=None) and SDPA's
cuDNN, flash and memory-efficient backends, on an sm_90 GPU.

    python3 benchmarks/kernels/attention_gluon_bench.py --out DIR --budget-s 200    # on the H200: <= 240 s

1. Precompile: one spawned worker per (head_dim, causal, Gluon config) and per (head_dim, causal) of ours runs
   the kernel once on a small GQA input (``PROBE``, compiling into Triton's disk cache for the main
   process) and checks it against SDPA's math backend. A config whose worker fails, is wrong or does not answer
   within the precompile share of the budget (a hung pipeline) is left out of the timed run, with the reason;
   the workers are killed at the deadline, so a hang cannot stall the script.
2. Per shape: every implementation runs once and is checked against the first SDPA backend that runs (max abs
   error and relative Frobenius error; above ``attention.TOLERANCE["bf16"]`` it is not timed), then all are timed
   in the same alternating ``broad_shapes.Timer`` rounds (do_bench medians).
3. Picks: one Gluon config per (head_dim, causal), the lowest geometric mean of time / the shape's fastest Gluon
   time over the bucket's FIT shapes of ``attention_candidates_split.json``; REPORT.md judges the picks on the
   TEST shapes (the honest figure), next to the per-shape best config (a ceiling) and ours.

Writes DIR/gluon_attention.csv (every row), DIR/precompile.json, DIR/picks.json, DIR/REPORT.md and
DIR/environment.json; prints progress and the summary.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import attention_candidates  # noqa: E402  (same folder: inputs, SDPA backends, the fit/test split)
import broad_shapes  # noqa: E402  (shapes, timer, CSV log, environment)

from workbench.kernels import broad_report  # noqa: E402

PRECOMPILE_SHARE = 0.30
"""Share of the budget the precompile workers may take (their compiles and small checks); a guess, calibrate me
from DIR/precompile.json's per-job seconds."""
REPORT_RESERVE_S = 6.0
PROBE = dict(batch=1, seq=1040, heads_q=4, heads_kv=2)
"""The precompile workers' input: GQA 2, a ragged tail on every tile size (1040 = 8 x 128 + 16), and a length
divisible by 16 like every shape of the set, so the kernels it builds are the ones the timed run launches."""
FIELDS = ["id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "impl", "config", "ms", "tflops",
          "max_abs_err", "rel_err", "flops", "error"]


def gluon_label(config: dict) -> str:
    return "gluon " + json.dumps(config, sort_keys=True)


# ------------------------------------------------------------------------------------------------ precompile
def _probe_job(job: tuple) -> dict:
    """Worker: run one implementation on the probe input and check it against SDPA's math backend."""
    impl, head_dim, causal, config = job
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    started = time.perf_counter()
    out = dict(impl=impl, head_dim=head_dim, causal=causal, config=config)
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        shape = dict(PROBE, head_dim=head_dim, causal=causal)
        q, k, v, _ = attention_candidates.inputs(shape, "cuda", torch.bfloat16)
        if impl == "gluon":
            from workbench.kernels.attention_gluon import gluon_attention_forward

            o = gluon_attention_forward(q, k, v, causal, config=config)[0]
        else:
            from workbench.kernels.attention import flash_attention_fwd

            o = flash_attention_fwd(q, k, v, causal)[0]
        with sdpa_kernel([SDPBackend.MATH]):
            group = q.shape[1] // k.shape[1]
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1),
                is_causal=causal)
        torch.cuda.synchronize()
        out.update(max_abs_err=float((o.float() - ref).abs().max()), rel_err=broad_shapes.relative_error(o, ref))
        out["status"] = "ok" if out["rel_err"] <= 2e-2 else "wrong"
    except Exception as exc:  # noqa: BLE001 - a config that does not build or run is a result
        out.update(status="error", error=broad_shapes._error_text(exc))
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def precompile(jobs: list[tuple], workers: int, limit_s: float) -> list[dict]:
    """Every job's probe result; jobs without an answer by ``limit_s`` are reported as timed out (their workers
    are terminated: a kernel that never returns dies with its process)."""
    results, started = [], time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(max(1, workers))
    try:
        pending = {pool.apply_async(_probe_job, (job,)): job for job in jobs}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                job = pending.pop(handle)
                try:
                    results.append(handle.get())
                except Exception as exc:  # noqa: BLE001 - a crashed worker
                    results.append(dict(zip(("impl", "head_dim", "causal", "config"), job), status="error",
                                        error=broad_shapes._error_text(exc)))
                print(f"  precompiled {results[-1]['impl']} d{job[1]} {'causal' if job[2] else 'full'} "
                      f"{json.dumps(job[3]) if job[3] else ''}: {results[-1]['status']} "
                      f"({results[-1].get('seconds', '?')} s)", flush=True)
            time.sleep(0.2)
        for job in pending.values():
            results.append(dict(zip(("impl", "head_dim", "causal", "config"), job), status="timeout",
                                error=f"no answer within {limit_s:.0f} s (slow compile or a hung pipeline)"))
    finally:
        pool.terminate()
        pool.join()
    print(f"precompile: {sum(r['status'] == 'ok' for r in results)}/{len(jobs)} ok in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return results


def precompile_jobs() -> list[tuple]:
    from workbench.kernels.attention_gluon import config_space

    jobs = [("gluon", d, causal, c) for d in (64, 128) for causal in (False, True) for c in config_space(d, causal)]
    return jobs + [("ours", d, causal, None) for d in (64, 128) for causal in (False, True)]


def usable(probes: list[dict]) -> dict[tuple, str]:
    """{(impl, head_dim, causal, config json): "" if usable else why not} from the probe results."""
    return {(p["impl"], p["head_dim"], p["causal"], json.dumps(p["config"], sort_keys=True)):
            "" if p["status"] == "ok" else f"precompile {p['status']}: {p.get('error') or p.get('rel_err')}"
            for p in probes}


# ------------------------------------------------------------------------------------------------------ shapes
def shape_rows(shape: dict, timer, probes: dict[tuple, str], tolerance: float) -> list[dict]:
    """One row per implementation of one shape: ms, errors against the first SDPA backend."""
    import torch

    from workbench.kernels.attention import flash_attention_fwd, flops
    from workbench.kernels.attention_gluon import config_space, gluon_attention_forward

    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    causal = bool(causal)
    q, k, v, _ = attention_candidates.inputs(shape, "cuda", torch.bfloat16)
    base = dict(id=shape["id"], name=shape["name"], batch=b, seq=s, heads_q=hq, heads_kv=hkv, head_dim=d,
                causal=int(causal), flops=flops(b, hq, s, d, causal, "fwd"))
    fns, refs, sdpa_errors = attention_candidates.sdpa_fns(shape, "fwd", (q, k, v), True)
    ref = next(iter(refs.values()), None)
    rows = {name: dict(base, impl=name, config="", error=sdpa_errors.get(f"{name}_error", "")) for name in fns}
    for key, error in sdpa_errors.items():  # a backend that refused the shape: a row with its error
        rows.setdefault(key.removesuffix("_error"), dict(base, impl=key.removesuffix("_error"), config="", error=error))
    candidates = {"ours": ("ours", None, lambda: flash_attention_fwd(q, k, v, causal)[0])}
    for c in config_space(d, causal):
        candidates[gluon_label(c)] = ("gluon", c, lambda c=c: gluon_attention_forward(q, k, v, causal, config=c)[0])
    for name, (impl, config, fn) in candidates.items():
        config_json = json.dumps(config, sort_keys=True)
        row = rows[name] = dict(base, impl=impl, config=config_json if config else "")
        why = probes.get((impl, d, causal, config_json), "not precompiled")
        if why:
            row["error"] = why
            continue
        if ref is None:
            row["error"] = "no SDPA backend ran: nothing to check against"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = fn()
            row["max_abs_err"] = float((out.float() - ref.float()).abs().max())
            row["rel_err"] = broad_shapes.relative_error(out, ref)
            del out
            if row["rel_err"] <= tolerance:
                fns[name] = fn
            else:
                row["error"] = f"wrong result (relative error {row['rel_err']:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            row["error"] = broad_shapes._error_text(exc)
            torch.cuda.synchronize()
    for name in [n for n in rows if n.startswith("sdpa_")]:  # SDPA outputs checked against the first one too
        rows[name]["rel_err"] = broad_shapes.relative_error(refs[name], ref) if name in refs else ""
    refs.clear()
    times = timer.rounds(fns)
    for name, row in rows.items():
        if name in times:
            row["ms"] = times[name]
            row["tflops"] = row["flops"] / times[name] / 1e9
        elif not row.get("error"):
            row["error"] = "did not run"
    return list(rows.values())


# ------------------------------------------------------------------------------------------------ picks, report
def _ms(row: dict | None) -> float | None:
    return broad_report._float(row.get("ms")) if row else None


def bucket(row: dict) -> tuple[int, bool]:
    return int(row["head_dim"]), bool(int(row["causal"]))


def pick_configs(rows: list[dict], fit_ids: set[str]) -> dict[tuple, dict]:
    """{(head_dim, causal): {config, score, shapes}}: the Gluon config with the lowest geometric mean of time over
    the shape's fastest Gluon time, over the bucket's fit shapes where it ran on all of them."""
    times: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r["impl"] == "gluon" and r["id"] in fit_ids and _ms(r):
            times.setdefault(bucket(r), {}).setdefault(r["id"], {})[r["config"]] = _ms(r)
    picks = {}
    for key, per_shape in times.items():
        common = set.intersection(*(set(t) for t in per_shape.values()))
        scores = {c: broad_report.geomean([per_shape[sid][c] / min(per_shape[sid].values()) for sid in per_shape])
                  for c in common}
        if scores:
            best = min(scores, key=scores.get)
            picks[key] = dict(config=json.loads(best), score=scores[best], shapes=sorted(per_shape))
    return picks


def summary(rows: list[dict], picks: dict) -> list[dict]:
    """Per shape: the best SDPA, ours, the bucket's pick, the best Gluon config (ratios: SDPA time / theirs)."""
    out = []
    for sid in sorted({r["id"] for r in rows}):
        rs = [r for r in rows if r["id"] == sid]
        timed = [r for r in rs if _ms(r)]
        sdpa = min((r for r in timed if r["impl"].startswith("sdpa_")), key=_ms, default=None)
        pick = picks.get(bucket(rs[0]))
        pick_json = json.dumps(pick["config"], sort_keys=True) if pick else None
        entry = dict(id=sid, row=rs[0], sdpa=sdpa, ours=next((r for r in timed if r["impl"] == "ours"), None),
                     gluon_best=min((r for r in timed if r["impl"] == "gluon"), key=_ms, default=None),
                     gluon_pick=next((r for r in timed if r["impl"] == "gluon" and r["config"] == pick_json), None))
        for key in ("ours", "gluon_best", "gluon_pick"):
            entry[f"{key}_ratio"] = _ms(sdpa) / _ms(entry[key]) if sdpa and entry[key] else None
        out.append(entry)
    return out


def _figures(entries: list[dict], key: str, ids: set[str] | None) -> tuple[float | None, float | None, str]:
    values = [e[f"{key}_ratio"] for e in entries if ids is None or e["id"] in ids]
    measured = [v for v in values if v]
    return broad_report.geomean(measured), min(measured, default=None), f"{len(measured)}/{len(values)}"


def report(rows: list[dict], picks: dict, probes: list[dict], split: dict | None, env: dict) -> str:
    fmt, target, goals = broad_report._fmt, broad_report._target, broad_report.TARGETS
    entries = summary(rows, picks)
    test = split["test"] if split else None
    lines = [f"# Gluon FA3-style attention forward ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). {env.get('timing', '')}. Ratio = best SDPA time / the candidate's (above 1: "
             "faster than SDPA). Picks: one Gluon config per (head_dim, causal), chosen on the fit ids of "
             "`benchmarks/kernels/attention_candidates_split.json`, judged on its test ids.", "",
             "## Targets (issue 20: forward geometric mean >= 0.95, no shape below 0.75)", "",
             "| candidate | shapes | geomean | min | shapes timed |", "|---|---|---|---|---|"]
    for title, key, ids in [("Gluon, bucket picks (the honest figure)", "gluon_pick", test),
                            ("Gluon, bucket picks, all 20 (fit included)", "gluon_pick", None),
                            ("Gluon, best config per shape (a ceiling)", "gluon_best", None),
                            ("ours (Triton, config=None)", "ours", None), ("ours, test shapes", "ours", test)]:
        geo, low, count = _figures(entries, key, ids)
        lines.append(f"| {title} | {'test' if ids else 'all'} | {target(geo, goals['fwd'])} | "
                     f"{target(low, goals['attention_min'])} | {count} |")
    lines += ["", "## Picks", "", "```"]
    for key in sorted(picks):
        p = picks[key]
        lines.append(f"d{key[0]} {'causal' if key[1] else 'full'}: {json.dumps(p['config'], sort_keys=True)}  "
                     f"# {p['score']:.3f} of the per-shape best over {', '.join(p['shapes'])}")
    lines += ["```", "", "## Per shape (ms; ratio = best SDPA / candidate; TFLOP/s of the best Gluon config)", "",
              "| id | shape | split | SDPA best | backend | ours | ratio | Gluon pick | ratio | Gluon best | config | "
              "ratio | TFLOP/s | max abs err |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        r, best = e["row"], e["gluon_best"]
        shape = (f"{r['batch']} x {r['seq']}, {r['heads_q']}/{r['heads_kv']} x {r['head_dim']}, "
                 f"{'causal' if int(r['causal']) else 'full'}")
        half = next((name for name in ("fit", "test") if split and e["id"] in split[name]), "")
        lines.append(f"| {e['id']} | {shape} | {half} | {fmt(_ms(e['sdpa']), 4)} | "
                     f"{e['sdpa']['impl'] if e['sdpa'] else ''} | {fmt(_ms(e['ours']), 4)} | {fmt(e['ours_ratio'])} | "
                     f"{fmt(_ms(e['gluon_pick']), 4)} | {fmt(e['gluon_pick_ratio'])} | {fmt(_ms(best), 4)} | "
                     f"{'`' + best['config'] + '`' if best else ''} | {fmt(e['gluon_best_ratio'])} | "
                     f"{fmt(best.get('tflops') if best else None, 0)} | "
                     f"{fmt(best.get('max_abs_err') if best else None, 4)} |")
    failed = [p for p in probes if p["status"] != "ok"]
    lines += ["", f"## Precompile ({len(probes) - len(failed)}/{len(probes)} ok)", ""]
    lines += [f"- {p['impl']} d{p['head_dim']} {'causal' if p['causal'] else 'full'} `{json.dumps(p['config'])}`: "
              f"{p['status']} {p.get('error') or p.get('rel_err', '')}" for p in failed]
    lines += [] if failed else ["every probe ran and matched"]
    errors = [r for r in rows if r.get("error") and not r["error"].startswith("precompile")]
    lines += ["", "## Rows with errors", ""]
    lines += [f"- {r['id']} {r['impl']} `{r['config']}`: {r['error']}" for r in errors] or ["none"]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="precompile processes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    import torch

    from workbench.kernels.attention import TOLERANCE
    from workbench.kernels.attention_gluon import supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset)", file=sys.stderr)
        return 2
    deadline = started + args.budget_s - REPORT_RESERVE_S
    args.out.mkdir(parents=True, exist_ok=True)
    args.dry_run = False  # broad_shapes.environment reads it
    env = broad_shapes.environment(True, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)

    probes = precompile(precompile_jobs(), args.workers, args.budget_s * PRECOMPILE_SHARE)
    (args.out / "precompile.json").write_text(json.dumps(probes, indent=1) + "\n")
    ok = usable(probes)
    timer = broad_shapes.Timer(True)
    log = broad_shapes.CsvLog(args.out / "gluon_attention.csv", FIELDS)
    rows = []
    for shape in broad_shapes.load_shapes()["attention"]:
        if time.monotonic() > deadline:
            print(f"budget: stopping before {shape['id']}", flush=True)
            break
        t0 = time.monotonic()
        try:
            new = shape_rows(shape, timer, ok, TOLERANCE["bf16"])
        except Exception as exc:  # noqa: BLE001 - one shape that does not run: recorded, the rest goes on
            traceback.print_exc()
            new = [dict(id=shape["id"], name=shape["name"], impl="?", config="", error=broad_shapes._error_text(exc))]
            torch.cuda.empty_cache()
        for row in new:
            log.add(row)
        rows += new
        e = next(iter(summary([r for r in new if r.get("flops")], {})), None)
        if e:
            fmt = broad_report._fmt
            print(f"{shape['id']} {shape['name']}: sdpa {fmt(_ms(e['sdpa']), 4)} "
                  f"({e['sdpa']['impl'] if e['sdpa'] else '-'}), ours {fmt(_ms(e['ours']), 4)} "
                  f"({fmt(e['ours_ratio'])}), gluon best {fmt(_ms(e['gluon_best']), 4)} ({fmt(e['gluon_best_ratio'])}) "
                  f"{e['gluon_best']['config'] if e['gluon_best'] else ''}  [{time.monotonic() - t0:.1f} s]",
                  flush=True)
    rows = [r for r in rows if r.get("flops")]
    split = broad_report.load_split(attention_candidates.SPLIT)
    picks = pick_configs(rows, split["fit"] if split else set())
    (args.out / "picks.json").write_text(json.dumps(
        [dict(head_dim=k[0], causal=k[1], **p) for k, p in sorted(picks.items())], indent=1) + "\n")
    text = report(rows, picks, probes, split, env)
    (args.out / "REPORT.md").write_text(text)
    print(text.split("## Per shape")[0], flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
