"""Altair charts of the workbench, built from ``widgets.data`` frames (they draw; they compute nothing).

Every chart is a plain ``alt.Chart``/``LayerChart``/``FacetChart``: the widget shows it in an
``alt.JupyterChart`` (offline), and ``save`` writes it as PNG or SVG through vl-convert, without a network.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import altair as alt
import pandas as pd

from widgets.data import HOST_PART, MEMORY_PARTS, STEP_PARTS, intensity_range, roof_lines
from workbench.fileio import check_output, write_bytes

OP_SELECTION = "op"
"""Name of the point selection on the roofline's op points (``JupyterChart.selections.op``)."""
SAVE_FORMATS: tuple[str, ...] = ("png", "svg")
ROOFLINE_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_order", "layer", "roof", "source", "order", "label", "intensity", "tflops", "op", "kind", "shape", "dtype",
    "flops", "bytes", "time_ms", "executions", "total_ms", "share_pct", "bound",  # predicted ops
    "case", "module", "kernel",  # measured kernels
)
"""What the roofline charts encode or show in tooltips; other columns are not sent to the browser."""
FACET_WIDTH = 300
_FACET = alt.Column("gpu:N", title=None, sort=alt.EncodingSortField("gpu_order", op="min"))
"""One facet per GPU, in the order the user chose them (the frames' gpu_order column)."""
CHART_HEIGHT = 280


X_LOG = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)")
"""The roofline's x axis; its extent is the roof lines' (``intensity_range``), so no domain depends on data."""


def _roofline_layers() -> list[alt.Chart]:
    """The layers shared by the predicted and the measured roofline: roofs, their labels, ridge points (no data
    of their own: the top-level chart carries one data set, converted once)."""
    x = X_LOG
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="TFLOP/s (predicted achieved)")
    roofs = alt.Chart().transform_filter(alt.datum.layer == "roof").mark_line(color="#666", strokeWidth=1.5).encode(
        x=x, y=y, detail=[alt.Detail("roof:N"), alt.Detail("source:N")], order=alt.Order("order:Q"),
        strokeDash=alt.StrokeDash("source:N", title="roofs", sort=["spec", "calibrated"],
                                  scale=alt.Scale(domain=["spec", "calibrated"], range=[[1, 0], [6, 3]])),
    )
    # spec roofs are labelled at their ridge point (left of the knee, where no op sits); calibrated ones are dashed
    labels = alt.Chart().transform_filter((alt.datum.layer == "roof") & (alt.datum.order == 1)
                                          & (alt.datum.source == "spec")).mark_text(
        align="right", dx=-6, dy=-4, fontSize=10, color="#444").encode(x=x, y=y, text="label:N")
    ridges = alt.Chart().transform_filter(alt.datum.layer == "ridge").mark_point(
        shape="diamond", color="#444", filled=True, size=40).encode(
        x=x, y=y, tooltip=[alt.Tooltip("label:N", title="ridge point"),
                           alt.Tooltip("intensity:Q", title="FLOP/byte", format=".1f"),
                           alt.Tooltip("tflops:Q", title="TFLOP/s", format=",.0f")])
    return [roofs, labels, ridges]


def roofline_frame(points: Sequence[pd.DataFrame], roof_frames: Sequence[pd.DataFrame],
                   gpu_order: Sequence[str] = ()) -> pd.DataFrame:
    """One long frame for a faceted roofline (a facet needs one data source): ``layer`` says which mark draws
    each row (roof line vertices, ridge points, op points); ``gpu_order`` orders the facets."""
    x_range = intensity_range(points, roof_frames)
    roofs = pd.concat(list(roof_frames), ignore_index=True) if roof_frames else pd.DataFrame()
    lines = roof_lines(roofs, x_range).assign(layer="roof") if not roofs.empty else pd.DataFrame()
    if not lines.empty:
        lines["label"] = lines["roof"] + lines["source"].map({"spec": "", "calibrated": " (calibrated)"})
    ridges = roofs.rename(columns={"ridge": "intensity", "peak_tflops": "tflops"}).assign(layer="ridge") if not roofs.empty else roofs
    if not ridges.empty:
        ridges["label"] = ridges["roof"] + " (" + ridges["source"] + ")"
    ops = pd.concat(list(points), ignore_index=True).rename(columns={"achieved_tflops": "tflops"}).assign(layer="op") if points else pd.DataFrame()
    frame = pd.concat([lines, ridges, ops], ignore_index=True)
    frame["gpu_order"] = frame["gpu"].map({name: i for i, name in enumerate(gpu_order)})
    return frame[[c for c in ROOFLINE_COLUMNS if c in frame]]


