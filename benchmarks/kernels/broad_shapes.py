"""Our Triton GEMM and attention kernels against the vendor library on a broad shape set, side by side in one run
(issue 20), with the per-vendor shim's choice (``workbench.kernels.dispatch``) timed next to both.

    python3 benchmarks/kernels/broad_shapes.py --out DIR [--budget-s 480]     # on a GPU
    python3 benchmarks/kernels/broad_shapes.py --report DIR                   # REPORT.md from DIR's CSVs (CPU)
    python3 benchmarks/kernels/broad_shapes.py --dry-run --out DIR [--limit N] # CPU: every code path, tiny stand-ins

Shapes: ``benchmarks/kernels/shapes.yaml`` (72 GEMMs, each in bf16 and fp8 with per-row scales; 20 attention
shapes, forward and forward + backward). Per GEMM case: our kernel through the normal wrapper with config=None
(``dispatch.triton_matmul`` / ``dispatch.triton_scaled_matmul``: gemm.py, TMA or Gluon as the selector picks), the
vendor library (``torch.matmul`` / ``torch._scaled_mm``) and the shim (``dispatch.matmul`` / ``dispatch.scaled_matmul``), each
checked against the vendor's result (relative Frobenius error within ``gemm.TOLERANCE``; against an fp32 product
where the vendor refuses the shape) and timed with ``triton.testing.do_bench`` (median; ROUNDS alternating rounds
of WARMUP_MS / REP_MS, the median of the round medians; do_bench flushes the L2 before every launch, and inputs
are rotated over several sets when one set fits in the 50 MB L2). A burst of BURST_CALLS back-to-back calls also
gives each side's host time per call and GPU time per call without flushes (host-bound when they meet). Per
attention shape and pass: ``flash_attention`` against ``scaled_dot_product_attention`` under each of the flash,
cuDNN and memory-efficient backends (``torch.nn.attention.sdpa_kernel``), the fastest that runs.

Kernels are compiled first, in parallel worker processes running each case's wrapper once on uninitialised
full-size inputs (the same specialisations), so the timed loop loads them from Triton's cache. ``--budget-s`` bounds
the whole run: GEMMs stop at GEMM_SHARE of it (attention then gets the rest), every row is appended to the CSV as
it is measured, and the report is written from what was measured. Writes DIR/gemm.csv, DIR/attention.csv,
DIR/environment.json, DIR/REPORT.md (``workbench.kernels.broad_report``); prints a short summary last.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from workbench.kernels import broad_report  # noqa: E402  (pure Python: the report generator)

SHAPES = HERE / "shapes.yaml"
SHIM_SPLIT = HERE / "shim_fit_split.json"
"""The fit/test split of the GEMM shape ids for choosing the shim's rule (``broad_report.load_split``)."""
L2_BYTES = 50 * 2**20
"""H200 L2 cache (50 MB, NVIDIA H200 datasheet): an input set smaller than this is rotated with others."""
MAX_SETS = 64
WARMUP_MS, REP_MS, ROUNDS = 10, 25, 3
BURST_CALLS = 20
GEMM_SHARE = 0.72
"""Fraction of the budget the GEMM cases may use (the attention cases take the rest, at least)."""
PRECOMPILE_SHARE = 0.35
REPORT_RESERVE_S = 8.0
LAYOUTS = ("nn", "nt", "tn")
HEAD_DIMS = (64, 128)
SDPA_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")


# ------------------------------------------------------------------------------------------------------ shapes
class ShapeFileError(ValueError):
    pass


