"""Recipes in torchtitan's language: a 0.2.x TOML job config, and for torchtitan 0.3.0 a Python config function
(``torchtitan-py``) or, where flat flags can say everything, a ``run_train.sh`` line (``torchtitan-args``).

Supported consumers, checked by running their own config managers on every export of a matrix
(``tests/recipe/test_torchtitan_consumer.py``):
  * **torchtitan 0.2.2** (``torchtitan/config/job_config.py``, read with ``--job.config_file``): [model]
    name/flavor/hf_assets_path/converters; [training] local_batch_size/global_batch_size/seq_len/dtype/
    mixed_precision_param/mixed_precision_reduce (float32 only); [parallelism] *_degree and, for pp > 1,
    pipeline_parallel_schedule (1F1B | Interleaved1F1B), _layers_per_stage, _first/_last_stage_less_layers;
    [activation_checkpoint] mode/selective_ac_option; [compile] enable/components; [quantize.linear.float8]
    recipe_name (rowwise|rowwise_with_gw_hp; unset = tensorwise, the only one that takes
    enable_fsdp_float8_all_gather: ``components/quantization/float8.py`` asserts they are not both set);
    [quantize.linear.mx] recipe_name ``mxfp8_cublas`` (torchao <= 0.16: 0.18 dropped MXLinearConfig).
    Layout and hf_assets_path as in ``torchtitan/models/llama3/train_configs/llama3_8b.toml``.
  * **torchtitan 0.3.0** (the wheel; ``torchtitan/config/README.md`` of its release/0.3 branch): a run is a
    Python function returning ``Trainer.Config``, named by ``--module`` (any importable module) and ``--config``;
    the ``--section.option`` flags are frozen, and ``model_spec`` (flavor, layers, float8/mx converters) is not
    on the command line at all. ``training.local_batch_size/global_batch_size/seq_len``, ``compile.enable``,
    ``activation_checkpoint`` = ``SelectiveAC.Config()`` | ``FullAC.Config()`` | None (CLI: a final
    ``activation-checkpoint:selective|full|none``); ``Float8LinearConverter.Config(recipe_name=rowwise|
    rowwise_with_gw_hp)`` (no tensorwise), ``MXFP8LinearConverter.Config`` (SM100+ only); pipeline parallelism
    needs ``training.disable_cuda_graphs``; LoRA is ``LoRAConverter.Config(rank, alpha, target_modules)``
    (``torchtitan/components/lora.py``), after any quantization converter.
LoRA (``Recipe.lora``): torchtitan 0.2.2 has none (no converter, no config key), so its TOML refuses a LoRA recipe;
0.3.0's ``LoRAConverter`` trains it, from a config function only (``torchtitan-py``: converters are in
``model_spec``, which no flag sets).
Selective checkpointing is exported as torchtitan's per-op policy (0.2.2 ``selective_ac_option = "op"``, 0.3.0
``SelectiveAC``): the workbench's ``torchtitan`` stack (``specs/stacks/torchtitan.yaml``) models that policy.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from workbench.errors import SpecError
from workbench.families import family_of
from workbench.hardware import get_gpu
from workbench.recipe.build import recipe_model
from workbench.recipe.io import header_lines
from workbench.recipe.schema import FP8_RECIPES, MODELLED_PRECISION, Recipe

if TYPE_CHECKING:
    from workbench.models import TransformerModel

# workbench catalog name -> (torchtitan module, flavor, preset function, standard hf_assets_path, preset lr)
_TORCHTITAN_MODELS = {
    "llama3-8b": ("llama3", "8B", "llama3_8b", "./assets/hf/Llama-3.1-8B", 3e-4),
    "llama3-70b": ("llama3", "70B", "llama3_70b", "./assets/hf/Llama-3.1-70B", 1.5e-4),
    "llama3-405b": ("llama3", "405B", "llama3_405b", "./assets/hf/Llama-3.1-405B", 8e-5),
    # 0.3.0 only: llama3 flavor "1B" (tied embeddings); no preset function, so llama3_8b's settings are the base
    "llama3.2-1b": ("llama3", "1B", "llama3_8b", "./assets/hf/Llama-3.2-1B", 3e-4),
}
_V02_FLAVORS = ("8B", "70B", "405B")
"""torchtitan 0.2.2's llama3 flavors for catalog models (``torchtitan/models/llama3/__init__.py``)."""
# workbench model field -> torchtitan 0.2.2 TransformerModelArgs field (llama3 flavors)
_FLAVOR_FIELDS = {"num_layers": "n_layers", "vocab_size": "vocab_size", "hidden_size": "dim", "num_heads": "n_heads",
                  "num_kv_heads": "n_kv_heads", "ffn_hidden_size": "hidden_dim (via ffn_dim_multiplier/multiple_of)",
                  "head_dim": "head_dim (dim / n_heads)"}
