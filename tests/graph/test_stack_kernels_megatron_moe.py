"""Megatron-Core's MoE layer in the megatron (TE) stack's tables (workbench.graph.stack_kernels_megatron_moe)."""

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_megatron import block_ops, megatron_flavor, parameter_count
from workbench.graph.stack_kernels_megatron_moe import Experts, experts_of
from workbench.graph.stacked import stack_tables
from workbench.models import get_model
from workbench.predict import predict
from workbench.stacks import get_stack

MIXTRAL = get_model("mixtral-8x7b")


def _gemms(ops, prefix):
    return [op for op in ops if op.kind == "gemm" and op.name.startswith(prefix)]


def test_experts_take_capacity_padded_tokens_from_every_ep_rank():
    e = Experts(num=8, topk=2, ep=8, tp=1)
    assert (e.local, e.capacity(8192), e.expert_tokens(8192)) == (1, 2048, 16384)
    assert Experts(8, 2, 4, 2).local == 2 and Experts(8, 2, 4, 2).expert_tokens(4096) == 1024 * 4 * 2
    assert experts_of(get_model("llama3-8b"), Parallelism()) is None


def test_moe_block_replaces_the_dense_mlp_with_router_permute_and_experts():
    d = Dims.of(MIXTRAL, 2, 4096)
    e = experts_of(MIXTRAL, Parallelism(dp=8, ep=8))
    fwd, bwd = block_ops(d, megatron_flavor(te=True), e)
    names = {op.name for op in fwd}
    assert not _gemms(fwd, "linear_fc1") and "router.gating.fwd" in names
    (fc1,) = _gemms(fwd, "experts.linear_fc1.fwd")
    assert (fc1.shape.m, fc1.shape.n, fc1.shape.k) == (e.expert_tokens(d.tokens), 2 * MIXTRAL.ffn_hidden_size, 4096)
    assert fc1.count == d.layers * e.local
    assert any(op.name.startswith("dispatch.permute") for op in fwd)
    assert any(op.name.startswith("combine.unpermute") for op in bwd)
    # the expert GEMMs' FLOPs are top-k of the tokens' dense FFN (capacity factor 1.0: no padding here)
    dense = 2 * d.tokens * 3 * MIXTRAL.hidden_size * MIXTRAL.ffn_hidden_size * e.topk * d.layers
    assert sum(op.flops * op.count for op in _gemms(fwd, "experts.")) == pytest.approx(dense)
    with pytest.raises(ValueError):
        block_ops(d, megatron_flavor(te=False), e)


def test_parameters_count_the_local_experts_and_the_router():
    d = Dims.of(MIXTRAL, 1, 4096)
    dense, _ = parameter_count(d, False)
    one_rank, _ = parameter_count(d, False, Experts(8, 2, 1, 1))
    assert one_rank - dense == d.layers * (7 * 3 * d.hidden * d.ffn + d.hidden * 8)  # 8 experts, 1 dense FFN's worth
    assert abs(one_rank - MIXTRAL.num_params) / MIXTRAL.num_params < 0.01


def test_mixtral_rows_leave_the_bound_on_the_te_stack_only():
    cfg = TrainingConfig(2, 4096, "fp8", Parallelism(dp=64, ep=8, sharding="zero1"), "none", global_batch=256)
    te = predict(MIXTRAL, "b200", cfg, stack="megatron")
    assert not te.summary.priced_as_bound
    assert any(c.name == "ep.all_to_all_tokens" and c.exposed_s > 0 for c in te.comms)
    local = predict(MIXTRAL, "b200", cfg.__class__(2, 4096, "bf16", cfg.parallelism, "none", global_batch=256),
                    stack="megatron-local")
    assert local.summary.priced_as_bound
    assert predict(get_model("deepseek-v3"), "b200", cfg, stack="megatron").summary.priced_as_bound  # shared experts
    tables, gap = stack_tables(MIXTRAL, cfg, get_stack("megatron"), compiled=False, param_dtype="bf16")
    assert gap is None and tables.experts == experts_of(MIXTRAL, cfg.parallelism)
