"""megatron-local on the H200: measured kernels against the tables, by mechanism, and the stack constants fitted on
the FIT rows of benchmarks/stacks/megatron_split.json only (written before any row ran); test and holdout rows are
not read here (benchmarks/stacks/evaluate.py reports them).

    python benchmarks/stacks/megatron_fit.py [--out benchmarks/results/h200/stacks/megatron/FIT.md]

Measured kernel time: the Kineto trace of the traced fit row (its ``kernels`` list counts each kernel twice: the
profiler ran with CPU activity), the ``kernels`` list of the others. Host time: step = max(device, host)
(``workbench.stack_memory.step_time_s``), the host constants grid-searched against max(measured kernel time, host),
as benchmarks/stacks/kernel_classes.py fits the plain loop's; reserved/allocated: the fit rows' median.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import statistics
from pathlib import Path

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stacked_megatron import megatron_stack_step
from workbench.predict import predict
from workbench.stack_check import price
from workbench.stacks import StackConstant, get_stack
from workbench.trace import load_trace
from workbench.validation import benchmark_model

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[0] / "results" / "h200" / "stacks" / "megatron"
SPLIT = HERE / "megatron_split.json"
STACK = "megatron-local"

FAMILIES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (mechanism, substrings of measured kernel names, predicted op names ending so)
    ("GEMMs (linears, baddbmm, bmm)", ("nvjet", "cutlass", "gemm"), (".fwd", ".dgrad", ".wgrad", "core_attn.qk",
                                                                       "core_attn.pv", ".dq", ".dk", ".dprobs", ".dv")),
    ("masked_fill (scores fwd + bwd)", ("masked_fill_kernel",), ("softmax.masked_fill",)),
    ("softmax forward", ("softmax_warp_forward", "cunn_SoftMaxForward"), ("softmax.softmax",)),
    ("softmax backward: grad * probs", ("vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
                                        "float, at::native::binary_internal::MulFunctor",), ("grad_times_probs",)),
    ("softmax backward: row kernel", ("cunn_SoftMaxBackward",), ("softmax_backward",)),
    ("bf16 -> fp32 casts", ("unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda",),
     ("scores.float", "grad.float", "logits.float", "mask.bool")),
    ("fp32 -> bf16 casts", ("bfloat16_copy_kernel_cuda",), ("probs.bfloat16", "grad.bfloat16", "dlogits.to_bf16",
                                                             "main_to_bf16_param", "cos_to", "sin_to")),
    ("device-to-device copies (masked_fill clone, clip copy)", ("Memcpy DtoD",), ("masked_fill.clone", "clip_copy")),
    ("fp32 main_grad adds", ("CUDAFunctor_add<float>, std::array<char*, 3ul>, 4",), ("main_grad_add",)),
    ("AdamW foreach", ("multi_tensor_apply_kernel",), ("decay_mul", "adam.lerp", "adam.mul", "addcmul", "adam.sqrt",
                                                       "adam.div", "add_eps", "addcdiv")),
    ("grad norm + its syncs", ("NormTwoOps", "Memcpy DtoH"), ("grad_norm", "norm_item")),
)


def split() -> dict:
    return json.loads(SPLIT.read_text())


def fit_rows() -> list[dict]:
    fit = set(split()["fit"])
    rows = [json.loads(line) for line in (RESULTS / "megatron_local.jsonl").read_text().splitlines()]
    return [r for r in rows if r["label"] in fit and "step_time_s" in r]


def measured_kernels(row: dict) -> list[dict]:
    """name, calls and us per step of the row's kernels (from its trace when it has one)."""
    if not row.get("trace"):
        return row["kernels"]
    trace = load_trace(RESULTS / "traces" / row["trace"], steps=2)  # profile_kernels profiles two steps
    agg: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for e in trace.kernels:
        agg[e.name][0] += 1 / trace.steps
        agg[e.name][1] += e.duration_us / trace.steps
    return [{"name": n, "calls": c, "us": us} for n, (c, us) in agg.items()]


def config(row: dict) -> TrainingConfig:
    return TrainingConfig(row["micro_batch"], row["seq_len"], "bf16", Parallelism(), row["ac"])


def family_table(row: dict) -> list[tuple[str, float, float, float, float]]:
    """(mechanism, measured ms, measured calls, predicted ms, predicted kernels) per step."""
    kernels = measured_kernels(row)
    step = megatron_stack_step(benchmark_model(row["model"]), config(row), get_stack(STACK))
    priced = price(step.microbatch_ops + step.step_ops)
    out = []
    for mechanism, names, ops in FAMILIES:
        mine = [k for k in kernels if any(n in k["name"] for n in names)]
        theirs = [(op, s) for op, s in priced if op.name.endswith(ops) and (op.kind == "gemm") == (ops == FAMILIES[0][2])]
        out.append((mechanism, sum(k["us"] for k in mine) / 1e3, sum(k["calls"] for k in mine),
                    sum(s for _, s in theirs) * 1e3, sum(op.count for op, _ in theirs)))
    return out


