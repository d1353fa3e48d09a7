"""The persistent Gluon attention forward (``attention_gluon`` config ``PERSISTENT=True``, issue 20's short causal
d=128 floor) on an sm_90 GPU: correctness first, then speed next to the forward as wired and SDPA's backends.

    python3 benchmarks/kernels/attention_persistent_bench.py --out DIR --budget-s 180      # H200: <= 200 s

1. Probes, one spawned process per (head_dim, causal, persistent candidate of ``persistent_config_space``): the
   candidate on PROBES (ragged and odd sequences, GQA and MQA, and inputs with several tiles per program so the
   ring, Q-buffer and ping-pong phases wrap across tiles) against SDPA in fp32 (relative Frobenius error within
   ``attention.TOLERANCE["bf16"]``), and O and lse against the one-tile kernel at the same config without
   PERSISTENT (the same per-tile code: expected bitwise equal; the largest difference is recorded). A candidate
   that fails, is wrong or does not answer within PROBE_SHARE of the budget (a hung pipeline; an illegal
   instruction, which poisons its CUDA context, dies with its process) is left out of the timing, with the reason.
2. Per shape of shapes.yaml's attention set (a01..a20): the forward as wired (``flash_attention_fwd``
   config=None), the one-tile kernel at its pinned config, every probed persistent candidate and its one-tile
   counterpart, and SDPA's flash, cuDNN and memory-efficient backends; each run once and checked (batch 0's O,
   against SDPA's memory-efficient backend in fp32), then all timed in the same alternating do_bench rounds
   (``broad_shapes.Timer``: L2 flushed before each launch).
3. A rule, chosen on the FIT ids of ``attention_candidates_split.json`` per (head_dim, causal, sequence bucket)
   from the wired forward and the persistent candidates (lowest geometric mean of time / the row's fastest of
   them); REPORT.md judges it on the TEST ids apart, with the issue's targets.

Writes DIR/rows.csv, DIR/probes.json, DIR/rule.json, DIR/environment.json and DIR/REPORT.md; prints progress.
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

PROBE_SHARE = 0.45
"""Share of the budget the probe processes may take; a guess, calibrate me from DIR/probes.json's seconds."""
REPORT_RESERVE_S = 6.0
PROBES = [  # (batch, heads_q, heads_kv, seq): what each persistent candidate must get right before it is timed
    (1, 4, 2, 1040),  # GQA 2, a 16-row tail on the last tile; fewer tiles than SMs: one tile a program
    (2, 8, 2, 333),  # GQA 4, a sequence no tile divides
    (1, 2, 2, 40),  # one partial tile: block 0 is the diagonal and the tail
    (4, 32, 4, 1000),  # GQA 8, 512-1024 tiles over 132-264 programs: phases continue over ~4-8 tiles a program
    (3, 16, 1, 2047),  # MQA, odd length, ~5 tiles a program with 16-32 key blocks each
]
SEQ_BUCKETS = (("short", 1024), ("mid", 4096), ("long", None))
"""The rule's sequence buckets, as ``attention_fwd_short_bench``'s: S <= 1024, S <= 4096, longer."""
FIELDS = ["id", "name", "split", "batch", "seq", "heads_q", "heads_kv", "head_dim", "causal", "choice", "config", "ms",
          "tflops", "rel_err", "error"]


def _lib():
    """The benchmark helpers of this folder and the report helpers (imported after sys.path is set)."""
    sys.path.insert(0, str(HERE))
    import attention_candidates
    import broad_shapes

    from workbench.kernels import broad_report
    return attention_candidates, broad_shapes, broad_report


def one_tile(config: dict) -> dict:
    """The one-tile kernel's config of the same tiles (PERSISTENT dropped)."""
    return {key: value for key, value in config.items() if key != "PERSISTENT"}


def candidates(head_dim: int, causal: bool) -> dict[str, dict | None]:
    """{choice: config} of one (head_dim, causal): "wired" (None: config=None as shipped), the one-tile pinned
    config, each persistent candidate ("persistent {json}") and its one-tile counterpart ("one-tile {json}")."""
    from workbench.kernels.attention_gluon import PINNED_FORWARD, persistent_config_space

    out = {"wired": None, "gluon-pinned": PINNED_FORWARD[(head_dim, causal)]}
    for config in persistent_config_space(head_dim, causal):
        out["persistent " + json.dumps(one_tile(config), sort_keys=True)] = config
        out["one-tile " + json.dumps(one_tile(config), sort_keys=True)] = one_tile(config)
    return out


