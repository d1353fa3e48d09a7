"""Outputs of ``benchmarks/train/fp8_convergence.py``: REPORT.md, convergence.csv, curves.csv and summary.json from the runs'
metrics and ``workbench.train.convergence.analyze`` (every file written atomically)."""

from __future__ import annotations

import csv
import io
import json
import math
import platform
import subprocess
from pathlib import Path

from workbench.train.convergence import (
    FP8_RECIPES,
    LEVELS,
    PLAN_SEEDS,
    QUANTITIES,
    REFERENCE,
    Interval,
    analyze,
    curve_of,
    pair_quantities,
    parse_run_name,
)
from workbench.schema import write_atomic
from workbench.train.schedule import CONSTANT_LR, LrSchedule

QUANTITY_LABELS = {"r": "Q difference r", "lag50": "lag at 50%", "lag90": "lag at 90%"}


def _pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x:+.{digits}%}"


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def interval_text(interval: Interval) -> str:
    """``+1.2% +- 0.8%``, or the infinite case with its seed count."""
    if interval.infinite:
        side = "entirely above" if interval.low == math.inf else "unbounded both ways"
        return f"+inf ({interval.infinite} of {interval.n} seeds never reach the level; interval {side})"
    return f"{_pct(interval.mean, 2)} +- {_pct(interval.half_width, 2).lstrip('+')}"


