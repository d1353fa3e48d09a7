"""Recipe schema: round trips, validation errors that name file/field/value/expected, safe YAML, atomic writes."""

import copy
import dataclasses
import json

import pytest
import yaml

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.recipe import (
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    ActivationCheckpointing,
    Batch,
    KernelChoice,
    LoRAChoice,
    ModelChoice,
    ParallelismChoice,
    PrecisionPolicy,
    Recipe,
    Revision,
    Target,
    dumps,
    load_recipe,
    loads,
    save_recipe,
)
from workbench.recipe.build import make_recipe, predict_recipe, recipe_model, training_config


@pytest.fixture(scope="module")
def recipe() -> Recipe:
    cfg = TrainingConfig(2, 4096, parallelism=Parallelism(dp=8), global_batch=64)
    revision = Revision("pad_vocab", "vocab_size", 128256, 128512, "multiple of 256", 1.01)
    return make_recipe("llama3-8b", "h200", cfg, overrides={"num_layers": 4, "vocab_size": 128512},
                       revisions=[revision])


@pytest.fixture
def data(recipe) -> dict:
    return copy.deepcopy(recipe.to_dict())


def test_to_dict_has_the_agreed_keys_in_order(recipe):
    d = recipe.to_dict()
    assert list(d) == ["schema_version", "workbench_version", "model_version", "target", "model", "precision", "batch",
                       "activation_checkpointing", "parallelism", "compile", "kernels", "embeddings", "predicted"]
    assert d["schema_version"] == recipe.schema_version == 1  # no version 2 field: version 1's layout
    assert d["target"] == {"gpu": "h200-sxm", "gpus": 8}
    assert d["batch"] == {"micro_batch": 2, "global_batch": 64, "grad_accumulation": 4, "seq_len": 4096}
    assert d["parallelism"] == {"dp": 8, "sharding": "fsdp", "tp": 1, "pp": 1, "cp": 1, "ep": 1}
    assert d["model"]["overrides"] == {"num_layers": 4, "vocab_size": 128512}
    assert set(d["predicted"]) >= {"step_time_s", "tokens_per_s", "samples_per_s", "peak_memory_gb", "mfu",
                                   "communication_s"}


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip_through_text_and_files(recipe, tmp_path, fmt):
    assert loads(dumps(recipe, fmt)) == recipe
    path = save_recipe(recipe, tmp_path / f"r.{fmt}", format=fmt)
    assert load_recipe(path) == recipe
    if fmt == "json":
        json.loads(path.read_text())


def test_yaml_header_names_target_and_predictions(recipe):
    head = dumps(recipe).splitlines()[:2]
    assert "8 x h200-sxm" in head[0] and "num_layers=4" in head[0]
    assert "workbench-model" in head[1] and "tokens/s" in head[1]


def test_the_header_says_when_a_stacks_number_is_the_bound():
    """A LoRA recipe is outside torchtitan's kernel tables: its header says the number is the fused-step bound."""
    lora = make_recipe("llama3-8b", "h200", TrainingConfig(1, 4096, "bf16", Parallelism(dp=8, sharding="ddp"),
                                                           lora_rank=16))
    plain = make_recipe("llama3-8b", "h200", TrainingConfig(1, 4096, "bf16", Parallelism(dp=8)))
    stack_line = [line for line in dumps(lora).splitlines() if "predicted for the stack" in line][0]
    assert "torchtitan (priced as the ideal fused step, a bound" in stack_line
    assert [line for line in dumps(plain).splitlines() if "predicted for the stack" in line] == [
        "# predicted for the stack: torchtitan"]


def test_predictions_are_the_models_for_the_revised_model(recipe):
    assert recipe_model(recipe).num_layers == 4 and recipe_model(recipe).vocab_size == 128512
    # the default stack's prediction (torchtitan, with the recipe's compile flag), recorded and re-made alike
    assert recipe.predicted.stack == "torchtitan" and recipe.compile
    assert predict_recipe(recipe).summary.step_time_s == recipe.predicted.step_time_s
    # job=True: the reference job's prediction, on both sides
    job = make_recipe("llama3-8b", "h200", training_config(recipe), overrides=recipe.model.overrides, job=True)
    assert predict_recipe(recipe, job=True).summary.step_time_s == job.predicted.step_time_s
    bound = make_recipe("llama3-8b", "h200", training_config(recipe), overrides=recipe.model.overrides, stack="ideal")
    assert job.predicted.step_time_s > bound.predicted.step_time_s  # no stack beats the fused step
    assert predict_recipe(bound).summary.step_time_s == bound.predicted.step_time_s
    assert training_config(recipe).grad_accumulation == 4


