"""What every tab of the workbench is: a panel with a ``box`` (its widgets) and a ``draw(context)`` that redraws
it from the current state and predictions (``PanelContext``).

``Workbench`` keeps one panel per tab (``widgets.state.TABS``) and draws only the active one on a change; the
others redraw when opened. A new tab is a class with ``box`` and ``draw``, a name and title in
``widgets.state.TABS`` / ``TAB_TITLES``, and one entry in ``Workbench``'s ``panels``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import altair as alt
import ipywidgets as w
import pandas as pd

from workbench.models import Model
from widgets.data import Comparison
from widgets.formatting import stack_label
from widgets.state import WorkbenchState
from widgets.tables import configuration_text


@dataclass(frozen=True)
class PanelContext:
    """What a panel draws from: the state, its predictions for every chosen GPU and the model they are for."""

    state: WorkbenchState
    comparison: Comparison
    model: Model
    """The state's model: a catalog entry or one the user added (``custom``)."""
    custom: Mapping[str, Model]
    """The user's models by name (``Workbench.add_model``)."""

    @property
    def catalog_model(self) -> bool:
        return self.state.model not in self.custom

    def stack_label(self) -> str:
        """The stack every number is for, in words (``widgets.formatting.stack_label``)."""
        return stack_label(self.state.stack, self.state.compile)

    def settings_lines(self) -> list[str]:
        """The settings a chart is for, as the lines of its title under the first: the model and sizes, then the
        split and batch (one line would be cut at the chart's width)."""
        s = self.state
        name = getattr(self.model, "display_name", None) or s.model
        tokens = f"{s.seq_len:,} token{'s' if s.seq_len != 1 else ''} per sample"
        return [f"{name}, {s.precision}, {tokens}, activation checkpointing {s.checkpointing}",
                f"per GPU type: {configuration_text(s, self.model)}"]

    def gpu_names(self) -> list[str]:
        """Display names of the GPUs with a prediction, in the chosen order."""
        return [p.gpu.display_name for p in self.comparison.predictions.values()]


class Panel(Protocol):
    """One tab: its widgets and how it redraws."""

    box: w.Widget

    def draw(self, context: PanelContext) -> None: ...


def chart_view(css_class: str = "") -> alt.JupyterChart:
    """An empty chart widget. SVG rather than canvas: marks stay in the DOM (sharp when zoomed, accessible, and
    countable by the browser test)."""
    view = alt.JupyterChart(alt.Chart(pd.DataFrame({"x": []})).mark_point(),
                            embed_options={"renderer": "svg", "actions": False})
    if css_class:
        view.add_class(css_class)
    return view


def html_box(css_class: str = "", value: str = "") -> w.HTML:
    """An HTML widget with a CSS class (the browser test finds panels' parts by it)."""
    box = w.HTML(value)
    if css_class:
        box.add_class(css_class)
    return box
