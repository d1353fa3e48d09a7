"""benchmarks/train_proof.py --quick: the whole H200 proof script, shrunk to tiny models on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    assert summary["fp8"]["status"] in ("agree", "disagree") and summary["fp8"]["fp8_backend"] == "emulated"
    assert summary["fp8"]["noise_status"] in ("within", "outside") and summary["fp8"]["seed_max_relative_difference"] > 0
    assert (tmp_path / "fp8_vs_bf16.csv").read_text().splitlines()[0] == "step,loss_bf16,loss_fp8,loss_bf16_seed1"
    for name in ("REPORT.md", "results.csv", "fp8_vs_bf16.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "port vs co-designed" in proc.stdout