def test_never_overwrites_unless_asked(recipe, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite"):
        save_recipe(recipe, path)
    assert path.read_text() == "keep me"
    save_recipe(recipe, path, overwrite=True)
    assert load_recipe(path) == recipe
    assert [p.name for p in tmp_path.iterdir()] == ["r.yaml"]  # no temporary left behind


def _error(data, origin="r.yaml") -> SpecError:
    with pytest.raises(SpecError) as info:
        Recipe.from_dict(data, origin)
    return info.value


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d.update(schema_version=3), "schema_version", "reads recipe schema versions up to 2"),
    (lambda d: d.update(schema_version=0), "schema_version", "1 or 2"),
    (lambda d: d.update(lora={"rank": 16}), "lora", "schema_version: 2"),  # a version 1 file has no lora
    (lambda d: d.update(colour="red"), "colour", "no such field"),
    (lambda d: d["batch"].update(micro_batchs=3), "batch.micro_batchs", "no such field"),
    (lambda d: d["target"].update(gpu="h900"), "target.gpu", "catalog GPU"),
    (lambda d: d["target"].update(gpu="h200"), "target.gpu", "canonical"),
    (lambda d: d["model"].update(name="llama9"), "model.name", "catalog model"),
    (lambda d: d["model"]["overrides"].update(num_layer=2), "model.overrides.num_layer", "integer field"),
    (lambda d: d["model"]["overrides"].update(num_layers=-2), "model.overrides.num_layers", ">= 1"),
    (lambda d: d["batch"].update(global_batch=63), "batch.global_batch", "micro_batch x dp x grad_accumulation"),
    (lambda d: d["batch"].update(micro_batch="2"), "batch.micro_batch", "an integer"),
    (lambda d: d["parallelism"].update(tp=2), "parallelism", "target.gpus = 8"),
    (lambda d: d["parallelism"].update(sharding="zero2"), "parallelism.sharding", "fsdp, ddp"),
    (lambda d: d["activation_checkpointing"].update(mode="some"), "activation_checkpointing.mode", "none, selective"),
    (lambda d: d["activation_checkpointing"].update(layers=[0, -1]), "activation_checkpointing.layers", "block indices"),
    (lambda d: d["precision"].update(fp8="delayed"), "precision.fp8", "tensorwise"),
    (lambda d: d["precision"].update(fp8="gw_hp"), "precision.fp8", "rowwise_with_gw_hp"),
    (lambda d: d["precision"].update(fp8="rowwise", compute_dtype="fp16"), "precision.compute_dtype", "bf16"),
    (lambda d: d.update(compile="yes"), "compile", "true or false"),
    (lambda d: d["predicted"].update(mfu=-1), "predicted.mfu", ">= 0"),
    (lambda d: d.update(model_version=""), "model_version", "model version"),
    (lambda d: d["model"]["revisions"][0].update(gain=2), "model.revisions[0].gain", "no such field"),
    (lambda d: d.update(kernels=[{"op": "gemm", "shape": {"m": 1}, "dtype": "bf16", "choice": "triton",
                                  "config": None, "predicted_ms": 1.0}]), "kernels[0].config", "Triton config"),
    (lambda d: d.update(embeddings=[{"table": "t", "rows": 1, "dim": 8, "placement": "disk", "bytes": 32}]),
     "embeddings[0].placement", "hbm, host, row_sharded"),
])
def test_bad_fields_are_rejected_with_file_field_value_and_expectation(data, edit, field, expected):
    edit(data)
    err = _error(data)
    assert err.origin == "r.yaml" and err.field == field and expected in err.expected, str(err)
    assert str(err).startswith(f"r.yaml: {field} = ")


def test_missing_required_section_is_named(data):
    del data["batch"]
    assert _error(data).field == "batch"


def test_load_names_the_file_and_rejects_python_tags(tmp_path, recipe):
    bad = tmp_path / "bad.yaml"
    bad.write_text(dumps(recipe).replace("schema_version: 1", "schema_version: 7"))
    with pytest.raises(SpecError, match=r"bad.yaml: schema_version = 7: expected 1 or 2: .* newer workbench"):
        load_recipe(bad)
    evil = tmp_path / "evil.yaml"
    evil.write_text("!!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(SpecError, match="valid YAML"):
        load_recipe(evil)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SpecError, match="empty"):
        load_recipe(empty)


