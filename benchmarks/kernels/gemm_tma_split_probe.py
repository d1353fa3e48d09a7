"""Split-K in the persistent TMA GEMM (issue 20): every SPLIT_K of a few TMA configs against the vendor library on
the broad set's GEMMs that no config of the space brings to 0.90 of it.

    python3 benchmarks/kernels/gemm_tma_split_probe.py --out DIR --budget-s 200     # on one H200
    python3 benchmarks/kernels/gemm_tma_split_probe.py --dry-run --out DIR          # CPU: the code path, stand-ins

``gemm_tma.py``'s SPLIT_K cuts each output tile into SPLIT_K units of consecutive K steps; the units are spread over
the persistent programs, each stores its fp32 partial, and the tile's last unit adds them in slice order and runs
the epilogue (no second launch, no memset). Shapes (``SHAPE_IDS``): the bf16 rows of
benchmarks/results/h200/kernels/host_constants/broad_gemm_*/ below 0.90 of torch.matmul (vendor >= 20 us), the
skinny M <= 256 rows, DeepSeek-V3's 4096 x 576 x 7168 and 4096 x 1536 x 7168, 3000 x 5000 x 7000, and two large
LLM GEMMs as a control; fp8 (torch._scaled_mm's layout, per-row scales) for the TMA-eligible ones of them. Per
shape: the vendor call, config=None (``dispatch``) and each (config, SPLIT_K) of ``CONFIGS`` x ``SPLITS`` whose
slices keep at least ``MIN_STEPS`` K steps, each checked against the vendor's result (``gemm.TOLERANCE``), then
timed with ``broad_shapes.Timer`` (do_bench median, alternating rounds, L2 flushed, input sets rotated).
Writes DIR/split.csv (one row per shape and config), DIR/environment.json and DIR/REPORT.md (per shape: the vendor,
config=None, the best unsplit and the best split config).
"""

from __future__ import annotations

import argparse
import csv
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

SHAPE_IDS = ("g36", "g35", "g69", "g18", "g38", "g39", "g37", "g62", "g54", "g50", "g49", "g53", "g57", "g58",
             "g61", "g60", "g56", "g52", "g48", "g12", "g04")
"""bf16 and fp8 rows of benchmarks/kernels/shapes.yaml; the last two are large LLM GEMMs (control)."""
CONFIGS = {
    2: ("tma 128x256x64 g8 w8 s3 sub2", "tma 128x128x64 g8 w8 s4 sub1", "tma 128x128x128 g8 w8 s3 sub2",
        "tma 256x128x64 g8 w8 s3 sub2"),
    1: ("tma 256x128x128 g8 w8 s3 sub2", "tma 128x128x128 g8 w8 s4 sub1", "tma 128x128x256 g8 w8 s3 sub1"),
}
"""TMA configs (``spaces.tma_config_space``, no warp specialization) per operand bytes, by ``config_key``."""
SPLITS = (1, 2, 3, 4, 6, 8)
SMS = 132
"""The H200's SMs (the dry run's stand-ins get stream-K rows too)."""
MIN_STEPS = 4
"""A split config is timed only if each K slice keeps this many BLOCK_K steps."""
WARMUP_MS, REP_MS, ROUNDS = 5, 10, 3
CHUNK = 8
PRECOMPILE_SHARE = 0.45
REPORT_RESERVE_S = 5.0
FIELDS = ["id", "name", "dtype", "m", "n", "k", "layout", "config", "split_k", "ms", "vendor_ms", "ratio",
          "rel_err", "error"]


def probe_shapes(dry_run: bool = False) -> list[dict]:
    rows = {row["id"]: row for row in broad_shapes.load_shapes()["gemm"]}
    out = []
    for shape_id in SHAPE_IDS:
        for dtype in ("bf16", "fp8"):
            row = dict(rows[shape_id], dtype=dtype, layout="nt" if dtype == "fp8" else rows[shape_id]["layout"])
            if dry_run:
                row.update(m=broad_shapes.stand_in(row["m"]), n=broad_shapes.stand_in(row["n"]),
                           k=broad_shapes.stand_in(row["k"]))
            if eligible(row):
                out.append(row)
    return out


def eligible(shape: dict) -> bool:
    from workbench.kernels.spaces import tma_eligible

    return shape["layout"] in ("nn", "nt") and tma_eligible(shape["m"], shape["n"], shape["k"], shape["layout"],
                                                            1 if shape["dtype"] == "fp8" else 2)


