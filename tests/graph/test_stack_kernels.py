"""workbench.graph.stack_kernels tables, torchtitan's checkpointing policies, and stack_check's kernel classes."""

import dataclasses

import pytest

from workbench import trace
from workbench.graph.stack_kernels import (
    Dims,
    block_ops,
    pytorch_flavor,
    recompute_ops,
    stack_step_ops,
    torchtitan_flavor,
)
from workbench.models import get_model
from workbench.stack_check import CLASSES, COARSE_CLASSES, classify, compare

# a small hand-countable shape: 2 x 4 tokens, hidden 16, 4 heads of 4 (2 kv heads), ffn 32
D = Dims(tokens=8, seq=4, batch=2, hidden=16, q=16, kv=8, ffn=32, vocab=64, heads=4, kv_heads=2, head_dim=4, layers=3)


def _bytes(ops, prefix, phase="fwd"):
    return sum(o.bytes * o.count for o in ops if o.name.startswith(prefix) and o.phase == phase)


def test_swiglu_and_norm_bytes_by_hand():
    fwd, bwd = block_ops(D, pytorch_flavor("fp32"))
    # silu reads 2 B, writes 2 B; the product reads 4 B (two bf16), writes 2 B: 10 B per [T, f] element, 3 layers
    assert _bytes(fwd, "swiglu") == 10 * 8 * 32 * 3
    # F.rms_norm under autocast runs in fp32 on the fp32 stream: 4 B in, 4 B out per [T, h] element
    assert _bytes(fwd, "attn_norm") == 8 * 8 * 16 * 3
    # its backward: grad_input reads dy and x, writes dx (12 B); grad_weight reads dy and x (8 B)
    assert _bytes(bwd, "attn_norm", "bwd") == 20 * 8 * 16 * 3
    # with bf16 parameters: 2 B in, 2 B out
    fwd_bf16, _ = block_ops(D, pytorch_flavor("bf16"))
    assert _bytes(fwd_bf16, "attn_norm") == 4 * 8 * 16 * 3


def test_autocast_weight_casts_are_6_bytes_per_parameter_per_forward():
    fwd, bwd = block_ops(D, pytorch_flavor("fp32"))
    matmul_params = sum(i * o for _, i, o in D.linears())
    casts = [o for o in fwd if o.extra.get("aten") == "cast_weight"]
    assert len(casts) == 7
    assert sum(o.bytes * o.count for o in casts) == 6 * matmul_params * D.layers
    # and their gradients go back to fp32 once, 6 B per parameter
    assert sum(o.bytes * o.count for o in bwd if ".weight_grad" in o.name) == 6 * matmul_params * D.layers
    # full checkpointing casts again in the recompute; bf16 parameters cast nothing
    again = [o for o in recompute_ops(fwd, "full", D.layers) if o.extra.get("aten") == "cast_weight"]
    assert sum(o.bytes * o.count for o in again) == 6 * matmul_params * D.layers
    assert not [o for o in block_ops(D, pytorch_flavor("bf16"))[0] if o.extra.get("aten") == "cast_weight"]


def _recomputed_mms(policy, layers=D.layers):
    fwd, _ = block_ops(D, torchtitan_flavor())
    return {o.name.split(".")[1]: o.count for o in recompute_ops(fwd, policy, layers) if o.kind == "gemm"}


def test_checkpoint_policies_follow_torchtitan():
    # _op_sac_save_list: aten.mm saved except every second one (wq, wv, w1, w2 saved); SDPA saved
    assert set(_recomputed_mms("selective-op")) == {"wk", "wo", "w3"}
    fwd, _ = block_ops(D, torchtitan_flavor())
    sac = recompute_ops(fwd, "selective-op", D.layers)
    assert not [o for o in sac if o.kind == "attention"]
    assert {o.extra["aten"] for o in sac} >= {"rms_norm", "rope", "swiglu", "cast_weight"}
    # full: every mm and the attention again, not the block's last residual add (early stop)
    assert set(_recomputed_mms("full")) == {"wq", "wk", "wv", "wo", "w1", "w3", "w2"}
    full = recompute_ops(fwd, "full", D.layers)
    assert [o for o in full if o.kind == "attention"]
    assert not [o for o in full if "mlp_residual" in o.name]
    # selective-2 over 4 layers: blocks 2 and 4 (1-based _layer_sac_count % 2 == 0) fully recomputed
    assert set(_recomputed_mms("selective-2", layers=4).values()) == {round(3 * 2 / 4)}
    assert recompute_ops(fwd, "none", D.layers) == []


@pytest.mark.parametrize("name, cls", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
     "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, true>(int, float, float "
     "const*, float const*, float const*, float*, float*, float*)", "norm"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::nat", "cast/copy"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::"
     "BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_i", "rope/elementwise"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous "
     "namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, in", "loss"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace", "optimizer"),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     "embedding"),
    ("triton_per_fused__fused_rms_norm__fused_rms_norm_backward__to_copy__unsafe_view_add_view_6", "norm"),
    ("triton_poi_fused__to_copy_t_8", "cast/copy"),
    ("triton_poi_fused__unsafe_view_mul_silu_9", "rope/elementwise"),
    ("Memset (Device)", "other"),
])
def test_classify_real_kernel_names(name, cls):
    assert classify(name) == cls


def test_coarse_classes_cover_every_trace_class():
    assert set(COARSE_CLASSES) == set(trace.CLASSES) and set(COARSE_CLASSES.values()) <= set(CLASSES)
    assert classify("ncclDevKernel_AllGather_RING_LL") == "fsdp copies"  # trace: communication