def test_kernels_and_minimal_hand_written_recipe_load():
    text = """
schema_version: 1
target: {gpu: h100-sxm, gpus: 1}
model: {name: gpt2-small}
batch: {micro_batch: 8, global_batch: 16, grad_accumulation: 2, seq_len: 1024}
kernels:
- {op: gemm, shape: {m: 8192, n: 2304, k: 768}, dtype: bf16, choice: triton,
   config: {BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 64, num_warps: 8, num_stages: 3}, predicted_ms: 0.05}
- {op: gemm, shape: {m: 8192, n: 768, k: 768}, dtype: bf16, choice: vendor, config: null, predicted_ms: 0.02}
"""
    r = loads(text)
    assert r.predicted is None and r.compile is True and r.parallelism == ParallelismChoice()
    assert r.kernels[0] == KernelChoice("gemm", {"m": 8192, "n": 2304, "k": 768}, "bf16", "triton",
                                        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8,
                                         "num_stages": 3}, 0.05)
    assert loads(dumps(r)) == r


def test_constructor_validates_too():
    with pytest.raises(SpecError, match="global_batch"):
        Recipe(Target("h200-sxm", 2), ModelChoice("llama3-8b"), Batch(1, 3, 1, 4096), parallelism=ParallelismChoice(dp=2))


def test_dump_is_plain_yaml(recipe):
    assert yaml.safe_load(dumps(recipe))["model"]["revisions"][0]["name"] == "pad_vocab"


def test_recipe_package_imports_no_ui_torch_or_pandas():
    import subprocess
    import sys

    code = ("import sys, workbench.recipe; "
            "print(sorted(m for m in ('pandas', 'torch', 'triton', 'ipywidgets', 'altair') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: (d["parallelism"].update(dp=1, tp=8), d["batch"].update(global_batch=8, grad_accumulation=4)),
     "parallelism.tp", None),  # 8 divides llama3-8b's heads: valid, no error
    (lambda d: (d["parallelism"].update(dp=1, tp=8), d["model"]["overrides"].update(num_heads=12, num_kv_heads=4),
                d["batch"].update(global_batch=8)), "parallelism.tp", "divisor of num_heads=12"),
    (lambda d: (d["parallelism"].update(dp=1, pp=8), d["batch"].update(global_batch=8, grad_accumulation=4)),
     "parallelism.pp", "at most num_layers=4"),
    (lambda d: d["model"]["overrides"].update(num_kv_heads=5), "model.overrides", "divisor of num_heads"),
])
def test_configuration_is_checked_against_the_revised_model(data, edit, field, expected):
    edit(data)
    if expected is None:
        Recipe.from_dict(data, "r.yaml")
        return
    err = _error(data)
    assert err.origin == "r.yaml" and err.field == field and expected in err.expected, str(err)


def test_rowwise_with_gw_hp_round_trips_and_is_modelled_as_fp8_gw_hp():
    cfg = TrainingConfig(1, 4096, "fp8_gw_hp", Parallelism(dp=8))
    recipe = make_recipe("llama3-8b", "h200-sxm", cfg, overrides={"num_layers": 2})
    assert recipe.precision.fp8 == "rowwise_with_gw_hp" and recipe.precision.workbench_precision == "fp8_gw_hp"
    for fmt in ("yaml", "json"):
        assert loads(dumps(recipe, fmt)) == recipe
    with pytest.raises(SpecError):  # a policy that disagrees with the modelled precision
        make_recipe("llama3-8b", "h200-sxm", TrainingConfig(1, 4096, "fp8", Parallelism(dp=8)),
                    precision=PrecisionPolicy(fp8="rowwise_with_gw_hp"))
    with pytest.raises(SpecError, match="rowwise_with_gw_hp"):
        PrecisionPolicy(fp8="gw_hp").workbench_precision


