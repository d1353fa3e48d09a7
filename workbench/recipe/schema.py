"""The recipe: one training setup for one target, typed and versioned, with the predictions that chose it.

A recipe says what to run (model and its structural revisions, precision policy, batch, activation
checkpointing, parallelism, compile, per-op kernels, embedding placement) on what (GPU type and count), and
what the analytical model predicts for it (and which version of the model said so). It round-trips through
plain dicts (``to_dict`` / ``from_dict``) in the key order of the YAML file:

    schema_version: 1
    target: {gpu: h200-sxm, gpus: 8}
    model: {name: llama3-8b, overrides: {num_layers: 4}, revisions: []}
    precision: {param_dtype: fp32, compute_dtype: bf16, reduce_dtype: fp32, fp8: none}
    batch: {micro_batch: 2, global_batch: 64, grad_accumulation: 4, seq_len: 4096}
    activation_checkpointing: {mode: none, layers: all}
    parallelism: {dp: 8, sharding: fsdp, tp: 1, pp: 1, cp: 1, ep: 1}
    ...

``from_dict`` rejects unknown fields and unknown schema versions with the origin (file), field, value and what
was expected; it checks names against the GPU and model catalogs and the batch and parallelism arithmetic.

Versions: a recipe is written with the oldest schema version that can say everything it holds
(``Recipe.schema_version``), so a workbench that predates a field still reads every recipe that does not use it.
Version 2 added ``lora`` and ``parallelism.virtual_stages`` > 1; a recipe with neither is written as version 1, in
version 1's layout (no ``lora`` section, no ``virtual_stages`` key). This workbench reads every version in
``SCHEMA_VERSIONS``; a version 1 file with ``virtual_stages`` (written by the workbench that added the key before
the version was bumped) reads as it was meant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from workbench import __version__
from workbench.config import (
    CHECKPOINTING,
    DEFAULT_LORA_TARGETS,
    LORA_TARGETS,
    MAX_LORA_RANK,
    PARAM_DTYPES,
    Checkpointing,
    ParamDtype,
)
from workbench.errors import SpecError, UnknownNameError
from workbench.graph.execution import TRITON_OPS

SCHEMA_VERSION = 2
"""The newest recipe format this code reads and writes. Adding a field or changing one's meaning bumps it: list
the version's fields (as ``V2_FIELDS``), derive ``Recipe.schema_version`` from them, and keep reading older files."""
SCHEMA_VERSIONS: tuple[int, ...] = (1, 2)
"""The recipe formats this code reads."""
V2_FIELDS: tuple[str, ...] = ("lora", "parallelism.virtual_stages")
"""The fields version 2 added: a recipe that uses one (``lora`` given, ``virtual_stages`` > 1) is a version 2
file; any other recipe is written as version 1."""

# Each choice is spelled once, as a Literal (the type of its field); its tuple of values is derived from it. The
# training job (``workbench.train.spec``), parse and validation import these; nothing re-spells them.
Fp8Recipe = Literal["none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"]
FP8_RECIPES: tuple[str, ...] = get_args(Fp8Recipe)
"""none; torchao float8 recipes by their ``Float8LinearRecipeName`` values (tensorwise, rowwise, and
rowwise_with_gw_hp: rowwise with the weight-gradient GEMM in high precision; pytorch/ao
``torchao/float8/config.py``); or OCP MX fp8 blocks of 32 (mxfp8)."""
MODELLED_PRECISION: dict[str, str] = {"tensorwise": "fp8", "rowwise": "fp8", "rowwise_with_gw_hp": "fp8_gw_hp",
                                      "mxfp8": "mxfp8"}
