"""What the workbench shows, as one validated value: model, GPUs, precision, sizes, checkpointing, stack, active tab.

The widget keeps a ``WorkbenchState`` and redraws from it; ``Workbench.set(...)`` and the controls both go
through ``WorkbenchState.replace`` so bad input fails the same way from Python and from the UI:

    >>> state = WorkbenchState().replace(model="llama3-70b", gpus=["b200", "mi350x"], precision="fp8")
    >>> state.as_dict()["gpus"]
    ['b200', 'mi350x']
    >>> state.replace(stack="torchtitan", compile=True).stack
    'torchtitan'
    >>> WorkbenchState().replace(model="dlrm-dcnv2").stack          # no stack chosen: the model's default follows
    'ideal'
    >>> WorkbenchState().replace(stack="torchtitan").replace(model="dlrm-dcnv2").stack   # a choice stays
    'torchtitan'
    >>> state.replace(stack="pytorch-eager", param_dtype="bf16").param_dtype   # one of the stack's param_dtypes
    'bf16'
    >>> WorkbenchState().replace(gpu_count=16, tp=2, pp=2, sharding="ddp").dp   # GPUs = dp x tp x pp
    4
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.config import (
    CHECKPOINTING, SHARDINGS, TRAINING_PRECISIONS, Parallelism, TrainingConfig, default_micro_batch, default_seq_len,
)
from workbench.errors import SpecError, UnknownNameError, WorkbenchError
from workbench.families import family_of
from workbench.hardware import get_gpu
from workbench.models import Model, get_model
from workbench.stacks import Stack, default_stack, get_stack

TABS: tuple[str, ...] = ("roofline", "step time", "memory", "kernels", "recipe", "trust")
"""The workbench's tabs, in display order (``trust``: how far to trust this, the validation record)."""
TAB_TITLES: dict[str, str] = {"roofline": "Roofline", "step time": "Step time", "memory": "Memory",
                              "kernels": "Kernels", "recipe": "Recipe", "trust": "How far to trust this"}
PARALLEL_FIELDS: tuple[str, ...] = ("tp", "pp", "ep", "cp", "virtual_stages")

ORIGIN = "workbench state"


