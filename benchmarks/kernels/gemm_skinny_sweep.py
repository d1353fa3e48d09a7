"""Why issue 20's losing GEMMs lose: every candidate config of the extended space against the vendor library.

    python3 benchmarks/kernels/gemm_skinny_sweep.py --out DIR --budget-s 200     # on one H200 (<= 220 s wall)
    python3 benchmarks/kernels/gemm_skinny_sweep.py --report DIR                 # REPORT.md again from DIR's CSVs
    python3 benchmarks/kernels/gemm_skinny_sweep.py --dry-run --out DIR          # CPU: the code path, stand-ins

Shapes (``SHAPE_IDS``): the 13 bf16 GEMMs of benchmarks/results/h200/kernels/broad/REPORT.md below 0.90 of
torch.matmul where it takes >= 20 us (DLRM short-K MLPs, skinny M = 16/64, DeepSeek-V3 2048 x 7168 x 2048 and
4096 x 576 x 7168, 3000 x 5000 x 7000), the 6 tf32 GEMMs of benchmarks/results/h200/kernels/elementwise/tf32.csv
and 6 large LLM GEMMs (forward, dgrad, wgrad) as a no-regression control. Per shape: the vendor call
(``torch.matmul``; tf32 with ``allow_tf32``), the selector's pick (``dispatch.triton_matmul`` with config=None, as
a user calls it) and up to ``--configs`` candidates of the space (gemm.py, its split-K and swap-AB families, the
TMA kernel; ``candidates``), each checked against the vendor's result first (``gemm.TOLERANCE``), then timed with
``broad_shapes.Timer`` (do_bench median, alternating rounds over the vendor, the pick and a chunk of candidates; L2
flushed, input sets rotated when one fits in L2). Errors are recorded and the sweep goes on.

Kernels compile first in spawned worker processes (``broad_shapes.precompile``) on uninitialised inputs of the same
shapes, so the timed loop loads them from Triton's cache; what is not compiled by then compiles inline, and the
budget skips what is left. Writes DIR/sweep.csv (one row per shape and config), DIR/summary.csv (per shape: vendor,
best config, the selector's pick, per-family bests), DIR/environment.json, DIR/REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import broad_shapes  # noqa: E402  (same folder: shapes, timer, inputs, CSV log, precompile)

LOSING_IDS = ("g37", "g38", "g39", "g41", "g43", "g45", "g49", "g50", "g53", "g54", "g34", "g36", "g69")
"""bf16 shapes below 0.90 of torch.matmul (vendor >= 20 us) in the committed broad run."""
CONTROL_IDS = ("g01", "g03", "g04", "g12", "g05", "g16")
"""Large LLM GEMMs at parity in the broad run: qkv, gate_up, down, o forward; qkv dgrad (nt); o wgrad (tn)."""
TF32_SHAPES = ((8192, 4096, 4096), (8192, 6144, 4096), (8192, 4096, 14336), (8192, 28672, 4096),
               (4096, 4096, 4096), (16384, 8192, 8192))
"""(m, n, k) of benchmarks/results/h200/kernels/elementwise/tf32.csv (A [M, K], B [K, N] row-major fp32)."""
SHAPE_IDS = LOSING_IDS + CONTROL_IDS
CONFIGS = {"losing": 22, "tf32": 10, "control": 8}
"""Candidates timed per shape group (besides the selector's pick): the bound that keeps a run within budget."""
CHUNK = 8
"""Candidates per alternating do_bench round set (each set also times the vendor and the pick)."""
WARMUP_MS, REP_MS, ROUNDS = 5, 10, 3
PRECOMPILE_SHARE = 0.4
REPORT_RESERVE_S = 6.0
GPU = "h200"
SWEEP_FIELDS = ["id", "group", "name", "dtype", "m", "n", "k", "layout", "family", "config", "config_json",
                "pred_ms", "pred_rank", "ms", "vendor_ms", "ratio", "rel_err", "error"]
SUMMARY_FIELDS = ["id", "group", "name", "dtype", "m", "n", "k", "layout", "vendor_ms", "broad_ratio", "pick",
                  "pick_family", "pick_ms", "pick_ratio", "best", "best_family", "best_ms", "best_ratio",
                  "best_pred_rank", "timed", "errors", "best_gemm", "best_split", "best_swap", "best_tma"]
FAMILIES = ("gemm", "split", "swap", "tma")


# ------------------------------------------------------------------------------------------------- shapes
def sweep_shapes(dry_run: bool = False) -> list[dict]:
    """The rows to sweep: shapes.yaml's rows of SHAPE_IDS (dtype bf16) and the tf32 shapes; stand-in sizes for
    the dry run (``broad_shapes.stand_in``)."""
    rows = {row["id"]: row for row in broad_shapes.load_shapes()["gemm"]}
    out = [dict(rows[i], dtype="bf16", group="losing" if i in LOSING_IDS else "control") for i in SHAPE_IDS]
    out += [dict(id=f"tf32-{m}x{n}x{k}", family="tf32", name=f"tf32.{m}x{n}x{k}", m=m, n=n, k=k, layout="nn",
                 dtype="tf32", group="tf32") for m, n, k in TF32_SHAPES]
    if dry_run:
        out = [dict(r, m=broad_shapes.stand_in(r["m"]), n=broad_shapes.stand_in(r["n"]),
                    k=broad_shapes.stand_in(r["k"])) for r in out]
    return out


# --------------------------------------------------------------------------------------------- candidates
def family(config: dict | None) -> str:
    from workbench.kernels.spaces import is_split_k, is_swap_ab, is_tma

    if not config:
        return "gemm"
    return "tma" if is_tma(config) else "swap" if is_swap_ab(config) else "split" if is_split_k(config) else "gemm"


def candidates(shape: dict, limit: int) -> list:
    """Up to ``limit`` ``select.Candidate``s for the shape, ranked by the selector's model over the whole extended
    space (gemm.py, split-K, swap-AB, TMA without warp specialization: what the selector ranks), the model's best
    per family first, then ``select.shortlist``'s spread over tiles, then the rest in predicted order."""
    from workbench.kernels import spaces
    from workbench.select import rank_configs, shortlist

    operand_bytes = 4 if shape["dtype"] == "tf32" else 2
    space = spaces.gemm_config_space("cuda", dtype_bytes=operand_bytes)
    space += spaces.tma_config_space(operand_bytes, warp_specialize=False)
    if operand_bytes == 2:
        space += spaces.split_k_config_space(2) + spaces.skinny_config_space(2)
    ranked = rank_configs("gemm", {"m": shape["m"], "n": shape["n"], "k": shape["k"]}, shape["dtype"], GPU,
                          layout=shape["layout"], configs=space)
    picked = []
    for name in FAMILIES:  # the model's best of each family, then its second best
        picked += [c for c in ranked if family(c.config) == name][:2]
    picked += [c for c in shortlist(ranked, limit) if c not in picked]
    picked += [c for c in ranked if c not in picked]
    return picked[:limit]


# ------------------------------------------------------------------------------------------------ inputs
def inputs(shape: dict, device: str, empty: bool = False) -> list[tuple]:
    """Input sets (a, b): bf16 in the shape's layout (``broad_shapes.gemm_inputs``), or fp32 row-major for tf32."""
    import torch

    if shape["dtype"] == "bf16":
        sets = 1 if empty else broad_shapes.gemm_sets(shape, "bf16")
        return broad_shapes.gemm_inputs(shape, "bf16", device, sets, empty=empty)
    make = torch.empty if empty else torch.randn
    sets = 1 if empty else max(1, math.ceil(2 * broad_shapes.L2_BYTES / (4 * (shape["k"] * (shape["m"] + shape["n"])))))
    return [(make(shape["m"], shape["k"], device=device), make(shape["k"], shape["n"], device=device))
            for _ in range(min(sets, broad_shapes.MAX_SETS))]


def ours(config: dict | None, dtype: str):
    """Our GEMM through the front door with ``config`` (None: the selector's pick)."""
    from workbench.kernels import dispatch

    precision = "tf32" if dtype == "tf32" else "ieee"
    return lambda a, b: dispatch.triton_matmul(a, b, precision=precision, config=config)


def vendor(dtype: str):
    import torch

    def call(a, b):
        if dtype == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
        return torch.matmul(a, b)
    return call


def pick_key(shape: dict, first: tuple) -> str:
    """The selector's config=None pick for this call, as ``broad_shapes.gemm_case`` reads it."""
    from workbench.kernels import dispatch, gemm
    from workbench.kernels._common import backend
    from workbench.select.gemm import config_key

    a, b = first
    if shape["dtype"] == "tf32":  # fp32 as tf32: the TMA config on sm_90 where it takes the call, else gemm.py's
        if dispatch._tma_tf32_takes(a, b):  # static default (the selector does not rank fp32 at run time)
            return config_key(dispatch.TF32_TMA_CONFIG)
        return config_key(gemm.default_config(a, b, backend()))
    tma = dispatch._tma_takes(a, b)
    return config_key(dispatch._default_config(a, b, backend(), "exact", tma=tma))


# --------------------------------------------------------------------------------------------- precompile
def compile_job(job: tuple) -> str:
    """Worker process: each config of the job once on uninitialised inputs of the shape (Triton's disk cache then
    hands the kernels to the timing process)."""
    shape, configs, device = job
    import torch

    started, failures = time.perf_counter(), 0
    a, b = inputs(shape, device, empty=True)[0]
    for config in [None, *configs]:
        try:
            ours(config, shape["dtype"])(a, b)
        except Exception:  # noqa: BLE001 - the timed run records the error
            failures += 1
    if device == "cuda":
        torch.cuda.synchronize()
    status = "ok" if not failures else f"{failures} configs failed"
    return f"{shape['id']}: {status} ({len(configs)} configs, {time.perf_counter() - started:.1f} s)"


# ------------------------------------------------------------------------------------------------ one shape
def sweep_shape(shape: dict, timer, device: str, deadline: float, limit: int, log, broad: dict) -> dict:
    """Time the vendor, the selector's pick and the candidates of one shape; log a row per config; return the
    shape's summary row."""
    import torch

    from workbench.kernels import gemm
    from workbench.select.gemm import config_key

    base = {key: shape[key] for key in ("id", "group", "name", "dtype", "m", "n", "k", "layout")}
    sets = inputs(shape, device)
    first = sets[0]
    tolerance = gemm.TOLERANCE[shape["dtype"]]
    reference = vendor(shape["dtype"])(*first)
    ranked = candidates(shape, limit)
    pick = pick_key(shape, first)
    rows, calls = [], {}
    entries = [("pick", None, None)] + [(c.key, c.config, c) for c in ranked]
    for rank, (name, config, cand) in enumerate(entries):
        row = dict(base, family=family(config) if config else "pick", config=name,
                   config_json=json.dumps(config, sort_keys=True) if config else "",
                   pred_ms=cand.time_s * 1e3 if cand else "", pred_rank=rank if cand else "")
        rows.append(row)
        if time.monotonic() > deadline:
            row["error"] = "skipped (budget)"
            continue
        try:
            fn = ours(config, shape["dtype"])
            error = broad_shapes.relative_error(fn(*first), reference)
            row["rel_err"] = error
            if error <= tolerance:
                calls[name] = broad_shapes._cycle(fn, sets)
            else:
                row["error"] = f"wrong result (relative error {error:.2e} > {tolerance})"
        except Exception as exc:  # noqa: BLE001 - a config that fails to compile or launch is a result
            row["error"] = broad_shapes._error_text(exc)
            if timer.gpu:
                torch.cuda.synchronize()
    del reference
    vendor_call = broad_shapes._cycle(vendor(shape["dtype"]), sets)
    names = [name for name in calls if name != "pick"]
    vendor_times = []
    for start in range(0, max(1, len(names)), CHUNK):
        if time.monotonic() > deadline:
            break
        chunk = {"vendor": vendor_call, **({"pick": calls["pick"]} if "pick" in calls else {}),
                 **{name: calls[name] for name in names[start:start + CHUNK]}}
        times = timer.rounds(chunk)
        vendor_times.append(times.pop("vendor"))
        for row in rows:
            if row["config"] in times and "ms" not in row:
                row.update(ms=times[row["config"]], vendor_ms=vendor_times[-1],
                           ratio=vendor_times[-1] / times[row["config"]])
    for row in rows:
        if "ms" not in row and not row.get("error"):
            row["error"] = "skipped (budget)"
        log.add(row)
    del sets, calls
    if timer.gpu:
        torch.cuda.empty_cache()
    return summarise(base, rows, pick, statistics.median(vendor_times) if vendor_times else None, broad)


def summarise(base: dict, rows: list[dict], pick: str, vendor_ms: float | None, broad: dict) -> dict:
    timed = [r for r in rows if r.get("ms") and r["family"] != "pick"]
    best = min(timed, key=lambda r: r["ms"], default=None)
    pick_row = next((r for r in rows if r["family"] == "pick"), {})
    summary = dict(base, vendor_ms=vendor_ms, broad_ratio=broad.get(base["id"], ""), pick=pick,
                   pick_family=family_of_key(pick), pick_ms=pick_row.get("ms", ""), pick_ratio=pick_row.get("ratio", ""),
                   timed=len(timed), errors=sum(bool(r.get("error")) for r in rows))
    if best is not None:
        summary.update(best=best["config"], best_family=best["family"], best_ms=best["ms"], best_ratio=best["ratio"],
                       best_pred_rank=best["pred_rank"])
    for name in FAMILIES:
        ratios = [r["ratio"] for r in timed if r["family"] == name]
        summary[f"best_{name}"] = max(ratios) if ratios else ""
    return summary


def family_of_key(key: str) -> str:
    return "tma" if key.startswith("tma") else "swap" if " swap" in key else "split" if " split" in key else "gemm"


def broad_ratios() -> dict:
    """{shape id: vendor / ours} of the committed broad run (bf16), the "before" of each row."""
    import csv

    path = HERE.parents[1] / "benchmarks/results/h200/kernels/broad/gemm.csv"
    out = {}
    if path.exists():
        for row in csv.DictReader(path.open()):
            if row["dtype"] == "bf16" and row["ours_ms"] and row["vendor_ms"]:
                out[row["id"]] = float(row["vendor_ms"]) / float(row["ours_ms"])
    tf32 = HERE.parents[1] / "benchmarks/results/h200/kernels/elementwise/tf32.csv"
    if tf32.exists():
        for row in csv.DictReader(tf32.open()):
            if row.get("vs_cublas"):
                out[f"tf32-{row['m']}x{row['n']}x{row['k']}"] = float(row["vs_cublas"])
    return out


# ------------------------------------------------------------------------------------------------- report
def write_report(out: Path) -> str:
    import csv

    rows = list(csv.DictReader((out / "summary.csv").open())) if (out / "summary.csv").exists() else []
    env = json.loads((out / "environment.json").read_text()) if (out / "environment.json").exists() else {}
    lines = ["# Issue 20's losing GEMMs: the extended config space against the vendor library", "",
             f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, "
             f"{env.get('date_utc', '?')}; `{env.get('command', '')}`; {env.get('timing', '')}.", "",
             "ratio = vendor time / ours (above 1: ours faster). before: the committed broad run "
             "(benchmarks/results/h200/kernels/broad/gemm.csv; tf32: elementwise/tf32.csv). pick: what config=None "
             "runs (the selector; tf32: the TMA tf32 config on sm_90, else gemm.py's static default). best: "
             "the fastest candidate timed (its rank in the model's order in parentheses). Per family: the best ratio of "
             "gemm.py, its split-K and swap-AB families and the TMA kernel.", "",
             "| group | id | name | m x n x k | layout | vendor ms | before | pick | pick ratio | best | best ratio | "
             "gemm | split | swap | tma | timed | errors |", "|" + "---|" * 17]
    for r in rows:
        lines.append(f"| {r['group']} | {r['id']} | {r['name']} | {r['m']}x{r['n']}x{r['k']} | {r['layout']} | "
                     f"{_cell(r.get('vendor_ms'), 4)} | {_cell(r.get('broad_ratio'))} | {r.get('pick', '')} | "
                     f"{_cell(r.get('pick_ratio'))} | {r.get('best', '')} ({r.get('best_pred_rank', '')}) | "
                     f"{_cell(r.get('best_ratio'))} | " + " | ".join(_cell(r.get(f"best_{f}")) for f in FAMILIES)
                     + f" | {r.get('timed', '')} | {r.get('errors', '')} |")
    lines += ["", "| group | shapes | pick geomean | pick min | best geomean | best min | before geomean | before min |",
              "|---|---|---|---|---|---|---|---|"]
    for group in ("losing", "tf32", "control"):
        part = [r for r in rows if r["group"] == group]
        cells = []
        for key in ("pick_ratio", "best_ratio", "broad_ratio"):
            values = [float(r[key]) for r in part if r.get(key) not in ("", None)]
            cells += [f"{math.exp(statistics.fmean(map(math.log, values))):.3f}", f"{min(values):.3f}"] if values \
                else ["", ""]
        lines.append(f"| {group} | {len(part)} | " + " | ".join(cells) + " |")
    lines += ["", "Per-config times: sweep.csv (errors there too). Targets (issue 20): bf16 >= 0.90 of the vendor "
              "where it takes >= 20 us and geometric mean >= 0.97; tf32 >= 0.80 of cuBLAS on every shape."]
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text)
    return text