def roofline_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Log-log roofline per GPU (``roofline_frame`` rows), side by side: spec (solid) and calibrated (dashed)
    roofs, ridge points, and every op of the step as a point sized by its share of the step time and coloured
    by kind; clicking a point selects it (selection ``op`` on fields gpu and op). The chart's structure does not
    depend on the data (``LiveChart`` swaps only the data on redraw)."""
    select = alt.selection_point(name=OP_SELECTION, fields=["gpu", "op"], on="click", clear="dblclick")
    x = X_LOG
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="TFLOP/s (predicted achieved)")
    ops = alt.Chart().transform_filter(alt.datum.layer == "op").mark_circle(opacity=0.8, stroke="black").encode(
        x=x, y=y,
        size=alt.Size("share_pct:Q", title="% of step", scale=alt.Scale(range=[15, 900])),
        color=alt.Color("kind:N", title="op kind"),
        # outline only the clicked point (an empty selection outlines none)
        strokeWidth=alt.StrokeWidthValue(0, condition={"param": OP_SELECTION, "empty": False, "value": 2}),
        tooltip=[alt.Tooltip("op:N"), alt.Tooltip("kind:N"), alt.Tooltip("shape:N"), alt.Tooltip("dtype:N"),
                 alt.Tooltip("flops:Q", title="FLOPs", format=".3s"), alt.Tooltip("bytes:Q", title="bytes", format=".3s"),
                 alt.Tooltip("intensity:Q", title="FLOP/byte", format=".1f"),
                 alt.Tooltip("time_ms:Q", title="predicted ms (one)", format=".3f"),
                 alt.Tooltip("executions:Q"), alt.Tooltip("total_ms:Q", title="ms per step", format=".2f"),
                 alt.Tooltip("share_pct:Q", title="% of step", format=".1f"), alt.Tooltip("bound:N")],
    ).add_params(select)
    layered = alt.layer(*_roofline_layers(), ops).properties(width=FACET_WIDTH, height=CHART_HEIGHT)
    return layered.facet(column=_FACET, data=frame)


def measured_roofline_chart(points: pd.DataFrame, roof_frame: pd.DataFrame, measured: pd.DataFrame) -> alt.LayerChart:
    """The predicted roofline of one GPU with benchmarked kernels overlaid (ours and the vendor's)."""
    frame = roofline_frame([points, measured.rename(columns={"tflops": "achieved_tflops"})], [roof_frame])
    x = X_LOG
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="TFLOP/s")
    predicted = alt.Chart().transform_filter((alt.datum.layer == "op") & alt.expr.isValid(alt.datum.share_pct)).mark_circle(
        color="#bbb", size=30).encode(x=x, y=y, tooltip=["op:N", "shape:N"])
    ran = alt.Chart().transform_filter(alt.expr.isValid(alt.datum.kernel)).mark_point(filled=True, size=70).encode(
        x=x, y=y, color=alt.Color("module:N", title="kernel"), shape=alt.Shape("kernel:N", title="measured"),
        tooltip=["case:N", "module:N", "kernel:N", "dtype:N", alt.Tooltip("tflops:Q", format=",.1f")])
    return alt.layer(*_roofline_layers(), predicted, ran, data=frame).properties(
        width=2 * FACET_WIDTH, height=CHART_HEIGHT)