@dataclass(frozen=True)
class WorkbenchState:
    """Everything the charts depend on. Names are catalog names (``get_model`` / ``get_gpu``) or, for the
    model, the name of a model the user added from a Hugging Face config (``Workbench.add_model``)."""

    model: str = "llama3-8b"
    gpus: tuple[str, ...] = ("h200-sxm", "b200", "mi350x")
    """GPU types compared side by side (catalog names), at least one."""
    precision: str = "bf16"
    """GEMM compute precision (``workbench.config.TRAINING_PRECISIONS``)."""
    micro_batch: int | None = None
    """Samples per GPU per micro-batch. None: the model's default (``workbench.config.default_micro_batch``, as the
    CLI and ``predict`` take it); left at its model's default, it follows the model when the model changes."""
    seq_len: int | None = None
    """Tokens per sample. None: the model's default (``workbench.config.default_seq_len``); follows the model as
    ``micro_batch`` does."""
    gpu_count: int = 8
    """GPUs of each type in the job: dp x tp x pp x cp (the data-parallel degree is what tp x pp x cp leaves)."""
    tp: int = 1
    """Tensor-parallel degree (inside one scale-up domain: a GPU whose domain is smaller gets no prediction)."""
    pp: int = 1
    """Pipeline stages."""
    ep: int = 1
    """Expert-parallel degree (MoE models only), a divisor of dp x cp: experts shard inside the ranks that hold the
    same weights (``workbench.config.Parallelism``), so it adds no GPUs."""
    cp: int = 1
    """Context-parallel degree: each sample's sequence split over cp ranks (ring attention)."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank (interleaved 1F1B); 1 is plain 1F1B."""
    sharding: str = "fsdp"
    """How the data-parallel group holds parameters, gradients and optimizer states: fsdp shards all three, zero1
    the optimizer states only, ddp replicates (``workbench.config.SHARDINGS``)."""
    lora_rank: int = 0
    """LoRA adapters' rank (frozen base weights); 0 is full training."""
    global_batch: int = 0
    """Samples per optimizer step; 0 is auto (``resolved_global_batch``: the search's standard,
    ``workbench.recipe.search.default_global_batch``, as a multiple of micro-batch x dp). Gradient accumulation
    makes up global batch / (micro-batch x dp)."""
    checkpointing: str = "none"
    """Activation checkpointing for the step-time and roofline predictions (the Memory tab shows all three)."""
    calibrated: bool = False
    """Predict with a GPU's calibration profile where it has one (specs/calibration/<gpu>.yaml)."""
    stack: str | None = None
    """The training stack every tab's prediction is for (``workbench.stacks``, by exact name). None: the model's
    default (``workbench.stacks.default_stack``: ``torchtitan`` for a transformer, what its kernel tables do not
    price being the fused-step bound, which the tabs say; the ``ideal`` bound for DLRM and HSTU, which no shipped
    stack trains), filled in and following the model until a stack is chosen (``stack_chosen``); ``ideal`` is the
    bound, not a stack that runs."""
    stack_chosen: bool = False
    """Whether the user chose ``stack`` (``set(stack=...)`` or the stack control): a choice stays when the model
    changes; False: the stack is the model's default and follows it. ``set(stack=None)`` goes back to following."""
    compile: bool = False
    """``torch.compile`` on, for stacks that follow the configuration (``Stack.compile == "recipe"``: torchtitan,
    the reference job); other stacks always or never compile, whatever this says."""
    param_dtype: str | None = None
    """The parameters' dtype: ``fp32`` (kept in fp32 under bf16 autocast) or ``bf16``, one of the stack's
    ``param_dtypes`` (``workbench.stacks.Stack``). None: the stack's default (its first); left at a stack's default,
    it follows the stack when the stack changes, and a dtype the new stack does not train with goes back to its
    default."""
    tab: str = "roofline"

    def __post_init__(self) -> None:
        if self.micro_batch is None or self.seq_len is None or self.stack is None:
            try:
                model = get_model(self.model)
            except UnknownNameError:
                model = None  # a user's model: ``validate`` fills the defaults, knowing the user's models
            if model is not None:
                _fill_defaults(self, model)
        if self.param_dtype is None:
            _fill_param_dtype(self)

    @property
    def dp(self) -> int:
        """The data-parallel degree: GPUs / (tp x pp x cp)."""
        return self.gpu_count // (self.tp * self.pp * self.cp)

    def parallelism(self) -> Parallelism:
        return Parallelism(dp=self.dp, tp=self.tp, pp=self.pp, ep=self.ep, sharding=self.sharding,  # type: ignore[arg-type]
                           cp=self.cp, virtual_stages=self.virtual_stages)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (the GPU tuple as a list), the form ``Workbench.state`` returns."""
        out = dataclasses.asdict(self)
        out["gpus"] = list(self.gpus)
        return out

    def replace(self, custom_models: Mapping[str, Model] | None = None, **changes: Any) -> WorkbenchState:
        """A new state with ``changes`` applied and checked; raises ``SpecError``/``UnknownNameError``."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise SpecError(ORIGIN, unknown[0], changes[unknown[0]], f"a state field ({known})")
        if "gpus" in changes and isinstance(changes["gpus"], str):
            changes["gpus"] = [changes["gpus"]]
        _follow_or_keep_stack(self, changes, custom_models or {})
        if "model" in changes:  # sizes left at the old model's defaults follow the new model's
            old, new = _model(self.model, custom_models or {}), _model(changes["model"], custom_models or {})
            for name, default in (("micro_batch", default_micro_batch), ("seq_len", default_seq_len)):
                if name not in changes and old is not None and new is not None and getattr(self, name) == default(old):
                    changes[name] = default(new)
            if new is not None and not _splits(dataclasses.replace(self, **changes), new):
                # a split the new model cannot take (heads tp does not divide, experts it lacks): back to 1
                changes.update({name: 1 for name in PARALLEL_FIELDS if name not in changes})
        if "stack" in changes and "param_dtype" not in changes:  # a dtype left at the old stack's default follows
            if changes["stack"] is None:
                model = _model(changes.get("model", self.model), custom_models or {})
                changes["stack"] = default_stack(model) if model is not None else None
            old, new = _stack(self.stack), _stack(changes["stack"])
            if new is not None and (self.param_dtype not in new.param_dtypes
                                    or (old is not None and self.param_dtype == old.param_dtypes[0])):
                changes["param_dtype"] = new.param_dtypes[0]
        return validate(dataclasses.replace(self, **changes), custom_models or {})


