"""benchmarks/kernels/attention_autograd_host_probe.py --dry-run: every case and phase runs on CPU tensors, and
--tree imports workbench from the checkout it names."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernels" / "attention_autograd_host_probe.py"


def test_the_dry_run_times_every_case_and_splits_ours_into_its_phases(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--ids", "a05", "--tree", str(ROOT),
                             "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["environment"]["tree"] == str(ROOT)
    (shape,) = report["shapes"]
    assert shape["id"] == "a05" and not shape["errors"], shape["errors"]
    assert {"ours fwd_bwd", "ours fwd_grad", "null fwd_bwd", "ours bwd_direct", "dq launch"} <= set(shape["host_us"])
    phases = shape["ours_phases_us"]
    assert set(phases) == {"before_forward", "forward", "forward_to_backward", "backward", "after_backward", "total"}
    assert all(value >= 0 for value in phases.values())
    assert sum(v for k, v in phases.items() if k != "total") <= phases["total"] * 1.01  # the parts of one call
    assert "ours fwd_bwd phases" in (tmp_path / "probe.txt").read_text()
