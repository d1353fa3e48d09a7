"""``Workbench()``: the notebook app. Controls on top, six tabs (Roofline, Step time, Memory, Kernels, Recipe, How
far to trust this).

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
    >>> wb.compare_port()            # the advisor: first GPU's best recipe ported vs co-designed, the controls held

Every step time, tokens/s and MFU carries its uncertainty from the validation record (``workbench.validation``);
the "How far to trust this" tab (``widgets.trust_tab``) shows that record's runs, predicted vs measured, and the
published results of the model's family on the chosen GPUs, predicted vs published. A loaded profiler trace
(``widgets.trace_panel``) puts its kernels per op class on the roofline and beside the prediction in the Step time
tab, for the configuration it was loaded with (stale, and said so, after a change).

Each tab is a panel (``widgets.panels``: a ``box`` and a ``draw(context)``): Roofline, Step time and Memory in
``widgets.chart_tabs`` (the Step time tab holds the trace section and the advisor, ``widgets.advisor_panel``),
Kernels in ``widgets.kernels_tab``, Recipe in ``widgets.recipe_tab``, trust in ``widgets.trust_tab``; the controls
are ``widgets.controls``. This module holds the state, the Python API and the wiring. Only the active tab redraws
on a change; the others redraw when opened. Charts are ``alt.JupyterChart`` widgets with the JavaScript bundled
offline (``JupyterChart.enable_offline``), so they render without a CDN in JupyterLab, Notebook 7 and VS Code.

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
import traitlets

from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import Model, get_model, list_models
from widgets import charts
from widgets.advisor_panel import AdvisorPanel
from widgets.chart_tabs import MemoryPanel, RooflinePanel, StepPanel
from widgets.controls import Controls, ModelInput, error_html, shown_errors
from widgets.data import Comparison, Predictor
from widgets.kernels_tab import KernelsPanel
from widgets.panels import Panel, PanelContext, chart_view
from widgets.recipe_tab import RecipePanel
from widgets.state import TAB_TITLES, TABS, WorkbenchState
from widgets.tables import summary_text
from widgets.trace_panel import TracePanel
from widgets.trust_tab import TrustPanel

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
.wb-table td.wb-long { text-align: left; overflow-wrap: anywhere; min-width: 9em; }
.wb-published td.wb-long { min-width: 4em; }
.wb-workbench .jupyter-widget-html > .jupyter-widget-html-content,
.wb-workbench .widget-html > .widget-html-content { line-height: 1.45; }
</style>"""
"""The workbench's CSS: tables in the tabs' text size, numbers kept on one line, long text columns (a file path,
a reason) allowed to break anywhere so they do not push the table sideways, and text at a reading line height
(JupyterLab sets an HTML widget's to the 28 px of a control, which spreads a wrapped sentence over the page)."""


