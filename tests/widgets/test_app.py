"""The Workbench widget driven from Python: real ipywidgets, altair and core predictions, no browser."""

import json
import re

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


def test_the_stack_control_follows_the_model_until_chosen(wb):
    model, stack = wb.controls.by_field["model"], wb.controls.by_field["stack"]
    model.value = "dlrm-dcnv2"  # no stack chosen: DLRM's default, the labelled bound
    assert (wb.stack, stack.value, wb.stack_chosen) == ("ideal", "ideal", False) and "default" in stack.tooltip
    stack.value = "pytorch-eager"  # a choice from the control is kept when the model changes
    model.value = "llama3-8b"
    assert (wb.stack, stack.value, wb.stack_chosen) == ("pytorch-eager", "pytorch-eager", True)
    wb.set(stack=None)  # following the model again
    assert (wb.stack, wb.stack_chosen) == ("torchtitan", False) and stack.value == "torchtitan"


def test_clicking_a_point_shows_the_op(wb):
    view = wb.views["roofline"]
    # what the browser sends when a point is clicked (JupyterChart's selection store)
    clicked = {"gpu": "AMD Instinct MI350X", "op": "w2.wgrad"}  # the default stack's (torchtitan's) down projection
    view._vl_selections = {"op": {"value": {"vlPoint": {"or": [clicked]}, "gpu": [clicked["gpu"]], "op": [clicked["op"]]},
                                  "store": [{"unit": "child__column_AMD Instinct MI350X_layer_3", "fields": [],
                                             "values": ["AMD Instinct MI350X", "w2.wgrad"]}]}}
    assert view.selections.op.value[0]["op"] == "w2.wgrad"
    assert wb.selected_op["op"] == "w2.wgrad" and wb.selected_op["GPU"] == "AMD Instinct MI350X"
    assert "w2.wgrad" in wb.op_info.value


def test_tabs_draw_when_opened(wb):
    wb.set(tab="step time")
    assert wb.tabs.selected_index == 1 and "tokens/s (total over 8 GPUs)" in wb.step_table.value
    assert "AMD Instinct MI350X" in wb.advice_prompt.value and not wb.advice_button.disabled
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
    wb.model_input.add_upload([upload])  # read into the text box; Add model builds it
    assert wb.state["model"] == "my-llama" and "Add model" in wb.model_input.status.value
    wb.model_input.button.click()
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


def test_the_gpu_picker_is_checkboxes_with_the_selection_visible(wb):
    picker = wb.controls.by_field["gpus"]
    from workbench.hardware import list_gpus

    assert picker.value == tuple(wb.gpus) and list(picker.boxes) == [g.name for g in list_gpus()]  # none hidden
    assert [n for n, box in picker.boxes.items() if box.value] == sorted(wb.gpus, key=list(picker.boxes).index)
    picker.boxes["mi355x"].value = True  # a tick adds the GPU at the end
    assert wb.state["gpus"] == ["b200", "mi350x", "mi355x"] and "AMD Instinct MI355X" in picker.order.value
    for name in ("h100-sxm", "h200-sxm"):
        picker.boxes[name].value = True
    assert len(wb.state["gpus"]) == 5 and len(wb.comparison.predictions) == 5
    picker.boxes["b200"].value = False
    assert wb.state["gpus"] == ["mi350x", "mi355x", "h100-sxm", "h200-sxm"]
    wb.set(gpus=["b200", "mi350x"])
    assert [n for n, box in picker.boxes.items() if box.value] == ["b200", "mi350x"]


