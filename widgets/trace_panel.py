"""The Step time tab's trace section: load a ``torch.profiler`` trace of the current configuration, see its kernels
per op class beside the prediction, and calibrate the stack from it.

    >>> wb.load_trace("run.json.gz", steps=2)          # or the section's upload (.json / .json.gz)
    >>> wb.trace_panel.rows                             # workbench.trace.class_table of the trace and prediction
    >>> wb.calibrate_from_trace()                       # the button: writes the user's stack profile

The trace is for the configuration the state had when it was loaded (``widgets.trace_data.TRACE_FIELDS``, on one
chosen GPU); when the state changes away from it the section says it is stale, keeps it, and offers the way back.
Reading goes through ``workbench.trace`` (bounded, gzip by its magic bytes), the fit and the write through
``workbench.stack_calibration`` (the user's folder, never the package; an existing profile is replaced only after
a second, explicit click). Nothing here computes a time: it shows the core's.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping

import ipywidgets as w
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.fileio import OutputExistsError
from workbench.hardware import get_gpu
from workbench.models import Model
from workbench.predict import Prediction
from workbench.stack_calibration import TraceFit, describe, fit_trace, user_stack_profile_path, write_stack_profile
from workbench.stacks import get_stack
from workbench.trace import ClassTime, Trace, class_table, trace_from_bytes
from widgets.controls import error_html, shown_errors
from widgets.formatting import html_table
from widgets.state import WorkbenchState, training_config
from widgets.trace_data import (
    TraceContext, calibration_warning, class_rows, configuration_words, default_trace_gpu, trace_points,
    trace_warnings,
)

UNKNOWN_SHOWN = 10
_HINT = ("<p><b>Measured ops beside predicted</b>: load a <code>torch.profiler</code> chrome trace "
         "(<code>prof.export_chrome_trace(\"run.json\")</code>, or its <code>.json.gz</code>) of a run of the "
         "configuration above; its kernels appear per op class on the roofline (hollow diamonds, "
         "\"measured (trace)\") and in the table below. Give the number of profiled steps when the trace has no "
         "<code>ProfilerStep#</code> annotations.</p>")


class TracePanel:
    """The trace section (``box``). ``state``, ``prediction`` (GPU -> ``Prediction`` or why none), ``model``: the
    workbench's current ones; ``changed(recalibrated)`` redraws what shows the trace (``recalibrated``: a profile
    was written, so calibrated predictions change); ``restore(changes)`` sets the state."""

    def __init__(self, state: Callable[[], WorkbenchState], prediction: Callable[[str], Prediction | str],
                 model: Callable[[], Model], changed: Callable[[bool], None],
                 restore: Callable[[Mapping[str, object]], None]):
        self._state, self._prediction, self._model = state, prediction, model
        self._changed, self._restore = changed, restore
        self.context: TraceContext | None = None
        self.rows: list[ClassTime] = []
        """``class_table(trace, prediction)`` of the trace and the current prediction (empty while stale)."""
        self.fit: TraceFit | None = None
        """The last calibration written from this trace."""
        self.profile_path: str = ""

        self.upload = w.FileUpload(accept=".json,.gz", multiple=False, description="load trace",
                                   tooltip="a torch.profiler chrome trace, .json or .json.gz")
        self.upload.add_class("wb-trace-upload")
        self.steps = w.BoundedIntText(value=0, min=0, max=100_000, description="profiled steps",
                                      tooltip="0: from the trace's ProfilerStep# annotations",
                                      style={"description_width": "initial"}, layout=w.Layout(width="170px"))
        self.steps.add_class("wb-trace-steps")
        self.gpu = w.Dropdown(description="on GPU", layout=w.Layout(width="360px"),  # "NVIDIA B200 (HGX ...)" uncut
                              tooltip="the chosen GPU the trace ran on")
        self.gpu.add_class("wb-trace-gpu")
        self.info, self.table, self.message = w.HTML(), w.HTML(), w.HTML()
        self.info.add_class("wb-trace-info")
        self.table.add_class("wb-trace-table")
        self.message.add_class("wb-trace-message")
        self.restore_button = w.Button(description="Back to the trace's configuration", icon="undo",
                                       layout=w.Layout(width="280px", display="none"))
        self.calibrate_button = w.Button(description="Calibrate from this trace", icon="sliders",
                                         layout=w.Layout(width="240px"), disabled=True)
        self.calibrate_button.add_class("wb-trace-calibrate")
        self.replace_button = w.Button(description="Replace the existing profile", icon="warning",
                                       button_style="warning", layout=w.Layout(width="260px", display="none"))
        self.replace_button.add_class("wb-trace-replace")
        self.warning = w.HTML()
        self.warning.add_class("wb-trace-warning")
        self.upload.observe(lambda change: self.add_upload(change["new"]), names="value")
        self.restore_button.on_click(lambda _: self._click(self.restore))
        self.calibrate_button.on_click(lambda _: self._click(self.calibrate))
        self.replace_button.on_click(lambda _: self._click(lambda: self.calibrate(overwrite=True)))
        self.box = w.VBox([w.HTML(_HINT), w.HBox([self.upload, self.steps, self.gpu]), self.info, self.restore_button,
                           self.table, w.HBox([self.calibrate_button, self.replace_button]), self.warning,
                           self.message])
        self.box.add_class("wb-trace")

    # ----------------------------------------------------------------------------------------------- loading

    def _show(self, message: str) -> None:
        self.message.value = error_html(message)

    def _click(self, action: Callable[[], object]) -> None:
        with shown_errors(self._show):
            action()

    def add_upload(self, files) -> None:
        """Read an uploaded trace (the FileUpload's value: a tuple of dicts with name and content). A file that
        cannot be read as a trace says why in the section's message line; the previous trace stays."""
        if not files:
            return  # cleared
        upload = files[0]
        name = str(upload.get("name") or "uploaded trace") if isinstance(upload, Mapping) else "uploaded trace"
        with shown_errors(self._show):
            content = upload.get("content") if isinstance(upload, Mapping) else None
            if content is None:
                raise WorkbenchError(f"{name}: the upload has no content: upload the file again")
            trace = trace_from_bytes(content, name, steps=self.steps.value or None)
            self.load(trace, name, self.gpu.value or None)
        self.upload.value = ()  # the same file can be uploaded again (after changing the steps)

    def load(self, trace: Trace, name: str = "", gpu: str | None = None) -> Trace:
        """Keep ``trace`` as measured for the current configuration on ``gpu`` (default: the first chosen)."""
        state = self._state()
        self.context = TraceContext(trace, default_trace_gpu(state, gpu), state, name or trace.origin)
        self.fit, self.profile_path = None, ""
        self.replace_button.layout.display = "none"
        self.message.value = ""
        self._changed(False)
        return trace

    # ----------------------------------------------------------------------------------------------- showing

    def stale_reason(self) -> str:
        return self.context.stale_reason(self._state()) if self.context else ""

    def current(self) -> tuple[TraceContext, Prediction] | None:
        """The trace and the prediction of its configuration, while the state is that configuration."""
        ctx = self.context
        if ctx is None or ctx.stale_reason(self._state()):
            return None
        prediction = self._prediction(ctx.gpu)
        return None if isinstance(prediction, str) else (ctx, prediction)

    def points(self) -> pd.DataFrame | None:
        """The roofline's measured points (``trace_points``), or None without a trace that matches."""
        now = self.current()
        if now is None:
            return None
        ctx, prediction = now
        return trace_points(class_table(ctx.trace, prediction), prediction, ctx.name)

    def roofline_note(self) -> str:
        """What the roofline says of the trace (plain text), "" without one."""
        ctx = self.context
        if ctx is None:
            return ""
        gpu = get_gpu(ctx.gpu).display_name
        if reason := self.stale_reason():
            return (f"trace {ctx.name} is stale (the configuration changed: {reason}): its measured points are "
                    "hidden; the Step time tab offers the way back")
        return (f"measured (trace) diamonds: {ctx.name} on the {gpu}, kernel time per op class at the predicted "
                "class's FLOPs and bytes (copies, casts and collectives have no FLOPs and no point)")

    def refresh(self) -> None:
        """Redraw the section for the current state (the Step time tab calls it on every redraw)."""
        state = self._state()
        names = [(get_gpu(g).display_name, g) for g in state.gpus]
        if list(self.gpu.options) != names:
            self.gpu.options = names
        if self.gpu.value not in state.gpus:  # shown, not blank: what a load without a choice takes
            self.gpu.value = state.gpus[0]
        ctx = self.context
        self.warning.value = ""
        if ctx is None:
            self.rows, self.info.value, self.table.value = [], "<i>no trace loaded</i>", ""
            self.calibrate_button.disabled, self.restore_button.layout.display = True, "none"
            return
        if ctx.gpu in state.gpus:
            self.gpu.value = ctx.gpu
        t = ctx.trace
        head = (f"<b>Trace</b> <code>{html.escape(ctx.name)}</code> ({t.steps} step{'s' if t.steps != 1 else ''}, "
                f"{html.escape(t.steps_from)}{'; it ran on ' + html.escape(t.device) if t.device else ''}), "
                f"measured for: {html.escape(configuration_words(ctx, self._model_name(ctx.state)))}.")
        measured = (f"Measured step: {t.wall_ms_per_step:,.2f} ms wall per step (GPU busy {t.busy_ms_per_step:,.2f} "
                    f"ms, idle {t.idle_ms_per_step:,.2f} ms; kernels {t.kernel_ms_per_step:,.2f} ms).")
        reason = self.stale_reason()
        self.restore_button.layout.display = None if reason else "none"
        self.calibrate_button.disabled = bool(reason)
        if reason:
            self.rows = []
            self.info.value = (f"<p>{head}</p><p style='color:#b00'><b>Stale: the trace no longer matches the "
                               f"configuration</b> ({html.escape(reason)}). It is kept; its measured points are "
                               f"hidden until the configuration is the traced one again.</p><p>{measured}</p>")
            self.table.value = ""
            return
        prediction = self._prediction(ctx.gpu)
        if isinstance(prediction, str):
            self.rows = []
            self.info.value = f"<p>{head}</p><p style='color:#b00'>no prediction: {html.escape(prediction)}</p>"
            self.table.value = ""
            return
        self.rows = class_table(t, prediction)
        predicted = (f"Predicted step: {prediction.summary.step_time_s * 1e3:,.2f} ms "
                     f"({'calibrated' if prediction.calibrated else 'spec'} constants).")
        calibrated = ""
        if self.fit is not None:
            calibrated = (f" <b>Calibrated to this trace: {self.fit.calibrated_step_ms:,.2f} ms</b> (the profile "
                          f"<code>{html.escape(self.profile_path)}</code>, fitted on this configuration only).")
        warnings = "".join(f"<li>{html.escape(x)}</li>" for x in trace_warnings(self.rows, prediction))
        unknown = t.unknown_kernels
        listed = "".join(f"<li><code>{html.escape(n[:120])}</code>: {ms:,.3f} ms per step</li>"
                         for n, ms in unknown[:UNKNOWN_SHOWN])
        more = f"<li>... and {len(unknown) - UNKNOWN_SHOWN} more</li>" if len(unknown) > UNKNOWN_SHOWN else ""
        self.table.value = (html_table(class_rows(self.rows))
                            + (f"<p>Kernels no rule knows (class other): <ul>{listed}{more}</ul></p>" if unknown
                               else "<p>Every kernel of the trace has an op class (no unknown kernels).</p>"))
        self.warning.value = (f"<p style='color:#7a5c00'><b>Before calibrating</b>: {html.escape(calibration_warning())} "
                              "The calibrated step is calibrated to this trace; the profile then applies to every "
                              f"calibrated prediction of {html.escape(get_stack(state.stack).display_name)} on the "
                              f"{html.escape(get_gpu(ctx.gpu).display_name)} (delete the file to undo).</p>")
        # the info last: a page that sees it (its messages arrive in order) sees the table and the warning too
        self.info.value = (f"<p>{head}</p><p>{measured} {predicted}{calibrated}</p>"
                           + (f"<ul style='color:#7a5c00'>{warnings}</ul>" if warnings else ""))

    def _model_name(self, state: WorkbenchState) -> str:
        """The display name of ``state``'s model while it is the current one, else its name."""
        model = self._model()
        return (getattr(model, "display_name", None) or state.model) if model.name == state.model else state.model

    # ----------------------------------------------------------------------------------------------- actions

    def restore(self) -> None:
        """Set the state back to the trace's configuration (what the "Back to" button does)."""
        if self.context is not None:
            self._restore(self.context.restore(self._state()))

    def calibrate(self, *, overwrite: bool = False) -> TraceFit | None:
        """Fit the stack's profile on this trace (``workbench.stack_calibration.fit_trace``) and write it into the
        user's calibration folder. An existing profile is kept unless ``overwrite`` (the Replace button): then
        None, and the section says so. Raises ``WorkbenchError`` without a trace of the current configuration."""
        if self.context is None:
            raise WorkbenchError("no trace loaded: load a torch.profiler trace of this configuration first")
        if reason := self.stale_reason():
            raise WorkbenchError(f"the trace no longer matches the configuration ({reason}): go back to the "
                                 "trace's configuration to calibrate from it")
        ctx, state, model = self.context, self._state(), self._model()
        compile = state.compile if get_stack(state.stack).compile == "recipe" else None  # as the predictions
        fit = fit_trace(ctx.trace, model, ctx.gpu, training_config(state, model), stack=state.stack, compile=compile,
                        param_dtype=state.param_dtype)
        path = user_stack_profile_path(fit.profile.stack, get_gpu(ctx.gpu))
        try:
            written = write_stack_profile(fit.profile, path, overwrite=overwrite)
        except OutputExistsError:
            self.replace_button.layout.display = None
            self.message.value = (f"<span style='color:#b00'>a stack profile exists at <code>{html.escape(str(path))}"
                                  "</code>: press <b>Replace the existing profile</b> to overwrite it, or keep it.</span>")
            return None
        self.fit, self.profile_path = fit, written
        self.replace_button.layout.display = "none"
        lines = [line for line in describe(fit) if line.startswith("warning")]
        self.message.value = (f"wrote <code>{html.escape(written)}</code>: calibrated to this trace "
                              f"{fit.calibrated_step_ms:,.2f} ms per step (measured {fit.measured_wall_ms:,.2f} ms, "
                              f"predicted before {fit.predicted_step_ms:,.2f} ms with {fit.profile.base} constants). "
                              "Turn <i>calibrated</i> on to predict with it."
                              + "".join(f"<br><span style='color:#7a5c00'>{html.escape(x)}</span>" for x in lines))
        self._changed(True)
        return fit
