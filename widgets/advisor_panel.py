"""The Step time tab's advisor section: what "Compare direct port vs co-designed" will compare, the button, and
the comparison it draws (``widgets.advice``: the data and text; ``workbench.recipe.advisor.advise``: the advice).

The advisor searches, so it runs when the button is pressed, never on a redraw; a redraw clears its result
(``reset``), since the result was for the settings before the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import ipywidgets as w

from workbench.models import Model
from widgets.advice import advice_chart, advice_frame, advice_html, advice_prompt, advise_all
from widgets.panels import chart_view, html_box
from widgets.state import WorkbenchState


class AdvisorPanel:
    """Button, prompt, chart and text of the direct-port vs co-designed comparison; ``parts`` are its widgets in
    the order the Step time tab shows them."""

    def __init__(self, on_compare: Callable[[], None]):
        self.button = w.Button(description="Compare direct port vs co-designed", icon="exchange",
                               layout=w.Layout(width="300px", flex="0 0 auto"))  # not squeezed by the prompt
        self.button.on_click(lambda _: on_compare())
        self.prompt = w.HTML()
        self.view = chart_view()
        self.view.layout.display = "none"
        self.text = html_box("wb-advice")
        self.advices: dict[str, object] = {}
        """Target GPU -> ``workbench.recipe.advisor.Advice`` (or why none) of the last comparison."""
        self.parts = (w.HBox([self.button, self.prompt]), self.view, self.text)

    def reset(self, state: WorkbenchState) -> None:
        """Say what the button will compare for ``state``, and drop the last comparison."""
        self.prompt.value = advice_prompt(state)
        self.button.disabled = len(state.gpus) < 2
        self.advices = {}
        self.text.value = ""
        self.view.layout.display = "none"

    def compare(self, state: WorkbenchState, custom_models: Mapping[str, Model]) -> dict[str, object]:
        """Run the advisor with the state's controls (``widgets.advice.advisor_controls``): the first GPU's best
        recipe ported to each other GPU vs the co-designed recipe there; returns target GPU -> ``Advice`` or the
        reason there is none."""
        start = time.perf_counter()
        self.advices = advise_all(state, custom_models)
        frame = advice_frame(self.advices)
        if not frame.empty:
            self.view.chart = advice_chart(frame, state.gpus[0])
            self.view.layout.display = None
        self.text.value = (advice_html(self.advices, state.gpus[0], state)
                           + f"<p><i>advisor: {time.perf_counter() - start:.2f} s</i></p>")
        return self.advices
