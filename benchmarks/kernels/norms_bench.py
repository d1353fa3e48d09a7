"""RMSNorm and LayerNorm, forward and forward + backward, against torch eager and torch.compile, old launch path
and kernels next to the new ones, with host time per call and device time apart (issue 20).

    python3 benchmarks/kernels/norms_bench.py --out DIR --budget-s 150     # on a GPU
    python3 benchmarks/kernels/norms_bench.py --report DIR                 # REPORT.md again from DIR's CSVs
    python3 benchmarks/kernels/norms_bench.py --cpu-host --out DIR [--tree PATH]   # host cost, no GPU

Per norm, pass and shape (``elementwise.NORM_SHAPES``: tokens 4k-64k x hidden 2k-8k, bf16):
- end to end ms (``do_bench`` median, L2 flushed, ``ROUNDS`` interleaved rounds) of ours "new" (the defaults:
  direct launches through the compiled kernels, the backward at twice the forward's warps), ours "old" (config
  ``launch="jit"`` and ``bwd_num_warps`` = the forward's: the previous kernels' launch path and warps), F.rms_norm /
  F.layer_norm eager and the same under ``torch.compile`` (token count dynamic, widths static);
- device ms: the same fwd(+bwd) captured once in a CUDA graph and replayed (no host time), ours and eager;
- host us per call: ``HOST_CALLS`` calls issued back to back, CPU wall time of the loop without its final
  synchronize (CUDA graphs off);
- GB/s over the measured copy bandwidth (``copy_`` of 1 GiB bf16), end to end and on the device.
Then, at one small shape (host-bound), the host cost split (``host_cases``): a no-op autograd.Function with ours'
inputs and outputs + autograd.grad (the floor any Python autograd op pays), the same Function making ours' recorded
launches (floor + launches: ours minus it is ours' own bookkeeping), ours new and old, the launches replayed bare
through ``kernel[grid]`` (JIT) and through the compiled launchers, eager and compiled torch. Last, budget
permitting, a sweep of the backward's warps.

``--cpu-host`` (no GPU): the same split on CPU tensors with the kernels stubbed in a simulated H200
(``cpu_host``), thread CPU time; ``--tree`` imports workbench from another checkout for before/after figures.

Writes DIR/norms.csv, DIR/norms_host.csv, DIR/norms_sweep.csv (rows appended as they finish), DIR/environment.json,
DIR/REPORT.md. A failing row records its error and the run goes on; ``--budget-s`` skips what would start after it.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import elementwise  # noqa: E402  (benchmarks/kernels/elementwise.py: timing, copy bandwidth, CSV tables, shapes)

ROUNDS = 2
"""Interleaved do_bench rounds per row (each variant in turn)."""
HOST_CALLS = 20
"""Calls per host-time loop: few enough that the GPU queue never fills (3 launches each)."""
HOST_SHAPE = (1024, 4096)
"""The host-cost split's shape: small enough that every variant is host-bound on an H200."""
CPU_HOST_SHAPE = (8, 4096)
"""--cpu-host's shape: HOST_SHAPE's width, few enough rows that each CPU allocation (64 KB) stays on the heap;
at HOST_SHAPE's 8 MB glibc maps and unmaps pages per call, a system-call cost that a GPU's caching allocator
does not have (host cost does not depend on the row count otherwise)."""
LARGE_BYTES = elementwise.LARGE_BYTES
TARGETS = {"vs_torch": 1.0, "copy_fraction": 0.85}
"""Issue 20: >= 1.0x the torch op (eager and compiled), >= 0.85 of copy bandwidth at large sizes."""
VARIANTS = ("new", "old", "eager", "compiled")
FIELDS = ("op", "pass", "tokens", "width", "bytes", *(f"{v}_ms" for v in VARIANTS), "new_vs_eager", "new_vs_compiled",
          "old_vs_eager", "old_vs_compiled", "new_over_old", "new_device_ms", "old_device_ms", "eager_device_ms",
          *(f"{v}_host_us" for v in VARIANTS), "new_gb_s", "copy_fraction", "device_copy_fraction", "rel_err",
          "error")
