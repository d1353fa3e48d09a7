"""Memory-bound kernels and the tf32 GEMM against torch, eager and torch.compile'd, on one GPU (issue 20).

    python3 benchmarks/kernels/elementwise.py --out DIR --budget-s 170     # on a GPU
    python3 benchmarks/kernels/elementwise.py --out DIR --budget-s 100 --ops cross_entropy,swiglu   # some ops
    python3 benchmarks/kernels/elementwise.py --report DIR                 # REPORT.md again from DIR's CSVs

Per op (RMSNorm, LayerNorm, SwiGLU on a fused gate_up, cross-entropy; forward, and forward + backward through
autograd) and LLM shape (tokens 4k-64k x hidden 2k-8k; SwiGLU widths F 8k-28k; vocabularies 32k-128k): ours,
the torch op eager, and the torch op under ``torch.compile`` (static hidden/vocab sizes, the token count marked
dynamic: one compile per width, as a training job with a fixed width sees it), each a ``triton.testing.do_bench``
median (L2 flushed between runs) over ``ROUNDS`` interleaved rounds, as ``workbench/bench.py`` times the suite.
Each row carries the bytes the op must move (the kernel modules' ``bytes_moved``: every pass on its own), our
achieved GB/s as a fraction of the measured copy bandwidth (``copy_`` of a 1 GiB bf16 buffer, read + write), and
the model's prediction for the eager op (``workbench.bench.predicted_ms``). Then the tf32 GEMM (``matmul(...,
precision="tf32")``) against cuBLAS with ``allow_tf32`` on six shapes, and, budget permitting, small config
sweeps (tf32 tiles, the norms' and cross-entropy's pipeline depth and warps, cross-entropy's forward split and
SwiGLU's block and warps) that say whether the defaults hold; REPORT.md names each sweep's fastest config.
``--ops`` runs only the named ops (and their sweeps).

Writes DIR/elementwise.csv, DIR/tf32.csv, DIR/sweeps.csv (rows appended as they finish), DIR/environment.json and
DIR/REPORT.md (every figure and the targets met or missed). One failing row records its error and the run goes
on; ``--budget-s`` skips what would start after it (recorded as skipped).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
"""Interleaved rounds per row (ours, eager, compiled in turn): clock and power drift hit all three alike."""
LARGE_BYTES = 1e9
"""A row moving at least this many bytes counts as "large" for the copy-bandwidth target."""
TARGETS = {"vs_torch": 1.0, "copy_fraction": 0.85, "tf32_vs_cublas": 0.80}
"""Issue 20: >= 1.0x the torch op (eager and compiled), >= 0.85 of copy bandwidth at large sizes, tf32 GEMM >= 0.80
of cuBLAS."""

NORM_SHAPES = [(16384, 2048), (65536, 2048), (4096, 4096), (16384, 4096), (8192, 8192), (32768, 8192)]
"""(tokens, hidden): Llama 3.2 1B (2048), Llama 3 8B (4096), 70B (8192) at 4k-64k tokens."""
SWIGLU_SHAPES = [(16384, 8192), (65536, 8192), (4096, 14336), (16384, 14336), (8192, 28672), (16384, 28672)]
"""(tokens, F): Llama 3.2 1B (8192), Llama 3 8B (14336), 70B (28672)."""
CE_SHAPES = [(16384, 32000), (65536, 32000), (4096, 128256), (8192, 128256), (16384, 128256), (32768, 128256)]
"""(tokens, vocabulary): Llama 2 / Mistral (32000), Llama 3 (128256)."""
TF32_SHAPES = [(8192, 4096, 4096), (8192, 6144, 4096), (8192, 4096, 14336), (8192, 28672, 4096), (4096, 4096, 4096),
               (16384, 8192, 8192)]
"""(m, n, k): Llama 3 8B o, qkv, down, gate_up at 8k tokens, a 4k cube, a 16k x 8k x 8k."""
FIELDS = ("op", "pass", "tokens", "width", "bytes", "ours_ms", "eager_ms", "compiled_ms", "vs_eager", "vs_compiled",
          "ours_gb_s", "copy_fraction", "predicted_eager_ms", "eager_over_predicted", "rel_err", "error")
TF32_FIELDS = ("m", "n", "k", "ours_ms", "cublas_ms", "vs_cublas", "ours_tflops", "cublas_tflops", "rel_err", "error")
SWEEP_FIELDS = ("op", "pass", "tokens", "width", "config", "ms", "vs_default", "error")
OPS = ("rmsnorm", "layernorm", "tf32", "swiglu", "cross_entropy")
"""What ``--ops`` selects from, in run order."""


# ------------------------------------------------------------------------------------------------- timing
def interleaved(fns: list, rounds: int = ROUNDS) -> list[float]:
    """Median ms of each fn over ``rounds`` alternating ``do_bench`` medians (40 ms of repeats each)."""
    from triton.testing import do_bench

    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(rounds):
        for fn, out in zip(fns, times):
            out.append(float(do_bench(fn, warmup=25 if round_ == 0 else 5, rep=40, return_mode="median")))
    return [statistics.median(t) for t in times]


def copy_bandwidth_gb_s() -> float:
    """Device-to-device copy_ of a 1 GiB bf16 buffer, read + write bytes (as ``workbench.bench.measure_ceilings``)."""
    import torch

    n = 1 << 30
    src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    (ms,) = interleaved([lambda: dst.copy_(src)])
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / ms / 1e6


def rel_err(out, ref) -> float:
    import torch

    out, ref = out.detach().double(), ref.detach().double()
    return float(torch.linalg.vector_norm(out - ref) / max(float(torch.linalg.vector_norm(ref)), 1e-30))


# ------------------------------------------------------------------------------------------------- cases
def make_case(op: str, pass_: str, tokens: int, width: int):
    """(ours, eager, compiled-able torch fn, inputs maker, bytes) for one row."""
    import torch
    import torch.nn.functional as F

    from workbench.kernels import cross_entropy as ce
    from workbench.kernels import norms, swiglu
    from workbench.kernels.reference import torch_swiglu

    bf16, backward = torch.bfloat16, pass_ == "fwd_bwd"
    if op in ("rmsnorm", "layernorm"):
        layer = op == "layernorm"
        ours = norms.layer_norm if layer else norms.rms_norm
        torch_fn = norms.torch_layer_norm if layer else norms.torch_rms_norm

        def inputs():
            x = torch.randn(tokens, width, device="cuda", dtype=bf16)
            params = [1 + 0.1 * torch.randn(width, device="cuda", dtype=bf16) for _ in range(2 if layer else 1)]
            leaves = tuple(t.requires_grad_(backward) for t in (x, *params))
            return leaves, (torch.randn_like(x) if backward else None)
        nbytes = norms.bytes_moved(op, tokens, width, "bf16", pass_)
    elif op == "swiglu":
        ours, torch_fn = swiglu.swiglu, torch_swiglu

        def inputs():
            gate_up = torch.randn(tokens, 2 * width, device="cuda", dtype=bf16).requires_grad_(backward)
            return (gate_up,), (torch.randn(tokens, width, device="cuda", dtype=bf16) if backward else None)
        nbytes = swiglu.bytes_moved("swiglu", tokens, width, "bf16", pass_)
    else:
        def ours(logits, targets, config=None):
            return ce.cross_entropy(logits, targets, config=config, check_targets=False)  # torch checks none either

        def torch_fn(logits, targets):
            return F.cross_entropy(logits, targets)

        def inputs():
            logits = (2 * torch.randn(tokens, width, device="cuda", dtype=bf16)).requires_grad_(backward)
            return (logits, torch.randint(0, width, (tokens,), device="cuda")), None
        nbytes = ce.bytes_moved(tokens, width, "bf16", pass_)
    return ours, torch_fn, inputs, nbytes


def _callable(fn, leaves: tuple, dy, backward: bool, grad_inputs: int):
    """fn on these inputs, forward only, or forward + backward through autograd.grad (every gradient of the first
    ``grad_inputs`` inputs; nothing accumulates into .grad), returning the first input's gradient."""
    if not backward:
        return lambda: fn(*leaves)
    grads_of = leaves[:grad_inputs]

    def run():
        import torch

        out = fn(*leaves)
        return torch.autograd.grad(out, grads_of, dy)[0]
    return run