def load_shapes(path: Path = SHAPES) -> dict[str, list[dict]]:
    """The GEMM and attention rows of the shape file, checked: unique ids, positive integer sizes, a known layout,
    head_dim 64 or 128, heads_q a multiple of heads_kv, causal a bool. Errors name the row and the field."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        raise ShapeFileError(f"{path}: expected a mapping with schema_version: 1")
    out, seen = {}, set()
    for section, sizes in (("gemm", ("m", "n", "k")), ("attention", ("batch", "seq", "heads_q", "heads_kv",
                                                                       "head_dim"))):
        rows = data.get(section)
        if not isinstance(rows, list) or not rows:
            raise ShapeFileError(f"{path}: '{section}' must be a non-empty list")
        for i, row in enumerate(rows):
            where = f"{path}: {section}[{i}]"
            if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row.get("name"):
                raise ShapeFileError(f"{where}: expected a mapping with an id and a name, got {row!r}")
            if row["id"] in seen:
                raise ShapeFileError(f"{where}: duplicate id {row['id']!r}")
            seen.add(row["id"])
            for key in sizes:
                value = row.get(key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ShapeFileError(f"{where} ({row['id']}): {key} must be a positive integer, got {value!r}")
            if section == "gemm" and row.get("layout", "nn") not in LAYOUTS:
                raise ShapeFileError(f"{where} ({row['id']}): layout must be one of {LAYOUTS}, "
                                     f"got {row.get('layout')!r}")
            if section == "attention":
                if row["head_dim"] not in HEAD_DIMS:
                    raise ShapeFileError(f"{where} ({row['id']}): head_dim must be one of {HEAD_DIMS}")
                if row["heads_q"] % row["heads_kv"]:
                    raise ShapeFileError(f"{where} ({row['id']}): heads_q must be a multiple of heads_kv")
                if not isinstance(row.get("causal"), bool):
                    raise ShapeFileError(f"{where} ({row['id']}): causal must be true or false")
        out[section] = [dict(row, layout=row.get("layout", "nn"), family=row.get("family", "")) if section == "gemm"
                        else dict(row, fa3=bool(row.get("fa3", False))) for row in rows]
    return out


def round_robin(rows: list[dict], key: str) -> list[dict]:
    """Rows reordered so that consecutive rows come from different groups (a run cut short by its budget then
    has some of every family rather than all of the first ones)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row.get(key, ""), []).append(row)
    ordered, queues = [], list(groups.values())
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def stand_in(size: int) -> int:
    """A small size with the same residue modulo 32 (so the same divisibility by 2, 4, 8 and 16: the same
    alignment, padding and Triton specialisation classes), for the dry run."""
    return size if size <= 64 else 32 + size % 32


# ------------------------------------------------------------------------------------------------------ timing
class Timer:
    """do_bench medians on a GPU; in the dry run one wall-clock call (the code path, not a measurement).
    ``warmup_ms``, ``rep_ms``, ``rounds``: do_bench's per round (default WARMUP_MS, REP_MS, ROUNDS)."""

    def __init__(self, gpu: bool, *, warmup_ms: float | None = None, rep_ms: float | None = None,
                 rounds: int | None = None):
        self.gpu = gpu
        self.warmup_ms = WARMUP_MS if warmup_ms is None else warmup_ms
        self.rep_ms = REP_MS if rep_ms is None else rep_ms
        self.rounds_n = ROUNDS if rounds is None else rounds

    def rounds(self, fns: dict) -> dict:
        """{name: ms} for each function: ROUNDS alternating do_bench rounds, the median of their medians."""
        if not self.gpu:
            out = {}
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                out[name] = (time.perf_counter() - start) * 1e3
            return out
        from triton.testing import do_bench

        samples = {name: [] for name in fns}
        for round_ in range(self.rounds_n):
            for name, fn in fns.items():
                samples[name].append(float(do_bench(fn, warmup=self.warmup_ms if round_ == 0 else 2, rep=self.rep_ms,
                                                    return_mode="median")))
        return {name: statistics.median(values) for name, values in samples.items()}

    def burst(self, fn, calls: int = BURST_CALLS) -> tuple[float, float]:
        """(host us per call, GPU us per call) over ``calls`` back-to-back calls without L2 flushes."""
        if not self.gpu:
            start = time.perf_counter()
            for _ in range(min(calls, 2)):
                fn()
            host = (time.perf_counter() - start) / min(calls, 2) * 1e6
            return host, host
        import torch

        fn()
        torch.cuda.synchronize()
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - start) / calls * 1e6
        end_event.record()
        torch.cuda.synchronize()
        return host, start_event.elapsed_time(end_event) / calls * 1e3


