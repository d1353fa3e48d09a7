"""Exhaustive config sweep of the Triton GEMM and attention kernels on the local GPU: the ground truth that the
zero-warmup selector (``workbench.select``) is scored against (issue #4).

For every shape of ``select_shapes.py`` and every config of the kernel's config space it checks the output
against torch (relative Frobenius error), then times the kernel as a CUDA graph of many launches over input
sets that together exceed the L2 cache (median of 5 replays), and times the vendor library (cuBLAS through
torch.matmul / torch._scaled_mm, SDPA) the same way. Kernels are compiled first, in parallel worker processes,
on tiny stand-in tensors with the same Triton specialisation (divisibility by 16 of sizes and strides, K vs
BLOCK_K), so the sweep itself reads them from Triton's disk cache.

    python3 benchmarks/select/select_sweep.py --out DIR --parts gemm-bf16,gemm-fp8,gemm-fp16 --budget-s 500

Writes DIR/select_sweep.csv (one row per shape x config, plus one ``vendor`` row per shape), appending after each
shape, so a run cut short keeps what it measured. ``--tma`` sweeps the Hopper TMA kernel's fp8 configs instead,
``--gluon`` the Gluon kernel's exact-accumulation configs (``gemm_gluon.py``, sm_90; the fp8 sweep calls
scaled_matmul with use_fast_accum=False, as torch._scaled_mm's default), both on the shapes TMA takes
(``workbench.select.sweeps.load_sweeps`` merges them with gemm.py's rows of the same shapes):

    python3 benchmarks/select/select_sweep.py --out DIR --parts gemm-fp8 --gluon    # ~1 min on an H200
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import select_shapes  # noqa: E402

L2_BYTES = 50 * 1024 * 1024  # H200 L2 (specs/gpus/h200-sxm.yaml)
TARGET_REPLAY_S = 2e-3
TIMED_REPLAYS = 5
FIELDS = ("part", "shape_id", "source", "dtype", "m", "n", "k", "layout", "batch", "seq", "heads_q", "heads_kv",
          "head_dim", "causal", "kind", "config", "is_default", "ms", "rel_error", "error")
GEMM_DTYPES = {"gemm-bf16": "bf16", "gemm-fp16": "fp16", "gemm-fp8": "fp8"}


# ------------------------------------------------------------------------------------------------ inputs
def gemm_inputs(shape: dict, dtype: str, device: str, sets: int = 1) -> list[tuple]:
    """Input sets (a, b) or (a, b, scale_a, scale_b) for fp8, in the shape's layout; random, never zeros."""
    import torch
    m, n, k, layout = shape["m"], shape["n"], shape["k"], shape["layout"]
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}[dtype]
    out = []
    for _ in range(sets):
        a = torch.randn(k, m, device=device, dtype=torch_dtype).t() if layout[0] == "t" else \
            torch.randn(m, k, device=device, dtype=torch_dtype)  # a: [M, K]
        b = torch.randn(n, k, device=device, dtype=torch_dtype).t() if layout[1] == "t" else \
            torch.randn(k, n, device=device, dtype=torch_dtype)  # b: [K, N]
        if dtype == "fp8":  # as torch._scaled_mm takes them, whatever the layout: the sweep's fp8 rows are nt
            fp8 = torch.float8_e4m3fn
            a = a.contiguous().to(fp8)  # a: [M, K] row-major
            b = b.t().contiguous().to(fp8).t()  # b: [K, N] column-major, as _scaled_mm requires
            scales = (torch.rand((), device=device) + 0.5, torch.rand((), device=device) + 0.5)
            out.append((a, b, *scales))
        else:
            out.append((a, b))
    return out


def gemm_sets(shape: dict, dtype: str) -> int:
    """Input sets whose bytes together exceed twice the L2, so no timed launch finds its operands cached."""
    size = 1 if dtype == "fp8" else 2
    one = (shape["m"] * shape["k"] + shape["k"] * shape["n"]) * size + shape["m"] * shape["n"] * 2
    return max(1, min(16, math.ceil(2 * L2_BYTES / one)))


