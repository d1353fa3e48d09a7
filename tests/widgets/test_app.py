"""The Workbench widget driven from Python: real ipywidgets, altair and core predictions, no browser."""

import json

import pytest

from workbench.errors import WorkbenchError
from widgets import Workbench

LLAMA_8B_CONFIG = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "intermediate_size": 14336, "vocab_size": 128256, "hidden_act": "silu",
                   "max_position_embeddings": 8192, "_name_or_path": "me/my-llama"}


@pytest.fixture(scope="module")
def wb():
    return Workbench(model="llama3-8b", gpus=["b200", "mi350x"], seq_len=4096)


def _gpus_in_roofline(wb):
    """The GPUs of the op points in the spec the browser gets (first draw: altair datasets; later: inline)."""
    spec = wb.views["roofline"].spec
    values = spec["data"]["values"] if "values" in spec["data"] else spec["datasets"][spec["data"]["name"]]
    return {row["gpu"] for row in values if row.get("layer") == "op"}


def test_state_round_trip_and_traitlets(wb):
    wb.set(precision="fp8", gpus=["b200", "mi350x", "h200"])
    assert wb.state["precision"] == wb.precision == "fp8"
    assert wb.state["gpus"] == wb.gpus == ["b200", "mi350x", "h200-sxm"]
    assert wb.controls.by_field["precision"].value == "fp8"
    assert wb.controls.by_field["gpus"].value == ("b200", "mi350x", "h200-sxm")
    wb.micro_batch = 2  # a traitlet assignment redraws like set()
    assert wb.state["micro_batch"] == 2 and wb.comparison.state.micro_batch == 2
    wb.set(precision="bf16", micro_batch=1, gpus=["b200", "mi350x"])


def test_bad_input_from_python_raises_and_keeps_the_state(wb):
    before = wb.state
    with pytest.raises(WorkbenchError, match="precision"):
        wb.precision = "fp7"
    with pytest.raises(WorkbenchError, match="Did you mean"):
        wb.set(gpus=["b20"])
    assert wb.state == before and wb.precision == before["precision"]


def test_controls_drive_the_state_and_the_roofline(wb):
    assert _gpus_in_roofline(wb) == {"NVIDIA B200 (HGX B200, 180GB)", "AMD Instinct MI350X"}
    wb.controls.by_field["gpus"].value = ("b200", "mi355x")
    assert wb.state["gpus"] == ["b200", "mi355x"]
    assert _gpus_in_roofline(wb) == {"NVIDIA B200 (HGX B200, 180GB)", "AMD Instinct MI355X"}
    wb.controls.by_field["gpus"].value = ()  # nothing selected: refused, shown, control restored
    assert "non-empty" in wb.status.value and wb.controls.by_field["gpus"].value == ("b200", "mi355x")
    wb.set(gpus=["b200", "mi350x"])


def test_clicking_a_point_shows_the_op(wb):
    view = wb.views["roofline"]
    # what the browser sends when a point is clicked (JupyterChart's selection store)
    clicked = {"gpu": "AMD Instinct MI350X", "op": "down.wgrad"}
    view._vl_selections = {"op": {"value": {"vlPoint": {"or": [clicked]}, "gpu": [clicked["gpu"]], "op": [clicked["op"]]},
                                  "store": [{"unit": "child__column_AMD Instinct MI350X_layer_3", "fields": [],
                                             "values": ["AMD Instinct MI350X", "down.wgrad"]}]}}
    assert view.selections.op.value[0]["op"] == "down.wgrad"
    assert wb.selected_op["op"] == "down.wgrad" and wb.selected_op["GPU"] == "AMD Instinct MI350X"
    assert "down.wgrad" in wb.op_info.value


def test_tabs_draw_when_opened(wb):
    wb.set(tab="step time")
    assert wb.tabs.selected_index == 1 and "tokens/s (total over 8 GPUs)" in wb.step_table.value
    assert "mi350x" in wb.advice_prompt.value and not wb.advice_button.disabled
    wb.advice_button.click()
    advice = wb.advices["mi350x"]  # the advisor's port from b200 to mi350x
    assert advice.source_gpu == "b200" and advice.target_gpu == "mi350x" and advice.co_designed.predicted.fits
    assert "co-designed" in wb.advice.value and wb.advice_view.spec is not None
    wb.set(micro_batch=2)  # a change clears the comparison (it would be stale)
    assert wb.advices == {} and wb.advice.value == ""
    wb.set(micro_batch=1)
    wb.tabs.selected_index = 2  # clicking the Memory tab
    assert wb.state["tab"] == "memory" and "largest micro-batch that fits" in wb.memory_table.value
    wb.set(tab="roofline")


def test_kernels_tab_explains_why_it_is_disabled_without_a_gpu(wb):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    wb.set(tab="kernels")
    assert "disabled" in wb.kernels.status.value and "no GPU found" in wb.kernels.status.value
    assert wb.kernels.run_button.disabled
    with pytest.raises(WorkbenchError, match="no chart yet"):
        wb.save_chart("kernels", "k.png")
    wb.set(tab="roofline")