def _cycle(fn, sets: list[tuple]):
    """fn over the input sets in turn, one set per call."""
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(sets)
        return fn(*sets[state[0]])
    return call


def relative_error(out, ref) -> float:
    import torch

    out, ref = out.detach().float(), ref.detach().float()
    if not torch.isfinite(out).all():
        return math.inf
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref).clamp_min(1e-30))


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:180] if text else ''}".replace("|", "/")


# ----------------------------------------------------------------------------------------------- GEMM cases
def gemm_inputs(shape: dict, dtype: str, device: str, sets: int = 1, empty: bool = False) -> list[tuple]:
    """(a, b) in the shape's layout for bf16; (a_fp8 row-major, b_fp8 column-major, scale_a [M, 1], scale_b [1, N])
    for fp8, as torch._scaled_mm takes them. ``empty``: uninitialised tensors (compilation only)."""
    import torch

    m, n, k, layout = shape["m"], shape["n"], shape["k"], shape["layout"]

    def rand(*size, dtype=torch.bfloat16):
        return torch.empty(*size, device=device, dtype=dtype) if empty else torch.randn(*size, device=device,
                                                                                       dtype=dtype)
    out = []
    for _ in range(sets):
        if dtype == "fp8":
            fp8 = torch.float8_e4m3fn
            a = rand(m, k).to(fp8)  # a: [M, K] row-major
            b = rand(n, k).to(fp8).t()  # b: [K, N] column-major
            scale_a = torch.rand(m, 1, device=device) + 0.5  # per-row scales, fp32
            scale_b = torch.rand(1, n, device=device) + 0.5
            out.append((a, b, scale_a, scale_b))
        else:
            a = rand(k, m).t() if layout[0] == "t" else rand(m, k)  # a: [M, K]
            b = rand(n, k).t() if layout[1] == "t" else rand(k, n)  # b: [K, N]
            out.append((a, b))
    return out


def gemm_bytes(shape: dict, dtype: str) -> int:
    size = 1 if dtype == "fp8" else 2
    return (shape["m"] * shape["k"] + shape["k"] * shape["n"]) * size + shape["m"] * shape["n"] * 2


def gemm_sets(shape: dict, dtype: str) -> int:
    """Input sets to rotate: enough to exceed twice the L2 when one set fits in it, else 1."""
    one = gemm_bytes(shape, dtype)
    return 1 if one >= L2_BYTES else min(MAX_SETS, math.ceil(2 * L2_BYTES / one))


def gemm_calls(dtype: str, gpu: str | None):
    """(ours, vendor, shim) callables over one input set."""
    import torch

    from workbench.kernels import dispatch

    if dtype == "fp8":
        return (lambda a, b, sa, sb: dispatch.triton_scaled_matmul(a, b, sa, sb),
                lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                lambda a, b, sa, sb: dispatch.scaled_matmul(a, b, sa, sb, gpu=gpu))
    return dispatch.triton_matmul, torch.matmul, lambda a, b: dispatch.matmul(a, b, gpu=gpu)


