"""What a training job runs: a recipe's fields, validated against what the reference job supports.

Pure Python (no torch), so a recipe can be checked before anything heavy is imported. ``JobSpec.from_dict``
reads the agreed recipe layout (``schema_version: 1``; see ``workbench.recipe``) and ``check_supported``
turns what the reference job cannot run (pipeline or context parallelism, MoE, HSTU, ...) into a clear
``JobError`` instead of a wrong run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from workbench.errors import SpecError, WorkbenchError
from workbench.models import DLRMModel, HSTUModel, Model, TransformerModel
from workbench.schema import Fields

Dtype = Literal["fp32", "tf32", "bf16", "fp16"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
Fp8Mode = Literal["none", "tensorwise", "rowwise", "rowwise_with_gw_hp"]
FP8_MODES: tuple[str, ...] = ("none", "tensorwise", "rowwise", "rowwise_with_gw_hp")
"""fp8 recipes the job runs, torchao's names (``workbench.train.layers.FP8_LINEAR_RECIPES``); mxfp8 is not one."""
CHECKPOINT_MODES: tuple[str, ...] = ("none", "selective", "full")
TRITON_OPS: tuple[str, ...] = ("gemm", "attention", "rmsnorm", "swiglu", "cross_entropy", "embedding_bag")
"""Ops whose ``kernels`` entries with ``choice: triton`` the job honours (others run torch's kernels)."""


class JobError(WorkbenchError):
    """A recipe asks for something the reference training job does not do; the message says what and why."""


@dataclass(frozen=True)
class KernelChoice:
    """One ``kernels`` entry of a recipe: which implementation an op uses at one shape."""

    op: str
    shape: dict
    dtype: str
    choice: Literal["triton", "vendor"]
    config: dict | None = None
    predicted_ms: float | None = None


