"""Recipes in torchtitan's language: a v0.2.x TOML job config, and command-line overrides for current torchtitan.

What was checked (pytorch/torchtitan, read through the code index, not installed):
  * v0.2.x TOML: ``torchtitan/config/job_config.py`` of the v0.2 line -- [job] dump_folder/description;
    [model] name/flavor/hf_assets_path/converters; [training] local_batch_size/global_batch_size/seq_len/steps/
    dtype/mixed_precision_param/mixed_precision_reduce; [parallelism] data_parallel_replicate_degree/
    data_parallel_shard_degree/tensor_parallel_degree/pipeline_parallel_degree/context_parallel_degree/
    expert_parallel_degree; [activation_checkpoint] mode (none|selective|full)/selective_ac_option;
    [compile] enable/components; [quantize.linear.float8] recipe_name (tensorwise|rowwise|rowwise_with_gw_hp)/
    enable_fsdp_float8_all_gather/precompute_float8_dynamic_scale_for_fsdp/filter_fqns with
    converters = ["quantize.linear.float8"]; [quantize.linear.mx] recipe_name (mxfp8_cublas) with
    converters = ["quantize.linear.mx"]. Layout as in ``torchtitan/models/llama3/train_configs/llama3_8b.toml``.
  * Current torchtitan (Python presets, ``run_train.sh`` takes MODULE / CONFIG, e.g. llama3 / llama3_8b, and passes
    ``--section.option`` overrides through tyro): ``torchtitan/config/training.py`` at f204eb6 counts the batch in
    tokens (num_tokens_per_microbatch_per_dp_rank, num_tokens_per_train_step, max_context_length; dtype,
    mixed_precision_param/reduce); parallelism keeps the degree names above; activation_checkpoint.mode. There,
    compile and fp8 converters are part of the Python preset (no flat flag), so they are stated in comments.
Model structure (layers, vocabulary) is a torchtitan *flavor*, not a config key: overrides become comments naming
the flavor fields to change.
"""

from __future__ import annotations

import json

from workbench.errors import SpecError
from workbench.models import TransformerModel
from workbench.recipe.build import recipe_model
from workbench.recipe.io import header_lines
from workbench.recipe.schema import Recipe

# workbench catalog name -> (torchtitan module, flavor, current preset function)
_TORCHTITAN_MODELS = {
    "llama3-8b": ("llama3", "8B", "llama3_8b"),
    "llama3-70b": ("llama3", "70B", "llama3_70b"),
    "llama3-405b": ("llama3", "405B", "llama3_405b"),
}
# workbench model field -> torchtitan TransformerModelArgs field (llama3 flavors)
_FLAVOR_FIELDS = {"num_layers": "n_layers", "vocab_size": "vocab_size", "hidden_size": "dim", "num_heads": "n_heads",
                  "num_kv_heads": "n_kv_heads", "ffn_hidden_size": "hidden_dim (via ffn_dim_multiplier/multiple_of)",
                  "head_dim": "head_dim (dim / n_heads)"}
_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16"}
FLOAT8_RECIPE_NAMES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
"""The workbench fp8 recipes that are torchtitan [quantize.linear.float8] recipe_name values, spelled the same."""


def _check(recipe: Recipe) -> TransformerModel:
    model = recipe_model(recipe)
    if not isinstance(model, TransformerModel):
        raise SpecError("torchtitan export", "model.name", recipe.model.name,
                        "a transformer (torchtitan trains language models; export DLRM/HSTU recipes as YAML or JSON)")
    if recipe.precision.compute_dtype == "fp16":
        raise SpecError("torchtitan export", "precision.compute_dtype", "fp16", "bf16, fp32 or tf32 (torchtitan's "
                        "mixed_precision_param is bfloat16 or float32)")
    return model


def _comments(recipe: Recipe) -> list[str]:
    lines = header_lines(recipe)
    name = recipe.model.name
    if name not in _TORCHTITAN_MODELS:
        lines.append(f"model {name} has no torchtitan flavor: register one with its fields before running")
    for key, value in recipe.model.overrides.items():
        lines.append(f"model override {key} = {value}: set flavor field {_FLAVOR_FIELDS.get(key, key)} "
                     f"(a custom flavor; torchtitan has no config key for it)")
    for revision in recipe.model.revisions:
        lines.append(f"revision {revision.name}: {revision.field} {revision.old} -> {revision.new} "
                     f"(predicted x{revision.predicted_gain:.3f}) {revision.reason}")
    if recipe.precision.compute_dtype == "tf32":
        lines.append("tf32: set torch.backends.cuda.matmul.allow_tf32 = True (no torchtitan config key)")
    if recipe.activation_checkpointing.layers != "all":
        lines.append(f"activation checkpointing on blocks {list(recipe.activation_checkpointing.layers)} only: "
                     "torchtitan applies one mode to every block; use selective_ac_option = 'N' for every N-th")
    if recipe.kernels:
        lines.append(f"{len(recipe.kernels)} per-op kernel choices are in the workbench recipe (not a torchtitan key)")
    return lines


def _model_names(recipe: Recipe) -> tuple[str, str, str]:
    return _TORCHTITAN_MODELS.get(recipe.model.name, (recipe.model.name, "custom", recipe.model.name))