HOST_FIELDS = ("op", "pass", "case", "host_us", "launches", "error")
SWEEP_FIELDS = ("op", "tokens", "width", "bwd_num_warps", "ms", "device_ms", "error")


def old_config(width: int) -> dict:
    """The previous defaults: every launch through the JIT, the backward at the forward's warps."""
    from workbench.kernels import norms

    config = norms.default_config(width, "cuda")
    return {**config, "launch": "jit", "bwd_num_warps": config["num_warps"]}


def make_fns(op: str, pass_: str, tokens: int, width: int, compiled_fns: dict) -> tuple[dict, tuple]:
    """variant -> zero-argument callable for one row, and its leaves (x, weight[, bias]) and dy."""
    import torch
    import torch._dynamo

    ours, torch_fn, make_inputs, _ = elementwise.make_case(op, pass_, tokens, width)
    if op not in compiled_fns:
        compiled_fns[op] = torch.compile(torch_fn)
    torch.manual_seed(0)
    leaves, dy = make_inputs()
    torch._dynamo.maybe_mark_dynamic(leaves[0], 0)
    backward = pass_ == "fwd_bwd"
    old = old_config(width)
    fns = {"new": ours, "old": lambda *t: ours(*t, config=old), "eager": torch_fn, "compiled": compiled_fns[op]}
    calls = {name: elementwise._callable(fn, leaves, dy, backward, len(leaves)) for name, fn in fns.items()}
    return calls, (leaves, dy)


def host_us(fn, calls: int = HOST_CALLS, rounds: int = 3) -> float:
    """CPU wall time per call of ``calls`` back-to-back calls, without the loop's final synchronize; median."""
    import torch

    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def device_ms(fn) -> float:
    """fn captured once in a CUDA graph (after two warm-up calls on a side stream), replay timed by do_bench."""
    import torch
    from triton.testing import do_bench

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    ms = float(do_bench(graph.replay, warmup=5, rep=30, return_mode="median"))
    del graph
    return ms


def run_row(op: str, pass_: str, tokens: int, width: int, compiled_fns: dict, copy_gb_s: float) -> dict:
    import torch

    from workbench.kernels import norms

    row = {"op": op, "pass": pass_, "tokens": tokens, "width": width}
    row["bytes"] = nbytes = norms.bytes_moved(op, tokens, width, "bf16", pass_)
    fns, _ = make_fns(op, pass_, tokens, width, compiled_fns)
    row["rel_err"] = elementwise.rel_err(fns["new"]().float(), fns["eager"]().float())
    for fn in fns.values():
        fn()  # compile, plan, warm
    times = elementwise.interleaved(list(fns.values()), rounds=ROUNDS)
    row.update({f"{name}_ms": ms for name, ms in zip(fns, times)})
    for ours in ("new", "old"):
        for torch_side in ("eager", "compiled"):
            row[f"{ours}_vs_{torch_side}"] = row[f"{torch_side}_ms"] / row[f"{ours}_ms"]
    row["new_over_old"] = row["old_ms"] / row["new_ms"]
    for name in VARIANTS:
        row[f"{name}_host_us"] = host_us(fns[name])
    errors = []
    for name in ("new", "old", "eager"):
        try:
            row[f"{name}_device_ms"] = device_ms(fns[name])
        except Exception as exc:  # noqa: BLE001 - recorded; the end-to-end figures stand
            errors.append(f"{name} graph: {type(exc).__name__}: {str(exc).strip()[:80]}")
    if errors:
        row["error"] = "; ".join(errors)
    row["new_gb_s"] = nbytes / row["new_ms"] / 1e6
    row["copy_fraction"] = row["new_gb_s"] / copy_gb_s
    if row.get("new_device_ms"):
        row["device_copy_fraction"] = nbytes / row["new_device_ms"] / 1e6 / copy_gb_s
    torch.cuda.empty_cache()
    return row


