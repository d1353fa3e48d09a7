"""Live benchmarks of the Triton kernels on the local GPU, next to the vendor baseline and the model's prediction.

``run_suite("quick")`` detects the accelerator (NVIDIA through CUDA, AMD through ROCm), matches it to the
catalog, checks each kernel against its reference on fresh random inputs, times our kernel and the baseline
with ``triton.testing.do_bench`` medians (which flush the L2 between runs; ours and the baseline in alternating
rounds, ``_do_bench_pair``), and returns a DataFrame with
achieved TFLOP/s and GB/s, % of the spec peak, the model's predicted time for the vendor baseline and the
measured/predicted ratio. Results are cached on disk per GPU, driver, torch and triton version. A failing case
(compile error, out of memory) is recorded in its row and the suite goes on.

Needs torch and triton; imported lazily by the CLI and the widgets.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import platform
import re
import statistics
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.errors import WorkbenchError
from workbench.fileio import check_output, read_csv_text, write_text
from workbench.hardware import GPU, get_gpu

if TYPE_CHECKING:
    import pandas as pd

KERNEL_MODULES = ("gemm", "attention", "norms", "swiglu", "cross_entropy", "embedding_bag")
SUITES = ("quick", "full")
CACHE_DIR_ENV = "WORKBENCH_CACHE_DIR"

# Device names as drivers report them -> catalog names. Exact patterns, no fuzzy matching.
_DEVICE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bH200\b", "h200-sxm"),
    (r"\bH100\b.*(SXM|HBM3)|\bH100 80GB HBM3\b", "h100-sxm"),
    (r"\bA100\b.*80GB", "a100-sxm-80gb"),
    (r"\bGB200\b", "gb200"),
    (r"\bGB300\b", "gb300"),
    (r"\bB300\b", "b300"),
    (r"\bB200\b", "b200"),
    (r"MI455X", "mi455x"),
    (r"MI355X", "mi355x"),
    (r"MI350X", "mi350x"),
    (r"MI325X", "mi325x"),
    (r"MI300X", "mi300x"),
    (r"MI250X", "mi250x"),
)


class NoGPUError(WorkbenchError):
    """There is no accelerator to benchmark on."""


@dataclass(frozen=True)
class LocalGPU:
    device_name: str
    backend: str
    """cuda or hip"""
    catalog: GPU | None
    """The catalog entry, or None for an unknown GPU (then measured ceilings stand in for spec peaks)."""
    driver: str
    torch_version: str
    triton_version: str
    arch: str


def match_catalog(device_name: str) -> GPU | None:
    """The catalog GPU a driver-reported device name denotes, or None."""
    for pattern, name in _DEVICE_PATTERNS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return get_gpu(name)
    return None


def detect_gpu() -> LocalGPU:
    """The local accelerator; raises ``NoGPUError`` with what to do instead when there is none."""
    try:
        import torch
    except ImportError as exc:
        raise NoGPUError("torch is not installed: install it to benchmark (./dev setup does)") from exc
    if not torch.cuda.is_available():
        raise NoGPUError("no GPU found (torch.cuda.is_available() is False): benchmarks need an NVIDIA or AMD GPU. "
                         "Kernel correctness still runs on the CPU: `workbench kernels check` (Triton interpreter), "
                         "and the Roofline tab shows predictions without measurements.")
    import triton

    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    backend = "hip" if torch.version.hip else "cuda"
    arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
    driver = torch.version.hip or torch.version.cuda or ""
    return LocalGPU(name, backend, match_catalog(name), _driver_version() or driver, torch.__version__,
                    triton.__version__, arch)


def _driver_version() -> str:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def cache_path(gpu: LocalGPU, suite: str, ops: tuple[str, ...], gemm_shapes: list[dict] | None = None) -> Path:
    key = json.dumps([gpu.device_name, gpu.driver, gpu.torch_version, gpu.triton_version, suite, sorted(ops),
                      gemm_shapes or []], sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    root = Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "codesign-workbench")
    return root / f"bench-{re.sub(r'[^A-Za-z0-9]+', '-', gpu.device_name)}-{suite}-{digest}.csv"


def _do_bench(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


PAIRED_ROUNDS = 3
"""Rounds of ours-then-baseline timings per case. One do_bench each, back to back, let clock and power drift between
the two (the same fp8 _scaled_mm measured 0.88 and 1.08 ms in two H200 suite runs); alternating short rounds and
taking each side's median puts both under the same conditions."""