@pytest.mark.parametrize("edit, field, expected", [
    (lambda d: d.update(schema_version=True), "schema_version", "an integer"),
    (lambda d: d["predicted"].update(mfu=5), "predicted.mfu", "0 < mfu <= 1"),
    (lambda d: d["predicted"].update(mfu=0), "predicted.mfu", "0 < mfu <= 1"),
    (lambda d: d["predicted"].update(step_time_s=0), "predicted.step_time_s", "> 0"),
    (lambda d: d["predicted"].update(tokens_per_s=0), "predicted.tokens_per_s", "> 0"),
    (lambda d: d["predicted"].update(peak_memory_gb=0), "predicted.peak_memory_gb", "> 0"),
    (lambda d: d["predicted"].update(communication_s=1e9), "predicted.communication_s", "step_time_s"),
    (lambda d: d.update(kernels=[{"op": "conv", "shape": {"m": 1}, "dtype": "int3", "choice": "vendor",
                                  "config": None, "predicted_ms": 1.0}]), "kernels[0].op", "gemm"),
    (lambda d: d.update(kernels=[{"op": "gemm", "shape": {"m": 1}, "dtype": "int3", "choice": "vendor",
                                  "config": None, "predicted_ms": 1.0}]), "kernels[0].dtype", "bf16, fp16, fp8"),
    (lambda d: d.update(target={"gpu": "a100-sxm-80gb", "gpus": 8}, precision={"fp8": "rowwise"}), "precision.fp8",
     "no hardware path for fp8"),
    (lambda d: d.update(target={"gpu": "mi355x", "gpus": 8}, precision={"compute_dtype": "tf32"}),
     "precision.compute_dtype", "no hardware path for tf32"),
])
def test_numbers_enums_and_precision_support_are_checked(data, edit, field, expected):
    edit(data)
    err = _error(data)
    assert err.origin == "r.yaml" and err.field == field and expected in err.expected, str(err)


def test_an_fp8_recipe_for_an_a100_is_refused_however_it_is_made():
    with pytest.raises(SpecError, match="A100.*runs fp64, fp32, tf32, bf16, fp16, int8"):
        Recipe(Target("a100-sxm-80gb", 1), ModelChoice("llama3-8b"), Batch(1, 1, 1, 1024),
               precision=PrecisionPolicy(fp8="rowwise"))
    assert Recipe(Target("a100-sxm-80gb", 1), ModelChoice("llama3-8b"), Batch(1, 1, 1, 1024)).precision.fp8 == "none"


def test_kernel_vocabularies_are_the_kernels():
    from workbench.graph.execution import TRITON_OPS
    from workbench.recipe.schema import KERNEL_DTYPES, KERNEL_OPS
    from workbench.select import GEMM_DTYPES

    assert set(KERNEL_OPS) == set(TRITON_OPS) and set(KERNEL_DTYPES) == set(GEMM_DTYPES)


def test_each_choice_is_spelled_once_as_its_fields_literal():
    """Every enum field's type is the Literal its tuple of choices comes from; the checkpointing modes are the
    analytical model's (``workbench.config``), and the sharding a recipe carries is one the model prices."""
    from typing import get_args, get_type_hints

    from workbench import config
    from workbench.recipe import schema

    fields = {(schema.PrecisionPolicy, "param_dtype"): schema.PARAM_DTYPES,
              (schema.PrecisionPolicy, "compute_dtype"): schema.COMPUTE_DTYPES,
              (schema.PrecisionPolicy, "reduce_dtype"): schema.REDUCE_DTYPES,
              (schema.PrecisionPolicy, "fp8"): schema.FP8_RECIPES,
              (schema.ActivationCheckpointing, "mode"): schema.CHECKPOINT_MODES,
              (schema.ParallelismChoice, "sharding"): schema.SHARDINGS,
              (schema.KernelChoice, "choice"): schema.KERNEL_CHOICES,
              (schema.EmbeddingPlacement, "placement"): schema.PLACEMENTS}
    for (cls, name), choices in fields.items():
        assert get_args(get_type_hints(cls)[name]) == choices, (cls.__name__, name)
    assert schema.CHECKPOINT_MODES is config.CHECKPOINTING and set(schema.SHARDINGS) <= set(config.SHARDINGS)
    assert set(schema.MODELLED_PRECISION) == set(schema.FP8_RECIPES) - {"none"}


def test_absent_sections_take_the_dataclass_defaults():
    data = make_recipe("llama3-8b", "h200", TrainingConfig(1, 1024), overrides={"num_layers": 1}).to_dict()
    for key in ("precision", "activation_checkpointing", "parallelism", "compile"):
        del data[key]
    recipe = Recipe.from_dict(data)
    assert (recipe.precision, recipe.activation_checkpointing, recipe.parallelism) == (
        PrecisionPolicy(), ActivationCheckpointing(), ParallelismChoice())
    assert recipe.compile is Recipe.__dataclass_fields__["compile"].default


def _shipped_recipes() -> list:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return sorted(p for p in root.glob("benchmarks/**/recipes/*.yaml"))


def test_every_shipped_recipe_still_loads():
    paths = _shipped_recipes()
    assert len(paths) >= 40
    for path in paths:
        assert load_recipe(path).schema_version in SCHEMA_VERSIONS, path


