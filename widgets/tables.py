"""The workbench's tables and text summary, in words: headers a person reads, each number in its one format
(``widgets.formatting``), the stack every number is for, and no step time or MFU for what does not fit.

    >>> from widgets.data import Predictor
    >>> from widgets.state import WorkbenchState
    >>> rows = summary_table(Predictor().compare(WorkbenchState(gpus=("h200",))))
    >>> rows[0]["MFU"]                 # the ideal stack: a bound, so no "± x%"
    '60.9% of the bf16 dense peak'
"""

from __future__ import annotations

import html

import pandas as pd

from workbench.hardware import get_gpu
from workbench.models import Model, get_model
from workbench.stacks import get_stack
from workbench.validation import Uncertainty, ValidationRecord
from widgets.data import SHARDING_WORDS, Comparison, uncertainty_for
from widgets.formatting import (
    BOUND_LABEL, count, gb, gpus_text, host_text, html_table, mfu, ms, prediction_stack_label, priced_as_bound,
    stack_label, tokens_header, uncertainty_short, uncertainty_text, yes_no,
)
from widgets.state import WorkbenchState, resolved_global_batch

FIT_NOTE = "does not fit:"
"""The core's note for memory that does not fit; the tables say it in their memory column instead."""


def configuration_text(state: WorkbenchState, model: Model) -> str:
    """The split and batch in words: "8 GPUs = dp 8 × tp 1 × pp 1 (FSDP), global batch 1,024 samples (auto) =
    micro-batch 1 × dp 8 × 128 accumulation steps"."""
    dp = state.dp
    global_batch = resolved_global_batch(state, model)
    cp = f" × cp {state.cp}" if state.cp > 1 else ""
    extra = [f"ep {state.ep}"] if state.ep > 1 else []
    extra += [f"{state.virtual_stages} virtual stages per pipeline rank"] if state.virtual_stages > 1 else []
    extra += [f"LoRA rank {state.lora_rank}"] if state.lora_rank else []
    accumulation = global_batch // (state.micro_batch * dp)
    return (f"{gpus_text(state.gpu_count)} = dp {dp} × tp {state.tp} × pp {state.pp}{cp} "
            f"({', '.join([SHARDING_WORDS.get(state.sharding, state.sharding), *extra])}), global batch {global_batch:,} samples{' (auto)' if not state.global_batch else ''}"
            f" = micro-batch {state.micro_batch} × dp {dp} × {accumulation:,} accumulation step"
            f"{'s' if accumulation != 1 else ''}")


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
        trust = comparison.uncertainty.get(name) or uncertainty_for(p)
        if problem is None:
            plus = f" {uncertainty_short(trust)}" if trust.relative is not None else ""
            row.update({"step time": ms(s.step_time_s) + plus, tokens_header(n): count(s.tokens_per_s) + plus,
                        "tokens/s per GPU": count(s.tokens_per_s / s.gpus) + plus, "MFU": mfu(p) + plus,
                        "how far to trust this": uncertainty_text(trust, s.gpus),
                        "memory per GPU": f"{gb(s.memory.total)} of {gb(s.memory.usable)} usable"})
        else:
            row.update({"step time": "", tokens_header(n): "", "tokens/s per GPU": "", "MFU": "",
                        "how far to trust this": "", "memory per GPU": problem.text()})
        if any_host:
            row["CPU launch time"] = "" if problem else (host_text(p) or "none")
        row.update({"fits": yes_no(problem is None), "largest micro-batch that fits": _largest(s.max_micro_batch),
                    "notes": "; ".join(note for note in p.notes if not note.startswith(FIT_NOTE))})
        rows.append(row)
    for name, error in comparison.errors.items():
        rows.append({"GPU": get_gpu(name).display_name, "notes": f"not predicted: {error}"})
    return rows


DETAIL_COLUMNS: tuple[str, ...] = ("how far to trust this", "CPU launch time", "notes")
"""The summary table's sentences: the Step time tab shows them under the table, one entry per GPU
(``summary_html``), so the columns of numbers stay narrow enough to read side by side."""


