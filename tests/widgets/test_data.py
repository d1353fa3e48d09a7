"""Chart data built from real predictions: the numbers are the core's, reshaped."""

import dataclasses
import math

import pytest

import workbench
from workbench.memory import GB, max_micro_batch, memory_breakdown
from widgets import data, tables
from widgets.state import WorkbenchState


@pytest.fixture(scope="module")
def h200():
    return workbench.predict("llama3-8b", "h200", micro_batch=1, seq_len=4096, gpus=8)


def test_roofline_points_are_the_ops_with_flops(h200):
    points = data.roofline_points(h200)
    with_flops = [o for o in h200.ops if o.op.flops > 0]
    assert len(points) == len(with_flops) > 10
    row = points.set_index("op").loc["w1.fwd"]  # the default stack's (torchtitan's) FFN gate GEMM
    op = next(o for o in h200.ops if o.op.name == "w1.fwd")
    assert row["intensity"] == pytest.approx(op.op.arithmetic_intensity)
    assert row["achieved_tflops"] == pytest.approx(op.op.flops / op.time_s / 1e12)
    assert row["share_pct"] == pytest.approx(op.total_s / h200.summary.step_time_s * 100)
    # every point sits at or under its spec roof: the model never beats the roofline
    peak = max(h200.gpu.peak_tflops(k) for k in h200.gpu.peak_dense_tflops)
    assert (points["achieved_tflops"] <= peak * (1 + 1e-9)).all()


def test_spec_and_calibrated_roofs(h200):
    roofs = data.roofs(h200)
    spec = roofs[roofs["source"] == "spec"].set_index("roof")
    assert spec.loc["bf16 matrix", "peak_tflops"] == h200.gpu.peak_tflops("bf16")
    assert spec.loc["bf16 matrix", "ridge"] == pytest.approx(h200.gpu.ridge_point("bf16"))
    assert "fp32 vector" in spec.index  # norms, elementwise: the roof compute_peak_flops gives them
    calibrated = roofs[roofs["source"] == "calibrated"].set_index("roof")
    assert data.has_calibration(h200.gpu) and not calibrated.empty
    assert (calibrated["peak_tflops"] < spec.loc[calibrated.index, "peak_tflops"]).all()


def test_no_calibrated_roofs_without_a_profile():
    p = workbench.predict("llama3-8b", "mi350x", micro_batch=1, seq_len=4096, gpus=8)
    assert not data.has_calibration(p.gpu)
    assert set(data.roofs(p)["source"]) == {"spec"}


def test_roof_lines_follow_min_of_peak_and_bandwidth(h200):
    roofs = data.roofs(h200)
    lines = data.roof_lines(roofs, (0.1, 1e5))
    bf16 = lines[(lines["roof"] == "bf16 matrix") & (lines["source"] == "spec")].sort_values("order")
    assert list(bf16["intensity"]) == pytest.approx([0.1, h200.gpu.ridge_point("bf16"), 1e5])
    assert bf16["tflops"].iloc[0] == pytest.approx(0.1 * h200.gpu.hbm_bandwidth_tb_s.value)
    assert bf16["tflops"].iloc[2] == h200.gpu.peak_tflops("bf16")


def test_intensity_range_covers_ops_and_ridges(h200):
    points, roofs = data.roofline_points(h200), data.roofs(h200)
    low, high = data.intensity_range([points], [roofs])
    assert low < points["intensity"].min() and high > max(points["intensity"].max(), roofs["ridge"].max())


def test_op_detail_and_unknown_op(h200):
    detail = data.op_detail(h200, "attention.fwd")
    assert detail["kind"] == "attention" and detail["predicted time (ms)"] >= detail["roofline time (ms)"]
    with pytest.raises(workbench.WorkbenchError, match="no op 'nope'.*w1.fwd"):  # torchtitan's op names
        data.op_detail(h200, "nope")


def test_step_breakdown_adds_up_to_the_step_time():
    comparison = data.Predictor().compare(WorkbenchState(model="llama3-8b", gpus=("b200", "mi350x")))
    frame = data.step_breakdown(comparison)
    parts = frame[frame["layer"] == "part"]
    for name, p in comparison.predictions.items():
        total = parts[parts["gpu"] == p.gpu.display_name]["ms"].sum()
        assert total == pytest.approx(p.summary.step_time_s * 1e3)
    table = tables.summary_table(comparison)
    assert [r["tokens/s (total over 8 GPUs)"] for r in table] == [
        f"{p.summary.tokens_per_s:,.0f}" for p in comparison.predictions.values()]
    assert "tokens/s total over 8 GPUs" in tables.summary_text(comparison)


def test_memory_by_checkpointing_matches_the_memory_model(h200):
    frame = data.memory_by_checkpointing(h200)
    assert list(frame["mode"].unique()) == ["none", "selective", "full"]
    for mode in ("none", "full"):
        cfg = dataclasses.replace(h200.config, activation_checkpointing=mode)
        mem = memory_breakdown(h200.model, cfg, h200.gpu)
        rows = frame[frame["mode"] == mode].set_index("part")
        assert rows.loc["activations", "gb"] == pytest.approx(mem.activations / GB)
        assert rows["gb"].sum() == pytest.approx(mem.total / GB)
        assert rows["max_micro_batch"].iloc[0] == max_micro_batch(h200.model, cfg, h200.gpu)
    activations = frame[frame["part"] == "activations"].set_index("mode")["gb"]
    assert activations["full"] < activations["selective"] < activations["none"]