def test_compare_covers_every_kernel_of_a_row():
    model = get_model("llama3.2-1b")
    row = {"micro_batch": 1, "seq_len": 256, "param_dtype": "fp32", "compile": False, "ac": "none",
           "kernels": [{"name": "nvjet_sm90_x", "calls": 2.0, "us": 30.0}, {"name": "Memset (Device)", "calls": 1, "us": 1}]}
    rows = {r.cls: r for r in compare(model, row)}
    assert rows["gemm"].measured_us == 30.0 and rows["other"].measured_calls == 1
    assert rows["gemm"].predicted_calls == 3 * 7 * model.num_layers + 3  # 7 linears x 3 GEMMs per block + the head
    assert all(r.predicted_us >= 0 for r in rows.values())


def test_step_ops_price_every_op():
    model = dataclasses.replace(get_model("llama3-8b"), num_layers=2)
    for flavor in (pytorch_flavor("fp32"), pytorch_flavor("bf16", compile=True), torchtitan_flavor(True)):
        ops = stack_step_ops(model, 1, 512, flavor, "selective-op")
        assert ops and all(o.count >= 1 for o in ops)


# torchao float8 rowwise (torchtitan [quantize.linear.float8] recipe_name = "rowwise", filter_fqns = ["output"])
@pytest.mark.parametrize("compiled", [False, True])
def test_float8_rowwise_linears_run_fp8_gemms_and_keep_no_bf16_weight_copy(compiled):
    fwd, bwd = block_ops(D, torchtitan_flavor(compiled, "rowwise"))
    gemms = [o for o in fwd + bwd if o.kind == "gemm"]
    assert len(gemms) == 3 * 7 and {o.dtype for o in gemms} == {"fp8"}  # fwd, dgrad and wgrad of 7 linears
    assert not [o for o in fwd if o.extra.get("aten") == "cast_weight"]  # torchao casts the fp32 weight itself
    # the wgrad's bf16 output still goes to the fp32 parameter's gradient
    assert len([o for o in bwd if o.name.endswith(".weight_grad.to_fp32")]) == 7
    bf16_fwd, _ = block_ops(D, torchtitan_flavor(compiled))
    assert {o.dtype for o in bf16_fwd if o.kind == "gemm"} == {"bf16"}


def test_float8_eager_casts_by_hand():
    fwd, bwd = block_ops(D, torchtitan_flavor(False, "rowwise"))
    # wq's forward casts: x [8, 16] bf16 (abs 4 B, amax 2, upcast 6, * scale 8, clamp 8, to e4m3 5 = 33 B) and its
    # fp32 weight [16, 16] (abs 8, amax 4, * scale 8, clamp 8, to e4m3 5 = 33 B), 3 layers; plus the 7 launch-only
    # scale kernels over the [rows, 1] amax (8 B per row: x's 8 token rows, W^T's 16 output rows)
    assert _bytes(fwd, "wq.x.fp8") == (33 * 8 * 16 + 7 * 8 * 8) * 3
    assert _bytes(fwd, "wq.w.fp8") == (33 * 16 * 16 + 7 * 8 * 16) * 3
    # backward: dy along -1, and the three transposed operands each with its K-major copy (2 B per element)
    copies = [o for o in bwd if o.name.startswith("wq.") and o.name.endswith("k_major_copy")]
    assert len(copies) == 3 and all(o.extra.get("transpose") for o in copies)
    assert _bytes(bwd, "wq.dy_t.fp8", "bwd") == ((33 + 2) * 8 * 16 + 7 * 8 * 16) * 3  # dy [8, 16] scaled per column


def test_float8_compiled_recompute_follows_the_partitioner():
    fwd, _ = block_ops(D, torchtitan_flavor(True, "rowwise"))
    full = recompute_ops(fwd, "full", D.layers)
    # full AC: w2's forward (GEMM and casts) feeds only the residual add and is never rerun
    assert not [o for o in full if o.name.startswith("recompute.w2.")]
    assert [o for o in full if o.name.startswith("recompute.w1.")]
    sel = {o.name for o in recompute_ops(fwd, "selective-op", D.layers)}
    # per-op SAC saves wq, wv, w1, w2's outputs: their weight casts are not rerun; wq's input cast feeds wk: rerun
    assert "recompute.wk.fwd" in sel and "recompute.wq.fwd" not in sel
    assert "recompute.wq.w.fp8.fp8_weight_row_cast" not in sel and "recompute.wk.w.fp8.fp8_weight_row_cast" in sel
    assert "recompute.wq.x.fp8.fp8_row_cast" in sel and "recompute.w2.x.fp8.fp8_row_cast" not in sel


def test_launches_split_flops_as_they_split_bytes():
    """``_k(..., launches=n)``: each of the n kernels does 1/n of the work, FLOPs as well as bytes (the megatron
    optimizer's 21M-element chunks once carried the whole parameter count's FLOPs each: ~1 ms a chunk at 70B)."""
    from workbench.graph.stack_kernels import _k

    table = (("scale", 4, 4, True),)
    whole = _k("clip", "optimizer", table, 1_000_000, "optimizer", 1, "optimizer", "grad_clip")[0]
    split = _k("clip", "optimizer", table, 1_000_000, "optimizer", 1, "optimizer", "grad_clip", launches=10)[0]
    assert split.count == 10 * whole.count
    assert split.flops * 10 == pytest.approx(whole.flops)
    assert split.bytes * 10 == pytest.approx(whole.bytes)
