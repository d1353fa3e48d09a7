import pytest

from workbench.errors import SpecError
from workbench.models import get_model
from workbench.recipe import load_recipe
from workbench.recipe.build import make_recipe
from workbench.config import Parallelism, TrainingConfig
from workbench.train.spec import JobError, JobSpec, check_supported, load_job_spec


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
        JobSpec.from_dict(recipe_dict(schema_version=2))
    with pytest.raises(SpecError, match="activation_checkpointing.mode"):
        JobSpec.from_dict(recipe_dict(activation_checkpointing={"mode": "some", "layers": "all"}))
    with pytest.raises(SpecError, match="overrides.num_layerz"):
        JobSpec.from_dict(recipe_dict(model={"name": "llama3-8b", "overrides": {"num_layerz": 2}}))


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
        JobSpec.from_dict(data)
    assert err.value.field.endswith("fp8") and "rowwise_with_gw_hp" in err.value.expected
    assert "mxfp8" not in err.value.expected  # the job does not run mxfp8


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
