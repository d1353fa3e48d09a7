"""The workbench notebook in a real browser: JupyterLab (localhost, random port, token) and headless Debian
Chromium through playwright. Runs the notebook, changes the model, the GPUs and the precision through the widgets,
checks that the roofline re-rendered with the new points, then with five GPUs checks every chart tab's layout (no
chart, panel or legend leaves the notebook's output area or the window: nothing to scroll sideways), that no two
text labels of a tab's chart overlap and that no text is cut (a control's label, a dropdown's choice, a chart title
or a table wider than the output area), that a configuration that does not fit gets no bar but says by how much and
offers the nearest one that fits (applied through its button), shows the trust tab's measured and published rows, exports a recipe through the button and reads the file, and last uploads
a profiler trace (its op classes beside the prediction in the Step time tab, its measured points on the roofline).

Screenshots go to test-artifacts/browser/ (one per tab with five GPUs under tabs/, ~100-300 kB each, not
committed), with timings.json (render times and the output width the notebook gives). Without chromium or
playwright the test skips, except in CI (the ``CI`` environment variable set), where it fails: CI installs both
(.ci/run, the test extra).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
ROOFLINE_SVG = ".wb-chart-roofline svg"
STEP_SVG = ".wb-chart-step-time svg"
MEMORY_SVG = ".wb-chart-memory svg"
PLAIN_TRACE = ROOT / "benchmarks" / "results" / "h200" / "stacks" / "plain_pytorch" / "traces" / \
    "1b-mb3-s2048-fp32-eager-none.json.gz"
"""A committed profiler trace (the plain loop's, 2 profiled steps without annotations): the upload's file."""
FIVE_GPUS = ("NVIDIA B200 (HGX B200, 180GB)", "AMD Instinct MI355X", "NVIDIA H200 SXM 141GB", "NVIDIA H100 SXM5 80GB",
             "NVIDIA A100 SXM4 80GB")


def _require_browser():
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (test extra)")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if missing:
        message = "real-browser test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must provide them (.ci/run)")
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _jupyter(app: str, tmp_path: Path):
    """A Jupyter server (``app``: lab or notebook, i.e. Notebook 7) over a scratch copy of the notebook, so the
    recipe export writes beside the copy, not into the repository. Yields (base URL, token, root)."""
    root = tmp_path / "root"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "workbench.ipynb", root / "notebooks" / "workbench.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    if app == "lab":  # render offscreen cells too (Notebook 7 does not take this file)
        (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    config = "LabApp" if app == "lab" else "JupyterNotebookApp"
    command = [sys.executable, "-m", "jupyter", app, "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", f"--{config}.news_url=None",
               f"--{config}.expose_app_in_browser=True", "--allow-root"]
    log = open(tmp_path / "server.log", "w")
    # its own session and process group: the SIGKILL of a server that will not stop takes its helpers with it
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                assert time.time() < deadline, f"jupyter {app} did not answer within 90 s"
                time.sleep(0.5)
        yield base, token, root
    finally:
        try:
            _stop_server(server, tmp_path / "runtime")
        finally:
            log.close()


def _stop_server(server: subprocess.Popen, runtime: Path) -> None:
    """Jupyter's clean stop (SIGTERM: it shuts its kernels down), SIGKILL to its process group if it has not
    stopped in 20 s, then SIGKILL to any kernel left (a process given a connection file in ``runtime``)."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    for pid in _processes_with_files_in(runtime):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:  # a kernel leads its own group (jupyter_client starts it in a new session)
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


def _processes_with_files_in(folder: Path) -> list[int]:
    """Processes (from /proc; none elsewhere) with an argument naming a file in ``folder``: kernels pass their
    connection file."""
    prefix = str(folder).encode() + b"/"
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if any(arg.startswith(prefix) for arg in (entry / "cmdline").read_bytes().split(b"\0")):
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1500, "height": 1400})
        finally:
            browser.close()


