"""The workbench's tables and text summary, in words: headers a person reads, each number in its one format
(``widgets.formatting``), the stack every number is for, and no step time or MFU for what does not fit.

    >>> from widgets.data import Predictor
    >>> from widgets.state import WorkbenchState
    >>> rows = summary_table(Predictor().compare(WorkbenchState(gpus=("h200",))))
    >>> rows[0]["MFU"]
    '59.3% of the bf16 dense peak'
"""

from __future__ import annotations

import html

import pandas as pd

from workbench.hardware import get_gpu
from widgets.data import Comparison
from widgets.formatting import (
    BOUND_LABEL, count, gb, gpus_text, host_text, mfu, ms, prediction_stack_label, priced_as_bound, stack_label,
    tokens_header, yes_no,
)

FIT_NOTE = "does not fit:"
"""The core's note for memory that does not fit; the tables say it in their memory column instead."""


def stack_caption(comparison: Comparison) -> str:
    """One line above the Step time table: which stack its numbers are for, and what the bound means."""
    s = comparison.state
    label = stack_label(s.stack, s.compile)
    text = f"Predicted for: {label}."
    if label == BOUND_LABEL:
        text += (" Every elementwise op is one fused kernel moving the fewest bytes and the CPU costs nothing; no "
                 "stack runs this fast (choose a stack to see what one does).")
    elif bounded := [p.gpu.display_name for p in comparison.predictions.values() if priced_as_bound(p)]:
        text += (f" Outside the stack's kernel tables (see the notes), {', '.join(bounded)} "
                 f"{'is' if len(bounded) == 1 else 'are'} priced as the {BOUND_LABEL}.")
    return text


def summary_table(comparison: Comparison) -> list[dict[str, str]]:
    """One row per GPU (header in words -> formatted value): stack, step time, host time, tokens/s in total and
    per GPU, MFU against its peak, memory against the usable HBM, the largest micro-batch, notes. A
    configuration that does not fit has no step time, tokens/s or MFU: its memory says by how much, and what
    fits instead."""
    n = comparison.state.gpu_count
    rows = []
    any_host = any(p.summary.host_s > 0 for p in comparison.predictions.values())
    for name, p in comparison.predictions.items():
        s = p.summary
        problem = comparison.fit.get(name)
        row = {"GPU": p.gpu.display_name, "stack": prediction_stack_label(p, comparison.state.compile),
               "precision": p.precision.effective.name, "calibrated": yes_no(p.calibrated)}
        if problem is None:
            row.update({"step time": ms(s.step_time_s), tokens_header(n): count(s.tokens_per_s),
                        "tokens/s per GPU": count(s.tokens_per_s / s.gpus), "MFU": mfu(p),
                        "memory per GPU": f"{gb(s.memory.total)} of {gb(s.memory.usable)} usable"})
        else:
            row.update({"step time": "", tokens_header(n): "", "tokens/s per GPU": "", "MFU": "",
                        "memory per GPU": problem.text()})
        if any_host:
            row["CPU launch time"] = "" if problem else (host_text(p) or "none")
        row.update({"fits": yes_no(problem is None), "largest micro-batch that fits": _largest(s.max_micro_batch),
                    "notes": "; ".join(note for note in p.notes if not note.startswith(FIT_NOTE))})
        rows.append(row)
    for name, error in comparison.errors.items():
        rows.append({"GPU": get_gpu(name).display_name, "notes": f"not predicted: {error}"})
    return rows


def _largest(micro_batch: int) -> str:
    return f"{int(micro_batch):,}" if micro_batch else "none"


def memory_table(frame: pd.DataFrame) -> list[dict[str, str]]:
    """One row per GPU and activation-checkpointing mode of the Memory tab's frame
    (``widgets.data.memory_by_checkpointing``): total against usable HBM, whether it fits, the largest micro-batch."""
    modes = frame.drop_duplicates(["gpu", "mode"])
    return [{"GPU": r.gpu, "activation checkpointing": r.mode, "memory per GPU": f"{r.total_gb:,.1f} GB",
             "usable HBM": f"{r.usable_gb:,.1f} GB of {r.capacity_gb:,.1f} GB", "fits": yes_no(r.fits),
             "largest micro-batch that fits": _largest(r.max_micro_batch)} for r in modes.itertuples(index=False)]


def op_detail_rows(detail: dict[str, object]) -> list[tuple[str, str]]:
    """``widgets.data.op_detail`` as (label, text): times in ms, the share of the step as a percentage."""
    out = []
    for key, value in detail.items():
        if key == "share of step":
            text = f"{value:.1%}"
        elif key.endswith("(ms)"):
            key, text = key.removesuffix(" (ms)"), ms(value / 1e3)
        elif isinstance(value, float):
            text = f"{value:,.4g}"
        else:
            text = str(value)
        out.append((key, text))
    return out


def op_detail_html(detail: dict[str, object]) -> str:
    rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in op_detail_rows(detail))
    return f"<table class='wb-op-table'>{rows}</table>"


def summary_text(comparison: Comparison) -> str:
    """A plain-text prediction summary (the widget's text representation, e.g. in saved notebooks)."""
    s = comparison.state
    lines = [f"Workbench: {s.model}, {s.precision}, micro-batch {s.micro_batch}, sequence length {s.seq_len:,}, "
             f"{gpus_text(s.gpu_count)} of each type, activation checkpointing {s.checkpointing}",
             f"  predicted for: {stack_label(s.stack, s.compile)}"]
    for name, p in comparison.predictions.items():
        m = p.summary
        if name in comparison.fit:
            lines.append(f"  {p.gpu.display_name}: {comparison.fit[name].text()}")
            continue
        line = (f"  {p.gpu.display_name}: step {ms(m.step_time_s)}, {count(m.tokens_per_s)} tokens/s total over "
                f"{gpus_text(m.gpus)} ({count(m.tokens_per_s / m.gpus)} per GPU), MFU {mfu(p)}, "
                f"memory {gb(m.memory.total)} of {gb(m.memory.usable)} usable per GPU")
        if host := host_text(p):
            line += f"; {host}"
        lines.append(line)
    lines += [f"  {get_gpu(name).display_name}: not predicted: {error}" for name, error in comparison.errors.items()]
    return "\n".join(lines)
