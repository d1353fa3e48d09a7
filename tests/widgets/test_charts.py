"""The charts validate against Vega-Lite's schema, a live redraw sends what a full rebuild would, and what a reader
needs is in the drawing: labelled roofs and ridges, one point per shape, a fixed size scale, panels that wrap,
error bars only where an uncertainty is given and no bar where nothing fits. Rendered checks go through
vl-convert's SVG (text is in the SVG; how text boxes sit on screen is tests/test_browser.py's part)."""

import math
import re

import pandas as pd
import pytest

from widgets import chart_layout, charts, data, roofline_chart
from widgets.live import LiveChart, records
from widgets.state import WorkbenchState

H200, MI350X = "NVIDIA H200 SXM 141GB", "AMD Instinct MI350X"


@pytest.fixture(scope="module")
def predictor():
    return data.Predictor()


@pytest.fixture(scope="module")
def comparison(predictor):
    return predictor.compare(WorkbenchState(model="llama3-8b", gpus=("h200-sxm", "mi350x"), seq_len=2048))


def _roofline(comparison) -> pd.DataFrame:
    predictions = list(comparison.predictions.values())
    return charts.roofline_frame([data.roofline_points(p) for p in predictions], [data.roofs(p) for p in predictions],
                                 [p.gpu.display_name for p in predictions])


def _svg(chart) -> str:
    import vl_convert

    return vl_convert.vegalite_to_svg(chart.to_dict())


def _texts(svg: str) -> list[str]:
    """The text of every <text> element (vega's SVG writes multi-line labels as <tspan>s)."""
    return [re.sub(r"<[^>]+>", " ", t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)]


def _memory(comparison) -> pd.DataFrame:
    return pd.concat([data.memory_by_checkpointing(p).assign(gpu_order=i)
                      for i, p in enumerate(comparison.predictions.values())])


def test_every_chart_validates(comparison):
    h200 = comparison.predictions["h200-sxm"]
    measured = pd.DataFrame([{"case": "gemm-4096", "module": "gemm", "dtype": "bf16", "intensity": 1365.3,
                              "tflops": 700.0, "kernel": "triton"}])
    ports = pd.DataFrame([{"target": MI350X, "variant": v, "tokens_per_s": t, "step_ms": 9.0, "fits": True}
                          for v, t in (("direct port", 1e5), ("co-designed", 1.2e5))])
    for chart in (charts.roofline_chart(_roofline(comparison)), charts.step_chart(data.step_breakdown(comparison)),
                  charts.memory_chart(_memory(comparison)), charts.port_chart(ports, "h200-sxm"),
                  charts.measured_roofline_chart(data.roofline_points(h200), data.roofs(h200), measured)):
        chart.to_dict(validate=True)  # raises on a spec Vega-Lite would reject


def test_roofline_frame_layers_and_facet_order(comparison):
    frame = _roofline(comparison)
    assert {"roof", "ridge", "op", "roof_label", "ridge_label"} <= set(frame["layer"])
    assert frame["layer"].str.startswith("hbm_label").sum() == 2  # one per GPU
    order = frame.drop_duplicates("gpu").set_index("gpu")["gpu_order"]
    assert order[H200] == 0 and order[MI350X] == 1
    # the calibrated H200 roofs are there, the MI350X (no profile) has only spec roofs
    sources = frame[frame["layer"] == "roof"].groupby("gpu")["source"].unique()
    assert set(sources[H200]) == {"spec", "calibrated"}
    assert set(sources[MI350X]) == {"spec"}