def _run_notebook(page, url: str) -> float:
    """Open the notebook, run its code cell (JupyterLab: run-all once the kernel is idle, since run-all before it
    is up would queue nothing; Notebook 7 does not expose its app object: Shift+Enter in the cell) and wait for
    the roofline's points. Returns when (perf_counter) the run started."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
    page.wait_for_timeout(500)  # let the front end finish loading its settings before errors count as ours
    started = time.perf_counter()
    if page.evaluate("typeof window.jupyterapp") != "undefined":
        page.wait_for_function("(() => { const w = window.jupyterapp.shell.currentWidget;"
                               " const k = w && w.sessionContext && w.sessionContext.session"
                               " && w.sessionContext.session.kernel; return k && k.status === 'idle'; })()",
                               timeout=90_000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_selector(f"{ROOFLINE_SVG} g.mark-symbol path", timeout=120_000)
        return started
    for attempt in range(3):  # a key press while the page is still settling can be lost: press again
        page.click(".jp-CodeCell .jp-InputArea-editor")
        page.keyboard.press("Shift+Enter")
        try:
            page.wait_for_selector(f"{ROOFLINE_SVG} g.mark-symbol path", timeout=40_000)
            return started
        except Exception:
            if attempt == 2:
                page.screenshot(path=str(ARTIFACTS / "notebook7-timeout.png"), full_page=True)
                raise
    raise AssertionError("unreachable")


def _chart_text(page) -> str:
    return page.eval_on_selector(ROOFLINE_SVG, "svg => svg.textContent")


def _point_labels(page) -> list[str]:
    """aria-labels of the op points (vega's SVG renderer describes each mark item from its tooltip)."""
    return page.eval_on_selector_all(f"{ROOFLINE_SVG} g.mark-symbol path",
                                     "paths => paths.map(p => p.getAttribute('aria-label') || '')")


def _wait_for(page, predicate_js: str, what: str, timeout_s: float = 60) -> float:
    """Seconds until ``predicate_js`` (evaluated in the page on every animation frame) holds."""
    start = time.perf_counter()
    try:
        page.wait_for_function(predicate_js, polling="raf", timeout=timeout_s * 1000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "timeout.png"), full_page=True)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from None
    return time.perf_counter() - start


def _svg_has(text: str, absent: str = "") -> str:
    check = f"svg.textContent.includes({json.dumps(text)})"
    if absent:
        check += f" && !svg.textContent.includes({json.dumps(absent)})"
    return f"(() => {{ const svg = document.querySelector({json.dumps(ROOFLINE_SVG)}); return svg && {check}; }})()"


def _step_svg_has(text: str) -> str:
    return (f"(() => {{ const svg = document.querySelector({json.dumps(STEP_SVG)}); "
            f"return svg && svg.textContent.includes({json.dumps(text)}); }})()")


def _tick(page, gpu: str, ticked: bool) -> None:
    """Tick or untick one GPU's checkbox in the picker (``widgets.controls.GpuPicker``)."""
    box = page.locator(f".wb-gpu-{gpu} input[type=checkbox]")
    if box.is_checked() != ticked:
        box.click()


_LAYOUT_JS = """(view) => {
  const box = r => { const b = r.getBoundingClientRect(); return {left: b.left, right: b.right, top: b.top,
                                                                  bottom: b.bottom, width: b.width}; };
  const host = document.querySelector(view);
  const area = host.closest('.jp-OutputArea-output') || host.closest('.jp-Cell-outputArea') || host.parentElement;
  const svg = host.querySelector('svg');
  return {viewport: window.innerWidth, area: box(area), host: box(host), svg: box(svg),
          hostScroll: host.scrollWidth - host.clientWidth,
          pageScroll: document.documentElement.scrollWidth - window.innerWidth,
          legends: [...svg.querySelectorAll('g.role-legend')].map(box),
          panels: [...svg.querySelectorAll('g.cell > g')].map(box)};  // one item per facet panel
}"""


def _assert_fits_sideways(page, view: str, panels: int) -> dict:
    """The chart in ``view`` (a chart widget's CSS class), its legends and every panel lie inside the output area and
    the window, and nothing scrolls sideways. Returns the measured boxes."""
    layout = page.evaluate(_LAYOUT_JS, view)
    right = min(layout["viewport"], layout["area"]["right"]) + 1
    left = layout["area"]["left"] - 1
    assert layout["legends"], f"{view}: no legend drawn"
    assert len(layout["panels"]) >= panels, (view, len(layout["panels"]))
    for what, b in [("chart", layout["svg"]), *(("legend", b) for b in layout["legends"]),
                    *(("panel", b) for b in layout["panels"])]:
        assert left <= b["left"] and b["right"] <= right, f"{view}: a {what} at {b} leaves {left:.0f}-{right:.0f} px"
    assert layout["hostScroll"] <= 1 and layout["pageScroll"] <= 1, f"{view} scrolls sideways: {layout}"
    return layout


