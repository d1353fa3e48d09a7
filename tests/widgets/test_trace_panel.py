"""A profiler trace in the widget: loaded (from Python and as an upload), measured points on the roofline, the
per-class table equal to workbench.trace.class_table, stale after a configuration change, bad uploads refused with
a message, and "Calibrate from this trace" writing into the user's folder (never over a profile unasked)."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest

from workbench.stack_calibration import load_stack_profile, user_stack_profile_path
from workbench.hardware import get_gpu
from workbench.trace import class_table, load_trace
from widgets import Workbench
from widgets.trace_data import MEASURED_LABEL, TRACE_LOOP, calibration_warning, class_flops, class_rows

ROOT = Path(__file__).resolve().parents[2]
PLAIN_TRACE = ROOT / "benchmarks" / "results" / "h200" / "stacks" / "plain_pytorch" / "traces" / \
    "1b-mb3-s2048-fp32-eager-none.json.gz"
PLAIN_CONFIG = dict(model="llama3.2-1b", gpus=["h200-sxm"], stack="pytorch-eager", micro_batch=3, seq_len=2048,
                    checkpointing="none", gpu_count=1, global_batch=3, compile=False, precision="bf16")
"""The traced row of benchmarks/stacks/evaluate.py ("1b mb3 s2048 fp32 eager ac=none": Llama 3.2 1B, the plain
loop as stack pytorch-eager, fp32 parameters (the stack's default), one GPU, one micro-batch per step)."""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh user folder (as tests/test_trace.py's): profiles are written there and read before the shipped."""
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKBENCH_CALIBRATION_DIR", raising=False)
    return tmp_path / "home"


def _event(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": {}}


def tiny_trace() -> bytes:
    """One annotated step: a cuBLAS GEMM of 3 ms, an elementwise add of 1 ms and a kernel no rule knows."""
    events = [_event("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 0.0, 3000.0),
              _event("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
                     3100.0, 1000.0),
              _event("my_custom_kernel_v2", 4200.0, 50.0),
              _event("ProfilerStep#1", 0.0, 4400.0, "user_annotation")]
    return json.dumps({"deviceProperties": [{"name": "NVIDIA H200"}], "traceEvents": events}).encode()


@pytest.fixture(scope="module")
def plain():
    """The workbench at the committed trace's configuration, the trace loaded from Python."""
    wb = Workbench(**PLAIN_CONFIG)
    wb.load_trace(PLAIN_TRACE, steps=2)
    return wb


def _trace_rows(wb):
    frame = wb.live["roofline"].frame
    return frame[frame["layer"] == "trace"]


def test_the_committed_trace_is_drawn_beside_the_prediction(plain):
    wb = plain
    wb.set(tab="roofline")
    trace = load_trace(PLAIN_TRACE, steps=2)
    prediction = wb.comparison.predictions["h200-sxm"]
    expected = class_table(trace, prediction)
    points = _trace_rows(wb)
    flops = class_flops(prediction)
    with_flops = [r for r in expected if flops.get(r.cls, (0, 0))[0] > 0 and r.measured_ms > 0]
    assert len(points) == len(with_flops) >= 5 and "gemm" in set(points["cls"])
    gemm = next(r for r in expected if r.cls == "gemm")
    row = points[points["cls"] == "gemm"].iloc[0]
    f, b = flops["gemm"]
    assert row["intensity"] == pytest.approx(f / b)  # the predicted class's FLOPs and bytes
    assert row["tflops"] == pytest.approx(f / (gemm.measured_ms * 1e-3) / 1e12)  # in the measured time
    assert row["measured_ms"] == pytest.approx(gemm.measured_ms) and row["gpu"] == "NVIDIA H200 SXM 141GB"
    assert set(points["measured"]) == {MEASURED_LABEL}
    # the spec the browser gets: the trace layer, its legend entry and its rows
    spec = wb.views["roofline"].spec
    assert MEASURED_LABEL in json.dumps(spec["data"]["values"])
    layers = json.dumps(spec["spec"]["layer"])
    assert '"diamond"' in layers and '"filled": false' in layers and '"trace"' in layers
    assert "measured (trace) diamonds" in wb.roofline_notes.value


def test_the_table_is_class_table_and_says_what_the_trace_is_for(plain):
    wb = plain
    wb.set(tab="step time")
    panel = wb.trace_panel
    expected = class_table(load_trace(PLAIN_TRACE, steps=2), wb.comparison.predictions["h200-sxm"])
    assert [(r.cls, r.measured_ms, r.predicted_ms) for r in panel.rows] == \
        [(r.cls, r.measured_ms, r.predicted_ms) for r in expected]
    for shown, r in zip(class_rows(panel.rows), expected):
        assert shown["measured (ms per step)"] == f"{r.measured_ms:,.2f}"
        assert shown["predicted (ms per step)"] == f"{r.predicted_ms:,.2f}"
        assert shown["measured / predicted"] == ("" if math.isnan(r.ratio) else f"{r.ratio:.3f}")
        assert f"<td class='wb-num'>{r.measured_ms:,.2f}</td>" in panel.table.value
    info = panel.info.value
    assert "measured for: Llama 3.2 1B on 1 x NVIDIA H200 SXM 141GB, Plain PyTorch, eager" in info
    assert "micro-batch 3, sequence 2,048, activation checkpointing none, compile off" in info
    trace = load_trace(PLAIN_TRACE, steps=2)
    assert f"Measured step: {trace.wall_ms_per_step:,.2f} ms wall per step" in info
    assert "Stale" not in info and not panel.calibrate_button.disabled
    assert "no unknown kernels" in panel.table.value  # every kernel of the plain loop has a class
    summary = re.findall(r"^All (?:test|new holdout) rows: (.*)\.$", TRACE_LOOP.read_text(), re.M)
    assert len(summary) == 2 and all(line in panel.warning.value for line in summary)  # quoted, never copied
    assert "how well it carries to the job's other configurations" in calibration_warning()


def test_a_configuration_change_makes_the_trace_stale_and_the_way_back(plain):
    wb = plain
    wb.set(tab="step time", micro_batch=1, global_batch=1)
    panel = wb.trace_panel
    assert "Stale: the trace no longer matches" in panel.info.value and "micro batch 3 -&gt; 1" in panel.info.value
    assert panel.rows == [] and panel.calibrate_button.disabled and panel.restore_button.layout.display is None
    wb.set(tab="roofline")
    assert _trace_rows(wb).empty and "is stale" in wb.roofline_notes.value
    wb.set(gpus=["b200"])  # the trace's GPU dropped: still stale, still kept
    assert "no longer chosen" in panel.stale_reason() and panel.context is not None
    panel.restore()
    assert wb.state["micro_batch"] == 3 and wb.state["gpus"] == ["h200-sxm", "b200"] and not panel.stale_reason()
    assert not _trace_rows(wb).empty
    wb.set(gpus=["h200-sxm"])


def test_an_upload_loads_and_bad_uploads_say_why(home):
    wb = Workbench(**PLAIN_CONFIG, tab="step time")
    panel = wb.trace_panel
    for content, name, message in ((b"", "empty.json", "is empty"), (b"not json", "x.json", "expected valid JSON"),
                                   (b'{"a": 1}', "x.json", "without traceEvents"),
                                   (b"{}", "x.json.gz", "not gzip data")):
        panel.add_upload(({"name": name, "content": memoryview(content), "size": len(content)},))
        assert message in panel.message.value and name in panel.message.value, panel.message.value
        assert "internal error" not in panel.message.value and panel.context is None
    panel.add_upload(({"name": "tiny.json.gz", "content": memoryview(gzip.compress(tiny_trace()))},))
    assert panel.context is not None and panel.context.name == "tiny.json.gz" and panel.context.gpu == "h200-sxm"
    assert "tiny.json.gz" in panel.info.value and "my_custom_kernel_v2" in panel.table.value  # unknown listed
    assert "1 ProfilerStep# annotations" in panel.info.value
    by_class = {r.cls: r for r in panel.rows}
    assert by_class["gemm"].measured_ms == pytest.approx(3.0) and by_class["other"].measured_ms == pytest.approx(0.05)
    assert "below 0.5 or above 2" in panel.info.value  # a 4 ms trace against a 124 ms prediction: said so


def test_calibrate_writes_the_users_profile_and_asks_before_replacing(home):
    wb = Workbench(**PLAIN_CONFIG, tab="step time")
    with pytest.raises(Exception, match="no trace loaded"):
        wb.calibrate_from_trace()
    wb.load_trace(PLAIN_TRACE, steps=2)
    fit = wb.calibrate_from_trace()
    path = user_stack_profile_path("pytorch-eager", get_gpu("h200"))
    assert fit is not None and path.is_file() and str(home) in str(path)
    assert load_stack_profile("pytorch-eager", get_gpu("h200")).fitted_on["micro_batch"] == 3
    message = wb.trace_panel.message.value
    assert "calibrated to this trace" in message and f"{fit.calibrated_step_ms:,.2f} ms" in message
    assert f"Calibrated to this trace: {fit.calibrated_step_ms:,.2f} ms" in wb.trace_panel.info.value
    before = path.read_bytes()
    assert wb.calibrate_from_trace() is None  # kept: the section asks first
    assert "Replace the existing profile" in wb.trace_panel.message.value
    assert wb.trace_panel.replace_button.layout.display is None and path.read_bytes() == before
    wb.trace_panel.replace_button.click()
    assert "wrote" in wb.trace_panel.message.value and wb.trace_panel.replace_button.layout.display == "none"
    wb.set(calibrated=True)  # the written profile applies to calibrated predictions of the stack
    assert wb.comparison.predictions["h200-sxm"].summary.step_time_s * 1e3 == pytest.approx(fit.calibrated_step_ms)
    wb.set(seq_len=4096)
    wb.trace_panel.calibrate_button.click()  # stale: refused with the reason, nothing written
    assert "no longer matches" in wb.trace_panel.message.value


def test_the_bound_cannot_be_calibrated_and_says_so(home):
    wb = Workbench(**{**PLAIN_CONFIG, "stack": "ideal"}, tab="step time")
    wb.load_trace(PLAIN_TRACE, steps=2)
    wb.trace_panel.calibrate_button.click()
    assert "a trace cannot calibrate a bound" in wb.trace_panel.message.value
    assert not user_stack_profile_path("ideal", get_gpu("h200")).exists()
