"""The training proof's analysis and report (``benchmarks/train/train_proof.py``): predicted vs measured rows, the
port ratio, and the CSV/JSON/markdown outputs; the fp8/bf16 loss comparison is ``workbench.train.proof_fp8``."""

from __future__ import annotations

import csv
import json
import platform
from pathlib import Path

from workbench.benchmarking import package_version
from workbench.recipe.build import predict_recipe
from workbench.schema import write_atomic
from workbench.train.proof_fp8 import FP8_TOLERANCE, fp8_result

ERROR_TARGET = 0.10
"""|measured / predicted - 1| a run's step time and peak memory should be within (the issue's target)."""
PORT_TARGET = 1.25
"""Measured tokens/s of the co-designed recipe over the direct port's that the port experiment targets."""


def _error(measured: float | None, predicted: float | None) -> float | None:
    return None if not measured or not predicted else measured / predicted - 1


def prediction_rows(rows: list[dict]) -> list[dict]:
    """Predicted (spec-only and H200-calibrated) vs measured, one row per run counted in the table."""
    out = []
    for row in rows:
        run = row.get("run")
        if run is None or not run.in_table:
            continue
        recipe = run.recipe
        b, ac = recipe.batch, recipe.activation_checkpointing.mode
        entry = {"name": row["name"], "experiment": row["experiment"], "status": row["status"],
                 "model": recipe.model.name + "".join(f" {k}={v}" for k, v in recipe.model.overrides.items()),
                 "micro_batch": b.micro_batch, "seq_len": b.seq_len, "checkpointing": ac,
                 "precision": recipe.precision.workbench_precision, "compile": recipe.compile, "error": row["error"]}
        for label, calibrated in (("spec", False), ("calibrated", True)):
            try:
                s = predict_recipe(recipe, calibrated=calibrated, job=True).summary
                entry[f"predicted_step_s_{label}"] = s.step_time_s
                entry["predicted_memory_gb"] = s.memory.total / 1e9
            except Exception as exc:
                entry[f"predicted_step_s_{label}"] = None
                entry["error"] += f" (no {label} prediction: {exc})"
        m = row.get("metrics", {}).get("measured", {})
        entry.update(measured_step_s=m.get("step_time_s"), measured_tokens_per_s=m.get("tokens_per_s"),
                     measured_reserved_gb=m.get("peak_memory_reserved_gb"),
                     measured_allocated_gb=m.get("peak_memory_allocated_gb"), wall_s=row.get("wall_s"))
        for label in ("spec", "calibrated"):
            entry[f"step_error_{label}"] = _error(entry["measured_step_s"], entry.get(f"predicted_step_s_{label}"))
        entry["memory_error"] = _error(entry["measured_reserved_gb"], entry.get("predicted_memory_gb"))
        entry["memory_error_allocated"] = _error(entry["measured_allocated_gb"], entry.get("predicted_memory_gb"))
        out.append(entry)
    return out


def port_result(rows: list[dict]) -> dict:
    by_name = {r["name"]: r for r in rows if r["experiment"] == "port"}
    port, codesigned = by_name.get("port-h100-recipe"), by_name.get("codesigned-h200")
    if not port or not codesigned:
        return {"status": "not built"}
    result = {"status": "incomplete", "target": PORT_TARGET}
    for key, row in (("port", port), ("codesigned", codesigned)):
        recipe = row["run"].recipe
        result[key] = {"micro_batch": recipe.batch.micro_batch, "checkpointing": recipe.activation_checkpointing.mode,
                       "overrides": dict(recipe.model.overrides), "precision": recipe.precision.workbench_precision,
                       "predicted_tokens_per_s": recipe.predicted.tokens_per_s,
                       "measured_tokens_per_s": row.get("metrics", {}).get("measured", {}).get("tokens_per_s"),
                       "status": row["status"]}
    result["predicted_ratio"] = result["codesigned"]["predicted_tokens_per_s"] / result["port"]["predicted_tokens_per_s"]
    measured = (result["codesigned"]["measured_tokens_per_s"], result["port"]["measured_tokens_per_s"])
    if all(measured):
        result["measured_ratio"] = measured[0] / measured[1]
        result["status"] = "met" if result["measured_ratio"] >= PORT_TARGET else "missed"
    return result
