"""benchmarks/kernels/host_overhead.py --cpu: every wrapper runs its GPU code path on CPU tensors with stubbed
launches (in a fresh interpreter: it replaces module attributes), records its launches and is timed against them."""

import csv
import os
import subprocess
import sys
from pathlib import Path

from workbench.kernels.attention_gluon import HAS_GLUON

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "host_overhead.py"


def test_cpu_mode_times_every_wrapper_above_its_launches(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--out", str(tmp_path), "--calls", "30",
                             "--rounds", "1", "--label", "test"], env=env, capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "host_overhead.csv").open()))
    assert not [r for r in rows if r["error"]], [r["error"] for r in rows if r["error"]]
    kernels = {r["kernel"] for r in rows}
    assert {"gemm", "gemm_tma", "gemm_gluon", "attention", "dispatch", "floor"} <= kernels
    launches = {r["case"]: int(r["launches"]) for r in rows}
    assert launches["gemm bf16, config=None (selector)"] == 1
    assert launches["scaled_matmul fp8 row scales, Gluon config"] == 1
    assert launches["flash_attention forward (no grad)"] == 1
    assert launches["flash_attention forward + backward (autograd)"] == 3  # fwd, dQ (computes delta), dK/dV
    gluon = "flash_attention forward + backward (autograd), Gluon path"
    if HAS_GLUON:  # the persistent forward; the backward's preprocessing, kernel and conversion
        assert launches[gluon] == 4 and "attention_gluon" in kernels
    assert all(float(r["wrapper_us"]) > 0 for r in rows)
    assert "the wrapper's own share" in (tmp_path / "host_overhead.md").read_text()
