"""Direct port vs co-designed data from the real advisor (workbench.recipe.advisor)."""

import re

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
    shown = advice_html(advices, "h100-sxm")
    assert "NVIDIA H100 SXM5 80GB &rarr; AMD Instinct MI350X" in shown and "h100-sxm" not in shown  # display names
    headers = re.findall(r"<th[^>]*>(.*?)</th>", shown)
    assert "predicted gain" in headers and "needs retraining" in headers
    assert not [h for h in headers if re.search(r"\b[a-z0-9]+_[a-z0-9_]+\b", h)]  # headers in words
    assert not re.search(r">\s*(True|False)\s*<", shown) and not re.search(r">0\.\d{4,}<", shown)
    assert "tokens/s (total over 8 GPUs)" in shown


def test_reasons_instead_of_advice():
    one = WorkbenchState(gpus=("b200",))
    assert advise_all(one) == {} and "two or more GPUs" in advice_prompt(one)
    custom = {"mine": get_model("gpt2-small")}
    state = WorkbenchState().replace(custom, model="mine", gpus=["h200", "b200"])
    assert "catalog models" in advise_all(state, custom)["b200"]
    too_small = WorkbenchState(model="llama3-405b", gpus=("h100-sxm", "b200"), gpu_count=1)
    reason = advise_all(too_small)["b200"]
    assert isinstance(reason, str) and "fits" in reason


def test_a_source_where_nothing_fits_is_shown_not_a_crash():
    # Llama 3 70B fits no configuration of 8 H200s at sequence 8192: there is no direct port to show
    state = WorkbenchState(model="llama3-70b", gpus=("h200-sxm", "b200"), gpu_count=8, seq_len=8192)
    advices = advise_all(state)
    shown = advice_html(advices, "h200-sxm")
    assert "none fits" in shown or "does not fit" in shown
    advice_chart(advice_frame(advices), "h200-sxm").to_dict(validate=True)


def test_the_advisor_gets_the_global_batch_and_the_panel_says_what_is_held(monkeypatch):
    import workbench.recipe.advisor as advisor

    seen = []
    monkeypatch.setattr(advisor, "advise", lambda *args, **kwargs: seen.append((args, kwargs)) or "stub")
    state = WorkbenchState().replace(gpus=["h200", "b200"], gpu_count=16, tp=2, pp=2, sharding="ddp",
                                     global_batch=512, stack="torchtitan", seq_len=4096)
    assert advise_all(state) == {"b200": "stub"}
    (args, kwargs), = seen
    assert args == ("llama3-8b", "h200-sxm", "b200", 16, "bf16")
    assert kwargs["global_batch"] == 512 and kwargs["seq_len"] == 4096
    text = advice_prompt(state)
    for words in ("Held fixed on both sides: Llama 3 8B, 16 GPUs per GPU type, bf16, sequence 4,096, global batch 512",
                  "yours: tp 2, pp 2, DDP", "not as torchtitan, eager", "has no split or stack parameter"):
        assert words in text, text
    assert "global batch auto" in advice_prompt(WorkbenchState())