def test_roofs_slopes_and_ridges_carry_their_numbers(comparison):
    frame = _roofline(comparison)
    gpu = comparison.predictions["mi350x"].gpu
    labels = frame[frame["gpu"] == MI350X].groupby("layer")["label"].apply(list)
    bf16 = f"bf16 {gpu.peak_tflops('bf16'):,.0f} TFLOP/s"
    assert bf16 in labels["roof_label"], labels["roof_label"]
    assert gpu.hbm_bandwidth_tb_s.value == 8.0 and "HBM 8.0 TB/s" in labels["hbm_label"]  # one decimal, as B200's 7.7
    assert f"bf16 ridge {gpu.ridge_point('bf16'):,.0f} FLOP/byte" in labels["ridge_label"]
    # the calibrated H200 says its calibrated peak beside the datasheet's, on one line or two
    h200 = frame[(frame["gpu"] == H200) & frame["layer"].str.startswith("roof_label")]["label"]
    assert any(t.startswith("bf16 989 TFLOP/s") and "calibrated" in t for t in h200), list(h200)
    ranks = frame[(frame["layer"] == "ridge_label") & (frame["gpu"] == MI350X)].sort_values("rank")
    assert list(ranks["intensity"]) == sorted(ranks["intensity"], reverse=True)  # the rightmost ridge lowest


def test_ops_of_one_shape_are_one_point_and_no_two_points_of_a_kind_overlap(predictor):
    # the fused step named (its fused gate_up GEMM's passes share a shape); the default stack, torchtitan, names
    # the FFN's GEMMs w1 / w3 / w2
    comparison = predictor.compare(WorkbenchState(model="llama3-8b", gpus=("h200-sxm", "mi350x"), seq_len=2048,
                                                  stack="ideal"))
    frame = _roofline(comparison)
    points = data.roofline_points(comparison.predictions["h200-sxm"])
    drawn = frame[(frame["layer"] == "op") & (frame["gpu"] == H200)]
    assert drawn["count"].sum() == len(points)  # every op in exactly one point
    assert drawn["share_pct"].sum() == pytest.approx(points["share_pct"].sum())
    assert drawn["total_ms"].sum() == pytest.approx(points["total_ms"].sum())
    assert len(drawn) < len(points)
    gate_up = drawn[drawn["ops"].str.contains("gate_up.fwd")].iloc[0]
    assert "gate_up.wgrad" in gate_up["ops"] and gate_up["count"] >= 2  # one shape, one point
    # a merged point sits where its ops' total FLOPs, bytes and time put it
    merged = drawn[(drawn["count"] >= 2) & (drawn["count"] <= roofline_chart._NAMES_SHOWN)]
    assert not merged.empty
    for point in merged.to_dict("records"):
        members = points[points["op"].isin(point["ops"].split(", "))]
        assert len(members) == point["count"]
        flops = (members["flops"] * members["executions"]).sum()
        assert point["intensity"] == pytest.approx(flops / (members["bytes"] * members["executions"]).sum())
        assert point["tflops"] == pytest.approx(flops / (members["total_ms"].sum() * 1e-3) / 1e12)
        assert point["op"] == members.loc[members["total_ms"].idxmax(), "op"]  # what a click shows
    # circles of one kind never overlap by more than OVERLAP on screen
    pixels = roofline_chart._Pixels(data.intensity_range([points], [data.roofs(comparison.predictions["h200-sxm"])]),
                                    list(frame["tflops"].dropna()), chart_layout.PANEL_WIDTH)
    for _, kind in drawn.groupby("kind"):
        placed = [pixels.place([], p) for p in kind.to_dict("records")]
        for i, (_, _, xa, ya, ra) in enumerate(placed):
            for _, _, xb, yb, rb in placed[i + 1:]:
                assert math.hypot(xa - xb, ya - yb) >= roofline_chart.OVERLAP * (ra + rb)


