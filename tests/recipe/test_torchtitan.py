"""torchtitan export: the TOML parses (tomllib) into the v0.2.x sections; args carry the same degrees."""

import tomllib

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.recipe import PrecisionPolicy, dumps, save_recipe
from workbench.recipe.build import make_recipe
from workbench.recipe.torchtitan import torchtitan_args


def _recipe(**kw):
    cfg = TrainingConfig(kw.pop("mb", 2), 4096, kw.pop("precision", "bf16"),
                         Parallelism(dp=kw.pop("dp", 4), tp=kw.pop("tp", 2), sharding=kw.pop("sharding", "fsdp")),
                         kw.pop("ac", "selective"), global_batch=kw.pop("gb", 32))
    return make_recipe(kw.pop("model", "llama3-8b"), "h100-sxm", cfg, **kw)


def test_toml_has_the_v02_sections_and_values():
    recipe = _recipe(overrides={"num_layers": 8})
    text = dumps(recipe, "torchtitan-toml")
    data = tomllib.loads(text)
    assert data["model"] == {"name": "llama3", "flavor": "8B", "hf_assets_path": "./assets/hf/llama3-8b",
                             "converters": []}
    assert data["training"]["local_batch_size"] == 2 and data["training"]["global_batch_size"] == 32
    assert data["training"]["seq_len"] == 4096 and data["training"]["mixed_precision_param"] == "bfloat16"
    assert data["parallelism"]["data_parallel_shard_degree"] == 4
    assert data["parallelism"]["data_parallel_replicate_degree"] == 1
    assert data["parallelism"]["tensor_parallel_degree"] == 2
    assert data["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert data["compile"]["enable"] is True
    assert "quantize" not in data
    head = text.splitlines()
    assert "8 x h100-sxm" in head[0] and "predicted by workbench-model" in head[1]
    assert any("n_layers" in line for line in head if line.startswith("#"))


@pytest.mark.parametrize("fp8, section, name", [("rowwise", "float8", "rowwise"), ("tensorwise", "float8", "tensorwise"),
                                                ("rowwise_with_gw_hp", "float8", "rowwise_with_gw_hp"),
                                                ("mxfp8", "mx", "mxfp8_cublas")])
def test_fp8_recipes_become_quantize_converters(fp8, section, name):
    precision = PrecisionPolicy(fp8=fp8).workbench_precision
    cfg = TrainingConfig(1, 4096, precision, Parallelism(dp=8), "none")
    recipe = make_recipe("llama3-8b", "b200", cfg, precision=PrecisionPolicy(fp8=fp8))
    data = tomllib.loads(dumps(recipe, "torchtitan-toml"))
    assert data["model"]["converters"] == [f"quantize.linear.{section}"]
    assert data["quantize"]["linear"][section]["recipe_name"] == name


def test_ddp_is_the_replicate_degree_and_args_match():
    recipe = _recipe(sharding="ddp", ac="none", model="gpt2-small", dp=8, tp=1, gb=64)
    args = torchtitan_args(recipe)
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["--parallelism.data_parallel_replicate_degree"] == "8"
    assert pairs["--parallelism.data_parallel_shard_degree"] == "1"
    assert pairs["--training.num_tokens_per_microbatch_per_dp_rank"] == str(2 * 4096)
    assert pairs["--training.num_tokens_per_train_step"] == str(64 * 4096)
    assert pairs["--activation_checkpoint.mode"] == "none"
    text = dumps(recipe, "torchtitan-args")
    assert "NGPU=8" in text and "no torchtitan flavor" in text


def test_recommendation_models_are_refused_with_a_reason(tmp_path):
    recipe = make_recipe("dlrm-dcnv2", "mi350x", TrainingConfig(1024, parallelism=Parallelism(dp=8)))
    with pytest.raises(SpecError, match="transformer"):
        dumps(recipe, "torchtitan-toml")
    with pytest.raises(SpecError, match="transformer"):
        save_recipe(recipe, tmp_path / "x.toml", format="torchtitan-toml")
    assert not (tmp_path / "x.toml").exists()
