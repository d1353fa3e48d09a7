"""workbench.perf.overlap: the FSDP2 / DDP schedule's edges, and what predict() makes of them."""

import dataclasses

import pytest

from workbench import Parallelism, TrainingConfig, predict
from workbench.graph.execution import Execution
from workbench.hardware import get_gpu
from workbench.models import get_model
from workbench.perf.comm import collective_time, group_link
from workbench.perf.efficiency import constants_for
from workbench.perf.overlap import (
    DDP_BUCKET_CAP_BYTES,
    ScheduledCollective,
    ddp_last_bucket_bytes,
    ddp_schedule,
    edge_exposed_s,
    exposed_seconds,
    fsdp_schedule,
)

LLAMA8 = dataclasses.replace(get_model("llama3-8b"), num_layers=8)
"""The session-2 two-GPU recipe's model: Llama 3 8B cut to 8 layers."""


def _cfg(dp: int, sharding: str = "fsdp", global_batch: int = 0) -> TrainingConfig:
    return TrainingConfig(2, 4096, parallelism=Parallelism(dp=dp, sharding=sharding), global_batch=global_batch)


def _by_name(prediction):
    return {c.name: c for c in prediction.comms}


def test_fsdp_schedule_follows_the_jobs_units():
    plan = {s.name: s for s in fsdp_schedule("fsdp", 100.0, 10.0, 4, gather_bytes=2, reduce_bytes=4,
                                               grad_accumulation=3)}
    assert plan["fsdp.all_gather_root"].edge == plan["fsdp.all_gather_first_block"].edge == "forward_start"
    assert plan["fsdp.reduce_scatter_root"].edge == plan["fsdp.reduce_scatter_first_block"].edge == "backward_end"
    # every micro-batch gathers every unit forward and blocks 0..L-2 again backward; one reduce-scatter per unit
    gathered = sum(s.size_bytes * s.occurrences for s in plan.values() if s.collective == "all_gather")
    assert gathered == pytest.approx(3 * 2 * (100 + 4 * 10 + 3 * 10))
    reduced = sum(s.size_bytes * s.occurrences for s in plan.values() if s.collective == "reduce_scatter")
    assert reduced == pytest.approx(4 * (100 + 4 * 10))
    assert not plan["fsdp.all_gather_root"].beside_compute and plan["fsdp.all_gather_first_block"].beside_compute
    one = {s.name for s in fsdp_schedule("fsdp", 0.0, 10.0, 1, gather_bytes=2, reduce_bytes=4)}
    assert one == {"fsdp.all_gather_first_block", "fsdp.reduce_scatter_first_block"}  # no root, no interior


def test_edge_arithmetic():
    assert edge_exposed_s(3.0, 1.0, 0.25) == pytest.approx(3.75)
    assert edge_exposed_s(3.0, 1.0, 5.0) == 3.0  # the window hides the beside-compute part entirely
    with pytest.raises(ValueError, match="window"):
        edge_exposed_s(1.0, 1.0, -1.0)
    plan = [ScheduledCollective("root", "all_gather", 1, 2, "forward_start"),
            ScheduledCollective("first", "all_gather", 1, 2, "forward_start", beside_compute=True),
            ScheduledCollective("rest", "all_gather", 1, 4, "hidden")]
    out = exposed_seconds(plan, [1.0, 0.5, 0.5], comm_overlap=0.5, step_compute_s=2.0, embedding_fwd_s=0.1)
    # root in full, first less the embedding, rest beyond 0.5 x (2 s less the 2 x 0.1 s of embedding the first
    # block's gathers already ran beside: compute hides one collective or the other, not both)
    assert out == pytest.approx([2.0, 0.8, 1.1])
    free = [ScheduledCollective("empty", "all_reduce", 0, 1, "hidden")]
    assert exposed_seconds(free, [0.0], comm_overlap=0.5, step_compute_s=0.0) == [0.0]  # nothing to share out


def test_ddp_last_bucket():
    assert ddp_last_bucket_bytes(1e9, 4e8) == 4e8  # a parameter above the cap: its own bucket
    assert ddp_last_bucket_bytes(1e9, 1e3) == DDP_BUCKET_CAP_BYTES
    assert ddp_last_bucket_bytes(1e6, 1e3) == 1e6  # never more than all the gradients
    plan = ddp_schedule("ddp", 1e9, 4e8)
    assert [(s.size_bytes, s.edge) for s in plan] == [(6e8, "hidden"), (4e8, "backward_end")]
    with pytest.raises(ValueError, match="last bucket"):
        ddp_schedule("ddp", 1e6, 2e6)