def gemm_case(shape: dict, dtype: str, timer: Timer, device: str, gpu: str | None) -> dict:
    """One GEMM row: correctness, ours / vendor / shim times, the shim's choice and its predictions."""
    import torch

    from workbench.kernels import dispatch, gemm
    from workbench.kernels._common import backend
    from workbench.select.gemm import config_key

    m, n, k = shape["m"], shape["n"], shape["k"]
    layout = "nt" if dtype == "fp8" else shape["layout"]
    row = dict(id=shape["id"], family=shape["family"], name=shape["name"], dtype=dtype, m=m, n=n, k=k,
               layout=layout, scaling="row" if dtype == "fp8" else "", flops=2.0 * m * n * k)
    errors = []
    sets = gemm_inputs(shape, dtype, device, gemm_sets(shape, dtype))
    row["sets"] = len(sets)
    ours, vendor, shim = gemm_calls(dtype, gpu)
    first = sets[0]
    try:
        tma = dtype == "fp8" or dispatch._tma_takes(first[0], first[1])  # bf16: TMA when config=None may take it
        config = dispatch._default_config(first[0], first[1], backend(), "exact", tma=tma)
        row["ours_kernel"], row["ours_config"] = config.get("KERNEL", "gemm"), config_key(config)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"config: {_error_text(exc)}")
    choice = dispatch.choice_for(first[0], first[1], fp8=dtype == "fp8", gpu=gpu)
    if choice is not None:
        row.update(shim_choice=choice.choice, pred_triton_ms=choice.triton_s * 1e3,
                   pred_vendor_ms=choice.vendor_s * 1e3 if math.isfinite(choice.vendor_s) else "",
                   shim_source=choice.source)
    row["vendor_takes"] = int(dispatch.vendor_takes(m, n, k, dtype))
    row["vendor_aligned"] = int(_aligned(m, n, k, dtype))
    tolerance = gemm.TOLERANCE[dtype]
    results, fns = {}, {}
    for name, fn in (("vendor", vendor), ("ours", ours), ("shim", shim)):
        try:
            results[name] = fn(*first)
            fns[name] = _cycle(fn, sets)
        except Exception as exc:  # noqa: BLE001 - the vendor refusing a shape is a result too
            errors.append(f"{name}: {_error_text(exc)}")
            if timer.gpu:
                torch.cuda.synchronize()
    reference = results.get("vendor")
    if reference is None and "ours" in results:  # the vendor refused: an fp32 product instead
        a, b = first[0].float(), first[1].float()
        reference = (a * first[2]) @ (b * first[3]) if dtype == "fp8" else a @ b
    for name in ("ours", "shim"):
        if name in results and reference is not None:
            error = relative_error(results[name], reference)
            row[f"rel_err_{name}"] = error
            if not error <= tolerance:
                errors.append(f"{name}: wrong result (relative error {error:.2e} > {tolerance})")
                fns.pop(name, None)
    del results, reference
    if fns:
        times = timer.rounds(fns)
        for name, ms in times.items():
            row[f"{name}_ms"] = ms
        for name in ("ours", "vendor"):
            if name in fns:
                row[f"{name}_host_us"], row[f"{name}_burst_us"] = timer.burst(fns[name])
    row["error"] = "; ".join(errors)
    del sets, fns
    if timer.gpu and gemm_bytes(shape, dtype) > 2**30:
        torch.cuda.empty_cache()
    return row


def _aligned(m: int, n: int, k: int, dtype: str) -> bool:
    from workbench.graph.ops import GemmShape
    from workbench.perf.gemm import is_aligned

    return is_aligned(GemmShape(m, n, k), dtype)


# ------------------------------------------------------------------------------------------- attention cases
def attention_inputs(shape: dict, device: str, empty: bool = False):
    import torch

    b, s, hq, hkv, d = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim"))
    make = torch.empty if empty else torch.randn
    q = make(b, hq, s, d, device=device, dtype=torch.bfloat16)  # q: [B, Hq, S, D]
    k = make(b, hkv, s, d, device=device, dtype=torch.bfloat16)  # k, v: [B, Hkv, S, D]
    v = make(b, hkv, s, d, device=device, dtype=torch.bfloat16)
    do = make(b, hq, s, d, device=device, dtype=torch.bfloat16)
    return q, k, v, do


def _sdpa(causal: bool, gqa: bool, expand: int = 1):
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fwd(q, k, v):
        if expand > 1:  # a backend without GQA: keys and values repeated per query head (counted in its time)
            k, v = k.repeat_interleave(expand, dim=1), v.repeat_interleave(expand, dim=1)
            return sdpa(q, k, v, is_causal=causal)
        return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)
    return fwd


def _fwd_bwd(forward):
    import torch

    def run(q, k, v, do):
        o = forward(q, k, v)
        return (o, *torch.autograd.grad(o, (q, k, v), do))
    return run


