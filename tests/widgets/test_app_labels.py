"""The workbench's stack control and its labels, driven from Python: every tab's numbers say the stack they are
for, ideal says it is a bound, and a configuration that does not fit gets no bar."""

import re

import pytest

from widgets import Workbench
from widgets.formatting import BOUND_LABEL

SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")


@pytest.fixture(scope="module")
def wb():
    return Workbench(model="llama3-8b", gpus=["h200", "b200"], seq_len=4096, tab="step time")


def _values(view) -> list[dict]:
    """The rows the browser gets (first draw: altair datasets; later: inline values)."""
    spec = view.spec
    return spec["data"]["values"] if "values" in spec["data"] else spec["datasets"][spec["data"]["name"]]


def _title(view) -> str:
    title = view.spec.get("title")
    return " ".join(title) if isinstance(title, list) else str(title)


def test_torchtitan_is_the_default_and_the_ideal_bound_is_labelled_a_bound(wb):
    # the core's default stack (it was the ideal bound before torchtitan became the default)
    assert wb.state["stack"] == wb.stack == "torchtitan" and wb.controls.by_field["stack"].value == "torchtitan"
    assert "torchtitan, eager" in _title(wb.views["step time"]) and BOUND_LABEL not in wb.step_table.value
    wb.set(stack="ideal")
    assert BOUND_LABEL in _title(wb.views["step time"])
    assert BOUND_LABEL in wb.step_caption.value and BOUND_LABEL in wb.step_table.value
    wb.set(tab="roofline")
    assert BOUND_LABEL in _title(wb.views["roofline"])
    wb.set(tab="step time")


def test_setting_the_stack_changes_the_step_and_the_label(wb):
    wb.set(stack="ideal")
    ideal = {g: p.summary.step_time_s for g, p in wb.comparison.predictions.items()}
    wb.set(stack="torchtitan", compile=True)
    assert wb.state["stack"] == "torchtitan" and wb.compile is True
    assert wb.controls.by_field["stack"].value == "torchtitan" and wb.controls.by_field["compile"].value
    assert not wb.controls.by_field["compile"].disabled  # torchtitan follows the configuration's compile flag
    compiled = {g: p.summary.step_time_s for g, p in wb.comparison.predictions.items()}
    assert all(p.summary.stack == "torchtitan" for p in wb.comparison.predictions.values())
    assert all(compiled[g] > ideal[g] for g in ideal)  # the bound is never beaten
    assert "torchtitan, torch.compile" in _title(wb.views["step time"]) and BOUND_LABEL not in wb.step_table.value
    assert "torchtitan, torch.compile" in wb.step_table.value
    wb.compile = False  # a traitlet assignment, as the checkbox's
    assert all(p.summary.step_time_s > compiled[g] for g, p in wb.comparison.predictions.items())
    assert "torchtitan, eager" in _title(wb.views["step time"])
    wb.controls.by_field["stack"].value = "pytorch-eager"  # the dropdown
    assert wb.state["stack"] == "pytorch-eager" and wb.controls.by_field["compile"].disabled
    assert "never" in wb.controls.by_field["compile"].description
    assert "Plain PyTorch, eager" in wb.step_table.value and "CPU launch time" in wb.step_table.value
    wb.set(stack="torchtitan", compile=False)  # back to the defaults


def test_a_configuration_that_does_not_fit_has_no_bar_and_shows_the_suggestion(wb):
    wb.set(micro_batch=6)  # Llama 3 8B, 4096 tokens: 6 samples per GPU fit a B200's HBM, not an H200's
    h200 = wb.comparison.predictions["h200-sxm"]
    assert not h200.summary.memory.fits
    rows = [r for r in _values(wb.views["step time"]) if r["gpu"] == "NVIDIA H200 SXM 141GB"]
    assert not [r for r in rows if r["layer"] == "part"]  # no bar
    (label,) = [r for r in rows if r["layer"] == "label"]
    assert label["text"].startswith("does not fit: needs ") and label["text"].endswith(" GB over)")
    assert label["fits"] is False and label["step_ms"] is None and label["uncertainty"] is None
    (note,) = [r for r in rows if r["layer"] == "note"]  # the nearest fit, on its own line under the shortfall
    assert note["text"] == f"micro-batch {h200.summary.max_micro_batch} fits" and "MFU" not in label["text"]
    assert f"micro-batch {h200.summary.max_micro_batch} fits" in wb.step_table.value
    b200 = [r for r in _values(wb.views["step time"]) if r["gpu"] == "NVIDIA B200 (HGX B200, 180GB)"]
    assert wb.comparison.predictions["b200"].summary.memory.fits and [r for r in b200 if r["layer"] == "part"]
    assert "MFU" in next(r["text"] for r in b200 if r["layer"] == "label")
    wb.set(tab="roofline")
    assert "does not fit: needs" in wb.roofline_notes.value
    wb.set(tab="step time", micro_batch=1)


def test_no_snake_case_headers_or_true_false_in_any_tab(wb):
    wb.set(stack="pytorch-eager", micro_batch=6, calibrated=True)  # one GPU fits, one does not
    shown = {}
    for tab in ("step time", "memory", "roofline"):
        wb.set(tab=tab)
    wb.show_op("h200", "attention.fwd")  # an op every stack launches
    shown = {"step time": wb.step_table.value, "memory": wb.memory_table.value + wb.memory_note.value,
             "op detail": wb.op_info.value}
    for name, html in shown.items():
        headers = re.findall(r"<th[^>]*>(.*?)</th>", html)
        assert headers, name
        assert not [h for h in headers if SNAKE.search(h)], (name, headers)
        assert not re.search(r">\s*(True|False)\s*<", html), name
        assert "h200-sxm" not in html, name  # display names in the UI
    share = dict(re.findall(r"<th[^>]*>(.*?)</th><td>(.*?)</td>", wb.op_info.value))["share of step"]
    assert re.fullmatch(r"\d+\.\d%", share)
    assert "MFU" in wb.step_table.value and "% of the bf16 dense peak" in wb.step_table.value
    assert "tokens/s per GPU" in wb.step_table.value
    wb.set(stack="ideal", micro_batch=1, calibrated=False, tab="step time")
