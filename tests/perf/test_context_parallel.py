"""workbench.perf.context_parallel: a stack's ring attention (PyTorch's allgather / alltoall ring), its exposure and
its merge kernels; the stack YAML's ``context_parallel`` entry."""

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.graph.stack_kernels import Dims, ring_merge_ops
from workbench.models import get_model
from workbench.perf.context_parallel import (
    GENERIC_RING,
    ContextParallel,
    attention_call_s,
    ring_exchanges,
    ring_exposed_s,
    ring_merge_tables,
)
from workbench.predict import predict
from workbench.stacks import get_stack, load_stack

TORCH_RING = ContextParallel("allgather", "repeated", 4, "torch-fp32", "test")
SHAPE = dict(tokens=32768, kv_width=1024, q_width=4096, act_bytes=2, group=8, spans=False, forward_calls=2)


def test_allgather_gathers_every_rank_once_per_call_and_sends_fp32_grads_every_step():
    ag, ag_bwd, dkv = ring_exchanges(TORCH_RING, **SHAPE)
    kv = 32768 * 2 * 4096 * 2  # repeat_kv: K and V with the query heads' width, bf16
    assert (ag.collective, ag.size_bytes, ag.calls, ag.per_call) == ("all_gather", 8 * kv, 2, 1)
    assert ag.window == ag_bwd.window == pytest.approx(1 / 8)  # hidden behind step 0 only
    assert (dkv.collective, dkv.size_bytes, dkv.per_call, dkv.tail) == ("send_recv", 2 * kv, 8, 1)
    grouped = ring_exchanges(ContextParallel("allgather", "grouped", 4, "none", "test"), **SHAPE)
    assert grouped[0].size_bytes == ag.size_bytes / 4  # Llama 3 8B: 8 kv heads of 32


def test_alltoall_sends_one_chunk_per_step_and_p2p_is_the_generic_ring():
    fwd, both, tail = ring_exchanges(ContextParallel("alltoall", "grouped", 4, "none", "test"), **SHAPE)
    assert (fwd.per_call, fwd.window, both.per_call, tail.tail) == (7, pytest.approx(1 / 8), 7, 1)
    assert both.size_bytes == fwd.size_bytes * 3  # bf16 K,V beside fp32 dK,dV
    with pytest.raises(ValueError, match="generic"):
        ring_exchanges(GENERIC_RING, **SHAPE)


def test_exposure_is_each_occurrence_beyond_its_window_and_the_tail_whole():
    ag, _, dkv = ring_exchanges(TORCH_RING, **SHAPE)
    assert ring_exposed_s(ag, 0.010, 0.080) == 0.0  # 10 ms beside a 10 ms first step
    assert ring_exposed_s(ag, 0.030, 0.080) == pytest.approx(0.020)
    assert ring_exposed_s(dkv, 0.004, 0.080) == pytest.approx(0.004)  # 7 hidden, the last one exposed
    with pytest.raises(ValueError):
        ring_exposed_s(ag, -1.0, 0.0)
    fwd, bwd = attention_call_s(9.0, layers=2, forward_calls=2)  # 2 x (2 fwd + 2.5 fwd) = 9 forward calls' worth
    assert (fwd, bwd) == (pytest.approx(1.0), pytest.approx(2.5))


def test_merge_kernels_grow_with_the_ring_and_compile_fuses_them():
    fused = ring_merge_tables(TORCH_RING, tokens=1024, q_width=4096, kv_width=1024, group=4, compiled=True)
    eager = ring_merge_tables(TORCH_RING, tokens=1024, q_width=4096, kv_width=1024, group=4, compiled=False)

    def traffic(parts):
        return sum((r + w) * elements * repeats for table, elements, repeats in parts for _, r, w, _ in table)

    assert traffic(eager.forward) > traffic(fused.forward) > 0
    assert traffic(eager.backward) > traffic(fused.backward) > 0
    assert ring_merge_tables(TORCH_RING, tokens=1024, q_width=4096, kv_width=1024, group=1, compiled=True) == ((), ())
    none = ContextParallel("allgather", "grouped", 4, "none", "test")
    assert ring_merge_tables(none, tokens=1024, q_width=4096, kv_width=1024, group=4, compiled=True) == ((), ())


def test_merge_ops_join_the_blocks_only_under_cp():
    model = get_model("llama3-8b")
    d = Dims.of(model, 1, 32768, cp=4)
    fwd, bwd = ring_merge_ops(Dims(**{**d.__dict__, "context_parallel": TORCH_RING}), compiled=True)
    assert fwd and bwd and all(op.extra["aten"] == "sdpa" for op in fwd)  # saved where SDPA's output is
    assert ring_merge_ops(d, compiled=True) == ([], [])  # no stack ring: none
    one = Dims.of(model, 1, 8192)
    assert ring_merge_ops(Dims(**{**one.__dict__, "context_parallel": TORCH_RING}), compiled=True) == ([], [])


def test_stacks_carry_their_ring_and_bad_entries_fail_at_load():
    assert get_stack("torchtitan").context_parallel.rotate == "allgather"
    assert get_stack("torchtitan").context_parallel.kv_heads == "grouped"  # v0.2.2: enable_gqa
    assert get_stack("torchtitan-flash2").context_parallel.kv_heads == "repeated"  # 9dec370: repeat_kv
    assert get_stack("ideal").context_parallel is None
    entry = {"rotate": "ring", "kv_heads": "grouped", "grad_dtype": "fp32", "merge": "none", "source": "x"}
    spec = {"schema_version": 1, "derived_from": "torchtitan", "name": "t", "context_parallel": entry}
    with pytest.raises(SpecError, match="rotate"):
        load_stack(spec)


def test_torchtitan_prices_its_own_ring_collectives():
    cfg = TrainingConfig(parallelism=Parallelism(dp=1, tp=8, cp=2), micro_batch=1, seq_len=65536,
                         precision="bf16", activation_checkpointing="full", global_batch=1)
    mine = predict("llama3-70b", "h100-sxm", cfg, stack="torchtitan")
    names = {c.name for c in mine.comms}
    assert {"cp.all_gather_kv", "cp.all_gather_kv.bwd", "cp.send_recv_grad_kv"} <= names
    ring = [c for c in mine.comms if c.name.startswith("cp.")]
    assert all(0 <= c.exposed_s <= c.time_s for c in ring)