def gemm_runner(dtype: str, config: dict | None):
    from workbench.kernels import dispatch
    if dtype == "fp8":
        return lambda a, b, sa, sb: dispatch.triton_scaled_matmul(a, b, sa, sb, config=config)
    return lambda a, b: dispatch.triton_matmul(a, b, config=config)


def gemm_vendor(dtype: str):
    import torch
    if dtype == "fp8":
        return lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return torch.matmul


def gemm_reference(inputs: tuple, dtype: str):
    a, b = inputs[0].float(), inputs[1].float()
    out = a @ b
    return out * inputs[2] * inputs[3] if dtype == "fp8" else out


def attention_inputs(shape: dict, device: str, sets: int = 1) -> list[tuple]:
    import torch
    b, s, hq, hkv, d = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim"))
    return [tuple(torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16) for h in (hq, hkv, hkv))
            for _ in range(sets)]  # q: [B, Hq, S, D]; k, v: [B, Hkv, S, D]


def attention_sets(shape: dict) -> int:
    one = shape["batch"] * shape["seq"] * shape["head_dim"] * 2 * (2 * shape["heads_q"] + 2 * shape["heads_kv"])
    return max(1, min(16, math.ceil(2 * L2_BYTES / one)))


def attention_runner(shape: dict, config: dict | None):
    from workbench.kernels.attention import flash_attention_fwd
    return lambda q, k, v: flash_attention_fwd(q, k, v, causal=shape["causal"], config=config)[0]


def attention_vendor(shape: dict):
    import torch
    group = shape["heads_q"] // shape["heads_kv"]

    def sdpa(q, k, v):  # SDPA's flash backend wants equal heads: GQA keys/values expanded (counted in its time)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"])
    return sdpa


def attention_reference(inputs: tuple, shape: dict):
    import torch
    q, k, v = (t.float() for t in inputs)
    group = shape["heads_q"] // shape["heads_kv"]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"])


