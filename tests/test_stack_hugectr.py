"""The hugectr stack (specs/stacks/hugectr.yaml) and the DLRM family's pricing of it (workbench.families.recsys)."""

import copy

import pytest
import yaml

from workbench._data import specs_dir
from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.models import get_model
from workbench.predict import predict
from workbench.stacks import get_stack, load_stack

# the MLPerf rows' step: 8 GPUs, 6912 samples each, fp16 (benchmarks/published/rows.yaml MLP41/MLP50-*-DLRM-thr)
MLPERF = TrainingConfig(micro_batch=6912, precision="fp16", parallelism=Parallelism(dp=8, sharding="ddp"),
                        activation_checkpointing="none", global_batch=55296)


@pytest.fixture
def hugectr_spec() -> dict:
    return copy.deepcopy(yaml.safe_load((specs_dir() / "stacks" / "hugectr.yaml").read_text()))


def _ops(prediction) -> dict:
    return {o.op.name: o for o in prediction.ops}


def _comm(prediction, name: str):
    return next(c for c in prediction.comms if c.name == name)


def test_the_stack_file_validates():
    stack = get_stack("hugectr")
    assert stack.kernels == "hugectr" and not stack.bound
    placement = stack.embedding_placement
    assert placement.data_parallel_below_gib == 0.008 and placement.table_bytes_per_element == 8
    assert placement.split_hot_tables and "planner.py" in placement.source


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["embedding_placement"].update(split_hot_table=True), "split_hot_table"),
    (lambda d: d["embedding_placement"].update(data_parallel_below_gib=-1),
     "embedding_placement.data_parallel_below_gib"),
    (lambda d: d["embedding_placement"].pop("source"), "embedding_placement.source"),
    (lambda d: d["embedding_placement"].update(table_bytes_per_element=0),
     "embedding_placement.table_bytes_per_element"),
])
def test_a_bad_placement_field_is_named(hugectr_spec, edit, field):
    edit(hugectr_spec)
    with pytest.raises(SpecError) as info:
        load_stack(hugectr_spec)
    assert field in str(info.value)


def test_the_placement_is_the_mlperf_planners():
    """13 tables under 7,813 rows replicated; the 100-hot table split over 8 GPUs, the 27-hot one over 2: 21 shards
    (NVIDIA's planner at MEM_COMM_BW_RATIO 9-12, re-run for the stack file)."""
    model, placement = get_model("dlrm-dcnv2"), get_stack("hugectr").embedding_placement
    assert sum(placement.data_parallel(t) for t in model.tables) == 13
    assert placement.replicated_rows(model) == 19667
    assert placement.model_parallel_shards(model, 8) == 21
    assert placement.model_parallel_shards(model, 1) == 13  # one GPU: nothing to split over


def test_hugectr_differs_from_the_bound_in_the_sourced_directions():
    ideal, hugectr = (predict("dlrm-dcnv2", "h100-sxm", MLPERF, stack=s) for s in ("ideal", "hugectr"))
    assert not hugectr.summary.priced_as_bound
    ops_ideal, ops_hugectr = _ops(ideal), _ops(hugectr)
    # bias + ReLU in the GEMMs' cuBLASLt epilogues: no ReLU kernels
    assert any(o.op.kind == "relu" for o in ideal.ops) and not any(o.op.kind == "relu" for o in hugectr.ops)
    # element-wise Adagrad: the table update moves the accumulator beside the weight
    update_ideal, update_hugectr = ops_ideal["embedding_bags.bwd_update"], ops_hugectr["embedding_bags.bwd_update"]
    assert update_hugectr.op.bytes_written == 2 * update_ideal.op.bytes_written
    assert update_hugectr.time_s > 1.8 * update_ideal.time_s
    # replicated small tables: only the model-parallel shards' vectors cross the all-to-all, 21 instead of 26
    a2a_ideal, a2a_hugectr = (_comm(p, "embedding.all_to_all") for p in (ideal, hugectr))
    assert a2a_hugectr.size_bytes == pytest.approx(a2a_ideal.size_bytes * 21 / 26)
    assert a2a_hugectr.time_s < a2a_ideal.time_s
    # ... and their gradients all-reduce with the dense ones (fp32, beside backward)
    grads = _comm(hugectr, "embedding.data_parallel_tables.all_reduce")
    assert grads.size_bytes == 19667 * 128 * 4 and grads.position == "hidden"
    assert all(c.name != grads.name for c in ideal.comms)
    # the forward lookups and the GEMMs are the bound's
    assert ops_hugectr["embedding_bags.fwd"].time_s == ops_ideal["embedding_bags.fwd"].time_s
    assert ops_hugectr["top.0.fwd"].time_s == ops_ideal["top.0.fwd"].time_s
    # net, on the MLPerf step: the accumulator's bytes outweigh the saved ReLUs and all-to-all
    assert hugectr.summary.step_time_s > ideal.summary.step_time_s


def test_other_models_stay_the_bound_under_hugectr():
    cfg = TrainingConfig(2, 4096, "bf16", Parallelism(), "none")
    llama = predict("llama3.2-1b", "h200", cfg, stack="hugectr")
    assert llama.summary.priced_as_bound
    assert llama.summary.step_time_s == predict("llama3.2-1b", "h200", cfg, stack="ideal").summary.step_time_s
    hstu = predict("hstu-gr", "h200", gpus=8, stack="hugectr").summary
    assert hstu.priced_as_bound
    assert hstu.step_time_s == predict("hstu-gr", "h200", gpus=8, stack="ideal").summary.step_time_s
