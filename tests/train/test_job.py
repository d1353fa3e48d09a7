"""The training job end to end on the CPU, from recipe files, single process."""

import json

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.recipe import save_recipe
from workbench.recipe.build import make_recipe
from workbench.recipe.schema import PrecisionPolicy
from workbench.train.__main__ import main
from workbench.train.job import RunOptions, train
from workbench.train.spec import load_job_spec


def run(recipe, tmp_path, *args) -> dict:
    metrics = tmp_path / "metrics.json"
    assert main(["--recipe", str(recipe), "--metrics", str(metrics), "--force", "--quiet", *args]) == 0  # reruns replace
    return json.loads(metrics.read_text())


def test_loss_falls_on_the_text_corpus_and_metrics_compare_with_the_recipe(tiny_recipe, tmp_path):
    m = run(tiny_recipe(), tmp_path, "--steps", "25", "--warmup", "2", "--lr", "3e-3")
    losses = m["losses"]
    assert len(losses) == 27 and len(m["step_times_s"]) == 25
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses  # starts near ln(256) = 5.5
    assert m["measured"]["tokens_per_s"] == pytest.approx(4 * 64 / m["measured"]["step_time_s"])
    assert set(m["relative_error"]) == {"step_time_s", "tokens_per_s"}  # no peak memory on a CPU
    assert m["relative_error"]["step_time_s"] == pytest.approx(
        m["measured"]["step_time_s"] / m["predicted"]["step_time_s"] - 1)
    assert m["comparable"] is False and m["device"] == "cpu" and m["settings"]["parallelism"]["sharding"] == "fsdp"
    # the step as this job runs it, predicted at run time beside the recipe's recorded (fused-step) prediction
    assert m["predicted_job"]["step_time_s"] > 0 and m["relative_error_job"]["step_time_s"] == pytest.approx(
        m["measured"]["step_time_s"] / m["predicted_job"]["step_time_s"] - 1)


def test_activation_checkpointing_does_not_change_the_math(tiny_recipe):
    losses = {}
    for mode in ("none", "selective", "full"):
        spec = load_job_spec(tiny_recipe(mode, TrainingConfig(4, 64, activation_checkpointing=mode)))
        losses[mode] = train(spec, RunOptions(steps=3, warmup=0, progress=False, lr=3e-3)).losses
    assert losses["selective"] == pytest.approx(losses["none"], abs=1e-4)
    assert losses["full"] == pytest.approx(losses["none"], abs=1e-4)


