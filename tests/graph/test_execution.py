"""The reference job's extra ops: eager blocks, its loss, FSDP2 on one GPU, fp8 quantization, DLRM's sparse path."""

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.execution import (
    FP8_QUANTIZE,
    RMSNORM_BWD,
    RMSNORM_FWD,
    Execution,
    fp8_linear_quantize,
    traffic,
)
from workbench.graph.ops import MEMORY_BOUND_KINDS
from workbench.predict import predict

CFG = TrainingConfig(2, 4096, "bf16", Parallelism(dp=1, sharding="fsdp"))


def _kinds(p) -> dict[str, float]:
    out: dict[str, float] = {}
    for o in p.ops:
        out[o.op.kind] = out.get(o.op.kind, 0.0) + o.total_s
    return out


def test_without_execution_the_fused_step_is_unchanged():
    a = predict("llama3.2-1b", "h200", CFG)
    b = predict("llama3.2-1b", "h200", CFG, execution=None)
    assert a.summary.step_time_s == b.summary.step_time_s
    assert not any(o.op.kind in ("fsdp", "fp8_quantize") for o in a.ops)


def test_eager_predicts_more_than_compiled_and_compiled_more_than_fused():
    fused = predict("llama3.2-1b", "h200", CFG).summary.step_time_s
    compiled = predict("llama3.2-1b", "h200", CFG, execution=Execution(compile=True)).summary.step_time_s
    eager = predict("llama3.2-1b", "h200", CFG, execution=Execution(compile=False)).summary.step_time_s
    assert fused < compiled < eager


def test_eager_norm_and_swiglu_are_the_jobs_fp32_passes():
    assert traffic(RMSNORM_FWD) == 46 and traffic(RMSNORM_BWD) == 100  # bytes per [T, h] element
    p = predict("llama3.2-1b", "h200", CFG, execution=Execution(compile=False))
    norm_kernels = [o for o in p.ops if o.op.name.startswith("attn_norm.")]
    assert len(norm_kernels) == len(RMSNORM_FWD) + len(RMSNORM_BWD)  # one op per CUDA kernel
    assert all(o.op.kind in MEMORY_BOUND_KINDS for o in p.ops if o.op.kind not in ("gemm", "attention"))
    # a triton swiglu / rmsnorm is one fused kernel again
    triton = predict("llama3.2-1b", "h200", CFG,
                     execution=Execution(compile=False, triton_ops=frozenset({"swiglu", "rmsnorm"})))
    assert _kinds(triton)["swiglu"] < _kinds(p)["swiglu"] / 5
    assert _kinds(triton)["rmsnorm"] < _kinds(p)["rmsnorm"] / 5


def test_fsdp_on_one_gpu_adds_per_parameter_traffic():
    p = predict("llama3.2-1b", "h200", CFG, execution=Execution())
    fsdp = [o for o in p.ops if o.op.layer == "fsdp"]
    assert fsdp and not p.comms  # no collective on one rank, but the copies run
    moved = sum(o.op.bytes * o.executions for o in fsdp)
    params = p.model.num_params
    assert 30 * params < moved < 50 * params  # ~44 B per parameter (casts, copy-outs, chunk_cat)
    ddp = predict("llama3.2-1b", "h200", TrainingConfig(2, 4096, "bf16", Parallelism(dp=1, sharding="ddp")),
                  execution=Execution())
    assert not any(o.op.layer == "fsdp" for o in ddp.ops)


def test_fp8_quantize_covers_all_three_gemms_and_scales_with_tokens_x_hidden():
    m, n, k = 8192, 2048, 2048
    ops = fp8_linear_quantize("o_proj", m, n, k, count=1, layer="attention")
    operands = {o.name.split(".quantize_fp8")[0] for o in ops}
    assert operands == {f"o_proj.{x}" for x in ("fwd.x", "fwd.w", "dgrad.dy", "dgrad.w", "wgrad.dy_t", "wgrad.x")}
    per_element = traffic(FP8_QUANTIZE)
    total = sum(o.bytes for o in ops)
    expected = per_element * (2 * m * k + 2 * m * n + 2 * n * k) + 2 * (n * k + m * n + m * k)  # + K-major copies
    assert total == pytest.approx(expected, rel=1e-3)  # launch-only kernels on the [rows, 1] scales add a little
    double = sum(o.bytes for o in fp8_linear_quantize("o_proj", 2 * m, n, k, count=1, layer="attention"))
    assert double - total == pytest.approx(total - sum(
        o.bytes for o in fp8_linear_quantize("o_proj", 0, n, k, count=1, layer="attention")), rel=1e-3)

    cfg = TrainingConfig(4, 4096, "fp8", Parallelism(dp=1, sharding="fsdp"))
    job = predict("llama3.2-1b", "h200", cfg, execution=Execution(compile=False))
    assert _kinds(job)["fp8_quantize"] > 10 * sum(o.total_s for o in predict("llama3.2-1b", "h200", cfg).ops
                                                 if "cast_fp8" in o.op.name)


