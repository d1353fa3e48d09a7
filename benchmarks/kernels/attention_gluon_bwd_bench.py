"""The FA3-style Gluon attention backward (``workbench/kernels/attention_gluon_bwd.py``) on the 20 attention shapes
of shapes.yaml (issue 20), forward + backward next to our Gluon forward + Triton backward and SDPA's cuDNN, flash and
memory-efficient backends, on an sm_90 GPU.

    python3 benchmarks/kernels/attention_gluon_bwd_bench.py --out DIR --budget-s 190    # on the H200: <= 200 s

1. Precompile: one spawned worker per (head_dim, causal) and Gluon backward config, and per (head_dim, causal) of
   the Triton backward, runs forward + backward once on a small GQA input (``PROBE``, compiling into Triton's disk
   cache) and checks dQ, dK, dV against SDPA's math backend in fp32; Gluon configs also record their sm_90 build
   (registers, spills: ``inspect_build``, this machine's ptxas). A config whose worker fails, is wrong or does not
   answer within the precompile share of the budget (a hung pipeline) is left out of the timed run, with the reason.
2. Per shape: the forward is ``attention_gluon.gluon_attention_forward`` with its pinned config of the bucket; each
   backward runs once on its O and lse and is checked against SDPA's math backward in fp32 (one query head at a
   time over the query heads of batch 0's first kv head, summed into dK, dV: the fp32 scores of the 32k shapes fit),
   relative Frobenius error within ``attention.TOLERANCE["bf16"]`` per gradient, else not timed. Then forward alone,
   forward + each backward, and each SDPA backend's forward + backward (autograd) are timed in the same alternating
   ``broad_shapes.Timer`` rounds (do_bench medians).
3. Picks: one Gluon backward config per (head_dim, causal), the lowest geometric mean of fwd+bwd time / the
   shape's fastest Gluon time over the bucket's FIT shapes of ``attention_candidates_split.json``; REPORT.md judges
   the picks on the TEST shapes, next to the per-shape best config (a ceiling), the Triton backward and
   FlashAttention-3's published H100 backward.

A watchdog writes the report from what was measured and exits if the run passes its budget by ``WATCHDOG_GRACE_S``
(a kernel that never returns). Writes DIR/gluon_bwd.csv (every row), DIR/precompile.json, DIR/REPORT.md and
DIR/environment.json; prints progress and the summary.
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

import attention_candidates  # noqa: E402  (same folder: inputs, SDPA backends, the fit/test split)
import broad_shapes  # noqa: E402  (shapes, timer, CSV log, environment)

from workbench.kernels import broad_report  # noqa: E402

PRECOMPILE_SHARE = 0.40
"""Share of the budget the precompile workers may take; a guess, calibrate me from DIR/precompile.json."""
REPORT_RESERVE_S = 6.0
WATCHDOG_GRACE_S = 15.0
PROBE = dict(batch=1, seq=1040, heads_q=4, heads_kv=2)
"""The precompile input: GQA 2, a ragged tail on every tile (1040 = 8 x 128 + 16), a length divisible by 16 like
every shape of the set, so the kernels it builds are the ones the timed run launches."""
GRADS = ("dq", "dk", "dv")
FIELDS = ["id", "name", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "impl", "config", "ms", "tflops",
          "rel_err_dq", "rel_err_dk", "rel_err_dv", "flops", "error"]
FA3_H100_BWD = ("FA3fig-H100-bwd-d128-FA3-4k", 4, 4096, 16, 128, False, 542.0)
"""FA3's published H100 backward at d=128, seq 4k, 16 heads (../shared/reference/published/kernel_throughput.csv,
``broad_report.FA3_H100``): the a12 shape of the set."""


def gluon_label(config: dict) -> str:
    return "gluon_bwd " + json.dumps(config, sort_keys=True)


def forward_config(head_dim: int, causal: bool) -> dict | None:
    """The Gluon forward's pinned config of the bucket (``attention_gluon.PINNED_FORWARD``), else its default."""
    from workbench.kernels import attention_gluon

    return getattr(attention_gluon, "PINNED_FORWARD", {}).get((head_dim, causal))