def _jsonable(value):
    """JSON without NaN/inf (written as strings) and with dataclasses as dicts."""
    if isinstance(value, Interval):
        return _jsonable(vars(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _csv(rows: list[dict], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    return buffer.getvalue()


CONVERGENCE_COLUMNS = ["run", "recipe", "seed", "status", "q", "l0", "steps50", "steps90", "q_bf16", "r", "lag50",
                       "lag90", "fp8_backend", "step_time_s", "wall_s", "error"]


def convergence_rows(metrics: dict[str, dict], runs: list[dict]) -> list[dict]:
    """One row per planned or present run (rerun included): status, Q, L0, steps to the bf16 seed's 50% and 90%
    levels, and against bf16 of the seed r and the lags (empty for bf16)."""
    by_name = {r["name"]: r for r in runs}
    names = list(dict.fromkeys([*by_name, *metrics]))
    rows = []
    for name in names:
        parsed = parse_run_name(name)
        if parsed is None:
            continue
        recipe, seed, rerun = parsed
        run, m = by_name.get(name, {}), metrics.get(name)
        row = {"run": name, "recipe": recipe + ("-rerun" if rerun else ""), "seed": seed,
               "status": run.get("status", "ok" if m else "missing"), "wall_s": run.get("wall_s"),
               "error": run.get("error", "")}
        got, ref = (curve_of(m) if m else None), metrics.get(f"{REFERENCE}-seed{seed}")
        got_ref = curve_of(ref) if ref else None
        if m:
            row.update(fp8_backend=m.get("settings", {}).get("fp8_backend"),
                       step_time_s=m.get("measured", {}).get("step_time_s"))
        if got and got_ref:
            q = pair_quantities(got_ref[0], got[0], got[1])
            row.update(q=q["q"], l0=q["l0"], q_bf16=q["q_bf16"], steps50=q["steps50"], steps90=q["steps90"])
            if recipe != REFERENCE:
                row.update(r=q["r"], lag50=q["lag50"], lag90=q["lag90"])
        elif m and not got:
            row["status"] = f"{row['status']} (held-out curve incomplete)"
        rows.append(row)
    return rows


def curve_rows(metrics: dict[str, dict]) -> list[dict]:
    rows = []
    for name, m in sorted(metrics.items()):
        parsed = parse_run_name(name)
        if parsed is None:
            continue
        for step, loss in m.get("heldout_losses") or []:
            rows.append({"recipe": parsed[0] + ("-rerun" if parsed[2] else ""), "seed": parsed[1], "step": step,
                         "heldout_loss": loss})
    return rows


def _recipe_section(recipe: str, judged: dict, deviations: bool, confidence: float = 0.95) -> list[str]:
    status = judged["status"] + (" (settings differ from the PLAN's)" if deviations else "")
    lines = [f"### {recipe}: **{status}**", ""]
    if judged["missing_seeds"]:
        lines.append(f"Seeds without a complete pair: {judged['missing_seeds']}; the numbers below are over "
                     f"{judged['seeds'] or 'no seeds'} (verdict over those alone: "
                     f"{judged['verdict_over_present_seeds']}).")
        lines.append("")
    lines += [f"| quantity | m +- h ({confidence:.1%}) | interval | tolerance | interval vs tolerance |", "|---|---|---|---|---|"]
    for name, tolerance in QUANTITIES.items():
        interval = judged["intervals"].get(name)
        if interval is None:
            lines.append(f"| {QUANTITY_LABELS[name]} | n/a | n/a | +-{tolerance:.0%} | n/a |")
            continue
        lines.append(f"| {QUANTITY_LABELS[name]} | {interval_text(interval)} | [{_pct(interval.low, 2)}, "
                     f"{_pct(interval.high, 2)}] | +-{tolerance:.0%} | {judged['classes'][name]} |")
    return lines + [""]


def report_markdown(analysis: dict, rows: list[dict], context: dict) -> str:
    """REPORT.md: the PLAN link, command and environment, verdicts, per-seed numbers, the determinism check, bf16's
    own spread and the seed-mean held-out curves."""
    a, deviations = analysis, analysis["plan_deviations"]
    stage = context.get("stage", 1)
    title = {1: "third rule", 2: "third rule, stage 2", 3: "with a learning-rate schedule, stage 3"}.get(stage, f"stage {stage}")
    lines = [f"# fp8 vs bf16 convergence check ({title})", "",
             f"Rule: [{Path(context['plan_link']).name}]({context['plan_link']}) (stated and committed before these runs). "
             + ("Final." if context.get("final", True) else "**Interim: runs still going.**"), "",
             f"Command: `{context['command']}`", ""]
    if context.get("analyze_command"):
        lines += [f"Analysis: `{context['analyze_command']}`", ""]
    env = context.get("environment", {})
    lines += ["Environment: " + "; ".join(f"{k} {v}" for k, v in env.items() if v not in (None, "", [])), ""]
    if deviations:
        lines += ["**Settings differ from the PLAN's** (a smoke or partial run; not the check itself):", ""]
        lines += [f"- {d}" for d in deviations] + [""]
    lines += [(f"Q = mean held-out loss over steps {a['q_window'][0]}..{a['q_window'][1]}; levels 50% and 90% of "
               f"bf16's drop from its step-0 loss to its Q; planned seeds {a['planned_seeds']}; paired "
               f"{a.get('confidence', 0.95):.1%} intervals."), "",
              "## Verdict per fp8 recipe", ""]
    for recipe, judged in a["recipes"].items():
        lines += _recipe_section(recipe, judged, bool(deviations), a.get("confidence", 0.95))
    lines += ["## Per seed", "", ("| seed | recipe | Q bf16 | Q | r | steps 50% bf16 -> run | lag 50% | "
                                  "steps 90% bf16 -> run | lag 90% |"), "|---|---|---|---|---|---|---|---|---|"]
    for recipe, judged in a["recipes"].items():
        for seed, q in judged["per_seed"].items():
            lines.append(f"| {seed} | {recipe} | {_num(q['q_bf16'])} | {_num(q['q'])} | {_pct(q['r'], 2)} | "
                         f"{_num(q['steps50_bf16'], 1)} -> {_num(q['steps50'], 1)} | {_pct(q['lag50'])} | "
                         f"{_num(q['steps90_bf16'], 1)} -> {_num(q['steps90'], 1)} | {_pct(q['lag90'])} |")
    lines += ["", "## Determinism check (bf16 run twice at one seed; not part of the verdict)", ""]
    if not a["determinism"]:
        lines.append("No rerun in these results.")
    for name, check in a["determinism"].items():
        if check["status"] == "missing":
            lines.append(f"- {name}: its pair is missing.")
            continue
        detail = "; ".join(f"{key}: " + ("identical" if c["identical"] else
                                         f"differ, largest |difference| {_num(c['max_abs_difference'], 6)}")
                           for key, c in check.items() if key != "status")
        lines.append(f"- {name} vs its first run: **{check['status']}** ({detail}).")
    lines += ["", "## bf16 seed to seed (for reference)", "",
              "Q, and steps to each seed's own 50% and 90% levels, over the bf16 seeds.", "",
              "| quantity | mean | sd | min | max | seeds |", "|---|---|---|---|---|---|"]
    for key, s in a["bf16_spread"].items():
        if s:
            lines.append(f"| {key} | {_num(s['mean'])} | {_num(s['sd'])} | {_num(s['min'])} | {_num(s['max'])} | "
                         f"{s['n']} |")
    lines += ["", "## Seed-mean held-out loss", ""]
    curves = a["mean_curves"]
    if curves:
        steps = list(next(iter(curves.values())))
        lines += ["| step | " + " | ".join(curves) + " |", "|---" * (len(curves) + 1) + "|"]
        lines += [f"| {s} | " + " | ".join(_num(c.get(s)) for c in curves.values()) + " |" for s in steps]
    lines += ["", "## Runs", "", "| run | status | wall s | error |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['run']} | {row['status']} | {_num(row.get('wall_s'), 0)} | "
                     f"{(row.get('error') or '')[:160]} |")
    lines += [""] + [f"- {note}" for note in context.get("notes", [])]
    return "\n".join(lines) + "\n"


def load_metrics(metrics_dir: Path) -> dict[str, dict]:
    """Every metrics JSON under ``metrics_dir`` by run name (the file's stem)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(metrics_dir.glob("*.json"))}


def environment(metrics: dict[str, dict], repo: Path, extra: dict) -> dict:
    """Python, platform, the repository's commit, and from the metrics the GPU, torch and fp8 backends."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=10, check=False).stdout.strip()
    except Exception:  # not a git checkout
        commit = ""
    backends = sorted({f"{m.get('settings', {}).get('precision', {}).get('fp8')}: "
                       f"{m.get('settings', {}).get('fp8_backend')}" for m in metrics.values()})
    return {"python": platform.python_version(), "platform": platform.platform(), "commit": commit,
            "device": sorted({m.get("device", "?") for m in metrics.values()}),
            "torch": sorted({m.get("torch", "?") for m in metrics.values()}), "fp8 backends": backends, **extra}


def write_outputs(out: Path, metrics: dict[str, dict], runs: list[dict], context: dict,
                  planned_seeds: tuple[int, ...] = PLAN_SEEDS, recipes: tuple[str, ...] = FP8_RECIPES,
                  confidence: float = 0.95, lr_schedule: LrSchedule = CONSTANT_LR) -> dict:
    """Analyse and write REPORT.md, convergence.csv, curves.csv and summary.json under ``out``; returns the summary."""
    analysis = analyze(metrics, planned_seeds, recipes, confidence, lr_schedule)
    rows = convergence_rows(metrics, runs)
    write_atomic(out / "convergence.csv", _csv(rows, CONVERGENCE_COLUMNS))
    write_atomic(out / "curves.csv", _csv(curve_rows(metrics), ["recipe", "seed", "step", "heldout_loss"]))
    write_atomic(out / "REPORT.md", report_markdown(analysis, rows, context))
    summary = {"context": context, "runs": runs, "levels": list(LEVELS), "tolerances": QUANTITIES,
               **analysis,
               "verdicts": {r: j["status"] for r, j in analysis["recipes"].items()}}
    write_atomic(out / "summary.json", json.dumps(_jsonable(summary), indent=2) + "\n")
    return summary
