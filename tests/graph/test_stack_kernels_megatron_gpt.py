"""The megatron (TE) stack's GPT-2/GPT-3 block tables (workbench.graph.stack_kernels_megatron_gpt)."""

import dataclasses
from collections import Counter

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_megatron import block_linears, block_ops, megatron_flavor, megatron_step_ops
from workbench.graph.stack_kernels_megatron_gpt import is_gpt_block
from workbench.graph.stacked import scope_gap
from workbench.models import get_model
from workbench.predict import predict

GPT = get_model("gpt2-small")
D = Dims.of(GPT, 1, 1024)


def _flavor(fp8="none", transpose=True):
    return dataclasses.replace(megatron_flavor(te=True), fp8=fp8, fp8_transpose=transpose, gpt_block=True,
                               tied=True)


def _names(ops):
    return [op.name for op in ops]


def test_gpt_models_are_gpt_blocks_and_llama_ones_are_not():
    assert is_gpt_block(GPT) and is_gpt_block(get_model("gpt3-175b"))
    assert not is_gpt_block(get_model("llama3-8b"))


def test_bf16_block_kernels_per_block():
    fwd, bwd = block_ops(D, _flavor())
    names = _names(fwd) + _names(bwd)
    # no RoPE, no q split copy (TE attention reads the fused QKV output)
    assert not [n for n in names if n.startswith("rope") or "split" in n]
    # two LayerNorms: one forward kernel each, backward kernel + dgamma/dbeta finalize each
    assert Counter(n for n in _names(fwd) if "layernorm" in n) == {
        "input_layernorm.te_layernorm": 1, "pre_mlp_layernorm.te_layernorm": 1}
    assert len([n for n in _names(bwd) if "layernorm" in n and "main_grad" not in n]) == 4
    # fc1 bias + gelu: TE's jit bias_gelu (one kernel); backward bgrad_dgelu and its bias sum
    assert [n for n in _names(fwd) if n.startswith("gelu")] == ["gelu.bias_gelu"]
    assert [n for n in _names(bwd) if n.startswith("gelu")] == ["gelu.bgrad_dgelu", "gelu.dbias_sum"]
    # the returned row-parallel biases' grads; QKV's bias grad is the wgrad epilogue's in bf16 (no kernel)
    assert [n for n in names if "dbias" in n and not n.startswith("gelu")] == [
        "linear_proj.dbias.bias_grad_sum", "linear_fc2.dbias.bias_grad_sum"]
    # 8 bias / norm parameters per block, each added to main_grad by DDP's hook
    assert len([n for n in _names(bwd) if n.endswith("main_grad_add")]) == 8
    fc1 = next(op for op in fwd if op.name == "linear_fc1.fwd")
    assert fc1.shape.n == D.ffn  # ungated: h -> f
    assert ("linear_fc1", D.hidden, D.ffn, 1) in block_linears(D, gpt_block=True)


def test_fp8_delayed_fuses_gelu_cast_and_dgelu_dbias_cast():
    fwd, bwd = block_ops(D, _flavor("delayed"))
    assert [n for n in _names(fwd) if n.startswith("gelu")] == ["gelu.gelu_fp8"]
    assert "gelu.cast_transpose_dbias_dgelu" in _names(bwd) and "gelu.reduce_dbias" in _names(bwd)
    assert "linear_fc2.x_t.fp8_transpose" in _names(bwd)  # fc2's wgrad transposes gelu_out (Hopper)
    assert "linear_qkv.dbias.reduce_dbias" in _names(bwd)
    # no separate fc2 input cast nor fc1 dy cast: fused into the gelu kernels
    assert not [n for n in _names(fwd) + _names(bwd) if n.startswith(("linear_fc2.x.", "linear_fc1.dy"))]
    assert "pre_mlp_layernorm.te_layernorm_fp8" in _names(fwd)
    # Blackwell: no transposes
    _, bwd_any = block_ops(D, _flavor("delayed", transpose=False))
    assert not [n for n in _names(bwd_any) if "transpose" in n and "dgelu" not in n]


def test_fp8_current_scaling_quantizes_after_the_bf16_activation():
    fwd, bwd = block_ops(D, _flavor("current"))
    assert "gelu.gelu_amax" in _names(fwd)
    assert [n for n in _names(fwd) if n.startswith("linear_fc2.x.")] == [
        "linear_fc2.x.compute_scale", "linear_fc2.x.fp8_cast_transpose"]
    assert [n for n in _names(bwd) if n.startswith("linear_fc1.dy.")] == [
        "linear_fc1.dy.amax", "linear_fc1.dy.compute_scale", "linear_fc1.dy.fp8_cast_transpose"]
    assert "linear_qkv.dbias.dbias_sum" in _names(bwd)


def test_local_spec_has_no_gpt_tables():
    with pytest.raises(ValueError, match="TE spec"):
        block_ops(D, dataclasses.replace(megatron_flavor(te=False), gpt_block=True))


def test_step_has_learned_positions_and_layernorm_head():
    ops = megatron_step_ops(GPT, 1, 1024, megatron_flavor(te=True))
    names = _names(ops)
    assert "position_embedding.gather" in names and "position_embedding.main_grad.main_grad_add" in names
    assert "final_layernorm.te_layernorm" in names and "gelu.bias_gelu" in names


def test_gpt_is_in_the_te_stack_scope_only():
    cfg = TrainingConfig(1, 2048, "fp8", Parallelism(tp=4, pp=8, dp=4, virtual_stages=6, sharding="zero1"))
    model = get_model("gpt3-175b")
    assert scope_gap(model, cfg, "megatron-te") is None
    assert scope_gap(model, dataclasses.replace(cfg, precision="bf16"), "megatron-local") == "layernorm / gelu blocks"


def test_gpt_prediction_is_priced_by_the_tables():
    r = predict(GPT, "h200", TrainingConfig(1, 1024, "bf16", Parallelism(), "none"), stack="megatron")
    assert not any("fused-step bound" in n or "a bound" in n for n in r.notes)