# ------------------------------------------------------------------------------------------------- reference
def reference_grads(q, k, v, do, causal: bool):
    """dQ of batch 0's first kv group [group, S, D] and dK, dV of its kv head [S, D], fp32, from SDPA's math
    backward one query head at a time (its saved fp32 scores are S^2 floats a head)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[1] // k.shape[1]
    k0, v0 = (t[:1, :1].detach().float() for t in (k, v))
    dq, dk, dv = [], torch.zeros_like(k0[0, 0]), torch.zeros_like(v0[0, 0])
    with sdpa_kernel([SDPBackend.MATH]):
        for h in range(group):
            qh = q[:1, h:h + 1].detach().float().requires_grad_()
            kh, vh = k0.clone().requires_grad_(), v0.clone().requires_grad_()
            o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
            gq, gk, gv = torch.autograd.grad(o, (qh, kh, vh), do[:1, h:h + 1].float())
            dq.append(gq[0, 0])
            dk += gk[0, 0]
            dv += gv[0, 0]
            del o, gq, gk, gv
    return torch.stack(dq), dk, dv


def grad_errors(grads, ref) -> dict:
    """{rel_err_dq, rel_err_dk, rel_err_dv} of (dq, dk, dv) on the reference's slice."""
    group = ref[0].shape[0]
    got = (grads[0][0, :group], grads[1][0, 0], grads[2][0, 0])
    return {f"rel_err_{name}": broad_shapes.relative_error(g, r) for name, g, r in zip(GRADS, got, ref)}


# ------------------------------------------------------------------------------------------------ precompile
def _probe_job(job: tuple) -> dict:
    """Worker: forward + one backward on the probe input, checked against SDPA's math backward; Gluon configs
    also their sm_90 build."""
    impl, head_dim, causal, config = job
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    started = time.perf_counter()
    out = dict(impl=impl, head_dim=head_dim, causal=causal, config=config)
    try:
        import torch

        from workbench.kernels.attention import TOLERANCE, flash_attention_bwd
        from workbench.kernels.attention_gluon import gluon_attention_forward
        from workbench.kernels.attention_gluon_bwd import gluon_attention_backward, inspect_build

        q, k, v, do = attention_candidates.inputs(dict(PROBE, head_dim=head_dim), "cuda", torch.bfloat16)
        o, lse = gluon_attention_forward(q, k, v, causal, config=forward_config(head_dim, causal))
        if impl == "gluon_bwd":
            grads = gluon_attention_backward(do, q, k, v, o, lse, causal, config=config)
        else:
            grads = flash_attention_bwd(do, q, k, v, o, lse, causal)
        torch.cuda.synchronize()
        out.update(grad_errors(grads, reference_grads(q, k, v, do, causal)))
        worst = max(out[f"rel_err_{name}"] for name in GRADS)
        out["status"] = "ok" if worst <= TOLERANCE["bf16"] else "wrong"
        if impl == "gluon_bwd":
            try:
                out["build"] = inspect_build(config, head_dim, causal).as_dict()
            except Exception as exc:  # noqa: BLE001 - the build report is context, not the result
                out["build"] = {"error": broad_shapes._error_text(exc)}
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
                r = results[-1]
                print(f"  precompiled {r['impl']} d{job[1]} {'causal' if job[2] else 'full'} "
                      f"{json.dumps(job[3]) if job[3] else ''}: {r['status']} ({r.get('seconds', '?')} s) "
                      f"spills {r.get('build', {}).get('spill_bytes', '-')}", flush=True)
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
    from workbench.kernels.attention_gluon_bwd import config_space

    buckets = [(d, causal) for d in (64, 128) for causal in (False, True)]
    jobs = [("gluon_bwd", d, causal, c) for d, causal in buckets for c in config_space(d, causal)]
    return jobs + [("triton_bwd", d, causal, None) for d, causal in buckets]


def usable(probes: list[dict]) -> dict[tuple, str]:
    """{(impl, head_dim, causal, config json): "" if usable else why not}."""
    return {(p["impl"], p["head_dim"], p["causal"], json.dumps(p["config"], sort_keys=True)):
            "" if p["status"] == "ok" else f"precompile {p['status']}: {p.get('error', '')}" for p in probes}


