"""Direct port vs co-designed data from the real advisor (workbench.recipe.advisor)."""

import re

import pytest

from workbench.models import get_model
from widgets.advice import advice_chart, advice_frame, advice_html, advice_prompt, advise_all, advisor_controls
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


def test_the_advisor_gets_the_controls_and_the_panel_says_what_is_held(monkeypatch):
    import workbench.recipe.advisor as advisor

    seen = []
    monkeypatch.setattr(advisor, "advise", lambda *args, **kwargs: seen.append((args, kwargs)) or "stub")
    state = WorkbenchState().replace(gpus=["h200", "b200"], gpu_count=16, tp=2, pp=2, sharding="ddp",
                                     global_batch=512, stack="torchtitan", seq_len=4096)
    assert advise_all(state) == {"b200": "stub"}
    (args, kwargs), = seen
    assert args == ("llama3-8b", "h200-sxm", "b200", 16, "bf16")
    assert kwargs == {"seq_len": 4096, "global_batch": 512, "stack": "torchtitan", "param_dtype": None, "tp": 2,
                      "pp": 2, "ep": 1, "cp": 1, "virtual_stages": 1, "sharding": "ddp", "lora_rank": 0,
                      "calibrated": False}
    text = advice_prompt(state)
    for words in ("Held fixed on both sides: Llama 3 8B, 16 GPUs per GPU type, bf16, sequence 4,096, global batch 512",
                  "split tp 2, pp 2, ep 1, cp 1, virtual stages 1, DDP", "every recipe priced as torchtitan",
                  "eager or torch.compile (yours: eager)", "activation checkpointing (yours: none)"):
        assert words in text, text
    assert "global batch auto" in advice_prompt(WorkbenchState())
    assert "all weights trained (no LoRA); every recipe priced as torchtitan" in text
    assert "with fp32 parameters (bf16 autocast)" in text
    lora = state.replace(lora_rank=8, sharding="zero1")
    assert "LoRA rank 8 on q, k, v, o" in advice_prompt(lora)
    assert advisor_controls(lora)["lora_rank"] == 8
    bf16 = state.replace(stack="pytorch-eager", param_dtype="bf16")
    assert advisor_controls(bf16)["param_dtype"] == "bf16" and "with bf16 parameters" in advice_prompt(bf16)


def test_the_advisor_holds_the_split_and_prices_the_stack():
    state = WorkbenchState().replace(model="llama3-8b", gpus=["h100-sxm", "h200"], gpu_count=8, tp=2,
                                     stack="pytorch-eager", seq_len=4096)
    advice = advise_all(state)["h200-sxm"]
    assert advice.stack == "pytorch-eager" and advice.held["tp"] == 2 and advice.held["sharding"] == "fsdp"
    for recipe in (advice.source, advice.direct_port, advice.co_designed):
        assert recipe.parallelism.tp == 2 and recipe.parallelism.pp == 1 and recipe.predicted.stack == "pytorch-eager"
    shown = advice_html({"h200-sxm": advice}, "h100-sxm", state)
    assert "+/- 5%: " in advice.gain_text and advice.gain_text in shown  # the gain with its uncertainty
    assert "priced as Plain PyTorch, eager" in shown and ">Plain PyTorch, eager<" in shown  # in words, text and table
    cp = advise_all(state.replace(gpu_count=8, tp=1, cp=2))["h200-sxm"]
    assert not isinstance(cp, str) and cp.co_designed.parallelism.cp == 2  # recipes record cp: held on both sides