def configs(shape: dict, dry_run: bool = False) -> list[dict]:
    """(config, SPLIT_K) dicts to time: ``CONFIGS`` x ``SPLITS`` with MIN_STEPS steps per slice."""
    from workbench.kernels import gemm_tma
    from workbench.select.gemm import config_key

    operand_bytes = 1 if shape["dtype"] == "fp8" else 2
    if dry_run:
        space = gemm_tma.config_space("interpreter")
        wanted = [space[0]]
    else:
        space = {config_key(c): c for c in gemm_tma.config_space("fp8" if operand_bytes == 1 else "bf16")}
        wanted = [space[key] for key in CONFIGS[operand_bytes] if key in space]
    out = []
    for config in wanted:
        steps = math.ceil(shape["k"] / config["BLOCK_K"])
        out += [dict(config, SPLIT_K=split) for split in SPLITS if split == 1 or steps >= split * MIN_STEPS]
        tiles = math.ceil(shape["m"] / config["BLOCK_M"]) * math.ceil(shape["n"] / config["BLOCK_N"])
        if tiles % SMS:  # a partial last wave: stream-K shares it out by K steps
            out.append(dict(config, STREAM_K=True))
    return out


def calls(shape: dict):
    """(ours(config), vendor) callables over one input set."""
    import torch

    from workbench.kernels import dispatch

    if shape["dtype"] == "fp8":
        def ours(config):
            return lambda a, b, sa, sb: dispatch.triton_scaled_matmul(a, b, sa, sb, config=config)
        return ours, lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)

    def ours(config):
        return lambda a, b: dispatch.triton_matmul(a, b, config=config)
    return ours, torch.matmul


def compile_job(job: tuple) -> str:
    """Worker process: each config once on uninitialised inputs of the shape (Triton's disk cache then hands the
    kernels to the timing process)."""
    shape, todo, device = job
    import torch

    started, failures = time.perf_counter(), 0
    first = broad_shapes.gemm_inputs(shape, shape["dtype"], device, 1, empty=True)[0]
    ours, _ = calls(shape)
    for config in todo:
        try:
            ours(config)(*first)
        except Exception:  # noqa: BLE001 - the timed run records the error
            failures += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return f"{shape['id']}: {'ok' if not failures else f'{failures} failed'} ({len(todo)} configs, " \
           f"{time.perf_counter() - started:.1f} s)"


def probe_shape(shape: dict, todo: list[dict], timer, device: str, deadline: float, log) -> list[dict]:
    import torch

    from workbench.kernels import gemm
    from workbench.select.gemm import config_key

    base = {key: shape[key] for key in ("id", "name", "dtype", "m", "n", "k", "layout")}
    sets = broad_shapes.gemm_inputs(shape, shape["dtype"], device, broad_shapes.gemm_sets(shape, shape["dtype"]))
    ours, vendor = calls(shape)
    reference = vendor(*sets[0])
    rows, timed = [], {}
    for config in [None, *todo]:
        name = "config=None" if config is None else config_key(config)
        row = dict(base, config=name, split_k="" if config is None else
                   "stream" if config.get("STREAM_K") else config.get("SPLIT_K", 1))
        rows.append(row)
        if time.monotonic() > deadline:
            row["error"] = "skipped (budget)"
            continue
        try:
            fn = ours(config)
            row["rel_err"] = error = broad_shapes.relative_error(fn(*sets[0]), reference)
            if error <= gemm.TOLERANCE[shape["dtype"]]:
                timed[name] = broad_shapes._cycle(fn, sets)
            else:
                row["error"] = f"wrong result (relative error {error:.2e})"
        except Exception as exc:  # noqa: BLE001 - a config that fails to compile or launch is a result
            row["error"] = broad_shapes._error_text(exc)
            if timer.gpu:
                torch.cuda.synchronize()
    del reference
    vendor_call = broad_shapes._cycle(vendor, sets)
    names, vendor_times = list(timed), []
    for start in range(0, len(names), CHUNK):
        if time.monotonic() > deadline:
            break
        times = timer.rounds({"vendor": vendor_call, **{n: timed[n] for n in names[start:start + CHUNK]}})
        vendor_times.append(times.pop("vendor"))
        for row in rows:
            if row["config"] in times:
                row.update(ms=times[row["config"]], vendor_ms=vendor_times[-1],
                           ratio=vendor_times[-1] / times[row["config"]])
    for row in rows:
        if "ms" not in row and not row.get("error"):
            row["error"] = "skipped (budget)"
        log.add(row)
    if timer.gpu:
        torch.cuda.empty_cache()
    return rows


