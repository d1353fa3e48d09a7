"""The tabs read in a notebook's width (issue 19, re-checked in a browser): the Step time table keeps to its
numbers with the sentences under it, long text columns may break, chart titles come in lines the chart can
hold, every GPU by its display name, a save bar only over a chart, and the trace's GPU shown, not blank.

The browser test (tests/test_browser.py) checks the same on the page: nothing sideways, no text cut."""

import re

import pandas as pd
import pytest
import vl_convert

from widgets import Workbench, formatting, tables
from widgets.advice import advice_chart
from widgets.data import Predictor, step_breakdown
from widgets.state import WorkbenchState


@pytest.fixture(scope="module")
def wb():
    return Workbench(model="llama3-8b", gpus=["h200", "b200"], seq_len=4096)


def _headers(html: str) -> list[str]:
    return re.findall(r"<th[^>]*>(.*?)</th>", html)


def test_the_step_table_holds_numbers_and_the_sentences_go_under_it():
    comparison = Predictor().compare(WorkbenchState().replace(
        model="llama3-70b", gpus=("h200", "b200"), micro_batch=1, seq_len=8192, gpu_count=8))
    html = tables.summary_html(comparison)
    table, details = html.split("</table>")
    assert not set(tables.DETAIL_COLUMNS) & set(_headers(table))  # no column of sentences
    problem = comparison.fit["h200-sxm"]
    # the memory column says by how much; the sentence with the nearest fitting configuration is under the table
    over = f"{formatting.gb(problem.needs_bytes)} of {formatting.gb(problem.usable_bytes)} usable " \
           f"({formatting.gb(problem.over_bytes)} over)"
    assert f"<td>{over}</td>" in table and problem.suggestion not in table
    assert problem.text() in details and "<b>NVIDIA H200 SXM 141GB</b>" in details
    # the chart writes the shortfall over the missing bar and the nearest fit under it: two lines it can hold
    rows = step_breakdown(comparison).query("gpu == 'NVIDIA H200 SXM 141GB'")
    assert list(rows["layer"]) == ["label", "note"] and not rows["fits"].any()
    assert list(rows["text"]) == [problem.shortfall(), problem.suggestion]
    fits = Predictor().compare(WorkbenchState().replace(gpus=("h200",), seq_len=4096))
    details = tables.summary_html(fits).split("</table>")[1]
    assert "how far to trust this: ± " in details  # the validation sentence, now under the table


def test_long_text_columns_may_break_and_an_mfu_may_wrap():
    html = formatting.html_table([{"run": "a", "step": "12.5 ms ± 3.6%", "MFU": "55.6% of the bf16 dense peak ± 3.6%",
                                   "source": "benchmarks/results/h200/stacks/torchtitan/torchtitan.jsonl"}],
                                 long_columns=("source",))
    assert "<td class='wb-num'>12.5 ms ± 3.6%</td>" in html  # a number stays on one line
    assert "<td>55.6% of the bf16 dense peak ± 3.6%</td>" in html  # an MFU with its peak may wrap
    assert "<td class='wb-long'>benchmarks/" in html


def test_chart_titles_come_in_lines_and_charts_have_a_finite_size(wb):
    for tab in ("roofline", "step time", "memory"):
        wb.set(tab=tab)
        title = wb.views[tab].spec["title"]
        assert isinstance(title, list) and len(title) == 3 and title[2].startswith("per GPU type: "), title
        assert all(len(line) < 140 for line in title), title  # each line fits the chart (cut at ~1,000 px)
    wb.set(tab="roofline")
    # Vega sizes a chart as infinite when a legend has neither entries nor a title (the trace legend without a
    # trace): the roofline as vl-convert renders it has the width the browser test measures
    svg = vl_convert.vegalite_to_svg(wb.views["roofline"].spec)
    width = float(re.search(r'<svg[^>]* width="([^"]+)"', svg).group(1))
    assert 500 < width < 1100, width


def test_one_token_per_sample_is_singular():
    from widgets.panels import PanelContext

    comparison = Predictor().compare(WorkbenchState().replace(model="dlrm-dcnv2", gpus=("h200",)))
    context = PanelContext(comparison.state, comparison, comparison.predictions["h200-sxm"].model, {})
    assert ", 1 token per sample," in context.settings_lines()[0]


def test_gpus_by_display_name_in_the_recipe_tab_and_the_advisor_chart(wb):
    wb.set(tab="recipe")
    assert list(wb.recipe.gpu.options) == [("NVIDIA H200 SXM 141GB", "h200-sxm"),
                                           ("NVIDIA B200 (HGX B200, 180GB)", "b200")]
    assert wb.recipe.gpu.value == "h200-sxm"  # the value stays the catalog name (default file name, export)
    frame = pd.DataFrame([{"target": "NVIDIA B200 (HGX B200, 180GB)", "variant": "direct port", "tokens_per_s": 1e5,
                           "step_ms": 10.0, "fits": True, "fits_text": "yes"}])
    title = advice_chart(frame, "h200-sxm").to_dict()["encoding"]["x"]["title"]
    assert title == "predicted tokens/s, total over the job's GPUs (port from NVIDIA H200 SXM 141GB)"


def test_the_save_bar_shows_over_a_kernels_chart_only(wb):
    from workbench.bench import LocalGPU
    from workbench.hardware import get_gpu

    wb.set(tab="kernels")
    assert wb.kernels.chart is None and wb.save_bar.layout.display == "none"  # no benchmark: nothing to save
    panel = wb.kernels
    checked, local = panel.checked, panel.local
    panel.checked, panel.local = True, LocalGPU("NVIDIA H200", "cuda", get_gpu("h200"), "570", "2.11", "3.6", "sm_90")
    rows = pd.DataFrame([{"module": "gemm", "name": "gemm-bf16-4096", "dtype": "bf16", "flops": 2 * 4096**3,
                          "bytes": 3 * 2 * 4096**2, "triton_ms": 0.21, "baseline_ms": 0.19, "error": ""}])
    try:
        panel.show(rows)
        assert wb.save_bar.layout.display is None  # a benchmark drew a chart: it can be saved
    finally:
        panel.checked, panel.local, panel.chart = checked, local, None
        wb.set(tab="roofline")


def test_the_trace_gpu_shows_the_first_gpu_before_any_choice(wb):
    wb.set(tab="step time")
    assert wb.trace_panel.gpu.value == wb.state["gpus"][0]
    wb.set(gpus=["b200", "mi350x"])
    assert wb.trace_panel.gpu.value == "b200"  # the old choice is gone with its GPU
    wb.set(gpus=["h200", "b200"], tab="roofline")