def test_points_far_below_the_roofs_are_drawn_on_the_axis_floor_with_their_exact_value(comparison):
    """An op of a few FLOPs (torchtitan's float8 scale update) or a trace of another configuration must not
    stretch the y axis over 14 decades (squeezing the roof labels together): drawn within Y_DECADES of the top."""
    p = comparison.predictions["h200-sxm"]
    points = data.roofline_points(p)
    tiny = points.iloc[[0]].assign(op="scale.update", flops=1.0, bytes=4.0, intensity=0.25,
                                   achieved_tflops=1e-9, total_ms=0.01, share_pct=0.0)
    frame = charts.roofline_frame([pd.concat([points, tiny], ignore_index=True)], [data.roofs(p)], [p.gpu.display_name])
    top = frame.loc[frame["layer"] == "roof", "tflops"].max()
    drawn = frame[frame["layer"] == "op"]
    assert drawn["tflops"].min() == pytest.approx(top / 10 ** roofline_chart.Y_DECADES)
    floor = drawn[drawn["ops"].str.contains("scale.update")].iloc[0]
    assert floor["tflops_exact"] < floor["tflops"]  # the tooltip's value is the op's own
    assert (drawn["tflops"] <= top * 10).all()


def test_tooltips_name_the_gpu_and_the_size_scale_is_fixed(comparison, predictor):
    spec = charts.roofline_chart(_roofline(comparison)).to_dict()
    layers = spec["spec"]["layer"]
    with_tooltips = [layer["encoding"]["tooltip"] for layer in layers if "tooltip" in layer.get("encoding", {})]
    assert len(with_tooltips) >= 3 and all(t[0] == {"field": "gpu", "title": "GPU", "type": "nominal"}
                                           for t in with_tooltips)
    size = next(layer["encoding"]["size"] for layer in layers if "size" in layer.get("encoding", {}))
    assert size["scale"]["domain"] == list(roofline_chart.SHARE_DOMAIN) and size["scale"]["clamp"]
    # another selection: the same chart structure (LiveChart keeps it), so the same size scale
    other = predictor.compare(comparison.state.replace(gpus=["b200"], precision="fp8", model="llama3-70b"))
    again = charts.roofline_chart(_roofline(other)).to_dict()
    assert {k: v for k, v in again.items() if k not in ("data", "datasets")} == \
        {k: v for k, v in spec.items() if k not in ("data", "datasets")}


def test_panels_wrap_and_legends_sit_underneath(comparison):
    spec = charts.roofline_chart(_roofline(comparison)).to_dict()
    assert spec["columns"] == chart_layout.COLUMNS and spec["config"]["legend"]["orient"] == "bottom"
    assert chart_layout.COLUMNS * (chart_layout.PANEL_WIDTH + chart_layout.SPACING) + 70 <= chart_layout.CONTAINER_WIDTH
    memory = charts.memory_chart(_memory(comparison)).to_dict()
    assert memory["columns"] == chart_layout.COLUMNS


def test_the_calibrated_legend_entry_shows_only_with_a_calibrated_roof(predictor):
    def roof_legend(gpu: str) -> list[str]:
        state = WorkbenchState(model="llama3-8b", gpus=(gpu,), seq_len=2048)
        texts = _texts(_svg(charts.roofline_chart(_roofline(predictor.compare(state)))))
        end = texts.index("roofs")  # vega writes a legend's entries, then its title
        return texts[end - 2:end]

    assert roof_legend("mi350x") == [MI350X, "spec"]  # no calibration profile: no "calibrated" entry
    assert roof_legend("h200-sxm") == ["spec", "calibrated"]


def _step_frame(comparison, *, columns: bool) -> pd.DataFrame:
    """The step frame, with or without the fits/uncertainty columns, and MI350X made not to fit."""
    frame = data.step_breakdown(comparison)
    frame = frame.drop(columns=[c for c in ("fits", "uncertainty", "step_ms", "uncertainty_text") if c in frame])
    if columns:
        frame["fits"] = frame["gpu"] != MI350X
        frame["uncertainty"] = 0.05
    return frame


def test_step_chart_draws_error_bars_only_with_an_uncertainty(comparison):
    with_spread = _texts(_svg(charts.step_chart(_step_frame(comparison, columns=True))))
    assert with_spread.count("± 5%") == 1  # the H200 only: MI350X does not fit
    without = _texts(_svg(charts.step_chart(_step_frame(comparison, columns=False))))
    assert not any(t.startswith("±") for t in without)
    assert not any("does not fit" in t for t in without)  # without a fits column every row fits