def forward_fn(config: dict | None, q, k, v, causal: bool):
    """A no-argument call returning O: the wired forward (config None) or the Gluon kernel at ``config``."""
    from workbench.kernels import attention, attention_gluon

    if config is None:
        return lambda: attention.flash_attention_fwd(q, k, v, causal)[0]
    return lambda: attention_gluon.gluon_attention_forward(q, k, v, causal, config=config)[0]


def fp32_reference(q, k, v, causal: bool):
    """softmax(q k^T / sqrt(D)) v in fp32 (SDPA's memory-efficient backend: no S x S buffer; math if it refuses)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[1] // k.shape[1]
    args = (q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1))
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return torch.nn.functional.scaled_dot_product_attention(*args, is_causal=causal)


# ---------------------------------------------------------------------------------------------------- probes
def _probe_job(job: tuple) -> dict:
    """Worker: one persistent candidate on every probe input (module doc, step 1)."""
    head_dim, causal, config = job
    sys.path.insert(0, str(ROOT))
    _, broad_shapes, _ = _lib()
    started = time.perf_counter()
    out = dict(head_dim=head_dim, causal=causal, config=json.dumps(config, sort_keys=True), rel_err=0.0,
               max_diff_vs_one_tile=0.0)
    try:
        import torch

        from workbench.kernels.attention import TOLERANCE
        from workbench.kernels.attention_gluon import gluon_attention_forward

        for b, hq, hkv, s in PROBES:
            generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s + head_dim)
            q, k, v = (torch.randn(b, h, s, head_dim, device="cuda", dtype=torch.bfloat16, generator=generator)
                       for h in (hq, hkv, hkv))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                o, lse = gluon_attention_forward(q, k, v, causal, config=config)
                o_1, lse_1 = gluon_attention_forward(q, k, v, causal, config=one_tile(config))
            err = broad_shapes.relative_error(o, fp32_reference(q, k, v, causal))
            diff = max((o.float() - o_1.float()).abs().max().item(), (lse - lse_1).abs().max().item())
            out["rel_err"], out["max_diff_vs_one_tile"] = max(out["rel_err"], err), max(out["max_diff_vs_one_tile"],
                                                                                        diff)
            if not err <= TOLERANCE["bf16"]:
                out.update(status="wrong", error=f"probe {(b, hq, hkv, s)}: relative error {err:.3e}")
                break
        else:
            out["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a candidate that does not build or run is a result
        out.update(status="error", error=broad_shapes._error_text(exc))
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def probe_pool(jobs: list, job_fn, workers: int, limit_s: float, describe) -> list[dict]:
    """Each job's result of ``job_fn``, in spawned processes one job each (an illegal instruction poisons only its
    own CUDA context), ``describe(job, result)`` printed as each arrives; jobs still running at ``limit_s`` are
    killed and marked "timeout" (a slow build or a hung pipeline)."""
    results, started = {}, time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(max(1, min(workers, len(jobs))), maxtasksperchild=1)
    try:
        pending = {pool.apply_async(job_fn, (job,)): i for i, job in enumerate(jobs)}
        while pending and time.monotonic() - started < limit_s:
            for handle in [h for h in pending if h.ready()]:
                i = pending.pop(handle)
                try:
                    results[i] = handle.get()
                except Exception as exc:  # noqa: BLE001 - a crashed worker
                    results[i] = dict(status="error", error=repr(exc)[:300])
                print(f"  probe {describe(jobs[i], results[i])}", flush=True)
            time.sleep(0.2)
        for i in pending.values():
            results[i] = dict(status="timeout", error=f"no answer within {limit_s:.0f} s (slow build or a hang)")
    finally:
        pool.terminate()
        pool.join()
    print(f"probes: {sum(r['status'] == 'ok' for r in results.values())}/{len(jobs)} ok in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return [results[i] for i in range(len(jobs))]


def probe(workers: int, limit_s: float) -> list[dict]:
    """Every persistent candidate's probe result; processes still running at ``limit_s`` are killed."""
    from workbench.kernels.attention_gluon import persistent_config_space

    jobs = [(d, causal, c) for d in (128, 64) for causal in (True, False) for c in persistent_config_space(d, causal)]
    results = probe_pool(jobs, _probe_job, workers, limit_s, lambda job, r: (
        f"d{job[0]} causal={job[1]} {one_tile(job[2])}: {r['status']} err {r.get('rel_err', '?')}, vs one-tile "
        f"{r.get('max_diff_vs_one_tile')} ({r.get('seconds', '?')} s)"))
    return [dict(dict(head_dim=d, causal=causal, config=json.dumps(c, sort_keys=True)), **r)
            for (d, causal, c), r in zip(jobs, results)]