"""fp8 recipe -> the precision ``workbench.predict`` models it with (fp8_gw_hp prices wgrad as a bf16 GEMM)."""
FP8_RECIPE_FOR_PRECISION: dict[str, str] = {"fp8": "rowwise", "fp8_gw_hp": "rowwise_with_gw_hp", "mxfp8": "mxfp8"}
"""The usual recipe for an 8-bit workbench precision (``PrecisionPolicy.for_precision``): MODELLED_PRECISION's
inverse, with rowwise for fp8."""
ComputeDtype = Literal["fp32", "tf32", "bf16", "fp16"]
COMPUTE_DTYPES: tuple[str, ...] = get_args(ComputeDtype)
"""tf32 is fp32 storage with TF32 tensor-core matmuls."""
ReduceDtype = Literal["fp32", "bf16"]
REDUCE_DTYPES: tuple[str, ...] = get_args(ReduceDtype)
CheckpointMode = Checkpointing
CHECKPOINT_MODES: tuple[str, ...] = CHECKPOINTING
"""The analytical model's modes (``workbench.config.CHECKPOINTING``): a recipe asks for what was predicted."""
RecipeSharding = Literal["fsdp", "ddp"]
SHARDINGS: tuple[str, ...] = get_args(RecipeSharding)
"""What a recipe's ``parallelism.sharding`` can say: a subset of ``workbench.config.SHARDINGS``; the analytical model
also prices zero1, which a recipe cannot ask for yet (the reference job builds FSDP2 or DDP only)."""
KernelImpl = Literal["triton", "vendor"]
KERNEL_CHOICES: tuple[str, ...] = get_args(KernelImpl)
KERNEL_OPS: tuple[str, ...] = TRITON_OPS
"""Ops a ``kernels`` entry can name: those the project has kernels for (``workbench.graph.execution.TRITON_OPS``)."""
KERNEL_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "tf32", "fp32")
"""Dtypes a ``kernels`` entry can name: what the kernels run (``workbench.select.GEMM_DTYPES``; attention runs
bf16/fp16, embedding_bag fp32)."""
Placement = Literal["hbm", "host", "row_sharded"]
PLACEMENTS: tuple[str, ...] = get_args(Placement)
LORA_TARGET_NAMES: tuple[str, ...] = LORA_TARGETS
"""Linears a ``lora.targets`` entry can name: the analytical model's (``workbench.config.LORA_TARGETS``: attention q,
k, v, o and the FFN's gate, up, down)."""


@dataclass(frozen=True)
class Target:
    """The hardware the recipe is for."""

    gpu: str
    """Catalog name of the GPU type (``workbench.get_gpu``), canonical spelling, e.g. ``h200-sxm``."""
    gpus: int
    """GPUs in the job: dp x tp x pp x cp."""


@dataclass(frozen=True)
class Revision:
    """One structural change to the model (or a proposal for one), with what the model predicts it gains."""

    name: str
    """What kind of change, e.g. ``pad_vocab``, ``pad_ffn``, ``head_dim``."""
    field: str
    """The model field it changes (a key of ``ModelChoice.overrides`` when applied)."""
    old: int
    new: int
    reason: str
    predicted_gain: float
    """Predicted step-time speed-up from this change alone: old step time / new step time (1.0 = none)."""
    requires_retraining: bool = False
    """True when the change alters the model's math (head_dim, GQA groups): its quality must be validated by
    training, so it is a proposal, not applied silently. Padding vocabulary/FFN with unused rows is False."""


@dataclass(frozen=True)
class ModelChoice:
    """The model: a catalog entry plus the fields replaced by applied structural revisions."""

    name: str
    """Catalog name (``workbench.get_model``)."""
    overrides: dict[str, int] = field(default_factory=dict)
    """Model fields replaced, e.g. ``{num_layers: 4, vocab_size: 128512}``; {} runs the catalog model."""
    revisions: tuple[Revision, ...] = ()
    """Why each override is there (applied revisions), with predicted gains."""


