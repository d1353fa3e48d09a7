import pytest

from workbench import Parallelism, TrainingConfig
from workbench.hardware import get_gpu
from workbench.memory import (
    COMPILED_LOSS_CHUNKS_LIVE,
    LOSS_CHUNK_ELEMENTS,
    LOSS_CHUNKS_LIVE,
    MASTER_STATE_BYTES,
    _block_activation_elements,
    max_micro_batch,
    memory_breakdown,
)
from workbench.models import get_model

H200 = get_gpu("h200")
LLAMA8B = get_model("llama3-8b")


def _mem(model=LLAMA8B, gpu=H200, **kw):
    cfg = TrainingConfig(kw.pop("mb", 1), kw.pop("seq", 4096), **kw).resolved(model)
    return memory_breakdown(model, cfg, gpu)


def test_states_are_sixteen_bytes_per_parameter_unsharded():
    m = _mem(parallelism=Parallelism(sharding="ddp"))
    assert m.params + m.grads + m.optimizer == pytest.approx(LLAMA8B.num_params * MASTER_STATE_BYTES)


def test_fsdp_on_one_gpu_adds_bf16_copies_of_two_layers_and_the_root():
    fsdp, ddp = _mem(), _mem(parallelism=Parallelism(sharding="ddp"))
    copies = 2 * (2 * LLAMA8B.layer_params() + LLAMA8B.embedding_params())
    assert fsdp.params - ddp.params == pytest.approx(copies)


def test_full_checkpointing_holds_block_inputs_and_the_loss_peak_not_the_recompute_too():
    m = _mem(mb=8, activation_checkpointing="full")
    tokens, a = 8 * 4096, 2
    logits = tokens * LLAMA8B.vocab_size
    loss = 2 * a * logits + 4 * LOSS_CHUNKS_LIVE * LOSS_CHUNK_ELEMENTS  # logits + their gradient + fp32 chunks
    inputs = LLAMA8B.num_layers * LLAMA8B.hidden_size * tokens * a
    assert _block_activation_elements(LLAMA8B, "none") * tokens * a < loss
    assert m.activations == pytest.approx(inputs + loss)


def test_the_compiled_loss_drops_the_fp32_chunks_and_fits_more():
    cfg = TrainingConfig(8, 4096, activation_checkpointing="full").resolved(LLAMA8B)
    eager, compiled = (memory_breakdown(LLAMA8B, cfg, H200, compiled_loss=c) for c in (False, True))
    assert COMPILED_LOSS_CHUNKS_LIVE == 0
    assert eager.activations - compiled.activations == pytest.approx(4 * LOSS_CHUNKS_LIVE * LOSS_CHUNK_ELEMENTS)
    assert (eager.params, eager.grads, eager.optimizer) == (compiled.params, compiled.grads, compiled.optimizer)
    assert memory_breakdown(LLAMA8B, cfg, H200) == eager  # the default: the eager loss
    assert max_micro_batch(LLAMA8B, cfg, H200, compiled_loss=True) >= max_micro_batch(LLAMA8B, cfg, H200)


def test_fsdp_shards_states_and_ddp_does_not():
    fsdp = _mem(parallelism=Parallelism(dp=8))
    ddp = _mem(parallelism=Parallelism(dp=8, sharding="ddp"))
    assert fsdp.optimizer == pytest.approx(ddp.optimizer / 8)
    assert fsdp.grads == pytest.approx(ddp.grads / 8)


def test_tensor_parallel_shards_activations():
    assert _mem(model=get_model("llama3-70b"), parallelism=Parallelism(tp=4)).activations < \
        _mem(model=get_model("llama3-70b")).activations / 3


def test_max_micro_batch_is_the_boundary():
    cfg = TrainingConfig(1, 4096, parallelism=Parallelism(dp=8), activation_checkpointing="full").resolved(LLAMA8B)
    best = max_micro_batch(LLAMA8B, cfg, H200)
    assert best > 1
    fits = lambda mb: memory_breakdown(LLAMA8B, TrainingConfig(mb, 4096, parallelism=cfg.parallelism,  # noqa: E731
                                                                activation_checkpointing="full"), H200).fits
    assert fits(best) and not fits(best + 1)


def test_larger_hbm_fits_more():
    cfg = TrainingConfig(1, 8192, parallelism=Parallelism(dp=8), activation_checkpointing="selective").resolved(LLAMA8B)
    assert max_micro_batch(LLAMA8B, cfg, get_gpu("mi355x")) > max_micro_batch(LLAMA8B, cfg, get_gpu("b200"))


def test_embedding_tables_fit_288_but_not_180_gb():
    hstu = get_model("hstu-gr")
    cfg = TrainingConfig(8, 2048).resolved(hstu)
    assert memory_breakdown(hstu, cfg, get_gpu("mi355x")).fits
    assert not memory_breakdown(hstu, cfg, get_gpu("b200")).fits


def test_expert_parallel_fsdp_shards_experts_dp_ways_and_ddp_ep_ways():
    mixtral = get_model("mixtral-8x7b")
    fsdp = TrainingConfig(1, 2048, parallelism=Parallelism(dp=8, ep=8)).resolved(mixtral)
    ddp = TrainingConfig(1, 2048, parallelism=Parallelism(dp=8, ep=8, sharding="ddp")).resolved(mixtral)
    experts = mixtral.num_layers * mixtral.expert_params_per_layer()
    dense = mixtral.num_params - experts
    assert memory_breakdown(mixtral, fsdp, H200).optimizer == pytest.approx(8 * mixtral.num_params / 8)
    assert memory_breakdown(mixtral, ddp, H200).optimizer == pytest.approx(8 * (dense + experts / 8))


def test_megatron_te_holds_fp8_steps_as_nemo_configures_them():
    """NeMo's fp8 recipes reduce gradients in bf16 (grad_reduce_in_fp32 False) and TE saves the linears' inputs in
    fp8; its bf16 recipe keeps fp32 gradients. Stacks without memory traits keep the job's accounting."""
    import workbench
    h100 = get_gpu("h100-sxm")

    def memory(precision, stack):
        cfg = TrainingConfig(1, 8192, precision, Parallelism(dp=4, cp=2, sharding="zero1"), "none", global_batch=128)
        return workbench.predict(LLAMA8B, h100, cfg, stack=stack).summary.memory

    fp8, bf16, bound = memory("fp8", "megatron"), memory("bf16", "megatron"), memory("fp8", "ideal")
    assert fp8.grads == pytest.approx(bf16.grads / 2) and bf16.grads == pytest.approx(bound.grads)
    assert fp8.activations < bf16.activations < bound.activations
    assert fp8.fits and not bound.fits  # N2407-H100-L3-8B ran on 80 GB H100s (NeMo 24.07)
    assert memory("fp8", "torchtitan") == bound  # no traits: the job's accounting
