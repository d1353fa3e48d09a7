"""The megatron (TE) stack's fp8 tables (workbench.graph.te_fp8); its TP overlap: tests/graph/test_te_tp_overlap.py."""

import dataclasses

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stacked import stack_tables
from workbench.models import get_model
from workbench.predict import predict
from workbench.stacks import get_stack
from workbench.validation import benchmark_model


def _cfg(precision="fp8", tp=1, pp=1, dp=1, seq=2048):
    return TrainingConfig(1, seq, precision, Parallelism(dp=dp, tp=tp, pp=pp), "none")


def _tables(precision="fp8", stack="megatron", any_layout=False, model="1b", **kw):
    tables, gap = stack_tables(benchmark_model(model), _cfg(precision, **kw), get_stack(stack), compiled=False,
                               param_dtype="bf16", fp8_any_layout=any_layout)
    assert gap is None
    return tables


def _names(ops):
    return [op.name for op in ops]


def test_fp8_is_in_the_tables_with_fp8_gemms_and_te_casts():
    p = predict(benchmark_model("1b"), "h100-sxm", _cfg(), stack="megatron")
    assert not p.summary.priced_as_bound
    ops = _tables().microbatch_ops
    block_gemms = [op for op in ops if op.kind == "gemm" and op.name.startswith("linear_")]
    assert block_gemms and all(op.dtype == "fp8" for op in block_gemms)
    assert all(op.dtype == "bf16" for op in ops if op.kind == "gemm" and op.name.startswith("output_layer"))
    names = _names(ops)
    assert "linear_qkv.dy.fp8_cast_transpose" in names and "linear_proj.x.fp8_cast_transpose" in names
    assert "input_layernorm.te_rmsnorm_fp8" in names  # delayed scaling: the norm writes fp8 itself
    assert any(n.startswith("fp8_meta.") for n in names)  # the amax / scale update per autocast region
    fp8, bf16 = (predict(benchmark_model("1b"), "h100-sxm", _cfg(x, seq=4096), stack="megatron").summary
                 for x in ("fp8", "bf16"))  # at s2048 the 1b step is host-bound: fp8's extra launches cost more
    assert fp8.step_time_s < bf16.step_time_s


def test_blackwell_writes_no_fp8_transposes():
    hopper, blackwell = _tables(), _tables(any_layout=True)
    for tables in (hopper, blackwell):
        assert any("fp8" in n for n in _names(tables.microbatch_ops))
    assert any("transpose" in n for n in _names(hopper.microbatch_ops + hopper.step_ops))
    assert not any("transpose" in n for n in _names(blackwell.microbatch_ops + blackwell.step_ops))


def _fc1_blocks(tables, dtype):
    return sum(op.count for op in tables.microbatch_ops if op.name == "linear_fc1.fwd" and op.dtype == dtype)


def test_current_scaling_reads_amax_with_every_block_fp8_as_the_performance_scripts_run_it():
    tables = _tables(stack="megatron-fp8cs")
    names = _names(tables.microbatch_ops)
    assert "linear_proj.x.amax" in names and "linear_qkv.ln_out.compute_scale" in names
    assert "input_layernorm.te_rmsnorm_fp8" not in names
    # NeMo 25.04's scripts/performance/utils.py: first_last_layers_bf16 = False for the cs recipe
    assert (_fc1_blocks(tables, "fp8"), _fc1_blocks(tables, "bf16")) == (tables.dims.layers, 0)


def test_end_blocks_in_bf16_where_the_stack_keeps_them():
    edges = dataclasses.replace(get_stack("megatron-fp8cs"), fp8_bf16_end_blocks=(1, 1))
    layers = _tables(stack="megatron-fp8cs").dims.layers
    one_stage = stack_tables(benchmark_model("1b"), _cfg(), edges, compiled=False, param_dtype="bf16")[0]
    assert (_fc1_blocks(one_stage, "fp8"), _fc1_blocks(one_stage, "bf16")) == (layers - 2, 2)
    staged = stack_tables(benchmark_model("1b"), _cfg(pp=2), edges, compiled=False, param_dtype="bf16")[0]
    assert _fc1_blocks(staged, "bf16") == 1  # the busiest stage holds one end


def test_megatron_pads_the_vocabulary_per_tensor_parallel_rank():
    megatron, model = get_stack("megatron"), get_model("gpt3-175b")  # GPT-2's 50257 tokens
    assert megatron.padded_model(model, 4).vocab_size == 50688  # 128 x 4 = 512: 99 x 512
    assert megatron.padded_model(model, 1).vocab_size == 50304
    assert get_stack("torchtitan").padded_model(model, 4) is model
    llama = get_model("llama3-8b")
    assert megatron.padded_model(llama, 2) is llama  # 128256 = 1002 x 128 is a multiple of 256 already


def test_mxfp8_quantizes_weights_once_per_step():
    tables = _tables("mxfp8", any_layout=True)
    assert any(op.dtype == "mxfp8" for op in tables.microbatch_ops if op.kind == "gemm")
    assert "linear_fc2.w.mxfp8_quantize" in _names(tables.step_ops)
    assert "linear_fc2.w.mxfp8_quantize" not in _names(tables.microbatch_ops)


def test_other_8bit_recipes_stay_outside_the_tables():
    p = predict(benchmark_model("1b"), "h100-sxm", _cfg("fp8_gw_hp"), stack="megatron")
    assert p.summary.priced_as_bound


def test_fp8cs_variant_loads():
    cs = get_stack("megatron-fp8cs")
    assert (cs.fp8_recipe, cs.kernels, cs.is_variant_of("megatron")) == ("current", "megatron-te", True)
    assert get_stack("megatron").fp8_recipe == "delayed"
