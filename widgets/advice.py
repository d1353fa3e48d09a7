"""The Step time tab's direct-port vs co-designed comparison, from the recipes advisor
(``workbench.recipe.advisor.advise``).

The first chosen GPU is the source: its best recipe (``workbench.recipe.search``) is run unchanged on every other
chosen GPU (the direct port) and compared with the best recipe for that GPU after the advisor's revisions (the
co-designed one). The advisor searches, so the tab computes this when asked (a button), not on every redraw.

What the advisor takes from the state (``advisor_controls``, ``advise``'s parameters), held fixed on both sides:
the model, the GPU count, the precision, the sequence length, the global batch (0: the search's standard), the
stack every recipe is priced for and its parameter dtype, the split (tp, pp, cp, ep, virtual stages, sharding) and
the LoRA rank (adapters on the core's default targets, ``workbench.config.DEFAULT_LORA_TARGETS``; 0: all weights
train). It searches the micro-batch with accumulation, activation checkpointing and, for a stack that follows it,
torch.compile. ``held_fixed`` says all this in the panel.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import altair as alt
import pandas as pd

from workbench.config import DEFAULT_LORA_TARGETS
from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.models import Model, get_model
from workbench.stacks import get_stack
from widgets import charts
from widgets.data import PARAM_DTYPE_WORDS, SHARDING_WORDS, has_calibration
from widgets.formatting import count, gb, gpus_text, html_table, ms, percent, yes_no
from widgets.state import PARALLEL_FIELDS, WorkbenchState


def advisor_controls(state: WorkbenchState) -> dict[str, object]:
    """The controls ``advise`` holds on both sides beyond model, GPUs and precision: sequence, global batch, stack
    and parameter dtype (None: the stack's default), split, sharding and LoRA rank, as its keyword arguments."""
    default_dtype = get_stack(state.stack).param_dtypes[0]
    return {"seq_len": state.seq_len, "global_batch": state.global_batch, "stack": state.stack,
            "param_dtype": None if state.param_dtype == default_dtype else state.param_dtype,
            **{name: getattr(state, name) for name in PARALLEL_FIELDS}, "sharding": state.sharding,
            "lora_rank": state.lora_rank}


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
                                 calibrated=calibrated, **advisor_controls(state))
        except WorkbenchError as exc:
            out[target] = str(exc)
    return out


def advice_frame(advices: Mapping[str, object]) -> pd.DataFrame:
    """Rows target, variant (direct port / co-designed), tokens_per_s, step_ms, fits (and fits_text, yes/no, for
    the tooltip): the comparison chart's data."""
    rows = []
    for target, advice in advices.items():
        if isinstance(advice, str):
            continue
        name = get_gpu(target).display_name
        for variant, recipe in (("direct port", advice.direct_port), ("co-designed", advice.co_designed)):
            if recipe is not None and recipe.predicted is not None:
                p = recipe.predicted
                rows.append({"target": name, "variant": variant, "tokens_per_s": p.tokens_per_s,
                             "step_ms": p.step_time_s * 1e3, "fits": p.fits, "fits_text": yes_no(p.fits)})
    return pd.DataFrame(rows, columns=["target", "variant", "tokens_per_s", "step_ms", "fits", "fits_text"])


def advice_chart(frame: pd.DataFrame, source: str) -> alt.Chart:
    """Predicted tokens/s per target GPU: the source's best recipe ported unchanged vs the co-designed one
    (``widgets.charts.port_chart``: each GPU named once, the source by its display name)."""
    return charts.port_chart(frame, get_gpu(source).display_name)


def _recipe_cell(setting: str, value: object) -> str:
    """One value of the advisor's recipe comparison in the workbench's formats."""
    if setting == "gpu":
        return get_gpu(str(value)).display_name if value else "none fits"
    if setting == "stack" and value:
        return get_stack(str(value)).display_name
    if isinstance(value, bool):
        return yes_no(value)
    if setting == "MFU" and isinstance(value, float):
        return percent(value)
    if setting.endswith("(ms)") and isinstance(value, (int, float)):
        return ms(value / 1e3)
    if setting.endswith("(GB)") and isinstance(value, (int, float)):
        return gb(value * 1e9)
    if setting == "samples/s" and isinstance(value, (int, float)):
        return f"{value:,.1f}"
    if isinstance(value, (int, float)):
        return count(value)
    return str(value)


REVISION_HEADERS: dict[str, str] = {
    "kind": "kind", "name": "change", "field": "model or recipe field", "old": "from", "new": "to",
    "gain_text": "predicted gain", "verdict": "verdict", "applied": "applied", "requires_retraining":
    "needs retraining", "reason": "why"}
"""The revisions table's columns (``Advice.revisions_frame``) with headers in words."""


