"""The Step time tab's direct-port vs co-designed comparison, from the recipes engineer's advisor.

The advisor (``workbench.recipe``) has not landed in this checkout yet: the tab shows a labelled note, not a
made-up chart. Wire ``advice_section`` to it when it exists.
"""

from __future__ import annotations

import importlib.util

from widgets.data import Comparison
from widgets.state import WorkbenchState

ADVISOR_MODULE = "workbench.recipe.advise"


def advisor_available() -> bool:
    return importlib.util.find_spec("workbench.recipe") is not None and importlib.util.find_spec(ADVISOR_MODULE) is not None


def advice_section(state: WorkbenchState, comparison: Comparison) -> str:
    """HTML for the comparison of a direct port and a co-designed setup per GPU."""
    return ("<div class='wb-advice-note'><b>Direct port vs co-designed:</b> not available yet: the advisor "
            f"(<code>{ADVISOR_MODULE}</code>) is not part of this install. No comparison is shown rather than a "
            "guessed one.</div>")
