"""The Kernels tab: run the live kernel benchmark (``workbench.bench``) and put the measured kernels on the
predicted roofline. On a machine without a GPU the tab says why it is disabled, with ``detect_gpu``'s reason.

The GPU path is thin on purpose: ``run_suite`` does the work (cases, timing, cache, tqdm progress bar shown in
this tab's output), ``widgets.data.measured_points`` turns its rows into points, ``charts`` draws them.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import altair as alt
import ipywidgets as w
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.predict import Prediction
from widgets import charts
from widgets.data import measured_points, roofline_points, roofs


def parse_gemm_shapes(text: str) -> list[dict]:
    """"4096x4096x4096 bf16, 8192x1024x4096 fp8" -> [{m, n, k, dtype}, ...] (dtype bf16 when left out)."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        size, _, dtype = item.partition(" ")
        dims = size.lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise WorkbenchError(f"GEMM shape {item!r}: expected MxNxK with positive integers, e.g. 4096x4096x4096")
        dtype = dtype.strip() or "bf16"
        if dtype not in ("bf16", "fp16", "fp8"):
            raise WorkbenchError(f"GEMM shape {item!r}: dtype {dtype!r}, expected bf16, fp16 or fp8")
        shapes.append({"m": int(dims[0]), "n": int(dims[1]), "k": int(dims[2]), "dtype": dtype})
    return shapes


class KernelsPanel:
    """``box`` is the tab's content. ``predict_for(gpu_name)`` gives the current settings' prediction on the
    benchmarked GPU (for the predicted roofline under the measured points)."""

    def __init__(self, predict_for: Callable[[str], Prediction | str], chart_view: Callable[[], alt.JupyterChart],
                 on_chart: Callable[[], None] = lambda: None):
        self.predict_for = predict_for
        self.chart_view = chart_view
        self.on_chart = on_chart
        """Called once a benchmark's chart is drawn (the workbench shows its save bar)."""
        self.status = w.HTML()
        self.ops = w.SelectMultiple(description="kernels", rows=6)
        self.suite = w.ToggleButtons(options=["quick", "full"], value="quick", description="suite")
        self.use_cache = w.Checkbox(value=True, description="reuse cached results", indent=False)
        self.shapes = w.Text(description="GEMM shapes", placeholder="e.g. 4096x4096x4096 bf16, 8192x1024x4096 fp8 "
                             "(empty: the suite's)", layout=w.Layout(width="480px"))
        self.run_button = w.Button(description="Run benchmark", icon="play", button_style="primary")
        self.output = w.Output()
        self.run_button.on_click(lambda _: self.run())
        self.box = w.VBox([self.status])
        self.local = None
        self.results: pd.DataFrame | None = None
        self.chart: alt.TopLevelMixin | None = None
        self.checked = False

    def draw(self, context) -> None:
        """The tab opened or the settings changed (``widgets.panels.Panel``): check for a GPU, redraw the last
        results against the current prediction."""
        if self.check() and self.results is not None:
            self.show(self.results)

    def check(self) -> bool:
        """Detect the local GPU once (imports torch, hence not at start-up); True when benchmarks can run."""
        if self.checked:
            return self.local is not None
        from workbench.bench import KERNEL_MODULES, NoGPUError, detect_gpu

        self.checked = True
        try:
            self.local = detect_gpu()
        except NoGPUError as exc:
            self.status.value = (
                "<div class='wb-kernels-disabled'><b>Live benchmarks are disabled on this machine.</b><br>"
                f"{html.escape(str(exc))}</div>")
            for control in (self.ops, self.suite, self.use_cache, self.shapes, self.run_button):
                control.disabled = True
            self.box.children = [self.status]
            return False
        matched = self.local.catalog.display_name if self.local.catalog else "not in the catalog (no roofs)"
        self.status.value = (f"<b>{html.escape(self.local.device_name)}</b> ({self.local.backend}, "
                             f"{html.escape(self.local.arch)}): catalog GPU {html.escape(matched)}")
        self.ops.options = list(KERNEL_MODULES)
        self.ops.value = ("gemm", "attention")
        self.box.children = [self.status, w.HBox([self.ops, w.VBox([self.suite, self.use_cache, self.shapes,
                                                                     self.run_button])]), self.output]
        return True

    def run(self) -> None:
        """Run the chosen kernels' suite on the local GPU and draw the measured points."""
        if not self.check():
            return
        from workbench.bench import run_suite

        self.run_button.disabled = True
        self.output.clear_output()
        try:
            shapes = parse_gemm_shapes(self.shapes.value)
            with self.output:  # run_suite's tqdm bar renders here
                self.results = run_suite(self.suite.value, list(self.ops.value), use_cache=self.use_cache.value,
                                         progress=True, gemm_shapes=shapes or None)
            self.show(self.results)
        except WorkbenchError as exc:
            self.status.value = f"<span style='color:#b00'>{html.escape(str(exc))}</span>"
        finally:
            self.run_button.disabled = False

    def show(self, results: pd.DataFrame) -> None:
        """Measured kernels over the predicted roofline of the benchmarked GPU (current model and settings)."""
        measured = measured_points(results)
        failed = int(results["error"].fillna("").astype(bool).sum()) if "error" in results else 0
        catalog = self.local.catalog if self.local is not None else None
        prediction = self.predict_for(catalog.name) if catalog is not None else None
        if isinstance(prediction, Prediction):
            self.chart = charts.measured_roofline_chart(roofline_points(prediction), roofs(prediction), measured)
        else:
            self.chart = alt.Chart(measured).mark_point(filled=True).encode(
                x=alt.X("intensity:Q", scale=alt.Scale(type="log")), y=alt.Y("tflops:Q", scale=alt.Scale(type="log")),
                color="module:N", shape="kernel:N", tooltip=["case:N", "kernel:N", "tflops:Q"])
        view = self.chart_view()
        view.chart = self.chart
        note = f"{len(measured) // 2} cases measured" + (f", {failed} failed (see the table)" if failed else "")
        self.box.children = [self.status, *self.box.children[1:2], w.HTML(note), view, self.output]
        self.on_chart()