def recipe_rows(advice) -> list[dict[str, str]]:
    """The direct-port and co-designed recipes side by side, formatted (``Advice.as_frame``)."""
    frame = advice.as_frame()
    words = {"tokens/s": f"tokens/s (total over {gpus_text(advice.co_designed.target.gpus)})",
             "samples/s": f"samples/s (total over {gpus_text(advice.co_designed.target.gpus)})",
             "peak memory (GB)": "peak memory per GPU", "MFU": "MFU (of the dense peak of the precision)"}
    return [{"setting": words.get(r.setting, str(r.setting).replace("(ms)", "").strip()),
             "direct port": _recipe_cell(r.setting, r.direct_port), "co-designed": _recipe_cell(r.setting, r.co_designed)}
            for r in frame.itertuples(index=False)]


def revision_rows(advice) -> list[dict[str, str]]:
    """Every revision the advisor considered, headers in words, yes/no, the gain as the advisor words it."""
    frame = advice.revisions_frame()
    return [{header: yes_no(getattr(r, column)) if isinstance(getattr(r, column), bool) else str(getattr(r, column))
             for column, header in REVISION_HEADERS.items()} for r in frame.itertuples(index=False)]


def held_fixed(state: WorkbenchState) -> str:
    """What the advisor holds fixed from the state and what it searches (plain text)."""
    batch = f"global batch {state.global_batch:,}" if state.global_batch else "global batch auto (the search's standard)"
    split = ", ".join([f"{name.replace('_', ' ')} {getattr(state, name)}" for name in PARALLEL_FIELDS]
                      + [SHARDING_WORDS.get(state.sharding, state.sharding)])
    training = (f"LoRA rank {state.lora_rank} on {', '.join(DEFAULT_LORA_TARGETS)}" if state.lora_rank
                else "all weights trained (no LoRA)")
    stack = get_stack(state.stack)
    priced = "the ideal fused step (a bound)" if stack.bound else stack.display_name
    searched = [f"micro-batch with accumulation (yours: {state.micro_batch})",
                f"activation checkpointing (yours: {state.checkpointing})"]
    if stack.compile == "recipe":
        searched.append(f"eager or torch.compile (yours: {'torch.compile' if state.compile else 'eager'})")
    try:
        model = get_model(state.model).display_name or state.model
    except WorkbenchError:  # a user's model: the advisor refuses it, and says so
        model = state.model
    dtype = PARAM_DTYPE_WORDS.get(str(state.param_dtype), str(state.param_dtype))
    return (f"Held fixed on both sides: {model}, {gpus_text(state.gpu_count)} per GPU type, {state.precision}, "
            f"sequence {state.seq_len:,}, {batch}, split {split}, {training}; every recipe priced as {priced} with "
            f"{dtype}. Searched by the advisor: {', '.join(searched)}.")


def advice_html(advices: Mapping[str, object], source: str, state: WorkbenchState | None = None) -> str:
    """Per target: the predicted gain, the advisor's notes, every revision with its own predicted gain, and the
    two recipes side by side (headers in words, the workbench's number formats, display names); with ``state``,
    first what the comparison holds fixed (``held_fixed``)."""
    parts = [f"<p class='wb-advice-fixed'><i>{html.escape(held_fixed(state))}</i></p>"] if state is not None else []
    source_name = html.escape(get_gpu(source).display_name)
    for target, advice in advices.items():
        name = html.escape(get_gpu(target).display_name)
        if isinstance(advice, str):
            parts.append(f"<h4>{source_name} &rarr; {name}</h4><p style='color:#b00'>{html.escape(advice)}</p>")
            continue
        gain = advice.gain
        headline = (f"co-designed / direct port predicted throughput {advice.gain_text} (both at global batch "
                    f"{advice.co_designed.batch.global_batch:,})" if gain is not None
                    else "no direct port to compare with")
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in advice.notes)
        revisions = revision_rows(advice)
        parts.append(
            f"<h4>{source_name} &rarr; {name}: {html.escape(headline)}</h4>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + html_table(recipe_rows(advice))
            + ("<p><b>Changes and proposals</b> (gains from the core model, each ± "
               f"{advice.gain_uncertainty:.0%}: inside that, \"no measurable gain\"; proposals change the model's "
               "math and need retraining, they are never applied)</p>" + html_table(revisions)
               if revisions else "<p>No revisions.</p>"))
    return "".join(parts)


def advice_prompt(state: WorkbenchState) -> str:
    """What the button will compare, or why there is nothing to compare."""
    if len(state.gpus) < 2:
        return ("<i>Direct port vs co-designed: choose two or more GPUs; the first is the source the recipe is "
                "ported from.</i>")
    source = get_gpu(state.gpus[0]).display_name
    targets = ", ".join(get_gpu(g).display_name for g in state.gpus[1:])
    return (f"<i>Direct port vs co-designed: the best recipe for <b>{html.escape(source)}</b> run unchanged on "
            f"{html.escape(targets)}, against the advisor's co-designed recipe there (searches; press the button). "
            f"{html.escape(held_fixed(state))}</i>")