def step_chart(breakdown: pd.DataFrame) -> alt.LayerChart:
    """Stacked step time per GPU (in ``gpu_order``): compute-, memory-bound, exposed communication, optimizer,
    bubble, and the GPU's wait for a CPU-bound launch; above each bar its step time, tokens/s and MFU, under it
    the CPU's launch time and whether the step was priced as the bound. A GPU the
    configuration does not fit has no bar, only its text (red): what does not fit by how much, what fits."""
    parts = [label for _, label in STEP_PARTS] + [HOST_PART]
    y = alt.Y("gpu:N", title=None, sort=alt.EncodingSortField("gpu_order", op="min"),
              axis=alt.Axis(labelLimit=260))
    bars = alt.Chart().transform_filter(alt.datum.layer == "part").mark_bar(size=18).encode(
        y=y, x=alt.X("ms:Q", title="predicted step time (ms)", stack="zero"),
        color=alt.Color("part:N", title="where the step's time goes", sort=parts, scale=alt.Scale(domain=parts),
                        legend=alt.Legend(orient="bottom", columns=3)),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("part:N", title="part"),
                 alt.Tooltip("ms:Q", title="ms", format=",.1f")],
    )
    labels = alt.Chart().transform_filter(alt.datum.layer == "label").mark_text(
        align="left", baseline="bottom", dy=-10, fontSize=11, limit=2 * FACET_WIDTH + 160).encode(
        y=y, x=alt.value(2), text="text:N",
        color=alt.condition(alt.datum.fits, alt.value("#222"), alt.value("#b00")))
    notes = alt.Chart().transform_filter(alt.datum.layer == "note").mark_text(
        align="left", baseline="top", dy=12, fontSize=11, color="#7a5c00", limit=2 * FACET_WIDTH + 160).encode(
        y=y, x=alt.value(2), text="text:N")
    return alt.layer(bars, labels, notes, data=breakdown).properties(width=2 * FACET_WIDTH, height=alt.Step(64))


def memory_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Per GPU and activation-checkpointing mode: stacked GB per holder against the HBM capacity (red) and the
    usable share (dashed), labelled with whether it fits and the largest micro-batch that does."""
    modes = ["none", "selective", "full"]
    x = alt.X("mode:N", title="activation checkpointing", sort=modes)
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y("gb:Q", title="GB per GPU", stack="zero"),
        color=alt.Color("part:N", title="memory", sort=list(MEMORY_PARTS)),
        order=alt.Order("part_order:Q"),
        tooltip=["mode:N", "part:N", alt.Tooltip("gb:Q", format=",.1f"), alt.Tooltip("total_gb:Q", format=",.1f"),
                 "max_micro_batch:Q"])
    capacity = alt.Chart().mark_rule(color="#d62728", strokeWidth=2).encode(
        y="max(capacity_gb):Q", tooltip=[alt.Tooltip("max(capacity_gb):Q", title="HBM GB")])
    usable = alt.Chart().mark_rule(color="#d62728", strokeDash=[4, 3]).encode(
        y="max(usable_gb):Q", tooltip=[alt.Tooltip("max(usable_gb):Q", title="usable GB (headroom kept)")])
    labels = alt.Chart().mark_text(dy=-8, fontSize=10).encode(
        x=x, y="max(total_gb):Q", text="max(label):N")
    return alt.layer(bars, capacity, usable, labels).properties(width=200, height=CHART_HEIGHT).facet(
        column=_FACET, data=frame)


def save(chart: alt.TopLevelMixin, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``chart`` as PNG or SVG (by the file suffix) through vl-convert, atomically
    (``workbench.fileio.write_bytes``); an existing file is kept unless ``overwrite``."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in SAVE_FORMATS:
        raise ValueError(f"cannot save a chart as {path.name!r}: expected a .png or .svg file name")
    check_output(path, overwrite=overwrite)  # before rendering
    buffer = io.BytesIO() if fmt == "png" else io.StringIO()  # vl-convert writes PNG bytes, SVG text
    chart.save(buffer, format=fmt)
    data = buffer.getvalue()
    return write_bytes(path, data if isinstance(data, bytes) else data.encode("utf-8"), overwrite=overwrite)