# ------------------------------------------------------------------------------------------------------ shapes
def shape_rows(shape: dict, timer, probes: dict[tuple, str], tolerance: float) -> list[dict]:
    """One row per implementation of one shape: fwd+bwd ms (``gluon_fwd``: the forward alone), errors."""
    import torch

    from workbench.kernels.attention import flash_attention_bwd, flops
    from workbench.kernels.attention_gluon import gluon_attention_forward
    from workbench.kernels.attention_gluon_bwd import config_space, gluon_attention_backward

    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    causal = bool(causal)
    q, k, v, do = attention_candidates.inputs(shape, "cuda", torch.bfloat16)
    base = dict(id=shape["id"], name=shape["name"], batch=b, seq=s, heads_q=hq, heads_kv=hkv, head_dim=d,
                causal=int(causal), flops=flops(b, hq, s, d, causal, "fwd_bwd"))
    fwd_config = forward_config(d, causal)

    def forward():
        return gluon_attention_forward(q, k, v, causal, config=fwd_config)

    o, lse = forward()
    ref = reference_grads(q, k, v, do, causal)
    rows = {"gluon_fwd": dict(base, impl="gluon_fwd", config=json.dumps(fwd_config, sort_keys=True),
                              flops=flops(b, hq, s, d, causal, "fwd"))}
    fns = {"gluon_fwd": lambda: forward()[0]}
    candidates = {"triton_bwd": ("triton_bwd", None, lambda o_, lse_: flash_attention_bwd(do, q, k, v, o_, lse_,
                                                                                          causal))}
    for c in config_space(d, causal):
        candidates[gluon_label(c)] = ("gluon_bwd", c, lambda o_, lse_, c=c: gluon_attention_backward(
            do, q, k, v, o_, lse_, causal, config=c))
    for name, (impl, config, bwd) in candidates.items():
        config_json = json.dumps(config, sort_keys=True)
        row = rows[name] = dict(base, impl=impl, config=config_json if config else "")
        why = probes.get((impl, d, causal, config_json), "not precompiled")
        if why:
            row["error"] = why
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grads = bwd(o, lse)
            row.update(grad_errors(grads, ref))
            del grads
            worst = max(row[f"rel_err_{g}"] for g in GRADS)
            if worst <= tolerance:
                fns[name] = lambda bwd=bwd: bwd(*forward())
            else:
                row["error"] = f"wrong result (relative error {worst:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            row["error"] = broad_shapes._error_text(exc)
            torch.cuda.synchronize()
    del o, lse, ref
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    sdpa, outputs, sdpa_errors = attention_candidates.sdpa_fns(shape, "fwd_bwd", (qg, kg, vg, do), True)
    outputs.clear()
    for name in sdpa:
        rows[name] = dict(base, impl=name, config="")
    for key, error in sdpa_errors.items():  # a backend that refused the shape: a row with its error
        rows.setdefault(key.removesuffix("_error"), dict(base, impl=key.removesuffix("_error"), config="", error=error))
    times = timer.rounds({**fns, **sdpa})
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
    """{(head_dim, causal): {config, score, shapes}}: the Gluon backward config with the lowest geometric mean of
    fwd+bwd time over the shape's fastest Gluon time, over the bucket's fit shapes where it ran on all of them."""
    times: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r["impl"] == "gluon_bwd" and r["id"] in fit_ids and _ms(r):
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
    """Per shape: the best SDPA fwd+bwd, ours (Gluon fwd + Triton bwd), the bucket's pick, the best Gluon backward
    config (ratios: SDPA time / theirs), and the backward alone (fwd+bwd - fwd) of ours and the best Gluon."""
    out = []
    for sid in sorted({r["id"] for r in rows}):
        rs = [r for r in rows if r["id"] == sid]
        timed = [r for r in rs if _ms(r)]
        pick = picks.get(bucket(rs[0]))
        pick_json = json.dumps(pick["config"], sort_keys=True) if pick else None
        fwd = next((r for r in timed if r["impl"] == "gluon_fwd"), None)
        entry = dict(id=sid, row=rs[0], fwd=fwd,
                     sdpa=min((r for r in timed if r["impl"].startswith("sdpa_")), key=_ms, default=None),
                     triton=next((r for r in timed if r["impl"] == "triton_bwd"), None),
                     gluon_best=min((r for r in timed if r["impl"] == "gluon_bwd"), key=_ms, default=None),
                     gluon_pick=next((r for r in timed if r["impl"] == "gluon_bwd" and r["config"] == pick_json),
                                     None))
        for key in ("triton", "gluon_best", "gluon_pick"):
            entry[f"{key}_ratio"] = _ms(entry["sdpa"]) / _ms(entry[key]) if entry["sdpa"] and entry[key] else None
            entry[f"{key}_bwd_ms"] = _ms(entry[key]) - _ms(fwd) if fwd and entry[key] else None
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
    lines = [f"# Gluon FA3-style attention backward, forward + backward ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). {env.get('timing', '')}. Forward: the Gluon forward's pinned config of the "
             "bucket for every candidate. Ratio = best SDPA fwd+bwd time / the candidate's (above 1: faster than "
             "SDPA). Picks: one Gluon backward config per (head_dim, causal), chosen on the fit ids of "
             "`benchmarks/kernels/attention_candidates_split.json`, judged on its test ids.", "",
             "## Targets (issue 20: forward + backward geometric mean >= 0.85, no shape below 0.75)", "",
             "| candidate | shapes | geomean | min | shapes timed |", "|---|---|---|---|---|"]
    for title, key, ids in [("Gluon fwd + Gluon bwd, bucket picks (the honest figure)", "gluon_pick", test),
                            ("Gluon fwd + Gluon bwd, bucket picks, all 20 (fit included)", "gluon_pick", None),
                            ("Gluon fwd + Gluon bwd, best config per shape (a ceiling)", "gluon_best", None),
                            ("Gluon fwd + Triton bwd (today's)", "triton", None),
                            ("Gluon fwd + Triton bwd, test shapes", "triton", test)]:
        geo, low, count = _figures(entries, key, ids)
        lines.append(f"| {title} | {'test' if ids else 'all'} | {target(geo, goals['fwd_bwd'])} | "
                     f"{target(low, goals['attention_min'])} | {count} |")
    lines += ["", "## Picks", "", "```"]
    for key in sorted(picks):
        p = picks[key]
        lines.append(f"d{key[0]} {'causal' if key[1] else 'full'}: {json.dumps(p['config'], sort_keys=True)}  "
                     f"# {p['score']:.3f} of the per-shape best over {', '.join(p['shapes'])}")
    lines += ["```", "", "## Per shape (ms; ratio = best SDPA fwd+bwd / candidate; bwd = fwd+bwd - Gluon fwd)", "",
              "| id | shape | split | SDPA best | backend | Gluon fwd | +Triton bwd | ratio | bwd | +Gluon pick | "
              "ratio | +Gluon best | config | ratio | bwd | TFLOP/s | max rel err |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        r, best = e["row"], e["gluon_best"]
        shape = (f"{r['batch']} x {r['seq']}, {r['heads_q']}/{r['heads_kv']} x {r['head_dim']}, "
                 f"{'causal' if int(r['causal']) else 'full'}")
        half = next((name for name in ("fit", "test") if split and e["id"] in split[name]), "")
        worst = max((broad_report._float(best.get(f"rel_err_{g}")) or 0.0 for g in GRADS), default=None) \
            if best else None
        lines.append(f"| {e['id']} | {shape} | {half} | {fmt(_ms(e['sdpa']), 4)} | "
                     f"{e['sdpa']['impl'] if e['sdpa'] else ''} | {fmt(_ms(e['fwd']), 4)} | "
                     f"{fmt(_ms(e['triton']), 4)} | {fmt(e['triton_ratio'])} | {fmt(e['triton_bwd_ms'], 4)} | "
                     f"{fmt(_ms(e['gluon_pick']), 4)} | {fmt(e['gluon_pick_ratio'])} | {fmt(_ms(best), 4)} | "
                     f"{'`' + best['config'] + '`' if best else ''} | {fmt(e['gluon_best_ratio'])} | "
                     f"{fmt(e['gluon_best_bwd_ms'], 4)} | {fmt(best.get('tflops') if best else None, 0)} | "
                     f"{fmt(worst, 4)} |")
    fa3 = next((e for e in entries if (int(e["row"]["batch"]), int(e["row"]["seq"]), int(e["row"]["heads_q"]),
                                       int(e["row"]["head_dim"]), bool(int(e["row"]["causal"])))
                == FA3_H100_BWD[1:6]), None)
    if fa3 and fa3["gluon_best_bwd_ms"]:
        bwd_flops = float(fa3["gluon_best"]["flops"]) - float(fa3["fwd"]["flops"])
        lines += ["", f"FlashAttention-3's published H100 backward on {fa3['id']}'s shape ({FA3_H100_BWD[0]}): "
                  f"{FA3_H100_BWD[6]:.0f} TFLOP/s; the best Gluon backward here (fwd+bwd - fwd): "
                  f"{bwd_flops / fa3['gluon_best_bwd_ms'] / 1e9:.0f} TFLOP/s; the Triton backward: "
                  f"{fmt(bwd_flops / fa3['triton_bwd_ms'] / 1e9 if fa3['triton_bwd_ms'] else None, 0)} TFLOP/s."]
    lines += ["", "## Precompile and sm_90 builds (ptxas of this machine's triton)", "",
              "| impl | bucket | config | status | s | registers | spill bytes | serialized | max rel err |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in probes:
        build = p.get("build", {})
        worst = max((p.get(f"rel_err_{g}") or 0.0 for g in GRADS), default=None)
        lines.append(f"| {p['impl']} | d{p['head_dim']} {'causal' if p['causal'] else 'full'} | "
                     f"`{json.dumps(p['config']) if p['config'] else ''}` | {p['status']} "
                     f"{(p.get('error') or '')[:120]} | {p.get('seconds', '')} | "
                     f"{build.get('partition_registers', '')} | {build.get('spill_bytes', '')} | "
                     f"{build.get('serialized', '')} | {fmt(worst, 4)} |")
    errors = [r for r in rows if r.get("error") and not r["error"].startswith("precompile")]
    lines += ["", "## Rows with errors", ""]
    lines += [f"- {r['id']} {r['impl']} `{r['config']}`: {r['error']}" for r in errors] or ["none"]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows: list[dict], probes: list[dict], env: dict) -> str:
    rows = [r for r in rows if r.get("flops")]
    split = broad_report.load_split(attention_candidates.SPLIT)
    picks = pick_configs(rows, split["fit"] if split else set())
    env = dict(env, picks=[dict(head_dim=k[0], causal=k[1], **p) for k, p in sorted(picks.items())])
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    text = report(rows, picks, probes, split, env)
    (out / "REPORT.md").write_text(text)
    return text


# -------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=190.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="precompile processes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    import torch

    from workbench.kernels.attention import TOLERANCE
    from workbench.kernels.attention_gluon_bwd import supported

    if not supported():
        print("needs an sm_90 GPU and triton with Gluon (TRITON_INTERPRET unset)", file=sys.stderr)
        return 2
    deadline = started + args.budget_s - REPORT_RESERVE_S
    args.out.mkdir(parents=True, exist_ok=True)
    args.dry_run = False  # broad_shapes.environment reads it
    env = broad_shapes.environment(True, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)
    rows: list[dict] = []
    probes: list[dict] = []

    def watchdog():  # a kernel that never returns: report what was measured, then leave
        time.sleep(max(0.0, started + args.budget_s + WATCHDOG_GRACE_S - time.monotonic()))
        print("watchdog: over budget, writing the report and exiting", flush=True)
        try:
            write_outputs(args.out, list(rows), probes, dict(env, watchdog="fired"))
        finally:
            os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    probes += precompile(precompile_jobs(), args.workers, args.budget_s * PRECOMPILE_SHARE)
    (args.out / "precompile.json").write_text(json.dumps(probes, indent=1) + "\n")
    ok = usable(probes)
    timer = broad_shapes.Timer(True)
    log = broad_shapes.CsvLog(args.out / "gluon_bwd.csv", FIELDS)
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
        rows.extend(new)
        e = next(iter(summary([r for r in new if r.get("flops")], {})), None)
        if e:
            fmt = broad_report._fmt
            print(f"{shape['id']} {shape['name']}: sdpa {fmt(_ms(e['sdpa']), 4)} "
                  f"({e['sdpa']['impl'] if e['sdpa'] else '-'}), +triton bwd {fmt(_ms(e['triton']), 4)} "
                  f"({fmt(e['triton_ratio'])}), +gluon bwd best {fmt(_ms(e['gluon_best']), 4)} "
                  f"({fmt(e['gluon_best_ratio'])}) {e['gluon_best']['config'] if e['gluon_best'] else ''}  "
                  f"[{time.monotonic() - t0:.1f} s]", flush=True)
    text = write_outputs(args.out, rows, probes, env)
    print(text.split("## Per shape")[0], flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
