"""The charts validate against Vega-Lite's schema, and a live redraw sends what a full rebuild would."""

import pandas as pd
import pytest

from widgets import charts, data
from widgets.live import LiveChart, records
from widgets.state import WorkbenchState


@pytest.fixture(scope="module")
def comparison():
    return data.Predictor().compare(WorkbenchState(model="llama3-8b", gpus=("h200-sxm", "mi350x"), seq_len=2048))


def _roofline(comparison) -> pd.DataFrame:
    predictions = list(comparison.predictions.values())
    return charts.roofline_frame([data.roofline_points(p) for p in predictions], [data.roofs(p) for p in predictions],
                                 [p.gpu.display_name for p in predictions])


def test_every_chart_validates(comparison):
    memory = pd.concat([data.memory_by_checkpointing(p).assign(gpu_order=i)
                        for i, p in enumerate(comparison.predictions.values())])
    h200 = comparison.predictions["h200-sxm"]
    measured = pd.DataFrame([{"case": "gemm-4096", "module": "gemm", "dtype": "bf16", "intensity": 1365.3,
                              "tflops": 700.0, "kernel": "triton"}])
    for chart in (charts.roofline_chart(_roofline(comparison)), charts.step_chart(data.step_breakdown(comparison)),
                  charts.memory_chart(memory),
                  charts.measured_roofline_chart(data.roofline_points(h200), data.roofs(h200), measured)):
        chart.to_dict(validate=True)  # raises on a spec Vega-Lite would reject


def test_roofline_frame_layers_and_facet_order(comparison):
    frame = _roofline(comparison)
    assert set(frame["layer"]) == {"roof", "ridge", "op"}
    order = frame.drop_duplicates("gpu").set_index("gpu")["gpu_order"]
    assert order["NVIDIA H200 SXM 141GB"] == 0 and order["AMD Instinct MI350X"] == 1
    # the calibrated H200 roofs are there, the MI350X (no profile) has only spec roofs
    sources = frame[frame["layer"] == "roof"].groupby("gpu")["source"].unique()
    assert set(sources["NVIDIA H200 SXM 141GB"]) == {"spec", "calibrated"}
    assert set(sources["AMD Instinct MI350X"]) == {"spec"}


def test_a_live_redraw_sends_the_full_chart_with_the_new_data(comparison):
    import altair as alt

    view = alt.JupyterChart(alt.Chart(pd.DataFrame({"x": []})).mark_point())
    live = LiveChart(view, charts.roofline_chart)
    live.show(_roofline(comparison))
    other = data.Predictor().compare(comparison.state.replace(gpus=["b200"], precision="fp8"))
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
