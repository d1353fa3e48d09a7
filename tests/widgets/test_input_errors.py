"""Malformed input through the widget's own objects (no browser): every case ends in a visible message that names
the problem, and the workbench keeps working. Messages are matched on what they name, not their wording: the
model loader's messages change as it gets stricter."""

from __future__ import annotations

import html
import json
import logging
import re
import time

import pytest

from widgets import Workbench

LLAMA = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256, "hidden_act": "silu", "max_position_embeddings": 8192,
         "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
BERT = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522, "hidden_act": "gelu",
        "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12}


@pytest.fixture(scope="module")
def wb():
    return Workbench(gpus=["h200"], seq_len=2048)


def _text(value: str) -> str:
    """What a status line shows: its HTML without tags, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", value)).strip()


def _paste(wb, config: str | dict, name: str = "") -> str:
    wb.model_input.text.value = config if isinstance(config, str) else json.dumps(config)
    wb.model_input.name.value = name
    wb.model_input.button.click()
    return _text(wb.model_input.status.value)


def _upload(wb, content: bytes, filename: str = "config.json") -> str:
    """Upload a file, then press Add model as a user does once the file is read (an upload only fills the text
    box: a file that cannot be read is refused at once)."""
    wb.model_input.add_upload(({"name": filename, "type": "application/json", "size": len(content),
                                "content": memoryview(content), "last_modified": 0},))
    if "error" not in wb.model_input.status.value:
        assert "Add model" in wb.model_input.status.value
        wb.model_input.button.click()
    return _text(wb.model_input.status.value)


def _added(wb) -> str:
    """Reset the status with a good model, so a failure cannot pass on the previous message."""
    message = _paste(wb, {**LLAMA, "_name_or_path": "me/good-llama"})
    assert message.startswith("added good-llama"), message
    return message


def _refused(wb, message: str, *names: str) -> None:
    """``message`` is an error naming each of ``names`` (case-insensitive), and the model stayed as it was."""
    assert message and not message.startswith("added"), message
    assert "internal error" not in message, message
    for name in names:
        assert name.lower() in message.lower(), f"{name!r} not named in: {message}"
    assert wb.state["model"] == "good-llama"
    assert "error" in wb.model_input.status.value  # shown as an error (class wb-error)


@pytest.mark.parametrize("text, names", [
    ('{"hidden_size": 4096,', ["JSON", "line 1"]),
    ("[1, 2, 3]", ["object"]),
    ('"just a string"', ["object"]),
    ("", ["empty"]),
    ("   \n", ["empty"]),
    ("{}", ["hidden_size"]),
], ids=["invalid-json", "json-list", "json-string", "empty", "blank", "empty-object"])
def test_pasted_text_that_is_not_a_config(wb, text, names):
    _added(wb)
    _refused(wb, _paste(wb, text), "pasted config.json", *names)


@pytest.mark.parametrize("content, names", [
    (b"", ["config.json", "empty"]),
    (json.dumps({**LLAMA, "_name_or_path": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"),
     ["config.json", "UTF-8"]),
    (b"\xff\xfe{\x00}\x00", ["config.json", "UTF-8"]),  # UTF-16, as some editors save
    (b"[1, 2]", ["config.json", "object"]),
], ids=["empty-file", "latin-1", "utf-16", "json-list"])
def test_uploaded_files_that_are_not_a_config(wb, content, names):
    _added(wb)
    _refused(wb, _upload(wb, content), *names)


def test_an_upload_over_the_size_limit_is_refused_before_parsing(wb):
    from workbench.fileio import DEFAULT_MAX_BYTES

    _added(wb)
    _refused(wb, _upload(wb, b" " * (DEFAULT_MAX_BYTES + 1) + b"{}", "big.json"), "big.json", "bytes")


def test_a_utf8_upload_with_a_byte_order_mark_is_read():
    wb = Workbench(gpus=["h200"], seq_len=2048)
    message = _upload(wb, b"\xef\xbb\xbf" + json.dumps({**LLAMA, "_name_or_path": "me/bom-llama"}).encode())
    assert message.startswith("added bom-llama") and wb.state["model"] == "bom-llama"


def test_a_bert_config_is_refused_or_named(wb):
    """BERT is an encoder: the loader refuses the architectures it does not implement. Until it does everywhere,
    the message still names the model it read."""
    _added(wb)
    message = _paste(wb, BERT)
    assert "bert" in message.lower(), message
    if not message.startswith("added"):
        _refused(wb, message, "bert")
        assert "bert" not in [v for _, v in wb.controls.by_field["model"].options]


@pytest.mark.parametrize("field, value", [
    ("num_local_experts", "8"), ("num_local_experts", None), ("max_position_embeddings", "8k"),
    ("num_hidden_layers", 1e400), ("num_hidden_layers", -4), ("hidden_size", "4096"),
])
def test_a_config_with_a_field_of_the_wrong_type(wb, field, value):
    _added(wb)
    config = {**LLAMA, field: value, **({"num_experts_per_tok": 2} if "experts" in field else {})}
    _refused(wb, _paste(wb, json.dumps(config).replace("Infinity", "1e400")), field)  # 1e400: JSON's overflow


def test_a_huge_number_of_layers_ends_in_a_message_in_time(wb):
    """10^12 layers: refused by a bound on the layer count, or added with its parameter count shown."""
    _added(wb)
    start = time.perf_counter()
    message = _paste(wb, {**LLAMA, "num_hidden_layers": 10**12, "_name_or_path": "me/deep"})
    assert time.perf_counter() - start < 30
    if message.startswith("added"):
        assert "e+" in message and "parameters" in message, message  # 2.18e+11 B: the size is in plain sight
        assert wb.state["model"] == "deep" and wb.comparison is not None
    else:
        _refused(wb, message, "layers")


def test_a_name_with_html_is_shown_as_text_and_saved_under_a_safe_file_name(tmp_path, monkeypatch):
    wb = Workbench(gpus=["h200"], seq_len=2048)
    message = _paste(wb, LLAMA, name='<img src=x onerror=alert(1)> & "..\\..\\x')
    name = wb.state["model"]  # the loader keeps the last path part, lower case
    assert "<img src=x onerror=alert(1)>" in name and message.startswith(f"added {name} ("), message
    assert "<img" not in wb.model_input.status.value and "&lt;img" in wb.model_input.status.value
    assert "<img" not in wb.status.value and "<img" not in wb.roofline_notes.value
    monkeypatch.chdir(tmp_path)
    wb.save_format.value = "svg"
    wb.save_button.click()
    (saved,) = (tmp_path / "charts").iterdir()
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*\.svg", saved.name), saved.name
    assert "saved" in wb.save_link.value and "<img" not in wb.save_link.value
    assert [p.name for p in tmp_path.iterdir()] == ["charts"]  # nothing written outside charts/


def test_a_catalog_model_name_is_not_taken_over(wb):
    _added(wb)
    _refused(wb, _paste(wb, LLAMA, name="llama3-70b"), "llama3-70b", "catalog")


def test_an_unexpected_exception_in_the_model_input_is_shown_and_logged(wb, monkeypatch, caplog):
    import widgets.controls

    _added(wb)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(widgets.controls, "from_hf_config", broken)
    with caplog.at_level(logging.ERROR, logger="widgets.controls"):
        message = _paste(wb, LLAMA)
    assert message.startswith("pasted config.json: internal error: ZeroDivisionError: float division by zero"), message
    assert wb.state["model"] == "good-llama"
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)
    message = _upload(wb, b"{}", "x.json")  # the upload path crosses the same boundary
    assert "x.json: internal error: ZeroDivisionError" in message


def test_an_upload_missing_its_content_is_shown(wb, caplog):
    _added(wb)
    with caplog.at_level(logging.ERROR, logger="widgets.controls"):
        wb.model_input.add_upload(({"name": "odd.json"},))
    assert "odd.json: internal error: KeyError" in _text(wb.model_input.status.value)


def test_a_failing_refresh_is_shown_and_the_controls_go_back(wb, monkeypatch, caplog):
    """The main refresh (prediction and drawing) failing under a control change: shown, state and controls kept."""
    _added(wb)
    before = wb.state

    def broken(*args, **kwargs):
        raise RuntimeError("the predictor broke")

    monkeypatch.setattr(type(wb._predictor), "compare", broken)  # the class: adding a model makes a new one
    with caplog.at_level(logging.ERROR, logger="widgets.controls"):
        wb.controls.by_field["micro_batch"].value = 4
    assert _text(wb.status.value) == "internal error: RuntimeError: the predictor broke (the traceback is in the log)"
    assert wb.state == before and wb.controls.by_field["micro_batch"].value == before["micro_batch"]
    assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)
    message = _paste(wb, {**LLAMA, "_name_or_path": "me/other"})  # adding a model runs the same refresh
    assert "internal error: RuntimeError" in message and wb.state["model"] == "good-llama"
    assert "other" not in [v for _, v in wb.controls.by_field["model"].options]  # not half added
    monkeypatch.undo()
    wb.controls.by_field["micro_batch"].value = 2  # and the workbench works again
    assert wb.state["micro_batch"] == 2 and wb.status.value == ""
    wb.set(micro_batch=1)


def test_a_failing_tab_draw_is_shown(wb, monkeypatch, caplog):
    _added(wb)
    wb.set(micro_batch=3)  # every tab is redrawn on its next opening

    def broken(context):
        raise KeyError("step_ms")

    monkeypatch.setattr(wb.panels["step time"], "draw", broken)
    with caplog.at_level(logging.ERROR, logger="widgets.controls"):
        wb.tabs.selected_index = 1  # clicking the Step time tab
    assert "internal error: KeyError" in _text(wb.status.value)
    monkeypatch.undo()
    wb.set(tab="roofline", micro_batch=1)


def test_a_click_on_an_unknown_point_and_a_failing_advisor_are_shown(wb, monkeypatch, caplog):
    import widgets.advisor_panel

    _added(wb)

    class Selection:  # what JupyterChart's selection trait carries
        value = [{"gpu": "no-such-gpu", "op": "down.wgrad"}]

    wb._on_select({"new": Selection()})
    assert "no-such-gpu" in _text(wb.status.value)

    def broken(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(widgets.advisor_panel, "advise_all", broken)
    with caplog.at_level(logging.ERROR, logger="widgets.controls"):
        wb.advice_button.click()
    assert "internal error: MemoryError" in _text(wb.status.value)


def test_an_error_names_its_origin_once(wb):
    _added(wb)
    for message in (_paste(wb, "{}"), _upload(wb, b"{}", "mine.json"), _paste(wb, LLAMA, name="llama3-70b")):
        origin = message.split(":")[0]
        assert message.count(f"{origin}:") == 1, message
