"""The Step time tab's direct-port vs co-designed comparison, from the recipes advisor
(``workbench.recipe.advisor.advise``).

The first chosen GPU is the source: its best recipe (``workbench.recipe.search``) is run unchanged on every other
chosen GPU (the direct port) and compared with the best recipe for that GPU after the advisor's revisions (the
co-designed one). The advisor searches, so the tab computes this when asked (a button), not on every redraw.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import altair as alt
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import Model
from widgets.data import has_calibration
from widgets.state import WorkbenchState


def advise_all(state: WorkbenchState, custom_models: Mapping[str, Model] | None = None) -> dict[str, object]:
    """Target GPU name -> ``Advice`` for a port from ``state.gpus[0]``, or the reason there is none (a str)."""
    if state.model in (custom_models or {}):
        return {g: "the advisor works on catalog models (it applies revisions to the catalog entry)"
                for g in state.gpus[1:]}
    from workbench.recipe.advisor import advise

    source = state.gpus[0]
    out: dict[str, object] = {}
    for target in state.gpus[1:]:
        calibrated = state.calibrated and has_calibration(get_gpu(source)) and has_calibration(get_gpu(target))
        try:
            out[target] = advise(state.model, source, target, state.gpu_count, state.precision,
                                 seq_len=state.seq_len, calibrated=calibrated)
        except WorkbenchError as exc:
            out[target] = str(exc)
    return out


def advice_frame(advices: Mapping[str, object]) -> pd.DataFrame:
    """Rows target, variant (direct port / co-designed), tokens_per_s, step_ms, fits: the comparison chart's data."""
    rows = []
    for target, advice in advices.items():
        if isinstance(advice, str):
            continue
        name = get_gpu(target).display_name
        for variant, recipe in (("direct port", advice.direct_port), ("co-designed", advice.co_designed)):
            if recipe is not None and recipe.predicted is not None:
                p = recipe.predicted
                rows.append({"target": name, "variant": variant, "tokens_per_s": p.tokens_per_s,
                             "step_ms": p.step_time_s * 1e3, "fits": p.fits})
    return pd.DataFrame(rows, columns=["target", "variant", "tokens_per_s", "step_ms", "fits"])


def advice_chart(frame: pd.DataFrame, source: str) -> alt.Chart:
    """Predicted tokens/s per target GPU: the source's best recipe ported unchanged vs the co-designed one."""
    variants = ["direct port", "co-designed"]
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y("variant:N", title=None, sort=variants),
        x=alt.X("tokens_per_s:Q", title=f"predicted tokens/s (port from {source})"),
        color=alt.Color("variant:N", sort=variants, title=None),
        row=alt.Row("target:N", title=None),
        opacity=alt.condition(alt.datum.fits, alt.value(1.0), alt.value(0.35)),
        tooltip=["target:N", "variant:N", alt.Tooltip("tokens_per_s:Q", format=",.0f"),
                 alt.Tooltip("step_ms:Q", format=",.1f"), "fits:N"],
    ).properties(width=420, height=alt.Step(22))


def advice_html(advices: Mapping[str, object], source: str) -> str:
    """Per target: the predicted gain, the advisor's notes, every revision with its own predicted gain, and the
    two recipes side by side."""
    parts = []
    for target, advice in advices.items():
        name = html.escape(get_gpu(target).display_name)
        if isinstance(advice, str):
            parts.append(f"<h4>{html.escape(source)} &rarr; {name}</h4><p style='color:#b00'>{html.escape(advice)}</p>")
            continue
        gain = advice.gain
        headline = (f"co-designed / direct port predicted throughput {advice.gain_text} (both at global batch "
                    f"{advice.co_designed.batch.global_batch})" if gain is not None
                    else "no direct port to compare with")
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in advice.notes)
        revisions = advice.revisions_frame()
        if not revisions.empty:
            revisions = revisions[["kind", "name", "field", "old", "new", "predicted_gain", "verdict", "applied",
                                   "requires_retraining", "reason"]]
        parts.append(
            f"<h4>{html.escape(source)} &rarr; {name}: {headline}</h4>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + advice.as_frame().to_html(index=False, border=0, classes="wb-table", na_rep="")
            + ("<p><b>Changes and proposals</b> (gains from the core model, each +/- "
               f"{advice.gain_uncertainty:.0%}: inside that, \"no measurable gain\"; proposals change the model's "
               "math and need retraining, they are never applied)</p>"
               + revisions.to_html(index=False, border=0, classes="wb-table", float_format=lambda v: f"{v:.3f}")
               if not revisions.empty else "<p>No revisions.</p>"))
    return "".join(parts)


def advice_prompt(state: WorkbenchState) -> str:
    """What the button will compare, or why there is nothing to compare."""
    if len(state.gpus) < 2:
        return ("<i>Direct port vs co-designed: choose two or more GPUs; the first is the source the recipe is "
                "ported from.</i>")
    targets = ", ".join(state.gpus[1:])
    return (f"<i>Direct port vs co-designed: the best recipe for <b>{html.escape(state.gpus[0])}</b> run unchanged on "
            f"{html.escape(targets)}, against the advisor's co-designed recipe there (searches; press the button).</i>")
