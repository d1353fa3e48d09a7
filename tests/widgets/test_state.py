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
    assert WorkbenchState().stack == "ideal" and WorkbenchState().compile is False  # the core's default
    with pytest.raises(UnknownNameError, match="Did you mean torchtitan"):
        WorkbenchState().replace(stack="torchtitn")
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(compile="yes")
    assert info.value.field == "compile"
    with pytest.raises(SpecError) as info:
        WorkbenchState().replace(stack="my-stack.yaml")  # a file is not a catalog stack the dropdown lists
    assert info.value.field == "stack"
