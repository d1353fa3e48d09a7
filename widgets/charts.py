"""Altair charts of the workbench, built from ``widgets.data`` frames (they draw; they compute nothing).

Every chart is a plain ``alt.Chart``/``LayerChart``/``FacetChart``: the widget shows it in an
``alt.JupyterChart`` (offline), and ``save`` writes it as PNG or SVG through vl-convert, without a network.
Panels per GPU wrap into rows and legends sit under them (``widgets.chart_layout``), so no chart is wider than
the notebook; the rooflines live in ``widgets.roofline_chart``.
"""

from __future__ import annotations

import io
from pathlib import Path

import altair as alt
import pandas as pd

from widgets.chart_layout import (
    COLUMNS, PANEL_HEIGHT, PANEL_WIDTH, SPACING, WIDE_WIDTH, fit_width, legend, wrapped_facet,
)
from widgets.data import HOST_PART, MEMORY_PARTS, STEP_PARTS
from widgets.roofline_chart import (  # noqa: F401  (the roofline's names, where the widget looks for them)
    OP_SELECTION, ROOFLINE_COLUMNS, X_LOG, aggregate_ops, measured_roofline_chart, roofline_chart, roofline_frame,
)
from workbench.fileio import check_output, write_bytes

SAVE_FORMATS: tuple[str, ...] = ("png", "svg")
FACET_WIDTH = PANEL_WIDTH
CHART_HEIGHT = PANEL_HEIGHT
_LABEL_LIMIT = WIDE_WIDTH + 160
"""Pixels a step chart's text may take from the plot's left edge (its y labels take up to 260 more)."""
_FITS = "datum.fits !== false"
"""A row that fits: ``fits`` True, or no ``fits`` column at all (older frames)."""


def step_chart(breakdown: pd.DataFrame) -> alt.LayerChart:
    """Stacked step time per GPU (in ``gpu_order``): compute-, memory-bound, exposed communication, optimizer,
    bubble, and the GPU's wait for a CPU-bound launch; above each bar its step time, tokens/s and MFU, under it
    the CPU's launch time and whether the step was priced as the bound. Where the frame has a relative
    ``uncertainty`` column, an error bar of ± that share of the whole step (and its "± x%"). A GPU the
    configuration does not fit (``fits`` False) gets no bar, no error bar and no MFU: only its text (red), what
    does not fit by how much and what fits. Without the ``fits`` or ``uncertainty`` columns every row fits and no
    error bar is drawn: the chart's structure is the same either way (``LiveChart`` keeps it)."""
    parts = [label for _, label in STEP_PARTS] + [HOST_PART]
    y = alt.Y("gpu:N", title=None, sort=alt.EncodingSortField("gpu_order", op="min"), axis=alt.Axis(labelLimit=260))
    bars = alt.Chart().transform_filter(f"datum.layer === 'part' && {_FITS}").mark_bar(size=18).encode(
        y=y, x=alt.X("ms:Q", title="predicted step time (ms)", stack="zero"),
        color=alt.Color("part:N", sort=parts, scale=alt.Scale(domain=parts),
                        legend=legend("where the step's time goes", columns=3)),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("part:N", title="part"),
                 alt.Tooltip("ms:Q", title="ms", format=",.1f")],
    )
    # ± uncertainty on the whole step: the parts' sum per GPU, the largest uncertainty any of its rows carries
    # (the frame's step_ms where it has one, else the parts' sum)
    spread = alt.Chart().transform_joinaggregate(
        parts_ms="sum(ms)", spread="max(uncertainty)", groupby=["gpu"]).transform_filter(
        f"datum.layer === 'label' && {_FITS} && isValid(datum.spread) && datum.spread > 0"
    ).transform_calculate(total_ms="isValid(datum.step_ms) ? datum.step_ms : datum.parts_ms").transform_filter(
        "datum.total_ms > 0").transform_calculate(
        low="datum.total_ms * (1 - datum.spread)", high="datum.total_ms * (1 + datum.spread)",
        spread_text="'± ' + format(datum.spread * 100, '.1~f') + '%'")
    tooltip = [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("total_ms:Q", title="step ms", format=",.1f"),
               alt.Tooltip("spread_text:N", title="uncertainty"),
               alt.Tooltip("low:Q", title="from ms", format=",.1f"),
               alt.Tooltip("high:Q", title="to ms", format=",.1f")]
    error = spread.mark_rule(color="#222", strokeWidth=1.5).encode(y=y, x="low:Q", x2="high:Q", tooltip=tooltip)
    ends = [spread.mark_tick(color="#222", thickness=1.5, size=14).encode(y=y, x=f"{end}:Q", tooltip=tooltip)
            for end in ("low", "high")]
    spread_label = spread.mark_text(align="left", dx=5, fontSize=10, color="#222").encode(
        y=y, x="high:Q", text="spread_text:N")
    # what does not fit says so, in red, and never shows an MFU (it has no step)
    labels = alt.Chart().transform_filter(alt.datum.layer == "label").transform_calculate(
        shown=f"{_FITS} || indexof(datum.text, 'MFU') < 0 ? datum.text : 'does not fit in memory'").mark_text(
        align="left", baseline="bottom", dy=-10, fontSize=11, limit=_LABEL_LIMIT).encode(
        y=y, x=alt.value(2), text="shown:N",
        color=alt.condition(_FITS, alt.value("#222"), alt.value("#b00")))
    no_bar = alt.Chart().transform_filter(f"datum.layer === 'label' && !({_FITS})").mark_text(
        align="left", baseline="middle", fontSize=11, fontStyle="italic", color="#b00").encode(
        y=y, x=alt.value(2), text=alt.value("no bar: this configuration does not fit in memory"))
    notes = alt.Chart().transform_filter(alt.datum.layer == "note").mark_text(
        align="left", baseline="top", dy=12, fontSize=11, color="#7a5c00", limit=_LABEL_LIMIT).encode(
        y=y, x=alt.value(2), text="text:N")
    return fit_width(alt.layer(bars, error, *ends, spread_label, labels, no_bar, notes, data=breakdown).properties(
        width=WIDE_WIDTH, height=alt.Step(64)))


