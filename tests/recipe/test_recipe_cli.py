"""``workbench recipe`` end to end through ``workbench.cli.main`` (in process)."""

import json
import tomllib

from workbench.cli import main
from workbench.recipe import load_recipe


def test_best_recipe_to_yaml_and_no_overwrite(tmp_path, capsys):
    out = tmp_path / "r.yaml"
    assert main(["recipe", "--model", "gpt2-small", "--gpu", "h100", "--gpus", "2", "--out", str(out)]) == 0
    recipe = load_recipe(out)
    assert recipe.target.gpu == "h100-sxm" and recipe.target.gpus == 2 and recipe.predicted.fits
    assert "configurations of gpt2-small" in capsys.readouterr().out
    assert main(["recipe", "--model", "gpt2-small", "--gpu", "h100", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert load_recipe(out) == recipe
    assert main(["recipe", "--model", "gpt2-small", "--gpu", "h100", "--out", str(out), "--force"]) == 0


def test_port_writes_both_recipes_and_prints_the_comparison(tmp_path, capsys):
    co, port = tmp_path / "co.yaml", tmp_path / "port.yaml"
    assert main(["recipe", "--model", "llama3-8b", "--set", "num_layers=4", "--gpu", "h200", "--source-gpu", "h100",
                 "--gpus", "1", "--out", str(co), "--port-out", str(port)]) == 0
    text = capsys.readouterr().out
    assert "direct_port" in text and "co_designed" in text and "predicted gain" in text
    assert "+/- 5%: no measurable gain" in text and "both at global batch 512" in text  # 1.005x at one global batch
    co_recipe, port_recipe = load_recipe(co), load_recipe(port)
    assert co_recipe.model.overrides == port_recipe.model.overrides == {"num_layers": 4}
    assert co_recipe.batch.micro_batch > port_recipe.batch.micro_batch
    assert co_recipe.batch.global_batch == port_recipe.batch.global_batch == 512
    assert co_recipe.predicted.tokens_per_s > port_recipe.predicted.tokens_per_s


def test_search_holds_the_global_batch_and_marks_the_ties(tmp_path, capsys):
    out = tmp_path / "r.yaml"
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--global-batch", "24",
                 "--top", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "at global batch 24" in text and "within 5%" in text and "<-" in text and "recommended" in text
    recipe = load_recipe(out)
    assert recipe.batch.global_batch == 24
    assert recipe.batch.micro_batch * recipe.parallelism.dp * recipe.batch.grad_accumulation == 24
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--out", str(out),
                 "--force"]) == 0
    assert "at global batch 512" in capsys.readouterr().out  # the default: 4M tokens at 8,192 per sequence
    assert load_recipe(out).batch.global_batch == 512


def test_formats_to_stdout(capsys):
    assert main(["recipe", "--model", "gpt2-small", "--gpu", "mi300x", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["target"]["gpu"] == "mi300x"
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "b200", "--gpus", "8", "--precision", "fp8",
                 "--format", "torchtitan-toml"]) == 0
    data = tomllib.loads(capsys.readouterr().out)
    assert data["model"]["converters"] == ["quantize.linear.float8"]
    assert data["parallelism"]["data_parallel_shard_degree"] * data["parallelism"]["tensor_parallel_degree"] \
        * data["parallelism"]["pipeline_parallel_degree"] == 8


def test_bad_input_is_a_clear_error(capsys):
    assert main(["recipe", "--model", "llama3-8b", "--set", "layers=4", "--gpu", "h200"]) == 2
    assert "overrides.layers" in capsys.readouterr().err
    assert main(["recipe", "--model", "llama3-8b", "--set", "num_layers", "--gpu", "h200"]) == 2
    assert "FIELD=INTEGER" in capsys.readouterr().err
    assert main(["recipe", "--model", "llama3-405b", "--gpu", "a100-sxm-80gb"]) == 2
    assert "no configuration" in capsys.readouterr().err


def test_stack_prices_the_search_and_the_recipe_records_it(tmp_path, capsys):
    out = tmp_path / "r.yaml"
    assert main(["recipe", "--model", "llama3-8b", "--set", "num_layers=4", "--gpu", "h200", "--seq-len", "8192",
                 "--global-batch", "1", "--stack", "torchtitan", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "predicted for the torchtitan stack" in text and "compile" in text and "eager < compiled" in text
    recipe = load_recipe(out)
    assert recipe.predicted.stack == "torchtitan" and recipe.batch.global_batch == 1
    from workbench.predict import predict
    from workbench.recipe.build import predict_recipe, recipe_model, training_config

    s = predict(recipe_model(recipe), "h200", training_config(recipe), stack="torchtitan",
                compile=recipe.compile).summary
    assert recipe.predicted.step_time_s == s.step_time_s  # the recorded number is the stack's, with its compile flag
    # no --stack: the model's default, torchtitan (it was the ideal bound before); --stack ideal names the bound
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--out", str(out), "--force"]) == 0
    assert "predicted for the torchtitan stack" in capsys.readouterr().out
    default = load_recipe(out)
    assert default.predicted.stack == "torchtitan"
    assert predict_recipe(default).summary.step_time_s == default.predicted.step_time_s
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--out", str(out), "--force",
                 "--stack", "ideal"]) == 0
    assert "ideal fused step (a bound" in capsys.readouterr().out and load_recipe(out).predicted.stack == "ideal"
    assert main(["recipe", "--model", "dlrm-dcnv2", "--gpu", "h200", "--gpus", "8", "--out", str(out), "--force"]) == 0
    assert "ideal fused step (a bound" in capsys.readouterr().out and load_recipe(out).predicted.stack == "ideal"
    # the co-design advice is priced for the stack too (the default, or --stack)
    assert main(["recipe", "--model", "llama3-8b", "--set", "num_layers=4", "--gpu", "h200", "--source-gpu", "h100",
                 "--gpus", "1", "--stack", "pytorch-compile", "--out", str(out), "--force"]) == 0
    assert "predicted for the pytorch-compile stack" in capsys.readouterr().out
    assert load_recipe(out).predicted.stack == "pytorch-compile"


def test_a_lora_recipe_from_the_command_line(tmp_path, capsys):
    """``--lora-rank`` searches LoRA fine-tuning (no FSDP over frozen weights) and the recipe records it."""
    out = tmp_path / "lora.yaml"
    assert main(["recipe", "--model", "llama3-8b", "--set", "num_layers=4", "--gpu", "h200", "--gpus", "2",
                 "--lora-rank", "16", "--out", str(out)]) == 0
    recipe = load_recipe(out)
    assert (recipe.lora.rank, recipe.lora.targets) == (16, ("q", "k", "v", "o"))
    assert recipe.parallelism.sharding != "fsdp" and recipe.schema_version == 2
    assert main(["recipe", "--model", "llama3-8b", "--gpu", "h200", "--lora-rank", "-1"]) == 2
    assert "--lora-rank" in capsys.readouterr().err
