"""Between recipes and the analytical model: the revised model, the ``TrainingConfig``, predictions, and back.

    >>> recipe = make_recipe("llama3-8b", "h200", TrainingConfig(2, 4096, parallelism=Parallelism(dp=8)))
    >>> predict_recipe(recipe).summary.tokens_per_s == recipe.predicted.tokens_per_s

With ``job=True`` both predict what the reference job (``python -m workbench.train``) runs for the recipe (its
``compile`` flag and Triton kernels: ``workbench.graph.execution``); by default, the step as the recipe's stack runs
it with the recipe's ``compile`` flag: ``make_recipe`` predicts for the stack it is given (None: the model's
default, ``predict()``'s and ``search``'s: ``torchtitan`` for a transformer) and records it in
``predicted.stack``, and ``predict_recipe`` predicts for the stack recorded there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.families import family_of
from workbench.graph.execution import Execution
from workbench.hardware import GPU, get_gpu
from workbench.memory import GB
from workbench.models import Model, get_model
from workbench.predict import Prediction, predict
from workbench.recipe.schema import (
    ActivationCheckpointing,
    Batch,
    EmbeddingPlacement,
    KernelChoice,
    LoRAChoice,
    ModelChoice,
    ParallelismChoice,
    PrecisionPolicy,
    Predicted,
    Recipe,
    Revision,
    Target,
)


def revised_model(name: str | Model, overrides: Mapping[str, int]) -> Model:
    """The catalog model with ``overrides`` applied (``head_dim`` stays as stored unless overridden)."""
    base = get_model(name)
    if not overrides:
        return base
    known = [f.name for f in dataclasses.fields(base)
             if isinstance(getattr(base, f.name), int) and not isinstance(getattr(base, f.name), bool)]
    for key, value in overrides.items():
        if key not in known or isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"model {base.name}", f"overrides.{key}", value,
                            f"a positive integer for one of the model's integer fields: {', '.join(known)}")
    model = dataclasses.replace(base, **dict(overrides))
    family_of(model).check_model(model, f"model {base.name} with overrides {dict(overrides)}")
    return model


def recipe_model(recipe: Recipe) -> Model:
    """The model a recipe trains: the catalog entry with ``model.overrides`` applied."""
    return revised_model(recipe.model.name, recipe.model.overrides)


def training_config(recipe: Recipe) -> TrainingConfig:
    """The analytical model's view of the recipe (its LoRA adapters included)."""
    p = recipe.parallelism
    lora = {} if recipe.lora is None else {"lora_rank": recipe.lora.rank, "lora_targets": recipe.lora.targets}
    return TrainingConfig(
        micro_batch=recipe.batch.micro_batch,
        seq_len=recipe.batch.seq_len,
        precision=recipe.precision.workbench_precision,
        parallelism=Parallelism(dp=p.dp, tp=p.tp, pp=p.pp, ep=p.ep, sharding=p.sharding, cp=p.cp,
                                virtual_stages=p.virtual_stages),
        activation_checkpointing=recipe.activation_checkpointing.mode,
        global_batch=recipe.batch.global_batch,
        **lora,
    )


def recipe_execution(recipe: Recipe) -> Execution:
    """How the reference job runs the recipe: its ``compile`` flag and the ops it routes to Triton kernels."""
    return execution_for(recipe.compile, recipe.kernels)


def execution_for(compile: bool, kernels: Sequence[KernelChoice]) -> Execution:
    return Execution(compile=compile, triton_ops=frozenset(k.op for k in kernels if k.choice == "triton"))


def predict_recipe(recipe: Recipe, *, calibrated: bool = False, job: bool = False) -> Prediction:
    """``workbench.predict`` for the recipe's revised model, target GPU and configuration. ``job``: as the
    reference job (``python -m workbench.train``) runs it -- eager or compiled per the recipe's ``compile``, with
    its Triton kernels, its loss, FSDP2 copies, fp8 quantization (``workbench.graph.execution``); else as the stack
    its prediction is for runs it (``predicted.stack``, with the recipe's ``compile``): what ``make_recipe``
    recorded. A recipe file written before recipes named a stack reads as ``ideal``, the fused step it recorded."""
    if job:
        return predict(recipe_model(recipe), recipe.target.gpu, training_config(recipe), calibrated=calibrated,
                       execution=recipe_execution(recipe))
    return predict(recipe_model(recipe), recipe.target.gpu, training_config(recipe), calibrated=calibrated,
                   stack=recipe.predicted.stack, compile=recipe.compile)


