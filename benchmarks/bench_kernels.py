"""Kernel correctness, speed against the vendor baselines, and a GEMM config sweep, on the local GPU.

    python benchmarks/bench_kernels.py --suite full --out DIR            # every kernel, default configs
    python benchmarks/bench_kernels.py --tune-gemm --out DIR             # every config of the GEMM space on
                                                                         # the Llama 3 shapes (bf16 and fp8)

Writes DIR/kernels_<suite>.csv (one row per case: relative error vs the float64 reference, our time, the
baseline's, TFLOP/s, GB/s, % of peak and of measured copy bandwidth, the model's prediction), DIR/gemm_sweep.csv
(one row per shape x config) and DIR/environment.json. Needs a GPU; imports no UI package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def environment() -> dict:
    import torch
    import triton

    from workbench.bench import detect_gpu
    from workbench.benchmarking import ptxas_text

    gpu = detect_gpu()
    props = torch.cuda.get_device_properties(0)
    return {"gpu": gpu.device_name, "catalog_gpu": gpu.catalog.name if gpu.catalog else None, "arch": gpu.arch,
            "driver": gpu.driver, "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "hip": torch.version.hip, "sm_count": props.multi_processor_count,
            "python": platform.python_version(), "host": platform.node(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
            "ptxas": ptxas_text()}


def sweep_gemm(out: Path, limit_s: float) -> None:
    """Time every config of the GEMM space on each Llama 3 bench shape (bf16, fp8); record failures too."""
    import csv

    import torch
    from triton.testing import do_bench

    from workbench.kernels import cases, dispatch, gemm

    start = time.time()
    cases = [c for c in cases.gemm_cases("full") if c.dtype in ("bf16", "fp8") and "model" in c.extra]
    path = out / "gemm_sweep.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["dtype", "m", "n", "k", "config", "ms", "tflops", "baseline_ms", "error"])
        for case in cases:
            inputs = case.make_inputs("cuda")
            baseline_ms = do_bench(lambda: case.baseline(*inputs), warmup=10, rep=40, return_mode="median")
            dtype_bytes = 1 if case.dtype == "fp8" else 2
            for config in gemm.config_space("cuda", dtype_bytes=dtype_bytes):
                if time.time() - start > limit_s:
                    print(f"sweep stopped at its {limit_s:.0f} s budget", flush=True)
                    return
                row = [case.dtype, case.row["m"], case.row["n"], case.row["k"], json.dumps(config, sort_keys=True)]
                try:
                    if case.dtype == "fp8":
                        fn = lambda: dispatch.triton_scaled_matmul(*inputs, config=config)  # noqa: E731
                    else:
                        fn = lambda: dispatch.triton_matmul(*inputs, config=config)  # noqa: E731
                    ms = do_bench(fn, warmup=10, rep=40, return_mode="median")
                    writer.writerow(row + [f"{ms:.5f}", f"{case.flops / ms / 1e9:.1f}", f"{baseline_ms:.5f}", ""])
                except Exception as exc:  # noqa: BLE001 - a config that fails to compile or run is data
                    writer.writerow(row + ["", "", f"{baseline_ms:.5f}", f"{type(exc).__name__}: {exc}"[:200]])
                    torch.cuda.empty_cache()
            handle.flush()
            print(f"swept {case.name} ({time.time() - start:.0f} s)", flush=True)
            del inputs
            torch.cuda.empty_cache()


def sweep_configs(out: Path) -> None:
    """Every config of the cross-entropy, embedding-bag and norm spaces on their largest forward bench case, and
    fp8 GEMMs with fast accumulation against _scaled_mm(use_fast_accum=True)."""
    import csv

    import torch
    from triton.testing import do_bench

    from workbench.kernels import cases, cross_entropy, dispatch, embedding_bag, gemm, norms

    def bench(fn):
        return do_bench(fn, warmup=10, rep=40, return_mode="median")

    jobs = []
    ce = [c for c in cases.cross_entropy_cases("full") if c.op == "cross_entropy"]
    for case in ce[1:2]:  # 8192 x 128256
        for config in cross_entropy.config_space("cuda"):
            jobs.append(("cross_entropy", case, config,
                         lambda x, cfg: cross_entropy.cross_entropy(*x, config=cfg, check_targets=False)))
    for case in [c for c in cases.embedding_bag_cases("full") if c.op == "embedding_bag"]:
        for config in embedding_bag.config_space("cuda"):
            jobs.append(("embedding_bag", case, config,
                         lambda x, cfg: embedding_bag.embedding_bag(*x, config=cfg, check_values=False)))
    for case in [c for c in norms.bench_cases("full") if c.op == "rmsnorm"][-1:]:
        for config in norms.config_space("cuda"):
            jobs.append(("rmsnorm", case, config, lambda x, cfg: norms.rms_norm(*x, config=cfg)))
    fp8 = [c for c in cases.gemm_cases("full") if c.dtype == "fp8"]
    for case in fp8:
        for config in gemm.config_space("cuda", dtype_bytes=1)[:12]:
            jobs.append(("fp8_fast_accum", case, config,
                         lambda x, cfg: dispatch.triton_scaled_matmul(*x, config=cfg, use_fast_accum=True)))

    path = out / "config_sweep.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kernel", "case", "config", "ms", "baseline_ms", "bytes", "flops", "error"])
        inputs_for, baseline_for = {}, {}
        for kernel, case, config, fn in jobs:
            key = (kernel, case.name)
            if key not in inputs_for:
                inputs_for.clear()
                torch.cuda.empty_cache()
                inputs_for[key] = case.make_inputs("cuda")
                base = case.baseline
                if kernel == "fp8_fast_accum":
                    base = lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,  # noqa: E731
                                                                 use_fast_accum=True)
                baseline_for[key] = bench(lambda: base(*inputs_for[key]))
            x = inputs_for[key]
            row = [kernel, case.name, json.dumps(config, sort_keys=True)]
            try:
                ms = bench(lambda: fn(x, config))
                writer.writerow(row + [f"{ms:.5f}", f"{baseline_for[key]:.5f}", case.bytes, case.flops, ""])
            except Exception as exc:  # noqa: BLE001 - a config that fails is data
                writer.writerow(row + ["", f"{baseline_for[key]:.5f}", case.bytes, case.flops,
                                      f"{type(exc).__name__}: {exc}"[:200]])
        print(f"config sweep: {len(jobs)} runs -> {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=["quick", "full"], default=None)
    parser.add_argument("--ops", default=None, help="comma-separated kernel modules (default: all)")
    parser.add_argument("--tune-gemm", action="store_true")
    parser.add_argument("--sweep-budget-s", type=float, default=300)
    parser.add_argument("--sweep-configs", action="store_true", help="config sweeps of the memory-bound kernels, fp8 fast accumulation")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WORKBENCH_CACHE_DIR", str(args.out / "cache"))
    (args.out / "environment.json").write_text(json.dumps(environment(), indent=2))

    if args.suite:
        from workbench.bench import run_suite

        started = time.time()
        ops = tuple(args.ops.split(",")) if args.ops else None
        frame = run_suite(args.suite, ops, use_cache=False, progress=False, out=args.out / f"kernels_{args.suite}.csv")
        print(f"suite {args.suite}: {len(frame)} cases in {time.time() - started:.0f} s; ceilings "
              f"{ {k: round(v, 1) for k, v in frame.attrs.get('ceilings', {}).items()} }", flush=True)
        columns = [c for c in ("module", "name", "dtype", "rel_err", "correct", "triton_ms", "baseline_ms",
                               "speedup_vs_baseline", "achieved_tflops", "pct_of_copy_bw", "error") if c in frame]
        print(frame[columns].to_string(index=False, max_colwidth=40), flush=True)
    if args.sweep_configs:
        try:
            sweep_configs(args.out)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    if args.tune_gemm:
        try:
            sweep_gemm(args.out, args.sweep_budget_s)
        except Exception:  # noqa: BLE001
            traceback.print_exc()


if __name__ == "__main__":
    main()
