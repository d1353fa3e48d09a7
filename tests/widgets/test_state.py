"""WorkbenchState: validation with clear errors, canonical names, plain-dict form."""

import pytest

from workbench.errors import SpecError, UnknownNameError
from widgets.state import TABS, WorkbenchState


def test_replace_canonicalises_names_and_keeps_order():
    state = WorkbenchState().replace(model="LLAMA3-70B", gpus=["h200", "b200", "h200-sxm"])
    assert state.model == "llama3-70b"
    assert state.gpus == ("h200-sxm", "b200")  # alias resolved, duplicate dropped, order kept
    assert state.as_dict()["gpus"] == ["h200-sxm", "b200"]


def test_a_single_gpu_name_is_a_list_of_one():
    assert WorkbenchState().replace(gpus="mi350x").gpus == ("mi350x",)


@pytest.mark.parametrize("changes, field, expected", [
    ({"precision": "fp9"}, "precision", "one of fp32"),
    ({"micro_batch": 0}, "micro_batch", "a positive integer"),
    ({"seq_len": 2.5}, "seq_len", "a positive integer"),
    ({"gpu_count": True}, "gpu_count", "a positive integer"),
    ({"checkpointing": "some"}, "checkpointing", "none, selective, full"),
    ({"tab": "power"}, "tab", "roofline"),
    ({"gpus": []}, "gpus", "non-empty list"),
    ({"colour": "red"}, "colour", "a state field"),
])
def test_bad_values_name_the_field_and_what_was_expected(changes, field, expected):
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(**changes)
    assert info.value.field == field and expected in str(info.value)


def test_unknown_names_suggest_close_ones():
    with pytest.raises(UnknownNameError, match="Did you mean.*mi355x"):
        WorkbenchState().replace(gpus=["b200", "mi355"])
    with pytest.raises(UnknownNameError, match="llama3-70b"):
        WorkbenchState().replace(model="llama3-71b")


def test_custom_models_are_valid_model_names(tmp_path):
    from workbench.models import get_model

    custom = {"mine": get_model("gpt2-small")}
    assert WorkbenchState().replace(custom, model="mine").model == "mine"
    with pytest.raises(UnknownNameError, match="mine"):  # the error lists the user's models too
        WorkbenchState().replace(custom, model="yours")


def test_every_tab_is_a_valid_state():
    assert [WorkbenchState().replace(tab=t).tab for t in TABS] == list(TABS)


def test_stack_and_compile_are_validated():
    state = WorkbenchState().replace(stack="torchtitan", compile=True)
    assert (state.stack, state.compile) == ("torchtitan", True)
    assert WorkbenchState().stack == "torchtitan" and WorkbenchState().compile is False  # the core's default
    with pytest.raises(UnknownNameError, match="Did you mean torchtitan"):
        WorkbenchState().replace(stack="torchtitn")
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(compile="yes")
    assert info.value.field == "compile"
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(stack="my-stack.yaml")  # a file is not a catalog stack the dropdown lists
    assert info.value.field == "stack"


def test_the_stack_follows_the_model_until_one_is_chosen():
    state = WorkbenchState()
    assert (state.stack, state.stack_chosen) == ("torchtitan", False)
    dlrm = state.replace(model="dlrm-dcnv2")  # DLRM's family default is the labelled bound
    assert (dlrm.stack, dlrm.stack_chosen) == ("ideal", False) and WorkbenchState(model="hstu-gr").stack == "ideal"
    assert dlrm.replace(model="llama3-8b").stack == "torchtitan"  # and back
    chosen = state.replace(stack="torchtitan")  # the same name, but chosen: kept when the model changes
    assert chosen.stack_chosen and chosen.replace(model="dlrm-dcnv2").stack == "torchtitan"
    eager = dlrm.replace(stack="pytorch-eager")
    assert eager.replace(model="llama3-8b").stack == "pytorch-eager"
    again = chosen.replace(model="dlrm-dcnv2").replace(stack=None)  # None: the model's default, following again
    assert (again.stack, again.stack_chosen) == ("ideal", False)
    assert chosen.replace(model="dlrm-dcnv2", stack_chosen=False).stack == "ideal"


