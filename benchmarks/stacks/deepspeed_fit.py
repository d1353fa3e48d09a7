"""The deepspeed-zero2 / deepspeed-zero3 stacks' host constants and reserved/allocated ratio, fitted on the fit rows
of ``benchmarks/stacks/deepspeed_split.json`` only (written before any row ran); the test and holdout rows are
never read here (``benchmarks/stacks/evaluate.py`` reports them).

    python benchmarks/stacks/deepspeed_fit.py

1. ``host_step_kernel_us`` (CPU per kernel of ZeRO's step loops) from the Kineto trace of the fit row
   ``deepspeed-zero2 1b mb1 s2048 ac=none``: its overflow check is host-only work (thousands of 0-dim kernels, the
   GPU idle between them). The profiler's own cost per device event is what the profiled step took beyond the
   timed one: the step is [forward .. overflow check] (host-bound) + [fp64 norms] + [update] (GPU-bound, as
   profiled), so cost = (span of the first part - (timed step - norm busy - update span)) / its events.
2. ``host_eager_kernel_us`` by grid search: squared relative error of max(measured kernel time, host) against the
   measured step over the ZeRO-2 fit rows (measured kernel time: the row's torch.profiler pass, as
   ``kernel_classes.py`` fits the plain loop). ``host_recompute_kernel_us`` and ``host_grad_hook_us`` stay at their
   guesses: the checkpointed fit row is GPU-bound, and the one host-bound ZeRO-2 fit row cannot separate a cost per
   kernel from a cost per parameter tensor.
3. ``host_zero3_module_us`` the same way on the one ZeRO-3 fit row, with ZeRO-2's per-kernel constants.
4. ``reserved_over_allocated``: per stack the median measured reserved / allocated over its fit rows (the rule
   ``kernel_classes.py`` uses for the plain loop).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stack_kernels_hf import HOST_US, deepspeed_step
from workbench.stack_memory import step_time_s
from workbench.stacks import get_stack
from workbench.trace import busy_us, load_trace
from workbench.validation import benchmark_model

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ROOT / "benchmarks" / "stacks" / "deepspeed_split.json"
RESULTS = ROOT / "benchmarks" / "results" / "h200" / "stacks" / "deepspeed"
TRACE = RESULTS / "traces" / "deepspeed-zero2-1b-mb1-s2048-acnone.json.gz"
TRACE_ROW = "deepspeed-zero2 1b mb1 s2048 ac=none"


def fit_rows() -> list[dict]:
    """The measured rows the split marks ``fit`` (nothing else is returned)."""
    fit = set(json.loads(SPLIT.read_text())["fit"])
    rows = [json.loads(line) for line in (RESULTS / "deepspeed.jsonl").read_text().splitlines()]
    return [r for r in rows if r["label"] in fit and "step_time_s" in r]


def host_terms(r: dict) -> dict[str, float]:
    """What each host constant multiplies in the row's step (``DeepSpeedStep.host_terms``)."""
    cfg = TrainingConfig(r["micro_batch"], r["seq_len"], "bf16", Parallelism(dp=1), r["ac"])
    return deepspeed_step(benchmark_model(r["model"]), cfg, get_stack(r["stack"])).host_terms(1)


def host_s(terms: dict[str, float], constants: dict[str, float]) -> float:
    return 1e-6 * sum(n * constants[name] for name, n in terms.items())


def step_kernel_us(timed_step_s: float, step_table_kernels: float) -> dict[str, float]:
    """``host_step_kernel_us`` from the trace (see the module docstring, 1)."""
    trace = load_trace(TRACE, steps=1)
    kernels = sorted(trace.kernels, key=lambda e: e.start_us)
    first = next(i for i, e in enumerate(kernels) if "MaxNanFunctor" in e.name)       # the overflow check
    norm = next(i for i, e in enumerate(kernels) if "NormTwoOps<double" in e.name) - 1  # its .to(float64) first
    update = next(i for i, e in enumerate(kernels) if "CatArrayBatchedCopy_vectorized" in e.name and i > norm)
    end = lambda part: part[-1].start_us + part[-1].duration_us  # noqa: E731
    before, checks, norms, step = kernels[:norm], kernels[first:norm], kernels[norm:update], kernels[update:]
    update_span = end(step) - step[0].start_us
    unprofiled_before = timed_step_s * 1e6 - busy_us(norms) - update_span
    profiler_us = (end(before) - kernels[0].start_us - unprofiled_before) / len(before)
    checks_host = end(checks) - checks[0].start_us - profiler_us * len(checks)
    return {"profiler_us_per_event": profiler_us, "overflow_events": len(checks), "overflow_host_ms": checks_host / 1e3,
            "host_step_kernel_us": checks_host / step_table_kernels}


def grid(fit: list[tuple[float, dict, float]], fixed: dict[str, float], name: str, values) -> dict[str, float]:
    """``fixed`` with the value of ``name`` minimizing the squared relative error of max(measured kernel time, host)
    on ``fit`` ((kernel seconds, host terms, measured step seconds) per row)."""
    best = (float("inf"), {})
    for value in values:
        c = {**fixed, name: value}
        err = sum((step_time_s(device, host_s(terms, c)) / step - 1) ** 2 for device, terms, step in fit)
        if err < best[0]:
            best = (err, c)
    return best[1]


def main() -> None:
    rows = fit_rows()
    traced = next(r for r in rows if r["label"] == TRACE_ROW)
    measured = [(sum(k["us"] for k in r["kernels"]) * 1e-6, host_terms(r), r["step_time_s"]) for r in rows]
    cut = deepspeed_step(benchmark_model(traced["model"]), TrainingConfig(
        traced["micro_batch"], traced["seq_len"], "bf16", Parallelism(dp=1), traced["ac"]), get_stack(traced["stack"]))
    overflow = sum(op.count for op in cut.step_ops if op.name.startswith("zero.overflow"))
    trace_fit = step_kernel_us(traced["step_time_s"], overflow)
    print("trace:", {k: round(v, 2) for k, v in trace_fit.items()})
    base = {**HOST_US, "host_step_kernel_us": round(trace_fit["host_step_kernel_us"], 1)}
    zero2 = [m for m, r in zip(measured, rows) if r["stack"] == "deepspeed-zero2"]
    zero3 = [m for m, r in zip(measured, rows) if r["stack"] == "deepspeed-zero3"]
    c2 = grid(zero2, base, "host_eager_kernel_us", [x * 0.5 for x in range(1, 161)])
    c3 = grid(zero3, c2, "host_zero3_module_us", [x * 5.0 for x in range(1, 401)])
    print("zero2:", c2)
    print("zero3:", c3)
    for (device, terms, step), r in zip(measured, rows):
        h = host_s(terms, c3 if r["stack"] == "deepspeed-zero3" else c2)
        print(f"  {r['label']:42} step {step * 1e3:6.1f} ms  kernels {device * 1e3:6.1f}  host {h * 1e3:6.1f}  "
              f"max(kernels, host) {step_time_s(device, h) / step - 1:+.1%}")
    for stack in ("deepspeed-zero2", "deepspeed-zero3"):
        ratios = [r["peak_reserved_gb"] / r["peak_allocated_gb"] for r in rows if r["stack"] == stack]
        print(f"{stack}: reserved/allocated median {statistics.median(ratios):.3f} over {len(ratios)} fit rows "
              f"({', '.join(f'{x:.3f}' for x in ratios)})")


if __name__ == "__main__":
    main()