def recorded_launches(call) -> list:
    """(launch, (aligned, *tensors)) of every ``KernelLaunch`` one call of ``call`` makes, in order (after two
    calls: planned, compiled, launchers kept)."""
    from workbench.kernels._launch import KernelLaunch

    call()
    call()
    recorded: list = []
    real_call = KernelLaunch.__call__

    def recording(self, *args):
        recorded.append((self, args))
        return real_call(self, *args)

    KernelLaunch.__call__ = recording
    try:
        call()
    finally:
        KernelLaunch.__call__ = real_call
    return recorded


def host_cases(op: str, pass_: str, leaves: tuple, dy, ours, gpu: bool) -> tuple[dict, int]:
    """case -> zero-argument callable for the host-cost split of one norm and pass, and the launches one call of
    ours makes. The floor is a no-op autograd.Function with ours' inputs and outputs (it saves x and the weights,
    allocates y in its forward and every input's gradient in its backward) and nothing else; "floor + launches"
    is the same Function making ours' recorded launches (the forward's in its forward, the backward's two in its
    backward): what any Python autograd op with these launches pays, so ours minus it is ours' own bookkeeping
    and its two further allocations (statistics, partial sums). On a GPU also the launches bare, through the JIT
    and through the compiled launchers."""
    import torch

    from workbench.kernels._launch import KernelLaunch

    backward = pass_ == "fwd_bwd"
    call = elementwise._callable(ours, leaves, dy, backward, len(leaves))
    recorded = recorded_launches(call)
    real_call = KernelLaunch.__call__
    forward_launches, backward_launches = recorded[:1], recorded[1:]

    def replay(launches):
        for launch, args in launches:
            real_call(launch, *args)

    def make_floor(forward_work, backward_work):
        class Floor(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, *params):
                ctx.save_for_backward(x, *params)
                forward_work()
                return torch.empty_like(x)

            @staticmethod
            def backward(ctx, grad):
                saved = ctx.saved_tensors
                backward_work()
                return tuple(torch.empty_like(t) for t in saved)

        return elementwise._callable(Floor.apply, leaves, dy, backward, len(leaves))

    def nothing():
        return None

    floor = "floor: no-op autograd.Function" + (" + autograd.grad" if backward else " apply")
    cases = {floor: make_floor(nothing, nothing),
             "floor + launches (ours' replayed in it)": make_floor(lambda: replay(forward_launches),
                                                                   lambda: replay(backward_launches)),
             "ours new": call}
    if gpu:
        def bare_jit():
            for launch, (_, *tensors) in recorded:
                launch.kernel[launch.grid](*tensors, *launch.scalars, **launch.kwargs)

        cases.update({"bare launches, JIT": bare_jit, "bare launches, direct": lambda: replay(recorded)})
    return cases, len(recorded)


