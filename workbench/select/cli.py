"""``workbench select`` and ``workbench tune``: zero-warmup config choice per row, and model-guided tuning.

    workbench select --gpu h200 rows.csv [--out chosen.csv]     # adds config, predicted_ms, choice (triton|vendor)
    workbench select --gpu h200 --fit sweep.csv [sweep2.csv]    # fits h200-sxm-select.yaml in the user's profiles
    workbench tune --m 4096 --n 6144 --k 4096 --dtype bf16      # on the local GPU: benchmarks until no gain
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.fileio import check_output, read_csv_text, write_text


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("select", help="pick each GEMM/attention row's Triton config (or the vendor library) "
                                      "analytically, with no benchmark")
    p.add_argument("rows", nargs="*", type=Path, help="predict-ops rows (op=gemm: m,n,k,dtype[,layout]; "
                                                       "op=attention: batch,seq,heads_q,heads_kv,head_dim,causal,dtype)")
    p.add_argument("--gpu", required=True)
    p.add_argument("--out", type=Path, help="write here instead of standard output")
    p.add_argument("--spec", action="store_true", help="ignore the GPU's selection profile (catalog figures only)")
    p.add_argument("--fit", action="store_true", help="ROWS are select_sweep.py CSVs: fit and write the profile "
                                                       "(default: <gpu>-select.yaml in the user's profile folder)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file or selection profile")
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("tune", help="model-guided tuning of one GEMM on the local GPU (benchmarks the selector's "
                                    "candidates best-first until the best stops improving)")
    for name in ("m", "n", "k"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8"))
    p.add_argument("--layout", default="nn", choices=("nn", "nt", "tn"))
    p.add_argument("--patience", type=int, default=3, help="stop after this many benchmarks without a gain")
    p.add_argument("--record", type=Path, help="append the timings to this sweep CSV (feed it to select --fit)")
    p.set_defaults(func=cmd_tune)


def _gemm_row(row: dict, gpu, calibrated: bool) -> dict:
    from workbench.select import vendor_choice

    try:
        shape = {key: int(row[key]) for key in ("m", "n", "k")}
    except (KeyError, ValueError) as exc:
        raise WorkbenchError(f"gemm row {row}: m, n, k must be integers ({exc})") from None
    choice = vendor_choice(shape, row.get("dtype", "bf16"), gpu, layout=row.get("layout") or "nn",
                           calibrated=calibrated)
    return {"choice": choice.choice, "config": json.dumps(choice.config, sort_keys=True) if choice.config else "",
            "triton_ms": f"{choice.triton_s * 1e3:.5g}", "vendor_ms": f"{choice.vendor_s * 1e3:.5g}",
            "selected_ms": f"{choice.time_s * 1e3:.5g}", "select_source": choice.source}


def _attention_row(row: dict, gpu, calibrated: bool) -> dict:
    from workbench.select import select_config

    try:
        shape = {key: int(row[key]) for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim")}
    except (KeyError, ValueError) as exc:
        raise WorkbenchError(f"attention row {row}: batch, seq, heads_q, heads_kv, head_dim must be integers "
                             f"({exc})") from None
    shape["causal"] = str(row.get("causal", "true")).lower() in ("1", "true", "yes")
    best = select_config("attention", shape, row.get("dtype", "bf16"), gpu, calibrated=calibrated)
    return {"choice": "triton", "config": json.dumps(best.config, sort_keys=True), "triton_ms": f"{best.time_s * 1e3:.5g}",
            "vendor_ms": "", "selected_ms": f"{best.time_s * 1e3:.5g}", "select_source": best.source}


def cmd_select(args: argparse.Namespace) -> int:
    from workbench.hardware import get_gpu

    gpu = get_gpu(args.gpu)
    if not args.rows:
        raise WorkbenchError("select: give a CSV of rows (or sweep CSVs with --fit)")
    for path in args.rows:
        if not path.is_file():
            raise WorkbenchError(f"select: {path} is not a file")
    if args.fit:
        from workbench.select.profile import fit_sweeps, user_profile_path, write_selection_profile

        out = args.out or user_profile_path(gpu)
        check_output(out, overwrite=args.force)  # before the fit, not after it
        path = write_selection_profile(gpu, fit_sweeps(args.rows, gpu), out, source=f"workbench select --fit "
                                       f"{' '.join(p.name for p in args.rows)}", overwrite=args.force)
        print(f"wrote {path}")
        return 0
    if args.out:
        check_output(args.out, overwrite=args.force)
    rows = list(csv.DictReader(io.StringIO(read_csv_text(args.rows[0]), newline="")))
    if not rows:
        raise WorkbenchError(f"select: {args.rows[0]} has no rows")
    added = ("choice", "config", "triton_ms", "vendor_ms", "selected_ms", "select_source")
    for row in rows:
        op = row.get("op", "")
        if op == "gemm":
            row.update(_gemm_row(row, gpu, not args.spec))
        elif op == "attention":
            row.update(_attention_row(row, gpu, not args.spec))
        else:
            row.update(dict.fromkeys(added, ""))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=[*[k for k in rows[0] if k not in added], *added], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    if args.out:
        write_text(args.out, text.getvalue(), overwrite=args.force)
    else:
        sys.stdout.write(text.getvalue())
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from workbench.bench import NoGPUError, detect_gpu
    from workbench.select.tune import tune

    local = detect_gpu()  # raises NoGPUError with what to do instead
    if local.catalog is None:
        raise NoGPUError(f"{local.name} is not in the GPU catalog: add it (specs/gpus/) to rank its configs")
    shape = {"m": args.m, "n": args.n, "k": args.k}
    measure = _gpu_measure(shape, args.dtype, args.layout)
    result = tune("gemm", shape, args.dtype, local.catalog, measure, layout=args.layout, patience=args.patience)
    for i, (config, seconds, best) in enumerate(result.history, 1):
        print(f"{i:3d}  {json.dumps(config, sort_keys=True)}  {seconds * 1e3:.4f} ms  (best {best * 1e3:.4f} ms)")
    print(f"best after {result.benchmarks} benchmarks: {json.dumps(result.best, sort_keys=True)} "
          f"{result.best_s * 1e3:.4f} ms; the model's first pick measured "
          f"{result.history[0][1] * 1e3:.4f} ms")
    if args.record:
        _record(args.record, shape, args.dtype, args.layout, result.history)
    return 0


def _gpu_measure(shape: dict, dtype: str, layout: str):
    """A ``measure(config) -> seconds`` on the local GPU: median of triton's do_bench over random inputs."""
    import torch
    import triton

    from workbench.kernels import dispatch

    m, n, k = shape["m"], shape["n"], shape["k"]
    base = torch.bfloat16 if dtype != "fp16" else torch.float16
    a = torch.randn(k, m, device="cuda", dtype=base).t() if layout[0] == "t" else torch.randn(m, k, device="cuda", dtype=base)
    b = torch.randn(n, k, device="cuda", dtype=base).t() if layout[1] == "t" else torch.randn(k, n, device="cuda", dtype=base)
    if dtype == "fp8":
        a8, b8 = a.contiguous().to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")

        def run(config):
            return dispatch.triton_scaled_matmul(a8, b8, one, one, config=config)
    else:
        def run(config):
            return dispatch.triton_matmul(a, b, config=config)

    def measure(config: dict) -> float:
        try:
            return triton.testing.do_bench(lambda: run(config), return_mode="median") * 1e-3
        except Exception:  # noqa: BLE001 - a config that fails to compile or launch is skipped
            return math.inf
    return measure


def _record(path: Path, shape: dict, dtype: str, layout: str, history) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=("part", "shape_id", "source", "dtype", "m", "n", "k", "layout",
                                                    "kind", "config", "ms"))
        if new:
            writer.writeheader()
        for config, seconds, _ in history:
            if math.isfinite(seconds):
                writer.writerow(dict(part=f"gemm-{dtype}", shape_id=f"tune-{shape['m']}x{shape['n']}x{shape['k']}",
                                     source="workbench tune", dtype=dtype, layout=layout, kind="triton",
                                     config=json.dumps(config, sort_keys=True), ms=f"{seconds * 1e3:.5f}", **shape))