def test_parallelism_controls_drive_the_prediction_and_refuse_bad_splits(wb):
    c = wb.controls.by_field
    assert c["ep"].disabled and "MoE only" in c["ep"].description  # llama3-8b has no experts
    c["gpu_count"].value = 16
    c["tp"].value = 2
    c["pp"].value = 2
    c["sharding"].value = "ddp"
    assert (wb.tp, wb.pp, wb.sharding, wb.state["gpu_count"]) == (2, 2, "ddp", 16)
    par = wb.comparison.predictions["b200"].config.parallelism
    assert (par.dp, par.tp, par.pp, par.sharding) == (4, 2, 2, "ddp")
    assert "16 GPUs = dp 4 × tp 2 × pp 2 (DDP)" in wb.controls.split.value
    c["tp"].value = 3  # 3 x 2 does not divide 16: shown, not raised, control back
    assert "must divide the 16 GPUs" in wb.status.value and c["tp"].value == 2 and wb.tp == 2
    c["global_batch"].value = 7
    assert "multiple of micro-batch x dp" in wb.status.value and c["global_batch"].value == 0
    with pytest.raises(WorkbenchError, match="num_heads"):
        wb.set(tp=64, gpu_count=64, pp=1)  # 32 heads
    wb.set(tp=16, gpu_count=16, pp=1)  # beyond an 8-GPU NVLink domain: a message per GPU, no traceback
    assert "scale-up domain" in wb.status.value and not wb.comparison.predictions
    wb.set(model="mixtral-8x7b", tp=1, gpu_count=8, ep=2, sharding="fsdp")
    assert not c["ep"].disabled and wb.comparison.predictions["b200"].config.parallelism.ep == 2
    wb.set(model="llama3-8b")
    assert wb.ep == 1 and c["ep"].disabled


def test_save_chart_only_on_tabs_with_a_chart_and_the_trust_tab(wb):
    wb.set(tab="recipe")
    assert wb.save_bar.layout.display == "none"
    wb.set(tab="trust", gpus=["h200", "b200"], stack="torchtitan")
    assert wb.save_bar.layout.display == "none" and wb.tabs.get_title(5) == "How far to trust this"
    assert "torchtitan on the NVIDIA H200 SXM 141GB" in wb.trust_summary.value
    assert "not validated on this GPU" in wb.trust_summary.value  # the B200
    assert "predicted step" in wb.trust_table.value and "torchtitan/torchtitan.jsonl" in wb.trust_table.value
    assert wb.trust_view.spec is not None and wb.trust_view.layout.display is None
    wb.set(tab="roofline", gpus=["b200", "mi350x"], stack="ideal")
    assert wb.save_bar.layout.display is None


def test_the_trust_tab_lists_the_published_rows_of_the_gpus_and_the_model_family(wb):
    from workbench.published import published_rows_for

    wb.set(tab="trust", model="llama3-8b", gpus=["h100", "b200", "mi350x"], stack="torchtitan")
    published, table = wb.trust.published.value, wb.trust.published_table.value
    assert "Published results" in published and "llama3 family" in published
    h100 = published_rows_for("h100-sxm", "llama3")
    assert f"NVIDIA H100 SXM5 80GB: {len(h100)} published llama3 rows" in published
    assert "AMD Instinct MI350X: no published llama3 rows" in published
    shown = {r.id for r in (*h100, *published_rows_for("b200", "llama3"))}
    assert all(f">{rid}<" in table for rid in shown)  # every row of those GPUs and that family, and no other
    assert "GPT3" not in table and "gpt3" not in table and "mixtral" not in table
    expressed = next(r for r in h100 if r.error is not None)
    assert f"{expressed.error:+.1%}" in table and "predicted" in table and "published" in table
    assert "not expressed" in table  # B200 rows the workbench cannot express say so, with the reason
    wb.set(model="mixtral-8x7b", gpus=["h100"])
    assert "mixtral" in wb.trust.published.value and "GPT3" not in wb.trust.published_table.value


def test_a_configuration_that_does_not_fit_offers_its_nearest_fit_as_a_button():
    wb = Workbench(model="llama3-70b", gpus=["h200"], seq_len=8192, gpu_count=8, tab="step time")
    assert "h200-sxm" in wb.comparison.fit and wb.fit_button.layout.display is None
    changes = wb.comparison.fit["h200-sxm"].changes
    wb.fit_button.click()
    assert all(wb.state[k] == v for k, v in changes.items()) and not wb.comparison.fit
    assert wb.fit_button.layout.display == "none"


