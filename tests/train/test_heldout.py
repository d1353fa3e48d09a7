"""The job's held-out evaluation (--eval-every, --eval-windows) and deterministic mode (--deterministic), on the CPU."""

import json
import os
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.config import TrainingConfig
from workbench.recipe import save_recipe
from workbench.recipe.build import make_recipe
from workbench.recipe.schema import KernelChoice
from workbench.train.__main__ import main
from workbench.train.determinism import (ATOMIC_COUNTS_ONLY, NONDETERMINISTIC_TRITON_OPS,
                                        NONDETERMINISTIC_TRITON_VARIANTS, deterministic_mode)
from workbench.train.job import RunOptions, check_options, evaluation_steps, heldout_loss, train
from workbench.train.spec import TRITON_OPS, JobError, load_job_spec

REPO = Path(__file__).resolve().parents[2]


def run(recipe, tmp_path, *args) -> dict:
    metrics = tmp_path / "metrics.json"
    assert main(["--recipe", str(recipe), "--metrics", str(metrics), "--force", "--quiet", *args]) == 0  # reruns replace
    return json.loads(metrics.read_text())


def test_evaluation_steps_count_warmup_and_always_end_with_the_last():
    assert evaluation_steps(300, 10) == list(range(0, 301, 10))
    assert evaluation_steps(12, 5) == [0, 5, 10, 12]
    assert evaluation_steps(3, 10) == [0, 3]
    assert evaluation_steps(5, None) == []


def test_heldout_loss_weights_micro_batches_by_their_windows():
    class MeanOfSum(nn.Module):  # "loss" = mean of inputs + targets: the whole set's mean is known
        def forward(self, x, y):
            return (x + y).float().mean()

    inputs = torch.arange(5 * 3).reshape(5, 3)
    targets = torch.ones(5, 3, dtype=torch.long)
    loss = heldout_loss(MeanOfSum(), inputs, targets, micro_batch=2, autocast=torch.autocast("cpu", enabled=False))
    assert loss == pytest.approx((inputs + targets).float().mean().item())  # 2 + 2 + 1 windows


def test_heldout_curve_in_metrics_and_evaluation_leaves_training_as_it_is(tiny_recipe, tmp_path):
    recipe = tiny_recipe()
    plain = run(recipe, tmp_path, "--steps", "10", "--warmup", "2", "--lr", "3e-3")
    m = run(recipe, tmp_path, "--steps", "10", "--warmup", "2", "--lr", "3e-3", "--eval-every", "5",
            "--eval-windows", "3")
    assert [step for step, _ in m["heldout_losses"]] == [0, 5, 10, 12]  # warm-up steps counted
    losses = [loss for _, loss in m["heldout_losses"]]
    assert losses[0] == pytest.approx(5.55, abs=0.1) and losses[-1] < losses[0] - 0.5  # ln 256, then learning
    assert m["losses"] == plain["losses"]  # evaluation draws no random numbers and trains nothing
    assert plain["heldout_losses"] == [] and plain["settings"]["eval_every"] is None
    assert m["settings"]["eval_every"] == 5 and m["settings"]["eval_windows"] == 3
    assert m["settings"]["deterministic"] is False


def test_deterministic_runs_repeat_exactly_and_say_so(tiny_recipe, tmp_path):
    args = ("--steps", "6", "--warmup", "0", "--lr", "3e-3", "--eval-every", "3", "--eval-windows", "2",
            "--deterministic", "--seed", "5")
    recipe = tiny_recipe()
    first, second = run(recipe, tmp_path, *args), run(recipe, tmp_path, *args)
    assert first["losses"] == second["losses"] and first["heldout_losses"] == second["heldout_losses"]
    assert first["settings"]["deterministic"] is True and first["settings"]["seed"] == 5
    assert not torch.are_deterministic_algorithms_enabled()  # put back after the run


def test_deterministic_mode_sets_and_restores(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    notes: list[str] = []
    benchmark = torch.backends.cudnn.benchmark
    with deterministic_mode(True, notes):
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.benchmark is False and torch.backends.cudnn.deterministic is True
    assert not torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.benchmark == benchmark
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # a deterministic setting already there is kept
    with deterministic_mode(True, notes):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    with deterministic_mode(False, notes):
        assert not torch.are_deterministic_algorithms_enabled()


def test_every_kernel_with_atomics_is_refused_by_deterministic_mode():
    atomic = {p.stem for p in (REPO / "workbench" / "kernels").glob("*.py") if re.search(r"tl\.atomic_", p.read_text())}
    refused = set(NONDETERMINISTIC_TRITON_OPS) | set(NONDETERMINISTIC_TRITON_VARIANTS)
    assert refused == {"embedding_bag"} and not refused & set(ATOMIC_COUNTS_ONLY)
    assert atomic == refused | set(ATOMIC_COUNTS_ONLY) == {"embedding_bag", "gemm_tma"}
    assert set(NONDETERMINISTIC_TRITON_OPS) | set(NONDETERMINISTIC_TRITON_VARIANTS) <= set(TRITON_OPS)  # op names


def test_deterministic_takes_the_triton_attention(tmp_path):
    kernel = KernelChoice("attention", {"seq": 64}, "bf16", "triton", {"BLOCK_M": 64, "BLOCK_N": 64}, 0.0)
    recipe = make_recipe("llama3.2-1b", "h200-sxm", TrainingConfig(1, 64), compile=False, kernels=[kernel])
    check_options(load_job_spec(save_recipe(recipe, tmp_path / "r.yaml")), RunOptions(deterministic=True))


def test_deterministic_refuses_the_triton_embedding_bag(tmp_path, capsys):
    kernel = KernelChoice("embedding_bag", {"m": 1}, "fp32", "triton", {"num_warps": 4}, 0.0)
    recipe = save_recipe(make_recipe("dlrm-dcnv2", "h200-sxm", TrainingConfig(32), compile=False, kernels=[kernel]),
                         tmp_path / "dlrm.yaml")
    spec = load_job_spec(recipe)
    with pytest.raises(JobError, match="embedding_bag kernel, which is nondeterministic.*atomic_add"):
        check_options(spec, RunOptions(deterministic=True))
    check_options(spec, RunOptions())  # fine without deterministic mode
    assert main(["--recipe", str(recipe), "--metrics", str(tmp_path / "m.json"), "--deterministic"]) == 2
    assert "tl.atomic_add" in capsys.readouterr().err and not (tmp_path / "m.json").exists()


def test_evaluation_errors_name_the_bad_setting(tiny_recipe, tmp_path, capsys):
    recipe, metrics = str(tiny_recipe()), str(tmp_path / "m.json")
    for args, expected in ((["--eval-every", "0"], "--eval-every = 0"),
                           (["--eval-windows", "-1"], "--eval-windows = -1"),
                           (["--eval-every", "5", "--data", "synthetic"], "data = 'synthetic'")):
        assert main(["--recipe", recipe, "--metrics", metrics, "--quiet", *args]) == 2
        assert expected in capsys.readouterr().err
    dlrm = save_recipe(make_recipe("dlrm-dcnv2", "h200-sxm", TrainingConfig(32), compile=False), tmp_path / "d.yaml")
    assert main(["--recipe", str(dlrm), "--metrics", metrics, "--eval-every", "5"]) == 2
    assert "is a DLRM" in capsys.readouterr().err
    spec = load_job_spec(recipe)
    for options, expected in ((RunOptions(eval_every=0), "eval_every = 0"),
                              (RunOptions(eval_windows=0), "eval_windows = 0")):
        with pytest.raises(JobError, match=expected):
            train(spec, options)
    assert not (tmp_path / "m.json").exists()