# ------------------------------------------------------------------------------------------------ timing
def time_graph(fn, sets: list[tuple]) -> float:
    """Median seconds per launch: a CUDA graph of enough launches (rotating over the input sets) to run
    ~TARGET_REPLAY_S, replayed TIMED_REPLAYS times between events (graphs hide the Python launch cost)."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*sets[0])
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(3):
            fn(*sets[i % len(sets)])
        end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 3 * 1e-3
    launches = max(len(sets), min(400, math.ceil(TARGET_REPLAY_S / max(estimate, 1e-6))))
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(launches):
                fn(*sets[i % len(sets)])
        replay = graph.replay
    except Exception:  # noqa: BLE001 - not capturable: back-to-back launches instead (Python cost included)
        torch.cuda.synchronize()
        graph = None

        def replay():
            for i in range(launches):
                fn(*sets[i % len(sets)])
    replay()
    times = []
    for _ in range(TIMED_REPLAYS):
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / launches)
    del graph
    return statistics.median(times)


def relative_error(out, ref) -> float:
    import torch
    out = out.float()
    if not torch.isfinite(out).all():
        return math.inf
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


# ------------------------------------------------------------------------------------------ parallel compile
def _proxy_size(size: int) -> int:
    """A small size that the kernel specialises exactly like ``size``: the same power of two up to 8 dividing it
    (Triton's divisibility by 16, the kernel's DIV_* hints), and, once rounded up to 16 bytes of bf16 (the
    padding of ``gemm.pad_unaligned``), the same divisibility by 16 and by every BLOCK_K (32, 64, 128), so
    EVEN_K matches too: p - size elements below three times the largest power of two (up to 128) dividing
    p = size rounded up to 8 (three times, so that no proxy is 1, which Triton specialises apart)."""
    if size == 1:
        return 1
    padded = -(-size // 8) * 8
    return 3 * min(padded & -padded, 128) - (padded - size)


def _compile_gemm(job: tuple) -> str:
    dtype, layout, m, n, k, configs = job
    import torch
    shape = dict(m=_proxy_size(m), n=_proxy_size(n), k=_proxy_size(k), layout=layout)
    inputs = gemm_inputs(shape, dtype, "cuda")[0]
    failures = 0
    for config in configs:
        try:
            gemm_runner(dtype, config)(*inputs)
        except Exception:  # noqa: BLE001 - recorded again (with its message) by the sweep itself
            failures += 1
    torch.cuda.synchronize()
    return f"{dtype} {layout} {shape['m']}x{shape['n']}x{shape['k']}: {len(configs) - failures}/{len(configs)}"


def _compile_attention(job: tuple) -> str:
    shape, configs = job
    import torch
    small = {**shape, "batch": 1, "seq": 128}
    inputs = attention_inputs(small, "cuda")[0]
    for config in configs:
        try:
            attention_runner(small, config)(*inputs)
        except Exception:  # noqa: BLE001
            pass
    torch.cuda.synchronize()
    return f"attention {shape['heads_q']}/{shape['heads_kv']} d{shape['head_dim']} causal={shape['causal']}"


def precompile(function, jobs: list, workers: int) -> None:
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for line in pool.map(function, jobs):
            print("  compiled", line, flush=True)
    print(f"precompiled {len(jobs)} specialisations in {time.perf_counter() - started:.0f} s", flush=True)


def gemm_compile_jobs(shapes: list[dict], dtype: str, configs: list[dict]) -> list[tuple]:
    keys = {(dtype, s["layout"], _proxy_size(s["m"]), _proxy_size(s["n"]), _proxy_size(s["k"])) for s in shapes}
    return [(*key, configs) for key in sorted(keys)]


# ------------------------------------------------------------------------------------------------ the sweep
def sweep_shape(part: str, shape: dict, dtype: str, configs: list[dict], writer, tolerance: float) -> None:
    import torch
    base = {key: shape.get(key, "") for key in FIELDS if key in shape}
    base.update(part=part, shape_id=shape["id"], dtype=dtype)
    if part == "attention":
        sets = attention_inputs(shape, "cuda", attention_sets(shape))
        reference = attention_reference(sets[0], shape)
        runners = [("triton", c, attention_runner(shape, c)) for c in configs]
        runners.append(("vendor", None, attention_vendor(shape)))
    else:
        sets = gemm_inputs(shape, dtype, "cuda", gemm_sets(shape, dtype))
        reference = gemm_reference(sets[0], dtype)
        runners = [("triton", c, gemm_runner(dtype, c)) for c in configs]
        runners.append(("vendor", None, gemm_vendor(dtype)))
    for index, (kind, config, fn) in enumerate(runners):
        row = dict(base, kind=kind, config=json.dumps(config, sort_keys=True) if config else "",
                   is_default=int(index == 0), ms="", rel_error="", error="")
        try:
            error = relative_error(fn(*sets[0]), reference)
            row["rel_error"] = f"{error:.2e}"
            if error > tolerance:
                row["error"] = f"wrong result: relative error {error:.2e} > {tolerance}"
            else:
                row["ms"] = f"{time_graph(fn, sets) * 1e3:.5f}"
        except Exception as exc:  # noqa: BLE001 - a config that does not compile or fit is a result too
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            torch.cuda.synchronize()
        writer.writerow(row)
    del sets, reference
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="gemm-bf16,gemm-fp8,gemm-fp16,attention")
    parser.add_argument("--budget-s", type=float, default=500.0, help="stop starting shapes after this long")
    parser.add_argument("--limit", type=int, default=0, help="at most this many shapes per part (0: all)")
    parser.add_argument("--skip", type=Path, help="a select_sweep.csv whose (part, shape) pairs are done already")
    parser.add_argument("--shapes", default="", help="only these shape ids, comma-separated (e.g. g151,g165)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--tma", action="store_true",
                        help="gemm-fp8: sweep the TMA kernel's configs (gemm_tma.py, Hopper) instead of gemm.py's, "
                             "on the shapes TMA takes")
    parser.add_argument("--gluon", action="store_true",
                        help="gemm-fp8: sweep the Gluon kernel's exact configs (gemm_gluon.py, sm_90) instead of "
                             "gemm.py's, on the shapes TMA takes")
    args = parser.parse_args(argv)
    if args.tma and args.gluon:
        parser.error("--tma and --gluon: pick one kernel per sweep (load_sweeps merges the files)")
    import torch
    from workbench.kernels import attention, gemm, spaces

    started = time.perf_counter()
    gemms = select_shapes.gemm_shapes()
    done_before = set()
    if args.skip and args.skip.exists():
        with args.skip.open() as handle:
            done_before = {(row["part"], row["shape_id"]) for row in csv.DictReader(handle)}
    plan = []
    for part in args.parts.split(","):
        if part in GEMM_DTYPES:
            dtype = GEMM_DTYPES[part]
            shapes = gemms if dtype == "bf16" else select_shapes.low_precision_subset(gemms)
            configs = gemm.config_space("cuda", dtype_bytes=1 if dtype == "fp8" else 2)
            if args.tma:
                if dtype != "fp8":
                    parser.error(f"--tma: only the gemm-fp8 part has TMA configs in the selector's space, not {part}")
                configs = spaces.tma_config_space(1, warp_specialize=False)  # as workbench.select ranks them
                shapes = [s for s in shapes if spaces.tma_eligible(s["m"], s["n"], s["k"], "nt", 1)]
            if args.gluon:
                if dtype != "fp8":
                    parser.error(f"--gluon: only the gemm-fp8 part has Gluon configs in the selector's space, not {part}")
                configs = spaces.gluon_config_space("exact")  # the sweep's scaled_matmul calls are exact
                shapes = [s for s in shapes if spaces.gluon_eligible(s["m"], s["n"], s["k"], "nt", 1)]
            plan.append((part, dtype, shapes[: args.limit or None], configs))
        elif part == "attention":
            plan.append((part, "bf16", select_shapes.attention_shapes()[: args.limit or None], None))
        else:
            parser.error(f"--parts: unknown part {part!r}; expected gemm-bf16, gemm-fp8, gemm-fp16, attention")

    only = set(filter(None, args.shapes.split(",")))
    plan = [(part, dtype, [s for s in shapes if (part, s["id"]) not in done_before and (not only or s["id"] in only)],
             configs) for part, dtype, shapes, configs in plan]
    for part, dtype, shapes, configs in plan:  # compile everything first, in parallel
        if part == "attention":
            keys = {(s["heads_q"], s["heads_kv"], s["head_dim"], s["causal"]): s for s in shapes}
            jobs = [(s, attention.config_space("cuda", "fwd", s["head_dim"])) for s in keys.values()]
            precompile(_compile_attention, jobs, args.workers)
        elif args.gluon:  # M, N, K are do_not_specialize and descriptors carry the strides: one build per config
            precompile(_compile_gemm, [(dtype, "nn", 256, 256, 256, [c]) for c in configs], args.workers)
        else:
            precompile(_compile_gemm, gemm_compile_jobs(shapes, dtype, configs), args.workers)

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "select_sweep.csv"
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        for part, dtype, shapes, configs in plan:
            done = 0
            for shape in shapes:
                if time.perf_counter() - started > args.budget_s:
                    print(f"{part}: budget reached after {done}/{len(shapes)} shapes", flush=True)
                    break
                space = configs or attention.config_space("cuda", "fwd", shape["head_dim"])
                tolerance = {"bf16": 2e-2, "fp16": 1e-2, "fp8": 5e-2}[dtype]
                sweep_shape(part, shape, dtype, space, writer, tolerance)
                handle.flush()
                done += 1
            print(f"{part}: {done}/{len(shapes)} shapes at {time.perf_counter() - started:.0f} s", flush=True)
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s on {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