def test_one_gpu_has_no_communication():
    for execution in (None, Execution(compile=False)):
        s = predict(LLAMA8, "h200-sxm", _cfg(1), calibrated=True, execution=execution).summary
        assert s.communication_s == s.communication_total_s == 0.0


@pytest.mark.parametrize("execution", [None, Execution(compile=False), Execution(compile=True)])
def test_fsdp_edges_are_exposed_and_the_step_adds_up(execution):
    p = predict(LLAMA8, "h200-sxm", _cfg(2), calibrated=True, execution=execution)
    s, comms = p.summary, _by_name(p)
    parts = s.compute_bound_s + s.memory_bound_s + s.optimizer_s + s.communication_s + s.bubble_s
    assert parts == pytest.approx(s.step_time_s)
    assert s.communication_s == pytest.approx(sum(c.exposed_s for c in p.comms))
    assert s.communication_total_s == pytest.approx(sum(c.time_s for c in p.comms))
    assert 0 < s.communication_s < s.communication_total_s
    # the root's all-gather and reduce-scatter are exposed in full; interior traffic hides behind compute
    for name in ("fsdp.all_gather_root", "fsdp.reduce_scatter_root"):
        assert comms[name].exposed_s == comms[name].time_s > 0
    assert comms["fsdp.all_gather_blocks"].exposed_s == 0 and comms["fsdp.all_gather_blocks"].position == "hidden"
    # the exposed part is the edges' collectives, computed from the link model directly
    gpu = get_gpu("h200-sxm")
    link = group_link(gpu, constants_for(gpu, True), False)
    root = LLAMA8.embedding_params()
    edges = collective_time("all_gather", root * 2, 2, link) + collective_time("reduce_scatter", root * 4, 2, link)
    assert edges < s.communication_s < edges + comms["fsdp.all_gather_first_block"].time_s + \
        comms["fsdp.reduce_scatter_first_block"].time_s


def test_exposed_part_grows_with_the_roots_parameter_bytes():
    exposed = []
    for vocab in (32_000, 128_256, 256_000):
        model = dataclasses.replace(LLAMA8, vocab_size=vocab)
        p = predict(model, "h200-sxm", _cfg(2), calibrated=True)
        root = _by_name(p)["fsdp.all_gather_root"]
        assert root.size_bytes == pytest.approx(model.embedding_params() * 2)
        exposed.append(p.summary.communication_s)
    assert exposed[0] < exposed[1] < exposed[2]


def test_edges_do_not_hide_however_large_the_overlap():
    gpu = get_gpu("h200-sxm")
    c = constants_for(gpu, True)
    generous = c.with_values({"comm_overlap": 100.0}, "guess")
    base = predict(LLAMA8, gpu, _cfg(2), constants=c).summary.communication_s
    assert predict(LLAMA8, gpu, _cfg(2), constants=generous).summary.communication_s == pytest.approx(base)


def test_accumulation_repeats_the_forward_edge_not_the_backward_one():
    one, four = (_by_name(predict(LLAMA8, "h200-sxm", _cfg(2, global_batch=gb), calibrated=True)) for gb in (4, 16))
    assert four["fsdp.all_gather_root"].exposed_s == pytest.approx(4 * one["fsdp.all_gather_root"].exposed_s)
    assert four["fsdp.reduce_scatter_root"].exposed_s == pytest.approx(one["fsdp.reduce_scatter_root"].exposed_s)


def test_ddp_exposes_the_embeddings_bucket():
    p = predict(LLAMA8, "h200-sxm", _cfg(2, "ddp"), calibrated=True)
    last = _by_name(p)["ddp.all_reduce_last_bucket"]
    assert last.size_bytes == pytest.approx(LLAMA8.vocab_size * LLAMA8.hidden_size * 4)
    assert last.exposed_s == last.time_s > 0 and last.position == "backward_end"
    assert p.summary.communication_s == pytest.approx(sum(c.exposed_s for c in p.comms))
    small = dataclasses.replace(LLAMA8, vocab_size=256, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                                ffn_hidden_size=128, num_layers=2)  # all gradients in DDP's one bucket
    tiny = _by_name(predict(small, "h200-sxm", TrainingConfig(2, 64, parallelism=Parallelism(dp=2, sharding="ddp"))))
    assert set(tiny) == {"ddp.all_reduce_last_bucket"} and tiny["ddp.all_reduce_last_bucket"].exposed_s > 0
    dlrm = predict("dlrm-dcnv2", "h200-sxm", gpus=2)
    assert _by_name(dlrm)["ddp.dense.all_reduce_last_bucket"].exposed_s > 0