def host_rows(op: str, pass_: str) -> list[dict]:
    """The host-cost split at HOST_SHAPE on the GPU: floor, floor + launches, ours new/old, bare launches (JIT,
    direct), eager, compiled (wall time per call, calls back to back)."""
    tokens, width = HOST_SHAPE
    fns, (leaves, dy) = make_fns(op, pass_, tokens, width, {})
    ours, _, _, _ = elementwise.make_case(op, pass_, tokens, width)
    cases, launches = host_cases(op, pass_, leaves, dy, ours, gpu=True)
    cases.update({"ours old": fns["old"], "eager": fns["eager"], "compiled": fns["compiled"]})
    rows = []
    for case, fn in cases.items():
        row = {"op": op, "pass": pass_, "case": case,
               "launches": launches if "launch" in case or "ours" in case else ""}
        try:
            fn()
            row["host_us"] = host_us(fn, calls=50, rounds=5)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:120]}"
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------- --cpu-host
def cpu_host(out: Path, rounds: int, calls: int) -> None:
    """The host-cost split without a GPU: ours' wrapper on CPU tensors with its three kernels stubbed (no-op
    launchers, taken through ``KernelLaunch``'s direct path) in a simulated H200 (``host_overhead._fake_h200``),
    against the floor and floor + launches of ``host_cases``. Thread CPU time per call, least of ``rounds``
    rounds of ``calls`` calls (the machine is shared: wall-clock medians there move by 2x); autograd runs a CPU
    backward on the calling thread, so the backward is in the figure (on a GPU it runs on autograd's device
    thread, whose hop the GPU run's floor has and this one does not). Writes DIR/norms_host_cpu.csv,
    DIR/environment.json and DIR/REPORT.md."""
    import os

    os.environ["TRITON_INTERPRET"] = "0"  # the GPU code path, kernels stubbed below
    import host_overhead  # benchmarks/kernels/host_overhead.py: the stubs and the simulated H200
    import torch

    from workbench.kernels import _common, _launch, norms

    host_overhead._fake_h200({"_common": _common, "_launch": _launch, "norms": norms})
    for name in ("_norm_fwd_kernel", "_norm_bwd_kernel", "_partial_sum_kernel"):
        setattr(norms, name, host_overhead._Launches(getattr(norms, name), [], stub=True))
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    tokens, width = CPU_HOST_SHAPE
    env = {"mode": "cpu host (stubbed launches, simulated H200)", "torch": torch.__version__,
           "python": platform.python_version(), "cpu_count": os.cpu_count(),
           "workbench": str(Path(norms.__file__).resolve().parents[2]), "shape": f"{tokens}x{width} bf16",
           "rounds": rounds, "calls": calls, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": " ".join(sys.argv)}
    table = elementwise._Table(out / "norms_host_cpu.csv", HOST_FIELDS)
    for op in ("rmsnorm", "layernorm"):
        for pass_ in ("fwd", "fwd_bwd"):
            torch.manual_seed(0)
            backward = pass_ == "fwd_bwd"
            x = torch.randn(tokens, width, dtype=torch.bfloat16)
            params = [1 + 0.1 * torch.randn(width, dtype=torch.bfloat16) for _ in range(2 if op == "layernorm" else 1)]
            leaves = tuple(t.requires_grad_(backward) for t in (x, *params))
            dy = torch.randn_like(x) if backward else None
            ours = norms.layer_norm if op == "layernorm" else norms.rms_norm
            cases, launches = host_cases(op, pass_, leaves, dy, ours, gpu=False)
            for case, fn in cases.items():
                row = {"op": op, "pass": pass_, "case": case, "launches": launches if "launch" in case
                       or "ours" in case else ""}
                try:
                    row["host_us"] = cpu_us(fn, calls, rounds)
                except Exception as exc:  # noqa: BLE001 - recorded; the other cases go on
                    row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:120]}"
                print(f"{op} {pass_} {case}: {row.get('host_us', row.get('error'))}", flush=True)
                table.add(row)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    (out / "REPORT.md").write_text(cpu_report(out))
    print(f"done; {out / 'REPORT.md'}", flush=True)


def cpu_us(fn, calls: int, rounds: int) -> float:
    """Thread CPU time per call of ``calls`` back-to-back calls, least of ``rounds`` rounds."""
    fn()
    best = math.inf
    for _ in range(rounds):
        start = time.thread_time_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time_ns() - start) / calls / 1e3)
    return best


