"""The roofline charts: one long frame per chart (``roofline_frame``) and the altair chart drawing it.

What a reader gets: each compute roof labelled with its precision and peak ("bf16 989 TFLOP/s", the calibrated
peak beside it where a calibration profile is drawn), the HBM slope with its TB/s, each ridge point marked and
its arithmetic intensity written at the foot of a dotted line, the GPU's display name in every tooltip, and the
step's ops as points sized by their share of the step on a fixed scale. Ops that would sit on top of each other
are drawn as one point: first those of one shape (same kind, precision, FLOPs, bytes and time: a GEMM's
forward, its weight gradient and its recompute), then ops of one kind whose circles would overlap on screen;
the point's tooltip lists every op it stands for, so hovering never shows another op's name. Everything here
only reshapes ``widgets.data`` frames: the numbers come from ``workbench``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import pandas as pd

from widgets.chart_layout import (
    COLUMNS, PANEL_HEIGHT, PANEL_WIDTH, SPACING, WIDE_WIDTH, fit_width, legend, wrapped_facet,
)
from widgets.data import intensity_range, roof_lines

OP_SELECTION = "op"
"""Name of the point selection on the roofline's op points (``JupyterChart.selections.op``)."""
ROOFLINE_COLUMNS: tuple[str, ...] = (
    "gpu", "gpu_order", "layer", "roof", "source", "order", "label", "rank", "intensity", "tflops",
    "peak_tflops", "bandwidth_tb_s",  # roofs and ridge points
    "op", "ops", "count", "kind", "shape", "dtype", "flops", "bytes", "time_ms", "executions", "total_ms",
    "share_pct", "bound",  # predicted ops (one row per drawn point)
    "case", "module", "kernel",  # measured kernels
    "cls", "measured", "predicted_tflops", "measured_ms", "predicted_ms", "ratio", "measured_kernels", "trace",
    # a trace's kernels per op class (widgets.trace_data.trace_points)
    "tflops_exact",  # a point's TFLOP/s before Y_DECADES bounded where it is drawn (its tooltip shows this)
)
"""What the roofline charts encode or show in tooltips; other columns are not sent to the browser."""
SHARE_DOMAIN: tuple[float, float] = (0.0, 40.0)
"""Point size scale in % of the step, fixed (and clamped) so a size means the same share in every selection."""
SIZE_RANGE: tuple[float, float] = (14.0, 480.0)
"""Point areas in px² for SHARE_DOMAIN's ends: a 40% point is ~25 px across, a tiny op ~4 px."""
SIZE_LEGEND: tuple[float, ...] = (1, 5, 10, 20, 40)
OVERLAP = 0.8
"""Two points of one kind are drawn as one when their centres are closer than this share of their radii's sum."""
RIDGE_ROWS = 4
"""Rows of ridge labels at the foot of each panel (one per distinct ridge, the rightmost lowest)."""
_ROW_PX = 13
_CHAR_PX = 5.8
_LINE_PX = 12
"""About how wide a character (and how tall a line) of the 10 px label font is (Vega's default sans-serif), to
tell whether a label fits left of its roof's knee and clear of the next roof's label."""
_NAMES_SHOWN = 8
Y_DECADES = 6
"""The y axis spans at most this many decades below the panel's highest roof (and a decade above it): an op or a
trace class outside is drawn on that edge (its tooltip keeps the exact TFLOP/s), so one op of a few FLOPs (a
float8 scale update) or a trace of another configuration cannot squeeze the roofs and their labels together."""

X_LOG = alt.X("intensity:Q", scale=alt.Scale(type="log", nice=False), title="arithmetic intensity (FLOP/byte)")
"""The roofline's x axis; its extent is the roof lines' (``intensity_range``), so no domain depends on data."""


