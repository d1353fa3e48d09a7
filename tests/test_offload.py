"""CPU offload (``TrainingConfig.offload``): what leaves HBM (workbench.memory), what the host step costs
(workbench.offload) and how the step adds it (workbench.step)."""

import dataclasses

import pytest

from workbench import offload as off
from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.hardware import get_gpu
from workbench.memory import memory_breakdown
from workbench.models import get_model
from workbench.predict import predict

MODEL = get_model("llama3-8b")
ZERO3 = TrainingConfig(1, 8192, "bf16", Parallelism(dp=8, sharding="fsdp"), "full", 8)


def resolved(cfg: TrainingConfig, **changes) -> TrainingConfig:
    return dataclasses.replace(cfg, **changes).resolved(MODEL)


def shard() -> float:
    return MODEL.params_per_gpu(1, 1, 8, 1, sharded=True)


def test_optimizer_offload_moves_master_weights_moments_and_gradients_off_hbm():
    gpu = get_gpu("h200")
    base = memory_breakdown(MODEL, resolved(ZERO3), gpu)
    opt = memory_breakdown(MODEL, resolved(ZERO3, offload="optimizer"), gpu)
    both = memory_breakdown(MODEL, resolved(ZERO3, offload="optimizer+params"), gpu)
    assert opt.optimizer == 0 and opt.grads == 0  # ZeRO-3 streams the gradient shard to the host
    assert opt.params == pytest.approx(base.params - 2 * shard())  # fp32 master (4 B) -> bf16 shard (2 B)
    assert both.params == pytest.approx(base.params - 4 * shard())  # only the gathered layers stay
    assert opt.activations == base.activations and base.total - both.total == pytest.approx(16 * shard())


def test_zero1_offload_keeps_gradients_and_drops_the_master_shard():
    cfg = TrainingConfig(1, 8192, "bf16", Parallelism(dp=8, sharding="zero1"), "full", 8)
    gpu = get_gpu("h200")
    base = memory_breakdown(MODEL, resolved(cfg), gpu)
    opt = memory_breakdown(MODEL, resolved(cfg, offload="optimizer"), gpu)
    assert opt.grads == base.grads and opt.optimizer == 0
    assert opt.params == pytest.approx(base.params - 4 * shard())


def test_host_step_is_the_hosts_cpu_adam_throughput_and_the_copies_ride_the_host_link():
    gpu = get_gpu("h200")
    t = off.offload_time(MODEL, resolved(ZERO3, offload="optimizer"), gpu, microbatch_s=1.0)
    link = 64e9 * off.HOST_LINK_EFFICIENCY
    assert t.host_step_s == pytest.approx(shard() * 8 / off.HOST_ADAM_PARAMS_PER_S)  # the 8 ranks share one host
    assert t.gradients_to_host_s == pytest.approx(shard() * off.GRAD_BYTES_TO_HOST / link)
    assert t.params_to_gpu_s == pytest.approx(shard() * off.PARAM_BYTES_TO_GPU / link)
    assert t.gradients_exposed_s == 0  # hidden behind a 1 s micro-batch's backward
    assert t.exposed_s == pytest.approx(t.host_step_s + t.params_to_gpu_s)


def test_gradient_copies_longer_than_backward_are_exposed():
    t = off.offload_time(MODEL, resolved(ZERO3, offload="optimizer"), get_gpu("h200"), microbatch_s=1e-3)
    assert t.gradients_exposed_s == pytest.approx(t.gradients_to_host_s - off.BACKWARD_SHARE * 1e-3)


def test_delayed_update_hides_the_host_step_behind_the_gpu_step():
    gpu = get_gpu("h200")
    plain = off.offload_time(MODEL, resolved(ZERO3, offload="optimizer"), gpu, microbatch_s=0.5)
    delayed = off.offload_time(MODEL, resolved(ZERO3, offload="optimizer", offload_delayed_update=True), gpu, 0.5)
    assert delayed.exposed_s == pytest.approx(max(0.0, plain.host_step_s + plain.params_to_gpu_s - 0.5))
    assert delayed.exposed_s < plain.exposed_s


def test_parameter_offload_fetches_each_pass_instead_of_copying_back():
    t = off.offload_time(MODEL, resolved(ZERO3, offload="optimizer+params"), get_gpu("h200"), microbatch_s=1e-3)
    passes = 3  # forward, backward and full checkpointing's recomputation
    assert t.params_to_gpu_s == 0
    assert t.param_fetch_s == pytest.approx(shard() * off.PARAM_BYTES_TO_GPU * passes / (64e9 * off.HOST_LINK_EFFICIENCY))
    assert t.param_fetch_exposed_s == pytest.approx(t.param_fetch_s - 1e-3)


def test_the_step_replaces_the_gpu_optimizer_with_the_host_time():
    # the fused step on both sides: offload is outside torchtitan's tables (the default stack since), so there the
    # offloaded step would be the bound and the one on the GPU torchtitan's
    on_gpu = predict(MODEL, "h200", ZERO3, stack="ideal")
    offloaded = predict(MODEL, "h200", dataclasses.replace(ZERO3, offload="optimizer"), stack="ideal")
    assert not any(o.op.phase == "optimizer" for o in offloaded.ops)
    assert any(o.op.phase == "optimizer" for o in on_gpu.ops)
    s, base = offloaded.summary, on_gpu.summary
    assert s.compute_bound_s == pytest.approx(base.compute_bound_s)
    assert s.optimizer_s > base.optimizer_s and s.step_time_s > base.step_time_s
    assert s.step_time_s == pytest.approx(base.step_time_s - base.optimizer_s + s.optimizer_s)
    assert any(n.startswith("CPU offload (optimizer)") for n in offloaded.notes)
    assert s.max_micro_batch >= base.max_micro_batch  # more HBM free


def test_offload_leaves_stack_tables_for_the_fused_bound():
    cfg = TrainingConfig(1, 2048, "bf16", Parallelism(dp=1), "none", offload="optimizer")
    assert "CPU offload" in cfg.beyond_stack_tables()
    assert predict(MODEL, "h200", cfg, stack="pytorch-eager").summary.priced_as_bound


@pytest.mark.parametrize("changes, field", [
    (dict(offload="cpu"), "offload"),
    (dict(offload="optimizer", parallelism=Parallelism(dp=8, sharding="ddp")), "parallelism.sharding"),
    (dict(offload="optimizer+params", parallelism=Parallelism(dp=8, sharding="zero1")), "parallelism.sharding"),
    (dict(offload="optimizer", lora_rank=16, parallelism=Parallelism(dp=8, sharding="zero1")), "offload"),
    (dict(offload_delayed_update=True), "offload_delayed_update"),
])
def test_offload_configurations_the_model_does_not_price_are_refused(changes, field):
    with pytest.raises(SpecError, match=field):
        resolved(ZERO3, **changes)


def test_a_gpu_without_a_host_link_figure_is_a_clear_error():
    with pytest.raises(SpecError, match="host_link_gb_s_per_direction"):
        predict(MODEL, "mi300x", dataclasses.replace(ZERO3, offload="optimizer"))
