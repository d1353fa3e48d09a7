"""benchmarks/train/multi_gpu_proof.py and workbench.train.nccl_overlap: NCCL interval arithmetic on hand-made traces,
the dry run's recipes, predictions and plan, and the whole script on a tiny recipe on the CPU (torchrun on gloo)."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from workbench.recipe import load_recipe
from workbench.train.nccl_overlap import (
    Activity,
    covered_length,
    device_activity,
    merge_intervals,
    nccl_overlap,
    uncovered_length,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "train" / "multi_gpu_proof.py"


@pytest.fixture(scope="module")
def multi_gpu_proof():
    """The script as a module, loaded from its file (not through sys.path): its plan, recipes and report, and its
    ``main`` with the model constants patched to a tiny recipe (no CLI option sets them)."""
    name = "benchmarks_multi_gpu_proof"  # a name no import statement uses; its dataclasses look it up
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def test_interval_union_and_difference():
    assert merge_intervals([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]
    assert covered_length([(0, 2), (1, 3), (5, 8)]) == 6
    assert uncovered_length([(0, 10)], [(2, 3), (5, 12)]) == 2 + 2
    assert uncovered_length([(0, 2), (4, 6)], [(1, 5)]) == 1 + 1
    assert uncovered_length([(0, 2)], []) == 2 and uncovered_length([], [(0, 1)]) == 0
    assert uncovered_length([(0, 4)], [(0, 1), (0, 2), (3, 4)]) == 1  # overlapping covers merged first


def _kernel(name, ts, dur, stream, pid=0, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": stream, "ts": ts, "dur": dur}


def test_nccl_time_not_overlapped_by_other_work_on_the_same_gpu():
    trace = {"traceEvents": [
        _kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0, 100, 20),
        _kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 60, 100, 7),            # hides the all-gather's last 40 us
        _kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 150, 50, 21),  # 10 us under the GEMM
        _kernel("Memcpy DtoD (Device -> Device)", 190, 5, 7, cat="gpu_memcpy"),
        _kernel("ncclDevKernel_AllGather_RING_LL", 0, 500, 20, pid=1),      # another GPU: not this one's
        {"ph": "X", "cat": "gpu_user_annotation", "name": "train.step#0", "pid": 0, "tid": 7, "ts": 0, "dur": 300},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 1, "ts": 0, "dur": 10},
    ]}
    activity = device_activity(trace)
    assert len(activity) == 5 and sum(a.nccl for a in activity) == 3
    one = nccl_overlap([a for a in activity if a.device == "0"], steps=2)
    assert one["nccl_kernel_ms"] == pytest.approx(150e-3 / 2)
    assert one["nccl_busy_ms"] == pytest.approx(150e-3 / 2)
    assert one["nccl_exposed_ms"] == pytest.approx((60 + 35) * 1e-3 / 2)  # 0-60 and 160-190, 195-200
    assert one["device_busy_ms"] == pytest.approx(200e-3 / 2) and one["nccl_kernels"] == 1.0
    assert one["nccl_all_gather_ms"] == pytest.approx(0.05) and one["nccl_reduce_scatter_ms"] == pytest.approx(0.025)
    assert one["nccl_all_reduce_ms"] == one["nccl_other_ms"] == 0.0
    # with both GPUs in the trace, the one with the most NCCL time is read
    assert nccl_overlap(activity, steps=1)["nccl_kernel_ms"] == pytest.approx(0.5)
    empty = nccl_overlap([], steps=3)
    assert empty["nccl_kernel_ms"] == empty["nccl_exposed_ms"] == 0.0
    with pytest.raises(ValueError, match="steps"):
        nccl_overlap([Activity("k", 0, 1, "0", "7")], steps=0)


def test_dry_run_prints_predictions_and_the_plan(multi_gpu_proof, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--work", str(work), "--dry-run"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    plan = [line for line in text.splitlines() if line.startswith("[multi] plan ")]
    assert [line.split()[2].rstrip(":") for line in plan] == [
        "eager_job1", "eager_job2", "eager_profile2", "compiled_job1", "compiled_job2", "compiled_profile2"]
    assert "torch.distributed.run" in plan[1] and "--profile-worker" in plan[2] and "torch.distributed" not in plan[0]
    recipes = [f"{m}_fsdp{g}.yaml" for m in ("compiled", "eager") for g in (1, 2)]
    assert sorted(p.name for p in work.iterdir()) == recipes
    assert "| eager | 2 | - (not run) |" in text and not list(out.iterdir())  # nothing run, nothing written
    predictions = {m: {g: {kind: multi_gpu_proof.prediction_summary(multi_gpu_proof.recipe_for(m, g), kind == "job")
                           for kind in ("recipe", "job")} for g in (1, 2)} for m in ("eager", "compiled")}
    for by_gpus in predictions.values():
        assert by_gpus[1]["job"]["exposed_comm_ms"] == by_gpus[1]["job"]["total_comm_ms"] == 0
        two = by_gpus[2]["job"]
        assert 0 < two["exposed_comm_ms"] < two["total_comm_ms"]
        assert two["exposed_comm_ms"] == pytest.approx(by_gpus[2]["recipe"]["exposed_comm_ms"])  # same edges
    assert predictions["eager"][1]["job"]["step_ms"] > predictions["compiled"][1]["job"]["step_ms"]
    assert multi_gpu_proof.plan_runs(("eager",), 2, profile=False) == [
        multi_gpu_proof.Run("eager", 1, "job"), multi_gpu_proof.Run("eager", 2, "job")]


def test_communication_difference_method(multi_gpu_proof):
    predictions = {"eager_1": {"job": {"optimizer_ms": 20.0, "step_ms": 300.0, "exposed_comm_ms": 0.0,
                                       "total_comm_ms": 0.0, "peak_gb": 60.0}},
                   "eager_2": {"job": {"optimizer_ms": 10.0, "step_ms": 305.0, "exposed_comm_ms": 12.0,
                                       "total_comm_ms": 30.0, "peak_gb": 40.0}}}
    results = {"eager_job1": {"metrics": {"measured": {"step_time_s": 0.320}}},
               "eager_job2": {"metrics": {"measured": {"step_time_s": 0.330}}},
               "eager_profile2": {"profile": {"nccl_kernel_ms": 33.0, "nccl_busy_ms": 31.0, "nccl_exposed_ms": 14.0,
                                              "device_busy_ms": 300.0, "step_ms": 331.0}}}
    c = multi_gpu_proof.communication("eager", 2, predictions, results)
    assert c["measured_difference_ms"] == pytest.approx(330 - 320 + 10)
    assert c["predicted_difference_ms"] == pytest.approx(305 - 300 + 10)
    assert c["measured_nccl_exposed_ms"] == 14.0 and c["predicted_exposed_ms"] == 12.0
    report = multi_gpu_proof.report(type("Args", (), {"gpus": 2, "steps": 10, "warmup": 3})(), ("eager",),
                                    {**predictions, **{k: {**v, "recipe": v["job"]} for k, v in predictions.items()}},
                                    results)
    assert "| eager | 20.0 | 15.0 | 33.0 | 30.0 | 14.0 | 12.0 | 31.0 | 331.0 |" in report
    assert "measured_difference_ms" not in multi_gpu_proof.communication("eager", 2, predictions, {})


def test_whole_script_on_a_tiny_recipe_on_the_cpu(multi_gpu_proof, tiny_recipe, tmp_path, monkeypatch):
    """Eager only (inductor needs a compiler): one-process job, torchrun job and torchrun profile pass on gloo."""
    monkeypatch.setattr(multi_gpu_proof, "OVERRIDES", dict(load_recipe(tiny_recipe()).model.overrides))
    monkeypatch.setattr(multi_gpu_proof, "SEQ", 64)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    out = tmp_path / "out"
    code = multi_gpu_proof.main(["--out", str(out), "--work", str(tmp_path / "work"), "--compile", "off",
                                 "--steps", "2", "--warmup", "1", "--profile-steps", "1", "--budget-s", "400"])
    data = json.loads((out / "multi_gpu.json").read_text())
    assert code == 0, {k: v.get("status") for k, v in data["runs"].items()}
    assert sorted(p.name for p in out.iterdir()) == ["MULTI_GPU.md", "logs.tar.gz", "multi_gpu.json"]
    profile = data["runs"]["eager_profile2"]["profile"]
    assert profile["world_size"] == 2 and profile["step_ms"] > 0 and profile["nccl_kernel_ms"] == 0.0  # no CUDA
    job2 = data["runs"]["eager_job2"]["metrics"]
    assert job2["world_size"] == 2 and "predicted_job" in job2 and "relative_error_job" in job2
    assert "measured_difference_ms" in data["communication"]["eager"]
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"logs/eager_job2.log", "logs/eager_profile2_profile.json", "logs/eager_fsdp2.yaml"} <= names
    assert "| eager | 2 |" in (out / "MULTI_GPU.md").read_text()