_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16"}
FLOAT8_RECIPE_NAMES = tuple(r for r in FP8_RECIPES if MODELLED_PRECISION.get(r) in ("fp8", "fp8_gw_hp"))
"""The workbench fp8 recipes that are torchtitan 0.2.x [quantize.linear.float8] recipes, spelled the same: the
schema's torchao float8 recipes (tensorwise, rowwise, rowwise_with_gw_hp), those modelled as fp8 or fp8_gw_hp;
mxfp8 goes to [quantize.linear.mx]."""
_FP8_ARCHS = ("hopper", "blackwell", "blackwell-ultra", "cdna3", "cdna4", "cdna5")
"""float8 linears: NVIDIA SM89+ or AMD gfx942+ (both versions' float8.py)."""
LORA_MODULES = {"q": "wq", "k": "wkv", "v": "wkv", "o": "wo", "gate": "w1", "up": "w3", "down": "w2"}
"""A recipe's LoRA target -> the torchtitan 0.3.0 llama3 ``Linear.Config`` that ``LoRAConverter`` matches by the
last segment of its FQN: unfused attention's ``wq`` and ``wkv`` (one config that builds both wk and wv:
``models/common/config_utils.py`` ``make_gqa_config(fuse_qkv=False)``), ``wo``, and the FFN's
``w2(silu(w1(x)) * w3(x))`` (``models/common/feed_forward.py``): w1 gate, w3 up, w2 down."""
LORA_ALPHA = 16.0
"""The adapters' scale written into a 0.3.0 export: ``LoRAConverter.Config``'s own default. A recipe does not record
alpha (a training hyperparameter like the learning rate, no cost in time); the export says so."""
_SELECTIVE_NOTE = ("selective = torchtitan's per-op policy (saves matmul/attention outputs, recomputes every second "
                   "matmul); the workbench 'torchtitan' stack (specs/stacks/torchtitan.yaml) predicts exactly that")


def _refuse(field: str, value: object, why: str) -> SpecError:
    return SpecError("torchtitan export", field, value, why)