_OVERLAP_JS = """(selector) => {
  const seen = [];
  for (const svg of document.querySelectorAll(selector)) {
    if (!svg.getClientRects().length) continue;  // a hidden chart (another tab's)
    for (const t of svg.querySelectorAll('text')) {
      const style = getComputedStyle(t);
      if (!t.textContent.trim() || style.opacity === '0' || style.visibility === 'hidden'
          || t.closest('[opacity="0"]')) continue;  // vega hides colliding axis labels with opacity 0
      const b = t.getBoundingClientRect();
      if (b.width > 0) seen.push({text: t.textContent, l: b.left, r: b.right, t: b.top, b: b.bottom});
    }
  }
  const clash = [];
  for (let i = 0; i < seen.length; i++) for (let j = i + 1; j < seen.length; j++) {
    const a = seen[i], c = seen[j];
    if (Math.min(a.r, c.r) - Math.max(a.l, c.l) > 2 && Math.min(a.b, c.b) - Math.max(a.t, c.t) > 2)
      clash.push([a.text, c.text]);
  }
  return {labels: seen.length, clash};
}"""


def _assert_no_text_overlaps(page, selector: str = ".wb-workbench svg") -> int:
    """No two visible text labels of the shown charts overlap (their boxes share more than 2 px each way).
    Returns how many labels were checked."""
    found = page.evaluate(_OVERLAP_JS, selector)
    assert not found["clash"], f"overlapping labels: {found['clash'][:10]}"
    return found["labels"]


_CUT_JS = """(root) => {
  const visible = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const cut = [];
  for (const e of document.querySelectorAll(`${root} button, ${root} label, ${root} .widget-label`)) {
    // ipywidgets end what does not fit a button, checkbox or description with an ellipsis (text-overflow)
    if (visible(e) && e.textContent.trim() && e.scrollWidth > e.clientWidth + 1)
      cut.push('text: ' + e.textContent.trim());
  }
  const ctx = document.createElement('canvas').getContext('2d');
  for (const s of document.querySelectorAll(`${root} select:not([multiple])`)) {  // a dropdown's shown choice
    const option = s.options[s.selectedIndex], style = getComputedStyle(s);
    if (!visible(s) || !option) continue;
    ctx.font = style.font;
    const room = s.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    if (ctx.measureText(option.textContent).width > room + 1) cut.push('dropdown: ' + option.textContent);
  }
  for (const t of document.querySelectorAll(`${root} svg text`)) {  // Vega ends a text past its limit with "…"
    if (visible(t) && t.textContent.endsWith('\u2026')) cut.push('chart: ' + t.textContent);
  }
  const host = document.querySelector(root), area = host.closest('.jp-OutputArea-output') || host;
  const right = Math.min(window.innerWidth, area.getBoundingClientRect().right) + 1;
  for (const table of document.querySelectorAll(`${root} table`)) {
    if (visible(table) && table.getBoundingClientRect().right > right)
      cut.push('table: ' + table.textContent.slice(0, 80));
  }
  return cut;
}"""


def _assert_nothing_cut(page, root: str = ".wb-workbench") -> None:
    """No visible text of the workbench is cut: every button, checkbox and description whole, every dropdown's
    choice inside its box, no chart text ended with an ellipsis, no table past the output area's right edge."""
    cut = page.evaluate(_CUT_JS, root)
    assert not cut, f"cut or overflowing text: {cut[:10]}"


def _tab_screenshot(page, name: str) -> None:
    """The workbench's tabs as shown (the notebook scrolls inside its panel, so a page screenshot would cut them)."""
    page.locator(".wb-workbench .widget-tab").first.screenshot(path=str(ARTIFACTS / "tabs" / f"{name}.png"))


def _tab(page, title: str) -> None:
    page.click(f".wb-workbench .lm-TabBar-tab:has-text('{title}')")