def environment() -> dict:
    """Python, host, torch, CUDA, the device and the triton/torchao versions (None where absent) of this process."""
    env = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # report, do not die, before the runs
        env["torch"] = f"unavailable: {exc}"
    for name in ("triton", "torchao"):
        env[name] = package_version(name)
    return env


# ------------------------------------------------------------------------------------------------ output
def _fmt(value, spec: str = ".3f", pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if pct else format(value, spec)


def markdown(summary: dict) -> str:
    env, table, port, fp8 = summary["environment"], summary["predictions"], summary["port"], summary["fp8"]
    lines = [f"# Reference training job on {env.get('device')}: predicted vs measured", "",
             f"Command: `{summary['command']}` ({summary['wall_s']:.0f} s). torch {env.get('torch')}, "
             f"triton {env.get('triton')}, torchao {env.get('torchao') or 'not installed'}.", "",
             "Step time: median of the timed steps (after warm-up and compilation), each bracketed by "
             "`torch.cuda.synchronize()`. Peak memory: `torch.cuda.max_memory_reserved` over the timed steps "
             "(the memory model's peak includes allocator slack; `max_memory_allocated` beside it), "
             "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`. Error = measured / predicted - 1; "
             f"target |error| <= {ERROR_TARGET:.0%}.", "",
             "## 1. Predicted vs measured", "",
             "| run | model | mb x seq | AC | precision | compile | predicted step (spec / calibrated) | measured step | "
             "error (spec / calibrated) | predicted mem | reserved / allocated | mem error (reserved / allocated) | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(
            f"| {r['name']} | {r['model']} | {r['micro_batch']} x {r['seq_len']} | {r['checkpointing']} | "
            f"{r['precision']} | {r['compile']} | {_fmt(r.get('predicted_step_s_spec'), '.4f')} / "
            f"{_fmt(r.get('predicted_step_s_calibrated'), '.4f')} s | {_fmt(r['measured_step_s'], '.4f')} s | "
            f"{_fmt(r['step_error_spec'], pct=True)} / {_fmt(r['step_error_calibrated'], pct=True)} | "
            f"{_fmt(r.get('predicted_memory_gb'), '.1f')} GB | {_fmt(r['measured_reserved_gb'], '.1f')} / "
            f"{_fmt(r['measured_allocated_gb'], '.1f')} GB | {_fmt(r['memory_error'], pct=True)} / "
            f"{_fmt(r['memory_error_allocated'], pct=True)} | {r['status']} {r['error']} |")
    done = [r for r in table if r["measured_step_s"]]
    for label in ("spec", "calibrated"):
        within = sum(1 for r in done if r[f"step_error_{label}"] is not None and abs(r[f"step_error_{label}"]) <= ERROR_TARGET)
        lines.append(f"\nStep time within {ERROR_TARGET:.0%} ({label} predictions): {within} of {len(done)} runs.")
        held = [r for r in done if r["experiment"] == "holdout"]
        if held:
            ok = sum(1 for r in held if r[f"step_error_{label}"] is not None and abs(r[f"step_error_{label}"]) <= ERROR_TARGET)
            lines.append(f"Of them, hold-out recipes (not used to build the job model): {ok} of {len(held)}.")
    within = sum(1 for r in done if r["memory_error"] is not None and abs(r["memory_error"]) <= ERROR_TARGET)
    lines += [f"Peak memory (reserved) within {ERROR_TARGET:.0%}: {within} of {len(done)} runs.", "",
              "## 2. Direct port vs co-designed (Llama 3 8B, 12 layers, 8k tokens; h100-sxm recipe vs h200-sxm recipe, both run on the H200)", ""]
    if "port" in port:
        for key in ("port", "codesigned"):
            p = port[key]
            lines.append(f"- {key}: micro-batch {p['micro_batch']}, checkpointing {p['checkpointing']}, overrides "
                         f"{p['overrides']}, predicted {_fmt(p['predicted_tokens_per_s'], ',.0f')} tokens/s, measured "
                         f"{_fmt(p['measured_tokens_per_s'], ',.0f')} tokens/s ({p['status']})")
        lines.append(f"- tokens/s ratio: predicted {_fmt(port.get('predicted_ratio'), '.3f')}x, measured "
                     f"{_fmt(port.get('measured_ratio'), '.3f')}x; target >= {PORT_TARGET}x: **{port['status']}**")
    else:
        lines.append(f"- {port['status']}")
    lines += ["", "## 3. fp8 vs bf16 loss curves (byte-level Llama, ~45M parameters, generated text corpus)", ""]
    if "recipes" in fp8:  # every status but an early "incomplete" (no bf16 seed 0 or no fp8 curve)
        n_seeds, pairs = len(fp8.get("bf16_seeds", [0, 1])), fp8.get("band_pairs", 1)
        seed_label = " / ".join(f"seed {k}" for k in fp8.get("bf16_seeds", [0, 1]))
        lines += [f"- {fp8['steps']} steps each; each fp8 run against the bf16 run of its seed (same initialisation "
                  f"and data); {fp8['window']}-step means after step {fp8['skip']}",
                  f"- verdict rule, the same for every recipe, fixed before the runs: band = the largest of the "
                  f"largest-window differences over all pairs of bf16 seeds (N(N-1)/2 pairs; here {n_seeds} seeds, "
                  f"{pairs} pair{'s' * (pairs != 1)}: {_fmt(fp8.get('seed_max_relative_difference'), '.2%')}); an fp8 "
                  f"recipe agrees when at every seed its largest difference from the same-seed bf16 run is no larger "
                  f"than the band. The original policy (every window mean within {FP8_TOLERANCE:.0%}, seed 0) is "
                  f"reported beside it",
                  f"- recipes that converge like bf16: **{', '.join(fp8['agreeing']) or 'none'}** "
                  f"(**{fp8['status']}**)", "",
                  f"| fp8 recipe | backend | largest difference, {seed_label} | verdict (band) | policy 3% | "
                  "first loss bf16 / fp8 | final mean bf16 / fp8 | median step |", "|---|---|---|---|---|---|---|---|"]
        for recipe, v in fp8["recipes"].items():
            seeds = " / ".join(_fmt(d, '.2%') for d in v["seed_max_relative_differences"])
            first = "-" if v["loss_first"] is None else f"{v['loss_first'][0]:.3f} / {v['loss_first'][1]:.3f}"
            final = ("-" if v["loss_final_mean"] is None
                     else f"{v['loss_final_mean'][0]:.4f} / {v['loss_final_mean'][1]:.4f}")
            step_ms = None if v["step_s"] is None else v["step_s"] * 1e3
            lines.append(f"| {recipe} | {v['fp8_backend'] or '-'} | {seeds} | **{v['status']}** "
                         f"({v['noise_status']}) | {v['policy_status']} | {first} | {final} | {_fmt(step_ms, '.1f')} ms |")
        spread = fp8.get("bf16_pairs_mean_signed")
        if spread is not None:
            lines += ["", "Diagnostics, not verdicts: is fp8 systematically behind? Mean over seeds of the mean signed "
                      "difference (> 0: behind), beside the same quantity for the bf16 pairs (a reseed's spread), and "
                      "the number of seeds at which fp8 is behind.", "",
                      "| fp8 recipe | mean signed, per seed | mean over seeds | bf16 pairs: min / max (largest abs.) | "
                      "seeds behind |", "|---|---|---|---|---|"]
            for recipe, v in fp8["recipes"].items():
                per_seed = " / ".join(_fmt(d, pct=True) for d in v["mean_signed_differences"])
                lines.append(f"| {recipe} | {per_seed} | {_fmt(v['mean_signed_over_seeds'], pct=True)} | "
                             f"{_fmt(spread['min'], pct=True)} / {_fmt(spread['max'], pct=True)} "
                             f"({_fmt(spread['largest_abs'], '.1%')}) | {v['seeds_behind']} of "
                             f"{len(v['mean_signed_differences'])} |")
        lines += ["", "The fixed tolerance is kept and reported, but it is not the verdict: where the loss falls fast, a "
                  "shift of a few steps moves a window mean by tens of percent, and near the end batch noise alone "
                  "is a few percent, so bf16 against itself with another seed can fail it. A precision change is "
                  f"judged against that run-to-run band instead, at {n_seeds} seeds, and by how many more steps it needs "
                  "to reach the same loss (step lag; the band's own lags say how much of that is noise). "
                  "rowwise and tensorwise quantize every operand to e4m3, gradients included; rowwise_with_gw_hp "
                  "(torchao's recipe) keeps the weight-gradient GEMM in bf16.", "",
                  "| comparison | largest abs. difference | mean signed difference (> 0: behind) | final | "
                  "step lag at 25/50/75/90% of bf16's drop |", "|---|---|---|---|---|"]
        for label, c in fp8["comparisons"].items():
            lags = " / ".join(_fmt(v, pct=True) for v in c["step_lags"])
            lines.append(f"| {label} | {_fmt(c['max_relative_difference'], '.2%')} | "
                         f"{_fmt(c['mean_signed_difference'], pct=True)} | {_fmt(c['final_relative_difference'], pct=True)} "
                         f"| {lags} |")
        lines += ["", f"- median step: bf16 {fp8['bf16_step_s'] * 1e3:.1f} ms (eager; the fp8 path quantizes with "
                  "separate torch ops around the Triton GEMM)"]
    else:
        lines.append(f"- {fp8.get('status')}")
    lines += ["", "## Runs", "", "| run | status | wall s | error |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['status']} | {_fmt(r.get('wall_s'), '.0f')} | {r['error']} |" for r in summary["runs"]]
    if summary["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows: list[dict], notes: list[str], command: str, wall_s: float,
                  final: bool = True) -> dict:
    """Write every output file. ``final=False`` (after each run) skips ``environment()``, which initialises CUDA
    in this process (its memory would stay taken while later runs need it)."""
    table = prediction_rows(rows)
    env = environment() if final else {"device": "(written at the end)"}
    summary = {"command": command, "wall_s": wall_s, "complete": final, "environment": env, "notes": notes,
               "predictions": table, "port": port_result(rows), "fp8": fp8_result(rows),
               "runs": [{k: v for k, v in r.items() if k not in ("run", "metrics")} for r in rows]}
    if table:
        with open(out / "results.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    curves = summary["fp8"].get("curves")
    if curves:
        names = list(curves)  # bf16 seeds, each recipe's seeds, the emulated run
        text = ",".join(["step", *(f"loss_{key}" for key in names)]) + "\n" + "".join(
            ",".join([str(i), *(f"{v:.6f}" for v in values)]) + "\n"
            for i, values in enumerate(zip(*(curves[key] for key in names))))
        write_atomic(out / "fp8_vs_bf16.csv", text)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_atomic(out / "REPORT.md", markdown(summary))
    return summary


def print_table(summary: dict) -> None:
    print(f"\n{'run':<36} {'pred step':>10} {'meas step':>10} {'err':>7} {'pred GB':>8} {'resv GB':>8} {'err':>7}")
    for r in summary["predictions"]:
        print(f"{r['name']:<36} {_fmt(r.get('predicted_step_s_calibrated'), '.4f'):>10} "
              f"{_fmt(r['measured_step_s'], '.4f'):>10} {_fmt(r['step_error_calibrated'], pct=True):>7} "
              f"{_fmt(r.get('predicted_memory_gb'), '.1f'):>8} {_fmt(r['measured_reserved_gb'], '.1f'):>8} "
              f"{_fmt(r['memory_error'], pct=True):>7}  {r['status']}")
    port, fp8 = summary["port"], summary["fp8"]
    print(f"port vs co-designed: measured {_fmt(port.get('measured_ratio'), '.3f')}x "
          f"(predicted {_fmt(port.get('predicted_ratio'), '.3f')}x, target {PORT_TARGET}x): {port['status']}")
    print(f"fp8 vs bf16: bf16 seed band {_fmt(fp8.get('seed_max_relative_difference'), '.2%')} "
          f"({fp8.get('band_pairs', 0)} pairs); "
          f"recipes that agree: {', '.join(fp8.get('agreeing') or []) or 'none'} ({fp8.get('status')})")
    for recipe, v in fp8.get("recipes", {}).items():
        seeds = " / ".join(_fmt(d, ".2%") for d in v["seed_max_relative_differences"])
        print(f"  {recipe:<20} largest difference at seeds {v['seeds']}: {seeds}: {v['status']} "
              f"(policy {FP8_TOLERANCE:.0%}: {v['policy_status']})")
