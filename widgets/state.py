"""What the workbench shows, as one validated value: model, GPUs, precision, sizes, checkpointing, stack, active tab.

The widget keeps a ``WorkbenchState`` and redraws from it; ``Workbench.set(...)`` and the controls both go
through ``WorkbenchState.replace`` so bad input fails the same way from Python and from the UI:

    >>> state = WorkbenchState().replace(model="llama3-70b", gpus=["b200", "mi350x"], precision="fp8")
    >>> state.as_dict()["gpus"]
    ['b200', 'mi350x']
    >>> state.replace(stack="torchtitan", compile=True).stack
    'torchtitan'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.config import CHECKPOINTING, TRAINING_PRECISIONS, default_micro_batch, default_seq_len
from workbench.errors import SpecError, UnknownNameError
from workbench.hardware import get_gpu
from workbench.models import Model, get_model
from workbench.stacks import DEFAULT_STACK, get_stack

TABS: tuple[str, ...] = ("roofline", "step time", "memory", "kernels", "recipe")
"""The workbench's tabs, in display order."""

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
    """GPUs of each type in the job, all FSDP data-parallel ranks."""
    checkpointing: str = "none"
    """Activation checkpointing for the step-time and roofline predictions (the Memory tab shows all three)."""
    calibrated: bool = False
    """Predict with a GPU's calibration profile where it has one (specs/calibration/<gpu>.yaml)."""
    stack: str = DEFAULT_STACK
    """The training stack every tab's prediction is for (``workbench.stacks``, by exact name); the default
    ``ideal`` is the fused-step bound, not a stack that runs."""
    compile: bool = False
    """``torch.compile`` on, for stacks that follow the configuration (``Stack.compile == "recipe"``: torchtitan,
    the reference job); other stacks always or never compile, whatever this says."""
    tab: str = "roofline"

    def __post_init__(self) -> None:
        if self.micro_batch is None or self.seq_len is None:
            try:
                model = get_model(self.model)
            except UnknownNameError:
                return  # a user's model: ``validate`` fills the defaults, knowing the user's models
            _fill_defaults(self, model)

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
        if "model" in changes:  # sizes left at the old model's defaults follow the new model's
            old, new = _model(self.model, custom_models or {}), _model(changes["model"], custom_models or {})
            for name, default in (("micro_batch", default_micro_batch), ("seq_len", default_seq_len)):
                if name not in changes and old is not None and new is not None and getattr(self, name) == default(old):
                    changes[name] = default(new)
        return validate(dataclasses.replace(self, **changes), custom_models or {})


def _model(name: object, custom_models: Mapping[str, Model]) -> Model | None:
    if isinstance(name, str) and name in custom_models:
        return custom_models[name]
    try:
        return get_model(name)  # type: ignore[arg-type]
    except (UnknownNameError, TypeError):
        return None


def _fill_defaults(state: WorkbenchState, model: Model) -> None:
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
    for name in ("micro_batch", "seq_len", "gpu_count"):
        value = getattr(state, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(ORIGIN, name, value, "a positive integer")
    if state.checkpointing not in CHECKPOINTING:
        raise SpecError(ORIGIN, "checkpointing", state.checkpointing, f"one of {', '.join(CHECKPOINTING)}")
    for name in ("calibrated", "compile"):
        if not isinstance(getattr(state, name), bool):
            raise SpecError(ORIGIN, name, getattr(state, name), "true or false")
    if not isinstance(state.stack, str) or state.stack.endswith((".yaml", ".yml")):
        raise SpecError(ORIGIN, "stack", state.stack, "a stack name from workbench.stacks.list_stacks()")
    get_stack(state.stack)  # an unknown name lists the stacks and the closest matches
    if state.tab not in TABS:
        raise SpecError(ORIGIN, "tab", state.tab, f"one of {', '.join(TABS)}")
    return dataclasses.replace(state, model=model, gpus=canonical)
