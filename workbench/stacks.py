"""Training stacks: what executes the step, as sourced data (``specs/stacks/*.yaml``).

A model and a configuration say *what* a step computes; a stack says *how* it runs: which kernels its code
launches for each op (one fused kernel, or the unfused sequence eager PyTorch launches), whether its blocks are
compiled, the dtype its parameters live in, what its activation-checkpointing modes recompute, what its CPU costs
when the GPU waits for it, and how much the allocator reserves beyond what it allocates. ``predict(...,
stack="torchtitan")`` prices the step as that stack runs it; ``ideal`` is the fused step, a bound no stack beats.
A step names no stack: its model family's default (``default_stack``: ``torchtitan`` for transformers, ``ideal``
for DLRM and HSTU, which no shipped stack trains).

    >>> get_stack("pytorch-eager").compiled(recipe_compile=True)
    False
    >>> {"ideal", "torchtitan", "torchtitan-flash2", "megatron", "deepspeed-zero3"} <= {s.name for s in list_stacks()}
    True

Users add a stack as a YAML file with the same schema (``load_stack``); each constant carries a source or says it
is a guess to calibrate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from workbench._data import specs_dir
from workbench.catalog import Catalog
from workbench.config import CHECKPOINTING, PARAM_DTYPES
from workbench.errors import SpecError, UnknownNameError
from workbench.families import family_of
from workbench.perf.context_parallel import KV_HEADS, MERGES, ROTATE_METHODS, ContextParallel
from workbench.schema import Fields, check_number, load_yaml

if TYPE_CHECKING:
    from workbench.families.recsys import EmbeddingPlacement
    from workbench.perf.efficiency import Constants

SCHEMA_VERSION = 1
KERNEL_TABLES: tuple[str, ...] = ("fused", "reference-job", "pytorch", "torchtitan", "megatron-local", "megatron-te",
                                  "hf-deepspeed", "generative-recommenders", "hugectr")
"""How a stack's ops are priced: ``fused`` (one fused kernel per memory-bound op, ``workbench.graph.transformer``),
``reference-job`` (the project's job, ``workbench.graph.execution``), ``pytorch`` and ``torchtitan``
(``workbench.graph.stack_kernels``), ``megatron-local`` and ``megatron-te`` (``workbench.graph.stack_kernels_megatron``),
``hf-deepspeed`` (HF transformers' Llama under DeepSpeed ZeRO, ``workbench.graph.stack_kernels_hf``),
``generative-recommenders`` (its HSTU kernels, ``workbench.graph.hstu_gr_kernels``; other models: the bound),
``hugectr`` (NVIDIA's MLPerf DLRM-DCNv2, ``workbench.families.recsys``; other models: the bound)."""
COMPILE_MODES: tuple[str, ...] = ("never", "always", "recipe")
CHECKPOINT_POLICIES: tuple[str, ...] = ("none", "full", "workbench-selective", "selective-op", "selective-2",
                                        "selective-core-attn")
"""What a stack runs for each of the workbench's modes: ``workbench-selective`` recomputes the memory-bound ops and
saves every GEMM output (the fused step's and the reference job's selective); ``selective-core-attn`` is
Megatron's (``recompute_modules=["core_attn"]``); ``selective-op`` is torchtitan's
per-op policy (saves SDPA and every second matmul's output); ``selective-N`` fully checkpoints every N-th block."""
CONSTANT_KINDS: tuple[str, ...] = ("sourced", "fitted", "guess")
GEMM_SCALE_PREFIX = "gemm_fraction_scale."
"""Stack constants ``gemm_fraction_scale.<dtype>.<architecture>`` (``Stack.gemm_constants``)."""
KERNEL_PATCHES: tuple[str, ...] = ("", "liger")
"""A kernel library patched over the model's own ops (``kernel_patch``; read by the ``hf-deepspeed`` tables):
``liger`` is Liger-Kernel's ``apply_liger_kernel_to_llama`` (``workbench.graph.stack_kernels_liger``); "" none."""
FP8_RECIPES: tuple[str, ...] = ("delayed", "current")
"""TransformerEngine's per-tensor fp8 recipe a ``megatron-te`` stack runs for ``precision: fp8``
(``workbench.graph.te_fp8``): delayed scaling (NeMo's ``bf16_with_fp8_mixed``, TE's default) or current scaling
(``bf16_with_fp8_current_scaling_mixed``)."""
DEFAULT_STACK = "torchtitan"
"""The stack a step is priced for when none is named, for a model whose family names none of its own
(``default_stack``): the stack most teams train dense decoders with. Its kernel tables price Llama-style blocks on
one GPU, FSDP2, tensor (+ sequence), pipeline and context parallelism, and fp8 (rowwise on one GPU, tensorwise with
FSDP2's float8 all-gather); what they do not price (MoE or non-Llama blocks, TP / PP without FSDP, zero1, LoRA,
other fp8 recipes) is the fused-step bound, and the prediction's ``notes`` and ``priced_as_bound`` say so."""
BOUND_STACK = "ideal"
"""The fused-step bound: no stack runs faster (``Stack.bound``)."""


@dataclass(frozen=True)
class StackConstant:
    value: float
    kind: Literal["sourced", "fitted", "guess"]
    source: str
    """Where the value comes from; for a guess, how to calibrate it."""


@dataclass(frozen=True)
class Stack:
    """One training stack as the analytical model sees it."""

    name: str
    display_name: str
    summary: str
    """One line: what this stack assumes (``workbench stacks`` prints it)."""
    source: str
    kernels: Literal["fused", "reference-job", "pytorch", "torchtitan", "megatron-local", "megatron-te", "hf-deepspeed",
                     "generative-recommenders", "hugectr"]
    compile: Literal["never", "always", "recipe"]
    param_dtypes: tuple[str, ...]
    """Parameter dtypes this stack trains with; the first is its default (fp32 = fp32 parameters under autocast)."""
    checkpointing: dict[str, str]
    """The workbench's mode (none, selective, full) -> this stack's policy (``CHECKPOINT_POLICIES``)."""
    bound: bool = False
    """True for ``ideal``: a bound on what a stack reaches, shown as a bound wherever it is shown."""
    validation: str = ""
    """Where this stack's predictions are checked against measurements (a report under ``benchmarks/``)."""
    constants: dict[str, StackConstant] = field(default_factory=dict)
    derived_from: str = ""
    """The shipped stack this one is a variant of (``derived_from`` in its YAML), "" for a stack of its own."""
    sdpa_backend: str = ""
    """The SDPA kernel the stack's attention runs where it is not what the generic attention fractions describe
    (``workbench.perf.attention.SDPA_BACKENDS``, e.g. ``flash2``: a torchtitan from before cuDNN-first SDPA on
    Hopper); empty: the generic fractions."""
    kernel_patch: Literal["", "liger"] = ""
    """A kernel library patched over the model's ops (``KERNEL_PATCHES``: ``liger``, Liger-Kernel's fused RMSNorm,
    RoPE, SwiGLU and fused linear cross-entropy on HF's Llama); "" the model's own ops."""
    fp8_recipe: Literal["delayed", "current"] = "delayed"
    """The per-tensor fp8 recipe of ``precision: fp8`` (``FP8_RECIPES``; read by the ``megatron-te`` tables)."""
    fp8_bf16_end_blocks: tuple[int, int] = (0, 0)
    """Blocks kept in bf16 at the start and at the end of the model under fp8 (Megatron-Core's
    ``num_layers_at_start_in_bf16`` / ``num_layers_at_end_in_bf16`` with ``first_last_layers_bf16``; read by the
    ``megatron-te`` tables); (0, 0): every block's linears in fp8."""
    vocab_size_divisible_by: int = 1
    """The vocabulary is padded to a multiple of this times the tensor-parallel size (Megatron's
    ``make_vocab_size_divisible_by``: ``padded_model``); 1: no padding."""
    context_parallel: ContextParallel | None = None
    """How the stack's ring attention moves K/V and merges its steps under cp > 1 (``context_parallel`` in its
    YAML: ``workbench.perf.context_parallel``); None: the generic p2p ring (``GENERIC_RING``)."""
    embedding_placement: EmbeddingPlacement | None = None
    """How the stack places a DLRM's tables (``embedding_placement`` in its YAML: replicated small tables,
    model-parallel shards; ``workbench.families.recsys.EmbeddingPlacement``); None: every table row-sharded."""

    def compiled(self, recipe_compile: bool) -> bool:
        """Whether this stack's blocks run compiled, given the configuration's compile flag."""
        return {"never": False, "always": True}.get(self.compile, recipe_compile)

    def param_dtype(self, requested: str | None = None) -> str:
        """The parameter dtype for a step: the requested one (checked against this stack's), else the default."""
        if requested is None:
            return self.param_dtypes[0]
        if requested not in self.param_dtypes:
            raise SpecError(f"stack {self.name}", "param_dtype", requested,
                            f"one of {', '.join(self.param_dtypes)} (what {self.display_name} trains with)")
        return requested

    def policy(self, checkpointing: str) -> str:
        return self.checkpointing[checkpointing]

    def constant(self, name: str, default: float) -> float:
        return self.constants[name].value if name in self.constants else default

    def gemm_constants(self, constants: Constants, architecture: str) -> Constants:
        """``constants`` with this stack's GEMM factors for ``architecture`` applied: a constant
        ``gemm_fraction_scale.<dtype>.<architecture>`` multiplies ``gemm_fraction.<dtype>`` (the share of the part's
        peak the stack's GEMM library sustains there, where it differs from the part's measured matmul ceiling)."""
        updates, kinds = {}, set()
        for name, c in self.constants.items():
            dtype, arch = gemm_scale_target(name)
            if arch == architecture:
                key = f"gemm_fraction.{dtype}"
                updates[key] = constants[key] * c.value
                kinds.add(c.kind)
        return constants.with_values(updates, "+".join(sorted(kinds))) if updates else constants

    def gemm_notes(self, architecture: str, precision: str) -> list[str]:
        """What a prediction in ``precision`` on ``architecture`` should say of this stack's GEMM factors."""
        name = f"{GEMM_SCALE_PREFIX}{precision}.{architecture}"
        c = self.constants.get(name)
        if c is None:
            return []
        return [f"{self.display_name}: {precision} GEMMs at {c.value:g} x the part's sustained rate on "
                f"{architecture} ({name}, {c.kind}; calibrate me)"]

    def padded_model(self, model, tp: int):
        """``model`` with its vocabulary padded as this stack pads it for ``tp`` tensor-parallel ranks: up to a
        multiple of ``vocab_size_divisible_by`` x tp (NeMo 2.2 nemo/lightning/base.py ``get_vocab_size``:
        ``multiple = make_vocab_size_divisible_by * config.tensor_model_parallel_size``); a model without a
        vocabulary, or one already a multiple, is returned as it is."""
        vocab = getattr(model, "vocab_size", 0)
        multiple = self.vocab_size_divisible_by * max(1, tp)
        if self.vocab_size_divisible_by <= 1 or not vocab or vocab % multiple == 0:
            return model
        return dataclasses.replace(model, vocab_size=-(-vocab // multiple) * multiple)

    def is_variant_of(self, name: str) -> bool:
        """Whether this stack is ``name`` or a variant derived from it (``torchtitan-flash2`` of ``torchtitan``)."""
        return name in (self.name, self.derived_from)


def _derived(data: object, origin: str) -> object:
    """``data`` with ``derived_from: NAME`` resolved: the shipped stack NAME's YAML, each top-level key ``data``
    gives replacing the base's, ``constants`` merged name by name (a variant, e.g. an older release of one stack,
    is its differences, not a copied file)."""
    if not isinstance(data, dict) or "derived_from" not in data:
        return data
    base_name = data["derived_from"]
    path = specs_dir() / "stacks" / f"{base_name}.yaml"
    if not isinstance(base_name, str) or not base_name or not path.is_file():
        raise SpecError(origin, "derived_from", base_name, f"a shipped stack ({', '.join(sorted(_catalog_names()))})")
    base = load_yaml(path)
    if "derived_from" in base:
        raise SpecError(origin, "derived_from", base_name, "a stack that is not itself derived")
    merged = {**base, **{k: v for k, v in data.items() if k != "derived_from"}}
    merged["constants"] = {**base.get("constants", {}), **(data.get("constants") or {})}
    return merged


def _catalog_names() -> list[str]:
    return [p.stem for p in (specs_dir() / "stacks").glob("*.yaml")]


def gemm_scale_target(name: str) -> tuple[str, str] | tuple[None, None]:
    """(dtype, architecture) of a stack constant ``gemm_fraction_scale.<dtype>.<architecture>``; (None, None) for
    any other constant."""
    if not name.startswith(GEMM_SCALE_PREFIX):
        return None, None
    dtype, _, arch = name.removeprefix(GEMM_SCALE_PREFIX).rpartition(".")
    return dtype, arch


def _check_gemm_scale(table: Fields, name: str) -> None:
    """``gemm_fraction_scale.<dtype>.<architecture>`` names a GEMM fraction and an architecture of
    ``specs/efficiency.yaml`` (a misspelt one would scale nothing, or fail only when a prediction reads it)."""
    from workbench.perf.efficiency import _defaults

    defaults = _defaults()
    dtype, arch = gemm_scale_target(name)
    dtypes = sorted(k.removeprefix("gemm_fraction.") for k in defaults.values if k.startswith("gemm_fraction."))
    if dtype not in dtypes or arch not in defaults.per_arch:
        raise table.error(name, name, f"{GEMM_SCALE_PREFIX}<dtype>.<architecture>, dtype one of {', '.join(dtypes)}, "
                                      f"architecture one of {', '.join(sorted(defaults.per_arch))}")


def stack_from_dict(data: object, origin: str = "<dict>") -> Stack:
    """A stack from its parsed YAML, validated: unknown keys, bad values and missing sources are errors;
    ``derived_from`` names a shipped stack whose figures the others override (``_derived``)."""
    from workbench.perf.attention import SDPA_BACKENDS

    top = Fields(_derived(data, origin), origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION}")
    ck = top.sub("checkpointing")
    checkpointing = {mode: ck.string(mode, CHECKPOINT_POLICIES) for mode in CHECKPOINTING}
    ck.finish()
    if checkpointing["none"] != "none" or checkpointing["full"] != "full":
        raise ck.error("none", checkpointing["none"], "none -> none and full -> full (only selective differs)")
    constants = {}
    table = top.sub("constants", default={})
    for name in list(table.data):
        entry = table.sub(name)
        value = check_number(entry.raw("value"), origin, f"{entry.path}.value", above=0)
        constants[name] = StackConstant(value, entry.string("kind", CONSTANT_KINDS), entry.string("source"))
        if name.startswith(GEMM_SCALE_PREFIX):
            _check_gemm_scale(table, name)
        entry.finish()
    table.finish()
    stack = Stack(
        name=top.string("name"),
        display_name=top.string("display_name"),
        summary=top.string("summary"),
        source=top.string("source"),
        kernels=top.string("kernels", KERNEL_TABLES),
        compile=top.string("compile", COMPILE_MODES),
        param_dtypes=top.string_list("param_dtypes", PARAM_DTYPES),
        checkpointing=checkpointing,
        bound=top.boolean("bound", default=False),
        validation=top.string("validation", default="") if top.has("validation") else "",
        constants=constants,
        derived_from=data["derived_from"] if isinstance(data, dict) and "derived_from" in data else "",
        sdpa_backend=top.string("sdpa_backend", SDPA_BACKENDS) if top.has("sdpa_backend") else "",
        kernel_patch=top.string("kernel_patch", KERNEL_PATCHES[1:]) if top.has("kernel_patch") else "",
        fp8_recipe=top.string("fp8_recipe", FP8_RECIPES) if top.has("fp8_recipe") else "delayed",
        fp8_bf16_end_blocks=_end_blocks(top) if top.has("fp8_bf16_end_blocks") else (0, 0),
        vocab_size_divisible_by=(int(top.number("vocab_size_divisible_by", minimum=1, integer=True))
                                 if top.has("vocab_size_divisible_by") else 1),
        context_parallel=_context_parallel(top.sub("context_parallel")) if top.has("context_parallel") else None,
        embedding_placement=_embedding_placement(top) if top.has("embedding_placement") else None,
    )
    top.finish()
    if not stack.param_dtypes:
        raise SpecError(origin, "param_dtypes", [], f"at least one of {', '.join(PARAM_DTYPES)}")
    return stack


def _end_blocks(top: Fields) -> tuple[int, int]:
    """A stack's ``fp8_bf16_end_blocks``: [blocks at the start, blocks at the end], non-negative integers."""
    value = top.raw("fp8_bf16_end_blocks")
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise top.error("fp8_bf16_end_blocks", value, "[start, end]: two non-negative integers")
    return value[0], value[1]


def _embedding_placement(top: Fields) -> EmbeddingPlacement:
    """The stack's ``embedding_placement`` (DLRM tables), read by the recommender family's module, imported only
    for a stack that has one (a transformer's predictions never load it)."""
    from workbench.families.recsys import embedding_placement_from

    return embedding_placement_from(top.sub("embedding_placement"))


def _context_parallel(entry: Fields) -> ContextParallel:
    """A stack's ``context_parallel`` mapping (rotate, kv_heads, grad_dtype bf16 / fp32, merge, source)."""
    grad = entry.string("grad_dtype", ("bf16", "fp32"))
    cp = ContextParallel(rotate=entry.string("rotate", ROTATE_METHODS), kv_heads=entry.string("kv_heads", KV_HEADS),
                         grad_bytes=4 if grad == "fp32" else 2, merge=entry.string("merge", MERGES),
                         source=entry.string("source"))
    entry.finish()
    return cp


def load_stack(spec: str | Path | dict) -> Stack:
    """A stack from a YAML file path or a dict."""
    if isinstance(spec, dict):
        return stack_from_dict(spec)
    return stack_from_dict(load_yaml(spec), str(spec))


_STACKS: Catalog[Stack] = Catalog(lambda: specs_dir() / "stacks", load_stack)


def _catalog() -> dict[str, Stack]:
    return _STACKS.entries()


def list_stacks() -> list[Stack]:
    return list(_catalog().values())


def default_stack(model) -> str:
    """The stack ``model`` is priced for when none is named: its family's (``Family.default_stack``:
    ``torchtitan`` for transformers, the ``ideal`` bound for the recommendation models, which no shipped stack
    trains).

        >>> from workbench.models import get_model
        >>> default_stack(get_model("llama3-8b")), default_stack(get_model("dlrm-dcnv2"))
        ('torchtitan', 'ideal')
    """
    return family_of(model).default_stack


def resolve_stack(name: str | Stack | None, model) -> Stack:
    """``get_stack(name)``, where None is ``model``'s default stack (``default_stack``), not the global one."""
    return get_stack(default_stack(model) if name is None else name)


def get_stack(name: str | Stack | None) -> Stack:
    """A stack by exact name, e.g. ``get_stack("torchtitan")``; None is ``DEFAULT_STACK`` (``resolve_stack`` gives
    a model's own default); a path loads a file."""
    if isinstance(name, Stack):
        return name
    if name is None:
        name = DEFAULT_STACK
    if str(name).endswith((".yaml", ".yml")):
        return load_stack(name)
    stack = _STACKS.get(str(name))  # reads that stack's file (and a variant's base) alone
    if stack is None:
        raise UnknownNameError("stack", name, _catalog())
    return stack