def attention_cases(shape: dict, timer: Timer, device: str) -> list[dict]:
    """Two rows (fwd, fwd_bwd): ours against every SDPA backend that runs (timed in the same alternating rounds),
    checked against the fastest of them."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from workbench.kernels.attention import TOLERANCE, flash_attention, flops

    b, s, hq, hkv, d, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim", "causal"))
    q, k, v, do = attention_inputs(shape, device)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    backends = [name for name in SDPA_BACKENDS if hasattr(SDPBackend, name)]
    if not timer.gpu:
        backends = ["MATH"]  # the CPU has no fused SDPA backend: the dry run exercises the code path only
    rows = []
    for pass_ in ("fwd", "fwd_bwd"):
        row = dict(id=shape["id"], name=shape["name"], pass_=pass_, batch=b, seq=s, heads_q=hq, heads_kv=hkv,
                   head_dim=d, causal=int(causal), fa3=int(shape.get("fa3", False)),
                   flops=flops(b, hq, s, d, causal, pass_))
        errors = []
        args = (q, k, v) if pass_ == "fwd" else (qg, kg, vg, do)
        ours = (lambda q_, k_, v_: flash_attention(q_, k_, v_, causal=causal)) if pass_ == "fwd" else \
            _fwd_bwd(lambda q_, k_, v_: flash_attention(q_, k_, v_, causal=causal))
        fns, outputs = {}, {}
        for name in backends:
            for expand in ((1,) if hq == hkv else (1, hq // hkv)):
                fn = _sdpa(causal, hq != hkv, expand)
                fn = _under(getattr(SDPBackend, name), fn if pass_ == "fwd" else _fwd_bwd(fn), sdpa_kernel)
                label = name.lower().replace("_attention", "") + ("+expand" if expand > 1 else "")
                try:
                    outputs[label] = fn(*args)
                    fns[label] = fn
                    break
                except Exception as exc:  # noqa: BLE001 - a backend that refuses the shape is recorded
                    row[f"sdpa_{name.lower().replace('_attention', '')}_error"] = _error_text(exc)
                    if timer.gpu:
                        torch.cuda.synchronize()
        if not fns:
            errors.append("no SDPA backend ran")
        try:
            out = ours(*args)
            for label, ref in outputs.items():
                pairs = [(out, ref)] if pass_ == "fwd" else list(zip(out, ref))
                error = max(relative_error(a, r) for a, r in pairs)
                row["rel_err"] = max(row.get("rel_err", 0.0), error)
            if row.get("rel_err", 0.0) <= TOLERANCE["bf16"]:
                fns["ours"] = ours
            else:
                errors.append(f"ours: wrong result (relative error {row['rel_err']:.2e} > {TOLERANCE['bf16']})")
            del out
        except Exception as exc:  # noqa: BLE001
            errors.append(f"ours: {_error_text(exc)}")
            if timer.gpu:
                torch.cuda.synchronize()
        outputs.clear()
        times = timer.rounds({label: (lambda f=fn: f(*args)) for label, fn in fns.items()}) if fns else {}
        if "ours" in times:
            row["ours_ms"] = times.pop("ours")
        for label, ms in times.items():
            row[f"sdpa_{label.split('+')[0]}_ms"] = ms
        if times:
            best = min(times, key=times.get)
            row.update(sdpa_ms=times[best], sdpa_backend=best)
        row["error"] = "; ".join(errors)
        rows.append(row)
    return rows


def _under(backend, fn, sdpa_kernel):
    """fn run with SDPA restricted to ``backend`` (the context is entered per call: its host cost is a few us)."""
    def run(*args):
        with sdpa_kernel([backend]):
            return fn(*args)
    return run


# --------------------------------------------------------------------------------------------- precompile
def _compile_job(job: tuple) -> str:
    """Worker process: run one case's wrappers once on uninitialised full-size inputs (compiles what the timed run
    will use; Triton's disk cache hands the kernels to the main process)."""
    kind, shape, dtype, device = job
    import torch

    started = time.perf_counter()
    try:
        if kind == "gemm":
            ours, _, shim = gemm_calls(dtype, None)
            inputs = gemm_inputs(shape, dtype, device, empty=True)[0]
            ours(*inputs)
            shim(*inputs)
        else:
            from workbench.kernels.attention import flash_attention

            q, k, v, do = attention_inputs(shape, device, empty=True)
            flash_attention(q, k, v, causal=shape["causal"])
            qg, kg, vg = (t.requires_grad_() for t in (q, k, v))
            _fwd_bwd(lambda a, b, c: flash_attention(a, b, c, causal=shape["causal"]))(qg, kg, vg, do)
        if device == "cuda":
            torch.cuda.synchronize()
        status = "ok"
    except Exception as exc:  # noqa: BLE001 - the timed run records it again
        status = _error_text(exc)
    return f"{kind} {shape['id']} {dtype}: {status} ({time.perf_counter() - started:.1f} s)"


