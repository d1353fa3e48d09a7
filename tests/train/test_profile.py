"""workbench.trace and workbench.train.profile_classes, the analysis benchmarks/train/train_profile.py runs: kernel
classes from a hand-made CUDA trace, the model's prediction in the same classes, and a tiny recipe profiled end to
end on the CPU by the script itself (where classes are CPU ops' self times)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.trace import CLASSES, busy_us, classify, kernel_rows, measured_by_class, read_trace
from workbench.train.profile_classes import predicted_by_class

REPO = Path(__file__).resolve().parents[2]


def _host(name, tid, ts, dur, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(tid, ts, corr, cat="cuda_runtime"):
    return _host("cudaLaunchKernel" if cat == "cuda_runtime" else "cuLaunchKernel", tid, ts, 1, cat, correlation=corr)


def _kernel(name, ts, dur, corr, cat="kernel", stream=7):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def cuda_trace() -> dict:
    """One step as kineto writes it: forward on thread 1, backward on the autograd thread 2, kernels on a stream."""
    events = [
        _host("train.forward", 1, 0, 100, "user_annotation"),
        _host("RMSNormFunction", 1, 10, 20), _host("aten::mul", 1, 12, 8), _launch(1, 13, 1),
        _host("aten::mm", 1, 40, 10), _launch(1, 41, 2),
        _host("CompiledFunction", 1, 55, 10), _launch(1, 56, 4, "cuda_driver"),
        _host("workbench_train::fp8_matmul", 1, 70, 20), _host("aten::amax", 1, 71, 5), _launch(1, 72, 5),
        _launch(1, 80, 6, "cuda_driver"),
        _host("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", 2, 120, 40),
        _host("aten::_scaled_dot_product_flash_attention_backward", 2, 121, 38), _launch(2, 122, 3),
        _launch(2, 130, 7),
        _host("train.optimizer", 1, 200, 50, "user_annotation"), _host("Optimizer.step#AdamW.step", 1, 201, 40),
        _host("aten::_fused_adamw_", 1, 202, 30), _launch(1, 203, 8),
        _kernel("void at::native::vectorized_elementwise_kernel<4, MulFunctor>", 1000, 10, 1),
        _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 1005, 50, 2),  # overlaps the last
        _kernel("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", 1100, 5, 4),
        _kernel("void at::native::reduce_kernel<512, 1>", 1110, 3, 5),
        _kernel("_gemm_kernel", 1120, 20, 6),
        _kernel("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 1200, 40, 3),
        _kernel("Memcpy DtoD (Device -> Device)", 1250, 2, 7, cat="gpu_memcpy"),
        _kernel("void multi_tensor_apply_kernel<FusedAdamWMathFunctor>", 1300, 30, 8),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "train.forward", "pid": 0, "tid": 7, "ts": 990, "dur": 500},
    ]
    return {"traceEvents": events}


def test_cuda_kernels_get_their_class_phase_and_launching_op():
    events, on_device = read_trace(cuda_trace())
    assert on_device and len(events) == 8  # the device-side annotation range is not a kernel
    got = {e.name.split("<")[0].split("_tilesize")[0]: (e.klass, e.phase, e.launch_op) for e in events}
    assert got["void at::native::vectorized_elementwise_kernel"] == ("norm", "fwd", "aten::mul")
    assert got["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"][:2] == ("gemm", "fwd")
    assert got["triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"][0] == "norm"
    assert got["void at::native::reduce_kernel"][0] == "fp8_quantize"
    assert got["_gemm_kernel"][0] == "gemm"  # the fp8 GEMM itself, inside the fp8 op
    assert got["flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"][:2] == ("attention_bwd", "bwd")
    assert got["Memcpy DtoD (Device -> Device)"][0] == "copy_cast"
    assert got["void multi_tensor_apply_kernel"][:2] == ("optimizer", "optimizer")
    assert busy_us(events) == pytest.approx(55 + 5 + 3 + 20 + 40 + 2 + 30)  # 1000..1055 counted once
    by_class = measured_by_class(events, steps=1)
    assert by_class["gemm"]["fwd"] == pytest.approx((50 + 20) / 1e3)
    rows = kernel_rows(events, steps=1)
    assert rows[0]["name"].startswith("sm90_xmma") and rows[0]["count_per_step"] == 1


@pytest.mark.parametrize("name, frames, expected", [
    ("ncclDevKernel_AllGather_RING_LL", (), "communication"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", ("aten::_efficient_attention_forward",), "attention_fwd"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", ("aten::mm",), "gemm"),
    ("triton_poi_fused_cat_mul_sub_3", (), "rope"),
    ("triton_poi_fused_mul_silu_5", (), "activation"),
    ("triton_poi_fused_add_7", (), "fused"),
    ("void at::native::elementwise_kernel", ("aten::mul", "workbench/train/llama.py(31): apply_rope"), "rope"),
    ("void at::native::elementwise_kernel", ("aten::copy_", "aten::_to_copy", "aten::to"), "copy_cast"),
    ("void at::native::elementwise_kernel", ("aten::add",), "elementwise"),
    ("void at::native::indexing_backward_kernel", ("aten::embedding_dense_backward",), "embedding_bwd"),
    ("void at::native::elementwise_kernel", ("aten::copy_", "aten::_foreach_copy_", "FSDP::all_gather_copy_in"),
     "fsdp"),
    ("aten::mm", ("aten::mm", "workbench_train::fp8_matmul"), "gemm"),  # CPU emulation of the fp8 GEMM
    ("something_new", (), "other"),
])
def test_classify_rules(name, frames, expected):
    assert classify(name, frames) == expected


def test_prediction_splits_into_classes_that_add_up_to_the_step():
    from workbench.config import TrainingConfig
    from workbench.predict import predict

    for model, cfg in (("llama3.2-1b", TrainingConfig(2, 4096, activation_checkpointing="full")),
                       ("dlrm-dcnv2", TrainingConfig(4096))):
        p = predict(model, "h200-sxm", cfg)
        by_class = predicted_by_class(p)
        assert set(by_class) <= set(CLASSES)
        total = sum(sum(phases.values()) for phases in by_class.values())
        assert total == pytest.approx(p.summary.step_time_s * 1e3, rel=1e-6)


def test_tiny_recipe_profiles_on_the_cpu(tiny_recipe, tmp_path):
    recipe = tiny_recipe("tiny-eager")
    out = tmp_path / "profile"
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "train" / "train_profile.py"), "--recipe", str(recipe), "--out", str(out),
         "--device", "cpu", "--in-process", "--warmup", "1", "--timed", "1", "--steps", "2", "--stack", "off"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TRITON_INTERPRET": "0"})
    assert result.returncode == 0, result.stderr[-4000:]
    for suffix in ("_kernels.csv", "_classes.csv", "_trace.json.gz", "_summary.json"):
        assert (out / f"tiny-eager{suffix}").stat().st_size > 0
    with open(out / "tiny-eager_classes.csv") as f:
        classes = {r["class"]: r for r in csv.DictReader(f)}
    for name in ("gemm", "attention_fwd", "attention_bwd", "norm", "optimizer", "step_wall", "busy", "idle_gap"):
        assert name in classes, sorted(classes)
    assert float(classes["gemm"]["measured_ms"]) > 0 and float(classes["gemm"]["predicted_ms"]) > 0
    assert "tiny-eager" in (out / "REPORT.md").read_text()
