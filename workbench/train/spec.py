"""What a training job runs: a validated recipe, and what of it the reference job supports.

Pure Python (no torch), so a recipe can be checked before anything heavy is imported. There is one recipe
schema (``workbench.recipe.schema``): ``load_recipe`` reads the file once and validates it there -- fields,
choices, catalog names, batch arithmetic, the target's precision support, the model split -- and
``JobSpec.from_recipe`` takes that ``Recipe`` as it is, reading its fields through properties; nothing here
re-parses a file or re-spells a choice. What the reference job cannot run of a valid recipe (LoRA, pipeline or
context parallelism, MoE, HSTU, mxfp8, fp16, ...) is ``check_supported``'s, a clear ``JobError`` instead of a wrong run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.families import family_of
from workbench.models import Model
from workbench.recipe.schema import (
    FP8_RECIPES,
    KERNEL_OPS,
    CheckpointMode,
    ComputeDtype,
    Fp8Recipe,
    KernelChoice,
    ParamDtype,
    Recipe,
    RecipeSharding,
    ReduceDtype,
)

__all__ = ["FP8_MODES", "JOB_FAMILIES", "TRITON_OPS", "JobError", "JobSpec", "KernelChoice", "check_supported",
           "load_job_spec"]

JOB_FAMILIES: dict[str, str] = {"transformer": "dense Llama-style decoders (swiglu + rmsnorm)",
                                "dlrm": "DLRM-DCNv2 recommenders, on one GPU"}
"""The model families (``workbench.families``, by name) the reference job builds a torch model for
(``workbench.train.build``), with what of each it builds; ``check_supported`` refuses every other family."""

FP8_MODES: tuple[str, ...] = tuple(r for r in FP8_RECIPES if r != "mxfp8")
"""The schema's fp8 recipes the job runs (``workbench.train.layers.FP8_LINEAR_RECIPES``, torchao's names): all but
mxfp8. The job's fp8 linears scale per tensor or per row (torchao's ``Float8LinearConfig.from_recipe_name``, or the
project's ``Float8Linear``); mxfp8 scales blocks of 32 values (OCP MX), which needs torchao's MX linear and
Blackwell-class tensor cores, and the job builds neither -- train an mxfp8 recipe with torchtitan (the
``torchtitan-*`` exports). ``check_supported`` refuses it with a ``JobError``."""
TRITON_OPS: tuple[str, ...] = KERNEL_OPS
"""Ops whose ``kernels`` entries with ``choice: triton`` the job honours: every op a recipe can name
(``workbench.recipe.schema.KERNEL_OPS``); a ``vendor`` entry runs torch's kernel."""


class JobError(WorkbenchError):
    """A recipe asks for something the reference training job does not do; the message says what and why."""


