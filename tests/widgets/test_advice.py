"""Direct port vs co-designed data from the real advisor (workbench.recipe.advisor)."""

import pytest

from workbench.models import get_model
from widgets.advice import advice_chart, advice_frame, advice_html, advice_prompt, advise_all
from widgets.state import WorkbenchState

pytest.importorskip("workbench.recipe.advisor")


def test_advice_per_target_with_both_variants():
    state = WorkbenchState(model="llama3-8b", gpus=("h100-sxm", "h200-sxm", "mi350x"), gpu_count=8, seq_len=4096)
    advices = advise_all(state)
    assert list(advices) == ["h200-sxm", "mi350x"]
    frame = advice_frame(advices)
    assert set(frame["variant"]) == {"direct port", "co-designed"}
    for target, advice in advices.items():
        assert advice.source_gpu == "h100-sxm" and advice.target_gpu == target
    co = frame[frame["variant"] == "co-designed"].set_index("target")["tokens_per_s"]
    port = frame[frame["variant"] == "direct port"].set_index("target")["tokens_per_s"]
    assert (co >= port * 0.999).all()  # the co-designed recipe is the target's best: never slower
    advice_chart(frame, "h100-sxm").to_dict(validate=True)
    assert "h100-sxm &rarr;" in advice_html(advices, "h100-sxm")


def test_reasons_instead_of_advice():
    one = WorkbenchState(gpus=("b200",))
    assert advise_all(one) == {} and "two or more GPUs" in advice_prompt(one)
    custom = {"mine": get_model("gpt2-small")}
    state = WorkbenchState().replace(custom, model="mine", gpus=["h200", "b200"])
    assert "catalog models" in advise_all(state, custom)["b200"]
    too_small = WorkbenchState(model="llama3-405b", gpus=("h100-sxm", "b200"), gpu_count=1)
    reason = advise_all(too_small)["b200"]
    assert isinstance(reason, str) and "fits" in reason