def run_row(op: str, pass_: str, tokens: int, width: int, compiled_fns: dict, gpu, copy_gb_s: float) -> dict:
    import torch

    from workbench.bench import predicted_ms

    row = {"op": op, "pass": pass_, "tokens": tokens, "width": width}
    ours, torch_fn, make_inputs, nbytes = make_case(op, pass_, tokens, width)
    row["bytes"] = nbytes
    if op not in compiled_fns:
        compiled_fns[op] = torch.compile(torch_fn)
    compiled = compiled_fns[op]
    torch.manual_seed(0)
    leaves, dy = make_inputs()
    # one compiled graph per width: the token count is dynamic (as across a training job's batches), widths static
    for t in leaves[:2] if op == "cross_entropy" else leaves[:1]:
        torch._dynamo.maybe_mark_dynamic(t, 0)
    backward = pass_ == "fwd_bwd"
    grad_inputs = 1 if op == "cross_entropy" else len(leaves)
    fns = [_callable(f, leaves, dy, backward, grad_inputs) for f in (ours, torch_fn, compiled)]
    row["rel_err"] = rel_err(fns[0]().float(), fns[1]().float())
    fns[2]()  # compile outside the timing
    row["ours_ms"], row["eager_ms"], row["compiled_ms"] = interleaved(fns)
    row["vs_eager"] = row["eager_ms"] / row["ours_ms"]
    row["vs_compiled"] = row["compiled_ms"] / row["ours_ms"]
    row["ours_gb_s"] = nbytes / row["ours_ms"] / 1e6
    row["copy_fraction"] = row["ours_gb_s"] / copy_gb_s
    suite_op = op if pass_ == "fwd" else f"{op}_fwd_bwd"
    row["predicted_eager_ms"] = predicted_ms({"op": suite_op, "rows": tokens, "cols": width, "dtype": "bf16"}, gpu,
                                             nbytes)
    row["eager_over_predicted"] = row["eager_ms"] / row["predicted_eager_ms"]
    return row