def precompile(jobs: list[tuple], workers: int, limit_s: float, job_fn=None) -> None:
    """Run ``job_fn`` (default ``_compile_job``: a module-level function returning a status line with "ok (" on
    success) over ``jobs`` in ``workers`` spawned processes, for at most ``limit_s``."""
    if not jobs or workers < 1 or limit_s <= 0:
        return
    job_fn = job_fn or _compile_job
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        futures = [pool.submit(job_fn, job) for job in jobs]
        done, pending = concurrent.futures.wait(futures, timeout=limit_s)
        failures = 0
        for future in done:
            try:
                line = future.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker: the timed run compiles inline
                line = f"worker failed: {_error_text(exc)}"
            failures += "ok (" not in line
            if "ok (" not in line:
                print("  precompile:", line, flush=True)
        print(f"precompiled {len(done)}/{len(jobs)} cases in {time.perf_counter() - started:.0f} s "
              f"({failures} with errors, {len(pending)} left to compile inline)", flush=True)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------------- main
def environment(gpu: bool, args) -> dict:
    import torch
    import triton

    from workbench.benchmarking import ptxas_text

    env = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
           "hip": torch.version.hip, "python": platform.python_version(), "host": platform.node(),
           "cpu_count": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": " ".join(sys.argv), "budget_s": args.budget_s, "dry_run": bool(args.dry_run),
           "timing": f"do_bench median, {ROUNDS} alternating rounds of warmup {WARMUP_MS} ms / rep {REP_MS} ms",
           "ptxas": ptxas_text()}
    if gpu:
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), sm_count=props.multi_processor_count)
        try:
            from workbench.bench import detect_gpu

            local = detect_gpu()
            env.update(catalog_gpu=local.catalog.name if local.catalog else None, arch=local.arch,
                       driver=local.driver)
        except Exception as exc:  # noqa: BLE001 - the environment is context, not the measurement
            env["detect_gpu_error"] = _error_text(exc)
    else:
        env.update(gpu="none (dry run: CPU tensors, TRITON_INTERPRET=1; times are not measurements)")
    return env


class CsvLog:
    """Rows appended as they come (the header grows with new columns: rewritten then, rows kept)."""

    def __init__(self, path: Path, fields: list[str]):
        self.path, self.fields, self.rows = path, list(fields), []
        self._write()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        new = [key for key in row if key not in self.fields]
        if new:
            self.fields += new
            self._write()
        else:
            with self.path.open("a", newline="") as handle:
                csv.DictWriter(handle, self.fields).writerow({key: _cell(row.get(key, "")) for key in self.fields})

    def _write(self) -> None:
        with self.path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, self.fields)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({key: _cell(row.get(key, "")) for key in self.fields})