def with_constants(stack, values: dict[str, float]):
    constants = dict(stack.constants)
    for name, value in values.items():
        constants[name] = StackConstant(value, "fitted", constants[name].source if name in constants else "")
    return dataclasses.replace(stack, constants=constants)


def fit_host(rows: list[dict]) -> tuple[dict[str, float], list[tuple]]:
    """host_eager_kernel_us and host_recompute_kernel_us minimizing the squared relative error of
    max(measured kernel time, host) against the measured step; host_sync_us stays at its trace value."""
    base = get_stack(STACK)
    data = []
    for r in rows:
        device = sum(k["us"] for k in measured_kernels(r)) * 1e-6
        data.append((r, device, megatron_stack_step(benchmark_model(r["model"]), config(r), base)))
    best = (float("inf"), {})
    for eager in [x * 0.5 for x in range(0, 161)]:
        for recompute in [x * 0.5 for x in range(0, 121)]:
            stack = with_constants(base, {"host_eager_kernel_us": eager, "host_recompute_kernel_us": recompute})
            err = sum((max(dev, step.host_s(stack, 1)) / r["step_time_s"] - 1) ** 2 for r, dev, step in data)
            if err < best[0] - 1e-12:
                best = (err, {"host_eager_kernel_us": eager, "host_recompute_kernel_us": recompute})
    stack = with_constants(base, best[1])
    return best[1], [(r, dev, step.host_s(stack, 1)) for r, dev, step in data]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=RESULTS / "FIT.md")
    args = p.parse_args()
    rows = fit_rows()
    lines = ["# megatron-local: kernels by mechanism and the fitted constants (fit rows only)", "",
             "Generated by `python benchmarks/stacks/megatron_fit.py` from the fit rows of "
             "`benchmarks/stacks/megatron_split.json` (test and holdout rows are not read). Predicted = the "
             "`megatron-local` tables priced with the spec constants (specs/efficiency.yaml), ms and kernels per step.",
             ""]
    for r in rows:
        kernels = measured_kernels(r)
        step = megatron_stack_step(benchmark_model(r["model"]), config(r), get_stack(STACK))
        lines += [f"## {r['label']} (measured step {r['step_time_s'] * 1e3:.1f} ms)", "",
                  f"All kernels, memsets and copies: {sum(k['us'] for k in kernels) / 1e3:.1f} ms, "
                  f"{sum(k['calls'] for k in kernels):.0f} measured; "
                  f"{sum(s for _, s in price(step.microbatch_ops + step.step_ops)) * 1e3:.1f} ms, "
                  f"{sum(op.count for op in step.microbatch_ops + step.step_ops):.0f} predicted.", "",
                  "| mechanism | measured ms | measured kernels | predicted ms | predicted kernels |", "|---|---|---|---|---|"]
        for mechanism, mms, mcalls, pms, pcalls in family_table(r):
            lines.append(f"| {mechanism} | {mms:.2f} | {mcalls:.0f} | {pms:.2f} | {pcalls:.0f} |")
        lines.append("")
    constants, host = fit_host(rows)
    ratios = [r["peak_reserved_gb"] / r["peak_allocated_gb"] for r in rows]
    lines += ["## Host time and the allocator", "",
              "Fitted: " + ", ".join(f"{k} = {v:.1f}" for k, v in constants.items()) +
              f"; reserved_over_allocated = {statistics.median(ratios):.4f} (median of "
              + ", ".join(f"{x:.4f}" for x in ratios) + ").", "",
              "| row | measured step ms | measured kernels ms | host ms (fitted) | max(kernels, host) err | "
              "predicted step ms (spec, fitted constants) | err |", "|---|---|---|---|---|---|---|"]
    stack = with_constants(get_stack(STACK), {**constants, "reserved_over_allocated": statistics.median(ratios)})
    for r, device, host_s in host:
        s = predict(benchmark_model(r["model"]), "h200", config(r), stack=stack).summary
        step = r["step_time_s"]
        lines.append(f"| {r['label']} | {step * 1e3:.1f} | {device * 1e3:.1f} | {host_s * 1e3:.1f} | "
                     f"{max(device, host_s) / step - 1:+.1%} | {s.step_time_s * 1e3:.1f} | {s.step_time_s / step - 1:+.1%} |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
