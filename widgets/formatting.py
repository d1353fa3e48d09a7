"""How the workbench writes a number: one format per quantity, and the words that say what each number is.

Every table, chart title, tooltip and text summary of the widget formats through these functions, so a step time
reads "336.7 ms" and an MFU "59.3% of the bf16 dense peak" wherever it appears:

    >>> ms(0.33673), percent(0.5932), gb(165.2e9), count(97345.4), yes_no(True)
    ('336.7 ms', '59.3%', '165.2 GB', '97,345', 'yes')

They format core results; they compute nothing of their own.
"""

from __future__ import annotations

import html
import math
import re

import pandas as pd

from workbench.memory import GB
from workbench.predict import Prediction
from workbench.stacks import Stack, get_stack

BOUND_LABEL = "ideal fused step — a bound, not a measured stack"
"""What the ``ideal`` stack (``Stack.bound``) is called wherever its step time, tokens/s or MFU are shown."""


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def ms(seconds: float | None) -> str:
    """A time in milliseconds with one decimal ("336.7 ms"); below 1 ms in microseconds ("52.3 µs")."""
    if _missing(seconds):
        return ""
    return f"{seconds * 1e3:,.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:,.1f} µs"


def gb(nbytes: float | None) -> str:
    """Bytes as GB (1e9, as ``workbench.memory``) with one decimal: "165.2 GB"."""
    return "" if _missing(nbytes) else f"{nbytes / GB:,.1f} GB"


def percent(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal: 0.5932 -> "59.3%"."""
    return "" if _missing(fraction) else f"{fraction:.1%}"


def count(value: float | None) -> str:
    """A rate or count with thousands separators and no decimals: "97,345"."""
    return "" if _missing(value) else f"{value:,.0f}"


def yes_no(value: object) -> str:
    return "" if _missing(value) else ("yes" if value else "no")


def mfu(prediction: Prediction) -> str:
    """The MFU with the peak it is counted against: "59.3% of the bf16 dense peak" (the precision that ran, which
    is the fallback's where the GPU lacks the requested one)."""
    return f"{percent(prediction.summary.mfu)} of the {prediction.precision.effective.peak_key} dense peak"


def gpus_text(gpus: int) -> str:
    """ "1 GPU", "8 GPUs" """
    return f"{gpus:,} GPU{'s' if gpus != 1 else ''}"


def tokens_header(gpus: int) -> str:
    return f"tokens/s (total over {gpus_text(gpus)})"


def priced_as_bound(prediction: Prediction) -> bool:
    """True when the step was priced as the fused-step bound: the ``ideal`` stack, or a configuration outside
    the chosen stack's kernel tables (``StepSummary.priced_as_bound``)."""
    return prediction.summary.priced_as_bound


def stack_label(stack: str | Stack, compile: bool = False) -> str:
    """A stack in words: the bound label for ``ideal``; else its display name, with compiled or eager where the
    stack follows the configuration's compile flag."""
    stack = get_stack(stack)
    if stack.bound:
        return BOUND_LABEL
    if stack.compile == "recipe":
        return f"{stack.display_name}, {'torch.compile' if compile else 'eager'}"
    return stack.display_name


def prediction_stack_label(prediction: Prediction, compile: bool = False) -> str:
    """``stack_label`` of the stack a prediction was made for, saying so when it was priced as the bound."""
    label = stack_label(prediction.summary.stack, compile)
    if label != BOUND_LABEL and priced_as_bound(prediction):
        return f"{label} (outside its kernel tables: {BOUND_LABEL})"
    return label


def device_s(prediction: Prediction) -> float:
    """The device's share of the step: the parts that add up to it (the step is the longer of this and the CPU
    launch time, ``StepSummary.host_s``)."""
    s = prediction.summary
    return s.compute_bound_s + s.memory_bound_s + s.communication_s + s.optimizer_s + s.bubble_s


def host_text(prediction: Prediction) -> str:
    """The CPU's launch time when the stack has one: "" for none; CPU-bound when it is at least the device time."""
    host = prediction.summary.host_s
    if host <= 0:
        return ""
    device = device_s(prediction)
    if host >= device:
        return f"CPU-bound: the CPU needs {ms(host)} to launch the step (the GPU needs {ms(device)})"
    return f"{ms(host)} to launch (hidden under the GPU's {ms(device)})"


_NUMBER = re.compile(r"^[\d,.]+(%| ms| µs| GB)?( of the \w+ dense peak)?$")
_NUMBER_CLASS = " class='wb-num'"
"""Cells that are one number (with its unit) do not break across lines."""


def html_table(rows: list[dict[str, object]], css_class: str = "wb-table") -> str:
    """Rows of already formatted values (header in words -> text) as an HTML table; every value escaped."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return "<i>nothing to show</i>"
    frame = frame.fillna("").astype(str)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td{_NUMBER_CLASS if _NUMBER.match(v) else ''}>{html.escape(v)}</td>"
                                    for v in row) + "</tr>" for row in frame.itertuples(index=False))
    return f"<table class='{css_class}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
