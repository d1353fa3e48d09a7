"""The deepspeed-zero2 / -zero3 stacks on dp > 1 ranks: ZeRO's own collectives (``zero_collectives``), CPU optimizer
offload inside the tables, the scope they now cover, and one-GPU predictions left as they were."""

from __future__ import annotations

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_hf import deepspeed_step
from workbench.graph.stack_kernels_zero import (
    COMM_BYTES,
    param_sizes,
    reduce_buckets,
    zero_collectives,
    zero_memory,
    zero_step_ops,
)
from workbench.graph.stacked import scope_gap
from workbench.models import get_model
from workbench.predict import predict
from workbench.stacks import get_stack


def _cfg(dp=8, seq=8192, ac="none", offload="none", sharding="fsdp"):
    return TrainingConfig(1, seq, "bf16", Parallelism(dp=dp, sharding=sharding), ac, global_batch=dp, offload=offload)


def _dims(seq=8192):
    return Dims.of(get_model("llama3-8b"), 1, seq)


def test_zero2_all_reduces_the_buckets_and_gathers_the_parameters_after_the_step():
    d = _dims()
    plan = {s.name: s for s in zero_collectives(d, False, 2, grad_accumulation=1)}
    total, last = sum(param_sizes(d, False)), reduce_buckets(d, False)[-1]
    assert last == d.vocab * d.hidden  # the embedding's gradient fires last, in a bucket of its own (> 5e8)
    assert plan["zero2.all_reduce_buckets"].size_bytes == COMM_BYTES * (total - last)
    assert plan["zero2.all_reduce_last_bucket"].edge == "backward_end"
    gather = plan["zero2.all_gather_params"]
    assert gather.size_bytes == COMM_BYTES * total and gather.edge == "forward_start" and not gather.beside_compute


def test_zero3_gathers_each_layer_twice_with_or_without_checkpointing():
    d = _dims()
    plan = {s.name: s for s in zero_collectives(d, False, 3, grad_accumulation=2)}
    # forward: layers 1..L-1 beside compute (layer 0 at the forward start); backward (or the recompute, which
    # keeps them for its backward): all L, the head's two uses (2 x 525 M) exceeding stage3_max_reuse_distance
    assert plan["zero3.all_gather_layers"].occurrences == (2 * d.layers - 1) * 2
    assert plan["zero3.all_gather_embedding"].edge == "forward_start"
    assert plan["zero3.reduce_scatter_last_bucket"].edge == "backward_end"
    assert sum(s.size_bytes * s.occurrences for s in plan.values() if s.collective == "reduce_scatter") == \
        COMM_BYTES * sum(param_sizes(d, False)) * 2


def test_stack_tables_cover_zero_sharding_and_optimizer_offload():
    model = get_model("llama3-8b")
    for stack in ("deepspeed-zero2", "deepspeed-zero3"):
        kernels = get_stack(stack).kernels
        assert scope_gap(model, _cfg(sharding="zero1"), kernels) is None
        assert scope_gap(model, _cfg(offload="optimizer", ac="full"), kernels) is None
        assert "CPU offload" in scope_gap(model, _cfg(offload="optimizer+params"), kernels)
    assert "zero1" in scope_gap(model, _cfg(sharding="zero1"), "pytorch")  # other stacks unchanged


def test_offload_takes_the_update_and_its_state_off_the_gpu():
    d = _dims()
    on_gpu, offloaded = zero_step_ops(d, False, 3, 8), zero_step_ops(d, False, 3, 8, offload=True)
    assert any(op.name.startswith("zero.step") for op in on_gpu)  # flatten, fp32, clip, AdamW, to bf16
    assert not any(op.name.startswith("zero.step") for op in offloaded)  # the norm and overflow check stay
    assert sum(op.count for op in offloaded) < sum(op.count for op in on_gpu)
    kept, moved = (zero_memory(d, False, 3, 8, 1e9, 1e9, offload=o) for o in (False, True))
    assert moved.master_and_moments == 0 and moved.grad_partition == 0 and kept.master_and_moments > 0
    assert moved.params == kept.params and moved.bucket == kept.bucket


@pytest.mark.parametrize("stack", ["deepspeed-zero2", "deepspeed-zero3"])
def test_eight_gpu_predictions_use_the_tables(stack):
    cfg = _cfg(ac="full" if stack.endswith("3") else "none", offload="optimizer" if stack.endswith("3") else "none",
               sharding="fsdp" if stack.endswith("3") else "zero1")
    p = predict("llama3-8b", "h200", cfg, stack=stack)
    assert not p.summary.priced_as_bound
    tables = deepspeed_step(get_model("llama3-8b"), cfg.resolved(get_model("llama3-8b")), get_stack(stack))
    schedules = tables.data_parallel_schedules(cfg)
    assert [group for _, group in schedules] == [8]
    assert all(s.name.startswith(f"zero{stack[-1]}.") for s in schedules[0][0])
    one = deepspeed_step(get_model("llama3-8b"), _cfg(dp=1).resolved(get_model("llama3-8b")), get_stack(stack))
    assert one.data_parallel_schedules(_cfg(dp=1)) == []


def test_offload_on_eight_gpus_adds_the_host_step_and_frees_hbm():
    on, off = (predict("llama3-8b", "h200", _cfg(ac="full", offload=o), stack="deepspeed-zero3").summary
               for o in ("none", "optimizer"))
    assert off.memory.total < on.memory.total
    assert off.optimizer_s > on.optimizer_s  # the host AdamW (workbench.offload) in place of the GPU's