class Workbench(w.VBox):
    """The co-design workbench widget; see the module docstring. Keyword arguments are ``WorkbenchState``
    fields (model, gpus, precision, micro_batch, seq_len, gpu_count, tp, pp, ep, cp, virtual_stages, sharding,
    global_batch, lora_rank, checkpointing, calibrated, stack, stack_chosen, compile, param_dtype, tab); a stack not
    given follows the model (its family's default) until one is chosen."""

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
    stack_chosen = traitlets.Bool()
    compile = traitlets.Bool()
    param_dtype = traitlets.Unicode()
    tab = traitlets.Unicode()

    def __init__(self, **state):
        _enable_offline()
        self._custom: dict[str, Model] = {}
        self._state = WorkbenchState().replace(self._custom, **state)
        self._predictor = Predictor()
        self._muted = False
        self._dirty: set[str] = set(TABS)
        self.comparison: Comparison | None = None
        self.last_redraw_s = 0.0
        """Seconds the last state change took to predict and redraw the active tab (benchmarks read it)."""

        self.controls = Controls(self._state, self._custom)
        self.model_input = ModelInput(self.add_model)
        self.status = w.HTML()
        self.status.add_class("wb-status")
        self.trace_panel = TracePanel(lambda: self._state, self._prediction_on, self._current_model,
                                      self._trace_changed, lambda changes: self.set(**changes))
        """The Step time tab's trace section (``load_trace``)."""
        self.advisor = AdvisorPanel(self._compare_from_button)
        self.roofline = RooflinePanel(self.trace_panel, self._on_select)
        self.step = StepPanel(self.trace_panel, self.advisor, self._use_fit_from_button)
        self.memory = MemoryPanel()
        kernels_view = chart_view("wb-chart-kernels")
        self.kernels = KernelsPanel(self._prediction_on, lambda: kernels_view, on_chart=self._show_save_bar)
        self.recipe = RecipePanel()
        self.trust = TrustPanel()
        self.panels: dict[str, Panel] = {"roofline": self.roofline, "step time": self.step, "memory": self.memory,
                                         "kernels": self.kernels, "recipe": self.recipe, "trust": self.trust}
        """One panel per tab (``widgets.panels``), in ``TABS`` order."""
        self.views = {"roofline": self.roofline.view, "step time": self.step.view, "memory": self.memory.view,
                      "kernels": kernels_view}
        self.live = {"roofline": self.roofline.live, "step time": self.step.live, "memory": self.memory.live}
        """The chart tabs drawn from data frames (see ``widgets.live``)."""
        # the panels' widgets by the names tests and notebooks have used
        self.roofline_notes, self.op_info = self.roofline.notes, self.roofline.op_info
        self.step_caption, self.step_table, self.fit_button = self.step.caption, self.step.table, self.step.fit_button
        self.advice_button, self.advice_prompt = self.advisor.button, self.advisor.prompt
        self.advice_view, self.advice = self.advisor.view, self.advisor.text
        self.memory_table, self.memory_note = self.memory.table, self.memory.note
        self.trust_summary, self.trust_table, self.trust_view = self.trust.summary, self.trust.table, self.trust.view
        self.tabs = w.Tab(children=[self.panels[t].box for t in TABS], titles=[TAB_TITLES[t] for t in TABS])
        self.save_format = w.Dropdown(options=list(charts.SAVE_FORMATS), value="png", layout=w.Layout(width="80px"))
        self.save_button = w.Button(description="Save chart", icon="image")
        self.save_link = w.HTML()
        self.save_button.on_click(lambda _: self._save_from_button())
        self.save_bar = w.HBox([self.save_format, self.save_button, self.save_link])
        """Shown only on a tab that has a chart (``CHART_TABS``; the Kernels tab once a benchmark drew one)."""

        super().__init__(children=[w.HTML(_STYLE), self.controls.box, self.model_input.box, self.status, self.tabs,
                                   self.save_bar])
        self.add_class("wb-workbench")
        for name, control in self.controls.by_field.items():
            control.observe(partial(self._on_control, name), names="value")
        self.tabs.observe(self._on_tab, names="selected_index")
        self._apply(self._state, force=True)

    @property
    def selected_op(self) -> dict | None:
        """The op detail a roofline click (or ``show_op``) showed last; None after a redraw."""
        return self.roofline.selected_op

    @property
    def advices(self) -> dict[str, object]:
        """Target GPU -> ``workbench.recipe.advisor.Advice`` (or why none) of the last comparison."""
        return self.advisor.advices

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
        if changed:
            self.comparison = comparison
            self._dirty = set(TABS)
            self.status.value = "".join(f"<div style='color:#b00'>{html.escape(get_gpu(g).display_name)}: "
                                        f"{html.escape(e)}</div>" for g, e in self.comparison.errors.items())
        self._draw(new.tab)
        self._show_save_bar()
        self.last_redraw_s = time.perf_counter() - start

    def _show_save_bar(self) -> None:
        """The save bar on a tab with a chart to save (the Kernels tab has one only after a benchmark)."""
        tab = self._state.tab
        shown = tab in CHART_TABS and (tab != "kernels" or self.kernels.chart is not None)
        self.save_bar.layout.display = None if shown else "none"

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

    def _context(self) -> PanelContext:
        return PanelContext(self._state, self.comparison, self._current_model(), self._custom)

    def _draw(self, tab: str) -> None:
        if tab not in self._dirty:
            return
        self._dirty.discard(tab)
        self.panels[tab].draw(self._context())

    def show_op(self, gpu: str, op: str) -> dict:
        """Show (and return) the model's detail for one op on one GPU (catalog or display name)."""
        return self.roofline.show_op(self._context(), gpu, op)

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

    def compare_port(self) -> dict[str, object]:
        """Run the advisor with the current controls: the first GPU's best recipe ported to each other GPU vs the
        co-designed recipe there (shown in the Step time tab); returns target GPU -> ``Advice`` or the reason there
        is none."""
        return self.advisor.compare(self._state, self._custom)

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



def _binary_link(path: Path) -> str:
    import base64

    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    payload = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f"<a class='wb-download' download='{html.escape(path.name)}' href='data:{mime};base64,{payload}'>"
            f"download {html.escape(path.name)}</a>")