def test_workbench_in_jupyterlab(tmp_path):
    _require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "tabs").mkdir(exist_ok=True)
    timings: dict[str, object] = {}
    with _jupyter("lab", tmp_path) as (base, token, root), _chromium() as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        _run_notebook(page, f"{base}/lab/tree/notebooks/workbench.ipynb?reset&token={token}")
        page.screenshot(path=str(ARTIFACTS / "1-start.png"), full_page=True)
        start_text = _chart_text(page)
        assert "NVIDIA H200 SXM 141GB" in start_text and "AMD Instinct MI350X" in start_text
        assert "fp8 ridge" not in start_text and "bf16 989 TFLOP/s" in start_text  # roofs carry their peak
        assert "HBM 4.8 TB/s" in start_text  # and the slope its bandwidth
        _assert_nothing_cut(page)  # the controls: every GPU's name, the sharding buttons, the parameters' dtype

        # the speed target's case: Llama 3 70B on three GPUs
        page.select_option(".wb-model select", label="llama3-70b (Llama 3 70B)")
        timings["model_change_to_render_s"] = _wait_for(  # 70B's FFN is 28672 wide (torchtitan's w1 / w3)
            page, f"[...document.querySelectorAll({json.dumps(ROOFLINE_SVG + ' g.mark-symbol path')})]"
                  ".some(p => (p.getAttribute('aria-label') || '').includes('28672'))",
            "the roofline to show Llama 3 70B")
        start_points = _point_labels(page)
        described = [label for label in start_points if label]  # legend symbols have no description
        assert described and all("GPU: " in label for label in described)  # the GPU in every tooltip

        # GPUs: B200, MI355X and H200 (three still; ticked in this order, so B200 is the first: the recipe's GPU)
        _tick(page, "mi350x", False)
        _tick(page, "h200-sxm", False)
        _tick(page, "mi355x", True)
        _tick(page, "h200-sxm", True)
        timings["gpus_change_to_render_s"] = _wait_for(
            page, _svg_has("NVIDIA H200", absent="MI350X"), "the roofline to show B200, MI355X and H200")
        labels = _point_labels(page)
        assert labels and labels != start_points
        page.screenshot(path=str(ARTIFACTS / "2-gpus.png"), full_page=True)

        # precision: fp8 brings fp8 roofs (and their ridges) and moves the GEMM points
        page.select_option(".wb-precision select", label="fp8 (1 bytes)")
        timings["precision_change_to_render_s"] = _wait_for(page, _svg_has("fp8 ridge"), "fp8 roofs on the roofline")
        assert _point_labels(page) != labels
        page.screenshot(path=str(ARTIFACTS / "3-fp8.png"), full_page=True)

        # clicking a point shows that op's detail (the selection travels back to Python); the point of one shape
        # lists all its ops, so its tooltip names no op it does not stand for
        point = page.locator(f"{ROOFLINE_SVG} g.mark-symbol path[aria-label*='attention.bwd']").first
        point.click(force=True)
        page.wait_for_function("document.querySelector('.wb-op-detail').textContent.includes('predicted time')",
                               timeout=30_000)
        detail = page.inner_text(".wb-op-detail")
        assert "attention" in detail, detail

        # five GPUs: the panels wrap into rows inside the notebook, legends underneath, nothing scrolls sideways
        _tick(page, "h100-sxm", True)
        _tick(page, "a100-sxm-80gb", True)
        timings["five_gpus_to_render_s"] = _wait_for(page, _svg_has("NVIDIA A100 SXM4 80GB"), "five roofline panels")
        assert all(name in _chart_text(page) for name in FIVE_GPUS)
        _tab_screenshot(page, "roofline")  # before the checks
        layout = _assert_fits_sideways(page, ".wb-chart-roofline", panels=5)
        timings["output_area_width_px"] = round(layout["area"]["width"])
        timings["roofline_width_px"] = round(layout["svg"]["width"])
        timings["roofline_labels_checked"] = _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)  # the title's settings lines too

        # Step time: Llama 3 70B on 8 GPUs does not fit without checkpointing: no bars, what does not fit; with
        # full checkpointing the bars come; the stack says what every number is for
        _tab(page, "Step time")
        _wait_for(page, _step_svg_has("does not fit"), "the step chart to say what does not fit")
        step_text = page.eval_on_selector(STEP_SVG, "svg => svg.textContent")
        assert "no bar: this configuration does not fit in memory" in step_text
        assert page.locator(f"{STEP_SVG} g.mark-rect path").count() == 0  # no bar for what does not fit
        # what does not fit by how much, and the nearest configuration that fits (checked by predicting it), in
        # the table and on the button that applies it
        summary = page.inner_text(".wb-summary")
        fit_button = page.locator("button.wb-use-fit")
        assert fit_button.is_visible() and "nearest configuration that fits" in fit_button.inner_text()
        suggestion = (fit_button.get_attribute("title") or "").split("; ")[0]  # the B200's, the first GPU's
        assert suggestion == "with full activation checkpointing, micro-batch 1 fits", suggestion
        assert re.search(r"does not fit: needs [\d,.]+ GB of [\d,.]+ GB usable \([\d,.]+ GB over\); "
                         + re.escape(suggestion), summary), summary
        _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)  # the summary table keeps inside the tab, its sentences under it
        page.screenshot(path=str(ARTIFACTS / "4a-step-does-not-fit.png"), full_page=True)
        fit_button.click()  # applies the B200's suggestion: full checkpointing
        page.wait_for_selector(f"{STEP_SVG} g.mark-rect path", timeout=30_000)
        assert page.eval_on_selector(".wb-checkpointing select", "s => s.value") == "full"
        page.select_option(".wb-stack select", label="torchtitan")
        _wait_for(page, _step_svg_has("Predicted step time: torchtitan, eager"), "the torchtitan label")
        # the parameter-dtype control lists the stack's own dtypes: torchtitan trains fp32 parameters only
        dtypes = page.eval_on_selector(".wb-param-dtype select",
                                       "s => [s.disabled, [...s.options].map(o => o.textContent.replace(/\\s/g, ' '))]")
        assert dtypes == [True, ["fp32 parameters (bf16 autocast)"]], dtypes
        _tab_screenshot(page, "step-time")
        _assert_fits_sideways(page, ".wb-chart-step-time", panels=0)
        timings["step_labels_checked"] = _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)
        details = page.inner_text(".wb-summary-details")  # the sentences of every GPU under the numbers' table
        assert all(name in details for name in FIVE_GPUS) and "how far to trust this: " in details, details

        _tab(page, "Memory")
        page.wait_for_selector(f"{MEMORY_SVG} g.mark-rect path", timeout=30_000)
        memory_text = page.eval_on_selector(MEMORY_SVG, "svg => svg.textContent")
        assert "HBM capacity" in memory_text and "usable (headroom kept)" in memory_text  # the lines' legend
        assert "micro-batch" in memory_text or "does not fit" in memory_text
        _tab_screenshot(page, "memory")
        _assert_fits_sideways(page, ".wb-chart-memory", panels=5)
        timings["memory_labels_checked"] = _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)

        _tab(page, "Kernels")  # no GPU here: no chart, only the panel (its check covers any chart it shows)
        page.wait_for_timeout(300)
        _tab_screenshot(page, "kernels")
        _assert_no_text_overlaps(page)
        # no benchmark here, so no chart to save: no save bar
        page.wait_for_selector(".wb-workbench button:has-text('Save chart')", state="hidden", timeout=30_000)

        # How far to trust this: the measured record for the stack, then the published rows of Llama 3 on these GPUs
        _tab(page, "How far to trust this")
        page.wait_for_selector(".wb-published-table table", timeout=30_000)
        published = page.inner_text(".wb-published")
        assert "Published results" in published and "llama3 family" in published, published
        assert "NVIDIA B200 (HGX B200, 180GB): " in published and "AMD Instinct MI355X: no published llama3" in published
        table = page.inner_text(".wb-published-table")
        assert "TT-H100-8B-8G-1" in table and "GPT" not in table  # an H100 (variant) row; no other family's
        assert "%" in table and "not expressed" in table
        _tab_screenshot(page, "trust")
        _assert_fits_sideways(page, ".wb-chart-trust", panels=0)
        timings["trust_labels_checked"] = _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)  # the runs' table too: its file paths break instead of widening it

        # Recipe tab: export through the button, then read the file the kernel wrote
        _tab(page, "Recipe")
        page.wait_for_selector(".wb-recipe-preview", timeout=30_000)
        _tab_screenshot(page, "recipe")
        _assert_no_text_overlaps(page)
        _assert_nothing_cut(page)
        targets = page.eval_on_selector(".wb-recipe-gpu select",  # ipywidgets writes spaces as no-break spaces
                                        "s => [...s.options].map(o => o.textContent.replace(/\\s/g, ' '))")
        assert targets == list(FIVE_GPUS), targets  # display names, in the chosen order, no catalog ids
        page.click("button.wb-export")
        page.wait_for_selector(".wb-export-message a.wb-download", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "6-recipe.png"), full_page=True)

        # last (it searches every target, slow on 2 cores, so on three GPUs): the advisor's comparison from its button
        _tab(page, "Step time")
        _tick(page, "h100-sxm", False)
        _tick(page, "a100-sxm-80gb", False)
        _wait_for(page, f"!document.querySelector({json.dumps(STEP_SVG)}).textContent.includes('A100')", "3 GPUs")
        started = time.perf_counter()
        page.click("button:has-text('Compare direct port vs co-designed')")
        page.wait_for_function("document.querySelector('.wb-advice h4') || "  # or the status line's error
                               "document.querySelector('.wb-status').textContent.includes('error')", timeout=120_000)
        timings["advisor_s"] = round(time.perf_counter() - started, 1)
        page.screenshot(path=str(ARTIFACTS / "4-step-time.png"), full_page=True)
        assert page.locator(".wb-advice h4").count(), page.inner_text(".wb-status")
        _assert_no_text_overlaps(page)  # the comparison chart too (its GPU names)
        _assert_nothing_cut(page)  # the advisor's button beside its long prompt

        # a profiler trace uploaded in the Step time tab's trace section, for the H200: the table of op classes
        # (measured beside predicted, the calibration warning beside its button), then its diamonds on the roofline
        shown = page.eval_on_selector(".wb-trace-gpu select",
                                      "s => s.selectedIndex >= 0"
                                      " && s.options[s.selectedIndex].textContent.replace(/\\s/g, ' ')")
        assert shown == FIVE_GPUS[0], shown  # the GPU a load takes unless another is chosen: shown, not blank
        page.select_option(".wb-trace-gpu select", label="NVIDIA H200 SXM 141GB")
        page.fill(".wb-trace-steps input", "2")
        page.press(".wb-trace-steps input", "Enter")
        started = time.perf_counter()
        with page.expect_file_chooser() as chooser:  # the FileUpload's input is not inside its button
            page.click(".wb-trace-upload")
        chooser.value.set_files(str(PLAIN_TRACE))
        page.wait_for_function("document.querySelector('.wb-trace-info').textContent.includes('1b-mb3-s2048')",
                               timeout=60_000)
        timings["trace_upload_s"] = round(time.perf_counter() - started, 1)
        assert "measured for:" in page.inner_text(".wb-trace-info"), page.inner_text(".wb-trace-message")
        page.wait_for_function("(document.querySelector('.wb-trace-table') || {}).textContent?.includes('gemm')",
                               timeout=10_000)  # each widget's value is its own message: give the table a moment
        record = re.findall(r"^All test rows: (.*)\.$", (ROOT / "benchmarks" / "results" / "h200" / "stacks" /
                                                        "TRACE_LOOP.md").read_text(), re.M)
        assert record and record[0] in page.inner_text(".wb-trace-warning")  # the trace loop's record, quoted
        assert page.locator(".wb-advice h4").count()  # loading a trace keeps the advisor's result
        _tab(page, "Roofline")
        _wait_for(page, _svg_has("measured (trace)"), "the trace's measured points on the roofline")
        trace_points = [label for label in _point_labels(page) if "op class: " in label]
        assert trace_points and all("GPU: NVIDIA H200 SXM 141GB" in label for label in trace_points)
        _tab_screenshot(page, "roofline-trace")
        _assert_no_text_overlaps(page)
        assert not errors, errors

    from workbench.recipe import load_recipe

    written = sorted((root / "notebooks" / "recipes").glob("*.yaml"))
    assert [p.name for p in written] == ["llama3-70b-b200-8x.yaml"]
    recipe = load_recipe(written[0])
    assert recipe.target.gpu == "b200" and recipe.model.name == "llama3-70b"
    assert recipe.precision.workbench_precision == "fp8"
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=2))


def test_workbench_in_notebook7(tmp_path):
    """The same notebook in Notebook 7: the offline chart renders and follows a precision change."""
    _require_browser()
    try:
        import notebook  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("Notebook 7 (the notebook package, test extra) is missing in CI")
        pytest.skip("Notebook 7 is not installed")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _jupyter("notebook", tmp_path) as (base, token, _), _chromium() as page:
        errors: list[tuple[float, str]] = []
        page.on("pageerror", lambda exc: errors.append((time.perf_counter(), str(exc))))
        started = _run_notebook(page, f"{base}/notebooks/notebooks/workbench.ipynb?token={token}")
        assert "fp8 ridge" not in _chart_text(page) and "AMD Instinct MI350X" in _chart_text(page)
        page.select_option(".wb-precision select", label="fp8 (1 bytes)")
        _wait_for(page, _svg_has("fp8 ridge"), "fp8 roofs on the roofline in Notebook 7")
        page.screenshot(path=str(ARTIFACTS / "notebook7.png"), full_page=True)
        # Notebook 7.6.5 itself throws "Cannot read properties of undefined (reading 'schema')" while loading its
        # settings, on any page (the file browser too): only errors after the run started are the workbench's
        assert not [text for t, text in errors if t >= started], errors