def torchtitan_sections(recipe: Recipe) -> dict[str, dict]:
    """The v0.2.x job config as {section: {option: value}}; dotted section names are TOML sub-tables."""
    _check(recipe)
    module, flavor, _ = _model_names(recipe)
    p, b, prec = recipe.parallelism, recipe.batch, recipe.precision
    converters = (["quantize.linear.float8"] if prec.fp8 in FLOAT8_RECIPE_NAMES
                  else {"none": [], "mxfp8": ["quantize.linear.mx"]}[prec.fp8])
    sections: dict[str, dict] = {
        "job": {"dump_folder": "./outputs",
                "description": f"{recipe.model.name} on {recipe.target.gpus} x {recipe.target.gpu} (workbench recipe)"},
        "model": {"name": module, "flavor": flavor, "hf_assets_path": f"./assets/hf/{recipe.model.name}",
                  "converters": converters},
        "optimizer": {"name": "AdamW", "lr": 3e-4, "eps": 1e-8},
        "training": {"local_batch_size": b.micro_batch, "global_batch_size": b.global_batch, "seq_len": b.seq_len,
                     "steps": 1000, "dtype": "float32" if prec.param_dtype == "fp32" else "bfloat16",
                     "mixed_precision_param": _DTYPES[prec.compute_dtype],
                     "mixed_precision_reduce": "float32" if prec.reduce_dtype == "fp32" else "bfloat16",
                     "dataset": "c4"},
        "parallelism": {"data_parallel_replicate_degree": p.dp if p.sharding == "ddp" else 1,
                        "data_parallel_shard_degree": p.dp if p.sharding == "fsdp" else 1,
                        "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
                        "context_parallel_degree": p.cp, "expert_parallel_degree": p.ep},
        "activation_checkpoint": {"mode": recipe.activation_checkpointing.mode},
        "compile": {"enable": recipe.compile, "components": ["model", "loss"]},
    }
    if recipe.activation_checkpointing.mode == "selective":
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    if prec.fp8 in FLOAT8_RECIPE_NAMES:
        # the FSDP fp8 all-gather (and its precomputed scales) is recommended for tensorwise scaling only
        fsdp_fp8 = prec.fp8 == "tensorwise" and p.sharding == "fsdp"
        sections["quantize.linear.float8"] = {"recipe_name": prec.fp8, "filter_fqns": ["output"],
                                              "enable_fsdp_float8_all_gather": fsdp_fp8,
                                              "precompute_float8_dynamic_scale_for_fsdp": fsdp_fp8}
    elif prec.fp8 == "mxfp8":
        sections["quantize.linear.mx"] = {"recipe_name": "mxfp8_cublas", "filter_fqns": ["output"]}
    return sections


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are valid TOML escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def to_torchtitan_toml(recipe: Recipe) -> str:
    """A torchtitan v0.2.x TOML job config (``--job.config_file``) with a comment header."""
    sections = torchtitan_sections(recipe)
    out = [f"# {line}" for line in _comments(recipe)]
    out.append("# torchtitan v0.2.x job config written by workbench; run: "
               f"NGPU={recipe.target.gpus} CONFIG_FILE=<this file> ./run_train.sh")
    for name, options in sections.items():
        out += ["", f"[{name}]"]
        out += [f"{key} = {_toml_value(value)}" for key, value in options.items()]
    return "\n".join(out) + "\n"


def torchtitan_args(recipe: Recipe) -> list[str]:
    """``--section.option value`` overrides for current torchtitan (token-counted batch; see module docstring)."""
    _check(recipe)
    p, b, prec = recipe.parallelism, recipe.batch, recipe.precision
    args = {
        "training.num_tokens_per_microbatch_per_dp_rank": b.micro_batch * b.seq_len,
        "training.num_tokens_per_train_step": b.global_batch * b.seq_len,
        "training.max_context_length": b.seq_len,
        "training.dtype": "float32" if prec.param_dtype == "fp32" else "bfloat16",
        "training.mixed_precision_param": _DTYPES[prec.compute_dtype],
        "training.mixed_precision_reduce": "float32" if prec.reduce_dtype == "fp32" else "bfloat16",
        "parallelism.data_parallel_replicate_degree": p.dp if p.sharding == "ddp" else 1,
        "parallelism.data_parallel_shard_degree": p.dp if p.sharding == "fsdp" else 1,
        "parallelism.tensor_parallel_degree": p.tp,
        "parallelism.pipeline_parallel_degree": p.pp,
        "parallelism.context_parallel_degree": p.cp,
        "parallelism.expert_parallel_degree": p.ep,
        "activation_checkpoint.mode": recipe.activation_checkpointing.mode,
    }
    return [part for key, value in args.items() for part in (f"--{key}", str(value))]


def to_torchtitan_args(recipe: Recipe) -> str:
    """A ``run_train.sh`` command line for current torchtitan with the recipe's overrides, and a comment header."""
    module, _, preset = _model_names(recipe)
    lines = [f"# {line}" for line in _comments(recipe)]
    lines.append(f"# compile {'on' if recipe.compile else 'off'} and fp8 ({recipe.precision.fp8}) are set in the "
                 "Python preset in current torchtitan (no flat override)")
    args = torchtitan_args(recipe)
    pairs = [f"  {args[i]} {args[i + 1]}" for i in range(0, len(args), 2)]
    lines.append(f"NGPU={recipe.target.gpus} MODULE={module} CONFIG={preset} ./run_train.sh \\")
    lines.append(" \\\n".join(pairs))
    return "\n".join(lines) + "\n"
