"""The validation record: measured runs as data, predicted live, scored per GPU and stack."""

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

from workbench.errors import SpecError
from workbench.validation import (
    load_runs, measured_runs, predict_row, uncertainty, validation_dir, validation_record,
)

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    folder = ROOT / "benchmarks" / "stacks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def test_the_shipped_record_is_what_the_measurements_give():
    export = _script("export_validation")
    assert (validation_dir() / "h200_stacks.yaml").read_text(encoding="utf-8") == export.text()
    runs = measured_runs()
    assert len(runs) == len(_script("evaluate").rows()) and {r.gpu for r in runs} == {"h200-sxm"}
    assert {r.stack for r in runs} == {"pytorch-eager", "pytorch-compile", "torchtitan", "megatron-local",
                                       "deepspeed-zero2", "deepspeed-zero3"}
    assert all(r.source.startswith("benchmarks/results/h200/stacks/") and (ROOT / r.source).exists() for r in runs)


def test_the_record_scores_what_evaluate_reports():
    """The widget's ± and the committed evaluation agree: the same rows, the same mapping."""
    table = _script("evaluate").evaluate()
    for stack in ("pytorch-eager", "pytorch-compile", "torchtitan"):
        rows = [t for t in table if t["stack"] == stack and t["covered"] and t["role"] != "fit"]
        expected = statistics.mean(abs(t["spec_s"] / t["measured_s"] - 1) for t in rows)
        record = validation_record("h200", stack)
        assert record.count == len(rows) and record.step_mape == pytest.approx(expected, rel=1e-3)
        assert abs(record.worst_step_error) == pytest.approx(max(abs(t["spec_s"] / t["measured_s"] - 1) for t in rows),
                                                             rel=1e-3)
    ideal = validation_record("h200", "ideal")
    assert ideal.bound and ideal.count == len(table)
    assert ideal.step_mape == pytest.approx(statistics.mean(abs(t["ideal_s"] / t["measured_s"] - 1) for t in table),
                                            rel=1e-3)
    assert all(r.step_error < 0 for r in ideal.runs)  # a bound: faster than every measured run


def test_a_run_predicted_by_hand_matches_the_record():
    record = validation_record("h200", "pytorch-compile")
    run = record.runs[0]
    p = predict_row(run.run.as_row(), gpu="h200")
    assert p.summary.step_time_s == run.predicted_step_s and p.summary.stack == "pytorch-compile"
    assert run.run.model_changes == {} or run.run.built_model().num_layers == 4


def test_a_gpu_or_stack_without_runs_has_no_number():
    assert validation_record("b200", "torchtitan") is None
    u = uncertainty("b200", "torchtitan")
    assert u.relative is None and not u.validated and u.reference.gpu == "h200-sxm"
    assert uncertainty("h200", "workbench-job").record is None and uncertainty("h200", "workbench-job").reference is None


@pytest.mark.parametrize("change, field", [
    ("role: test", "role"), ("measured_step_s: 0.055991", "measured_step_s"), ("stack: pytorch-eager", "stack"),
    ("model_changes: {}", "model_changes"),
])
def test_a_bad_record_names_the_file_run_and_field(tmp_path, change, field):
    text = (validation_dir() / "h200_stacks.yaml").read_text(encoding="utf-8")
    bad = {"role": "role: guessed", "measured_step_s": "measured_step_s: -1",
           "stack": "stack: pytorch-eagr", "model_changes": "model_changes: {num_layerz: 4}"}[field]
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(change, bad, 1), encoding="utf-8")
    with pytest.raises((SpecError, KeyError)) as info:
        load_runs(path)
    message = str(info.value)
    if isinstance(info.value, SpecError):
        assert str(path) in message and "runs[" in message and field in message
    else:  # an unknown stack lists the stacks (the registry's error)
        assert "pytorch-eager" in message


def test_the_core_module_imports_no_ui():
    import subprocess

    code = "import sys, workbench.validation; assert not {'ipywidgets', 'altair', 'widgets'} & set(sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=120).returncode == 0