@dataclass(frozen=True)
class PrecisionPolicy:
    """Mixed precision as FSDP2/torchao see it."""

    param_dtype: ParamDtype = "fp32"
    """Master weights and optimizer states (the memory model assumes fp32 masters)."""
    compute_dtype: ComputeDtype = "bf16"
    """GEMM inputs and activations outside fp8 linears."""
    reduce_dtype: ReduceDtype = "fp32"
    """Gradient reduction dtype."""
    fp8: Fp8Recipe = "none"
    """8-bit linears: none, torchao float8 tensorwise/rowwise/rowwise_with_gw_hp, or mxfp8."""

    @property
    def workbench_precision(self) -> str:
        """The precision name ``workbench.predict`` models this policy with (``MODELLED_PRECISION``: ``fp8`` for
        tensorwise and rowwise, ``fp8_gw_hp`` for rowwise_with_gw_hp, ``mxfp8``)."""
        if self.fp8 == "none":
            return self.compute_dtype
        if self.fp8 not in MODELLED_PRECISION:
            raise SpecError("precision", "fp8", self.fp8, f"one of {', '.join(FP8_RECIPES)}")
        return MODELLED_PRECISION[self.fp8]

    @staticmethod
    def for_precision(name: str) -> PrecisionPolicy:
        """The usual policy for a workbench precision name (``bf16``, ``fp8``, ``fp8_gw_hp``, ``mxfp8``, ...)."""
        if name in FP8_RECIPE_FOR_PRECISION:
            return PrecisionPolicy(fp8=FP8_RECIPE_FOR_PRECISION[name])
        if name not in COMPUTE_DTYPES:
            raise SpecError("precision", "precision", name,
                            f"one of {', '.join(COMPUTE_DTYPES + tuple(FP8_RECIPE_FOR_PRECISION))}")
        return PrecisionPolicy(compute_dtype=name)


@dataclass(frozen=True)
class Batch:
    """Samples per step: global_batch = micro_batch x dp x grad_accumulation."""

    micro_batch: int
    """Samples per GPU per forward/backward."""
    global_batch: int
    """Samples per optimizer step, all data-parallel ranks together."""
    grad_accumulation: int
    """Micro-batches per optimizer step on each rank."""
    seq_len: int
    """Tokens per sample (1 for DLRM)."""


@dataclass(frozen=True)
class ActivationCheckpointing:
    mode: CheckpointMode = "none"
    layers: str | tuple[int, ...] = "all"
    """``all``, or the indices of the checkpointed blocks (the model predicts per-layer lists as ``all``)."""


@dataclass(frozen=True)
class ParallelismChoice:
    """Degrees of parallelism (``workbench.config.Parallelism``); GPUs = dp x tp x pp x cp. Experts shard ep-ways
    inside the dp x cp ranks that hold the same weights."""

    dp: int = 1
    sharding: RecipeSharding = "fsdp"
    """fsdp shards parameters, gradients and optimizer states dp-ways (ZeRO-3); ddp replicates them."""
    tp: int = 1
    pp: int = 1
    cp: int = 1
    """Context parallelism: each sample's sequence split over cp ranks (ring attention)."""
    ep: int = 1
    virtual_stages: int = 1
    """Model chunks per pipeline rank: interleaved 1F1B (Narayanan et al. 2021) when > 1 (needs pp > 1); 1 is
    plain 1F1B."""

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


@dataclass(frozen=True)
class LoRAChoice:
    """LoRA fine-tuning (Hu et al. 2021), as ``TrainingConfig.lora_rank`` / ``lora_targets`` price it: rank-``rank``
    adapters on the ``targets`` linears of every block, the base weights frozen (no base weight gradients or
    optimizer states). A recipe without one (``Recipe.lora`` None) trains every weight. The adapters' scale
    (alpha) is a training hyperparameter like the learning rate and costs no time: it is not recorded."""

    rank: int
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    """Linears that carry adapters (``LORA_TARGET_NAMES``), e.g. ``(q, k, v, o)``: MLPerf's Llama 2 70B LoRA."""


@dataclass(frozen=True)
class KernelChoice:
    """One op's kernel: a Triton config from ``workbench.select`` or the vendor library."""

    op: str
    """``gemm`` or ``attention``."""
    shape: dict[str, int]
    """gemm: {m, n, k}; attention: the selector's shape keys."""
    dtype: str
    choice: KernelImpl
    config: dict[str, Any] | None
    """The Triton config (kernel meta-parameters); None for the vendor library."""
    predicted_ms: float


@dataclass(frozen=True)
class EmbeddingPlacement:
    """Where one recommendation-model embedding table lives."""

    table: str
    rows: int
    dim: int
    placement: Placement
    """hbm: whole table on every GPU; row_sharded: rows split over the GPUs' HBM; host: CPU memory (UVM)."""
    bytes: int
    """Table bytes (fp32 rows), before sharding."""