# ---- versions and LoRA ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora_recipe() -> Recipe:
    cfg = TrainingConfig(2, 4096, parallelism=Parallelism(dp=8, sharding="ddp"), global_batch=64, lora_rank=16,
                         lora_targets=("q", "v", "down"))
    return make_recipe("llama3-8b", "h200", cfg, overrides={"num_layers": 4})


def test_a_lora_configuration_is_recorded_and_re_predicted(lora_recipe, tmp_path):
    assert lora_recipe.lora == LoRAChoice(16, ("q", "v", "down"))
    cfg = training_config(lora_recipe)
    assert (cfg.lora_rank, cfg.lora_targets) == (16, ("q", "v", "down"))
    d = lora_recipe.to_dict()
    assert d["schema_version"] == lora_recipe.schema_version == SCHEMA_VERSION == 2
    assert d["lora"] == {"rank": 16, "targets": ["q", "v", "down"]} and list(d).index("lora") == 9
    again = load_recipe(save_recipe(lora_recipe, tmp_path / "lora.yaml"))
    assert again == lora_recipe
    for made in (again, lora_recipe):  # the same numbers, from the file as from the configuration
        assert predict_recipe(made).summary.step_time_s == lora_recipe.predicted.step_time_s
    full = make_recipe("llama3-8b", "h200", dataclasses.replace(cfg, lora_rank=0), overrides={"num_layers": 4})
    assert full.lora is None and full.predicted.step_time_s > lora_recipe.predicted.step_time_s  # base grads cost
    assert "LoRA fine-tuning: rank-16 adapters on q, v, down" in dumps(lora_recipe)


def test_virtual_stages_make_a_version_2_file_and_plain_1f1b_stays_version_1(recipe):
    cfg = TrainingConfig(1, 4096, parallelism=Parallelism(dp=2, pp=2, virtual_stages=2), global_batch=4)
    interleaved = make_recipe("llama3-8b", "h200", cfg, overrides={"num_layers": 8})
    assert interleaved.schema_version == 2 and interleaved.to_dict()["parallelism"]["virtual_stages"] == 2
    assert loads(dumps(interleaved)) == interleaved
    assert "virtual_stages" not in recipe.to_dict()["parallelism"] and "lora" not in recipe.to_dict()


def test_version_1_files_still_read_with_and_without_virtual_stages(data, recipe):
    assert Recipe.from_dict(copy.deepcopy(data)) == recipe  # version 1's layout
    written_by_8f97e69 = copy.deepcopy(data)  # that workbench wrote virtual_stages under version 1
    written_by_8f97e69["parallelism"]["virtual_stages"] = 1
    assert Recipe.from_dict(written_by_8f97e69) == recipe
    as_v2 = copy.deepcopy(data)
    as_v2["schema_version"] = 2  # a version 2 file that uses no version 2 field reads the same
    assert Recipe.from_dict(as_v2) == recipe and Recipe.from_dict(as_v2).schema_version == 1


@pytest.mark.parametrize("lora, field, expected", [
    ({"rank": 0}, "lora.rank", ">= 1"),
    ({"rank": 16.5}, "lora.rank", "an integer"),
    ({"rank": 16, "targets": ["q", "wq"]}, "lora.targets", "items from q, k, v, o, gate, up, down"),
    ({"rank": 16, "targets": "q"}, "lora.targets", "a list of strings"),
    ({"rank": 16, "targets": []}, "lora.targets", "one or more distinct linears"),
    ({"rank": 16, "targets": ["q", "q"]}, "lora.targets", "one or more distinct linears"),
    ({"rank": 16, "alpha": 32}, "lora.alpha", "no such field"),
])
def test_bad_lora_fields_are_named(lora_recipe, lora, field, expected):
    data = copy.deepcopy(lora_recipe.to_dict())
    data["lora"] = lora
    err = _error(data)
    assert err.field == field and expected in err.expected, str(err)


def test_lora_the_model_cannot_price_is_refused_at_load(lora_recipe):
    fsdp = copy.deepcopy(lora_recipe.to_dict())
    fsdp["parallelism"]["sharding"] = "fsdp"
    assert "ddp or zero1 with LoRA" in _error(fsdp).expected
    dlrm = make_recipe("dlrm-dcnv2", "h200", TrainingConfig(64)).to_dict()
    dlrm.update(schema_version=2, lora={"rank": 8})
    err = _error(dlrm)
    assert err.field == "lora.rank" and "transformers" in err.expected