@dataclass(frozen=True)
class JobSpec:
    """Everything the job needs from a recipe (``target`` and ``predicted`` are kept to report against)."""

    model: Model
    """The catalog model with ``overrides`` applied."""
    model_name: str
    overrides: dict
    target_gpu: str
    target_gpus: int
    param_dtype: Dtype = "fp32"
    """Dtype of the master parameters the optimizer updates."""
    compute_dtype: Dtype = "bf16"
    """Dtype GEMMs and activations run in (autocast, or FSDP2's param_dtype)."""
    reduce_dtype: Dtype = "fp32"
    """Dtype of the data-parallel gradient reduction."""
    fp8: Fp8Mode = "none"
    """fp8 GEMMs in the transformer blocks' linears: scales per tensor or per row, or rowwise with the weight
    gradient GEMM in bf16 (``rowwise_with_gw_hp``)."""
    micro_batch: int = 1
    global_batch: int = 1
    grad_accumulation: int = 1
    seq_len: int = 1
    """Tokens per sample (1 for DLRM)."""
    checkpointing: Literal["none", "selective", "full"] = "none"
    checkpoint_layers: tuple[int, ...] | None = None
    """Blocks that are checkpointed; None means all."""
    dp: int = 1
    sharding: Literal["fsdp", "ddp"] = "fsdp"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    compile: bool = False
    kernels: tuple[KernelChoice, ...] = ()
    predicted: dict = field(default_factory=dict)
    """The recipe's predictions: step_time_s, tokens_per_s, samples_per_s, peak_memory_gb, mfu, ..."""
    name: str = "recipe"

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

    @staticmethod
    def from_dict(data: dict, origin: str = "<recipe>", name: str | None = None) -> JobSpec:
        """Read a recipe in its YAML/dict form (``Recipe.to_dict()``), raising ``SpecError`` on a bad field."""
        f = Fields(data, origin)
        version = f.raw("schema_version")
        if version != 1:
            raise f.error("schema_version", version, "1 (the recipe schema this job reads)")
        target = f.sub("target")
        m = f.sub("model")
        model_name = m.string("name")
        overrides = m.raw("overrides", {}) or {}
        if not isinstance(overrides, dict):
            raise m.error("overrides", overrides, "a mapping of model fields to new values")
        precision = f.sub("precision")
        batch = f.sub("batch")
        ac = f.sub("activation_checkpointing", default={})
        par = f.sub("parallelism")
        layers = ac.raw("layers", "all")
        if layers != "all" and not (isinstance(layers, list) and all(isinstance(i, int) and i >= 0 for i in layers)):
            raise ac.error("layers", layers, "'all' or a list of block indices")
        kernels = f.raw("kernels", []) or []
        if not isinstance(kernels, list):
            raise f.error("kernels", kernels, "a list of per-op kernel choices")
        predicted = f.raw("predicted", {}) or {}
        if not isinstance(predicted, dict):
            raise f.error("predicted", predicted, "a mapping of predicted figures")
        model = resolve_model(model_name, overrides, origin)
        micro = int(batch.number("micro_batch", integer=True, minimum=1))
        seq = 1 if isinstance(model, DLRMModel) else int(batch.number("seq_len", integer=True, minimum=1))
        spec = JobSpec(
            model=model, model_name=model_name, overrides=dict(overrides),
            target_gpu=target.string("gpu"), target_gpus=int(target.number("gpus", integer=True, minimum=1)),
            param_dtype=precision.string("param_dtype", DTYPES, default="fp32"),
            compute_dtype=precision.string("compute_dtype", DTYPES, default="bf16"),
            reduce_dtype=precision.string("reduce_dtype", DTYPES, default="fp32"),
            fp8=precision.string("fp8", FP8_MODES, default="none"),
            micro_batch=micro,
            global_batch=int(batch.number("global_batch", integer=True, minimum=1, default=micro)),
            grad_accumulation=int(batch.number("grad_accumulation", integer=True, minimum=1, default=1)),
            seq_len=seq,
            checkpointing=ac.string("mode", CHECKPOINT_MODES, default="none"),
            checkpoint_layers=None if layers == "all" else tuple(layers),
            dp=int(par.number("dp", integer=True, minimum=1, default=1)),
            sharding=par.string("sharding", ("fsdp", "ddp"), default="fsdp"),
            tp=int(par.number("tp", integer=True, minimum=1, default=1)),
            pp=int(par.number("pp", integer=True, minimum=1, default=1)),
            cp=int(par.number("cp", integer=True, minimum=1, default=1)),
            ep=int(par.number("ep", integer=True, minimum=1, default=1)),
            compile=f.boolean("compile", default=False),
            kernels=tuple(_kernel_choice(k, origin, i) for i, k in enumerate(kernels)),
            predicted=dict(predicted),
            name=name or model_name,
        )
        if spec.global_batch != spec.micro_batch * spec.dp * spec.grad_accumulation:
            raise batch.error("global_batch", spec.global_batch,
                              f"micro_batch x dp x grad_accumulation = {spec.micro_batch} x {spec.dp} x "
                              f"{spec.grad_accumulation} = {spec.micro_batch * spec.dp * spec.grad_accumulation}")
        _check_target_precision(spec, origin)
        return spec


def _check_target_precision(spec: JobSpec, origin: str) -> None:
    """The recipe's precision must run on its target GPU -- the check ``load_recipe`` and every prediction make
    (``workbench.recipe.schema.check_precision_supported``) -- so the job never trains, say, an fp8 recipe for an
    A100 that prediction rejects. A target outside the catalog is ``load_recipe``'s to refuse."""
    from workbench.errors import UnknownNameError
    from workbench.hardware import get_gpu
    from workbench.recipe.schema import PrecisionPolicy, check_precision_supported

    try:
        gpu = get_gpu(spec.target_gpu)
    except UnknownNameError:
        return
    policy = PrecisionPolicy(spec.param_dtype, spec.compute_dtype,  # type: ignore[arg-type]
                             spec.reduce_dtype, spec.fp8)
    check_precision_supported(gpu, policy, origin)


def _kernel_choice(entry: object, origin: str, index: int) -> KernelChoice:
    k = Fields(entry, origin, f"kernels[{index}]")
    shape = k.raw("shape", {}) or {}
    config = k.raw("config", None)
    if not isinstance(shape, dict):
        raise k.error("shape", shape, "a mapping such as {m: 8192, n: 4096, k: 4096}")
    if config is not None and not isinstance(config, dict):
        raise k.error("config", config, "a mapping of kernel meta-parameters, or null")
    predicted = k.raw("predicted_ms", None)
    return KernelChoice(op=k.string("op"), shape=dict(shape), dtype=str(k.raw("dtype", "bf16")),
                        choice=k.string("choice", ("triton", "vendor")), config=config,
                        predicted_ms=None if predicted is None else float(predicted))