@dataclass(frozen=True)
class Predicted:
    """What the analytical model (``Recipe.model_version``) predicts for this recipe."""

    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    peak_memory_gb: float
    """Per GPU, framework overhead included."""
    mfu: float
    communication_s: float
    """Exposed communication per step."""
    fits: bool = True
    """Whether peak memory fits the target's HBM with headroom; a direct port may not."""
    stack: str = "ideal"
    """The training stack the prediction is for (``workbench.stacks``); ``ideal`` is the fused-step bound."""


@dataclass(frozen=True)
class Recipe:
    """One training setup for one target, with predictions. See the module docstring for the file layout."""

    target: Target
    model: ModelChoice
    batch: Batch
    precision: PrecisionPolicy = field(default_factory=PrecisionPolicy)
    activation_checkpointing: ActivationCheckpointing = field(default_factory=ActivationCheckpointing)
    parallelism: ParallelismChoice = field(default_factory=ParallelismChoice)
    lora: LoRAChoice | None = None
    """LoRA fine-tuning; None trains every weight."""
    compile: bool = True
    """torch.compile the model."""
    kernels: tuple[KernelChoice, ...] = ()
    embeddings: tuple[EmbeddingPlacement, ...] = ()
    predicted: Predicted | None = None
    model_version: str = ""
    """``workbench.predict.MODEL_VERSION`` of the model that made ``predicted``; empty without predictions."""
    workbench_version: str = __version__
    """The workbench package that wrote the recipe."""

    def __post_init__(self):
        validate(self, "<recipe>")

    @property
    def schema_version(self) -> int:
        """The oldest schema version that says everything this recipe holds: 2 when it uses a field version 2
        added (``V2_FIELDS``), else 1, so older workbenches read it."""
        return 2 if self.lora is not None or self.parallelism.virtual_stages > 1 else 1

    def to_dict(self) -> dict:
        """Plain data in the file's key order (YAML/JSON-ready: lists, dicts, str, int, float, bool, None)."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "workbench_version": self.workbench_version,
            "model_version": self.model_version,
            "target": _plain(self.target),
            "model": {"name": self.model.name, "overrides": dict(self.model.overrides),
                      "revisions": [_plain(r) for r in self.model.revisions]},
            "precision": _plain(self.precision),
            "batch": _plain(self.batch),
            "activation_checkpointing": {"mode": self.activation_checkpointing.mode,
                                         "layers": _layers_out(self.activation_checkpointing.layers)},
            "parallelism": _parallelism_out(self.parallelism),
            **({} if self.lora is None else {"lora": {"rank": self.lora.rank, "targets": list(self.lora.targets)}}),
            "compile": self.compile,
            "kernels": [_plain(k) for k in self.kernels],
            "embeddings": [_plain(e) for e in self.embeddings],
            "predicted": None if self.predicted is None else _plain(self.predicted),
        }
        return out

    @staticmethod
    def from_dict(data: object, origin: str = "<dict>") -> Recipe:
        """Validate parsed YAML/JSON and build the recipe; a ``SpecError`` names origin, field, value, expected."""
        from workbench.recipe.parse import recipe_from_dict

        return recipe_from_dict(data, origin)


def _plain(obj: Any) -> dict:
    out = {}
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        out[name] = dict(value) if isinstance(value, dict) else value
    return out


def _layers_out(layers: str | tuple[int, ...]) -> str | list[int]:
    return layers if isinstance(layers, str) else list(layers)


def _parallelism_out(parallelism: ParallelismChoice) -> dict:
    """The degrees, with ``virtual_stages`` only when > 1 (a version 2 field: plain 1F1B writes version 1's layout)."""
    out = _plain(parallelism)
    if parallelism.virtual_stages == 1:
        del out["virtual_stages"]
    return out


def validate(recipe: Recipe, origin: str) -> None:
    """Check names against the catalogs and the batch/parallelism arithmetic; raise ``SpecError`` if wrong."""
    from workbench.hardware import get_gpu
    from workbench.models import get_model

    _check_values(recipe, origin)
    try:
        gpu = get_gpu(recipe.target.gpu)
    except UnknownNameError as exc:
        raise SpecError(origin, "target.gpu", recipe.target.gpu, f"a catalog GPU ({exc})") from None
    if gpu.name != recipe.target.gpu:
        raise SpecError(origin, "target.gpu", recipe.target.gpu, f"the canonical catalog name {gpu.name!r}")
    check_precision_supported(gpu, recipe.precision, origin)
    try:
        model = get_model(recipe.model.name)
    except UnknownNameError as exc:
        raise SpecError(origin, "model.name", recipe.model.name, f"a catalog model ({exc})") from None
    if model.name != recipe.model.name:
        raise SpecError(origin, "model.name", recipe.model.name, f"the catalog name {model.name!r}")
    known = [k for k in model.__dataclass_fields__ if isinstance(getattr(model, k), int)
             and not isinstance(getattr(model, k), bool)]
    for key, value in recipe.model.overrides.items():
        if key not in known:
            raise SpecError(origin, f"model.overrides.{key}", value,
                            f"an integer field of {model.kind} model {model.name}: {', '.join(known)}")
    p, b = recipe.parallelism, recipe.batch
    if p.gpus != recipe.target.gpus:
        raise SpecError(origin, "parallelism", f"dp={p.dp} x tp={p.tp} x pp={p.pp} x cp={p.cp} = {p.gpus}",
                        f"target.gpus = {recipe.target.gpus}")
    if b.global_batch != b.micro_batch * p.dp * b.grad_accumulation:
        raise SpecError(origin, "batch.global_batch", b.global_batch,
                        f"micro_batch x dp x grad_accumulation = {b.micro_batch} x {p.dp} x {b.grad_accumulation}"
                        f" = {b.micro_batch * p.dp * b.grad_accumulation}")
    if (p.dp * p.cp) % p.ep:
        raise SpecError(origin, "parallelism.ep", p.ep, f"a divisor of dp={p.dp}" if p.cp == 1
                        else f"a divisor of dp x cp = {p.dp * p.cp}")
    if recipe.precision.fp8 != "none" and recipe.precision.compute_dtype != "bf16":
        raise SpecError(origin, "precision.compute_dtype", recipe.precision.compute_dtype,
                        "bf16 when fp8 is on (fp8 linears keep bf16 for everything else)")
    if recipe.predicted is not None and not recipe.model_version:
        raise SpecError(origin, "model_version", recipe.model_version,
                        "the workbench model version that made the predictions")
    _check_against_model(recipe, origin)


def check_precision_supported(gpu: Any, policy: PrecisionPolicy, origin: str) -> None:
    """The recipe's modelled precision must have a hardware path on its target GPU: the check ``workbench.predict``
    makes (``workbench.precision.resolve_precision`` without fallback; a recipe records no fallback), made at load
    so that neither ``load_recipe`` nor the training job takes an fp8 recipe for an A100."""
    from workbench.precision import PRECISIONS, UnsupportedPrecisionError, resolve_precision, runs_natively

    name = policy.workbench_precision
    try:
        resolve_precision(gpu, name)
    except UnsupportedPrecisionError:
        native = ", ".join(p.name for p in PRECISIONS.values() if runs_natively(gpu, p))
        field_, value = ("precision.fp8", policy.fp8) if policy.fp8 != "none" else ("precision.compute_dtype",
                                                                                    policy.compute_dtype)
        raise SpecError(origin, field_, value,
                        f"a precision the target GPU {gpu.name} ({gpu.display_name}) runs: it has no hardware path for "
                        f"{name} and runs {native}; a recipe records no fallback, so change the precision (fp8: none "
                        "runs bf16) or the target") from None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_values(recipe: Recipe, origin: str) -> None:
    """Every enum from its choices and every number in its range, for recipes built in Python as for files
    (``parse`` reads the types; this is what a value must mean)."""
    def need(ok: bool, field_: str, value: object, expected: str) -> None:
        if not ok:
            raise SpecError(origin, field_, value, expected)

    def choice(field_: str, value: object, choices: tuple[str, ...]) -> None:
        need(value in choices, field_, value, f"one of {', '.join(choices)}")

    need(_positive_int(recipe.target.gpus), "target.gpus", recipe.target.gpus, "an integer >= 1")
    pol = recipe.precision
    choice("precision.param_dtype", pol.param_dtype, PARAM_DTYPES)
    choice("precision.compute_dtype", pol.compute_dtype, COMPUTE_DTYPES)
    choice("precision.reduce_dtype", pol.reduce_dtype, REDUCE_DTYPES)
    choice("precision.fp8", pol.fp8, FP8_RECIPES)
    for name in Batch.__dataclass_fields__:
        value = getattr(recipe.batch, name)
        need(_positive_int(value), f"batch.{name}", value, "an integer >= 1")
    choice("activation_checkpointing.mode", recipe.activation_checkpointing.mode, CHECKPOINT_MODES)
    par = recipe.parallelism
    choice("parallelism.sharding", par.sharding, SHARDINGS)
    for name in ("dp", "tp", "pp", "cp", "ep", "virtual_stages"):
        need(_positive_int(getattr(par, name)), f"parallelism.{name}", getattr(par, name), "an integer >= 1")
    if recipe.lora is not None:
        rank, targets = recipe.lora.rank, recipe.lora.targets
        need(_positive_int(rank) and rank <= MAX_LORA_RANK, "lora.rank", rank,
             f"an integer from 1 to {MAX_LORA_RANK:,} (no lora section trains every weight)")
        need(isinstance(targets, tuple) and bool(targets) and len(set(targets)) == len(targets)
             and all(t in LORA_TARGET_NAMES for t in targets), "lora.targets", targets,
             f"one or more distinct linears from {', '.join(LORA_TARGET_NAMES)}")
    need(isinstance(recipe.compile, bool), "compile", recipe.compile, "true or false")
    for i, k in enumerate(recipe.kernels):
        choice(f"kernels[{i}].op", k.op, KERNEL_OPS)
        choice(f"kernels[{i}].dtype", k.dtype, KERNEL_DTYPES)
        choice(f"kernels[{i}].choice", k.choice, KERNEL_CHOICES)
        need(_finite(k.predicted_ms) and k.predicted_ms >= 0, f"kernels[{i}].predicted_ms", k.predicted_ms,
             "a finite number of milliseconds >= 0")
    for i, e in enumerate(recipe.embeddings):
        choice(f"embeddings[{i}].placement", e.placement, PLACEMENTS)
    pred = recipe.predicted
    if pred is not None:
        for name in ("step_time_s", "tokens_per_s", "samples_per_s", "peak_memory_gb"):
            value = getattr(pred, name)
            need(_finite(value) and value > 0, f"predicted.{name}", value, "a finite number > 0")
        need(_finite(pred.mfu) and 0 < pred.mfu <= 1, "predicted.mfu", pred.mfu,
             "a fraction of the peak with 0 < mfu <= 1")
        comm = pred.communication_s
        need(_finite(comm) and 0 <= comm <= pred.step_time_s, "predicted.communication_s", comm,
             f"exposed seconds from 0 to step_time_s = {pred.step_time_s:g} (a part of the step)")
        need(isinstance(pred.fits, bool), "predicted.fits", pred.fits, "true or false")


def _check_against_model(recipe: Recipe, origin: str) -> None:
    """The revised model must be valid and the configuration must split it (tp divides heads, pp <= layers, ...):
    the checks ``workbench.predict`` makes, reported against the recipe's file and fields."""
    from workbench.recipe.build import revised_model, training_config

    try:
        model = revised_model(recipe.model.name, recipe.model.overrides)
    except SpecError as exc:
        raise SpecError(origin, f"model.{exc.field}" if exc.field.startswith("overrides") else "model.overrides",
                        exc.value, exc.expected) from None
    try:
        training_config(recipe).resolved(model)
    except SpecError as exc:
        field = {"micro_batch": "batch.micro_batch", "seq_len": "batch.seq_len", "global_batch": "batch.global_batch",
                 "precision": "precision", "lora_rank": "lora.rank", "lora_targets": "lora.targets"}.get(exc.field,
                                                                                                       exc.field)
        raise SpecError(origin, field, exc.value, exc.expected) from None