@dataclass(frozen=True)
class JobSpec:
    """A validated recipe as the job reads it: its fields (properties below), the model it trains, and a name
    for reports. ``target`` and ``predicted`` are kept to report against."""

    recipe: Recipe
    """The recipe, validated by the schema when it was built (``Recipe.__post_init__``)."""
    name: str = "recipe"
    model: Model = field(init=False, compare=False, repr=False)
    """The catalog model with ``model.overrides`` applied, exactly as the predictions were made
    (``workbench.recipe.build.recipe_model``); derived from ``recipe``."""

    def __post_init__(self):
        from workbench.recipe.build import recipe_model

        object.__setattr__(self, "model", recipe_model(self.recipe))

    @staticmethod
    def from_recipe(recipe: Recipe, name: str | None = None) -> JobSpec:
        """The job spec of ``recipe`` (already validated); ``name`` defaults to the model's name."""
        return JobSpec(recipe, name or recipe.model.name)

    @staticmethod
    def from_dict(data: object, origin: str = "<recipe>", name: str | None = None) -> JobSpec:
        """A recipe in its YAML/dict form (``Recipe.to_dict()``) through the schema (``Recipe.from_dict``): a bad
        field is the schema's ``SpecError`` naming ``origin``, field, value and what was expected."""
        return JobSpec.from_recipe(Recipe.from_dict(data, origin), name)

    # ---------------------------------------------------------------- the recipe's fields, as the job names them
    @property
    def model_name(self) -> str:
        return self.recipe.model.name

    @property
    def family(self) -> str:
        """The model's family (``workbench.families.family_of``): which of ``JOB_FAMILIES`` builds it."""
        return family_of(self.model).name

    @property
    def overrides(self) -> dict:
        return dict(self.recipe.model.overrides)

    @property
    def target_gpu(self) -> str:
        return self.recipe.target.gpu

    @property
    def target_gpus(self) -> int:
        return self.recipe.target.gpus

    @property
    def param_dtype(self) -> ParamDtype:
        """Dtype of the master parameters the optimizer updates."""
        return self.recipe.precision.param_dtype

    @property
    def compute_dtype(self) -> ComputeDtype:
        """Dtype GEMMs and activations run in (autocast, or FSDP2's param_dtype)."""
        return self.recipe.precision.compute_dtype

    @property
    def reduce_dtype(self) -> ReduceDtype:
        """Dtype of the data-parallel gradient reduction."""
        return self.recipe.precision.reduce_dtype

    @property
    def fp8(self) -> Fp8Recipe:
        """fp8 GEMMs in the transformer blocks' linears (``FP8_MODES`` are those the job runs)."""
        return self.recipe.precision.fp8

    @property
    def micro_batch(self) -> int:
        return self.recipe.batch.micro_batch

    @property
    def global_batch(self) -> int:
        return self.recipe.batch.global_batch

    @property
    def grad_accumulation(self) -> int:
        return self.recipe.batch.grad_accumulation

    @property
    def seq_len(self) -> int:
        """Tokens per sample, as the model's family counts them (``Family.tokens_per_sample``: 1 for DLRM, whatever
        the recipe says)."""
        from workbench.recipe.build import training_config

        return family_of(self.model).tokens_per_sample(self.model, training_config(self.recipe))

    @property
    def checkpointing(self) -> CheckpointMode:
        return self.recipe.activation_checkpointing.mode

    @property
    def checkpoint_layers(self) -> tuple[int, ...] | None:
        """Blocks that are checkpointed; None means all."""
        layers = self.recipe.activation_checkpointing.layers
        return None if layers == "all" else tuple(layers)

    @property
    def dp(self) -> int:
        return self.recipe.parallelism.dp

    @property
    def sharding(self) -> RecipeSharding:
        return self.recipe.parallelism.sharding

    @property
    def tp(self) -> int:
        return self.recipe.parallelism.tp

    @property
    def pp(self) -> int:
        return self.recipe.parallelism.pp

    @property
    def cp(self) -> int:
        return self.recipe.parallelism.cp

    @property
    def ep(self) -> int:
        return self.recipe.parallelism.ep

    @property
    def compile(self) -> bool:
        return self.recipe.compile

    @property
    def kernels(self) -> tuple[KernelChoice, ...]:
        return self.recipe.kernels

    @property
    def predicted(self) -> dict:
        """The recipe's predictions (step_time_s, tokens_per_s, samples_per_s, peak_memory_gb, mfu, ...); {} without."""
        return {} if self.recipe.predicted is None else dataclasses.asdict(self.recipe.predicted)

    # ---------------------------------------------------------------- derived
    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def triton_ops(self) -> frozenset[str]:
        """Ops for which the recipe chose the project's Triton kernel."""
        return frozenset(k.op for k in self.kernels if k.choice == "triton")

    def vendor_shapes(self, op: str) -> frozenset[tuple]:
        """Shapes of ``op`` the recipe gave to the vendor library, keyed like ``kernel_configs``."""
        return frozenset(tuple(sorted(k.shape.items())) for k in self.kernels if k.op == op and k.choice == "vendor")

    def kernel_configs(self, op: str) -> dict[tuple, dict]:
        """Triton configs the recipe pinned for ``op``, keyed by the shape's sorted (key, value) pairs."""
        return {tuple(sorted(k.shape.items())): k.config for k in self.kernels
                if k.op == op and k.choice == "triton" and k.config}

    def checkpointed(self, layer: int) -> bool:
        return self.checkpointing != "none" and (self.checkpoint_layers is None or layer in self.checkpoint_layers)