def _do_bench_pair(ours, baseline, rounds: int = PAIRED_ROUNDS) -> tuple[float, float]:
    """(ours ms, baseline ms): medians over ``rounds`` alternating do_bench medians (40 ms of repeats each)."""
    from triton.testing import do_bench

    times: tuple[list[float], list[float]] = ([], [])
    for round_ in range(rounds):
        for fn, out in ((ours, times[0]), (baseline, times[1])):
            out.append(float(do_bench(fn, warmup=25 if round_ == 0 else 5, rep=40, return_mode="median")))
    return statistics.median(times[0]), statistics.median(times[1])


def _relative_error(out, ref) -> float:
    import torch

    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        if o is None or r is None:
            continue
        o, r = o.detach().double(), r.detach().double().to(o.device)
        if not torch.isfinite(o).all():
            return math.inf
        worst = max(worst, float(torch.linalg.vector_norm(o - r) / max(torch.linalg.vector_norm(r), 1e-30)))
    return worst


def poison_allocator(nbytes: float) -> None:
    """Fill the memory the next allocations will reuse with NaN: a kernel that leaves part of its output
    unwritten then fails the correctness check instead of passing on stale values. (torch's caching allocator
    hands a freed block to the next request that fits; a best effort, not a guarantee.)"""
    import torch

    elements = int(min(max(nbytes, 1 << 20), 8 << 30) // 4)
    block = torch.full((elements,), float("nan"), device="cuda", dtype=torch.float32)
    del block


def measure_ceilings(gpu: LocalGPU) -> dict[str, float]:
    """Measured device-to-device copy bandwidth (GB/s, read + write) and large bf16 matmul rate (TFLOP/s)."""
    import torch

    n = 1 << 30  # 1 GiB per buffer: far beyond any L2
    src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_ms = _do_bench(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = _do_bench(lambda: a @ b)
    del src, dst, a, b
    torch.cuda.empty_cache()
    return {"copy_gb_s": 2 * n / copy_ms / 1e6, "matmul_bf16_tflops": 2 * 8192**3 / mm_ms / 1e9}


def _cases(suite: str, ops: tuple[str, ...], gemm_shapes: list[dict] | None = None):
    """(module name, case or None, import error) for every requested kernel module; ``gemm_shapes`` replaces the
    GEMM module's suite by those shapes."""
    for name in ops:
        try:
            importlib.import_module(f"workbench.kernels.{name}")  # its own import error is this module's row
            from workbench.kernels import cases as kernel_cases

            cases = (kernel_cases.gemm_shape_cases(gemm_shapes) if name == "gemm" and gemm_shapes
                     else kernel_cases.bench_cases(name, suite))
            for case in cases:
                yield name, case, ""
        except Exception as exc:  # a module that fails to import or build its cases is reported, not fatal
            yield name, None, f"{type(exc).__name__}: {exc}"


PREDICT_OPS_ROWS = ("gemm", "attention", "copy", "add", "gelu", "sum", "layernorm", "rmsnorm", "softmax")
"""Suite ops that are a ``predict-ops`` row as they stand (``workbench.rows``)."""
FUSED_PASS_TRAFFIC: dict[str, tuple[str, tuple[tuple[int, int], tuple[int, int]]]] = {
    "rmsnorm": ("rmsnorm", ((1, 1), (2, 1))),
    "layernorm": ("layernorm", ((1, 1), (2, 1))),
    "gelu": ("gelu", ((1, 1), (2, 1))),
    "swiglu": ("swiglu", ((2, 1), (3, 2))),  # cols = F: gate, up -> out; gate, up, dout -> dgate, dup
    "cross_entropy": ("cross_entropy", ((1, 0), (1, 1))),  # logits -> loss; logits -> dlogits
}
"""Suite ops priced as the training-step graph prices the fused op (``workbench.graph.transformer``'s
``elementwise``/``norm_op`` and ``head_ops``): op -> (model op kind, (reads, writes) of full [rows, cols] tensors in
the forward and in the backward). A ``<op>_fwd_bwd`` case is the two passes, a plain ``<op>`` case the forward."""
GATHER_OPS = {"embedding_bag": "embedding"}
"""Suite ops priced as one random-row gather of the case's bytes (torch's kernel, ``memory_gather_efficiency``)."""


def predicted_ms(row: dict, gpu: GPU | None, case_bytes: float = 0.0) -> float:
    """The model's prediction for the vendor baseline of a suite case (``BenchCase.row``, ``BenchCase.bytes``):
    a predict-ops row as it stands, a fused op's passes (``FUSED_PASS_TRAFFIC``), a gather (``GATHER_OPS``);
    nan without a catalog GPU or for an op the model does not price."""
    op = str(row.get("op", ""))
    base, both = (op.removesuffix("_fwd_bwd"), True) if op.endswith("_fwd_bwd") else (op, False)
    if gpu is None or (op not in PREDICT_OPS_ROWS and base not in FUSED_PASS_TRAFFIC and base not in GATHER_OPS):
        return math.nan
    from workbench.graph.ops import FlatShape, Op, RowsShape, memory_op
    from workbench.perf import op_time
    from workbench.perf.efficiency import constants_for
    from workbench.rows import predict_row_ms, row_to_op

    try:
        constants = constants_for(gpu, calibrated=True)
    except WorkbenchError:  # no calibration profile for this GPU yet: spec-only constants
        constants = constants_for(gpu, calibrated=False)
    if op in PREDICT_OPS_ROWS:
        return predict_row_ms(row_to_op({k: str(v) for k, v in row.items()}, 0, gpu), gpu, constants)
    dtype = str(row.get("dtype", "bf16"))
    if base in GATHER_OPS:
        ops = [Op(op, GATHER_OPS[base], "fwd", FlatShape(int(row["rows"]) * int(row["cols"])), dtype,
                  flops=0.0, bytes_read=float(case_bytes), bytes_written=0.0, extra={"gather": "torch"})]
    else:
        kind, passes = FUSED_PASS_TRAFFIC[base]
        shape = RowsShape(int(row["rows"]), int(row["cols"]))
        ops = [memory_op(f"{op}.{phase}", kind, shape, dtype, reads=reads, writes=writes, phase=phase)
               for phase, (reads, writes) in zip(("fwd", "bwd"), passes[:2 if both else 1])]
    return sum(op_time(o, gpu, constants).time_s for o in ops) * 1e3


def run_suite(suite: str = "quick", ops: tuple[str, ...] | list[str] | None = None, *, use_cache: bool = True,
              progress: bool = True, out: str | Path | None = None, overwrite: bool = False,
              gemm_shapes: list[dict] | None = None) -> pd.DataFrame:
    """Benchmark the kernels of ``ops`` (default: all) on the local GPU; see the module docstring.
    ``gemm_shapes`` ([{m, n, k, dtype}, ...]) benchmarks those GEMMs instead of the suite's. ``out``: also write
    the results CSV there (an existing file only with ``overwrite``; CLI: ``--force``)."""
    import pandas as pd

    if out:
        check_output(out, overwrite=overwrite)  # before the run, not after it

    if suite not in SUITES:
        raise WorkbenchError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    ops = tuple(ops or KERNEL_MODULES)
    unknown = [o for o in ops if o not in KERNEL_MODULES]
    if unknown:
        raise WorkbenchError(f"unknown kernel {unknown[0]!r}; expected some of {', '.join(KERNEL_MODULES)}")
    gpu = detect_gpu()
    path = cache_path(gpu, suite, ops, gemm_shapes)
    cached = _read_cache(path) if use_cache else None
    if cached is not None:
        if out:
            write_text(out, cached.to_csv(index=False), overwrite=overwrite)
        return cached

    import torch

    ceilings = measure_ceilings(gpu)
    cases = list(_cases(suite, ops, gemm_shapes))
    bar = _progress(len(cases), progress)
    rows = []
    for module, case, import_error in cases:
        row = {"module": module, "gpu": gpu.device_name, "catalog_gpu": gpu.catalog.name if gpu.catalog else "",
               "error": import_error}
        if case is None:
            rows.append(row)
            bar.update(1)
            continue
        row.update(op=case.op, name=case.name, dtype=case.dtype, **{f"row_{k}": v for k, v in case.row.items()},
                   flops=case.flops, bytes=case.bytes)
        bar.set_description(f"{module}: {case.name}")
        try:
            torch.manual_seed(0)
            inputs = case.make_inputs("cuda")
            poison_allocator(case.bytes)
            row["rel_err"] = _relative_error(case.run(*inputs), case.reference(*inputs))
            row["correct"] = row["rel_err"] <= case.tolerance
            row["triton_ms"], row["baseline_ms"] = _do_bench_pair(lambda: case.run(*inputs),
                                                                  lambda: case.baseline(*inputs))
            row["speedup_vs_baseline"] = row["baseline_ms"] / row["triton_ms"]
            row["achieved_tflops"] = case.flops / row["triton_ms"] / 1e9
            row["achieved_gb_s"] = case.bytes / row["triton_ms"] / 1e6
            row["pct_of_copy_bw"] = row["achieved_gb_s"] / ceilings["copy_gb_s"] * 100
            if gpu.catalog is not None and case.flops:
                from workbench.precision import get_precision

                peak = gpu.catalog.peak_tflops(get_precision(case.dtype).peak_key)
                row["pct_of_peak"] = row["achieved_tflops"] / peak * 100
            row["predicted_baseline_ms"] = predicted_ms(case.row, gpu.catalog, case.bytes)
            row["measured_over_predicted"] = row["baseline_ms"] / row["predicted_baseline_ms"]
            del inputs
        except Exception as exc:  # noqa: BLE001 - recorded in the row; the suite goes on
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            row["traceback"] = traceback.format_exc(limit=3)
        finally:
            torch.cuda.empty_cache()
        rows.append(row)
        bar.update(1)
    bar.close()
    frame = pd.DataFrame(rows)
    frame.attrs.update(ceilings=ceilings, gpu=gpu.device_name, arch=gpu.arch, driver=gpu.driver,
                       torch=gpu.torch_version, triton=gpu.triton_version, host=platform.node(), time=time.time())
    for key, value in ceilings.items():
        frame[f"ceiling_{key}"] = value
    text = frame.to_csv(index=False)
    try:  # a cache: replaced, through a unique temp file, fsync and a rename (racing writers never mix rows)
        write_text(path, text, overwrite=True)
    except WorkbenchError as exc:  # an unwritable cache folder loses the cache, not the results
        warnings.warn(f"bench results not cached: {exc}", stacklevel=2)
    if out:
        write_text(out, text, overwrite=overwrite)
    return frame


def _read_cache(path: Path):
    """The cached results, or None when there are none or they cannot be read (measured again, then)."""
    import io

    import pandas as pd

    if not path.is_file():
        return None
    try:
        return pd.read_csv(io.StringIO(read_csv_text(path)))
    except (WorkbenchError, ValueError, pd.errors.ParserError):  # EmptyDataError is a ValueError
        return None


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_description(self, text: str) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="case")
