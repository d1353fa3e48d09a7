"""benchmarks/train_proof.py --quick: the whole H200 proof script, shrunk to tiny models on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from train_proof_report import FP8_TOLERANCE, fp8_result, step_lags


def test_quick_proof_writes_every_output(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "benchmarks/train_proof.py", "--quick", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["ok"] * len(summary["runs"]), summary["runs"]
    assert len(summary["predictions"]) >= 6
    assert all(r["measured_step_s"] > 0 and r["predicted_step_s_calibrated"] > 0 for r in summary["predictions"])
    assert summary["port"]["measured_ratio"] > 0
    fp8 = summary["fp8"]
    assert fp8["status"] in ("agree", "disagree") and fp8["seed_max_relative_difference"] > 0
    assert list(fp8["recipes"]) == ["rowwise", "rowwise_with_gw_hp"]  # the report's order, both recipes ran
    for verdict in fp8["recipes"].values():
        assert verdict["fp8_backend"] == "emulated" and verdict["noise_status"] in ("within", "outside")
        assert verdict["policy_status"] in ("agree", "disagree") and len(verdict["seed_max_relative_differences"]) == 2
    assert (tmp_path / "fp8_vs_bf16.csv").read_text().splitlines()[0] == (
        "step,loss_bf16,loss_bf16_seed1,loss_fp8,loss_fp8_seed1,loss_fp8_gw_hp,loss_fp8_gw_hp_seed1,loss_fp8_emulated")
    assert set(fp8["comparisons"]) == {"rowwise vs bf16 (seed 0)", "rowwise vs bf16 (seed 1)",
                                       "rowwise_with_gw_hp vs bf16 (seed 0)", "rowwise_with_gw_hp vs bf16 (seed 1)",
                                       "bf16 seed 1 vs bf16 seed 0", "rowwise emulated vs bf16 (seed 0)"}
    assert "rowwise_with_gw_hp" in (tmp_path / "REPORT.md").read_text()
    for name in ("REPORT.md", "results.csv", "fp8_vs_bf16.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "port vs co-designed" in proc.stdout


def _curve(lag: float = 0.0, noise: float = 0.0, seed: int = 0, steps: int = 300) -> list[float]:
    """A loss curve with a fast drop around step 120 (as the H200 run's), ``lag`` steps late, with batch noise."""
    import math
    import random

    rng = random.Random(seed)
    return [0.25 + 2.5 / (1 + math.exp((s - lag - 120) / 12)) + 3 * math.exp(-(s - lag) / 10) + noise * rng.gauss(0, 1)
            for s in range(steps)]


def _fp8_rows(curves: dict[str, list[float]]) -> list[dict]:
    return [{"experiment": "fp8", "name": f"small-{name}",
             "metrics": {"losses": losses, "settings": {"fp8_backend": "emulated"}, "measured": {"step_time_s": 0.1}}}
            for name, losses in curves.items()]


def test_fp8_verdict_is_the_seed_band_and_the_fixed_tolerance_is_still_reported():
    reseed = {"bf16": _curve(noise=0.005, seed=1), "bf16-seed1": _curve(lag=3, noise=0.005, seed=2)}
    # fp8 a few steps behind at both seeds, like the H200 run: outside a 3-step reseed band, and > 0 step lags
    late = fp8_result(_fp8_rows({**reseed, "fp8": _curve(lag=10, noise=0.005, seed=3),
                                 "fp8-seed1": _curve(lag=13, noise=0.005, seed=4)}))
    rowwise = late["recipes"]["rowwise"]
    assert late["status"] == "disagree" and late["agreeing"] == []
    assert rowwise["status"] == "disagree" and rowwise["noise_status"] == "outside" and rowwise["policy_status"] == "disagree"
    lags = late["comparisons"]["rowwise vs bf16 (seed 0)"]["step_lags"]
    assert all(lag > 0.03 for lag in lags), lags
    assert late["comparisons"]["rowwise vs bf16 (seed 0)"]["mean_signed_difference"] > 0
    # fp8 on bf16's curve up to batch noise: within the band at both seeds, though the fixed 3% fails where
    # the curve falls fast (a one-step shift there moves a 25-step mean by more than 3%)
    close = fp8_result(_fp8_rows({**reseed, "fp8": _curve(lag=1, noise=0.005, seed=5),
                                  "fp8-seed1": _curve(lag=4, noise=0.005, seed=6)}))
    rowwise = close["recipes"]["rowwise"]
    assert close["status"] == "agree" and rowwise["noise_status"] == "within"
    assert rowwise["max_relative_difference"] > FP8_TOLERANCE and rowwise["policy_status"] == "disagree"
    assert fp8_result(_fp8_rows({"bf16": reseed["bf16"], "fp8": reseed["bf16"]}))["status"] == "incomplete"


def test_each_fp8_recipe_is_judged_alone_by_the_same_band():
    """The miss and the fix side by side: rowwise behind at both seeds, rowwise_with_gw_hp within the band at
    both; one recipe within the band at one seed only is not an agreement."""
    reseed = {"bf16": _curve(noise=0.005, seed=1), "bf16-seed1": _curve(lag=3, noise=0.005, seed=2)}
    both = fp8_result(_fp8_rows({**reseed, "fp8": _curve(lag=10, noise=0.005, seed=3),
                                 "fp8-seed1": _curve(lag=13, noise=0.005, seed=4),
                                 "fp8-gw-hp": _curve(lag=1, noise=0.005, seed=5),
                                 "fp8-gw-hp-seed1": _curve(lag=4, noise=0.005, seed=6)}))
    assert {r: v["status"] for r, v in both["recipes"].items()} == {"rowwise": "disagree",
                                                                   "rowwise_with_gw_hp": "agree"}
    assert both["status"] == "agree" and both["agreeing"] == ["rowwise_with_gw_hp"]
    band = both["seed_max_relative_difference"]
    assert max(both["recipes"]["rowwise_with_gw_hp"]["seed_max_relative_differences"]) <= band
    one_seed = fp8_result(_fp8_rows({**reseed, "fp8-gw-hp": _curve(lag=1, noise=0.005, seed=5),
                                     "fp8-gw-hp-seed1": _curve(lag=13, noise=0.005, seed=6)}))
    assert one_seed["recipes"]["rowwise_with_gw_hp"]["status"] == "disagree" and one_seed["status"] == "disagree"
    missing = fp8_result(_fp8_rows({**reseed, "fp8-gw-hp": _curve(lag=1, noise=0.005, seed=5)}))
    assert missing["recipes"]["rowwise_with_gw_hp"]["status"] == "incomplete" and missing["status"] == "incomplete"


def test_step_lags_count_extra_steps_to_each_fraction_of_the_drop():
    base = _curve()
    assert step_lags(base, base, 25, 300) == [0.0] * 4
    assert all(lag > 0 for lag in step_lags(base, _curve(lag=10), 25, 300))
    assert all(lag < 0 for lag in step_lags(base, _curve(lag=-10), 25, 300))