def test_an_upload_waits_for_the_name_and_the_button():
    wb = Workbench(gpus=["h200"])
    upload = {"name": "config.json", "content": memoryview(json.dumps({**LLAMA_8B_CONFIG, "model_type": "llama"}).encode())}
    wb.model_input.add_upload([upload])
    assert wb.state["model"] == "llama3-8b" and "press <b>Add model</b>" in wb.model_input.status.value
    assert json.loads(wb.model_input.text.value)["hidden_size"] == 4096  # the file's text, to check or edit
    wb.model_input.name.value = "my-upload"
    wb.model_input.button.click()
    assert wb.state["model"] == "my-upload" and wb.model_input.status.value.startswith("added <b>my-upload</b>")


def test_the_recipe_tab_offers_every_cli_format_and_forgets_the_last_models_error():
    from workbench.recipe import FORMATS

    wb = Workbench(model="llama3-405b", gpus=["h200"], gpu_count=1, tab="recipe")
    assert list(wb.recipe.format.options) == list(FORMATS)
    assert "no recipe" in wb.recipe.preview.value  # 405B on one H200: nothing fits
    wb.set(model="llama3.2-1b")
    assert "no recipe" not in wb.recipe.preview.value and "wb-recipe-preview" in wb.recipe.preview.value
    assert not re.search(r"\d\.\d{5,}", wb.recipe.preview.value)  # no full floats in the preview


def test_context_parallel_zero1_and_lora_controls(wb):
    c = wb.controls.by_field
    for name in ("cp", "virtual_stages", "lora_rank"):
        assert name in c and not c[name].disabled
    assert [v for _, v in c["sharding"].options] == ["ddp", "fsdp", "zero1"]
    wb.set(gpus=["b200"], gpu_count=8, tp=1, pp=1, cp=2, sharding="zero1", lora_rank=16, seq_len=4096)
    p = wb.comparison.predictions["b200"]
    assert (p.config.parallelism.cp, p.config.parallelism.sharding, p.config.lora_rank) == (2, "zero1", 16)
    assert (c["cp"].value, c["sharding"].value, c["lora_rank"].value) == (2, "zero1", 16)
    assert "ZeRO-1" in wb.controls.split.value and "LoRA rank 16" in wb.controls.split.value
    wb.set(cp=1, sharding="fsdp", lora_rank=0, gpus=["b200", "mi350x"])


def test_the_parameter_dtype_control_lists_the_stacks_dtypes_and_reaches_predict():
    wb = Workbench(gpus=["h200"], gpu_count=1, model="llama3.2-1b", stack="pytorch-eager")
    control = wb.controls.by_field["param_dtype"]
    assert [v for _, v in control.options] == ["fp32", "bf16"] and not control.disabled
    assert control.value == wb.state["param_dtype"] == "fp32"
    fp32 = wb.comparison.predictions["h200-sxm"].summary
    control.value = "bf16"  # the UI path: the control, then the state
    assert wb.state["param_dtype"] == "bf16" and wb.param_dtype == "bf16"
    bf16 = wb.comparison.predictions["h200-sxm"].summary
    assert bf16.memory.total < fp32.memory.total  # bf16 parameters: no fp32 weights beside the autocast copies
    from workbench.predict import predict

    direct = predict("llama3.2-1b", "h200", wb.comparison.predictions["h200-sxm"].config, stack="pytorch-eager",
                     param_dtype="bf16")
    assert direct.summary.step_time_s == bf16.step_time_s
    wb.set(tab="recipe")
    for kind in ("searched", "current"):  # both recipes record the dtype they were predicted at
        wb.recipe.kind.value = kind
        assert wb.recipe.recipe.precision.param_dtype == "bf16"
    wb.set(stack="torchtitan")  # trains fp32 parameters only: back to fp32, the control disabled
    assert wb.state["param_dtype"] == "fp32" and [v for _, v in control.options] == ["fp32"] and control.disabled
    with pytest.raises(WorkbenchError, match="param_dtype"):
        wb.set(param_dtype="bf16")