def test_parallelism_fields_compose_the_gpu_count():
    from widgets.state import resolved_global_batch, training_config

    state = WorkbenchState().replace(gpu_count=16, tp=2, pp=2, sharding="ddp", global_batch=256)
    assert state.dp == 4 and state.parallelism().gpus == 16 and state.parallelism().sharding == "ddp"
    from workbench.models import get_model

    model = get_model(state.model)
    cfg = training_config(state, model).resolved(model)
    assert cfg.global_batch == 256 and cfg.grad_accumulation == 256 // (1 * 4)
    auto = state.replace(global_batch=0, micro_batch=3)  # auto: the search's standard, a multiple of mb x dp
    from workbench.recipe.search import default_global_batch

    standard = default_global_batch(model, 16, state.seq_len)
    assert resolved_global_batch(auto, model) % (3 * 4) == 0
    assert abs(resolved_global_batch(auto, model) - standard) <= 3 * 4 / 2
    assert resolved_global_batch(state.replace(global_batch=0), model) == standard


@pytest.mark.parametrize("changes, field, expected", [
    ({"tp": 3}, "tp", "tp x pp x cp = 3 x 1 x 1 = 3 must divide the 8 GPUs"),
    ({"cp": 2, "seq_len": 8191}, "seq_len", "a multiple of 2 x cp = 4"),
    ({"virtual_stages": 2}, "virtual_stages", "without pipeline parallelism"),
    ({"lora_rank": -1}, "lora_rank", "or 0 for full training"),
    ({"tp": 3, "gpu_count": 24}, "tp", "a divisor of num_heads=32"),
    ({"pp": 64, "gpu_count": 64}, "pp", "at most num_layers=32"),
    ({"ep": 2}, "ep", "has no experts"),
    ({"model": "mixtral-8x7b", "ep": 3}, "ep", "a divisor of dp x cp = 8"),
    ({"global_batch": 12}, "global_batch", "a multiple of micro-batch x dp = 1 x 8 = 8"),
    ({"global_batch": -1}, "global_batch", "or 0 for auto"),
    ({"sharding": "zero3"}, "sharding", "ddp, fsdp, zero1"),
    ({"tp": 0}, "tp", "a positive integer"),
])
def test_invalid_splits_name_the_field(changes, field, expected):
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(**changes)
    assert info.value.field == field and expected in str(info.value)


def test_a_split_the_new_model_cannot_take_goes_back_to_one():
    moe = WorkbenchState().replace(model="mixtral-8x7b", ep=2, tp=2)
    assert (moe.ep, moe.tp) == (2, 2)
    dense = moe.replace(model="gpt2-small")  # no experts, 12 heads tp=2 divides... ep cannot stay
    assert dense.ep == 1
    with pytest.raises(SpecError):  # asked for explicitly, it is refused instead
        moe.replace(model="gpt2-small", ep=2)


def test_context_parallelism_zero1_interleaving_and_lora_reach_the_core():
    state = WorkbenchState().replace(gpu_count=16, cp=2, pp=2, virtual_stages=2, sharding="zero1", lora_rank=16,
                                     seq_len=8192)
    assert state.dp == 4 and state.parallelism().gpus == 16
    p = state.parallelism()
    assert (p.cp, p.virtual_stages, p.sharding) == (2, 2, "zero1")
    from workbench.models import get_model
    from widgets.state import training_config

    assert training_config(state, get_model(state.model)).lora_rank == 16


def test_the_parameter_dtype_is_one_of_the_stacks_and_follows_the_stack():
    state = WorkbenchState()
    from workbench.stacks import get_stack

    assert state.param_dtype == get_stack(state.stack).param_dtypes[0]  # None fills in as the stack's default
    eager = state.replace(stack="pytorch-eager", param_dtype="bf16")
    assert eager.param_dtype == "bf16" and eager.as_dict()["param_dtype"] == "bf16"
    assert eager.replace(stack="pytorch-compile").param_dtype == "bf16"  # a choice both stacks train with stays
    assert eager.replace(stack="torchtitan").param_dtype == "fp32"  # torchtitan trains fp32 parameters only
    assert state.replace(stack="megatron").param_dtype == "bf16"  # left at a default: the new stack's default
    with pytest.raises(SpecError, match=r"param_dtype.*one of fp32 \(what torchtitan trains with\)"):
        state.replace(stack="torchtitan", param_dtype="bf16")
    with pytest.raises(SpecError, match="param_dtype"):
        state.replace(param_dtype="fp8")