def _number(value: float) -> str:
    """989.4 -> "989", 2306.9 -> "2,307", 67 -> "67", 4.8 -> "4.8": a peak or a bandwidth as a label shows it."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _bandwidth(value: float) -> str:
    """A TB/s label with at least one decimal, so GPUs side by side read alike: 8.0 -> "8.0" (not "8" beside
    another GPU's "7.7"), 3.35 -> "3.35", 4.2913 -> "4.29"."""
    text = _number(value)
    return text if "." in text or value >= 100 else f"{value:.1f}"


# ---------------------------------------------------------------------------------------------- the frame


class _Pixels:
    """Approximate screen positions of a panel (log axes: the x domain is the roof lines' exact extent, the y
    domain is niced to whole decades by Vega), used only to decide which points would overlap."""

    def __init__(self, x_range: tuple[float, float], tflops: Sequence[float], width: float):
        positive = [v for v in tflops if v > 0 and math.isfinite(v)] or [1.0]
        decades_y = max(1, math.ceil(math.log10(max(positive))) - math.floor(math.log10(min(positive))))
        self.per_decade_x = width / max(math.log10(x_range[1] / x_range[0]), 1e-9)
        self.per_decade_y = PANEL_HEIGHT / decades_y

    def place(self, members: list[dict], point: dict) -> tuple[list[dict], dict, float, float, float]:
        """``point`` with its centre (px from an arbitrary origin) and its drawn radius (px)."""
        return (members, point, math.log10(point["intensity"]) * self.per_decade_x,
                math.log10(point["tflops"]) * self.per_decade_y, _radius(point["share_pct"]))


def _radius(share_pct: float) -> float:
    """The drawn radius (px) of a point of ``share_pct`` under the fixed size scale."""
    low, high = SHARE_DOMAIN
    t = min(max((share_pct - low) / (high - low), 0.0), 1.0)
    return math.sqrt((SIZE_RANGE[0] + t * (SIZE_RANGE[1] - SIZE_RANGE[0])) / math.pi)


def _merge(ops: list[dict]) -> dict:
    """One drawn point for ops of one GPU and kind (``roofline_points`` records): the step-weighted position
    (total FLOPs over total bytes, total FLOPs over total time), summed time and share, and every op's name."""
    flops = sum(o["flops"] * o["executions"] for o in ops)
    moved = sum(o["bytes"] * o["executions"] for o in ops)
    total_ms = sum(o["total_ms"] for o in ops)
    executions = sum(o["executions"] for o in ops)
    first = max(ops, key=lambda o: o["total_ms"])  # the one a click shows (op_detail takes one op)
    names = list(dict.fromkeys(o["op"] for o in ops))
    shapes = list(dict.fromkeys(str(o["shape"]) for o in ops))

    def listed(items: list[str], most: int) -> str:
        return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")

    return {
        "gpu": first["gpu"], "op": first["op"], "ops": listed(names, _NAMES_SHOWN), "count": len(names),
        "kind": first["kind"], "shape": listed(shapes, 4),
        "dtype": ", ".join(dict.fromkeys(str(o["dtype"]) for o in ops)),
        "flops": flops / executions, "bytes": moved / executions,  # per execution, averaged over the ops
        "intensity": flops / moved,
        "tflops": flops / (total_ms * 1e-3) / 1e12 if total_ms > 0 else first["achieved_tflops"],
        "time_ms": total_ms / executions, "executions": executions, "total_ms": total_ms,
        "share_pct": sum(o["share_pct"] for o in ops), "bound": ", ".join(dict.fromkeys(str(o["bound"]) for o in ops)),
    }


def aggregate_ops(ops: pd.DataFrame, pixels: _Pixels) -> pd.DataFrame:
    """``widgets.data.roofline_points`` rows (any GPUs) as the points to draw: ops of one shape merged (same GPU,
    kind, dtype, FLOPs, bytes and time per execution), then, per GPU and kind, the closest pair of points whose
    circles overlap (centres nearer than ``OVERLAP`` x their radii's sum) merged until none does. Columns: those
    of ``_merge``; ``count`` is how many ops a point stands for, ``op`` the one that takes most of its time."""
    if ops.empty:
        return pd.DataFrame()
    shapes: dict[tuple, list[dict]] = {}
    for o in ops.to_dict("records"):  # plain dicts: a pandas group per op would cost more than the chart
        key = (o["gpu"], o["kind"], o["dtype"], o["flops"], o["bytes"], round(o["time_ms"], 9))
        shapes.setdefault(key, []).append(o)
    by_kind: dict[tuple, list[list[dict]]] = {}
    for key, members in shapes.items():
        by_kind.setdefault(key[:2], []).append(members)
    out: list[dict] = []
    for groups in by_kind.values():
        points = [pixels.place(members, _merge(members)) for members in groups]  # (members, point, x px, y px, r px)
        while len(points) > 1:
            best = None
            for i, (_, _, xa, ya, ra) in enumerate(points):
                for j in range(i + 1, len(points)):
                    _, _, xb, yb, rb = points[j]
                    gap = math.hypot(xa - xb, ya - yb)
                    if gap < OVERLAP * (ra + rb) and (best is None or gap < best[0]):
                        best = (gap, i, j)
            if best is None:
                break
            _, i, j = best
            merged = points[i][0] + points[j][0]
            points = [p for k, p in enumerate(points) if k not in (i, j)] + [pixels.place(merged, _merge(merged))]
        out += [p[1] for p in points]
    return pd.DataFrame(out)


def _labels(roofs: pd.DataFrame, x_range: tuple[float, float], pixels: _Pixels) -> pd.DataFrame:
    """Per GPU: one label per compute roof (precisions of equal peak share one: "fp8 · int8 1,979 TFLOP/s",
    with the calibrated peak where one is drawn), one on the HBM slope ("HBM 4.8 TB/s"), and one per ridge
    point for the foot of its dotted line ("bf16 ridge 206 FLOP/byte", ``rank`` the row, 0 lowest)."""
    by_gpu: dict[str, list[dict]] = {}
    for r in roofs.to_dict("records"):
        by_gpu.setdefault(r["gpu"], []).append(r)
    rows = []  # a label of two lines has its own layer ("..._2"): the mark's dy lifts its first line higher
    for gpu, roofs_of in by_gpu.items():
        spec = [r for r in roofs_of if r["source"] == "spec"]
        calibrated = [r for r in roofs_of if r["source"] == "calibrated"]
        tuned = {r["roof"]: r["peak_tflops"] for r in calibrated}
        peaks: dict[float, list[dict]] = {}
        for r in spec:
            peaks.setdefault(r["peak_tflops"], []).append(r)
        ridges = []
        heights = sorted(math.log10(p) * pixels.per_decade_y for p in peaks)
        for peak, same in peaks.items():
            keys = " · ".join(r["roof"].split()[0] for r in same)
            ridge = float(same[0]["ridge"])
            text, layer = f"{keys} {_number(peak)} TFLOP/s", "roof_label"
            if cal := [tuned[r["roof"]] for r in same if r["roof"] in tuned]:
                room = math.log10(ridge / x_range[0]) * pixels.per_decade_x - 10  # px left of the knee
                height = math.log10(peak) * pixels.per_decade_y
                alone = all(abs(h - height) > 2.6 * _LINE_PX for h in heights if h != height)  # room for 2 lines
                for candidate, lines in ((f"{text} (calibrated {_number(cal[0])})", 1),
                                         (f"{text} (cal. {_number(cal[0])})", 1),
                                         (f"{text}\ncalibrated {_number(cal[0])}", 2)):
                    if max(map(len, candidate.split("\n"))) * _CHAR_PX <= room and (lines == 1 or alone):
                        text, layer = candidate, "roof_label" if lines == 1 else "roof_label_2"
                        break  # else: the peak alone (the calibrated one is in the roof's tooltip)
            rows.append({"gpu": gpu, "layer": layer, "label": text, "intensity": ridge, "tflops": peak})
            ridges.append((ridge, peak, keys))
        for rank, (ridge, peak, keys) in enumerate(sorted(ridges, reverse=True)):
            rows.append({"gpu": gpu, "layer": "ridge_label", "rank": rank, "intensity": ridge, "tflops": peak,
                         "label": f"{keys} ridge {ridge:,.0f} FLOP/byte" if ridge >= 10 else
                         f"{keys} ridge {ridge:.2g} FLOP/byte"})
        bandwidth = float(spec[0]["bandwidth_tb_s"])
        # on the slope, ~1.5 decades under the lowest ridge, with room on its left for the text
        low_log, ridge_log = math.log10(x_range[0]), math.log10(min(r["ridge"] for r in spec))
        anchor = 10 ** min(max(low_log + 95 / pixels.per_decade_x, ridge_log - 1.5), ridge_log - 0.3)
        text, layer = f"HBM {_bandwidth(bandwidth)} TB/s", "hbm_label"
        if calibrated:
            text, layer = f"{text}\ncalibrated {_bandwidth(float(calibrated[0]['bandwidth_tb_s']))} TB/s", "hbm_label_2"
        rows.append({"gpu": gpu, "layer": layer, "label": text, "intensity": anchor, "tflops": bandwidth * anchor,
                     "bandwidth_tb_s": bandwidth})
    return pd.DataFrame(rows)


def _bounded(rows: pd.DataFrame, top: pd.Series) -> pd.Series:
    """``rows``' TFLOP/s within their panel's drawn range: ``Y_DECADES`` decades under its highest roof, one over."""
    if top.empty:
        return rows["tflops"]
    peak = rows["gpu"].map(top).fillna(rows["tflops"])
    return rows["tflops"].clip(lower=peak / 10 ** Y_DECADES, upper=peak * 10)


def roofline_frame(points: Sequence[pd.DataFrame], roof_frames: Sequence[pd.DataFrame],
                   gpu_order: Sequence[str] = (), width: float = PANEL_WIDTH) -> pd.DataFrame:
    """One long frame for a faceted roofline (a facet needs one data source): ``layer`` says which mark draws
    each row (roof line vertices, ridge points, labels, op points: ``aggregate_ops``; rows with a ``kernel``
    are benchmarked kernels, rows with a ``cls`` a trace's op classes, both drawn as they are); ``gpu_order``
    orders the panels; ``width``: a panel's pixels."""
    x_range = intensity_range(points, roof_frames)
    roofs = pd.concat(list(roof_frames), ignore_index=True) if roof_frames else pd.DataFrame()
    lines = roof_lines(roofs, x_range).assign(layer="roof") if not roofs.empty else pd.DataFrame()
    if not lines.empty:
        lines = lines.merge(roofs[["gpu", "roof", "source", "peak_tflops", "bandwidth_tb_s"]], how="left",
                            on=["gpu", "roof", "source"])
    ridges = roofs.rename(columns={"ridge": "intensity"}).assign(layer="ridge", tflops=roofs.get("peak_tflops")) \
        if not roofs.empty else roofs
    if not ridges.empty:
        ridges["label"] = ridges["roof"] + " (" + ridges["source"] + ")"
    given = pd.concat(list(points), ignore_index=True).rename(columns={"achieved_tflops": "tflops"}) \
        if points else pd.DataFrame()
    is_op = given["op"].notna() if "op" in given else pd.Series(False, index=given.index)
    is_trace = given["cls"].notna() & ~is_op if "cls" in given else pd.Series(False, index=given.index)
    top = lines.groupby("gpu")["tflops"].max() if not lines.empty else pd.Series(dtype=float)
    if is_trace.any():
        given = given.copy()
        given.loc[is_trace, "tflops_exact"] = given.loc[is_trace, "tflops"]
        given.loc[is_trace, "tflops"] = _bounded(given[is_trace], top)
    tflops = list(lines["tflops"]) if not lines.empty else []
    tflops += list(_bounded(given[is_op | is_trace], top)) if "tflops" in given else []  # as drawn
    pixels = _Pixels(x_range, tflops, width)
    ops = aggregate_ops(given[is_op].rename(columns={"tflops": "achieved_tflops"}), pixels)
    if not ops.empty:
        ops = ops.assign(tflops_exact=ops["tflops"], tflops=_bounded(ops, top))
    labels = _labels(roofs, x_range, pixels) if not roofs.empty else pd.DataFrame()
    parts = [f for f in (lines, ridges, labels, ops.assign(layer="op") if not ops.empty else ops,
                         given[~is_op & ~is_trace].assign(layer="measured"), given[is_trace].assign(layer="trace"))
             if not f.empty]
    if not parts:  # no GPU could be predicted: an empty chart
        return pd.DataFrame(columns=["gpu", "gpu_order", "layer", "intensity", "tflops"])
    frame = pd.concat(parts, ignore_index=True)
    frame["gpu_order"] = frame["gpu"].map({name: i for i, name in enumerate(gpu_order)}) if "gpu" in frame else None
    return frame[[c for c in ROOFLINE_COLUMNS if c in frame]]


# ---------------------------------------------------------------------------------------------- the chart


def _y(title: str) -> alt.Y:
    return alt.Y("tflops:Q", scale=alt.Scale(type="log"), title=title)


def _roofline_layers(y_title: str) -> list[alt.Chart]:
    """The layers shared by the predicted and the measured roofline: roofs (solid spec, dashed calibrated; the
    dash legend lists only what is drawn, its domain comes from the data), their labels, the HBM slope's label,
    ridge points with their dotted lines and labels (no data of their own: the top-level chart carries one data
    set, converted once)."""
    x, y = X_LOG, _y(y_title)
    gpu = alt.Tooltip("gpu:N", title="GPU")
    roofs = alt.Chart().transform_filter(alt.datum.layer == "roof").mark_line(color="#666", strokeWidth=1.5).encode(
        x=x, y=y, detail=[alt.Detail("roof:N"), alt.Detail("source:N")], order=alt.Order("order:Q"),
        strokeDash=alt.StrokeDash("source:N", sort=["spec", "calibrated"], scale=alt.Scale(range=[[1, 0], [6, 3]]),
                                  legend=legend("roofs", symbolStrokeColor="#666")),
        tooltip=[gpu, alt.Tooltip("roof:N"), alt.Tooltip("source:N", title="roof from"),
                 alt.Tooltip("peak_tflops:Q", title="peak TFLOP/s", format=",.0f"),
                 alt.Tooltip("bandwidth_tb_s:Q", title="HBM TB/s", format=".2f")])
    roof_labels = [alt.Chart().transform_filter(alt.datum.layer == layer).mark_text(
        align="right", baseline="bottom", dx=-5, dy=dy, fontSize=10, color="#333", lineBreak="\n").encode(
        x=x, y=y, text="label:N") for layer, dy in (("roof_label", -3), ("roof_label_2", -15))]  # -15: a second line
    hbm_labels = [alt.Chart().transform_filter(alt.datum.layer == layer).mark_text(
        align="right", baseline="bottom", dx=-8, dy=dy, fontSize=10, color="#333", lineBreak="\n").encode(
        x=x, y=y, text="label:N") for layer, dy in (("hbm_label", -4), ("hbm_label_2", -16))]
    ridges = alt.Chart().transform_filter(alt.datum.layer == "ridge").mark_point(
        shape="diamond", color="#444", filled=True, size=40).encode(
        x=x, y=y, tooltip=[gpu, alt.Tooltip("label:N", title="ridge point"),
                           alt.Tooltip("intensity:Q", title="FLOP/byte", format=".1f"),
                           alt.Tooltip("tflops:Q", title="peak TFLOP/s", format=",.0f")])
    feet = []
    for rank in range(RIDGE_ROWS):  # one layer per row: a row's height is a pixel value, not a data value
        row = alt.Chart().transform_filter((alt.datum.layer == "ridge_label") & (alt.datum.rank == rank))
        feet.append(row.mark_rule(color="#999", strokeDash=[2, 2]).encode(
            x=x, y=y, y2=alt.value(PANEL_HEIGHT - _ROW_PX * (rank + 1))))
        feet.append(row.mark_text(align="right", baseline="bottom", dx=-3, fontSize=9, color="#555").encode(
            x=x, y=alt.value(PANEL_HEIGHT - 2 - _ROW_PX * rank), text="label:N"))
    return [roofs, *feet, ridges, *roof_labels, *hbm_labels]


def _op_tooltip() -> list[alt.Tooltip]:
    return [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("ops:N", title="ops"),
            alt.Tooltip("count:Q", title="ops in this point"), alt.Tooltip("kind:N"),
            alt.Tooltip("shape:N"), alt.Tooltip("dtype:N"),
            alt.Tooltip("intensity:Q", title="FLOP/byte", format=".1f"),
            alt.Tooltip("tflops_exact:Q", title="TFLOP/s", format=",.1f"),
            alt.Tooltip("time_ms:Q", title="ms per execution", format=".3f"),
            alt.Tooltip("executions:Q", title="executions per step"),
            alt.Tooltip("total_ms:Q", title="ms per step", format=",.2f"),
            alt.Tooltip("share_pct:Q", title="% of step", format=".1f"), alt.Tooltip("bound:N")]


def _trace_layer() -> alt.Chart:
    """A loaded trace's kernels per op class (``layer == "trace"``): hollow diamonds at the predicted class's
    intensity and the measured achieved TFLOP/s, one legend entry "measured (trace)" (its domain from the data:
    no entry without a trace). The legend keeps its title "trace" even then: a legend with neither entries nor a
    title has no bounds, and Vega then sizes the whole chart as infinite (seen in vega-embed and vl-convert)."""
    return alt.Chart().transform_filter(alt.datum.layer == "trace").mark_point(
        filled=False, color="#111", strokeWidth=1.8, size=110).encode(
        x=X_LOG, y=_y("TFLOP/s (predicted achieved)"),
        shape=alt.Shape("measured:N", scale=alt.Scale(range=["diamond"]), legend=legend("trace")),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("cls:N", title="op class"),
                 alt.Tooltip("trace:N", title="trace"),
                 alt.Tooltip("measured_ms:Q", title="measured ms per step", format=",.2f"),
                 alt.Tooltip("predicted_ms:Q", title="predicted ms per step", format=",.2f"),
                 alt.Tooltip("ratio:Q", title="measured / predicted", format=".3f"),
                 alt.Tooltip("tflops_exact:Q", title="measured TFLOP/s", format=",.1f"),
                 alt.Tooltip("predicted_tflops:Q", title="predicted TFLOP/s", format=",.1f"),
                 alt.Tooltip("intensity:Q", title="FLOP/byte (predicted class)", format=".1f"),
                 alt.Tooltip("measured_kernels:Q", title="kernels per step", format=",.0f")])


