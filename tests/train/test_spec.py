import dataclasses

import pytest

from workbench.errors import SpecError
from workbench.models import get_model
from workbench.recipe import load_recipe
from workbench.recipe.build import make_recipe
from workbench.recipe.schema import COMPUTE_DTYPES, FP8_RECIPES, PARAM_DTYPES, REDUCE_DTYPES, KernelChoice, Recipe
from workbench.config import Parallelism, TrainingConfig
from workbench.train.spec import FP8_MODES, JobError, JobSpec, check_supported, load_job_spec


def recipe_dict(**changes) -> dict:
    data = make_recipe("llama3-8b", "h200-sxm", TrainingConfig(2, 128), overrides={"num_layers": 2}).to_dict()
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return data


def test_reads_the_recipe_fields(tiny_recipe):
    spec = load_job_spec(tiny_recipe("r", TrainingConfig(4, 64, activation_checkpointing="selective")))
    assert spec.model.num_layers == 2 and spec.model.hidden_size == 64 and spec.model.head_dim == 16
    assert (spec.micro_batch, spec.seq_len, spec.global_batch, spec.grad_accumulation) == (4, 64, 4, 1)
    assert spec.checkpointing == "selective" and spec.checkpointed(1) and spec.fp8 == "none"
    assert spec.predicted["step_time_s"] > 0 and spec.tokens_per_step == 256
    check_supported(spec, world_size=1)


def test_overrides_apply_as_the_predictions_did():
    spec = JobSpec.from_dict(recipe_dict())
    base = get_model("llama3-8b")
    assert spec.model.num_layers == 2 and spec.model.hidden_size == base.hidden_size
    assert spec.model.num_params < base.num_params


@pytest.mark.parametrize("key, value, words", [
    ("parallelism__pp", 2, "pipeline parallelism"),
    ("parallelism__cp", 2, "context parallelism"),
])
def test_unsupported_parallelism_is_a_clear_error(key, value, words):
    data = recipe_dict(**{key: value})
    data["target"]["gpus"] = 2
    spec = JobSpec.from_dict(data)
    with pytest.raises(JobError, match=words):
        check_supported(spec, world_size=2)


def test_world_size_must_match_the_recipe():
    spec = JobSpec.from_dict(recipe_dict(parallelism__dp=8, batch__global_batch=16, target__gpus=8))
    with pytest.raises(JobError, match="torchrun --nproc_per_node 8"):
        check_supported(spec, world_size=1)


def test_dlrm_runs_on_one_gpu_only():
    data = make_recipe("dlrm-dcnv2", "h200-sxm", TrainingConfig(64, parallelism=Parallelism(dp=2))).to_dict()
    with pytest.raises(JobError, match="TorchRec"):
        check_supported(JobSpec.from_dict(data), world_size=2)


def test_moe_is_refused():
    data = make_recipe("mixtral-8x7b", "h200-sxm", TrainingConfig(1, 128), overrides={"num_layers": 1}).to_dict()
    with pytest.raises(JobError, match="mixture-of-experts"):
        check_supported(JobSpec.from_dict(data), world_size=1)


def test_bad_fields_name_the_field():
    with pytest.raises(SpecError, match="batch.global_batch"):
        JobSpec.from_dict(recipe_dict(batch__global_batch=7))
    with pytest.raises(SpecError, match="schema_version"):
        JobSpec.from_dict(recipe_dict(schema_version=3))  # newer than this workbench reads
    with pytest.raises(SpecError, match="activation_checkpointing.mode"):
        JobSpec.from_dict(recipe_dict(activation_checkpointing={"mode": "some", "layers": "all"}))
    with pytest.raises(SpecError, match="overrides.num_layerz"):
        JobSpec.from_dict(recipe_dict(model={"name": "llama3-8b", "overrides": {"num_layerz": 2}}))


def test_lora_is_refused_naming_the_field_and_why():
    recipe = make_recipe("llama3-8b", "h200-sxm", TrainingConfig(2, 128, lora_rank=16), overrides={"num_layers": 2})
    spec = JobSpec.from_recipe(recipe)
    assert spec.recipe.lora.rank == 16  # read as recorded, then refused: the job trains every weight
    with pytest.raises(JobError, match=r"lora = rank 16 on q, k, v, o: the reference job trains every weight"):
        check_supported(spec, world_size=1)


def test_checkpoint_layers_outside_the_model():
    spec = JobSpec.from_dict(recipe_dict(activation_checkpointing={"mode": "full", "layers": [0, 5]}))
    with pytest.raises(JobError, match=r"\[5\]"):
        check_supported(spec, world_size=1)