# ------------------------------------------------------------------------------------------------------ shapes
def shape_rows(shape: dict, split: str, timer, refused: dict[tuple, str], tolerance: float,
               choices: dict[str, dict | None] | None = None) -> list[dict]:
    """One row per candidate and SDPA backend of one shape (module doc, step 2); ``choices``: {choice: config}
    in ``candidates``' form (default: ``candidates`` of the shape's head_dim and causal)."""
    import torch

    from workbench.kernels.attention import flops

    attention_candidates, broad_shapes, _ = _lib()
    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    causal = bool(causal)
    q, k, v, _ = attention_candidates.inputs(shape, "cuda", torch.bfloat16)  # q: [B, Hq, S, D]; k, v: [B, Hkv, S, D]
    base = dict(id=shape["id"], name=shape["name"], split=split, batch=b, seq=s, heads_q=hq, heads_kv=hkv,
                head_dim=d, causal=int(causal))
    ref = fp32_reference(q[:1], k[:1], v[:1], causal)  # batch 0: [1, Hq, S, D]
    fns, _, sdpa_errors = attention_candidates.sdpa_fns(shape, "fwd", (q, k, v), True)
    rows = {name: dict(base, choice=name, config="") for name in fns}
    for key, error in sdpa_errors.items():
        name = key.removesuffix("_error")
        rows.setdefault(name, dict(base, choice=name, config="", error=error))
    for choice, config in (candidates(d, causal) if choices is None else choices).items():
        row = rows[choice] = dict(base, choice=choice, config=json.dumps(config, sort_keys=True) if config else "")
        why = refused.get((d, causal, row["config"]), "")
        if why:
            row["error"] = why
            continue
        fn = forward_fn(config, q, k, v, causal)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row["rel_err"] = broad_shapes.relative_error(fn()[:1], ref)
            if row["rel_err"] <= tolerance:
                fns[choice] = fn
            else:
                row["error"] = f"wrong result (relative error {row['rel_err']:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            row["error"] = broad_shapes._error_text(exc)
            torch.cuda.synchronize()
    work = flops(b, hq, s, d, causal, "fwd")
    for choice, ms in timer.rounds(fns).items():
        rows[choice].update(ms=ms, tflops=work / ms / 1e9)
    return list(rows.values())


def sweep_shapes(shapes: list[dict], split: dict, timer, refused: dict[tuple, str], tolerance: float, log,
                 deadline: float, choices_for=lambda shape: None, describe=lambda shape, rows: shape["id"]):
    """``shape_rows`` of each shape in turn until ``deadline`` (``time.monotonic()``), every row logged as it comes;
    a shape that does not run is one error row and the rest go on. ``choices_for(shape)``: the shape's {choice:
    config} (None: ``candidates``'); ``describe(shape, rows)``: its progress line. The timed rows, in order."""
    import torch

    _, broad_shapes, _ = _lib()
    rows = []
    for shape in shapes:
        if time.monotonic() > deadline:
            print(f"budget: stopping before {shape['id']}", flush=True)
            break
        t0, half = time.monotonic(), "fit" if shape["id"] in split["fit"] else "test"
        try:
            new = shape_rows(shape, half, timer, refused, tolerance, choices_for(shape))
        except Exception as exc:  # noqa: BLE001 - one shape that does not run: recorded, the rest goes on
            traceback.print_exc()
            new = [dict(id=shape["id"], name=shape["name"], split=half, choice="?",
                        error=broad_shapes._error_text(exc))]
            torch.cuda.empty_cache()
        for row in new:
            log.add(row)
        timed = [r for r in new if "head_dim" in r]
        rows += timed
        print(f"{describe(shape, timed)}  [{time.monotonic() - t0:.1f} s]", flush=True)
    return rows