def _check(recipe: Recipe, version: str) -> TransformerModel:
    """The recipe's model, or a SpecError naming what torchtitan ``version`` ("0.2" or "0.3") cannot run."""
    model = recipe_model(recipe)
    family = family_of(model).name
    if family != "transformer":
        raise _refuse("model.name", recipe.model.name, f"a transformer (torchtitan trains language models; export "
                      f"{family} recipes as YAML or JSON)")
    name = recipe.model.name
    if name not in _TORCHTITAN_MODELS or (version == "0.2" and _TORCHTITAN_MODELS[name][1] not in _V02_FLAVORS):
        have = [n for n, m in _TORCHTITAN_MODELS.items() if version == "0.3" or m[1] in _V02_FLAVORS]
        raise _refuse("model.name", name, f"a model torchtitan {version}.x has a module and flavor for "
                      f"({', '.join(have)}); it has none for {name}")
    lora = recipe.lora
    if lora is not None and version == "0.2":
        raise _refuse("lora", f"rank {lora.rank} on {', '.join(lora.targets)}", "no lora section for torchtitan "
                      "0.2.x: 0.2.2 has no LoRA (no converter and no config key; its only lora names are DeepSeek "
                      "V3's q_lora_rank / kv_lora_rank, attention widths), so the TOML would train every weight; "
                      "export torchtitan-py for torchtitan 0.3.0, whose LoRAConverter trains the adapters")
    if lora is not None and ("k" in lora.targets) != ("v" in lora.targets):
        raise _refuse("lora.targets", list(lora.targets), "k and v together or neither (torchtitan 0.3.0 builds "
                      "the k and v projections from one config, wkv, so LoRA adapts both or neither)")
    prec = recipe.precision
    if prec.compute_dtype == "fp16":
        raise _refuse("precision.compute_dtype", "fp16", "bf16, fp32 or tf32 (torchtitan's mixed_precision_param "
                      "is bfloat16 or float32)")
    if prec.reduce_dtype != "fp32":
        raise _refuse("precision.reduce_dtype", prec.reduce_dtype, "fp32 (torchtitan's training."
                      "mixed_precision_reduce accepts only float32)")
    gpu = get_gpu(recipe.target.gpu)
    if prec.fp8 != "none" and gpu.architecture not in _FP8_ARCHS:
        raise _refuse("precision.fp8", prec.fp8, f"none on {gpu.name} ({gpu.architecture}): torchtitan's float8 "
                      "needs NVIDIA SM89+ or AMD MI300 (gfx942)+")
    if prec.fp8 == "mxfp8":
        if version == "0.3" and gpu.vendor != "nvidia":
            raise _refuse("precision.fp8", "mxfp8", f"not mxfp8 on {gpu.name}: torchtitan 0.3.0's "
                          "MXFP8LinearConverter runs on NVIDIA SM100+ only (no AMD path)")
        if not gpu.architecture.startswith(("blackwell", "cdna4", "cdna5")):
            raise _refuse("precision.fp8", "mxfp8", f"not mxfp8 on {gpu.name} ({gpu.architecture}): torchtitan's "
                          "MX linears need SM100+ (0.2.2 also gfx950)")
        if version == "0.2" and recipe.compile and recipe.parallelism.tp > 1:
            raise _refuse("precision.fp8", "mxfp8", "no mxfp8 with compile and TP > 1 (torchtitan 0.2.2 asserts "
                          "'TP not yet supported with torch.compile for mxfp8')")
    if version == "0.3" and prec.fp8 == "tensorwise":
        raise _refuse("precision.fp8", "tensorwise", "rowwise or rowwise_with_gw_hp (torchtitan 0.3.0's "
                      "Float8LinearConverter has no tensorwise recipe; export tensorwise as torchtitan-toml for 0.2.2)")
    return model


def _comments(recipe: Recipe, version: str) -> list[str]:
    lines = header_lines(recipe)
    if version == "0.2":
        for key, value in recipe.model.overrides.items():
            lines.append(f"model override {key} = {value}: NOT applied by this TOML -- set flavor field "
                         f"{_FLAVOR_FIELDS.get(key, key)} in a custom flavor (torchtitan 0.2.x has no config key for "
                         "it), or export torchtitan-py for 0.3.0, which builds the layers")
    for revision in recipe.model.revisions:
        lines.append(f"revision {revision.name}: {revision.field} {revision.old} -> {revision.new} "
                     f"(predicted x{revision.predicted_gain:.3f}) {revision.reason}")
    if recipe.activation_checkpointing.mode == "selective":
        lines.append(_SELECTIVE_NOTE)
    if recipe.precision.compute_dtype == "tf32":
        lines.append("tf32: set torch.backends.cuda.matmul.allow_tf32 = True (no torchtitan config key)")
    if recipe.activation_checkpointing.layers != "all":
        lines.append(f"activation checkpointing on blocks {list(recipe.activation_checkpointing.layers)} only: "
                     "torchtitan applies one mode to every block")
    if recipe.kernels:
        lines.append(f"{len(recipe.kernels)} per-op kernel choices are in the workbench recipe (not a torchtitan key)")
    if recipe.lora is not None:
        lines.append(f"LoRA alpha = {LORA_ALPHA} (LoRAConverter's default; the recipe does not record alpha); LoRA "
                     "fine-tunes trained weights: set config.checkpoint.initial_load_path to them (the preset starts "
                     "from random weights)")
    lines.append("data: the preset's c4 dataset and the tokenizer at hf_assets_path are downloaded by torchtitan's "
                 "scripts/download_hf_assets.py; the optimizer and lr are the preset's for this size")
    return lines