def _follow_or_keep_stack(state: WorkbenchState, changes: dict[str, Any], custom_models: Mapping[str, Model]) -> None:
    """A stack given is the user's choice (``stack_chosen``), None the model's default again; with none chosen, the
    stack follows the model (``default_stack``), whether the model or ``stack_chosen=False`` changed."""
    if "stack" in changes:
        changes.setdefault("stack_chosen", changes["stack"] is not None)
        return
    chosen = changes.get("stack_chosen", state.stack_chosen)
    if not chosen and ("model" in changes or "stack_chosen" in changes):
        changes["stack"] = None  # filled with the (new) model's default by ``validate``


def _model(name: object, custom_models: Mapping[str, Model]) -> Model | None:
    if isinstance(name, str) and name in custom_models:
        return custom_models[name]
    try:
        return get_model(name)  # type: ignore[arg-type]
    except (UnknownNameError, TypeError):
        return None


def _stack(name: object) -> Stack | None:
    try:
        return get_stack(name)  # type: ignore[arg-type]
    except (WorkbenchError, TypeError, AttributeError):
        return None


def _fill_param_dtype(state: WorkbenchState) -> None:
    stack = _stack(state.stack)
    if stack is not None:  # an unknown stack: ``validate`` names it
        object.__setattr__(state, "param_dtype", stack.param_dtypes[0])


def _splits(state: WorkbenchState, model: Model) -> bool:
    """Whether ``model`` takes ``state``'s tp, pp and ep (the core's checks)."""
    try:
        _check_split(state, model)
    except (SpecError, TypeError, ZeroDivisionError):
        return False
    return True


def resolved_global_batch(state: WorkbenchState, model: Model) -> int:
    """Samples per optimizer step: ``state.global_batch``, or for 0 (auto) the search's standard
    (``default_global_batch``: 4M tokens for a transformer, the catalog's batch for a recommendation model) as the
    nearest multiple of micro-batch x dp, at least one (no accumulation)."""
    if state.global_batch:
        return state.global_batch
    from workbench.recipe.search import default_global_batch

    unit = state.micro_batch * state.dp
    standard = default_global_batch(model, state.gpu_count, state.seq_len or 0)
    return max(unit, round(standard / unit) * unit)


def training_config(state: WorkbenchState, model: Model) -> TrainingConfig:
    """The ``workbench.config.TrainingConfig`` the state asks about (global batch resolved), unchecked."""
    return TrainingConfig(state.micro_batch, state.seq_len or 0, state.precision, state.parallelism(),
                          state.checkpointing, resolved_global_batch(state, model),  # type: ignore[arg-type]
                          lora_rank=state.lora_rank)


def _check_split(state: WorkbenchState, model: Model) -> None:
    """GPUs = dp x tp x pp x cp, ep only for MoE models, and the core's own checks of the split (tp dividing the
    heads, pp at most the layers, dp dividing the global batch); raises ``SpecError`` naming the field."""
    split = state.tp * state.pp * state.cp
    if state.gpu_count % split:
        field = next((f for f in ("tp", "pp", "cp") if getattr(state, f) > 1), "tp")
        raise SpecError(ORIGIN, field, getattr(state, field),
                        f"GPUs = dp x tp x pp x cp: tp x pp x cp = {state.tp} x {state.pp} x {state.cp} = {split} "
                        f"must divide the {state.gpu_count} GPUs per job")
    if state.ep > 1 and "ep" not in family_of(model).parallelisms(model):
        raise SpecError(ORIGIN, "ep", state.ep, f"1: {getattr(model, 'name', model)} has no experts (expert "
                        "parallelism is for MoE models)")
    if (state.dp * state.cp) % state.ep:
        raise SpecError(ORIGIN, "ep", state.ep, f"a divisor of dp x cp = {state.dp * state.cp} (dp = "
                        f"{state.gpu_count} GPUs / (tp x pp x cp = {split})): experts shard inside the ranks that "
                        "hold the same weights")
    if state.global_batch and state.global_batch % (state.micro_batch * state.dp):
        raise SpecError(ORIGIN, "global_batch", state.global_batch,
                        f"a multiple of micro-batch x dp = {state.micro_batch} x {state.dp} = "
                        f"{state.micro_batch * state.dp} (or 0 for auto)")
    try:
        training_config(state, model).resolved(model)
    except SpecError as exc:  # the core's check: name the widget's field, keep the core's reason
        field = exc.field.removeprefix("parallelism.")
        raise SpecError(ORIGIN, field if field in {f.name for f in dataclasses.fields(WorkbenchState)} else exc.field,
                        exc.value, exc.expected) from None