def test_save_chart_png_and_svg_without_overwriting(wb, tmp_path):
    png = wb.save_chart("roofline", tmp_path / "roofline.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = wb.save_chart("memory", tmp_path / "memory.svg")
    assert "<svg" in svg.read_text()[:500]
    with pytest.raises(FileExistsError):
        wb.save_chart("roofline", png)
    with pytest.raises(ValueError, match=".png or .svg"):
        wb.save_chart("roofline", tmp_path / "roofline.pdf")


def test_recipe_export_writes_once_and_offers_a_download(wb, tmp_path):
    from workbench.recipe import load_recipe

    target = tmp_path / "r.yaml"
    written = wb.export_recipe(target, gpu="mi350x", kind="current")
    recipe = load_recipe(written)
    assert recipe.target.gpu == "mi350x" and recipe.target.gpus == wb.gpu_count
    assert recipe.batch.seq_len == 4096 and recipe.predicted.tokens_per_s == pytest.approx(
        wb.comparison.predictions["mi350x"].summary.tokens_per_s)
    searched = load_recipe(wb.export_recipe(tmp_path / "best.json", gpu="mi350x", format="json"))
    assert searched.target == recipe.target and searched.batch.seq_len == 4096
    assert searched.predicted.fits and searched.predicted.tokens_per_s >= recipe.predicted.tokens_per_s
    assert "download best.json" in wb.recipe.message.value and "data:text/plain" in wb.recipe.message.value
    target.write_text("mine")
    assert wb.export_recipe(target) is None and target.read_text() == "mine"
    assert "exists" in wb.recipe.message.value
    assert wb.export_recipe(target, overwrite=True) == target and target.read_text() != "mine"
    assert "download r.yaml" in wb.recipe.message.value


def test_a_pasted_hugging_face_config_becomes_the_model():
    wb = Workbench(gpus=["h200"])
    wb.model_input.text.value = json.dumps(LLAMA_8B_CONFIG)
    wb.model_input.button.click()
    assert wb.state["model"] == "my-llama" and "added" in wb.model_input.status.value
    assert "my-llama" in [v for _, v in wb.controls.by_field["model"].options]
    assert wb.comparison.predictions["h200-sxm"].model.num_layers == 32
    wb.set(tab="recipe")  # recipes name catalog models: the tab says so instead of failing
    assert "catalog model" in wb.recipe.preview.value and wb.recipe.export_button.disabled
    wb.set(tab="memory")
    assert "largest micro-batch that fits" in wb.memory_table.value
    wb.model_input.text.value = '{"hidden_size": 4096,'
    wb.model_input.button.click()  # refused, shown, the model kept (tests/widgets/test_input_errors.py: the rest)
    assert "JSON" in wb.model_input.status.value and wb.state["model"] == "my-llama"
    upload = {"name": "config.json", "content": memoryview(json.dumps({"hidden_size": 64}).encode())}
    wb.model_input.add_upload([upload])
    status = wb.model_input.status.value
    assert "wb-error" in status and "config.json" in status and wb.state["model"] == "my-llama"


def test_text_representation_carries_the_prediction_summary(wb):
    text = wb._repr_mimebundle_()["text/plain"]
    assert "tokens/s total over 8 GPUs" in text and "NVIDIA B200" in text and "AMD Instinct MI350X" in text


def test_kernels_tab_draws_benchmark_rows_over_the_prediction(wb, tmp_path):
    """The GPU path's drawing, with rows shaped like workbench.bench.run_suite's (no GPU needed to draw)."""
    import pandas as pd

    from workbench.bench import LocalGPU
    from workbench.hardware import get_gpu

    panel = wb.kernels
    checked, local = panel.checked, panel.local
    panel.checked, panel.local = True, LocalGPU("NVIDIA H200", "cuda", get_gpu("h200"), "570", "2.11", "3.6", "sm_90")
    rows = pd.DataFrame([{"module": "gemm", "name": "gemm-bf16-4096", "dtype": "bf16", "flops": 2 * 4096**3,
                          "bytes": 3 * 2 * 4096**2, "triton_ms": 0.21, "baseline_ms": 0.19, "error": ""}])
    try:
        panel.show(rows)
        spec = panel.chart.to_dict()
        values = spec["datasets"][spec["data"]["name"]]
        assert {r["kernel"] for r in values if r.get("kernel")} == {"triton", "vendor"}
        assert any(r.get("layer") == "op" and r.get("share_pct") for r in values)  # predicted ops underneath
        assert wb.save_chart("kernels", tmp_path / "kernels.svg").read_text().count("<svg") >= 1
    finally:
        panel.checked, panel.local, panel.chart = checked, local, None


def test_kernels_tab_parses_gemm_shapes():
    from widgets.kernels_tab import parse_gemm_shapes

    assert parse_gemm_shapes("4096x1024x512, 8x16x32 fp8,") == [
        {"m": 4096, "n": 1024, "k": 512, "dtype": "bf16"}, {"m": 8, "n": 16, "k": 32, "dtype": "fp8"}]
    assert parse_gemm_shapes("") == []
    for bad in ("4096x1024", "4096x1024x0", "1x2x3 int4"):
        with pytest.raises(WorkbenchError, match="GEMM shape"):
            parse_gemm_shapes(bad)