def _dtypes(recipe: Recipe) -> dict[str, str]:
    prec = recipe.precision
    return {"dtype": "float32" if prec.param_dtype == "fp32" else "bfloat16",
            "mixed_precision_param": _DTYPES[prec.compute_dtype], "mixed_precision_reduce": "float32"}


def _degrees(recipe: Recipe) -> dict[str, int]:
    p = recipe.parallelism
    return {"data_parallel_replicate_degree": p.dp if p.sharding == "ddp" else 1,
            "data_parallel_shard_degree": p.dp if p.sharding == "fsdp" else 1,
            "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
            "context_parallel_degree": p.cp, "expert_parallel_degree": p.ep}


def _parallelism(recipe: Recipe, model: TransformerModel) -> dict[str, object]:
    """The [parallelism] section: the degrees, then the pipeline schedule and split."""
    return {**_degrees(recipe), **_pipeline(recipe, model)}


def _pipeline(recipe: Recipe, model: TransformerModel) -> dict[str, object]:
    """The [parallelism] pipeline options of a recipe with pp > 1 ({} without): torchtitan's ``1F1B``, or
    ``Interleaved1F1B`` with ``virtual_stages`` stages per rank, and the split the workbench priced -- every stage
    ceil or floor(layers / stages) blocks, the embedding and the head beside the first and last stage's blocks
    (``pipeline_parallel_{first,last}_stage_less_layers = 0``; torchtitan's default 1 moves a block off each).
    Both versions' ``distributed/pipeline_parallel.py`` count ceil(layers / layers_per_stage) stages and need
    that to be pp x virtual_stages; a split no ``layers_per_stage`` gives is refused."""
    p = recipe.parallelism
    if p.pp == 1:
        return {}
    out: dict[str, object] = {"pipeline_parallel_schedule": "Interleaved1F1B" if p.virtual_stages > 1 else "1F1B",
                              "pipeline_parallel_first_stage_less_layers": 0,
                              "pipeline_parallel_last_stage_less_layers": 0}
    if p.virtual_stages > 1:  # 1F1B takes one stage per rank by default; a looped schedule is told its stages
        stages = p.pp * p.virtual_stages
        per_stage = -(-model.num_layers // stages)
        if -(-model.num_layers // per_stage) != stages:
            raise _refuse("parallelism.virtual_stages", p.virtual_stages,
                          f"a virtual_stages for which some layers_per_stage splits the {model.num_layers} layers "
                          f"into pp x virtual_stages = {stages} stages (torchtitan counts ceil(layers / "
                          f"layers_per_stage) stages; {per_stage} per stage gives "
                          f"{-(-model.num_layers // per_stage)})")
        out["pipeline_parallel_layers_per_stage"] = per_stage
    return out


# ---- torchtitan 0.2.x: TOML ----------------------------------------------------------------------------------

def torchtitan_sections(recipe: Recipe) -> dict[str, dict]:
    """The 0.2.x job config as {section: {option: value}}; dotted section names are TOML sub-tables."""
    model = _check(recipe, "0.2")
    module, flavor, _, assets, lr = _TORCHTITAN_MODELS[recipe.model.name]
    p, b, prec = recipe.parallelism, recipe.batch, recipe.precision
    converters = (["quantize.linear.float8"] if prec.fp8 in FLOAT8_RECIPE_NAMES
                  else {"none": [], "mxfp8": ["quantize.linear.mx"]}[prec.fp8])
    sections: dict[str, dict] = {
        "job": {"dump_folder": "./outputs",
                "description": f"{recipe.model.name} on {recipe.target.gpus} x {recipe.target.gpu} (workbench recipe)"},
        "model": {"name": module, "flavor": flavor, "hf_assets_path": assets, "converters": converters},
        "optimizer": {"name": "AdamW", "lr": lr, "eps": 1e-8},
        "training": {"local_batch_size": b.micro_batch, "global_batch_size": b.global_batch, "seq_len": b.seq_len,
                     "steps": 1000, **_dtypes(recipe), "dataset": "c4"},
        "parallelism": _parallelism(recipe, model),
        "activation_checkpoint": {"mode": recipe.activation_checkpointing.mode},
        "compile": {"enable": recipe.compile, "components": ["model", "loss"]},
    }
    if recipe.activation_checkpointing.mode == "selective":
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    if prec.fp8 == "tensorwise":
        # tensorwise is torchao's default config, built when recipe_name is unset; only that path takes the FSDP
        # float8 all-gather (recipe_name with enable_fsdp_float8_all_gather is an AssertionError in 0.2.2)
        fsdp_fp8 = p.sharding == "fsdp" and p.dp > 1
        sections["quantize.linear.float8"] = {"filter_fqns": ["output"], "enable_fsdp_float8_all_gather": fsdp_fp8,
                                              "precompute_float8_dynamic_scale_for_fsdp": fsdp_fp8}
    elif prec.fp8 in FLOAT8_RECIPE_NAMES:
        sections["quantize.linear.float8"] = {"recipe_name": prec.fp8, "filter_fqns": ["output"]}
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
    """A torchtitan 0.2.x TOML job config (``--job.config_file``) with a comment header."""
    sections = torchtitan_sections(recipe)
    out = [f"# {line}" for line in _comments(recipe, "0.2")]
    if recipe.precision.fp8 == "mxfp8":
        out.append("# mxfp8_cublas needs torchao <= 0.16 (0.18 dropped MXLinearConfig, which torchtitan 0.2.2 imports)")
    out.append("# torchtitan 0.2.x job config written by workbench; run: "
               f"NGPU={recipe.target.gpus} CONFIG_FILE=<this file> ./run_train.sh")
    for name, options in sections.items():
        out += ["", f"[{name}]"]
        out += [f"{key} = {_toml_value(value)}" for key, value in options.items()]
    return "\n".join(out) + "\n"


# ---- torchtitan 0.3.0: a Python config function (torchtitan-py) or flat flags (torchtitan-args) ----------------

_LAYER_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size")


def config_function_name(recipe: Recipe) -> str:
    """The ``--config`` name of a recipe's 0.3.0 config function, e.g. ``llama3_8b_h200_sxm_x8``."""
    raw = f"{recipe.model.name}_{recipe.target.gpu}_x{recipe.target.gpus}"
    return "".join(c if c.isalnum() else "_" for c in raw.lower())


def _converters(recipe: Recipe) -> str:
    """The 0.3.0 ``converters`` list: the float8/mx converter, then LoRA's (``validate_converter_order`` wants
    quantization first)."""
    quantize = {"none": "",
                "rowwise": 'Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=["lm_head"], ',
                "rowwise_with_gw_hp": 'Float8LinearConverter.Config(recipe_name="rowwise_with_gw_hp", '
                                      'filter_fqns=["lm_head"], ',
                "mxfp8": 'MXFP8LinearConverter.Config(fqns=["layers"], '}[recipe.precision.fp8]
    out = [f"{quantize}model_compile_enabled={recipe.compile})"] if quantize else []
    if recipe.lora is not None:
        modules = list(dict.fromkeys(LORA_MODULES[t] for t in recipe.lora.targets))
        out.append(f"LoRAConverter.Config(rank={recipe.lora.rank}, alpha={LORA_ALPHA}, target_modules={modules!r})")
    return "[" + ", ".join(out) + "]"


def _unfused_qkv(recipe: Recipe) -> bool:
    """LoRA on q, k or v: the layers are built with separate wq and wkv, one adapter per projection as the workbench
    priced it (the presets' fused wqkv would take one adapter for all three)."""
    return recipe.lora is not None and any(t in recipe.lora.targets for t in ("q", "k", "v"))


def _model_lines(recipe: Recipe, model: TransformerModel) -> list[str]:
    """Body lines that build ``model_spec``: the flavor, its layers rebuilt for structural overrides or for LoRA on
    unfused q/k/v projections, then the converters."""
    _, flavor, _, _, _ = _TORCHTITAN_MODELS[recipe.model.name]
    overrides, unfused = recipe.model.overrides, _unfused_qkv(recipe)
    converters = _converters(recipe)
    if not overrides and not unfused:
        return [f"    model_spec = model_registry({flavor!r}, converters={converters})"]
    if "head_dim" in overrides and model.head_dim != model.hidden_size // model.num_heads:
        raise _refuse("model.overrides.head_dim", model.head_dim, f"hidden_size / num_heads = "
                      f"{model.hidden_size // model.num_heads} (torchtitan's llama3 layers derive head_dim)")
    lines = [f"    # model overrides {dict(overrides)}: torchtitan's {flavor} flavor, changed field by field"] if overrides \
        else []
    if unfused:
        lines.append("    # LoRA on q/k/v: separate wq and wkv projections (fuse_qkv=False), one adapter each, as priced")
    lines.append(f"    model = llama3_configs[{flavor!r}](attn_backend=\"flex\")")
    if "hidden_size" in overrides:
        d = model.hidden_size
        lines += [f"    model.dim = model.tok_embeddings.embedding_dim = model.norm.normalized_shape = {d}",
                  f"    model.lm_head.in_features = {d}", f"    model.lm_head.param_init = _output_linear_init({d})"]
    if "vocab_size" in overrides:
        v = model.vocab_size
        lines.append(f"    model.vocab_size = model.tok_embeddings.num_embeddings = model.lm_head.out_features = {v}")
    if unfused or any(key in overrides for key in _LAYER_FIELDS + ("head_dim",)):
        lines += ["    model.layers = _build_llama3_layers(  # the builder torchtitan's own flavors use",
                  f"        n_layers={model.num_layers}, dim={model.hidden_size}, n_heads={model.num_heads}, "
                  f"n_kv_heads={model.num_kv_heads}, hidden_dim={model.ffn_hidden_size}, fuse_qkv={not unfused},",
                  f"        rope=ComplexRoPE.Config(dim={model.head_dim}, max_seq_len=131072, theta=500000, "
                  "scaling=\"llama\"), attn_backend=\"flex\")"]
    lines += [f"    converters = {converters}", "    validate_converter_order(converters)",
              "    for converter in converters:", "        model = converter.build().convert(model)",
              f"    model_spec = dataclasses.replace(model_registry({flavor!r}), model=model)"]
    return lines


def to_torchtitan_py(recipe: Recipe) -> str:
    """A torchtitan 0.3.0 config module: one function returning the recipe's ``Trainer.Config`` (the form 0.3.0's
    config README recommends), with the run line in its docstring."""
    model = _check(recipe, "0.3")
    _, _, preset, assets, _ = _TORCHTITAN_MODELS[recipe.model.name]
    b, fn, ac = recipe.batch, config_function_name(recipe), recipe.activation_checkpointing.mode
    doc = [*_comments(recipe, "0.3"), "",
           "torchtitan 0.3.0 config written by workbench. Run from a torchtitan checkout, with this file's folder on",
           "PYTHONPATH and MODULE the file's name without .py:",
           f"    PYTHONPATH=<folder> NGPU={recipe.target.gpus} MODULE=<module> CONFIG={fn} ./run_train.sh",
           "or torchrun --nproc_per_node "
           f"{recipe.target.gpus} -m torchtitan.train --module <module> --config {fn}"]
    out = ['"""' + "\n".join(doc).replace("\\", "\\\\").replace('"""', "'''") + '\n"""', "",
           "import dataclasses", "",
           "from torchtitan.components.lora import LoRAConverter",
           "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss",
           "from torchtitan.components.quantization import Float8LinearConverter, MXFP8LinearConverter",
           "from torchtitan.config import CompileConfig",
           "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC",
           "from torchtitan.models.common import ComplexRoPE",
           "from torchtitan.models.common.config_utils import decoder_vocab_size",
           "from torchtitan.models.llama3 import _build_llama3_layers, _output_linear_init, llama3_configs, "
           "model_registry",
           f"from torchtitan.models.llama3.config_registry import {preset}",
           "from torchtitan.models.utils import validate_converter_order",
           "from torchtitan.trainer import Trainer", "", "",
           f"def {fn}() -> Trainer.Config:",
           f"    config = {preset}()  # torchtitan's preset: optimizer and lr, dataset, checkpoint and validation cadence",
           *_model_lines(recipe, model),
           "    config.model_spec = model_spec",
           "    config.loss = ChunkedLossWrapper.Config(",
           "        loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)))",
           f"    config.hf_assets_path = {assets!r}",
           f"    config.training.local_batch_size = {b.micro_batch}",
           f"    config.training.global_batch_size = {b.global_batch}",
           f"    config.training.seq_len = {b.seq_len}",
           *(f"    config.training.{k} = {v!r}" for k, v in _dtypes(recipe).items()),
           f"    config.training.disable_cuda_graphs = {recipe.parallelism.pp > 1}  # CUDA graphs refuse PP > 1",
           *(f"    config.parallelism.{k} = {v!r}" for k, v in _parallelism(recipe, model).items()),
           "    config.activation_checkpoint = " + {"none": "None", "selective": "SelectiveAC.Config()",
                                                    "full": "FullAC.Config()"}[ac],
           f"    config.compile = CompileConfig(enable={recipe.compile}, components=[\"model\", \"loss\"])",
           "    return config"]
    return "\n".join(out) + "\n"


def _flat_refusal(recipe: Recipe) -> str | None:
    """Why flat 0.3.0 flags on a preset cannot run this recipe (model_spec is off the command line), or None."""
    if recipe.precision.fp8 != "none":
        return f"fp8 = {recipe.precision.fp8}: the float8/mx converters are in model_spec, which no flag sets"
    if recipe.lora is not None:
        return "LoRA: its LoRAConverter is in model_spec, which no flag sets"
    if recipe.model.overrides:
        return f"model overrides {dict(recipe.model.overrides)}: layers are in model_spec, which no flag sets"
    if recipe.model.name == "llama3-405b":
        return "llama3_405b's preset builds float8 linears into model_spec, which no flag removes"
    if recipe.model.name == "llama3.2-1b":
        return "torchtitan 0.3.0 has no preset with the 1B flavor"
    return None


def torchtitan_args(recipe: Recipe) -> list[str]:
    """torchtitan 0.3.0 flags for the recipe's preset: ``--module``/``--config``, ``--section.option`` overrides
    and the final ``activation-checkpoint:MODE``; a SpecError when flags cannot say the recipe (use torchtitan-py)."""
    model = _check(recipe, "0.3")
    why = _flat_refusal(recipe)
    if why:
        raise _refuse("format", "torchtitan-args", f"torchtitan-py (a config function; {why})")
    module, _, preset, assets, _ = _TORCHTITAN_MODELS[recipe.model.name]
    b = recipe.batch
    args = ["--module", module, "--config", preset, "--hf_assets_path", assets,
            "--training.local_batch_size", str(b.micro_batch), "--training.global_batch_size", str(b.global_batch),
            "--training.seq_len", str(b.seq_len)]
    for key, value in _dtypes(recipe).items():
        args += [f"--training.{key}", value]
    for key, value in _parallelism(recipe, model).items():
        args += [f"--parallelism.{key}", str(value)]
    args += ["--compile.enable" if recipe.compile else "--compile.no-enable", "--compile.components", "model,loss",
             "--compile.no-enable_async_tensor_parallel"]
    if recipe.parallelism.pp > 1:
        args.append("--training.disable_cuda_graphs")
    args.append(f"activation-checkpoint:{recipe.activation_checkpointing.mode}")  # a subcommand: last
    return args


def to_torchtitan_args(recipe: Recipe) -> str:
    """A torchtitan 0.3.0 ``run_train.sh`` line for the recipe, with a comment header."""
    args = torchtitan_args(recipe)
    module, preset, flags = args[1], args[3], args[4:]
    lines = [f"# {line}" for line in _comments(recipe, "0.3")]
    lines.append("# torchtitan 0.3.0 flags (frozen there, kept for compatibility); torchtitan-py is the recommended form")
    lines.append(f"NGPU={recipe.target.gpus} MODULE={module} CONFIG={preset} ./run_train.sh \\")
    pairs, i = [], 0
    while i < len(flags):
        takes_value = flags[i].startswith("--") and i + 1 < len(flags) and not flags[i + 1].startswith("-") \
            and ":" not in flags[i + 1]
        pairs.append(" ".join(flags[i:i + 2]) if takes_value else flags[i])
        i += 2 if takes_value else 1
    lines.append(" \\\n".join(f"  {p}" for p in pairs))
    return "\n".join(lines) + "\n"