def cpu_report(out: Path) -> str:
    env = json.loads((out / "environment.json").read_text())
    hosts = _read(out / "norms_host_cpu.csv")
    lines = ["# RMSNorm / LayerNorm host cost per call on the CPU (stubbed launches, simulated H200)", "",
             f"`{env['command']}` ({env['date_utc']}, workbench {env['workbench']}, torch {env['torch']}, "
             f"{env['cpu_count']} CPUs); {env['shape']}; thread CPU time, least of {env['rounds']} rounds of "
             f"{env['calls']} calls. The launches are no-op stubs (Triton's launcher and the CUDA driver are not in "
             "these figures, nor autograd's hop to its device thread: the GPU run's host table has them).", "",
             "floor: a no-op autograd.Function with ours' inputs and outputs; floor + launches: the same making "
             "ours' launches; ours minus floor + launches is ours' own bookkeeping and its two further "
             "allocations.", ""]
    lines += _table(hosts, [("op", "op", ""), ("pass", "pass", ""), ("case", "case", ""),
                            ("host us", "host_us", ".1f"), ("launches", "launches", ""), ("error", "error", "")])
    return "\n".join(lines) + "\n"


def sweep_row(op: str, tokens: int, width: int, warps: int) -> dict:
    from workbench.kernels import norms

    row = {"op": op, "tokens": tokens, "width": width, "bwd_num_warps": warps}
    ours, _, make_inputs, _ = elementwise.make_case(op, "fwd_bwd", tokens, width)
    leaves, dy = make_inputs()
    config = {**norms.default_config(width, "cuda"), "bwd_num_warps": warps}
    fn = elementwise._callable(lambda *t: ours(*t, config=config), leaves, dy, True, len(leaves))
    fn()
    (row["ms"],) = elementwise.interleaved([fn], rounds=1)
    row["device_ms"] = device_ms(fn)
    return row


def _guarded(make_row, base: dict, deadline: float, table, label: str) -> list[dict]:
    """make_row() (a row or a list of rows) into table; an exception or the budget becomes the row's error."""
    import torch

    if time.monotonic() > deadline:
        rows = [{**base, "error": "skipped: budget"}]
    else:
        start = time.monotonic()
        try:
            made = make_row()
            rows = made if isinstance(made, list) else [made]
        except Exception as exc:  # noqa: BLE001 - recorded in the row; the run goes on
            rows = [{**base, "error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"}]
            traceback.print_exc(limit=3)
        finally:
            torch.cuda.empty_cache()
        for row in rows:
            print(f"[{time.monotonic() - start:5.1f}s] {label}: " + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k not in base),
                flush=True)
    for row in rows:
        table.add(row)
    return rows


def run(out: Path, budget_s: float) -> None:
    import torch
    import torch._dynamo
    import triton

    start = time.monotonic()
    deadline = start + budget_s
    out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.automatic_dynamic_shapes = False
    for limit in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "cpu": platform.processor(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
           "rounds": ROUNDS, "host_calls": HOST_CALLS}
    env["copy_gb_s"] = elementwise.copy_bandwidth_gb_s()
    print(f"copy bandwidth {env['copy_gb_s']:.0f} GB/s", flush=True)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")

    hosts = elementwise._Table(out / "norms_host.csv", HOST_FIELDS)
    for op in ("rmsnorm", "layernorm"):  # first: cheap, and what decides the small shapes
        for pass_ in ("fwd", "fwd_bwd"):
            _guarded(lambda: host_rows(op, pass_), {"op": op, "pass": pass_}, deadline, hosts, f"host {op} {pass_}")
    rows = elementwise._Table(out / "norms.csv", FIELDS)
    compiled: dict = {}
    for op in ("rmsnorm", "layernorm"):
        for pass_ in ("fwd_bwd", "fwd"):
            for tokens, width in elementwise.NORM_SHAPES:
                base = {"op": op, "pass": pass_, "tokens": tokens, "width": width}
                _guarded(lambda: run_row(op, pass_, tokens, width, compiled, env["copy_gb_s"]), base, deadline, rows,
                         f"{op} {pass_} {tokens}x{width}")
    sweeps = elementwise._Table(out / "norms_sweep.csv", SWEEP_FIELDS)
    from workbench.kernels import norms

    for op in ("rmsnorm", "layernorm"):
        for tokens, width in ((16384, 4096), (8192, 8192), (65536, 2048)):
            warps = norms.default_config(width, "cuda")["num_warps"]
            for bwd_warps in sorted({max(1, warps // 2), warps, min(32, 2 * warps), min(32, 4 * warps)}):
                base = {"op": op, "tokens": tokens, "width": width, "bwd_num_warps": bwd_warps}
                _guarded(lambda: sweep_row(op, tokens, width, bwd_warps), base, deadline, sweeps,
                         f"sweep {op} {tokens}x{width} bwd_num_warps={bwd_warps}")
    env["wall_s"] = round(time.monotonic() - start, 1)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    (out / "REPORT.md").write_text(report(out))
    print(f"done in {env['wall_s']:.0f} s; {out / 'REPORT.md'}", flush=True)


# ------------------------------------------------------------------------------------------------- report
def _read(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open())) if path.exists() else []


def _num(row: dict, key: str) -> float:
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return math.nan


def _summary(values: list[float]) -> tuple[str, tuple[float, float] | None]:
    values = [v for v in values if v == v]
    if not values:
        return "no shape measured", None
    geo = math.exp(sum(math.log(v) for v in values) / len(values))
    return f"min {min(values):.2f}, geomean {geo:.2f} over {len(values)} shapes", (min(values), geo)


def _fmt(row: dict, key: str, spec: str) -> str:
    value = _num(row, key)
    if spec and value == value:
        return format(value, spec)
    return "" if spec else str(row.get(key) or "")


def _table(rows: list[dict], columns: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r, key, spec) for _, key, spec in columns) + " |" for r in rows]
    return lines