def test_fp8_tracks_bf16(tiny_recipe, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # fp8 emulated in torch: the interpreter's fp8 GEMM takes minutes
    curves = {}
    for fp8 in ("none", "rowwise", "rowwise_with_gw_hp"):  # tensorwise scaling: test_layers
        config = TrainingConfig(4, 64, precision=PrecisionPolicy(fp8=fp8).workbench_precision)
        policy = PrecisionPolicy(fp8=fp8) if fp8 != "none" else None
        spec = load_job_spec(tiny_recipe(fp8, config, precision=policy))
        result = train(spec, RunOptions(steps=10, warmup=0, progress=False, lr=3e-3))
        curves[fp8] = result.losses
        assert result.fp8_backend == ("emulated" if fp8 != "none" else "none")
    assert curves["rowwise"][0] == pytest.approx(curves["none"][0], rel=0.01)
    assert curves["rowwise"][-1] == pytest.approx(curves["none"][-1], rel=0.05)
    assert curves["rowwise"][-1] < curves["rowwise"][0] - 0.5
    assert curves["rowwise_with_gw_hp"][0] == pytest.approx(curves["none"][0], rel=0.01)
    assert curves["rowwise_with_gw_hp"][-1] == pytest.approx(curves["none"][-1], rel=0.05)
    assert curves["rowwise_with_gw_hp"] != curves["rowwise"]  # wgrad in bf16 changes the updates


def test_fp8_emulate_runs_the_emulated_gemm_where_the_triton_one_would_run(tiny_recipe, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # without --fp8-emulate: the interpreter's Triton fp8 GEMM
    config = TrainingConfig(4, 64, precision="fp8")
    recipe = tiny_recipe("fp8emu", config, precision=PrecisionPolicy(fp8="rowwise"))
    m = run(recipe, tmp_path, "--steps", "2", "--warmup", "0", "--fp8-emulate", "--seed", "3")
    assert m["settings"]["fp8_backend"] == "emulated" and m["settings"]["seed"] == 3
    assert any("--fp8-emulate" in note for note in m["notes"])


def test_gradient_accumulation_and_ddp(tiny_recipe, tmp_path):
    config = TrainingConfig(2, 64, parallelism=Parallelism(sharding="ddp"), global_batch=4)
    m = run(tiny_recipe("ddp", config), tmp_path, "--steps", "2", "--warmup", "0")
    assert m["settings"]["grad_accumulation"] == 2 and m["measured"]["tokens_per_s"] > 0


def test_triton_kernels_in_the_interpreter_match_torch(tiny_recipe):
    from workbench.recipe.schema import KernelChoice

    def kernel(op):
        return KernelChoice(op, {"m": 1}, "bf16", "triton", {"num_warps": 4}, 0.0)

    torch_spec = load_job_spec(tiny_recipe("torch", TrainingConfig(1, 16)))
    triton_spec = load_job_spec(tiny_recipe("triton", TrainingConfig(1, 16),
                                            kernels=[kernel(op) for op in ("rmsnorm", "swiglu", "cross_entropy")]))
    assert triton_spec.triton_ops() == {"rmsnorm", "swiglu", "cross_entropy"}
    options = RunOptions(steps=2, warmup=0, progress=False)
    assert train(triton_spec, options).losses == pytest.approx(train(torch_spec, options).losses, rel=2e-2)


def test_dlrm_with_capped_tables(tmp_path):
    recipe = save_recipe(make_recipe("dlrm-dcnv2", "h200-sxm", TrainingConfig(32), compile=False), tmp_path / "dlrm.yaml")
    m = run(recipe, tmp_path, "--steps", "2", "--warmup", "1", "--max-table-rows", "500")
    assert m["settings"]["max_table_rows"] == 500 and m["comparable"] is False
    assert m["measured"]["samples_per_s"] == pytest.approx(32 / m["measured"]["step_time_s"])
    assert 0.3 < m["losses"][0] < 1.2  # binary cross-entropy near ln 2


def test_unsupported_recipe_fails_with_the_reason(tiny_recipe, tmp_path, capsys):
    path = tiny_recipe("pp", TrainingConfig(2, 64, parallelism=Parallelism(pp=2)))
    assert main(["--recipe", str(path), "--metrics", str(tmp_path / "m.json")]) == 2
    assert "pipeline parallelism" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_fp8_compiles_and_selective_checkpointing_saves_its_gemms(tiny_recipe, monkeypatch):
    from workbench.train import layers

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    calls = []
    real = layers.fp8_matmul
    monkeypatch.setattr(layers, "fp8_matmul", lambda *args: calls.append(1) or real(*args))
    config = TrainingConfig(4, 64, precision="fp8", activation_checkpointing="selective")
    spec = load_job_spec(tiny_recipe("fp8sel", config, precision=PrecisionPolicy(fp8="rowwise")))
    train(spec, RunOptions(steps=1, warmup=0, progress=False))
    assert len(calls) == 2 * 4 * 3  # blocks x linears x (forward, dgrad, wgrad): no recomputed forward GEMM
    compiled = load_job_spec(tiny_recipe("fp8c", config, precision=PrecisionPolicy(fp8="rowwise"), compile=True))
    losses = train(compiled, RunOptions(steps=4, warmup=0, progress=False, lr=3e-3)).losses
    assert losses[-1] < losses[0] - 0.3, losses
