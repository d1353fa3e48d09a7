"""Model families behind one small protocol: what a family's model trains as (its ops, memory and collectives),
which parallelisms, shardings and stack kernel tables apply to it; ``family_of(model)`` finds it.

    >>> from workbench.families import family_of
    >>> family = family_of(get_model("mixtral-8x7b"))
    >>> family.name, family.parallelisms(get_model("mixtral-8x7b"))
    ('transformer', ('dp', 'tp', 'pp', 'cp', 'virtual_stages', 'ep'))

The step model (``workbench.step``), the memory model (``workbench.memory``), the collectives
(``workbench.step_comm``), the config checks (``workbench.config``), the stack tables (``workbench.graph.stacked``),
recipes and the widget ask the family, never the model's type. A family delegates to the formulas where they live
(``workbench.graph.transformer``, ``workbench.memory.transformer_memory``, ...); its module says which apply.

Each family is one module of this package that registers itself: ``transformer`` (dense and mixture-of-experts
decoders: an MoE model is a transformer with ``num_experts > 1``) and ``recsys`` (``dlrm``, ``hstu``). A new family
(a ViT, a diffusion model) is one more module, here or anywhere imported before its models are used: a frozen model
dataclass with ``name``, ``display_name``, ``kind`` (the family's name) and ``num_params``; a ``Family`` subclass for
it; ``register(MyFamily())`` at the bottom. A lookup imports the modules of this package it needs (by name: all of
them; ``family_of`` a model: the module named for its ``kind`` first, then the others until one registers its
type), so a module dropped in here is found without editing anything else; a catalog YAML of its ``kind`` is read
through its ``model_from_fields``.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from workbench.errors import UnknownNameError, WorkbenchError

if TYPE_CHECKING:
    from workbench.config import TrainingConfig
    from workbench.graph.execution import Execution
    from workbench.graph.ops import Op
    from workbench.hardware import GPU
    from workbench.memory import MemoryBreakdown
    from workbench.perf.overlap import ScheduledCollective
    from workbench.schema import Fields
    from workbench.step_comm import RingExchange, Traffic

PARALLELISMS: tuple[str, ...] = ("dp", "tp", "pp", "cp", "virtual_stages", "ep")
"""The degrees of ``workbench.config.Parallelism`` a family may let exceed 1 (``Family.parallelisms``)."""


class Family(ABC):
    """One model family: the model type it describes and what the step, memory and collective models price for
    it. Methods take the model (an instance of ``model_type``) and a resolved ``TrainingConfig``; the ones with a
    body here are the defaults of a family without that feature."""

    name: str
    """The models' ``kind`` (``kind:`` in a catalog YAML), e.g. ``transformer``."""
    model_type: type
    """The frozen dataclass its models are."""
    shardings: tuple[str, ...] = ("ddp", "fsdp")
    """Data-parallel shardings its memory and collectives model (``Parallelism.sharding``)."""
    trains_lora: bool = False
    """LoRA fine-tuning is modelled (``TrainingConfig.lora_rank``)."""
    offloads: bool = False
    """CPU offload is modelled (``TrainingConfig.offload``)."""
    repeats_blocks: bool = False
    """The micro-batch is ends plus one block repeated ``stage_layers`` times: the step model prices the block
    once (``block_graph``) and multiplies it; False prices ``microbatch_ops`` whole."""
    padding_fields: Mapping[str, str] = {}
    """Integer fields that zero-padding leaves the model's function unchanged, with what padding them changes: the
    advisor tries rounding them up (``workbench.recipe.advisor``)."""

    # -- the training step's shape
    @abstractmethod
    def default_micro_batch(self, model) -> int:
        """Samples per micro-batch a question names none (``workbench.config.default_micro_batch``)."""

    @abstractmethod
    def default_seq_len(self, model) -> int:
        """Tokens per sample when none is named (1: no sequence)."""

    @abstractmethod
    def parallelisms(self, model) -> tuple[str, ...]:
        """The degrees of ``PARALLELISMS`` that may exceed 1 for ``model`` (``dp`` always): what the widget and
        search offer; ``check_config`` is what refuses the rest."""

    @abstractmethod
    def check_config(self, model, cfg: TrainingConfig, seq_len: int, origin: str) -> None:
        """Raise ``SpecError`` naming the field for what ``cfg`` asks that ``model`` cannot run (after the checks
        every family shares, ``TrainingConfig.resolved``; ``seq_len`` the resolved sequence length)."""

    def check_model(self, model, origin: str) -> None:
        """Raise ``SpecError`` for a model whose fields contradict each other (a revised catalog model)."""

    def model_from_fields(self, f: Fields, common: dict[str, str]) -> Any:
        """The model of a catalog YAML / dict of this ``kind`` (``workbench.models.model_from_dict``); ``common``
        holds name, display_name and source, already read."""
        raise f.error("kind", self.name, "a kind whose family reads catalog entries (this one takes models built "
                      "in Python)")

    # -- the ops of a step
    @abstractmethod
    def microbatch_ops(self, model, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
        """Every op of one micro-batch on the busiest pipeline stage (``workbench.step.microbatch_ops``)."""

    own_kernels: tuple[str, ...] = ()
    """Stack kernel tables (``Stack.kernels``) this family prices itself (``stack_microbatch_ops``); a stack of one
    of ``step.FAMILY_KERNELS`` that its family does not list is priced as the fused-step bound."""

    def stack_microbatch_ops(self, model, cfg: TrainingConfig, execution: Execution | None, kernels: str) -> list[Op]:
        """``microbatch_ops`` as a stack of kernel table ``kernels`` runs them (``own_kernels``); by default the
        same ops."""
        return self.microbatch_ops(model, cfg, execution)

    def step_ops(self, model, cfg: TrainingConfig, execution: Execution) -> list[Op]:
        """Ops the reference job runs once per step (``execution`` given)."""
        return []

    def block_graph(self, model, cfg: TrainingConfig, execution: Execution | None, kind: Hashable = None) -> tuple:
        """``repeats_blocks`` families: (ends, one block's forward, head, its backward, {checkpointing mode: its
        recomputation}), every mode at once, for a block of ``kind`` (one of ``stage_blocks``'; None: the model's
        typical block) (``workbench.graph.transformer.block_graph``)."""
        raise NotImplementedError(f"{self.name} models are priced whole (repeats_blocks is False)")

    def stage_layers(self, model, cfg: TrainingConfig) -> int:
        """``repeats_blocks`` families: the blocks on the busiest pipeline stage."""
        raise NotImplementedError(f"{self.name} models are priced whole (repeats_blocks is False)")

    def stage_blocks(self, model, cfg: TrainingConfig) -> tuple[tuple[Hashable, int], ...]:
        """``repeats_blocks`` families: (kind, copies) of each kind of block on the busiest pipeline stage, a kind
        being what ``block_graph`` takes; the step model prices each kind once and weights it by its copies. It
        reads the model and the pipeline degree only (the step model caches it by those). The default: one kind
        (None), ``stage_layers`` copies."""
        return ((None, self.stage_layers(model, cfg)),)

    @abstractmethod
    def optimizer_params(self, model, cfg: TrainingConfig) -> float:
        """Parameters AdamW updates on one GPU (``workbench.step.optimizer_op``)."""

    @abstractmethod
    def tokens_per_sample(self, model, cfg: TrainingConfig) -> int:
        """Tokens one sample counts for tokens/s (1: a sample is one request)."""

    def model_flops_per_sample(self, model, seq_len: int, lora: bool) -> float | None:
        """The model FLOPs of one sample's step for MFU, or None: the priced ops' FLOPs, recomputation left out."""
        return None

    # -- memory and collectives
    @abstractmethod
    def memory_breakdown(self, model, cfg: TrainingConfig, gpu: GPU, compiled_loss: bool,
                         traits=None) -> MemoryBreakdown:
        """Peak bytes per GPU (``workbench.memory.memory_breakdown``; ``traits``: the stack's
        ``StackMemoryTraits``, None: the job's)."""

    @abstractmethod
    def data_parallel_collectives(self, model, cfg: TrainingConfig) -> list[tuple[list[ScheduledCollective], int]]:
        """(schedule, group size) of each data-parallel collective family, in step order
        (``workbench.step_comm.data_parallel_plan`` drops groups of one and times the rest)."""

    @abstractmethod
    def critical_traffic(self, model, cfg: TrainingConfig, domain: int
                         ) -> tuple[list[Traffic], RingExchange | None]:
        """The critical-path collectives (all exposed) and context parallelism's ring exchange, if any, for a
        scale-up domain of ``domain`` GPUs (``workbench.step_comm.critical_path`` times them)."""

    def stack_data_parallel_collectives(self, model, cfg: TrainingConfig, stack
                                        ) -> list[tuple[list[ScheduledCollective], int]]:
        """``data_parallel_collectives`` as ``stack`` (a ``workbench.stacks.Stack``) runs them; by default the same."""
        return self.data_parallel_collectives(model, cfg)

    def stack_critical_traffic(self, model, cfg: TrainingConfig, domain: int, stack
                               ) -> tuple[list[Traffic], RingExchange | None]:
        """``critical_traffic`` as ``stack`` runs it (DLRM: the stack's ``embedding_placement``); by default the
        same."""
        return self.critical_traffic(model, cfg, domain)

    # -- stacks and recipes
    default_stack: str = "torchtitan"
    """The stack a step of this family is priced for when none is named (``workbench.stacks.default_stack``):
    one that trains it, or ``ideal`` (the fused-step bound, labelled as one) where no shipped stack does."""

    def stack_table_gap(self, model, cfg: TrainingConfig, kernels: str) -> str | None:
        """What of ``cfg`` a stack's own kernel tables (``kernels``) do not price, None if they price all of it
        (``workbench.graph.stacked.scope_gap``); the stack then prices the fused-step bound and says so."""
        return f"{self.name} models"

    def embedding_tables(self, model) -> tuple[tuple[str, int, int], ...]:
        """(name, rows, dim) of each sparse embedding table the recipe places (row-sharded over dp); dense
        embeddings (a transformer's, sharded with the weights) are not listed."""
        return ()

    # -- what the recipe search varies (``workbench.recipe.search``)
    max_micro_batch: int = 1024
    """Largest micro-batch the search tries (the divisors of the per-rank batch up to it; memory stops the climb
    earlier): a bound on the search, not a model figure."""
    checkpoints_activations: bool = False
    """Activation checkpointing changes this family's step (``TrainingConfig.activation_checkpointing``): the
    search tries the modes it is given; False tries ``none`` only."""

    def searched_shardings(self, model, requested: tuple[str, ...]) -> tuple[str, ...]:
        """The shardings the search tries for ``model`` when asked for ``requested``: those of ``shardings`` among
        them, in the caller's order (a family whose shardings all run alike names the one it runs)."""
        return tuple(s for s in requested if s in self.shardings)

    def standard_global_batch(self, model, seq_len: int) -> float:
        """Samples per optimizer step a training run of ``model`` at ``seq_len`` tokens per sample commonly takes:
        the global batch the search holds when none is given (``default_global_batch`` rounds it to a power of two
        per GPU). Default: the family's default micro-batch."""
        return float(self.default_micro_batch(model))

    def __repr__(self) -> str:
        return f"<model family {self.name}: {self.model_type.__name__}>"


_BY_NAME: dict[str, Family] = {}
_BY_TYPE: dict[type, Family] = {}
_imported: set[str] = set()
"""This package's family modules imported so far (``_discover``)."""


def register(family: Family, *, replace: bool = False) -> Family:
    """Add ``family`` to the registry (a family module's last line); ``replace`` lets it take over its name."""
    if not isinstance(family, Family):
        raise WorkbenchError(f"register: {family!r} is not a workbench.families.Family")
    old = _BY_NAME.get(family.name)
    if old is not None and not replace:
        raise WorkbenchError(f"register: a model family named {family.name!r} is registered already ({old!r})")
    if old is not None:
        unregister(family.name)
    taken = _BY_TYPE.get(family.model_type)
    if taken is not None:
        raise WorkbenchError(f"register: {family.model_type.__name__} models belong to {taken!r} already")
    _BY_NAME[family.name] = family
    _BY_TYPE[family.model_type] = family
    return family


def unregister(name: str) -> None:
    """Remove a family (tests that register a fake one)."""
    family = _BY_NAME.pop(name)
    for cls in [cls for cls, f in _BY_TYPE.items() if f is family]:
        del _BY_TYPE[cls]


@cache
def _family_modules() -> tuple[str, ...]:
    """The family modules of this package, by name (listed once)."""
    return tuple(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


def _discover(model=None) -> None:
    """Import the family modules of this package (each registers itself), each once: all of them, or, given a
    ``model``, only until its type's family is registered, the module named for its ``kind`` first (a transformer's
    first prediction imports ``transformer``, not the recommender families' modules)."""
    modules = _family_modules()
    if len(_imported) == len(modules):
        return
    kind = getattr(model, "kind", None)
    for name in sorted(modules, key=lambda name: name != kind):
        if model is not None and _registered_family(type(model)) is not None:
            return
        if name not in _imported:
            _imported.add(name)
            importlib.import_module(f"{__name__}.{name}")


def _registered_family(model_type: type) -> Family | None:
    """The family registered for ``model_type`` or the nearest of its base classes, None for none."""
    for cls in model_type.__mro__:
        family = _BY_TYPE.get(cls)
        if family is not None:
            return family
    return None


def family_of(model) -> Family:
    """The family of ``model`` (by its type; a subclass of a registered model type belongs to that family)."""
    try:
        return _BY_TYPE[type(model)]
    except KeyError:
        pass
    _discover(model)
    family = _registered_family(type(model))
    if family is not None:
        _BY_TYPE[type(model)] = family
        return family
    raise WorkbenchError(f"no model family for {type(model).__name__} {getattr(model, 'name', model)!r}; "
                         f"registered families: {', '.join(family_names())}")


def is_registered_model(obj: object) -> bool:
    """Whether ``obj``'s type belongs to a family registered so far (no import: a family's models exist only
    after its module ran)."""
    return type(obj) in _BY_TYPE


def get_family(name: str) -> Family:
    """A family by exact name, e.g. ``get_family("dlrm")``."""
    _discover()
    if name not in _BY_NAME:
        raise UnknownNameError("model family", name, _BY_NAME)
    return _BY_NAME[name]


def family_names() -> tuple[str, ...]:
    _discover()
    return tuple(_BY_NAME)


def list_families() -> list[Family]:
    _discover()
    return list(_BY_NAME.values())


__all__ = ["PARALLELISMS", "Family", "family_names", "family_of", "get_family", "is_registered_model",
           "list_families", "register", "unregister"]