def report(out: Path) -> str:
    env = json.loads((out / "environment.json").read_text()) if (out / "environment.json").exists() else {}
    rows, hosts, sweeps = _read(out / "norms.csv"), _read(out / "norms_host.csv"), _read(out / "norms_sweep.csv")
    lines = ["# RMSNorm and LayerNorm against torch, old and new launch paths (issue 20)", "",
             f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, "
             f"{env.get('date_utc', '?')}; copy bandwidth {_num(env, 'copy_gb_s'):.0f} GB/s (copy_ of 1 GiB bf16, "
             f"read + write); {env.get('rounds', ROUNDS)} interleaved do_bench rounds per row, median. "
             f"Wall {env.get('wall_s', '?')} s.", "",
             "Reproduce: `python3 benchmarks/kernels/norms_bench.py --out DIR --budget-s 150` "
             f"(this run: `{env.get('command', '?')}`).", "",
             "new: the defaults (direct launches through the compiled kernels; backward at twice the forward's "
             "warps). old: `config={..., 'launch': 'jit', 'bwd_num_warps': <forward's warps>}`, the previous "
             "launch path and warps. Ratios: torch time over ours (> 1: ours faster).", "", "## Targets", "",
             "| target | new | old | |", "|---|---|---|---|"]
    for op in ("rmsnorm", "layernorm"):
        for pass_ in ("fwd", "fwd_bwd"):
            sel = [r for r in rows if r["op"] == op and r["pass"] == pass_]
            for side in ("eager", "compiled"):
                text, stats = _summary([_num(r, f"new_vs_{side}") for r in sel])
                old_text, _ = _summary([_num(r, f"old_vs_{side}") for r in sel])
                met = "n/a" if stats is None else "met" if stats[1] >= TARGETS["vs_torch"] else "MISSED"
                lines.append(f"| {op} {pass_} >= 1.0x {side} (geomean) | {text} | {old_text} | {met} |")
            for key, how in (("copy_fraction", "end to end"), ("device_copy_fraction", "device time")):
                large = [_num(r, key) for r in sel if _num(r, "bytes") >= LARGE_BYTES]
                large = [v for v in large if v == v]
                met = "n/a" if not large else "met" if min(large) >= TARGETS["copy_fraction"] else "MISSED"
                measured = f"min {min(large):.2f} over {len(large)} rows" if large else "no large row"
                lines.append(f"| {op} {pass_} >= 0.85 of copy bandwidth (rows >= 1 GB, {how}) | {measured} | | "
                             f"{met} |")
    lines += ["", "## End to end, device and host time per shape", "",
              "ms: do_bench end to end (host time shows where it exceeds the GPU's); device ms: the call replayed "
              "from a CUDA graph; host us: CPU wall time per call, calls back to back, no synchronize; copy: "
              "GB/s over copy bandwidth (end to end; device).", ""]
    lines += _table(rows, [("op", "op", ""), ("pass", "pass", ""), ("tokens", "tokens", ""), ("width", "width", ""),
                           ("new ms", "new_ms", ".4f"), ("old ms", "old_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
                           ("compiled ms", "compiled_ms", ".4f"), ("new/eager", "new_vs_eager", ".2f"),
                           ("new/compiled", "new_vs_compiled", ".2f"), ("old/eager", "old_vs_eager", ".2f"),
                           ("new dev ms", "new_device_ms", ".4f"), ("old dev ms", "old_device_ms", ".4f"),
                           ("eager dev ms", "eager_device_ms", ".4f"), ("new host us", "new_host_us", ".0f"),
                           ("old host us", "old_host_us", ".0f"), ("eager host us", "eager_host_us", ".0f"),
                           ("compiled host us", "compiled_host_us", ".0f"), ("copy", "copy_fraction", ".2f"),
                           ("dev copy", "device_copy_fraction", ".2f"), ("rel err", "rel_err", ".1e"),
                           ("error", "error", "")])
    lines += ["", f"## Host cost per call at {HOST_SHAPE[0]}x{HOST_SHAPE[1]} (host-bound)", "",
              "floor: a no-op autograd.Function (+ autograd.grad for fwd_bwd) with ours' inputs and outputs (it "
              "allocates y and every input's gradient), what any Python autograd op pays; floor + launches: the same "
              "Function making ours' recorded launches (ours minus it: ours' own bookkeeping and its two further "
              "allocations); bare launches: the launches one call of ours makes, replayed through "
              "`kernel[grid](...)` (JIT) or the compiled launchers (direct).", ""]
    lines += _table(hosts, [("op", "op", ""), ("pass", "pass", ""), ("case", "case", ""),
                            ("host us", "host_us", ".1f"), ("launches", "launches", ""), ("error", "error", "")])
    lines += ["", "## Backward warps (ours fwd+bwd, defaults otherwise)", ""]
    lines += _table(sweeps, [("op", "op", ""), ("tokens", "tokens", ""), ("width", "width", ""),
                             ("bwd_num_warps", "bwd_num_warps", ""), ("ms", "ms", ".4f"),
                             ("device ms", "device_ms", ".4f"), ("error", "error", "")])
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the CSVs, environment.json and REPORT.md")
    parser.add_argument("--budget-s", type=float, default=150.0, help="wall-clock cap: later rows are skipped")
    parser.add_argument("--report", type=Path, help="write DIR/REPORT.md again from DIR's CSVs (no GPU)")
    parser.add_argument("--cpu-host", action="store_true", help="the host-cost split on CPU, launches stubbed")
    parser.add_argument("--tree", type=Path, help="--cpu-host: import workbench from this checkout (before/after)")
    parser.add_argument("--rounds", type=int, default=15, help="--cpu-host: rounds per case (the least is kept)")
    parser.add_argument("--calls", type=int, default=500, help="--cpu-host: calls per round")
    args = parser.parse_args()
    if args.cpu_host:
        if not args.out:
            parser.error("--cpu-host needs --out DIR")
        if args.tree:
            sys.path.insert(0, str(args.tree.resolve()))
        cpu_host(args.out, args.rounds, args.calls)
        return
    if args.report:
        (args.report / "REPORT.md").write_text(report(args.report))
        print((args.report / "REPORT.md").read_text())
        return
    if not args.out:
        parser.error("--out DIR is required (or --report DIR)")
    run(args.out, args.budget_s)


if __name__ == "__main__":
    main()
