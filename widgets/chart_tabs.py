"""The chart tabs: Roofline (op by op, measured trace points beside), Step time (the breakdown, what does not fit
and the nearest configuration that does, the trace's op classes, the advisor) and Memory (by checkpointing).

Each panel draws from a ``widgets.panels.PanelContext`` through a ``LiveChart`` (``widgets.live``: the chart's
structure validated once, only the data sent on a redraw).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as w
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from widgets import charts
from widgets.advisor_panel import AdvisorPanel
from widgets.data import memory_by_checkpointing, op_detail, roofline_note, roofline_points, roofs, step_breakdown
from widgets.formatting import gb, html_table, prediction_stack_label
from widgets.live import LiveChart
from widgets.panels import PanelContext, chart_view, html_box
from widgets.tables import memory_table, op_detail_html, stack_caption, summary_html
from widgets.trace_panel import TracePanel

_CLICK_HINT = "<i>Click a point to see its op (double-click clears).</i>"


class RooflinePanel:
    """Every chosen GPU's roofline with the predicted step's ops (and a loaded trace's measured op classes); a click
    on a point shows that op's detail (``show_op``)."""

    def __init__(self, trace: TracePanel, on_select: Callable[[dict], None]):
        self.trace, self.on_select = trace, on_select
        self.notes = w.HTML()
        self.view = chart_view("wb-chart-roofline")
        self.live = LiveChart(self.view, charts.roofline_chart)
        self.op_info = html_box("wb-op-detail", "<i>Click a point to see its op.</i>")
        self.selected_op: dict | None = None
        """The detail of the op last shown (``show_op``), None after a redraw."""
        self.box = w.VBox([self.notes, self.view, self.op_info])

    def draw(self, context: PanelContext) -> None:
        comparison = context.comparison
        predictions = list(comparison.predictions.values())
        if not predictions:  # every GPU refused the configuration: the status line says why
            self.notes.value = "<i>no GPU could be predicted (see the messages above)</i>"
            self.view.layout.display = "none"  # not the previous configuration's chart
            return
        self.view.layout.display = None
        first = self.live.frame is None
        points = [roofline_points(p) for p in predictions]
        if (measured := self.trace.points()) is not None and not measured.empty:
            points.append(measured)
        self.live.show(charts.roofline_frame(points, [roofs(p) for p in predictions], context.gpu_names()),
                       title=[f"Roofline of the predicted step, op by op: {context.stack_label()}",
                              *context.settings_lines()])
        if first:  # the selection traits exist from the first chart on (the structure never changes)
            self.view.selections.observe(self.on_select, names=[charts.OP_SELECTION])
        uncalibrated = [p.gpu.display_name for p in predictions if not p.calibrated]
        notes = [note for g, p in comparison.predictions.items()
                 if (note := roofline_note(p, comparison.fit.get(g)))]
        if context.state.calibrated and uncalibrated:
            notes.append(f"no calibration profile (spec constants): {', '.join(uncalibrated)}")
        if trace_note := self.trace.roofline_note():
            notes.append(trace_note)
        self.notes.value = "<br>".join(html.escape(n) for n in notes)
        self.selected_op = None
        self.op_info.value = _CLICK_HINT

    def show_op(self, context: PanelContext, gpu: str, op: str) -> dict:
        """Show (and return) the model's detail for one op on one GPU (catalog or display name)."""
        predictions = context.comparison.predictions
        by_name = {key: p for name, p in predictions.items() for key in (name, p.gpu.display_name)}
        if gpu not in by_name:
            gpu = get_gpu(gpu).name  # an alias; an unknown name raises with suggestions
        if gpu not in by_name:
            raise WorkbenchError(f"no prediction for GPU {gpu!r}; shown: {', '.join(predictions)}")
        detail = op_detail(by_name[gpu], op, context.state.compile)
        self.selected_op = detail
        self.op_info.value = op_detail_html(detail)
        return detail


class StepPanel:
    """The predicted step per GPU (no bar for what does not fit, and a button for the nearest configuration that
    does), the summary table, the loaded trace's op classes and the advisor's direct port vs co-designed."""

    def __init__(self, trace: TracePanel, advisor: AdvisorPanel, on_use_fit: Callable[[], None]):
        self.trace, self.advisor = trace, advisor
        self.caption = html_box("wb-stack-caption")
        self.view = chart_view("wb-chart-step-time")
        self.live = LiveChart(self.view, charts.step_chart)
        self.fit_button = w.Button(description="Use the nearest configuration that fits", icon="compress",
                                   layout=w.Layout(width="320px", display="none"))
        self.fit_button.add_class("wb-use-fit")
        self.fit_button.on_click(lambda _: on_use_fit())
        self.table = html_box("wb-summary")
        self.box = w.VBox([self.caption, self.view, self.fit_button, self.table, trace.box, *advisor.parts])

    def draw(self, context: PanelContext) -> None:
        comparison = context.comparison
        self.live.show(step_breakdown(comparison),
                       title=[f"Predicted step time: {context.stack_label()}", *context.settings_lines()])
        self.caption.value = f"<b>{html.escape(stack_caption(comparison))}</b>"
        self.table.value = summary_html(comparison)
        self.trace.refresh()
        offers = [f for f in comparison.fit.values() if f.changes]
        self.fit_button.layout.display = None if offers else "none"
        self.fit_button.tooltip = "; ".join(f.suggestion for f in offers)
        self.advisor.reset(context.state)


class MemoryPanel:
    """Memory per GPU under each activation checkpointing mode, and what the Step time tab's prediction takes."""

    def __init__(self):
        self.view = chart_view("wb-chart-memory")
        self.live = LiveChart(self.view, charts.memory_chart)
        self.note, self.table = w.HTML(), w.HTML()
        self.box = w.VBox([self.view, self.note, self.table])

    def draw(self, context: PanelContext) -> None:
        predictions = context.comparison.predictions
        frames = [memory_by_checkpointing(p).assign(gpu_order=i) for i, p in enumerate(predictions.values())]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if frame.empty:
            self.table.value = "<i>no prediction</i>"
            return
        self.live.show(frame, title=["Memory per GPU by activation checkpointing (the workbench memory model, "
                                     "workbench.memory)", *context.settings_lines()])
        self.table.value = html_table(memory_table(frame))
        s = context.state
        self.note.value = "<br>".join(
            html.escape(f"{p.gpu.display_name}, as the Step time tab predicts it "
                        f"({prediction_stack_label(p, s.compile)}, activation checkpointing: "
                        f"{s.checkpointing}): {gb(p.summary.memory.total)} per GPU of "
                        f"{gb(p.summary.memory.usable)} usable")
            for p in predictions.values())