def summary_html(comparison: Comparison) -> str:
    """``summary_table`` as the Step time tab shows it: the numbers in a table (a configuration that does not fit
    says by how much in its memory column), then per GPU the sentences: what does not fit and the nearest
    configuration that does, how far to trust the numbers, the CPU's launch time, the notes."""
    problems = {p.gpu.display_name: comparison.fit.get(g) for g, p in comparison.predictions.items()}
    table, entries = [], []
    for row in summary_table(comparison):
        problem = problems.get(row["GPU"])
        short = {k: v for k, v in row.items() if k not in DETAIL_COLUMNS}
        details = [f"{k}: {row[k]}" for k in DETAIL_COLUMNS if row.get(k)]
        if problem is not None:
            short["memory per GPU"] = problem.shortfall().removeprefix("does not fit: needs ")
            details.insert(0, problem.text())
        table.append(short)
        if details:
            entries.append(f"<li><b>{html.escape(row['GPU'])}</b><br>"
                           + "<br>".join(html.escape(d) for d in details) + "</li>")
    return html_table(table) + (f"<ul class='wb-summary-details'>{''.join(entries)}</ul>" if entries else "")


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
    model = next(iter(comparison.predictions.values())).model if comparison.predictions else get_model(s.model)
    lines = [f"Workbench: {s.model}, {s.precision}, sequence length {s.seq_len:,}, activation checkpointing "
             f"{s.checkpointing}; per GPU type: {configuration_text(s, model)}",
             f"  predicted for: {stack_label(s.stack, s.compile)}"]
    for name, p in comparison.predictions.items():
        m = p.summary
        if name in comparison.fit:
            lines.append(f"  {p.gpu.display_name}: {comparison.fit[name].text()}")
            continue
        trust = comparison.uncertainty.get(name) or uncertainty_for(p)
        line = (f"  {p.gpu.display_name}: step {ms(m.step_time_s)}, {count(m.tokens_per_s)} tokens/s total over "
                f"{gpus_text(m.gpus)} ({count(m.tokens_per_s / m.gpus)} per GPU), MFU {mfu(p)}, "
                f"memory {gb(m.memory.total)} of {gb(m.memory.usable)} usable per GPU; {uncertainty_text(trust, m.gpus)}")
        if host := host_text(p):
            line += f"; {host}"
        lines.append(line)
    lines += [f"  {get_gpu(name).display_name}: not predicted: {error}" for name, error in comparison.errors.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- how far to trust


def trust_records(comparison: Comparison) -> list[tuple[str, Uncertainty, ValidationRecord | None]]:
    """Per chosen GPU: its display name, its uncertainty and the record whose rows to show -- its own, else the
    reference GPU's (once, for all GPUs that share it)."""
    out, shown = [], set()
    for name, p in comparison.predictions.items():
        trust = comparison.uncertainty.get(name) or uncertainty_for(p)
        record = trust.record or trust.reference
        key = None if record is None else (record.gpu, record.stack, record.calibrated)
        out.append((p.gpu.display_name, trust, None if key in shown else record))
        shown.add(key)
    return out


def validation_rows(record: ValidationRecord) -> list[dict[str, str]]:
    """One row per measured run of a record, predicted now: measured and predicted step time and peak memory with
    their errors (predicted / measured - 1), whether the run counts in the score, and its file."""
    rows = []
    for v in record.runs:
        r = v.run
        rows.append({"GPU measured": get_gpu(r.gpu).display_name, "stack that ran": stack_label(r.stack, r.compile),
                     "run": r.label, "role": r.role, "measured step": ms(r.measured_step_s),
                     "predicted step": ms(v.predicted_step_s), "step error": f"{v.step_error:+.1%}",
                     "measured peak reserved": f"{r.measured_peak_reserved_gb:,.1f} GB",
                     "predicted memory": f"{v.predicted_peak_gb:,.1f} GB", "memory error": f"{v.memory_error:+.1%}",
                     "counted in ±": yes_no(v.scored) + ("" if v.covered else " (outside the stack's tables)"),
                     "source": r.source})
    return rows


def validation_frame(record: ValidationRecord) -> pd.DataFrame:
    """The scatter's data: per run, measured and predicted step in ms, role and whether it is scored."""
    return pd.DataFrame([{"gpu": get_gpu(v.run.gpu).display_name, "run": v.run.label, "role": v.run.role,
                          "measured_ms": v.run.measured_step_s * 1e3, "predicted_ms": v.predicted_step_s * 1e3,
                          "error_pct": v.step_error * 100, "counted": yes_no(v.scored)} for v in record.runs])


def record_summary(record: ValidationRecord) -> str:
    """ "torchtitan on the NVIDIA H200 SXM 141GB: 12 runs, 10 counted: step error 3.9% on average (worst -6.8%),
    peak memory 9.7%" """
    head = (f"{BOUND_LABEL if record.bound else get_stack(record.stack).display_name} on the "
            f"{get_gpu(record.gpu).display_name}"
            f"{', calibrated' if record.calibrated else ''}: {len(record.runs)} measured runs, {record.count} counted")
    if not record.count:
        return head
    return (f"{head}: step error {record.step_mape:.1%} on average (worst {record.worst_step_error:+.1%}), peak "
            f"memory {record.memory_mape:.1%} on average")