def predicted_from(prediction: Prediction) -> Predicted:
    s = prediction.summary
    return Predicted(step_time_s=s.step_time_s, tokens_per_s=s.tokens_per_s, samples_per_s=s.samples_per_s,
                     peak_memory_gb=s.memory.total / GB, mfu=s.mfu, communication_s=s.communication_s,
                     fits=s.memory.fits, stack=s.stack)


def embedding_placements(model: Model, dp: int) -> tuple[EmbeddingPlacement, ...]:
    """Where each sparse embedding table (``Family.embedding_tables``: a recommendation model's) lives under the
    memory model: one GPU holds it whole in HBM; more shard its rows over the data-parallel GPUs (fp32 rows;
    ``workbench.memory`` assumes the same)."""
    placement = "hbm" if dp == 1 else "row_sharded"
    return tuple(EmbeddingPlacement(name, rows, dim, placement, rows * dim * 4)
                 for name, rows, dim in family_of(model).embedding_tables(model))


def make_recipe(
    model: str | Model,
    gpu: str | GPU,
    config: TrainingConfig,
    *,
    overrides: Mapping[str, int] | None = None,
    revisions: Sequence[Revision] = (),
    compile: bool = True,
    precision: PrecisionPolicy | None = None,
    kernels: Sequence[KernelChoice] = (),
    prediction: Prediction | None = None,
    calibrated: bool = False,
    select_kernels: bool = False,
    job: bool = False,
    stack: str | None = None,
) -> Recipe:
    """A recipe for catalog ``model`` (plus ``overrides``) on ``gpu``, predicted unless ``prediction`` is given.

    ``config.precision`` names the modelled precision; ``precision`` refines the policy (fp8 recipe, dtypes).
    ``config.lora_rank`` > 0 records LoRA fine-tuning (``Recipe.lora``: the rank and ``config.lora_targets``).
    ``select_kernels`` records, per GEMM and attention shape, the Triton config ``workbench.select`` picks or the
    vendor library (``kernel_choices``); without it ``kernels`` stays empty (every op on torch's kernels).
    ``job`` records the reference job's prediction (as ``predict_recipe`` makes it); else the prediction of
    ``stack`` with the recipe's ``compile`` (None: the model's default stack, ``workbench.stacks.default_stack``;
    ``predicted.stack`` says which).
    """
    name = model if isinstance(model, str) else model.name
    overrides = dict(overrides or {})
    revised = revised_model(name, overrides)
    gpu = get_gpu(gpu)
    cfg = config.resolved(revised)
    if job and stack not in (None, "workbench-job"):
        raise SpecError("make_recipe", "stack", stack, "None or workbench-job with job=True (the job is that stack)")
    if prediction is None and job:
        prediction = predict(revised, gpu, cfg, calibrated=calibrated, execution=execution_for(compile, kernels))
    elif prediction is None:
        prediction = predict(revised, gpu, cfg, calibrated=calibrated, stack=stack, compile=compile)
    policy = precision or PrecisionPolicy.for_precision(cfg.precision)
    if policy.workbench_precision != cfg.precision:
        raise SpecError("make_recipe", "precision", policy, f"a policy modelled as {cfg.precision!r}")
    if select_kernels and not kernels:  # the zero-warmup selector's choice per GEMM/attention shape
        from workbench.recipe.schema import KernelChoice
        from workbench.select import kernel_choices

        kernels = [KernelChoice(**entry) for entry in kernel_choices(prediction, calibrated=calibrated)]
    p = cfg.parallelism
    return Recipe(
        target=Target(gpu.name, p.gpus),
        model=ModelChoice(get_model(name).name, overrides, tuple(revisions)),
        batch=Batch(cfg.micro_batch, cfg.samples_per_step, cfg.grad_accumulation, cfg.seq_len),
        precision=policy,
        activation_checkpointing=ActivationCheckpointing(cfg.activation_checkpointing, "all"),
        parallelism=ParallelismChoice(dp=p.dp, sharding=p.sharding, tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep,
                                      virtual_stages=p.virtual_stages),
        lora=LoRAChoice(cfg.lora_rank, cfg.lora_targets) if cfg.lora else None,
        compile=compile,
        kernels=tuple(kernels),
        embeddings=embedding_placements(revised, p.dp),
        predicted=predicted_from(prediction),
        model_version=prediction.model_version,
    )