def resolve_model(name: str, overrides: dict, origin: str = "<recipe>") -> Model:
    """The catalog model ``name`` with ``overrides`` applied exactly as the recipe's predictions were made
    (``workbench.recipe.build.revised_model``: fields replaced, ``head_dim`` kept unless overridden)."""
    from workbench.recipe.build import revised_model

    try:
        return revised_model(name, overrides)
    except SpecError as exc:
        raise SpecError(origin, f"model.{exc.field}", exc.value, exc.expected) from None


def check_supported(spec: JobSpec, world_size: int) -> None:
    """Raise ``JobError`` for what the reference job does not run, naming the field and the way out."""
    where = f"recipe {spec.name!r}"
    if spec.pp > 1:
        raise JobError(f"{where}: parallelism.pp = {spec.pp}: the reference job does not do pipeline parallelism "
                       "(use torchtitan for pp > 1, or a recipe with pp: 1)")
    if spec.cp > 1:
        raise JobError(f"{where}: parallelism.cp = {spec.cp}: context parallelism is not in the reference job "
                       "(expected cp: 1)")
    if "fp16" in (spec.param_dtype, spec.compute_dtype, spec.reduce_dtype):
        raise JobError(f"{where}: precision fp16 needs loss scaling, which the reference job does not do "
                       "(expected bf16, tf32 or fp32)")
    if isinstance(spec.model, HSTUModel):
        raise JobError(f"{where}: model {spec.model_name!r} is an HSTU recommender; the reference job trains "
                       "transformer (Llama-family) and DLRM models")
    if isinstance(spec.model, TransformerModel):
        if spec.model.is_moe or spec.ep > 1:
            raise JobError(f"{where}: model {spec.model_name!r} is mixture-of-experts (or ep = {spec.ep}); the "
                           "reference job trains dense transformers only")
        if spec.model.ffn_activation != "swiglu" or spec.model.norm != "rmsnorm":
            raise JobError(f"{where}: model {spec.model_name!r} uses {spec.model.ffn_activation}/{spec.model.norm}; "
                           "the reference job builds Llama-style blocks (swiglu + rmsnorm)")
        if spec.model.num_heads % spec.tp or spec.model.num_kv_heads % spec.tp or spec.model.ffn_hidden_size % spec.tp:
            raise JobError(f"{where}: parallelism.tp = {spec.tp} must divide num_heads={spec.model.num_heads}, "
                           f"num_kv_heads={spec.model.num_kv_heads} and ffn_hidden_size={spec.model.ffn_hidden_size}")
    if isinstance(spec.model, DLRMModel):
        if spec.world_size > 1:
            raise JobError(f"{where}: DLRM on {spec.world_size} GPUs needs row-sharded tables (TorchRec); the "
                           "reference job trains DLRM on one GPU (expected dp: 1, tp: 1)")
        if spec.fp8 != "none":
            raise JobError(f"{where}: precision.fp8 = {spec.fp8!r}: fp8 is applied to transformer blocks only "
                           "(expected fp8: none for DLRM)")
    if spec.checkpoint_layers is not None and isinstance(spec.model, TransformerModel):
        bad = [i for i in spec.checkpoint_layers if i >= spec.model.num_layers]
        if bad:
            raise JobError(f"{where}: activation_checkpointing.layers has {bad}: the model has "
                           f"{spec.model.num_layers} blocks (0..{spec.model.num_layers - 1})")
    if spec.world_size != world_size:
        raise JobError(f"{where}: parallelism dp x tp = {spec.dp} x {spec.tp} = {spec.world_size} processes, but "
                       f"this run has {world_size} (launch with torchrun --nproc_per_node {spec.world_size})")


def load_job_spec(path: str | Path) -> JobSpec:
    """A ``JobSpec`` from a recipe file, read and validated by ``workbench.recipe.load_recipe``."""
    from workbench.recipe import load_recipe

    path = Path(path)
    return JobSpec.from_dict(load_recipe(path).to_dict(), str(path), name=path.stem)