def tf32_row(m: int, n: int, k: int, config: dict | None = None) -> dict:
    import torch

    from workbench.kernels.dispatch import triton_matmul as matmul

    row = {"m": m, "n": n, "k": k}
    a = torch.randn(m, k, device="cuda")  # a: [M, K] row-major, b: [K, N] row-major, as torch.matmul's nn case
    b = torch.randn(k, n, device="cuda")
    ours = lambda: matmul(a, b, precision="tf32", config=config)  # noqa: E731

    def cublas():
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.matmul(a, b)
    row["rel_err"] = rel_err(ours(), cublas())
    row["ours_ms"], row["cublas_ms"] = interleaved([ours, cublas])
    row["vs_cublas"] = row["cublas_ms"] / row["ours_ms"]
    row["ours_tflops"] = 2 * m * n * k / row["ours_ms"] / 1e9
    row["cublas_tflops"] = 2 * m * n * k / row["cublas_ms"] / 1e9
    return row


def sweep_row(op: str, pass_: str, tokens: int, width: int, config: dict, default_ms: float | None) -> dict:
    """Our kernel alone with an explicit config (op "tf32": width is (n, k) of an (tokens, n, k) GEMM)."""
    import torch

    row = {"op": op, "pass": pass_, "tokens": tokens, "width": width, "config": json.dumps(config, sort_keys=True)}
    if op == "tf32":
        m, (n, k) = tokens, width
        ms = tf32_row(m, n, k, config)["ours_ms"]
        return {**row, "width": f"{n}x{k}", "ms": ms, **({"vs_default": default_ms / ms} if default_ms else {})}
    ours, _, make_inputs, _ = make_case(op, pass_, tokens, width)
    leaves, dy = make_inputs()
    fn = _callable(lambda *t: ours(*t, config=config), leaves, dy, pass_ == "fwd_bwd",
                   1 if op == "cross_entropy" else len(leaves))
    fn()
    (row["ms"],) = interleaved([fn], rounds=2)
    if default_ms:
        row["vs_default"] = default_ms / row["ms"]
    del leaves, dy
    torch.cuda.empty_cache()
    return row


