"""Sizes shared by the workbench's charts, chosen so that any number of GPU panels fits the notebook's width.

JupyterLab 4.6 gives the widget's output area 1,070 px at a 1,500 px wide window with the file browser open, and
the chart starts 19 px into it (measured by ``tests/test_browser.py``, which checks that no chart, panel or legend
pokes out of that area; it writes the width to test-artifacts/browser/timings.json). Panels per GPU wrap into
rows of ``COLUMNS``: ``COLUMNS * PANEL_WIDTH`` plus the y axis and the gaps stays under ``CONTAINER_WIDTH``, and
legends go below the panels, so neither the legend nor the y axis is ever scrolled out of view. The chart's
structure (and so these numbers) does not depend on the data: ``widgets.live.LiveChart`` keeps it between redraws.
"""

from __future__ import annotations

import altair as alt

CONTAINER_WIDTH = 1040
"""Pixels a chart may take: a little under the 1,051 px JupyterLab leaves it at a 1,500 px window."""
COLUMNS = 3
"""GPU panels per row; the fourth GPU starts a second row."""
PANEL_WIDTH = 280
"""One GPU's roofline (and memory) panel: COLUMNS panels, their gaps and a y axis fit CONTAINER_WIDTH."""
PANEL_HEIGHT = 280
SPACING = 24
"""Pixels between panels (across and down)."""
WIDE_WIDTH = 600
"""A chart of one panel across (step time, the kernels' roofline, direct port vs co-designed)."""


def wrapped_facet() -> alt.Facet:
    """One panel per GPU, in the order the user chose them (the frames' ``gpu_order`` column), wrapping into rows
    of ``COLUMNS`` (use with ``.facet(facet=wrapped_facet(), columns=COLUMNS)``)."""
    return alt.Facet("gpu:N", title=None, sort=alt.EncodingSortField("gpu_order", op="min"),
                     header=alt.Header(labelFontSize=12, labelFontWeight="bold", labelLimit=PANEL_WIDTH))


def legend(title: str, **kwargs) -> alt.Legend:
    """A legend under the panels (never to their right, where it would leave the container)."""
    return alt.Legend(title=title, orient="bottom", direction="horizontal", titleOrient="top", **kwargs)


def fit_width(chart):
    """``chart`` with legends underneath and its title cut (with an ellipsis) at ``CONTAINER_WIDTH``: the title a
    widget sets on each redraw (the settings it is for) can be longer than the chart, and would widen it."""
    return chart.configure_legend(orient="bottom").configure_title(limit=CONTAINER_WIDTH - 40, anchor="start")