def test_step_chart_has_no_bar_and_no_mfu_where_nothing_fits(comparison):
    frame = _step_frame(comparison, columns=True)
    svg = _svg(charts.step_chart(frame))
    texts = _texts(svg)
    assert "no bar: this configuration does not fit in memory" in texts
    assert "does not fit in memory" in texts  # its label had an MFU: replaced
    assert sum("MFU" in t for t in texts) == 1  # the H200's
    fitting = _svg(charts.step_chart(frame.assign(fits=True)))
    bars = lambda s: len(re.findall(r'<path[^>]*aria-roledescription="bar"', s))  # noqa: E731
    assert 0 < bars(svg) < bars(fitting)


def test_step_chart_structure_does_not_depend_on_the_columns(comparison):
    def structure(frame):
        spec = charts.step_chart(frame).to_dict()
        return {k: v for k, v in spec.items() if k not in ("data", "datasets")}

    assert structure(_step_frame(comparison, columns=True)) == structure(_step_frame(comparison, columns=False))


def test_memory_chart_lists_its_capacity_lines_and_writes_short_labels(comparison):
    texts = _texts(_svg(charts.memory_chart(_memory(comparison))))
    assert "HBM capacity" in texts and "usable (headroom kept)" in texts
    labels = [t for t in texts if t.startswith("fits, largest")]
    assert len(labels) == 6 and all("micro-batch" in t for t in labels)


def test_port_chart_names_each_gpu_once():
    targets = ["NVIDIA B200 (HGX B200, 180GB)", MI350X, "AMD Instinct MI355X"]
    frame = pd.DataFrame([{"target": t, "variant": v, "tokens_per_s": 1e5 + i, "step_ms": 9.0, "fits": True}
                          for i, t in enumerate(targets) for v in ("direct port", "co-designed")])
    texts = _texts(_svg(charts.port_chart(frame, "h200-sxm")))
    assert [texts.count(t) for t in targets] == [1, 1, 1]


def test_a_live_redraw_sends_the_full_chart_with_the_new_data(comparison, predictor):
    import altair as alt

    view = alt.JupyterChart(alt.Chart(pd.DataFrame({"x": []})).mark_point())
    live = LiveChart(view, charts.roofline_chart)
    live.show(_roofline(comparison))
    other = predictor.compare(comparison.state.replace(gpus=["b200"], precision="fp8"))
    new = _roofline(other)
    live.show(new)
    full = charts.roofline_chart(new).to_dict()
    rows = full["datasets"][full["data"]["name"]]
    expected = {k: v for k, v in full.items() if k not in ("data", "datasets")}
    assert {k: v for k, v in view.spec.items() if k != "data"} == expected
    assert view.spec["data"]["values"] == rows
    assert {r["gpu"] for r in view.spec["data"]["values"]} == {"NVIDIA B200 (HGX B200, 180GB)"}
    assert hasattr(view.selections, charts.OP_SELECTION)


def test_records_are_json_safe():
    import json

    rows = records(pd.DataFrame({"a": [1.0, float("nan")], "b": ["x", None]}))
    assert rows == [{"a": 1.0, "b": "x"}, {"a": None, "b": None}]
    json.dumps(rows, allow_nan=False)


def test_save_refuses_other_formats_and_existing_files(tmp_path, comparison):
    chart = charts.step_chart(data.step_breakdown(comparison))
    path = charts.save(chart, tmp_path / "step.svg")
    with pytest.raises(FileExistsError):
        charts.save(chart, path)
    assert charts.save(chart, path, overwrite=True) == path
    with pytest.raises(ValueError, match="png or .svg"):
        charts.save(chart, tmp_path / "step.jpg")
    assert not list(tmp_path.glob(".step*"))  # no temporary file left behind


def test_a_roofline_with_no_prediction_is_an_empty_chart():
    frame = charts.roofline_frame([], [])
    assert frame.empty
    charts.roofline_chart(frame).to_dict(validate=True)