def test_recipe_file_errors_come_from_the_recipe_loader(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("schema_version: 1\ntarget: {gpu: h200-sxm, gpus: 1}\n")
    with pytest.raises(SpecError):
        load_job_spec(path)
    with pytest.raises(SpecError):
        load_recipe(path)


def test_fp16_is_refused_for_want_of_loss_scaling():
    data = recipe_dict(precision={"param_dtype": "fp32", "compute_dtype": "fp16", "reduce_dtype": "fp32", "fp8": "none"})
    with pytest.raises(JobError, match="loss scaling"):
        check_supported(JobSpec.from_dict(data), world_size=1)


def test_spec_checks_run_without_torch():
    import subprocess
    import sys

    code = ("import sys, workbench.train, workbench.train.spec; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_selected_kernels_split_into_triton_configs_and_vendor_shapes():
    recipe = make_recipe("llama3-8b", "h200", TrainingConfig(1, 4096), overrides={"num_layers": 2},
                         select_kernels=True)
    spec = JobSpec.from_dict(recipe.to_dict(), "test")
    vendor, triton = spec.vendor_shapes("gemm"), spec.kernel_configs("gemm")
    assert vendor and not vendor & set(triton)  # the shim sent some GEMM shapes to cuBLAS
    assert len(vendor) + len(triton) == len([k for k in recipe.kernels if k.op == "gemm"])


def test_fp8_recipes_by_torchao_name_and_a_bad_one_lists_them():
    data = recipe_dict(precision={"param_dtype": "fp32", "compute_dtype": "bf16", "reduce_dtype": "fp32",
                                  "fp8": "rowwise_with_gw_hp"})
    assert JobSpec.from_dict(data).fp8 == "rowwise_with_gw_hp"
    data["precision"]["fp8"] = "rowwise_gw_hp"
    with pytest.raises(SpecError) as err:
        JobSpec.from_dict(data, "r.yaml")
    assert (err.value.origin, err.value.field) == ("r.yaml", "precision.fp8")  # the schema's error, all its recipes
    assert err.value.expected == f"one of {', '.join(FP8_RECIPES)}"


def test_mxfp8_is_a_valid_recipe_the_job_refuses_by_name():
    recipe = make_recipe("llama3-8b", "b200", TrainingConfig(2, 128, precision="mxfp8"), overrides={"num_layers": 2})
    spec = JobSpec.from_recipe(recipe)
    assert spec.fp8 == "mxfp8" and "mxfp8" not in FP8_MODES
    with pytest.raises(JobError, match=r"precision.fp8 = 'mxfp8'.*MX blocks.*tensorwise, rowwise.*torchtitan"):
        check_supported(spec, world_size=1)


def test_the_jobs_fp8_modes_are_the_schemas_that_the_fp8_linear_runs():
    pytest.importorskip("torch")
    from workbench.train.layers import FP8_LINEAR_RECIPES

    assert FP8_MODES == tuple(r for r in FP8_RECIPES if r != "mxfp8")
    assert set(FP8_MODES) == {"none", *FP8_LINEAR_RECIPES}


def test_the_jobs_torch_dtypes_cover_the_schemas_compute_dtypes():
    pytest.importorskip("torch")
    from workbench.train.parallel import DTYPES

    assert set(DTYPES) == set(COMPUTE_DTYPES) >= set(PARAM_DTYPES) | set(REDUCE_DTYPES)


def test_kernel_choice_is_the_schemas_one_class():
    import workbench.train.spec as spec_module

    assert spec_module.KernelChoice is KernelChoice
    recipe = make_recipe("llama3-8b", "h200", TrainingConfig(1, 4096), overrides={"num_layers": 2},
                         select_kernels=True)
    assert recipe.kernels and JobSpec.from_recipe(recipe).kernels == recipe.kernels


def test_the_spec_from_a_recipe_object_equals_the_one_from_its_file(tmp_path):
    from workbench.recipe import save_recipe

    recipe = make_recipe("llama3-8b", "h200-sxm", TrainingConfig(2, 128, activation_checkpointing="full",
                                                                 parallelism=Parallelism(dp=2, sharding="ddp")),
                         overrides={"num_layers": 2}, select_kernels=True)
    path = save_recipe(recipe, tmp_path / "r.yaml")
    from_file, from_object = load_job_spec(path), JobSpec.from_recipe(recipe, name="r")
    assert from_file == from_object and from_file.model == from_object.model
    fields = ("model_name", "overrides", "target_gpu", "target_gpus", "param_dtype", "compute_dtype",
              "reduce_dtype", "fp8", "micro_batch", "global_batch", "grad_accumulation", "seq_len", "checkpointing",
              "checkpoint_layers", "dp", "sharding", "tp", "pp", "cp", "ep", "compile", "kernels", "predicted")
    assert {f: getattr(from_file, f) for f in fields} == {f: getattr(from_object, f) for f in fields}
    assert (from_file.sharding, from_file.checkpointing, from_file.dp) == ("ddp", "full", 2)
    assert from_file.predicted == dataclasses.asdict(recipe.predicted)


def test_a_recipe_file_is_read_and_validated_once(tiny_recipe, monkeypatch):
    """The schema reads the file into a Recipe once, and the spec is that Recipe object, not a second parse."""
    import workbench.recipe.parse as parse

    read = []
    real = parse.recipe_from_dict
    monkeypatch.setattr(parse, "recipe_from_dict", lambda data, origin: read.append((origin, real(data, origin)))
                        or read[-1][1])
    path = tiny_recipe("once")
    spec = load_job_spec(path)
    assert [origin for origin, _ in read] == [str(path)] and spec.recipe is read[0][1] and spec.name == "once"


@pytest.mark.parametrize("section, key, value, expected", [
    ("parallelism", "sharding", "zero3", "one of fsdp, ddp"),
    ("activation_checkpointing", "mode", "some", "one of none, selective, full"),
    ("precision", "compute_dtype", "fp8", "one of fp32, tf32, bf16, fp16"),
    ("batch", "micro_batch", 0, ">= 1"),
])
def test_a_bad_value_in_a_recipe_file_is_the_schemas_error_naming_the_file(tmp_path, section, key, value, expected):
    import yaml

    data = recipe_dict(**{f"{section}__{key}": value})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as job_err:
        load_job_spec(path)
    with pytest.raises(SpecError) as schema_err:
        load_recipe(path)
    err = job_err.value
    assert (err.origin, err.field, err.value) == (str(path), f"{section}.{key}", value) and expected in err.expected
    assert str(err) == str(schema_err.value)


def test_from_dict_is_the_schemas_reader():
    data = recipe_dict(parallelism__sharding="zero3")
    with pytest.raises(SpecError) as job_err:
        JobSpec.from_dict(data, "d.yaml")
    with pytest.raises(SpecError) as schema_err:
        Recipe.from_dict(data, "d.yaml")
    assert str(job_err.value) == str(schema_err.value)
    assert JobSpec.from_dict(recipe_dict(), name="n") == JobSpec.from_recipe(Recipe.from_dict(recipe_dict()), "n")


def test_tp_the_model_allows_but_the_job_does_not_shard():
    """tp = 16 on 8 kv heads: the model replicates them (a multiple is allowed), the job only shards them."""
    data = recipe_dict(parallelism__tp=16, target__gpus=16)
    spec = JobSpec.from_dict(data)
    with pytest.raises(JobError, match="num_kv_heads=8"):
        check_supported(spec, world_size=16)
    with pytest.raises(SpecError, match="parallelism.tp"):  # tp not dividing the heads: the schema's to refuse
        JobSpec.from_dict(recipe_dict(parallelism__tp=3, target__gpus=3))


def test_a_precision_the_target_gpu_lacks_is_refused_before_the_run(tmp_path):
    """fp8 on an A100: prediction rejects it, so the job refuses it too, from a dict or from a file."""
    data = recipe_dict(target={"gpu": "a100-sxm-80gb", "gpus": 1},
                       precision={"param_dtype": "fp32", "compute_dtype": "bf16", "reduce_dtype": "fp32",
                                  "fp8": "rowwise"})
    with pytest.raises(SpecError, match="no hardware path for fp8"):
        JobSpec.from_dict(data, "r.yaml")
    data["precision"]["fp8"] = "none"
    assert JobSpec.from_dict(data).target_gpu == "a100-sxm-80gb"


def test_a_job_prediction_that_cannot_be_made_says_why(tmp_path, capsys):
    from workbench.train.job import job_prediction

    predicted = job_prediction(tmp_path / "gone.yaml")
    assert set(predicted) == {"unavailable"} and "gone.yaml" in predicted["unavailable"]
    assert "no job-level prediction" in capsys.readouterr().err


def test_the_job_prediction_takes_the_recipe_read_once(tiny_recipe):
    from workbench.train.job import job_prediction

    spec = load_job_spec(tiny_recipe("p"))
    from_object = job_prediction(spec.recipe)
    assert from_object["step_time_s"] > 0 and from_object == job_prediction(tiny_recipe("p2"))


def test_a_family_the_job_has_no_model_for_is_refused_by_its_family():
    data = make_recipe("hstu-gr", "h200-sxm", TrainingConfig(8)).to_dict()
    spec = JobSpec.from_dict(data)
    assert spec.family == "hstu" and spec.seq_len == data["batch"]["seq_len"]  # the family counts its tokens
    with pytest.raises(JobError, match=r"is a hstu model; the reference job trains these families only "
                                       r"\(transformer: .*; dlrm: "):
        check_supported(spec, world_size=1)
    dlrm = JobSpec.from_dict(make_recipe("dlrm-dcnv2", "h200-sxm", TrainingConfig(64)).to_dict())
    assert dlrm.family == "dlrm" and dlrm.seq_len == 1
