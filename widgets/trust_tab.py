"""The "How far to trust this" tab: the model's record for the chosen GPUs and stack before anyone believes it.

Two sections: the measured runs (``workbench.validation``: H200 stack runs predicted live, with the "± x%" every
step time carries) and the published results (``workbench.published``: vendor, framework and MLPerf tables as the
published-tables evaluation predicted them), both filtered to the chosen GPUs (a part with its variants) and, for
the published rows, to the model's family.
"""

from __future__ import annotations

import html

import altair as alt
import ipywidgets as w
import pandas as pd

from workbench.errors import UnknownNameError
from workbench.hardware import get_gpu
from workbench.published import PublishedRow, mape, model_family, published_rows, published_rows_for
from workbench.stacks import get_stack
from widgets.formatting import BOUND_LABEL, html_table, uncertainty_text
from widgets.panels import PanelContext, chart_view, html_box
from widgets.tables import record_summary, trust_records, validation_frame, validation_rows

METRIC_WORDS: dict[str, str] = {"tokens_per_sec_per_gpu": "tokens/s per GPU", "train_step_time": "step time",
                                "train_throughput": "samples/s", "tflops_per_gpu": "model TFLOP/s per GPU"}
"""The published table's metrics in words (each row keeps its own unit beside)."""


def _figure(value: float | None) -> str:
    """A published or predicted figure in the row's unit: four significant digits, thousands separated."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.4g}"


def _stack_words(row: PublishedRow) -> str:
    """The stack a row was priced for, in words, with its flags (a proxy for the framework, priced as the bound)."""
    try:
        words = BOUND_LABEL if get_stack(row.stack).bound else get_stack(row.stack).display_name
    except UnknownNameError:  # a stack the evaluation used that this checkout lacks: the row keeps its name
        words = row.stack
    flags = [f for f, on in (("a proxy for the framework", row.proxy),
                             ("outside its tables: priced as the bound", row.bound)) if on]
    return words + (f" ({'; '.join(flags)})" if flags else "")


def published_table(rows: tuple[PublishedRow, ...] | list[PublishedRow]) -> list[dict[str, str]]:
    """One row per published result: what ran, published vs predicted in the row's metric, the error
    (predicted / published - 1), or why the workbench cannot express it."""
    out = []
    for r in rows:
        note = r.reason if r.predicted is None else ("" if r.fits else "predicted not to fit in memory")
        out.append({"GPU": get_gpu(r.gpu).display_name, "published result": r.id, "framework": r.framework,
                    "priced as": _stack_words(r), "model": r.model, "precision": r.precision,
                    "metric": f"{METRIC_WORDS.get(r.metric, r.metric)} ({r.unit})", "published": _figure(r.published),
                    "predicted": _figure(r.predicted),
                    "error": "not expressed" if r.error is None else f"{r.error:+.1%}", "note": note})
    return out


_PUBLISHED_TEXT = ("GPU", "published result", "framework", "priced as", "model", "metric", "note")
"""The published table's text columns: they break (within the output area at five GPUs) where numbers do not."""


def _priced_as(row: PublishedRow, stack: str) -> bool:
    """Whether ``row`` was priced by ``stack`` or a variant of it (torchtitan's tables ran as torchtitan-flash2)."""
    try:
        return get_stack(row.stack).is_variant_of(stack)
    except UnknownNameError:
        return row.stack == stack


def published_summary(gpu: str, family: str, stack: str) -> str:
    """One line per GPU: how many published rows of the family it has, how many the model expresses, their mean
    |error|, and the same for the chosen stack's rows (plain text)."""
    name = get_gpu(gpu).display_name
    rows = published_rows_for(gpu, family)
    if not rows:
        others = sum(get_gpu(gpu).name in (r.gpu, get_gpu(r.gpu).derived_from) for r in published_rows())
        return (f"{name}: no published {family} rows"
                + (f" ({others} of other model families in the table)" if others else " (none in the table)"))
    expressed = [r for r in rows if r.error is not None]
    text = f"{name}: {len(rows)} published {family} rows, {len(expressed)} expressed"
    if expressed:
        text += f": mean |error| {mape(expressed):.1%}, worst {max((r.error for r in expressed), key=abs):+.1%}"
    own = [r for r in expressed if _priced_as(r, stack)]
    if own and len(own) < len(expressed):
        text += f"; priced as the chosen stack: {len(own)} rows, mean |error| {mape(own):.1%}"
    elif not own and stack != "ideal":
        text += "; none priced as the chosen stack"
    return text


