#!/usr/bin/env python3
"""Re-time the GEMM rows of measured_ops.csv most exposed to timing noise, and name the kernels cuBLAS runs.

Which rows: every GEMM row of ``--csv`` whose operands miss the 16-byte row alignment (k or n of a bf16, fp16
or tf32 GEMM; the fallback kernels the analytical model prices apart) or that ran under ``--under-us``
(launch-dominated). The choice reads only shapes and measured times, never a model prediction, so re-timing
cannot favour the rows the model gets wrong.

How: exactly as ``benchmarks/model/measure_ops.py`` (imported, not copied): ``triton.testing.do_bench`` median with
its L2 flush, inputs rotated over 256 MiB of cold sets, the same warm-up and repetition budget, fp8 through
``torch._scaled_mm`` with a column-major B. Each of ``--passes`` passes times every row once, in plan order,
so the passes are independent runs (minutes apart for the first and last row), not one long run cut in three.

Outputs in OUT_DIR (at most 5 files):

    gemm_repeat_<p>.csv   one per pass, the columns of measured_ops.csv: pass each to eval_model.py as
                          ``--repeat``; it replaces each row's measured_ms by the median over all runs of that row
    gemm_kernels.csv      per row, each GPU kernel one call launches (torch.profiler), with its mean device time:
                          which cuBLAS/CUTLASS kernel (tile, alignment) the library picked for the unaligned rows
    environment.json      GPU, driver, versions, arguments, per-pass wall time

Usage (about 90 s on an H200 for the ~160 selected rows):

    python3 benchmarks/archive/remeasure_gemm.py OUT_DIR
    python3 benchmarks/archive/remeasure_gemm.py OUT_DIR --plan          # list the selected rows, no GPU needed
    python3 benchmarks/archive/remeasure_gemm.py OUT_DIR --cpu-smoke --limit 3
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from typing import Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model"))
import measure_ops as mo  # noqa: E402  (the original measurement's timing code)

DEFAULT_CSV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "h200",
                           "measured_ops.csv")
ALIGNMENT_BYTES = 16            # TMA / vectorized-load row alignment (as workbench.perf.gemm.ALIGNMENT_BYTES)
MATRIX_DTYPES = ("bf16", "fp16", "tf32")   # fp32 runs on the vector units; fp8 rows are padded to 16
PROFILE_CALLS = 3               # calls profiled per row to name its kernels


def is_unaligned(m: int, n: int, k: int, dtype: str) -> bool:
    """True when a row of A (k elements) or of B and C (n elements) is not a multiple of 16 bytes."""
    if dtype not in MATRIX_DTYPES:
        return False
    size = mo.ELEMENT_BYTES[dtype]
    return (k * size) % ALIGNMENT_BYTES != 0 or (n * size) % ALIGNMENT_BYTES != 0


def select_rows(path: str, under_us: float) -> list:
    """The GEMM rows of ``path`` (measured_ops.csv) that are unaligned or ran under ``under_us``, as Rows."""
    rows = []
    with open(path, newline="") as handle:
        for index, record in enumerate(csv.DictReader(handle), start=2):
            if record.get("op") != "gemm" or not (record.get("measured_ms") or "").strip():
                continue
            try:
                m, n, k = (int(record[c]) for c in ("m", "n", "k"))
                measured_us = float(record["measured_ms"]) * 1e3
            except (KeyError, ValueError) as exc:
                raise SystemExit(f"{path} line {index}: expected integer m, n, k and a number measured_ms "
                                 f"(got {exc})") from None
            dtype = record.get("dtype", "")
            if dtype not in mo.ELEMENT_BYTES:
                raise SystemExit(f"{path} line {index}: dtype {dtype!r}, expected one of "
                                 f"{', '.join(mo.ELEMENT_BYTES)}")
            if is_unaligned(m, n, k, dtype) or measured_us < under_us:
                rows.append(mo.gemm_row(m, n, k, dtype, record.get("shape_set", "")))
    return rows


def time_row(row, device: torch.device, time_ms, seed: int, check: bool) -> None:
    """Time one row in place, with measure_ops' cold rotated inputs; check it against float64 when asked."""
    case = mo.make_case(row, device)
    torch.manual_seed(seed)
    with case.precision():
        if check:
            row.rel_err = case.rel_err()
        fn, grads, sets = mo.timed_callable(case)
        row.measured_ms = time_ms(fn, grads)
        del fn, grads, sets
    seconds = row.measured_ms / 1e3
    row.tflops = case.flops() / seconds / 1e12 if seconds > 0 else None
    row.gb_s = case.bytes_moved() / seconds / 1e9 if seconds > 0 else None