# --------------------------------------------------------------------------------------------- the run
class _Table:
    """A CSV under DIR, one row appended (and flushed) at a time."""

    def __init__(self, path: Path, fields: tuple[str, ...]):
        self.path, self.fields = path, fields
        with path.open("w", newline="") as f:
            csv.DictWriter(f, fields).writeheader()

    def add(self, row: dict) -> None:
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.fields, extrasaction="ignore").writerow(
                {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def _guarded(make_row, base: dict, deadline: float, table: _Table, label: str) -> dict:
    import torch

    if time.monotonic() > deadline:
        row = {**base, "error": "skipped: budget"}
    else:
        start = time.monotonic()
        try:
            row = make_row()
        except Exception as exc:  # noqa: BLE001 - recorded in the row; the run goes on
            row = {**base, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc) else ''}"}
            traceback.print_exc(limit=2)
        finally:
            torch.cuda.empty_cache()
        print(f"[{time.monotonic() - start:5.1f}s] {label}: "
              + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                          if k not in base), flush=True)
    table.add(row)
    return row


def _sweep_configs(ops: tuple[str, ...] = OPS) -> list[tuple[str, str, int, object, list[dict]]]:
    """(op, pass, tokens, width, configs) of the selected ops: each default (first) and its neighbours."""
    from workbench.kernels import cross_entropy as ce
    from workbench.kernels import norms, swiglu
    from workbench.kernels.spaces import gemm_config_space

    tf32 = [c for c in gemm_config_space("cuda", dtype_bytes=4)
            if (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"])
            in ((128, 256, 32, 8, 4), (128, 256, 32, 8, 3), (256, 128, 32, 8, 4), (128, 128, 32, 8, 4),
                (128, 128, 64, 8, 3))]
    sweeps = [("tf32", "fwd", 8192, (4096, 4096), tf32), ("tf32", "fwd", 8192, (4096, 14336), tf32)]
    for op in ("rmsnorm", "layernorm"):
        base = norms.default_config(4096, "cuda")
        configs = [base] + [{**base, "num_stages": s} for s in (1, 2, 4)]
        configs += [{**base, "num_warps": base["num_warps"] * 2}, {**base, "num_warps": base["num_warps"] // 2},
                    {**base, "ROWS_PER_PROGRAM": 2, "num_warps": base["num_warps"] * 2}]
        sweeps.append((op, "fwd_bwd", 16384, 4096, configs))
    default = ce.config_space("cuda")[0]
    # the forward that only reads: columns per program (131072: a whole 128256 row, the kernel before the split),
    # block and warps, and the pipelined loop it had (num_stages 3)
    configs = [default] + [{**default, "SPLIT_V": v} for v in (16384, 65536, 131072)]
    configs += [{**default, "num_warps": 8}, {"BLOCK_V": 4096, "num_warps": 4}, {**default, "num_stages": 3}]
    sweeps.append(("cross_entropy", "fwd", 4096, 128256, configs))
    configs = [default, {**default, "SPLIT_V": 16384}, {**default, "num_warps": 8}, {"BLOCK_V": 4096, "num_warps": 4}]
    sweeps.append(("cross_entropy", "fwd", 16384, 32000, configs))
    configs = [default] + [{**default, "num_stages": 1}, {**default, "num_warps": 8},
                           {"BLOCK_V": 16384, "num_warps": 16}]
    sweeps.append(("cross_entropy", "fwd_bwd", 8192, 128256, configs))
    # SwiGLU on gate_up: inductor's flat kernel takes 1024 elements over 4 warps (8 a thread, one 16-byte load)
    default = swiglu.config_space("cuda")[0]
    configs = [default] + [{"BLOCK": b, "num_warps": w} for b, w in ((1024, 4), (2048, 4), (2048, 8), (4096, 4),
                                                                        (8192, 8))]
    sweeps.append(("swiglu", "fwd", 8192, 28672, configs))
    sweeps.append(("swiglu", "fwd", 4096, 14336, configs[:3]))
    sweeps.append(("swiglu", "fwd_bwd", 4096, 14336, configs[:3]))
    return [sweep for sweep in sweeps if sweep[0] in ops]


def run(out: Path, budget_s: float, ops: tuple[str, ...] = OPS) -> None:
    import torch
    import torch._dynamo
    import triton

    from workbench.hardware import get_gpu

    start = time.monotonic()
    deadline = start + budget_s
    out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.automatic_dynamic_shapes = False  # a new width compiles a static kernel, not a dynamic one
    for limit in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "sm_count": props.multi_processor_count, "python": platform.python_version(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
           "rounds": ROUNDS, "ops": list(ops)}
    env["copy_gb_s"] = copy_bandwidth_gb_s()
    print(f"copy bandwidth {env['copy_gb_s']:.0f} GB/s", flush=True)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    gpu = get_gpu("h200-sxm") if "H200" in env["gpu"] else None

    rows = _Table(out / "elementwise.csv", FIELDS)
    gemms = _Table(out / "tf32.csv", TF32_FIELDS)
    compiled: dict = {}

    def elementwise(op: str, shapes: list[tuple[int, int]]) -> None:
        for pass_ in ("fwd", "fwd_bwd"):
            for tokens, width in shapes:
                base = {"op": op, "pass": pass_, "tokens": tokens, "width": width}
                _guarded(lambda: run_row(op, pass_, tokens, width, compiled, gpu, env["copy_gb_s"]), base, deadline,
                         rows, f"{op} {pass_} {tokens}x{width}")

    # in the order of what is least known: the norms, the tf32 GEMM (cheap), SwiGLU, cross-entropy, the sweeps
    shapes = {"rmsnorm": NORM_SHAPES, "layernorm": NORM_SHAPES, "swiglu": SWIGLU_SHAPES, "cross_entropy": CE_SHAPES}
    for op in ops:
        if op == "tf32":
            for m, n, k in TF32_SHAPES:
                _guarded(lambda: tf32_row(m, n, k), {"m": m, "n": n, "k": k}, deadline, gemms, f"tf32 {m}x{n}x{k}")
        else:
            elementwise(op, shapes[op])

    sweeps = _Table(out / "sweeps.csv", SWEEP_FIELDS)
    for op, pass_, tokens, width, configs in _sweep_configs(ops):
        default_ms = None
        for i, config in enumerate(configs):
            base = {"op": op, "pass": pass_, "tokens": tokens, "width": width, "config": json.dumps(config)}
            row = _guarded(lambda: sweep_row(op, pass_, tokens, width, config, default_ms), base, deadline, sweeps,
                           f"sweep {op} {pass_} {config}")
            if i == 0 and isinstance(row.get("ms"), float):
                default_ms = row["ms"]
    env["wall_s"] = time.monotonic() - start
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    (out / "REPORT.md").write_text(report(out))
    print(f"done in {env['wall_s']:.0f} s; {out / 'REPORT.md'}", flush=True)


# ------------------------------------------------------------------------------------------------- report
def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(row: dict, key: str) -> float:
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return math.nan


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else "met" if ok else "MISSED"


def targets(rows: list[dict], gemms: list[dict]) -> list[tuple[str, str, str]]:
    """(target, measured, met/MISSED) per op and pass, and for the tf32 GEMM."""
    out = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["op"], row["pass"]), []).append(row)
    for (op, pass_), group in groups.items():
        done = [r for r in group if not r.get("error")]
        for key, name in (("vs_eager", "eager"), ("vs_compiled", "torch.compile")):
            values = [_num(r, key) for r in done]
            ok = (min(values) >= TARGETS["vs_torch"] and len(done) == len(group)) if values else None
            measured = (f"min {min(values):.2f}, geomean {_geomean(values):.2f} over {len(values)}/{len(group)} shapes"
                        if values else "no shape measured")
            out.append((f"{op} {pass_} >= {TARGETS['vs_torch']:.1f}x {name}", measured, _mark(ok)))
        large = [_num(r, "copy_fraction") for r in done if _num(r, "bytes") >= LARGE_BYTES]
        ok = min(large) >= TARGETS["copy_fraction"] if large else None
        out.append((f"{op} {pass_} >= {TARGETS['copy_fraction']} of copy bandwidth (rows >= {LARGE_BYTES / 1e9:g} GB)",
                    f"min {min(large):.2f} over {len(large)} rows" if large else "no large row", _mark(ok)))
    values = [_num(r, "vs_cublas") for r in gemms if not r.get("error")]
    ok = (min(values) >= TARGETS["tf32_vs_cublas"] and len(values) == len(gemms)) if values else None
    out.append((f"tf32 GEMM >= {TARGETS['tf32_vs_cublas']} of cuBLAS",
                f"min {min(values):.2f}, geomean {_geomean(values):.2f} over {len(values)}/{len(gemms)} shapes"
                if values else "no shape measured", _mark(ok)))
    return out


