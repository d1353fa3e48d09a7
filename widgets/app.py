"""``Workbench()``: the notebook app. Controls on top, five tabs (Roofline, Step time, Memory, Kernels, Recipe).

State is one ``WorkbenchState``, readable and settable from Python so a notebook, a test or a teacher can drive
the app:

    >>> wb = Workbench(model="llama3-70b", gpus=["b200", "mi350x"])
    >>> wb.set(precision="fp8", gpus=["b200", "mi350x", "h200"])   # validated, one redraw
    >>> wb.set(stack="torchtitan", compile=True)                     # what every tab's prediction is for
    >>> wb.set(gpu_count=16, tp=2, pp=2, sharding="fsdp", global_batch=0)  # GPUs = dp x tp x pp; 0: auto batch
    >>> wb.state["gpus"], wb.precision                               # a dict, and traitlets per field
    >>> wb.show_op("b200", "gate_up.fwd")                            # what a click on a roofline point shows
    >>> wb.save_chart("roofline", "roofline.svg")                    # PNG or SVG, offline (vl-convert)
    >>> wb.load_trace("run.json.gz", steps=2)                        # a profiler trace of this configuration
    >>> wb.calibrate_from_trace()                                    # its stack profile, in the user's folder

Every step time, tokens/s and MFU carries its uncertainty from the validation record (``workbench.validation``);
the "How far to trust this" tab shows that record's runs, predicted vs measured. A loaded profiler trace
(``widgets.trace_panel``) puts its kernels per op class on the roofline and beside the prediction in the Step time
tab, for the configuration it was loaded with (stale, and said so, after a change). Only the active tab redraws on a change; the others redraw when opened. Charts are ``alt.JupyterChart``
widgets with the JavaScript bundled offline (``JupyterChart.enable_offline``), so they render without a CDN
in JupyterLab, Notebook 7 and VS Code.

From Python, bad input raises ``WorkbenchError``; from the UI (a control, a tab, a click, a button, a pasted or
uploaded config.json) it ends in a status line instead, and so does any unexpected exception, as "internal
error: ..." with its traceback logged (``widgets.controls.shown_errors``): the UI never fails silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import re
import time
from functools import partial
from pathlib import Path

import altair as alt
import ipywidgets as w
import pandas as pd
import traitlets

from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import Model, get_model, list_models
from widgets import charts
from widgets.advice import advice_chart, advice_frame, advice_html, advice_prompt, advise_all
from widgets.controls import Controls, ModelInput, error_html, shown_errors
from widgets.data import (
    Comparison, Predictor, memory_by_checkpointing, op_detail, roofline_note, roofline_points, roofs,
    step_breakdown,
)
from widgets.formatting import gb, html_table, prediction_stack_label, stack_label, uncertainty_text
from widgets.kernels_tab import KernelsPanel
from widgets.live import LiveChart
from widgets.recipe_tab import RecipePanel
from widgets.state import TAB_TITLES, TABS, WorkbenchState
from widgets.trace_panel import TracePanel
from widgets.tables import (
    configuration_text, memory_table, op_detail_html, record_summary, stack_caption, summary_table, summary_text,
    trust_records, validation_frame, validation_rows,
)

FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(WorkbenchState))
CHART_TABS: tuple[str, ...] = ("roofline", "step time", "memory", "kernels")
_offline_enabled = False


def _enable_offline() -> None:
    """Bundle the Vega JavaScript into the JupyterChart widget (no CDN); done once per kernel."""
    global _offline_enabled
    if not _offline_enabled:
        alt.JupyterChart.enable_offline()
        _offline_enabled = True


_STYLE = """<style>
.wb-table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
.wb-table th, .wb-table td { padding: 2px 10px; text-align: right; vertical-align: top; }
.wb-table th:first-child, .wb-table td:first-child { text-align: left; }
.wb-table tr:nth-child(even) { background: #f4f4f4; }
.wb-table td.wb-num { white-space: nowrap; }
</style>"""


def _chart_view() -> alt.JupyterChart:
    """An empty chart widget. SVG rather than canvas: marks stay in the DOM (sharp when zoomed, accessible, and
    countable by the browser test)."""
    return alt.JupyterChart(alt.Chart(pd.DataFrame({"x": []})).mark_point(),
                            embed_options={"renderer": "svg", "actions": False})


class Workbench(w.VBox):
    """The co-design workbench widget; see the module docstring. Keyword arguments are ``WorkbenchState``
    fields (model, gpus, precision, micro_batch, seq_len, gpu_count, tp, pp, ep, cp, virtual_stages, sharding,
    global_batch, lora_rank, checkpointing, calibrated, stack, compile, tab)."""

    model = traitlets.Unicode()
    gpus = traitlets.List(traitlets.Unicode())
    precision = traitlets.Unicode()
    micro_batch = traitlets.Int()
    seq_len = traitlets.Int()
    gpu_count = traitlets.Int()
    tp = traitlets.Int()
    pp = traitlets.Int()
    ep = traitlets.Int()
    cp = traitlets.Int()
    virtual_stages = traitlets.Int()
    sharding = traitlets.Unicode()
    global_batch = traitlets.Int()
    lora_rank = traitlets.Int()
    checkpointing = traitlets.Unicode()
    calibrated = traitlets.Bool()
    stack = traitlets.Unicode()
    compile = traitlets.Bool()
    tab = traitlets.Unicode()

    def __init__(self, **state):
        _enable_offline()
        self._custom: dict[str, Model] = {}
        self._state = WorkbenchState().replace(self._custom, **state)
        self._predictor = Predictor()
        self._muted = False
        self._dirty: set[str] = set(TABS)
        self.comparison: Comparison | None = None
        self.selected_op: dict | None = None
        self.last_redraw_s = 0.0
        """Seconds the last state change took to predict and redraw the active tab (benchmarks read it)."""

        self.controls = Controls(self._state, self._custom)
        self.model_input = ModelInput(self.add_model)
        self.status = w.HTML()
        self.status.add_class("wb-status")
        self.views = {name: _chart_view() for name in CHART_TABS}
        for name, view in self.views.items():
            view.add_class(f"wb-chart-{name.replace(' ', '-')}")
        self.live = {"roofline": LiveChart(self.views["roofline"], charts.roofline_chart),
                     "step time": LiveChart(self.views["step time"], charts.step_chart),
                     "memory": LiveChart(self.views["memory"], charts.memory_chart)}
        """The chart tabs drawn from data frames (see ``widgets.live``)."""
        self.roofline_notes, self.op_info = w.HTML(), w.HTML("<i>Click a point to see its op.</i>")
        self.op_info.add_class("wb-op-detail")
        self.step_caption, self.step_table, self.advice = w.HTML(), w.HTML(), w.HTML()
        self.fit_button = w.Button(description="Use the nearest configuration that fits", icon="compress",
                                   layout=w.Layout(width="320px", display="none"))
        self.fit_button.add_class("wb-use-fit")
        self.fit_button.on_click(lambda _: self._use_fit_from_button())
        self.trust_summary, self.trust_table, self.trust_view = w.HTML(), w.HTML(), _chart_view()
        self.trust_summary.add_class("wb-trust-summary")
        self.trust_table.add_class("wb-trust-table")
        self.trust_view.add_class("wb-chart-trust")
        self.step_caption.add_class("wb-stack-caption")
        self.step_table.add_class("wb-summary")
        self.advice.add_class("wb-advice")
        self.advice_button = w.Button(description="Compare direct port vs co-designed", icon="exchange",
                                      layout=w.Layout(width="300px"))
        self.advice_button.on_click(lambda _: self._compare_from_button())
        self.advice_prompt = w.HTML()
        self.advice_view = _chart_view()
        self.advice_view.layout.display = "none"
        self.advices: dict[str, object] = {}
        """Target GPU -> ``workbench.recipe.advisor.Advice`` (or why none) of the last comparison."""
        self.memory_table, self.memory_note = w.HTML(), w.HTML()
        self.kernels = KernelsPanel(self._prediction_on, lambda: self.views["kernels"])
        self.recipe = RecipePanel()
        self.trace_panel = TracePanel(lambda: self._state, self._prediction_on, self._current_model,
                                      self._trace_changed, lambda changes: self.set(**changes))
        """The Step time tab's trace section (``load_trace``)."""
        self.tabs = w.Tab(children=[
            w.VBox([self.roofline_notes, self.views["roofline"], self.op_info]),
            w.VBox([self.step_caption, self.views["step time"], self.fit_button, self.step_table,
                    self.trace_panel.box, w.HBox([self.advice_button, self.advice_prompt]), self.advice_view,
                    self.advice]),
            w.VBox([self.views["memory"], self.memory_note, self.memory_table]),
            self.kernels.box,
            self.recipe.box,
            w.VBox([self.trust_summary, self.trust_view, self.trust_table]),
        ], titles=[TAB_TITLES[t] for t in TABS])
        self.save_format = w.Dropdown(options=list(charts.SAVE_FORMATS), value="png", layout=w.Layout(width="80px"))
        self.save_button = w.Button(description="Save chart", icon="image")
        self.save_link = w.HTML()
        self.save_button.on_click(lambda _: self._save_from_button())
        self.save_bar = w.HBox([self.save_format, self.save_button, self.save_link])
        """Shown only on tabs with a chart (``CHART_TABS``)."""

        super().__init__(children=[w.HTML(_STYLE), self.controls.box, self.model_input.box, self.status, self.tabs,
                                   self.save_bar])
        self.add_class("wb-workbench")
        for name, control in self.controls.by_field.items():
            control.observe(partial(self._on_control, name), names="value")
        self.tabs.observe(self._on_tab, names="selected_index")
        self._apply(self._state, force=True)

    # ------------------------------------------------------------------------------------------- state API

    @property
    def state(self) -> dict:
        """The current state as plain values (``WorkbenchState.as_dict``)."""
        return self._state.as_dict()

    def set(self, **changes) -> Workbench:
        """Change any state fields at once (validated; one redraw). Raises ``WorkbenchError`` on bad input."""
        self._apply(self._state.replace(self._custom, **changes))
        return self

    def add_model(self, model: Model | dict | str | Path, name: str | None = None) -> str:
        """Add a model from a Hugging Face config.json (path or dict) or a ``Model``, select it, return its name.
        Raises ``WorkbenchError`` on bad input, the workbench unchanged."""
        if not isinstance(model, (dict, str, Path)):
            built = model
        else:
            from workbench.models import from_hf_config

            built = from_hf_config(model, name)
        if built.name in {m.name for m in list_models()}:
            raise WorkbenchError(f"model name {built.name!r} is a catalog model's: give yours another name")
        replaced, before = self._custom.get(built.name), self._state
        self._custom[built.name] = built
        self.clear_cache()  # a model of the same name may have changed
        try:
            self.set(model=built.name)
        except BaseException:
            if self._state is before:  # not applied (its prediction failed): the workbench stays as it was
                if replaced is None:
                    del self._custom[built.name]
                else:
                    self._custom[built.name] = replaced
            raise
        return built.name

    def load_trace(self, path: str | Path, steps: int | None = None, *, gpu: str | None = None):
        """Load a ``torch.profiler`` chrome trace (``.json`` / ``.json.gz``, ``workbench.trace.load_trace``) as
        measured for the current configuration on ``gpu`` (default: the first chosen); ``steps``: the profiled
        steps, needed without ``ProfilerStep#`` annotations. Returns the ``workbench.trace.Trace``."""
        from workbench.trace import load_trace

        return self.trace_panel.load(load_trace(path, steps=steps), Path(path).name, gpu)

    def calibrate_from_trace(self, *, overwrite: bool = False):
        """What "Calibrate from this trace" does: fit the stack's profile on the loaded trace and write it into the
        user's folder (an existing one only with ``overwrite``); returns the ``TraceFit``, None when kept."""
        return self.trace_panel.calibrate(overwrite=overwrite)

    def _trace_changed(self, recalibrated: bool) -> None:
        if recalibrated:  # a stack profile was written: calibrated predictions change
            self.clear_cache()
            self._apply(self._state, force=True)
            return
        self.trace_panel.refresh()  # in place: a redraw of the Step time tab would clear the advisor's result
        self._dirty.add("roofline")
        self._draw(self._state.tab)

    def _current_model(self) -> Model:
        return self._custom.get(self._state.model) or get_model(self._state.model)

    def clear_cache(self) -> None:
        """Forget remembered predictions (the next change predicts every GPU again; benchmarks use it)."""
        self._predictor = Predictor()

    @contextlib.contextmanager
    def _mute(self):
        self._muted, was = True, self._muted
        try:
            yield
        finally:
            self._muted = was

    def _apply(self, new: WorkbenchState, *, force: bool = False) -> None:
        """Predict for ``new`` (the main refresh), then make it the state and draw the active tab. A prediction
        that raises leaves the state as it was; per-GPU errors go to the status line."""
        start = time.perf_counter()
        changed = force or dataclasses.replace(self._state, tab=new.tab) != new
        comparison = self._predictor.compare(new, self._custom) if changed else self.comparison
        self._state = new
        with self._mute():
            for name in FIELDS:
                value = getattr(new, name)
                setattr(self, name, list(value) if name == "gpus" else value)
            self.controls.show(new, self._custom)
            self.tabs.selected_index = TABS.index(new.tab)
        self.save_bar.layout.display = None if new.tab in CHART_TABS else "none"
        if changed:
            self.comparison = comparison
            self._dirty = set(TABS)
            self.status.value = "".join(f"<div style='color:#b00'>{html.escape(get_gpu(g).display_name)}: "
                                        f"{html.escape(e)}</div>" for g, e in self.comparison.errors.items())
        self._draw(new.tab)
        self.last_redraw_s = time.perf_counter() - start

    @traitlets.observe(*FIELDS)
    def _on_trait(self, change) -> None:
        if self._muted:
            return
        try:
            self.set(**{change["name"]: change["new"]})
        except Exception:
            with self._mute():
                setattr(self, change["name"], change["old"])
            raise

    # Widget callbacks (these, the save button's, the model input's) are the UI's outermost boundary: whatever
    # goes wrong ends in a status line (``shown_errors``), and the controls go back to the state that holds.

    def _show_error(self, message: str) -> None:
        self.status.value = error_html(message)

    def _on_control(self, name: str, change) -> None:
        if self._muted:
            return
        with shown_errors(self._show_error) as outcome:
            self.set(**{name: change["new"]})
        if outcome.failed:
            with self._mute():
                self.controls.show(self._state, self._custom)

    def _on_tab(self, change) -> None:
        if self._muted or change["new"] is None:
            return
        with shown_errors(self._show_error) as outcome:
            self.set(tab=TABS[change["new"]])
        if outcome.failed:
            with self._mute():
                self.tabs.selected_index = TABS.index(self._state.tab)

    def _on_select(self, change) -> None:
        value = change["new"].value
        if value:
            with shown_errors(self._show_error):
                self.show_op(value[0]["gpu"], value[0]["op"])

    def _compare_from_button(self) -> None:
        with shown_errors(self._show_error):
            self.compare_port()

    def _prediction_on(self, gpu: str):
        return self._predictor.one(self._custom.get(self._state.model) or self._state.model, gpu, self._state)

    # ------------------------------------------------------------------------------------------- drawing

    def _draw(self, tab: str) -> None:
        if tab not in self._dirty:
            return
        self._dirty.discard(tab)
        {"roofline": self._draw_roofline, "step time": self._draw_step, "memory": self._draw_memory,
         "kernels": self._draw_kernels, "recipe": self._draw_recipe, "trust": self._draw_trust}[tab]()

    def _stack_label(self) -> str:
        return stack_label(self._state.stack, self._state.compile)

    def _settings_line(self) -> str:
        s = self._state
        model = self._custom.get(s.model) or get_model(s.model)
        return (f"{getattr(model, 'display_name', None) or s.model}, {s.precision}, {s.seq_len:,} tokens per sample, "
                f"activation checkpointing {s.checkpointing}; per GPU type: {configuration_text(s, model)}")

    def _names(self) -> list[str]:
        return [p.gpu.display_name for p in self.comparison.predictions.values()]

    def _draw_roofline(self) -> None:
        predictions = list(self.comparison.predictions.values())
        if not predictions:  # every GPU refused the configuration: the status line says why
            self.roofline_notes.value = "<i>no GPU could be predicted (see the messages above)</i>"
            self.views["roofline"].layout.display = "none"  # not the previous configuration's chart
            return
        self.views["roofline"].layout.display = None
        first = self.live["roofline"].frame is None
        points = [roofline_points(p) for p in predictions]
        if (measured := self.trace_panel.points()) is not None and not measured.empty:
            points.append(measured)
        self.live["roofline"].show(charts.roofline_frame(points,
                                                         [roofs(p) for p in predictions], self._names()),
                                   title=[f"Roofline of the predicted step, op by op: {self._stack_label()}",
                                          self._settings_line()])
        if first:  # the selection traits exist from the first chart on (the structure never changes)
            self.views["roofline"].selections.observe(self._on_select, names=[charts.OP_SELECTION])
        uncalibrated = [p.gpu.display_name for p in predictions if not p.calibrated]
        notes = [note for g, p in self.comparison.predictions.items()
                 if (note := roofline_note(p, self.comparison.fit.get(g)))]
        if self._state.calibrated and uncalibrated:
            notes.append(f"no calibration profile (spec constants): {', '.join(uncalibrated)}")
        if trace_note := self.trace_panel.roofline_note():
            notes.append(trace_note)
        self.roofline_notes.value = "<br>".join(html.escape(n) for n in notes)
        self.selected_op = None
        self.op_info.value = "<i>Click a point to see its op (double-click clears).</i>"

    def show_op(self, gpu: str, op: str) -> dict:
        """Show (and return) the model's detail for one op on one GPU (catalog or display name)."""
        by_name = {key: p for name, p in self.comparison.predictions.items() for key in (name, p.gpu.display_name)}
        if gpu not in by_name:
            gpu = get_gpu(gpu).name  # an alias; an unknown name raises with suggestions
        if gpu not in by_name:
            raise WorkbenchError(f"no prediction for GPU {gpu!r}; shown: {', '.join(self.comparison.predictions)}")
        detail = op_detail(by_name[gpu], op, self._state.compile)
        self.selected_op = detail
        self.op_info.value = op_detail_html(detail)
        return detail

    def _draw_step(self) -> None:
        self.live["step time"].show(step_breakdown(self.comparison),
                                    title=[f"Predicted step time: {self._stack_label()}", self._settings_line()])
        self.step_caption.value = f"<b>{html.escape(stack_caption(self.comparison))}</b>"
        self.step_table.value = html_table(summary_table(self.comparison))
        self.trace_panel.refresh()
        offers = [f for f in self.comparison.fit.values() if f.changes]
        self.fit_button.layout.display = None if offers else "none"
        self.fit_button.tooltip = "; ".join(f.suggestion for f in offers)
        self.advice_prompt.value = advice_prompt(self._state)
        self.advice_button.disabled = len(self._state.gpus) < 2
        self.advices = {}
        self.advice.value = ""
        self.advice_view.layout.display = "none"

    def use_fit(self) -> dict:
        """Apply the first non-fitting GPU's nearest fitting configuration (what the Step time tab offers); returns
        the changes applied, {} when every GPU fits."""
        for problem in self.comparison.fit.values():
            if problem.changes:
                self.set(**problem.changes)
                return dict(problem.changes)
        return {}

    def _use_fit_from_button(self) -> None:
        with shown_errors(self._show_error):
            self.use_fit()

    def _draw_trust(self) -> None:
        """The validation record of every chosen GPU for the chosen stack: summary, scatter and rows (the H200's
        where a GPU has none, said so); published-table rows are the next section."""
        parts, rows, frames = [], [], []
        for gpu, trust, record in trust_records(self.comparison):
            parts.append(f"<li><b>{html.escape(gpu)}</b>: {html.escape(uncertainty_text(trust, self._state.gpu_count))}"
                         "</li>")
            if record is not None:
                rows += validation_rows(record)
                frames.append(validation_frame(record))
                parts.append(f"<li style='list-style:none'><i>{html.escape(record_summary(record))}</i></li>")
        self.trust_summary.value = (
            f"<p><b>How far to trust this</b>: {html.escape(self._stack_label())}. Each measured run below is "
            "predicted now with the current model (<code>workbench.validation</code>, record in "
            "<code>specs/validation/</code>); errors are predicted / measured - 1; the ± is the mean over the runs "
            "counted (test and held-out runs the stack's tables cover).</p><ul>" + "".join(parts) + "</ul>"
            "<p class='wb-published'><b>Published results</b> (vendor and MLPerf tables): not in the record yet; "
            "their evaluation will be listed here.</p>")
        self.trust_table.value = html_table(rows) if rows else "<i>no measured runs for this stack</i>"
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        self.trust_view.layout.display = None if not frame.empty else "none"
        if not frame.empty:
            self.trust_view.chart = _trust_chart(frame)

    def compare_port(self) -> dict[str, object]:
        """Run the advisor: the first GPU's best recipe ported to each other GPU vs the co-designed recipe there
        (shown in the Step time tab); returns target GPU -> ``Advice`` or the reason there is none."""
        start = time.perf_counter()
        self.advices = advise_all(self._state, self._custom)
        frame = advice_frame(self.advices)
        if not frame.empty:
            self.advice_view.chart = advice_chart(frame, self._state.gpus[0])
            self.advice_view.layout.display = None
        self.advice.value = (advice_html(self.advices, self._state.gpus[0], self._state)
                             + f"<p><i>advisor: {time.perf_counter() - start:.2f} s</i></p>")
        return self.advices

    def _draw_memory(self) -> None:
        frames = [memory_by_checkpointing(p).assign(gpu_order=i) for i, p in enumerate(self.comparison.predictions.values())]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if frame.empty:
            self.memory_table.value = "<i>no prediction</i>"
            return
        self.live["memory"].show(frame, title=["Memory per GPU by activation checkpointing (the workbench memory "
                                               "model, workbench.memory)", self._settings_line()])
        self.memory_table.value = html_table(memory_table(frame))
        self.memory_note.value = "<br>".join(
            html.escape(f"{p.gpu.display_name}, as the Step time tab predicts it "
                        f"({prediction_stack_label(p, self._state.compile)}, activation checkpointing: "
                        f"{self._state.checkpointing}): {gb(p.summary.memory.total)} per GPU of "
                        f"{gb(p.summary.memory.usable)} usable")
            for p in self.comparison.predictions.values())

    def _draw_kernels(self) -> None:
        if self.kernels.check() and self.kernels.results is not None:
            self.kernels.show(self.kernels.results)

    def _draw_recipe(self) -> None:
        self.recipe.refresh(self._state, self.comparison.predictions, catalog_model=self._state.model not in self._custom)

    # ------------------------------------------------------------------------------------------- files

    def save_chart(self, name: str, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write a tab's chart (roofline, step time, memory, kernels) as PNG or SVG by the path's suffix,
        offline through vl-convert; atomic, and an existing file is kept unless ``overwrite``."""
        if name not in CHART_TABS:
            raise WorkbenchError(f"no chart {name!r}; charts: {', '.join(CHART_TABS)}")
        self._draw(name)
        chart = self.kernels.chart if name == "kernels" else (
            self.live[name].chart() if self.live[name].frame is not None else None)
        if chart is None:
            raise WorkbenchError(f"the {name} tab has no chart yet" + (" (run a benchmark first)" if name == "kernels" else ""))
        return charts.save(chart, path, overwrite=overwrite)

    def export_recipe(self, path: str | Path, *, gpu: str | None = None, format: str = "yaml",
                      kind: str = "searched", overwrite: bool = False) -> Path | None:
        """What the Recipe tab's Export button does, from Python: write the recipe for ``gpu`` (default: the
        first GPU) in ``format``, the fastest that fits (``kind="searched"``) or the current settings
        (``"current"``); returns the path, or None with the reason in the tab's message."""
        self._draw("recipe")
        if gpu is not None:
            self.recipe.gpu.value = get_gpu(gpu).name
        if kind not in ("searched", "current"):
            raise WorkbenchError(f"recipe kind {kind!r}: expected 'searched' or 'current'")
        self.recipe.kind.value = kind
        self.recipe.format.value = format
        return self.recipe.export(path, overwrite=overwrite)

    def _save_from_button(self) -> None:
        tab = self._state.tab
        if tab not in CHART_TABS:
            self.save_link.value = "<i>this tab has no chart</i>"
            return

        def show(message: str) -> None:
            self.save_link.value = error_html(message)

        with shown_errors(show):
            # a model name from a config.json may hold anything ("/", "..", HTML): file names get the safe part
            stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{self._state.model}-{tab.replace(' ', '-')}").lstrip(".")
            n = 1
            while (path := Path("charts") / f"{stem}-{n}.{self.save_format.value}").exists():
                n += 1  # never overwrite an earlier save
            try:
                written = self.save_chart(tab, path)
            except (OSError, ValueError) as exc:  # a folder we may not write, a format vl-convert refused
                show(str(exc))
                return
            self.save_link.value = f"saved <code>{html.escape(str(written))}</code> · " + _binary_link(written)

    # ------------------------------------------------------------------------------------------- text

    def summary(self) -> str:
        """The prediction summary as text (also the widget's plain-text representation)."""
        return summary_text(self.comparison)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.summary()
        return bundle

    def __repr__(self) -> str:
        return self.summary()


def _trust_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Predicted against measured step time per run (log-log), with the line where they agree. (A small chart of
    this tab's own; it can move to ``widgets.charts``.)"""
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


def _binary_link(path: Path) -> str:
    import base64

    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    payload = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f"<a class='wb-download' download='{html.escape(path.name)}' href='data:{mime};base64,{payload}'>"
            f"download {html.escape(path.name)}</a>")