def memory_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Per GPU (panels in rows of ``COLUMNS``) and activation-checkpointing mode: stacked GB per holder against
    the HBM capacity (solid red) and its usable share (dashed; both in the legend), each bar labelled on two
    short lines with whether it fits and the largest micro-batch that does (short enough not to reach the
    neighbouring bar's)."""
    modes = ["none", "selective", "full"]
    x = alt.X("mode:N", title="activation checkpointing", sort=modes, axis=alt.Axis(labelAngle=0))
    gpu = alt.Tooltip("gpu:N", title="GPU")
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y("gb:Q", title="GB per GPU", stack="zero"),
        color=alt.Color("part:N", sort=list(MEMORY_PARTS), legend=legend("memory")),
        order=alt.Order("part_order:Q"),
        tooltip=[gpu, alt.Tooltip("mode:N", title="checkpointing"), alt.Tooltip("part:N", title="holds"),
                 alt.Tooltip("gb:Q", title="GB", format=",.1f"),
                 alt.Tooltip("total_gb:Q", title="total GB", format=",.1f"),
                 alt.Tooltip("max_micro_batch:Q", title="largest micro-batch")])
    lines = ["HBM capacity", "usable (headroom kept)"]
    dash = alt.Scale(domain=lines, range=[[1, 0], [4, 3]])
    dash_legend = legend("HBM per GPU", symbolStrokeColor="#d62728", symbolType="stroke")
    capacity = alt.Chart().transform_calculate(line=repr(lines[0])).mark_rule(color="#d62728", strokeWidth=2).encode(
        y="max(capacity_gb):Q", strokeDash=alt.StrokeDash("line:N", scale=dash, legend=dash_legend),
        tooltip=[gpu, alt.Tooltip("max(capacity_gb):Q", title="HBM GB", format=",.1f")])
    usable = alt.Chart().transform_calculate(line=repr(lines[1])).mark_rule(color="#d62728", strokeWidth=1.5).encode(
        y="max(usable_gb):Q", strokeDash=alt.StrokeDash("line:N", scale=dash, legend=dash_legend),
        tooltip=[gpu, alt.Tooltip("max(usable_gb):Q", title="usable GB (headroom kept)", format=",.1f")])
    labels = alt.Chart().transform_filter(alt.datum.part_order == 0).transform_calculate(  # one row per mode
        shown="datum.fits ? 'fits, largest\\nmicro-batch ' + datum.max_micro_batch : 'does not fit'").mark_text(
        baseline="bottom", dy=-16, fontSize=10, lineBreak="\n").encode(  # dy: two lines, the first on top
        x=x, y="total_gb:Q", text="shown:N", color=alt.condition("datum.fits", alt.value("#222"), alt.value("#b00")))
    panel = alt.layer(bars, capacity, usable, labels).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return fit_width(panel.facet(facet=wrapped_facet(), columns=COLUMNS, spacing=SPACING, data=frame).resolve_axis(
        x="independent"))


def port_chart(frame: pd.DataFrame, source: str) -> alt.Chart:
    """Predicted tokens/s per target GPU (``widgets.advice.advice_frame`` rows): the source's best recipe ported
    unchanged vs the co-designed one, as two bars side by side under each GPU's name (one axis label per GPU,
    written across, so names never overlap); a recipe that does not fit is drawn faint."""
    variants = ["direct port", "co-designed"]
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("target:N", title=None, sort=None, axis=alt.Axis(labelLimit=300, labelFontSize=11)),
        yOffset=alt.YOffset("variant:N", sort=variants),
        x=alt.X("tokens_per_s:Q", title=f"predicted tokens/s, total over the job's GPUs (port from {source})"),
        color=alt.Color("variant:N", sort=variants, legend=legend(None)),
        opacity=alt.condition(alt.datum.fits, alt.value(1.0), alt.value(0.35)),
        tooltip=[alt.Tooltip("target:N", title="GPU"), alt.Tooltip("variant:N", title="recipe"),
                 alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=",.0f"),
                 alt.Tooltip("step_ms:Q", title="step ms", format=",.1f"), alt.Tooltip("fits:N")],
    ).properties(width=WIDE_WIDTH - 180, height=alt.Step(20))


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