def _table(rows: list[dict], columns: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| " + " | ".join(title for title, _, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for _, key, fmt in columns:
            value = row.get(key, "")
            try:
                cells.append(format(float(value), fmt) if fmt and value not in ("", None) else str(value))
            except ValueError:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(out: Path) -> str:
    env = json.loads((out / "environment.json").read_text()) if (out / "environment.json").is_file() else {}
    rows, gemms, sweeps = _read(out / "elementwise.csv"), _read(out / "tf32.csv"), _read(out / "sweeps.csv")
    lines = ["# Memory-bound kernels and the tf32 GEMM against torch (issue 20)", "",
             f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, "
             f"{env.get('date_utc', '?')}; measured copy bandwidth {env.get('copy_gb_s', float('nan')):.0f} GB/s "
             f"(copy_ of 1 GiB bf16, read + write); {env.get('rounds', ROUNDS)} interleaved do_bench rounds per row, "
             f"median. Wall {env.get('wall_s', float('nan')):.0f} s.", "",
             f"Reproduce: `python3 benchmarks/kernels/elementwise.py --out DIR --budget-s 170` "
             f"(this run: `{env.get('command', '?')}`).", "", "## Targets", ""]
    lines += ["| target | measured | |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {ok} |" for t, m, ok in targets(rows, gemms)]
    lines += ["", "## Ours against torch eager and torch.compile", "",
              "bf16. vs_eager / vs_compiled: the torch time over ours (> 1: ours faster). bytes: what the op must "
              "move, each pass on its own (cross-entropy fwd+bwd: three passes over the logits, torch's too). "
              "copy: our GB/s over the measured copy bandwidth. predicted: the model's time for the eager op "
              "(`workbench.bench.predicted_ms`, a fused op's traffic).", ""]
    lines += _table(_mb(rows), [("op", "op", ""), ("pass", "pass", ""), ("tokens", "tokens", ""), ("width", "width", ""),
                           ("MB", "bytes", ""), ("ours ms", "ours_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
                           ("compiled ms", "compiled_ms", ".4f"), ("vs eager", "vs_eager", ".2f"),
                           ("vs compiled", "vs_compiled", ".2f"), ("GB/s", "ours_gb_s", ".0f"),
                           ("copy", "copy_fraction", ".2f"), ("predicted eager ms", "predicted_eager_ms", ".4f"),
                           ("eager / predicted", "eager_over_predicted", ".2f"), ("rel err vs eager", "rel_err", ".1e"),
                           ("error", "error", "")])
    lines += ["", "## tf32 GEMM against cuBLAS (allow_tf32)", "",
              "A [M, K] and B [K, N] row-major fp32 (torch.matmul's case); ours copies B column-major first "
              "(Hopper's wgmma reads tf32 only K-major), inside the timing.", ""]
    lines += _table(gemms, [("m", "m", ""), ("n", "n", ""), ("k", "k", ""), ("ours ms", "ours_ms", ".4f"),
                            ("cuBLAS ms", "cublas_ms", ".4f"), ("vs cuBLAS", "vs_cublas", ".2f"),
                            ("ours TFLOP/s", "ours_tflops", ".0f"), ("cuBLAS TFLOP/s", "cublas_tflops", ".0f"),
                            ("rel err", "rel_err", ".1e"), ("error", "error", "")])
    lines += ["", "## Config sweeps (ours alone; vs default: the first config's time over this one's)", ""]
    lines += _table(sweeps, [("op", "op", ""), ("pass", "pass", ""), ("tokens", "tokens", ""), ("width", "width", ""),
                             ("config", "config", ""), ("ms", "ms", ".4f"), ("vs default", "vs_default", ".2f"),
                             ("error", "error", "")])
    lines += ["", "Fastest config of each sweep (vs default > 1: faster than the default, the first row):", ""]
    lines += _table(sweep_picks(sweeps), [("op", "op", ""), ("pass", "pass", ""), ("tokens", "tokens", ""),
                                          ("width", "width", ""), ("fastest config", "config", ""),
                                          ("ms", "ms", ".4f"), ("vs default", "vs_default", ".2f")])
    return "\n".join(lines) + "\n"


def sweep_picks(sweeps: list[dict]) -> list[dict]:
    """The fastest measured row of each (op, pass, tokens, width) sweep, in the sweeps' order."""
    best: dict[tuple, dict] = {}
    for row in sweeps:
        if row.get("error") or not math.isfinite(_num(row, "ms")):
            continue
        key = (row["op"], row["pass"], row["tokens"], row["width"])
        if key not in best or _num(row, "ms") < _num(best[key], "ms"):
            best[key] = row
    return list(best.values())


def _mb(rows: list[dict]) -> list[dict]:
    return [{**r, "bytes": f"{_num(r, 'bytes') / 1e6:.0f}" if r.get("bytes") else ""} for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the CSVs, environment.json and REPORT.md")
    parser.add_argument("--budget-s", type=float, default=170.0, help="wall-clock cap: later rows are skipped")
    parser.add_argument("--report", type=Path, help="write DIR/REPORT.md again from DIR's CSVs (no GPU)")
    parser.add_argument("--ops", default=",".join(OPS),
                        help=f"comma-separated ops to run, among {', '.join(OPS)} (default: all)")
    args = parser.parse_args()
    ops = tuple(op.strip() for op in args.ops.split(",") if op.strip())
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        parser.error(f"--ops: got {args.ops!r}, expected a comma-separated list among {', '.join(OPS)}")
    sys.path.insert(0, str(ROOT))
    if args.report:
        (args.report / "REPORT.md").write_text(report(args.report))
        print((args.report / "REPORT.md").read_text())
        return
    if not args.out:
        parser.error("--out DIR is required (or --report DIR)")
    run(args.out, args.budget_s, tuple(op for op in OPS if op in ops))


if __name__ == "__main__":
    main()
