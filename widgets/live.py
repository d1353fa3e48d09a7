"""Fast redraws of a chart whose structure stays fixed and whose data changes.

Building an altair chart and validating it against the Vega-Lite JSON schema is about two thirds of a redraw
(~100 ms for the three-GPU roofline on a 2-core machine). The workbench's charts have a fixed structure (no
scale domain or sort order depends on the data), so ``LiveChart`` builds and validates the altair chart once,
keeps its Vega-Lite spec without the data, and on later redraws sends that spec with the new rows to the
``alt.JupyterChart`` (its ``spec`` trait, which the browser re-embeds). The selections and params the first
chart declared stay set up, since the structure is the same. ``chart()`` rebuilds the full altair chart of the
current data (for saving as PNG/SVG). A chart's title (the stack and settings it is for) is the one part of the
structure that follows the data: ``show(frame, title=...)`` sets it on every redraw.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import altair as alt
import pandas as pd


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts: NaN becomes null (JSON has no NaN), numpy scalars become Python ones."""
    rows = frame.to_dict("records")
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()} for row in rows]


class LiveChart:
    """One chart view fed with frames; ``build(frame)`` makes the altair chart (the same structure every time)."""

    def __init__(self, view: alt.JupyterChart, build: Callable[[pd.DataFrame], alt.TopLevelMixin]):
        self.view, self.build = view, build
        self.frame: pd.DataFrame | None = None
        self.title: str | list[str] | None = None
        self._template: dict | None = None

    def show(self, frame: pd.DataFrame, title: str | list[str] | None = None) -> None:
        """Draw ``frame``; ``title`` (one line or a list of lines) replaces the chart's title."""
        self.frame, self.title = frame, title
        if self._template is None:
            self.view.chart = self.chart()  # validated once; sets up the selections
            self._template = {k: v for k, v in self.view.spec.items() if k not in ("data", "datasets", "title")}
        else:
            self.view.spec = {**self._template, **({"title": title} if title else {}),
                              "data": {"values": records(frame)}}

    def chart(self) -> alt.TopLevelMixin:
        """The full altair chart of the data shown now."""
        if self.frame is None:
            raise ValueError("nothing shown yet")
        chart = self.build(self.frame)
        return chart.properties(title=self.title) if self.title else chart