def check_supported(spec: JobSpec, world_size: int) -> None:
    """Raise ``JobError`` for what the reference job does not run of a valid recipe, naming the field and the way
    out. What the schema already checked (choices, batch arithmetic, the target's precision support, tp dividing
    the heads and the FFN) is not checked again."""
    where = f"recipe {spec.name!r}"
    lora = spec.recipe.lora
    if lora is not None:
        raise JobError(f"{where}: lora = rank {lora.rank} on {', '.join(lora.targets)}: the reference job trains every "
                       "weight (it builds no LoRA adapters), so it would run a different job than the recipe predicts "
                       "(train LoRA recipes with torchtitan 0.3.0: workbench recipe --format torchtitan-py, or drop "
                       "the lora section to train every weight)")
    if spec.pp > 1:
        raise JobError(f"{where}: parallelism.pp = {spec.pp}: the reference job does not do pipeline parallelism "
                       "(use torchtitan for pp > 1, or a recipe with pp: 1)")
    if spec.cp > 1:
        raise JobError(f"{where}: parallelism.cp = {spec.cp}: context parallelism is not in the reference job "
                       "(expected cp: 1)")
    if "fp16" in (spec.param_dtype, spec.compute_dtype, spec.reduce_dtype):
        raise JobError(f"{where}: precision fp16 needs loss scaling, which the reference job does not do "
                       "(expected bf16, tf32 or fp32)")
    if spec.fp8 not in FP8_MODES:
        raise JobError(f"{where}: precision.fp8 = {spec.fp8!r}: the reference job's fp8 linears scale per tensor or "
                       f"per row, not in MX blocks (expected one of {', '.join(FP8_MODES)}; train {spec.fp8} recipes "
                       "with torchtitan: workbench recipe --format torchtitan-py or torchtitan-toml)")
    if spec.family not in JOB_FAMILIES:
        trains = "; ".join(f"{name}: {what}" for name, what in JOB_FAMILIES.items())
        raise JobError(f"{where}: model {spec.model_name!r} is a {spec.family} model; the reference job trains "
                       f"these families only ({trains})")
    if spec.family == "transformer":
        if spec.model.is_moe or spec.ep > 1:
            raise JobError(f"{where}: model {spec.model_name!r} is mixture-of-experts (or ep = {spec.ep}); the "
                           "reference job trains dense transformers only")
        if spec.model.ffn_activation != "swiglu" or spec.model.norm != "rmsnorm":
            raise JobError(f"{where}: model {spec.model_name!r} uses {spec.model.ffn_activation}/{spec.model.norm}; "
                           "the reference job builds Llama-style blocks (swiglu + rmsnorm)")
        if spec.model.num_kv_heads % spec.tp:  # the schema has tp dividing num_heads and ffn_hidden_size
            raise JobError(f"{where}: parallelism.tp = {spec.tp} must divide num_kv_heads={spec.model.num_kv_heads}: "
                           "the reference job shards the kv heads and does not replicate them (the model allows "
                           "a tp that is a multiple of them)")
        bad = [i for i in spec.checkpoint_layers or () if i >= spec.model.num_layers]
        if bad:
            raise JobError(f"{where}: activation_checkpointing.layers has {bad}: the model has "
                           f"{spec.model.num_layers} blocks (0..{spec.model.num_layers - 1})")
    if spec.family == "dlrm":
        if spec.world_size > 1:
            raise JobError(f"{where}: DLRM on {spec.world_size} GPUs needs row-sharded tables (TorchRec); the "
                           "reference job trains DLRM on one GPU (expected dp: 1, tp: 1)")
        if spec.fp8 != "none":
            raise JobError(f"{where}: precision.fp8 = {spec.fp8!r}: fp8 is applied to transformer blocks only "
                           "(expected fp8: none for DLRM)")
    if spec.world_size != world_size:
        raise JobError(f"{where}: parallelism dp x tp = {spec.dp} x {spec.tp} = {spec.world_size} processes, but "
                       f"this run has {world_size} (launch with torchrun --nproc_per_node {spec.world_size})")


def load_job_spec(path: str | Path) -> JobSpec:
    """The job spec of a recipe file, read and validated once by ``workbench.recipe.load_recipe`` (its errors name
    the file, field, value and what was expected) and named after the file."""
    from workbench.recipe.io import load_recipe

    path = Path(path)
    return JobSpec.from_recipe(load_recipe(path), name=path.stem)
