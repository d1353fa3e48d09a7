"""torchtitan export: the TOML parses (tomllib) into the 0.2.x sections; 0.3.0 args and config functions carry the
same values; what torchtitan cannot run is refused. torchtitan itself parses them in test_torchtitan_consumer.py."""

import tomllib

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError, WorkbenchError
from workbench.recipe import PrecisionPolicy, dumps, save_recipe
from workbench.recipe.build import make_recipe
from workbench.recipe.torchtitan import config_function_name, torchtitan_args


def _recipe(**kw):
    cfg = TrainingConfig(kw.pop("mb", 2), 4096, kw.pop("precision", "bf16"),
                         Parallelism(dp=kw.pop("dp", 4), tp=kw.pop("tp", 2), sharding=kw.pop("sharding", "fsdp")),
                         kw.pop("ac", "selective"), global_batch=kw.pop("gb", 32))
    return make_recipe(kw.pop("model", "llama3-8b"), "h100-sxm", cfg, **kw)


def test_toml_has_the_v02_sections_and_values():
    recipe = _recipe(overrides={"num_layers": 8})
    text = dumps(recipe, "torchtitan-toml")
    data = tomllib.loads(text)
    assert data["model"] == {"name": "llama3", "flavor": "8B", "hf_assets_path": "./assets/hf/Llama-3.1-8B",
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
    assert any("n_layers" in line and "NOT applied" in line for line in head if line.startswith("#"))
    assert any("per-op policy" in line for line in head if line.startswith("#"))


@pytest.mark.parametrize("fp8, section, name", [("rowwise", "float8", "rowwise"), ("tensorwise", "float8", "tensorwise"),
                                                ("rowwise_with_gw_hp", "float8", "rowwise_with_gw_hp"),
                                                ("mxfp8", "mx", "mxfp8_cublas")])
def test_fp8_recipes_become_quantize_converters(fp8, section, name):
    precision = PrecisionPolicy(fp8=fp8).workbench_precision
    cfg = TrainingConfig(1, 4096, precision, Parallelism(dp=8), "none")
    recipe = make_recipe("llama3-8b", "b200", cfg, precision=PrecisionPolicy(fp8=fp8))
    data = tomllib.loads(dumps(recipe, "torchtitan-toml"))
    assert data["model"]["converters"] == [f"quantize.linear.{section}"]
    if fp8 == "tensorwise":  # torchao's default config: the only one 0.2.2 lets take the FSDP float8 all-gather
        assert "recipe_name" not in data["quantize"]["linear"][section]
        assert data["quantize"]["linear"][section]["enable_fsdp_float8_all_gather"] is True
    else:
        assert data["quantize"]["linear"][section]["recipe_name"] == name


def test_ddp_is_the_replicate_degree_and_args_match():
    recipe = _recipe(sharding="ddp", ac="none", dp=8, tp=1, gb=64)
    args = torchtitan_args(recipe)
    assert args[:4] == ["--module", "llama3", "--config", "llama3_8b"] and args[-1] == "activation-checkpoint:none"
    pairs = dict(zip(args[4::2], args[5::2]))
    assert pairs["--parallelism.data_parallel_replicate_degree"] == "8"
    assert pairs["--parallelism.data_parallel_shard_degree"] == "1"
    assert pairs["--training.local_batch_size"] == "2" and pairs["--training.global_batch_size"] == "64"
    assert pairs["--training.seq_len"] == "4096" and "--compile.enable" in args
    text = dumps(recipe, "torchtitan-args")
    assert "NGPU=8 MODULE=llama3 CONFIG=llama3_8b ./run_train.sh" in text


def test_config_function_carries_what_flags_cannot():
    precision = PrecisionPolicy(fp8="rowwise")
    cfg = TrainingConfig(2, 4096, precision.workbench_precision, Parallelism(dp=4, pp=2), "full", global_batch=32)
    recipe = make_recipe("llama3-8b", "h200", cfg, precision=precision, overrides={"num_layers": 4})
    text = dumps(recipe, "torchtitan-py")
    compile(text, "recipe.py", "exec")
    assert f"def {config_function_name(recipe)}() -> Trainer.Config:" in text
    assert 'Float8LinearConverter.Config(recipe_name="rowwise"' in text and "n_layers=4" in text
    assert "config.activation_checkpoint = FullAC.Config()" in text
    assert "config.training.disable_cuda_graphs = True" in text
    with pytest.raises(SpecError, match="torchtitan-py"):
        dumps(recipe, "torchtitan-args")


@pytest.mark.parametrize("model, gpu, kw, match", [
    ("gpt2-small", "h100-sxm", {}, "has none for gpt2-small"),
    ("mixtral-8x7b", "h100-sxm", {}, "has none for mixtral-8x7b"),
    ("llama3-8b", "mi355x", {"fp8": "mxfp8"}, r"NVIDIA SM100\+ only"),
    ("llama3-8b", "h100-sxm", {"reduce_dtype": "bf16"}, "accepts only float32"),
    ("llama3-8b", "h100-sxm", {"fp8": "tensorwise"}, "no tensorwise recipe")])
def test_what_torchtitan_030_cannot_run_is_refused(model, gpu, kw, match):
    precision = PrecisionPolicy(**kw)
    cfg = TrainingConfig(1, 2048, precision.workbench_precision, Parallelism(dp=8), "none")
    recipe = make_recipe(model, gpu, cfg, precision=precision)
    for fmt in ("torchtitan-py", "torchtitan-args"):
        with pytest.raises(WorkbenchError, match=match):
            dumps(recipe, fmt)


def test_recommendation_models_are_refused_with_a_reason(tmp_path):
    recipe = make_recipe("dlrm-dcnv2", "mi350x", TrainingConfig(1024, parallelism=Parallelism(dp=8)))
    with pytest.raises(SpecError, match="transformer"):
        dumps(recipe, "torchtitan-toml")
    with pytest.raises(SpecError, match="transformer"):
        save_recipe(recipe, tmp_path / "x.toml", format="torchtitan-toml")
    assert not (tmp_path / "x.toml").exists()


def test_recipes_record_cp_and_virtual_stages_and_every_export_carries_them():
    from workbench.recipe import loads
    from workbench.recipe.build import predict_recipe

    cfg = TrainingConfig(1, 4096, parallelism=Parallelism(dp=2, tp=2, pp=4, cp=2, virtual_stages=2),
                         global_batch=16)
    recipe = make_recipe("llama3-8b", "h200", cfg)
    p = recipe.parallelism
    assert (p.dp, p.tp, p.pp, p.cp, p.virtual_stages, p.gpus) == (2, 2, 4, 2, 2, 32)
    assert loads(dumps(recipe, "yaml")) == recipe == loads(dumps(recipe, "json"))
    assert predict_recipe(recipe).summary.tokens_per_s == recipe.predicted.tokens_per_s  # cp and stages priced
    pipeline = {"pipeline_parallel_schedule": "Interleaved1F1B", "pipeline_parallel_first_stage_less_layers": 0,
                "pipeline_parallel_last_stage_less_layers": 0, "pipeline_parallel_layers_per_stage": 4}
    toml = tomllib.loads(dumps(recipe, "torchtitan-toml"))["parallelism"]
    assert toml["context_parallel_degree"] == 2 and toml["pipeline_parallel_degree"] == 4
    assert {k: toml[k] for k in pipeline} == pipeline  # 32 layers in 4 x 2 stages of 4
    args = torchtitan_args(recipe)
    for key, value in pipeline.items():
        assert args[args.index(f"--parallelism.{key}") + 1] == str(value)
    assert args[args.index("--parallelism.context_parallel_degree") + 1] == "2"
    py = dumps(recipe, "torchtitan-py")
    assert "config.parallelism.pipeline_parallel_schedule = 'Interleaved1F1B'" in py
    assert "config.parallelism.pipeline_parallel_layers_per_stage = 4" in py
    assert "config.parallelism.context_parallel_degree = 2" in py
    plain = make_recipe("llama3-8b", "h200", TrainingConfig(1, 4096, parallelism=Parallelism(dp=4, pp=2),
                                                            global_batch=16))
    toml = tomllib.loads(dumps(plain, "torchtitan-toml"))["parallelism"]
    assert toml["pipeline_parallel_schedule"] == "1F1B" and "pipeline_parallel_layers_per_stage" not in toml
    assert "pipeline_parallel_schedule" not in tomllib.loads(dumps(_recipe(), "torchtitan-toml"))["parallelism"]


def test_a_stage_split_torchtitan_cannot_count_is_refused():
    # 10 layers in 3 x 3 = 9 stages: 2 per stage counts 5 stages, 1 per stage 10
    cfg = TrainingConfig(1, 4096, parallelism=Parallelism(dp=1, pp=3, virtual_stages=3), global_batch=4)
    recipe = make_recipe("llama3-8b", "h200", cfg, overrides={"num_layers": 10})
    with pytest.raises(SpecError, match="layers_per_stage"):
        dumps(recipe, "torchtitan-toml")