def _cell(value):
    return f"{value:.6g}" if isinstance(value, float) else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="output folder (created)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop cleanly after this many seconds")
    parser.add_argument("--shapes", type=Path, default=SHAPES)
    parser.add_argument("--report", type=Path, default=None, help="only write DIR/REPORT.md from DIR's CSVs")
    parser.add_argument("--dry-run", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny stand-in shapes")
    parser.add_argument("--limit", type=int, default=None, help="at most this many shapes per op (debugging)")
    parser.add_argument("--ops", default="gemm,attention", help="gemm, attention or both")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="processes that compile the kernels before the timed run (0: compile inline)")
    args = parser.parse_args(argv)
    if args.report is not None:
        print(broad_report.write_report(args.report, SHIM_SPLIT))
        return 0
    if args.out is None:
        parser.error("--out is required (or --report DIR)")
    started = time.monotonic()
    shapes = load_shapes(args.shapes)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    import torch

    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("no GPU: use --dry-run for the CPU code path check", file=sys.stderr)
        return 2
    device, rule_gpu = ("cuda", None) if gpu else ("cpu", "h200")  # dry run: the H200's rule on CPU tensors
    ops = set(args.ops.split(","))
    gemm_rows = round_robin(shapes["gemm"], "family")[: args.limit] if "gemm" in ops else []
    attention_rows = shapes["attention"][: args.limit] if "attention" in ops else []
    if args.dry_run:
        gemm_rows = [dict(r, m=stand_in(r["m"]), n=stand_in(r["n"]), k=stand_in(r["k"])) for r in gemm_rows]
        attention_rows = [dict(r, batch=1, seq=32, heads_q=r["heads_q"] // r["heads_kv"], heads_kv=1)
                          for r in attention_rows]
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(gpu, args)
    (args.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps(env), flush=True)
    deadline = started + args.budget_s - REPORT_RESERVE_S
    if args.workers > 0:  # the dry run too: the worker path on the interpreter (it compiles nothing there)
        jobs = [("gemm", r, dtype, device) for r in gemm_rows for dtype in ("bf16", "fp8")]
        jobs += [("attention", r, "bf16", device) for r in attention_rows]
        precompile(jobs, args.workers, min(args.budget_s * PRECOMPILE_SHARE, deadline - time.monotonic()))
    timer = Timer(gpu)
    gemm_log = CsvLog(args.out / "gemm.csv", broad_report.GEMM_FIELDS)
    gemm_deadline = started + args.budget_s * GEMM_SHARE
    skipped = 0
    for index, shape in enumerate(gemm_rows):
        for dtype in ("bf16", "fp8"):
            if time.monotonic() > (gemm_deadline if attention_rows else deadline):
                skipped += 1
                continue
            t0 = time.monotonic()
            try:
                row = gemm_case(shape, dtype, timer, device, rule_gpu)
            except Exception as exc:  # noqa: BLE001 - inputs that do not fit, a crash in a wrapper: recorded
                traceback.print_exc()
                row = dict(id=shape["id"], family=shape["family"], name=shape["name"], dtype=dtype, m=shape["m"],
                           n=shape["n"], k=shape["k"], layout=shape["layout"], error=_error_text(exc))
                if gpu:
                    torch.cuda.empty_cache()
            gemm_log.add(row)
            print(broad_report.gemm_line(row) + f"  [{time.monotonic() - t0:.1f} s]", flush=True)
    if skipped:
        print(f"budget: {skipped} GEMM cases not run", flush=True)
    attention_log = CsvLog(args.out / "attention.csv", broad_report.ATTENTION_FIELDS)
    for shape in attention_rows:
        if time.monotonic() > deadline:
            print(f"budget: stopping before attention {shape['id']}", flush=True)
            break
        t0 = time.monotonic()
        try:
            rows = attention_cases(shape, timer, device)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            rows = [dict(id=shape["id"], name=shape["name"], pass_=p, error=_error_text(exc))
                    for p in ("fwd", "fwd_bwd")]
            if gpu:
                torch.cuda.empty_cache()
        for row in rows:
            attention_log.add(row)
            print(broad_report.attention_line(row) + f"  [{time.monotonic() - t0:.1f} s]", flush=True)
    print(broad_report.write_report(args.out, SHIM_SPLIT))
    print(f"total {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
