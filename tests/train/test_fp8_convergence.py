"""workbench.train.convergence and convergence_report, the analysis benchmarks/train/fp8_convergence.py runs: the PLAN's
verdict on constructed held-out curves (crossings, lags, Student's t intervals, agree / disagree / inconclusive /
incomplete), the plan's runs and the outputs; and the script itself (--quick end to end, --analyze) on the CPU."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.train.convergence import (
    PLAN_SEEDS,
    RECIPES,
    Run,
    analyze,
    curve_of,
    determinism_check,
    final_quality,
    first_crossing,
    interval_class,
    judge_recipe,
    lag,
    paired_interval,
    parse_run_name,
    plan_runs,
    quality_window_start,
    run_name,
    t_quantile_975,
    verdict,
)
from workbench.train.convergence_report import write_outputs

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "train" / "fp8_convergence.py"


def script(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``benchmarks/train/fp8_convergence.py ARGS`` in its own process, from the repository root."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))


def curve(l0: float = 5.5, floor: float = 0.25, tau: float = 30.0, total: int = 300, every: int = 10):
    """An exponential held-out curve from l0 towards floor, evaluated every ``every`` steps."""
    return [(s, floor + (l0 - floor) * math.exp(-s / tau)) for s in range(0, total + 1, every)]


def bf16_curves() -> dict:
    return {s: curve(floor=0.25 + 0.002 * i, tau=30 + i) for i, s in enumerate(PLAN_SEEDS)}


def fp8_curves(floor_factor=1.0, tau_factor=lambda i: 1.0, never=()) -> dict:
    out = {}
    for i, s in enumerate(PLAN_SEEDS):
        floor = (0.25 + 0.002 * i) * floor_factor * (1 + 0.002 * (-1) ** i)
        out[s] = ([(step, 5.5) for step in range(0, 301, 10)] if s in never else
                  curve(floor=floor, tau=(30 + i) * tau_factor(i)))
    return out


# ------------------------------------------------------------------------------------------------ pieces
def test_first_crossing_interpolates_between_evaluations():
    c = [(0, 5.0), (10, 3.0), (20, 1.0)]
    assert first_crossing(c, 2.0) == pytest.approx(15.0)
    assert first_crossing(c, 4.0) == pytest.approx(5.0)
    assert first_crossing(c, 3.0) == pytest.approx(10.0)  # at an evaluation: its step
    assert first_crossing(c, 6.0) == 0.0  # already there at the first evaluation
    assert first_crossing(c, 0.5) is None
    assert first_crossing([(0, 5.0), (10, 1.0), (20, 4.0), (30, 0.5)], 2.0) == pytest.approx(7.5)  # the first one


def test_lag_is_infinite_when_never_reached_and_undefined_without_reference_steps():
    assert lag(22.0, 20.0) == pytest.approx(0.1) and lag(18.0, 20.0) == pytest.approx(-0.1)
    assert lag(None, 20.0) == math.inf
    assert math.isnan(lag(10.0, None)) and math.isnan(lag(10.0, 0.0))


def test_quality_window_is_the_last_50_of_300_steps_and_scales():
    assert quality_window_start(300) == 250 and quality_window_start(30) == 25 and quality_window_start(12) == 10
    c = curve()
    assert final_quality(c, 300) == pytest.approx(sum(loss for s, loss in c if s >= 250) / 6)
    with pytest.raises(ValueError, match="no evaluation between steps 250 and 300"):
        final_quality([(0, 5.0), (100, 1.0)], 300)


def test_student_t_half_width_matches_a_hand_value():
    assert t_quantile_975(7) == 2.365 and t_quantile_975(1) == 12.706 and t_quantile_975(30) == 2.042
    for bad in (0, 31):
        with pytest.raises(ValueError, match="degrees of freedom"):
            t_quantile_975(bad)
    interval = paired_interval([1, 2, 3, 4, 5, 6, 7, 8])  # sd = sqrt(6)
    assert interval.mean == pytest.approx(4.5)
    assert interval.half_width == pytest.approx(2.365 * math.sqrt(6) / math.sqrt(8)) == pytest.approx(2.04815, abs=1e-5)
    assert (interval.low, interval.high) == pytest.approx((4.5 - 2.04815, 4.5 + 2.04815), abs=1e-5)


def test_infinite_lags_are_the_limit_of_huge_ones():
    finite = [0.0, 0.01, -0.01, 0.02, -0.02, 0.0, 0.01]
    one = paired_interval([*finite, math.inf])  # 1 of 8: the interval spans everything
    assert one.mean == math.inf and one.low == -math.inf and one.infinite == 1
    assert interval_class(one, 0.1) == "straddles"
    assert paired_interval([*finite[:5], math.inf, math.inf, math.inf]).low == -math.inf  # k = 3: 3 < 3.46
    four = paired_interval([*finite[:4], *[math.inf] * 4])  # k = 4: 4 > 2.365 sqrt(16/7) = 3.58
    assert four.low == math.inf and interval_class(four, 0.1) == "outside"
    assert paired_interval([math.inf] * 8).low == math.inf


def test_interval_classes_and_verdict():
    inside, outside = paired_interval([0.01] * 8), paired_interval([0.2] * 8)
    straddles = paired_interval([0.0, 0.3] * 4)
    assert [interval_class(i, 0.1) for i in (inside, outside, straddles)] == ["inside", "outside", "straddles"]
    assert interval_class(paired_interval([-0.2] * 8), 0.1) == "outside"  # two-sided: faster also fails
    assert interval_class(paired_interval([math.nan] * 8), 0.1) == "straddles"
    assert verdict(["inside"] * 3) == "agree"
    assert verdict(["inside", "straddles", "outside"]) == "disagree"
    assert verdict(["inside", "straddles", "inside"]) == "inconclusive"


def test_run_names_round_trip_and_the_plan_runs_seed_by_seed_with_the_rerun_last():
    assert run_name("rowwise_with_gw_hp", 103) == "rowwise_with_gw_hp-seed103"
    assert parse_run_name("bf16-seed100-rerun") == ("bf16", 100, True)
    assert parse_run_name("rowwise-seed7") == ("rowwise", 7, False) and parse_run_name("small-bf16") is None
    runs = plan_runs(PLAN_SEEDS, RECIPES)
    assert len(runs) == 25 and runs[:4] == [Run("bf16", 100), Run("rowwise_with_gw_hp", 100), Run("rowwise", 100),
                                            Run("bf16", 101)]
    assert runs[-1] == Run("bf16", 100, rerun=True) and runs[-2] == Run("rowwise", 107)
    assert plan_runs((5, 6), ("rowwise", "bf16"))[-1] == Run("bf16", 5, rerun=True)
    assert Run("rowwise", 5) not in plan_runs((5,), ("bf16",))


# ------------------------------------------------------------------------------------------------ verdicts
def test_verdict_agree_when_every_interval_is_inside():
    judged = judge_recipe(bf16_curves(), fp8_curves(tau_factor=lambda i: 1 + 0.01 * (-1) ** i), 300)
    assert judged["status"] == "agree", judged["classes"]
    assert judged["seeds"] == list(PLAN_SEEDS) and not judged["missing_seeds"]
    assert abs(judged["intervals"]["r"].mean) < 0.005 and abs(judged["intervals"]["lag50"].mean) < 0.02


def test_verdict_disagree_when_final_quality_is_6_percent_worse():
    judged = judge_recipe(bf16_curves(), fp8_curves(floor_factor=1.06), 300)
    assert judged["status"] == "disagree" and judged["classes"]["r"] == "outside"
    assert judged["intervals"]["r"].mean == pytest.approx(0.06, abs=0.01)


def test_verdict_inconclusive_when_lags_scatter_beyond_the_tolerance():
    judged = judge_recipe(bf16_curves(), fp8_curves(tau_factor=lambda i: 1 + 0.12 * (-1) ** i), 300)
    assert judged["status"] == "inconclusive", judged["intervals"]
    assert "straddles" in judged["classes"].values() and "outside" not in judged["classes"].values()


def test_never_reaching_the_level_at_half_the_seeds_disagrees():
    judged = judge_recipe(bf16_curves(), fp8_curves(never=PLAN_SEEDS[:4]), 300)
    assert judged["per_seed"][100]["lag50"] == math.inf and judged["classes"]["lag50"] == "outside"
    assert judged["status"] == "disagree"


def test_incomplete_without_every_planned_seed_but_numbers_still_there():
    fp8 = fp8_curves()
    del fp8[107]
    judged = judge_recipe(bf16_curves(), fp8, 300)
    assert judged["status"] == "incomplete" and judged["missing_seeds"] == [107]
    assert judged["verdict_over_present_seeds"] == "agree" and judged["intervals"]["r"].n == 7
    extra_ref, extra = bf16_curves(), fp8_curves()
    extra_ref[108], extra[108] = curve(), curve(floor=1.0)  # an unplanned seed does not enter the verdict
    judged = judge_recipe(extra_ref, extra, 300)
    assert judged["status"] == "agree" and judged["seeds"] == list(PLAN_SEEDS)
    assert judge_recipe({5: curve()}, {5: curve()}, 300, planned_seeds=PLAN_SEEDS)["seeds"] == [5]  # smoke seeds


def _metrics(c, losses=None, **settings) -> dict:
    s = {"eval_every": 10, "eval_windows": 32, "lr": 6e-4, "deterministic": True, "micro_batch": 8, "seq_len": 1024,
         "compile": False, "fp8_backend": "workbench-triton", "precision": {"fp8": "rowwise"}, **settings}
    return {"steps": 300, "warmup": 0, "settings": s, "overrides": {"hidden_size": 1024}, "device": "NVIDIA H200",
            "torch": "2.x", "heldout_losses": [list(p) for p in c], "losses": losses or [5.0, 4.0],
            "measured": {"step_time_s": 0.03}}


def plan_metrics() -> dict:
    out = {run_name("bf16", s): _metrics(c) for s, c in bf16_curves().items()}
    out.update({run_name("rowwise_with_gw_hp", s): _metrics(c) for s, c in fp8_curves().items()})
    out.update({run_name("rowwise", s): _metrics(c) for s, c in fp8_curves(floor_factor=1.06).items()})
    out[run_name("bf16", 100, rerun=True)] = _metrics(bf16_curves()[100])
    return out


def test_analyze_judges_each_recipe_checks_the_rerun_and_the_plan_settings():
    metrics = plan_metrics()
    a = analyze(metrics)
    assert {r: j["status"] for r, j in a["recipes"].items()} == {"rowwise_with_gw_hp": "agree", "rowwise": "disagree"}
    assert a["plan_conformant"] and a["q_window"] == [250, 300]
    assert a["determinism"]["bf16-seed100-rerun"]["status"] == "identical"
    assert list(a["mean_curves"]["bf16"]) == [0, 50, 100, 150, 200, 250, 300]
    assert a["bf16_spread"]["q"]["n"] == 8
    metrics["rowwise-seed101"]["heldout_losses"].pop(3)  # an evaluation missing: that curve does not count
    metrics["bf16-seed100-rerun"] = _metrics(curve(floor=0.2501), losses=[5.0, 4.001])
    a = analyze(metrics)
    assert a["recipes"]["rowwise"]["status"] == "incomplete" and a["recipes"]["rowwise"]["missing_seeds"] == [101]
    check = a["determinism"]["bf16-seed100-rerun"]
    assert check["status"] == "different" and check["losses"]["max_abs_difference"] == pytest.approx(0.001)
    assert curve_of(metrics["rowwise-seed101"]) is None
    metrics["bf16-seed102"] = _metrics(bf16_curves()[102], lr=3e-3)
    assert any(d.startswith("lr") for d in analyze(metrics)["plan_deviations"])


def test_determinism_check_with_a_run_missing():
    assert determinism_check(None, {"losses": []}) == {"status": "missing"}


def test_outputs_are_written_and_summary_is_strict_json(tmp_path):
    runs = [{"name": n, "status": "ok", "wall_s": 30.0, "error": ""} for n in plan_metrics()]
    context = {"command": "python benchmarks/train/fp8_convergence.py --out X", "plan_link": "PLAN.md", "environment": {}}
    write_outputs(tmp_path, plan_metrics(), runs, context)
    report = (tmp_path / "REPORT.md").read_text()
    assert "[PLAN.md](PLAN.md)" in report and "### rowwise_with_gw_hp: **agree**" in report
    assert "### rowwise: **disagree**" in report and "**identical**" in report
    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert summary["verdicts"] == {"rowwise_with_gw_hp": "agree", "rowwise": "disagree"}
    assert len((tmp_path / "convergence.csv").read_text().splitlines()) == 1 + 25
    assert len((tmp_path / "curves.csv").read_text().splitlines()) == 1 + 25 * 31


# ------------------------------------------------------------------------------------------------ the script
def test_budget_skips_runs_and_the_report_says_incomplete(tmp_path):
    proc = script("--quick", "--seeds", "100", "--recipes", "bf16", "--budget-s", "1", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [r["status"] for r in runs] == ["skipped", "skipped"] and "time budget" in runs[0]["error"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["verdicts"].values()) == {"incomplete"}


def test_bad_arguments_are_refused(tmp_path):
    errors = ""
    for args in (["--seeds", "1,1"], ["--recipes", "fp16"], ["--workers", "0"], []):
        proc = script("--quick", *args, *(["--out", str(tmp_path)] if args else []))
        assert proc.returncode == 2, (args, proc.stderr[-3000:])  # argparse's usage error
        errors += proc.stderr
    assert "expected" in errors


def test_quick_run_end_to_end_then_analyze(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(REPO))  # fp8 emulated in torch on the CPU
    cmd = [sys.executable, "benchmarks/train/fp8_convergence.py", "--quick", "--seeds", "100,101", "--steps", "6",
           "--workers", "2", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["ok"] * 7, summary["runs"]
    assert summary["verdicts"] == {"rowwise_with_gw_hp": "incomplete", "rowwise": "incomplete"}
    assert summary["determinism"]["bf16-seed100-rerun"]["status"] == "identical"
    assert summary["recipes"]["rowwise"]["seeds"] == [100, 101] and not summary["plan_conformant"]
    for name in ("REPORT.md", "convergence.csv", "curves.csv", "runs.json", "recipes/rowwise.yaml",
                 "logs/bf16-seed101.log", "metrics/bf16-seed100-rerun.json"):
        assert (tmp_path / name).stat().st_size > 0
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr  # metrics there: not replaced silently
    (tmp_path / "metrics" / "rowwise-seed101.json").unlink()  # a run lost: --resume runs it alone
    resumed = subprocess.run(cmd + ["--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count(" started (slot") == 1 and "rowwise-seed101 started" in resumed.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["ok"] * 7 and " && " in summary["context"]["command"]
    assert summary["recipes"]["rowwise"]["seeds"] == [100, 101]
    analyzed = subprocess.run([sys.executable, "benchmarks/train/fp8_convergence.py", "--analyze", str(tmp_path)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=60)
    assert analyzed.returncode == 0, analyzed.stderr[-3000:]
    report = (tmp_path / "REPORT.md").read_text()
    assert "Analysis: `python benchmarks/train/fp8_convergence.py --analyze" in report and "--quick --seeds 100,101" in report


# ------------------------------------------------------------------------------------------------ stage 2
def test_t_quantile_beyond_the_95_percent_table():
    from workbench.train.convergence import t_quantile

    assert t_quantile(7) == t_quantile_975(7) == 2.365
    assert t_quantile(7, 0.950001) == pytest.approx(2.365, abs=1e-3)  # the solver agrees with the table
    assert t_quantile(23, 0.975) == pytest.approx(2.3979, abs=1e-4)  # PLAN_STAGE2.md's 2.398
    with pytest.raises(ValueError, match="confidence"):
        t_quantile(7, 1.5)


def test_stage_two_judges_all_24_seeds_at_97_5_percent_with_the_earlier_folder(tmp_path):
    from workbench.train.convergence import STAGES

    stage = STAGES[2]
    assert stage.planned_seeds == tuple(range(100, 124)) and not set(stage.seeds) & set(PLAN_SEEDS)
    assert all(not r.rerun for r in plan_runs(stage.seeds, RECIPES, rerun=False))
    first, second = tmp_path / "stage1", tmp_path / "stage2"
    for folder, seeds in ((first, PLAN_SEEDS), (second, stage.seeds)):
        (folder / "metrics").mkdir(parents=True)
        for s in seeds:
            for name, c in ((run_name("bf16", s), curve(tau=30 + s % 8)),
                            (run_name("rowwise_with_gw_hp", s), curve(tau=30 + s % 8, floor=0.2505))):
                (folder / "metrics" / f"{name}.json").write_text(json.dumps(_metrics(c)))
    proc = script("--analyze", str(second), "--stage", "2", "--with", str(first))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((second / "summary.json").read_text())
    judged = summary["recipes"]["rowwise_with_gw_hp"]
    assert summary["confidence"] == 0.975 and judged["intervals"]["r"]["n"] == 24 and judged["status"] == "agree"
    assert "PLAN_STAGE2.md" in (second / "REPORT.md").read_text() and "97.5%" in (second / "REPORT.md").read_text()
    assert script("--analyze", str(second), "--stage", "2").returncode == 0
    summary = json.loads((second / "summary.json").read_text())
    assert summary["recipes"]["rowwise_with_gw_hp"]["status"] == "incomplete"
    proc = script("--analyze", str(second), "--stage", "2", "--with", str(second))
    assert proc.returncode != 0 and "in one folder" in proc.stderr