def kernels_of(row, device: torch.device) -> list:
    """(kernel name, calls per GEMM call, mean device us) of the GPU kernels one call of ``row`` launches."""
    from torch.profiler import ProfilerActivity, profile

    case = mo.make_case(row, device)
    with case.precision():
        inputs = case.make_inputs()
        case.run(inputs)                                   # warm: cuBLAS heuristics, handles
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILE_CALLS):
                case.run(inputs)
            torch.cuda.synchronize()
    out = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        if device_us > 0 and event.count > 0:
            out.append((event.key, event.count / PROFILE_CALLS, device_us / event.count))
    return out


def write_rows(path: str, rows: list) -> None:
    mo.write_csv_atomic(path, rows)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--csv", default=DEFAULT_CSV, help="measured_ops.csv whose GEMM rows to re-time")
    parser.add_argument("--under-us", type=float, default=50.0,
                        help="also re-time aligned rows that ran under this many microseconds (default 50)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--limit", type=int, help="only the first N selected rows")
    parser.add_argument("--plan", action="store_true", help="list the selected rows and exit")
    parser.add_argument("--cpu-smoke", action="store_true", help="CPU perf_counter timing (no triton, no profile)")
    parser.add_argument("--no-kernels", action="store_true", help="skip naming the kernels")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error(f"--passes {args.passes}: expected at least 1")

    rows = select_rows(args.csv, args.under_us)[: args.limit]
    if args.cpu_smoke:
        rows = [r for r in rows if r.dtype in ("bf16", "fp32")]
    if args.plan:
        for row in rows:
            print(row.describe())
        print(f"{len(rows)} rows")
        return 0
    if not rows:
        raise SystemExit(f"no GEMM row of {args.csv} is unaligned or under {args.under_us} us")

    if args.cpu_smoke:
        device, time_ms = torch.device("cpu"), mo.cpu_timer
    else:
        if not torch.cuda.is_available():
            print("error: no CUDA device (use --cpu-smoke to test on the CPU)", file=sys.stderr)
            return 2
        device, time_ms = torch.device("cuda"), mo.gpu_timer()
    os.makedirs(args.out_dir, exist_ok=True)
    env = mo.environment(device, args)
    env["selected_rows"] = len(rows)
    env["passes"] = []
    started = time.perf_counter()

    for p in range(1, args.passes + 1):
        t0 = time.perf_counter()
        for index, row in enumerate(rows):
            try:
                time_row(row, device, time_ms, mo.SEED + index, check=p == 1)
            except Exception as exc:          # OOM, unsupported shape: an empty measurement, not a crash
                row.measured_ms = row.tflops = row.gb_s = None
                print(f"error: {row.describe()}: {type(exc).__name__}: {exc}", flush=True)
                mo.release_memory(device)
        write_rows(os.path.join(args.out_dir, f"gemm_repeat_{p}.csv"), rows)
        env["passes"].append(round(time.perf_counter() - t0, 1))
        print(f"pass {p}/{args.passes}: {len(rows)} rows in {env['passes'][-1]} s", flush=True)
        rows = [mo.gemm_row(r.m, r.n, r.k, r.dtype, r.shape_set) for r in rows]   # fresh rows, no carry-over

    if not args.cpu_smoke and not args.no_kernels:
        t0 = time.perf_counter()
        with open(os.path.join(args.out_dir, "gemm_kernels.csv"), "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["m", "n", "k", "dtype", "shape_set", "kernel", "calls_per_gemm", "mean_us"])
            for row in rows:
                try:
                    for name, calls, mean_us in kernels_of(row, device):
                        writer.writerow([row.m, row.n, row.k, row.dtype, row.shape_set, name, f"{calls:g}",
                                         f"{mean_us:.3f}"])
                except Exception as exc:
                    print(f"error profiling {row.describe()}: {type(exc).__name__}: {exc}", flush=True)
        env["kernels_s"] = round(time.perf_counter() - t0, 1)
    env["total_s"] = round(time.perf_counter() - started, 1)
    mo.write_json_atomic(os.path.join(args.out_dir, "environment.json"), env)
    print(f"wrote {args.out_dir} in {env['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
