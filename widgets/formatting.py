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
from workbench.hardware import get_gpu
from workbench.stacks import Stack, get_stack
from workbench.validation import Uncertainty, ValidationRecord

BOUND_LABEL = "ideal fused step — a bound, not a measured stack"
"""What the ``ideal`` stack (``Stack.bound``) is called wherever its step time, tokens/s or MFU are shown."""


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def ms(seconds: float | None) -> str:
    """A time in milliseconds with one decimal ("336.7 ms"); below 1 ms in microseconds ("52.3 µs"). Step times
    of seconds stay in ms ("21,540.3 ms"): one unit per quantity."""
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


def _record_gpu(record: ValidationRecord) -> str:
    return get_gpu(record.gpu).display_name


def _bound_error(record: ValidationRecord) -> str:
    return (f"{percent(record.step_mape)} below the measured {_record_gpu(record)} steps on average "
            f"({record.count} runs, at most {percent(abs(record.worst_step_error or 0))} below)")


def uncertainty_short(u: Uncertainty) -> str:
    """What goes right after a step time, tokens/s or MFU: "± 3.9%", "a bound", or "not validated"."""
    if u.relative is not None:
        return f"± {percent(u.relative)}"
    if u.record is not None and u.record.bound:
        return "a bound"
    return "not validated on this GPU" if u.reference is not None else "not validated"


def uncertainty_text(u: Uncertainty, gpus: int = 1) -> str:
    """How far to trust a prediction, in one sentence, from its validation record (``workbench.validation``):
    the mean step-time error of the measured runs on this GPU and stack (tokens/s and MFU scale with the step);
    for the ideal stack how far below measured runs the bound sits; for a GPU without runs, the record of the GPU
    that has them -- never a number for a GPU that was not measured. ``gpus``: the prediction's GPU count (the
    record's runs are one GPU each, so communication is not validated)."""
    stack = get_stack(u.stack)
    r = u.record
    if r is not None and r.bound:
        text = f"a bound: {_bound_error(r)}" if r.count else "a bound (no measured run to compare with)"
    elif r is not None and r.count:
        text = (f"± {percent(r.step_mape)}: the mean step-time error over {r.count} measured "
                f"{_record_gpu(r)} runs of this stack (worst {r.worst_step_error:+.1%}); tokens/s and MFU scale "
                "with the step")
    elif r is not None:
        text = "not validated: every measured run of this stack here fitted its constants or is outside its tables"
    elif u.reference is not None and u.reference.count:
        ref = u.reference
        what = (f"the ideal bound's error on the {_record_gpu(ref)} is {percent(ref.step_mape)}" if ref.bound else
                f"the {stack.display_name} step's error on the {_record_gpu(ref)} is ± {percent(ref.step_mape)}")
        text = f"not validated on this GPU: {what} ({ref.count} runs)"
    else:
        where = f" (its validation: {stack.validation})" if stack.validation else ""
        text = f"not validated: no measured runs of {stack.display_name} in the validation record{where}"
    measured = sorted({run.run.gpus for run in (r.runs if r else ())})
    if r is not None and gpus > max(measured or [1]):
        text += f"; measured on {gpus_text(max(measured or [1]))}, so communication on {gpus_text(gpus)} is not validated"
    return text


_NUMBER = re.compile(r"^[\d,.]+(%| ms| µs| GB| s)?( ± [\d.]+%)?$")
_NUMBER_CLASS = " class='wb-num'"
"""Cells that are one number (with its unit and uncertainty) do not break across lines; an MFU with its peak
("55.6% of the bf16 dense peak ± 3.6%") may, or it alone would widen the Step time table past its tab."""


_LONG_CLASS = " class='wb-long'"
"""Cells of a long text column (a file path, a reason) break anywhere rather than widen the table."""


def html_table(rows: list[dict[str, object]], css_class: str = "wb-table",
               long_columns: tuple[str, ...] = ()) -> str:
    """Rows of already formatted values (header in words -> text) as an HTML table; every value escaped.
    ``long_columns``: headers whose cells may break anywhere (``_LONG_CLASS``)."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return "<i>nothing to show</i>"
    frame = frame.fillna("").astype(str)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    long = [c in long_columns for c in frame.columns]

    def cell(value: str, is_long: bool) -> str:
        css = _LONG_CLASS if is_long else _NUMBER_CLASS if _NUMBER.match(value) else ""
        return f"<td{css}>{html.escape(value)}</td>"

    body = "".join("<tr>" + "".join(cell(v, is_long) for v, is_long in zip(row, long)) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f"<table class='{css_class}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