def _fill_defaults(state: WorkbenchState, model: Model) -> None:
    if state.stack is None:
        object.__setattr__(state, "stack", default_stack(model))
    if state.micro_batch is None:
        object.__setattr__(state, "micro_batch", default_micro_batch(model))
    if state.seq_len is None:
        object.__setattr__(state, "seq_len", default_seq_len(model))


def validate(state: WorkbenchState, custom_models: Mapping[str, Model]) -> WorkbenchState:
    """``state`` with names in canonical spelling, or the first error found."""
    if state.model not in custom_models:
        try:
            model = get_model(state.model).name
        except UnknownNameError as exc:
            raise UnknownNameError("model", state.model, [*exc.valid, *custom_models]) from None
    else:
        model = state.model
    state = dataclasses.replace(state)  # a copy: the defaults are filled in it, not in the caller's state
    _fill_defaults(state, custom_models.get(model) or get_model(model))
    gpus = state.gpus
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, (list, tuple)) or not gpus:
        raise SpecError(ORIGIN, "gpus", gpus, "a non-empty list of GPU names, e.g. ['b200', 'mi350x']")
    canonical = tuple(dict.fromkeys(get_gpu(name).name for name in gpus))  # aliases resolved, order kept
    if state.precision not in TRAINING_PRECISIONS:
        raise SpecError(ORIGIN, "precision", state.precision, f"one of {', '.join(TRAINING_PRECISIONS)}")
    for name in ("micro_batch", "seq_len", "gpu_count", *PARALLEL_FIELDS):
        value = getattr(state, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(ORIGIN, name, value, "a positive integer")
    for name, zero in (("global_batch", "0 for auto"), ("lora_rank", "0 for full training")):
        value = getattr(state, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(ORIGIN, name, value, f"a positive integer, or {zero}")
    if state.sharding not in SHARDINGS:
        raise SpecError(ORIGIN, "sharding", state.sharding, f"one of {', '.join(SHARDINGS)}")
    if state.checkpointing not in CHECKPOINTING:
        raise SpecError(ORIGIN, "checkpointing", state.checkpointing, f"one of {', '.join(CHECKPOINTING)}")
    for name in ("calibrated", "compile", "stack_chosen"):
        if not isinstance(getattr(state, name), bool):
            raise SpecError(ORIGIN, name, getattr(state, name), "true or false")
    if not isinstance(state.stack, str) or state.stack.endswith((".yaml", ".yml")):
        raise SpecError(ORIGIN, "stack", state.stack, "a stack name from workbench.stacks.list_stacks()")
    stack = get_stack(state.stack)  # an unknown name lists the stacks and the closest matches
    if state.param_dtype is None:
        _fill_param_dtype(state)
    if state.param_dtype not in stack.param_dtypes:
        raise SpecError(ORIGIN, "param_dtype", state.param_dtype,
                        f"one of {', '.join(stack.param_dtypes)} (what {stack.display_name} trains with)")
    if state.tab not in TABS:
        raise SpecError(ORIGIN, "tab", state.tab, f"one of {', '.join(TABS)}")
    _check_split(state, custom_models.get(model) or get_model(model))
    return dataclasses.replace(state, model=model, gpus=canonical)