def test_dlrm_job_updates_tables_in_the_optimizer_step():
    cfg = TrainingConfig(32768, precision="bf16", parallelism=Parallelism(dp=1, sharding="ddp"))
    fused = predict("dlrm-dcnv2", "h200", cfg)
    job = predict("dlrm-dcnv2", "h200", cfg, execution=Execution())
    adagrad = [o for o in job.ops if o.op.name.startswith("rowwise_adagrad")]
    assert adagrad and all(o.op.phase == "optimizer" for o in adagrad)
    assert job.summary.optimizer_s > 10 * fused.summary.optimizer_s
    assert job.summary.step_time_s > fused.summary.step_time_s


def test_dlrm_job_looks_up_each_bag_once_with_either_kernel():
    cfg = TrainingConfig(32768, precision="bf16", parallelism=Parallelism(dp=1, sharding="ddp"))
    for triton_ops, efficiency in ((frozenset(), "torch"), (frozenset({"embedding_bag"}), "triton")):
        job = predict("dlrm-dcnv2", "h200", cfg, execution=Execution(triton_ops=triton_ops))
        lookups = [o.op for o in job.ops if o.op.phase == "fwd" and o.op.kind == "embedding"]
        assert [op.extra.get("gather") for op in lookups] == [efficiency]


def test_eager_dlrm_runs_the_cross_layers_unfused_with_autocast_casts():
    from workbench.models import get_model

    m = get_model("dlrm-dcnv2")
    cfg = TrainingConfig(16384, precision="bf16", parallelism=Parallelism(dp=1, sharding="ddp"))
    compiled = predict(m, "h200", cfg, execution=Execution(compile=True))
    eager = predict(m, "h200", cfg, execution=Execution(compile=False))
    names = [o.op.name for o in eager.ops]
    # x_l read by the next down projection and its + x (1 add each), x0 also by every layer's product
    assert sum(n.startswith("interaction.grad_accumulate") for n in names) == 2 * m.cross_layers
    assert not any(n.startswith("interaction.x0_grad") for n in names)
    # autocast: every weight and bias cast to bf16 in forward and its gradient back in backward
    params = 2 * len(m.mlp_layers()) - m.cross_layers  # CrossLayer.down has no bias
    assert sum(n.endswith(".autocast.to_bf16") for n in names) == params
    assert sum(".grad_to_fp32" in n for n in names) == params
    assert not any("autocast" in o.op.name for o in compiled.ops)
    assert any(o.op.name.startswith("interaction.x0_grad") for o in compiled.ops)
    for p in (compiled, eager):  # both: the loss and the MLPs' bias gradients (the cross layers' in eager's bwd)
        assert any(o.op.name.startswith("loss.") for o in p.ops)
        assert any(o.op.name == "top_mlp.0.bias_grad.column_sum" for o in p.ops)
    assert eager.summary.step_time_s > compiled.summary.step_time_s


def test_unvectorized_and_transposing_kernels_run_slower():
    from workbench.graph.execution import kernels
    from workbench.hardware import get_gpu
    from workbench.perf import op_time
    from workbench.perf.efficiency import constants_for

    gpu = get_gpu("h200")
    c = constants_for(gpu)
    e = 1 << 26
    vec, unvec, transpose = (kernels("x", "copy", (("k", 2, 2, path),), e, phase="fwd", dtype="bf16")[0]
                             for path in (True, False, "transpose"))
    t = [op_time(o, gpu, c).time_s for o in (vec, unvec, transpose)]
    assert t[0] < t[1] < t[2]


def test_fp8_with_bf16_wgrad_quantizes_for_forward_and_dgrad_only():
    m, n, k = 8192, 2048, 2048
    ops = fp8_linear_quantize("o_proj", m, n, k, count=1, layer="attention", wgrad_fp8=False)
    assert {o.name.split(".quantize_fp8")[0] for o in ops} == {f"o_proj.{x}" for x in
                                                                ("fwd.x", "fwd.w", "dgrad.dy", "dgrad.w")}
    cfg = TrainingConfig(4, 4096, "fp8_gw_hp", Parallelism(dp=1, sharding="fsdp"))
    job = predict("llama3.2-1b", "h200", cfg, execution=Execution(compile=False))
    assert not any(".wgrad." in o.op.name for o in job.ops if o.op.kind == "fp8_quantize")
    full = predict("llama3.2-1b", "h200", TrainingConfig(4, 4096, "fp8", Parallelism(dp=1, sharding="fsdp")),
                   execution=Execution(compile=False))
    assert _kinds(job)["fp8_quantize"] < _kinds(full)["fp8_quantize"]