def _cell(value, digits: int = 2) -> str:
    return f"{float(value):.{digits}f}" if value not in ("", None) else ""


# --------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop cleanly after this many seconds")
    parser.add_argument("--report", type=Path, default=None, help="only write DIR/REPORT.md from DIR's CSVs")
    parser.add_argument("--dry-run", action="store_true", help="CPU, TRITON_INTERPRET=1, stand-in sizes")
    parser.add_argument("--limit", type=int, default=None, help="at most this many shapes (debugging)")
    parser.add_argument("--configs", type=float, default=1.0, help="scale the candidates per shape (CONFIGS)")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    args = parser.parse_args(argv)
    if args.report is not None:
        print(write_report(args.report))
        return 0
    if args.out is None:
        parser.error("--out is required (or --report DIR)")
    started = time.monotonic()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    import torch

    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("no GPU: use --dry-run for the CPU code path check", file=sys.stderr)
        return 2
    device = "cuda" if gpu else "cpu"
    shapes = sweep_shapes(args.dry_run)[: args.limit]
    limits = {group: max(1, round(n * args.configs)) for group, n in CONFIGS.items()}
    if args.dry_run:
        limits = dict.fromkeys(limits, 3)
    args.out.mkdir(parents=True, exist_ok=True)
    env = broad_shapes.environment(gpu, args)
    env["timing"] = f"do_bench median, {ROUNDS} alternating rounds of warmup {WARMUP_MS} ms / rep {REP_MS} ms"
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)
    deadline = started + args.budget_s - REPORT_RESERVE_S
    plans = [(shape, [c.config for c in candidates(shape, limits[shape["group"]])]) for shape in shapes]
    print(f"{len(shapes)} shapes, {sum(len(c) for _, c in plans)} candidate configs", flush=True)
    if args.workers > 0 and gpu:
        jobs = [(shape, configs[i::2], device) for shape, configs in plans for i in range(2)]
        broad_shapes.precompile(jobs, args.workers, min(args.budget_s * PRECOMPILE_SHARE, deadline - time.monotonic()),
                                job_fn=compile_job)
    timer = broad_shapes.Timer(gpu, warmup_ms=WARMUP_MS, rep_ms=REP_MS, rounds=ROUNDS)
    sweep_log = broad_shapes.CsvLog(args.out / "sweep.csv", SWEEP_FIELDS)
    summary_log = broad_shapes.CsvLog(args.out / "summary.csv", SUMMARY_FIELDS)
    broad = broad_ratios()
    for index, (shape, _) in enumerate(plans):
        now = time.monotonic()
        share = now + (deadline - now) / (len(plans) - index)  # this shape's slice of what is left
        t0 = now
        try:
            summary = sweep_shape(shape, timer, device, share, limits[shape["group"]], sweep_log, broad)
        except Exception as exc:  # noqa: BLE001 - inputs that do not fit, a vendor failure: recorded, go on
            traceback.print_exc()
            summary = dict({key: shape[key] for key in ("id", "group", "name", "dtype", "m", "n", "k", "layout")},
                           errors=broad_shapes._error_text(exc))
            if gpu:
                torch.cuda.empty_cache()
        summary_log.add(summary)
        print(f"{shape['id']:>22} {shape['m']}x{shape['n']}x{shape['k']} {shape['layout']}: vendor "
              f"{summary.get('vendor_ms') or float('nan'):.4f} ms, pick {summary.get('pick', '')} "
              f"{summary.get('pick_ratio') or float('nan'):.3f}, best {summary.get('best', '')} "
              f"{summary.get('best_ratio') or float('nan'):.3f} [{time.monotonic() - t0:.1f} s]", flush=True)
    print(write_report(args.out))
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