# -------------------------------------------------------------------------------------------------- rule, report
def seq_bucket(seq: int) -> str:
    return next(name for name, bound in SEQ_BUCKETS if bound is None or seq <= bound)


def _ms(row: dict) -> float | None:
    return float(row["ms"]) if row.get("ms") not in (None, "") and not row.get("error") else None


def _is_choice(name: str) -> bool:
    """What the rule may pick: the wired forward or a persistent candidate (the one-tile rows are the contrast)."""
    return name == "wired" or name.startswith("persistent ")


def _bucket(row: dict) -> str:
    return f"d{row['head_dim']} {'causal' if int(row['causal']) else 'full'} {seq_bucket(int(row['seq']))}"


def propose_rule(rows: list[dict], fit_ids: set[str], geomean) -> dict[str, dict]:
    """{bucket: {choice, score, shapes}}, chosen on the fit shapes only; a bucket without fit shapes keeps "wired"."""
    per_bucket: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r["id"] in fit_ids and _is_choice(r["choice"]) and _ms(r):
            per_bucket.setdefault(_bucket(r), {}).setdefault(r["id"], {})[r["choice"]] = _ms(r)
    rule = {}
    for key, per_shape in sorted(per_bucket.items()):
        common = set.intersection(*(set(t) for t in per_shape.values()))
        scores = {c: geomean([t[c] / min(t.values()) for t in per_shape.values()]) for c in common}
        if scores:
            best = min(scores, key=scores.get)
            rule[key] = dict(choice=best, score=round(scores[best], 4), shapes=sorted(per_shape))
    return rule


def per_shape(rows: list[dict], rule: dict) -> list[dict]:
    """Per shape: best SDPA, then ms and ratio (SDPA / it) of the wired forward, the pinned one-tile kernel, the
    fastest persistent candidate, the fastest one-tile counterpart, and the rule's choice."""
    out = []
    for sid in sorted({r["id"] for r in rows}):
        rs = {r["choice"]: r for r in rows if r["id"] == sid}
        first = next(iter(rs.values()))
        timed = {c: _ms(r) for c, r in rs.items() if _ms(r)}
        sdpa = min((c for c in timed if c.startswith("sdpa_")), key=timed.get, default=None)
        picks = dict(wired="wired", pinned="gluon-pinned",
                     persistent=min((c for c in timed if c.startswith("persistent ")), key=timed.get, default=None),
                     one_tile=min((c for c in timed if c.startswith("one-tile ")), key=timed.get, default=None),
                     rule=rule.get(_bucket(first), {}).get("choice", "wired"))
        e = dict(id=sid, first=first, sdpa=sdpa, sdpa_ms=timed.get(sdpa), picks=picks)
        for key, choice in picks.items():
            e[f"{key}_ms"] = timed.get(choice)
            e[f"{key}_ratio"] = timed[sdpa] / timed[choice] if sdpa and choice in timed else None
        out.append(e)
    return out


