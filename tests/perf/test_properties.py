"""Property tests: every prediction is finite, positive, never below the roofline, and never slower on a GPU
with more bandwidth or more FLOP/s."""

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.graph.ops import ROW_OP_TRAFFIC, AttentionShape, attention, gemm, rows_op
from workbench.hardware import get_gpu, list_gpus
from workbench.perf import op_time
from workbench.perf.efficiency import default_constants

GPUS = [g.name for g in list_gpus()]
dims = st.integers(min_value=1, max_value=65536)


def _scaled(gpu, flops=1.0, bandwidth=1.0):
    peaks = {k: dataclasses.replace(v, value=v.value * flops) for k, v in gpu.peak_dense_tflops.items()}
    bw = dataclasses.replace(gpu.hbm_bandwidth_tb_s, value=gpu.hbm_bandwidth_tb_s.value * bandwidth)
    return dataclasses.replace(gpu, peak_dense_tflops=peaks, hbm_bandwidth_tb_s=bw)


gemm_ops = st.builds(lambda m, n, k, dtype: gemm("g", m, n, k, dtype), dims, dims, dims,
                     st.sampled_from(["bf16", "fp16", "fp32"]))
attention_ops = st.builds(
    lambda b, s, kv, group, d, causal, phase: attention(
        "a", AttentionShape(b, s, kv * group, kv, d, causal), "bf16", phase=phase),
    st.integers(1, 64), st.integers(1, 32768), st.integers(1, 16), st.integers(1, 8), st.sampled_from([64, 80, 128, 256]),
    st.booleans(), st.sampled_from(["fwd", "bwd"]))
row_ops = st.builds(lambda kind, r, c, dtype: rows_op(kind, r, c, dtype), st.sampled_from(sorted(ROW_OP_TRAFFIC)),
                    dims, dims, st.sampled_from(["bf16", "fp32"]))
any_op = st.one_of(gemm_ops, attention_ops, row_ops)


@settings(max_examples=150, deadline=None)
@given(op=any_op, gpu_name=st.sampled_from(GPUS))
def test_prediction_is_finite_positive_and_above_the_roofline(op, gpu_name):
    gpu = get_gpu(gpu_name)
    t = op_time(op, gpu, default_constants(gpu))
    assert math.isfinite(t.time_s) and t.time_s > 0
    assert t.time_s >= t.roofline_s * (1 - 1e-12)


@settings(max_examples=150, deadline=None)
@given(op=any_op, gpu_name=st.sampled_from(GPUS), factor=st.floats(1.0, 8.0))
def test_more_bandwidth_or_flops_is_never_slower(op, gpu_name, factor):
    gpu = get_gpu(gpu_name)
    c = default_constants(gpu)
    base = op_time(op, gpu, c).time_s
    assert op_time(op, _scaled(gpu, bandwidth=factor), c).time_s <= base * (1 + 1e-12)
    assert op_time(op, _scaled(gpu, flops=factor), c).time_s <= base * (1 + 1e-12)


def test_achievable_roofs_sit_under_the_datasheet():
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for
    from workbench.perf.roofline import achievable_roofs

    gpu = get_gpu("h200")
    peaks, bandwidth = achievable_roofs(gpu, constants_for(gpu, calibrated=True), ["bf16", "fp8"], "bf16")
    assert 0 < peaks["bf16"] < gpu.peak_tflops("bf16") and 0 < peaks["fp8"] < gpu.peak_tflops("fp8")
    assert 0 < bandwidth < gpu.hbm_bandwidth_tb_s.value