def test_predictor_caches_and_reports_impossible_precisions():
    predictor = data.Predictor(maxsize=4)
    state = WorkbenchState(model="llama3-8b", gpus=("a100-sxm-80gb", "b200"), precision="fp8")
    first = predictor.compare(state)
    assert predictor.compare(state).predictions["b200"] is first.predictions["b200"]
    a100 = first.predictions.get("a100-sxm-80gb")  # no fp8 on A100: the documented fallback, with a note
    assert a100 is not None and a100.precision.is_fallback and a100.notes
    for seq in (512, 1024, 2048, 4096):
        predictor.compare(state.replace(seq_len=seq))
    assert len(predictor._cache) == 4


def test_measured_points_from_bench_rows():
    import pandas as pd

    rows = pd.DataFrame([
        {"module": "gemm", "name": "gemm-4096", "dtype": "bf16", "flops": 2 * 4096**3, "bytes": 3 * 2 * 4096**2,
         "triton_ms": 0.2, "baseline_ms": 0.18, "error": ""},
        {"module": "gemm", "name": "broken", "dtype": "bf16", "flops": 1.0, "bytes": 1.0, "triton_ms": math.nan,
         "baseline_ms": math.nan, "error": "OutOfMemoryError"},
    ])
    points = data.measured_points(rows)
    assert len(points) == 2 and set(points["kernel"]) == {"triton", "vendor"}
    assert points.iloc[0]["tflops"] == pytest.approx(2 * 4096**3 / 0.2 / 1e9)
    assert data.measured_points(pd.DataFrame()).empty


def test_the_prediction_is_for_the_states_split_and_batch():
    state = WorkbenchState().replace(model="llama3-8b", gpus=("h200",), gpu_count=16, tp=2, pp=2, sharding="ddp",
                                     global_batch=512, seq_len=4096)
    p = data.Predictor().compare(state).predictions["h200-sxm"]
    par = p.config.parallelism
    assert (par.dp, par.tp, par.pp, par.sharding) == (4, 2, 2, "ddp") and p.summary.gpus == 16
    assert p.config.global_batch == 512 and p.config.grad_accumulation == 128
    direct = workbench.predict("llama3-8b", "h200", p.config)
    assert p.summary.step_time_s == pytest.approx(direct.summary.step_time_s)


def test_tp_beyond_the_scale_up_domain_is_a_message_per_gpu():
    state = WorkbenchState().replace(model="llama3-70b", gpus=("h200", "gb200"), gpu_count=64, tp=16)
    comparison = data.Predictor().compare(state)
    assert "scale-up domain of 8 GPUs" in comparison.errors["h200-sxm"] and "choose tp <= 8" in comparison.errors["h200-sxm"]
    assert "gb200" in comparison.predictions  # 72 GPUs per NVLink domain: tp 16 runs


def test_step_frame_columns_for_the_chart():
    state = WorkbenchState().replace(model="llama3-8b", gpus=("h200", "b200"), seq_len=4096, stack="torchtitan",
                                     micro_batch=6)  # 6 fits a B200, not an H200
    comparison = data.Predictor().compare(state)
    frame = data.step_breakdown(comparison)
    assert tuple(frame.columns) == data.STEP_COLUMNS
    h200 = frame[frame["gpu"] == "NVIDIA H200 SXM 141GB"]
    # no bar, no step, no uncertainty: the shortfall, and the nearest fit under it
    assert list(h200["layer"]) == ["label", "note"] and not h200["fits"].any()
    assert h200["step_ms"].isna().all() and h200["uncertainty"].isna().all() and "MFU" not in h200["text"].iloc[0]
    b200 = frame[frame["gpu"] == "NVIDIA B200 (HGX B200, 180GB)"]
    assert b200["fits"].all() and b200["uncertainty"].isna().all()  # not validated on a B200: no error bar
    assert b200["step_ms"].iloc[0] == pytest.approx(comparison.predictions["b200"].summary.step_time_s * 1e3)
    fits = data.Predictor().compare(state.replace(micro_batch=1))
    frame = data.step_breakdown(fits)
    from workbench.validation import validation_record

    h200 = frame[frame["gpu"] == "NVIDIA H200 SXM 141GB"]
    assert h200["uncertainty"].iloc[0] == pytest.approx(validation_record("h200", "torchtitan").step_mape)
    assert "±" in h200[h200["layer"] == "label"]["text"].iloc[0]


def test_nothing_fits_on_these_gpus_offers_the_searched_split_and_it_fits():
    state = WorkbenchState().replace(model="llama3-70b", gpus=("h200",), seq_len=8192, gpu_count=16,
                                     checkpointing="full", micro_batch=4)
    predictor = data.Predictor()
    comparison = predictor.compare(state)
    problem = comparison.fit["h200-sxm"]
    assert problem.changes and "over)" in problem.text()
    offered = predictor.compare(state.replace(**problem.changes))
    assert offered.predictions["h200-sxm"].summary.memory.fits and not offered.fit  # the offer is true
    eight = predictor.compare(state.replace(gpu_count=8, micro_batch=1)).fit["h200-sxm"]  # 70B on 8 H200s: never
    assert eight.changes.get("gpu_count", 8) > 8 and "GPUs:" in eight.suggestion
