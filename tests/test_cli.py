"""The ``workbench`` console script, run as a user would run it."""

import json
import shutil
import subprocess
import sys

import pytest

WORKBENCH = shutil.which("workbench") or f"{sys.executable} -m workbench.cli"


def run(*args, stdin=None):
    command = [*WORKBENCH.split(), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


def test_gpus_and_models_tables():
    gpus = run("gpus")
    assert gpus.returncode == 0 and "mi355x" in gpus.stdout and "ridge_bf16" in gpus.stdout
    models = run("models")
    assert models.returncode == 0 and "llama3-405b" in models.stdout


def test_predict_json():
    result = run("predict", "--model", "llama3-8b", "--gpu", "mi350x", "--precision", "bf16", "--seq-len", "4096",
                 "--gpus", "8", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["gpu"] == "mi350x" and data["summary"]["gpus"] == 8
    assert data["summary"]["step_time_s"] > 0 and 0 < data["summary"]["mfu"] < 1


def test_predict_table_mentions_the_bound_ops():
    result = run("predict", "--model", "gpt2-small", "--gpu", "h100", "--micro-batch", "8")
    assert result.returncode == 0 and "tokens/s" in result.stdout and "gemm" in result.stdout


def test_predict_ops_reads_stdin():
    result = run("predict-ops", "-", "--gpu", "h200", stdin="op,m,n,k,dtype\ngemm,4096,4096,4096,bf16\n")
    assert result.returncode == 0
    header, row = result.stdout.strip().splitlines()
    assert header.endswith("predicted_ms") and float(row.split(",")[-1]) > 0


@pytest.mark.parametrize("args,message", [
    (("predict", "--model", "llama3-8b", "--gpu", "h2000"), "unknown GPU 'h2000'"),
    (("predict", "--model", "llama3-8b", "--gpu", "mi355x", "--precision", "tf32"), "no hardware path for tf32"),
    (("predict", "--model", "llama3-8b", "--gpu", "h200", "--micro-batch", "-1"), "argument --micro-batch: expected 0"),
    (("predict", "--model", "llama3-8b", "--gpu", "h200", "--tp", "0"), "argument --tp: expected a positive integer"),
    (("recipe", "--model", "llama3.2-1b", "--gpu", "h200", "--seq-len", "-1"), "argument --seq-len"),
    (("predict", "--model", "mixtral-8x7b", "--gpu", "h200", "--gpus", "16", "--ep", "16"), "num_experts=8"),
    (("predict", "--model", "missing.yaml", "--gpu", "h200"), "readable file"),
    (("predict-ops", "nope.csv", "--gpu", "h200"), "cannot read nope.csv"),
])
def test_errors_are_one_clear_line_and_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_cli_api_and_widget_share_the_models_default_micro_batch():
    """Issue 15: the CLI took micro-batch 1 for DLRM (MFU 0.036%) where the API took 65,536 (28.7%)."""
    from widgets.state import WorkbenchState
    from workbench import predict
    from workbench.config import TrainingConfig

    for model, default in (("dlrm-dcnv2", 65536), ("hstu-gr", 64)):
        result = run("predict", "--model", model, "--gpu", "h200", "--json")
        assert result.returncode == 0, result.stderr
        cli = json.loads(result.stdout)
        api = predict(model, "h200")
        assert cli["config"]["micro_batch"] == api.config.micro_batch == default
        assert predict(model, "h200", TrainingConfig()).config.micro_batch == default
        assert cli["summary"]["mfu"] == pytest.approx(api.summary.mfu)
        assert WorkbenchState().replace(model=model).micro_batch == default  # the widget follows the model
        assert WorkbenchState(model=model).micro_batch == default
    assert WorkbenchState().replace(model="dlrm-dcnv2").replace(model="llama3-8b").micro_batch == 1
    assert WorkbenchState(micro_batch=8).replace(model="dlrm-dcnv2").micro_batch == 8  # a chosen size is kept