def write_report(out: Path) -> str:
    with open(out / "split.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    env = json.loads((out / "environment.json").read_text())
    lines = ["# Split-K in the persistent TMA GEMM, against the vendor library", "",
             f"{env.get('gpu', '')}, torch {env.get('torch', '')}, triton {env.get('triton', '')}; "
             f"`benchmarks/kernels/gemm_tma_split_probe.py`; {env.get('timing', '')}. ratio = vendor time / ours "
             "(above 1: ours faster).", "",
             "| id | dtype | m x n x k | vendor ms | config=None | ratio | best unsplit TMA | ratio | best split | ratio "
             "| best stream-K | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by_case: dict = {}
    for row in rows:
        by_case.setdefault((row["id"], row["dtype"]), []).append(row)
    ratios = {"none": [], "unsplit": [], "split": [], "stream": [], "best": []}
    for (shape_id, dtype), case in by_case.items():
        timed = [r for r in case if r.get("ratio")]
        if not timed:
            continue
        vendor_ms = statistics.median(float(r["vendor_ms"]) for r in timed)
        none = next((r for r in timed if r["config"] == "config=None"), None)
        unsplit = max((r for r in timed if r["split_k"] == "1"), key=lambda r: float(r["ratio"]), default=None)
        split = max((r for r in timed if r["split_k"] not in ("", "1", "stream")), key=lambda r: float(r["ratio"]),
                    default=None)
        stream = max((r for r in timed if r["split_k"] == "stream"), key=lambda r: float(r["ratio"]), default=None)
        cell = lambda r: (r["config"], f"{float(r['ratio']):.3f}") if r else ("", "")  # noqa: E731
        c = case[0]
        lines.append(f"| {shape_id} | {dtype} | {c['m']}x{c['n']}x{c['k']} | {vendor_ms:.4f} | "
                     f"{' | '.join(cell(none))} | {' | '.join(cell(unsplit))} | "
                     f"{' | '.join(cell(split))} | {' | '.join(cell(stream))} |")
        for key, r in (("none", none), ("unsplit", unsplit), ("split", split), ("stream", stream)):
            if r:
                ratios[key].append(float(r["ratio"]))
        ratios["best"].append(max(float(r["ratio"]) for r in timed))
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")  # noqa: E731
    lines += ["", "Geometric means over the cases timed: " + ", ".join(
        f"{key} {geo(v):.3f} ({len(v)})" for key, v in ratios.items()) + ".", ""]
    text = "\n".join(lines)
    (out / "REPORT.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=200.0, help="stop cleanly after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="CPU, TRITON_INTERPRET=1, stand-in sizes")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
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
    shapes = probe_shapes(args.dry_run)
    if args.dry_run:
        shapes = [s for s in shapes if s["dtype"] == "bf16"][:2]
    args.out.mkdir(parents=True, exist_ok=True)
    env = broad_shapes.environment(gpu, args)
    env["timing"] = f"do_bench median, {ROUNDS} alternating rounds of warmup {WARMUP_MS} ms / rep {REP_MS} ms"
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    deadline = started + args.budget_s - REPORT_RESERVE_S
    plans = [(shape, configs(shape, args.dry_run)) for shape in shapes]
    print(f"{len(plans)} cases, {sum(len(c) for _, c in plans)} configs", flush=True)
    if args.workers > 0 and gpu:
        jobs = [(shape, todo[i::2], device) for shape, todo in plans for i in range(2)]
        broad_shapes.precompile(jobs, args.workers, min(args.budget_s * PRECOMPILE_SHARE, deadline - time.monotonic()),
                                job_fn=compile_job)
    timer = broad_shapes.Timer(gpu, warmup_ms=WARMUP_MS, rep_ms=REP_MS, rounds=ROUNDS)
    log = broad_shapes.CsvLog(args.out / "split.csv", FIELDS)
    for index, (shape, todo) in enumerate(plans):
        now = time.monotonic()
        try:
            probe_shape(shape, todo, timer, device, now + (deadline - now) / (len(plans) - index), log)
        except Exception:  # noqa: BLE001 - inputs that do not fit, a vendor failure: go on
            traceback.print_exc()
            if gpu:
                torch.cuda.empty_cache()
        print(f"{shape['id']} {shape['dtype']} done [{time.monotonic() - now:.1f} s]", flush=True)
    print(write_report(args.out))
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