def report(rows: list[dict], rule: dict, probes: list[dict], split: dict, env: dict) -> str:
    _, _, br = _lib()
    fmt, entries = br._fmt, per_shape(rows, rule)
    lines = [f"# Persistent Gluon attention forward ({env.get('gpu', '?')})", "",
             f"`{env.get('command', '')}` ({env.get('date_utc', '')}; torch {env.get('torch')}, triton "
             f"{env.get('triton')}). {env.get('timing', '')}. Ratio = best SDPA time / the candidate's. The rule is "
             "chosen on the fit ids of `benchmarks/kernels/attention_candidates_split.json`; the test ids are the "
             "honest figure. `persistent best` / `one-tile best`: the fastest of each family per shape (ceilings).",
             "", "## Targets (issue 20: forward geometric mean >= 0.95, no shape below 0.75)", "",
             "| forward | shapes | geomean | min | shapes timed |", "|---|---|---|---|---|"]
    lines += br.forward_target_rows(entries, split, (
        ("as wired (config=None)", "wired"),
        ("proposed rule", "rule"),
        ("persistent best per shape", "persistent"),
        ("one-tile best per shape", "one_tile"),
    ))
    lines += ["", "## Proposed rule (fit shapes; S <= 1024 short, <= 4096 mid, else long)", "",
              "| bucket | choice | geomean of time / fastest, fit shapes | fit shapes |", "|---|---|---|---|"]
    lines += [f"| {key} | `{r['choice']}` | {r['score']:.3f} | {', '.join(r['shapes'])} |" for key, r in rule.items()]
    lines += ["", "## Per shape (ms, ratio = best SDPA / it)", "",
              "| id | split | d | causal | seq | SDPA best | wired | ratio | pinned one-tile | ratio | persistent best "
              "| ms | ratio | one-tile best | ms | ratio | rule | ratio |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        r, p = e["first"], e["picks"]
        lines.append(f"| {e['id']} | {r['split']} | {r['head_dim']} | {r['causal']} | {r['seq']} | "
                     f"{fmt(e['sdpa_ms'], 4)} {e['sdpa'] or ''} | {fmt(e['wired_ms'], 4)} | {fmt(e['wired_ratio'])} | "
                     f"{fmt(e['pinned_ms'], 4)} | {fmt(e['pinned_ratio'])} | `{p['persistent']}` | "
                     f"{fmt(e['persistent_ms'], 4)} | {fmt(e['persistent_ratio'])} | `{p['one_tile']}` | "
                     f"{fmt(e['one_tile_ms'], 4)} | {fmt(e['one_tile_ratio'])} | `{p['rule']}` | "
                     f"{fmt(e['rule_ratio'])} |")
    ok = [p for p in probes if p["status"] == "ok"]
    lines += ["", f"## Probes ({len(ok)}/{len(probes)} ok; {len(PROBES)} inputs each: {PROBES})", "",
              "| d | causal | config | status | max rel err vs fp32 SDPA | max abs diff vs one-tile (O, lse) | s |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {p['head_dim']} | {int(p['causal'])} | `{p['config']}` | {p['status']} {p.get('error', '')} | "
              f"{fmt(p.get('rel_err'), 4)} | {fmt(p.get('max_diff_vs_one_tile'), 4)} | {p.get('seconds', '')} |"
              for p in probes]
    errors = [r for r in rows if r.get("error") and not str(r["error"]).startswith("probe")]
    lines += ["", "## Rows with errors", ""]
    lines += [f"- {r['id']} {r['choice']}: {r['error']}" for r in errors] or ["none"]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=180.0, help="stop cleanly after this many seconds")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="probe processes")
    parser.add_argument("--ids", default="", help="comma-separated shape ids (default: every attention shape)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    sys.path.insert(0, str(ROOT))
    attention_candidates, broad_shapes, broad_report = _lib()

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
    probes = probe(args.workers, args.budget_s * PROBE_SHARE)
    (args.out / "probes.json").write_text(json.dumps(probes, indent=1) + "\n")
    refused = {}  # (head_dim, causal, config json) -> why; the one-tile counterpart runs regardless
    for p in probes:
        if p["status"] != "ok":
            refused[(p["head_dim"], p["causal"], p["config"])] = f"probe {p['status']}: {p.get('error', '')}"
    split = broad_report.load_split(attention_candidates.SPLIT)
    wanted = {i for i in args.ids.split(",") if i}
    timer = broad_shapes.Timer(True)
    log = broad_shapes.CsvLog(args.out / "rows.csv", FIELDS)
    shapes = [shape for shape in broad_shapes.load_shapes()["attention"] if not wanted or shape["id"] in wanted]

    def describe(shape: dict, timed: list[dict]) -> str:
        e = next(iter(per_shape(timed, {})), None)
        if e is None:
            return f"{shape['id']} {shape['name']}: no rows"
        fmt = broad_report._fmt
        return (f"{shape['id']} {shape['name']}: sdpa {fmt(e['sdpa_ms'], 4)} ({e['sdpa']}), wired "
                f"{fmt(e['wired_ratio'])}, pinned {fmt(e['pinned_ratio'])}, persistent best "
                f"{fmt(e['persistent_ratio'])} {e['picks']['persistent']}, one-tile best {fmt(e['one_tile_ratio'])}")

    rows = sweep_shapes(shapes, split, timer, refused, TOLERANCE["bf16"], log, deadline, describe=describe)
    rule = propose_rule(rows, split["fit"], broad_report.geomean)
    (args.out / "rule.json").write_text(json.dumps(rule, indent=1) + "\n")
    text = report(rows, rule, probes, split, env)
    (args.out / "REPORT.md").write_text(text)
    print(text.split("## Per shape")[0], flush=True)
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
