"""Every number says what it is: one format per quantity, the stack, the peak MFU is against, what does not fit.

The rendered tables are scanned as a reader sees them: headers in words, "yes"/"no", no raw fractions."""

import re

import pytest

import workbench
from widgets import formatting, tables
from widgets.data import Predictor, step_breakdown
from widgets.state import WorkbenchState

SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")


def _headers(html: str) -> list[str]:
    return re.findall(r"<th[^>]*>(.*?)</th>", html)


def _cells(html: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", html)


def test_one_format_per_quantity():
    assert formatting.percent(0.5738) == "57.4%" and formatting.percent(0.5932) == "59.3%"
    assert formatting.ms(0.33673) == "336.7 ms" and formatting.ms(2.9041) == "2,904.1 ms"
    assert formatting.ms(52.3e-6) == "52.3 µs" and formatting.ms(None) == ""
    assert formatting.gb(165.2e9) == "165.2 GB" and formatting.count(97345.4) == "97,345"
    assert formatting.yes_no(True) == "yes" and formatting.yes_no(False) == "no"
    assert formatting.tokens_header(8) == "tokens/s (total over 8 GPUs)"
    assert formatting.tokens_header(1) == "tokens/s (total over 1 GPU)"


def test_mfu_says_which_peak_it_is_against():
    bf16 = workbench.predict("llama3-8b", "h200", micro_batch=1, seq_len=4096, gpus=8)
    assert formatting.mfu(bf16) == f"{bf16.summary.mfu:.1%} of the bf16 dense peak"
    fp8 = workbench.predict("llama3-8b", "h200", micro_batch=1, seq_len=4096, gpus=8, precision="fp8")
    assert formatting.mfu(fp8).endswith("% of the fp8 dense peak")
    # no fp8 on A100: modelled as bf16, so its MFU is against the bf16 peak it ran at
    a100 = workbench.predict("llama3-8b", "a100-sxm-80gb", micro_batch=1, seq_len=4096, gpus=8, precision="fp8",
                             allow_fallback=True)
    assert formatting.mfu(a100).endswith("% of the bf16 dense peak")


def test_ideal_is_labelled_a_bound_everywhere_its_numbers_are():
    # named: the default is torchtitan now (it was the bound)
    comparison = Predictor().compare(WorkbenchState().replace(gpus=("h200", "b200"), seq_len=4096, stack="ideal"))
    assert formatting.stack_label("ideal") == formatting.BOUND_LABEL == (
        "ideal fused step — a bound, not a measured stack")
    assert formatting.BOUND_LABEL in tables.stack_caption(comparison)
    assert {row["stack"] for row in tables.summary_table(comparison)} == {formatting.BOUND_LABEL}
    assert formatting.BOUND_LABEL in tables.summary_text(comparison)
    assert formatting.stack_label("torchtitan", compile=True) == "torchtitan, torch.compile"
    assert formatting.stack_label("torchtitan") == "torchtitan, eager"
    assert formatting.stack_label("pytorch-eager") == "Plain PyTorch, eager"


def test_a_stack_outside_its_kernel_tables_says_it_was_priced_as_the_bound():
    p = workbench.predict("gpt2-small", "h200", micro_batch=1, seq_len=1024, gpus=8,
                          stack="torchtitan")  # GPT-2 (layernorm, gelu) is outside torchtitan's tables
    assert formatting.priced_as_bound(p)
    assert formatting.prediction_stack_label(p) == (
        f"torchtitan, eager (outside its kernel tables: {formatting.BOUND_LABEL})")
    comparison = Predictor().compare(WorkbenchState().replace(model="gpt2-small", gpus=("h200",), stack="torchtitan"))
    assert tables.stack_caption(comparison).endswith(
        f"NVIDIA H200 SXM 141GB is priced as the {formatting.BOUND_LABEL}.")
    step = step_breakdown(comparison)
    assert "priced as the ideal fused step (a bound)" in step[step["layer"] == "note"]["text"].iloc[0]


def test_host_time_is_shown_and_cpu_bound_steps_say_so():
    p = workbench.predict("llama3.2-1b", "b200", micro_batch=1, seq_len=512, gpus=1, stack="pytorch-eager")
    assert p.summary.host_s >= formatting.device_s(p)
    assert formatting.host_text(p) == (f"CPU-bound: the CPU needs {formatting.ms(p.summary.host_s)} to launch the "
                                       f"step (the GPU needs {formatting.ms(formatting.device_s(p))})")
    comparison = Predictor().compare(WorkbenchState().replace(
        model="llama3.2-1b", gpus=("b200",), micro_batch=1, seq_len=512, gpu_count=1, stack="pytorch-eager",
        global_batch=1))  # one micro-batch per step, as the prediction above
    row = tables.summary_table(comparison)[0]
    assert row["CPU launch time"].startswith("CPU-bound: the CPU needs")
    frame = step_breakdown(comparison)  # the GPU's wait is a part of the bar: the parts still add up to the step
    parts = frame[frame["layer"] == "part"]
    assert parts["ms"].sum() == pytest.approx(p.summary.step_time_s * 1e3)
    assert parts.set_index("part").loc["GPU waits for the CPU", "ms"] > 0
    assert step_breakdown(comparison).query("layer == 'note'")["text"].iloc[0].startswith("CPU-bound: the CPU needs")
    ideal = workbench.predict("llama3.2-1b", "b200", micro_batch=1, seq_len=512, gpus=1, stack="ideal")
    assert ideal.summary.host_s == 0 and formatting.host_text(ideal) == ""


def test_a_configuration_that_does_not_fit_has_no_numbers_and_offers_what_fits():
    state = WorkbenchState().replace(gpus=("h200", "b200"), micro_batch=16, seq_len=4096)
    comparison = Predictor().compare(state)
    h200 = comparison.predictions["h200-sxm"]
    assert not h200.summary.memory.fits and 0 < h200.summary.max_micro_batch < 16
    problem = comparison.fit["h200-sxm"]
    assert problem.text() == (f"does not fit: needs {formatting.gb(h200.summary.memory.total)} of "
                              f"{formatting.gb(h200.summary.memory.usable)} usable "
                              f"({formatting.gb(h200.summary.memory.total - h200.summary.memory.usable)} over); "
                              f"micro-batch {h200.summary.max_micro_batch} fits")
    assert problem.changes == {"micro_batch": h200.summary.max_micro_batch}
    fits = Predictor().compare(state.replace(micro_batch=h200.summary.max_micro_batch))
    assert fits.predictions["h200-sxm"].summary.memory.fits  # the offer is true
    row = tables.summary_table(comparison)[0]
    assert row["step time"] == row["MFU"] == row["tokens/s (total over 8 GPUs)"] == ""
    assert row["memory per GPU"] == problem.text() and row["fits"] == "no"
    assert not any(n.startswith("does not fit") for n in row["notes"].split("; "))  # said once, in its column


def test_more_checkpointing_is_offered_when_no_micro_batch_fits():
    comparison = Predictor().compare(WorkbenchState().replace(
        model="llama3-70b", gpus=("h200",), micro_batch=1, seq_len=8192, gpu_count=16))
    assert comparison.predictions["h200-sxm"].summary.max_micro_batch == 0  # no micro-batch fits without
    text = comparison.fit["h200-sxm"].text()
    assert text.startswith("does not fit: needs ") and text.endswith(
        "; with full activation checkpointing, micro-batch 1 fits")
    offered = Predictor().compare(comparison.state.replace(checkpointing="full"))
    assert offered.predictions["h200-sxm"].summary.memory.fits


def test_rendered_tables_have_headers_in_words_and_yes_no():
    comparison = Predictor().compare(WorkbenchState().replace(
        gpus=("h200", "a100-sxm-80gb"), precision="fp8", micro_batch=16, seq_len=4096, calibrated=True))
    html = formatting.html_table(tables.summary_table(comparison))
    assert _headers(html) and not [h for h in _headers(html) if SNAKE.search(h)]
    cells = _cells(html)
    assert not {"True", "False"} & set(cells) and "yes" in cells and "no" in cells
    assert not [c for c in cells if re.fullmatch(r"0\.\d+", c)]  # no raw fractions (an MFU as 0.5738)
    assert not [c for c in cells if c in ("h200-sxm", "a100-sxm-80gb")]  # display names, not ids


def test_uncertainty_says_where_it_comes_from_and_never_invents_a_number():
    from workbench.validation import uncertainty, validation_record

    titan = uncertainty("h200", "torchtitan")
    record = validation_record("h200", "torchtitan")
    assert titan.relative == record.step_mape and formatting.uncertainty_short(titan) == f"± {record.step_mape:.1%}"
    text = formatting.uncertainty_text(titan, gpus=8)
    assert text.startswith(f"± {record.step_mape:.1%}: the mean step-time error over {record.count} measured")
    assert "communication on 8 GPUs is not validated" in text
    assert "not validated" not in formatting.uncertainty_text(titan, gpus=1)
    b200 = uncertainty("b200", "torchtitan")  # no run on a B200: no number for it, the H200's named as such
    assert b200.relative is None and formatting.uncertainty_short(b200) == "not validated on this GPU"
    assert formatting.uncertainty_text(b200) == (
        f"not validated on this GPU: the torchtitan step's error on the NVIDIA H200 SXM 141GB is "
        f"± {record.step_mape:.1%} ({record.count} runs)")
    ideal = uncertainty("h200", "ideal")  # a bound: one-sided, no ±
    assert ideal.relative is None and formatting.uncertainty_short(ideal) == "a bound"
    assert formatting.uncertainty_text(ideal).startswith("a bound: ") and "below the measured" in formatting.uncertainty_text(ideal)
    assert formatting.uncertainty_text(uncertainty("mi350x", "ideal")).startswith(
        "not validated on this GPU: the ideal bound's error on the NVIDIA H200 SXM 141GB is ")
    job = uncertainty("h200", "workbench-job")  # no run of the reference job in the record: says so
    assert job.relative is None and formatting.uncertainty_text(job).startswith("not validated: no measured runs")


def test_tables_show_the_uncertainty_beside_each_number():
    comparison = Predictor().compare(WorkbenchState().replace(gpus=("h200", "b200"), seq_len=4096, stack="torchtitan"))
    h200, b200 = tables.summary_table(comparison)
    plus = formatting.uncertainty_short(comparison.uncertainty["h200-sxm"])
    assert plus.startswith("± ")
    for column in ("step time", "tokens/s (total over 8 GPUs)", "tokens/s per GPU", "MFU"):
        assert h200[column].endswith(plus) and "±" not in b200[column]
    assert b200["how far to trust this"].startswith("not validated on this GPU")
    html = formatting.html_table([h200, b200])
    assert not [h for h in _headers(html) if SNAKE.search(h)]