def trust_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Predicted against measured step time per run (log-log), with the line where they agree."""
    low = min(frame["measured_ms"].min(), frame["predicted_ms"].min()) / 1.2
    high = max(frame["measured_ms"].max(), frame["predicted_ms"].max()) * 1.2
    scale = alt.Scale(type="log", domain=[low, high])
    points = alt.Chart(frame).mark_point(filled=True, size=60).encode(
        x=alt.X("measured_ms:Q", title="measured step (ms)", scale=scale),
        y=alt.Y("predicted_ms:Q", title="predicted step (ms)", scale=scale),
        color=alt.Color("role:N", title="run", sort=["fit", "test", "holdout"]),
        shape=alt.Shape("counted:N", title="counted in ±", sort=["yes", "no"]),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("run:N"), alt.Tooltip("role:N"),
                 alt.Tooltip("measured_ms:Q", title="measured ms", format=",.1f"),
                 alt.Tooltip("predicted_ms:Q", title="predicted ms", format=",.1f"),
                 alt.Tooltip("error_pct:Q", title="error %", format="+.1f")])
    line = alt.Chart(pd.DataFrame({"measured_ms": [low, high], "predicted_ms": [low, high]})).mark_line(
        color="#888", strokeDash=[4, 3]).encode(x="measured_ms:Q", y="predicted_ms:Q")
    return alt.layer(line, points).properties(width=360, height=300, title="predicted vs measured step time")


class TrustPanel:
    """The validation record of every chosen GPU for the chosen stack (summary, scatter, rows; the H200's where a
    GPU has none, said so), then the published rows of the model's family on those GPUs."""

    def __init__(self):
        self.summary = html_box("wb-trust-summary")
        self.view = chart_view("wb-chart-trust")
        self.table = html_box("wb-trust-table")
        self.published = html_box("wb-published")
        self.published_table = html_box("wb-published-table")
        self.box = w.VBox([self.summary, self.view, self.table, self.published, self.published_table])

    def draw(self, context: PanelContext) -> None:
        self._draw_measured(context)
        self._draw_published(context)

    def _draw_measured(self, context: PanelContext) -> None:
        parts, rows, frames = [], [], []
        for gpu, trust, record in trust_records(context.comparison):
            parts.append(f"<li><b>{html.escape(gpu)}</b>: "
                         f"{html.escape(uncertainty_text(trust, context.state.gpu_count))}</li>")
            if record is not None:
                rows += validation_rows(record)
                frames.append(validation_frame(record))
                parts.append(f"<li style='list-style:none'><i>{html.escape(record_summary(record))}</i></li>")
        self.summary.value = (
            f"<p><b>How far to trust this</b>: {html.escape(context.stack_label())}. Each measured run below is "
            "predicted now with the current model (<code>workbench.validation</code>, record in "
            "<code>specs/validation/</code>); errors are predicted / measured - 1; the ± is the mean over the runs "
            "counted (test and held-out runs the stack's tables cover).</p><ul>" + "".join(parts) + "</ul>")
        self.table.value = (html_table(rows, long_columns=("source",)) if rows
                            else "<i>no measured runs for this stack</i>")
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        self.view.layout.display = None if not frame.empty else "none"
        if not frame.empty:
            self.view.chart = trust_chart(frame)

    def _draw_published(self, context: PanelContext) -> None:
        state = context.state
        head = ("<p><b>Published results</b> (vendor, framework and MLPerf tables; "
                "<code>benchmarks/results/published/EVALUATION.md</code>): each row as the published-tables "
                "evaluation predicted it (spec-only, nothing fitted; <code>workbench.published</code>), error = "
                "predicted / published - 1 in the row's own metric.")
        if not context.catalog_model:
            self.published.value = head + " Your model is not in the published tables.</p>"
            self.published_table.value = ""
            return
        family = model_family(state.model)
        lines = [published_summary(g, family, state.stack) for g in state.gpus]
        rows = [r for g in state.gpus for r in published_rows_for(g, family)]
        self.published.value = (head + f" Rows of the {html.escape(family)} family on the chosen GPUs:</p><ul>"
                                + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
        table = published_table(list(dict.fromkeys(rows)))
        self.published_table.value = (html_table(table, css_class="wb-table wb-published", long_columns=_PUBLISHED_TEXT)
                                      if rows else "<i>no published rows for this model family on these GPUs</i>")