def roofline_chart(frame: pd.DataFrame) -> alt.FacetChart:
    """Log-log roofline per GPU (``roofline_frame`` rows), in rows of ``COLUMNS`` panels with the legends
    underneath: labelled roofs, ridge points, and the step's ops as points sized by their share of the step (a
    fixed scale) and coloured by kind, small points over large, and a loaded trace's op classes as hollow diamonds
    ("measured (trace)"); clicking an op point selects it (selection ``op`` on fields gpu and op). The chart's structure does not depend on the data (``LiveChart`` swaps only the data)."""
    select = alt.selection_point(name=OP_SELECTION, fields=["gpu", "op"], on="click", clear="dblclick")
    ops = alt.Chart().transform_filter(alt.datum.layer == "op").mark_circle(opacity=0.8, stroke="black").encode(
        x=X_LOG, y=_y("TFLOP/s (predicted achieved)"),
        size=alt.Size("share_pct:Q", scale=alt.Scale(domain=list(SHARE_DOMAIN), range=list(SIZE_RANGE), clamp=True),
                      legend=legend("% of step", values=list(SIZE_LEGEND))),
        color=alt.Color("kind:N", legend=legend("op kind", columns=5)),
        order=alt.Order("share_pct:Q", sort="descending"),  # the small ones drawn last, on top
        # outline only the clicked point (an empty selection outlines none)
        strokeWidth=alt.StrokeWidthValue(0.5, condition={"param": OP_SELECTION, "empty": False, "value": 2.5}),
        tooltip=_op_tooltip(),
    ).add_params(select)
    layered = alt.layer(*_roofline_layers("TFLOP/s (predicted achieved)"), ops, _trace_layer()).properties(
        width=PANEL_WIDTH, height=PANEL_HEIGHT)
    return fit_width(layered.facet(facet=wrapped_facet(), columns=COLUMNS, data=frame, spacing=SPACING).resolve_axis(
        x="independent"))


def measured_roofline_chart(points: pd.DataFrame, roof_frame: pd.DataFrame, measured: pd.DataFrame) -> alt.LayerChart:
    """The predicted roofline of one GPU with benchmarked kernels overlaid (ours and the vendor's)."""
    frame = roofline_frame([points, measured.rename(columns={"tflops": "achieved_tflops"})], [roof_frame],
                           width=WIDE_WIDTH)
    predicted = alt.Chart().transform_filter(alt.datum.layer == "op").mark_circle(color="#bbb", size=30).encode(
        x=X_LOG, y=_y("TFLOP/s"), tooltip=_op_tooltip())
    ran = alt.Chart().transform_filter(alt.datum.layer == "measured").mark_point(filled=True, size=70).encode(
        x=X_LOG, y=_y("TFLOP/s"), color=alt.Color("module:N", legend=legend("kernel")),
        shape=alt.Shape("kernel:N", legend=legend("measured")),
        tooltip=["case:N", "module:N", "kernel:N", "dtype:N", alt.Tooltip("tflops:Q", format=",.1f")])
    return alt.layer(*_roofline_layers("TFLOP/s"), predicted, ran, data=frame).properties(
        width=WIDE_WIDTH, height=PANEL_HEIGHT)
