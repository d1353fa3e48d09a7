"""The workbench's input widgets: one control per state field, and the Hugging Face config input.

Controls only hold values; ``Workbench`` validates every change through ``WorkbenchState.replace``.
"""

from __future__ import annotations

import contextlib
import html
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import ipywidgets as w
import traitlets

from workbench.config import CHECKPOINTING, MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LORA_RANK, SHARDINGS, TRAINING_PRECISIONS
from workbench.errors import SpecError, WorkbenchError
from workbench.families import family_of
from workbench.fileio import DEFAULT_MAX_BYTES, decode_text, parse_json
from workbench.hardware import list_gpus
from workbench.models import Model, from_hf_config, get_model, list_models
from workbench.stacks import get_stack, list_stacks
from widgets.data import PARAM_DTYPE_WORDS, SHARDING_WORDS, precision_label
from widgets.state import WorkbenchState
from widgets.tables import configuration_text

_WIDE = w.Layout(width="260px")
_NARROW = w.Layout(width="220px")
log = logging.getLogger(__name__)


def error_html(message: str) -> str:
    """``message`` for a status line: escaped, in red."""
    return f"<span class='wb-error' style='color:#b00'>{html.escape(message)}</span>"


@dataclass
class Outcome:
    """Whether the action under ``shown_errors`` failed (its message has been shown)."""

    failed: bool = False


@contextlib.contextmanager
def shown_errors(show: Callable[[str], None]) -> Iterator[Outcome]:
    """The outermost boundary of one user action (a click, an edit, an upload), so the UI never fails silently:
    a ``WorkbenchError`` (bad input) goes to ``show`` as its message, what to fix; any other exception as
    "internal error: ..." and to the log with its traceback. Code below the widget callbacks raises."""
    outcome = Outcome()
    try:
        yield outcome
    except WorkbenchError as exc:
        outcome.failed = True
        show(str(exc))
    except Exception as exc:
        outcome.failed = True
        log.exception("internal error in a workbench widget callback")
        text = str(exc) if len(str(exc)) <= 300 else str(exc)[:297] + "..."
        show(f"internal error: {type(exc).__name__}{': ' + text if text else ''} (the traceback is in the log)")


def stack_options() -> list[tuple[str, str]]:
    """(display name, name) for the stack dropdown (``workbench.stacks.list_stacks``)."""
    return [(s.display_name, s.name) for s in list_stacks()]


def param_dtype_options(stack: str) -> list[tuple[str, str]]:
    """(words, dtype) for the parameter-dtype dropdown: the dtypes ``stack`` trains with
    (``workbench.stacks.Stack.param_dtypes``), its default first."""
    return [(PARAM_DTYPE_WORDS.get(d, d), d) for d in get_stack(stack).param_dtypes]


def model_options(custom: dict[str, Model]) -> list[tuple[str, str]]:
    """(label, name) for the model dropdown: the catalog, then the user's models from config.json."""
    catalog = [(f"{m.name} ({getattr(m, 'display_name', m.name)})", m.name) for m in list_models()]
    return catalog + [(f"{name} (your config.json)", name) for name in custom]


SHARDING_TIPS = {"fsdp": "shard parameters, gradients and optimizer states (ZeRO-3)",
                 "zero1": "shard the optimizer states only (Megatron's distributed optimizer)",
                 "ddp": "replicate parameters, gradients and optimizer states"}


_GPU_COLUMNS = "repeat(auto-fill, minmax(320px, 1fr))"
"""The GPU picker's grid: as many aligned columns as fit, each wide enough for the longest catalog name
("NVIDIA B300 (HGX B300, Blackwell Ultra)", 39 characters) uncut."""


class GpuPicker(w.VBox):
    """One checkbox per catalog GPU, in a grid whose rows wrap; ``value`` is the ticked GPUs in the order they were
    ticked (the first is the advisor's source), as ``SelectMultiple``'s value is. Setting ``value`` ticks the boxes."""

    value = traitlets.Tuple()

    def __init__(self, value: tuple[str, ...] = (), **kwargs):
        self.boxes = {g.name: w.Checkbox(value=g.name in value, description=g.display_name, indent=False,
                                         layout=w.Layout(width="auto")) for g in list_gpus()}
        for name, box in self.boxes.items():
            box.add_class(f"wb-gpu-{name}")
            box.observe(lambda change, name=name: self._on_box(name, change["new"]), names="value")
        self.order = w.HTML()
        self._syncing = False
        super().__init__([w.HTML("<b>GPUs compared</b> (tick any number)"),
                          w.GridBox(list(self.boxes.values()), layout=w.Layout(grid_template_columns=_GPU_COLUMNS,
                                                                               width="100%")),
                          self.order], **kwargs)
        self.value = tuple(value)

    def _on_box(self, name: str, ticked: bool) -> None:
        if self._syncing:
            return
        chosen = [g for g in self.value if g != name]
        self.value = tuple([*chosen, name] if ticked else chosen)

    @traitlets.observe("value")
    def _show(self, change) -> None:
        self._syncing = True
        try:
            for name, box in self.boxes.items():
                box.value = name in change["new"]
        finally:
            self._syncing = False
        names = [self.boxes[g].description for g in change["new"] if g in self.boxes]
        self.order.value = (f"<small>compared: {html.escape(', '.join(names))}"
                            f"{' (the first is the port source)' if len(names) > 1 else ''}</small>")


class Controls:
    """One widget per ``WorkbenchState`` field (``by_field``), laid out in ``box``."""

    def __init__(self, state: WorkbenchState, custom: dict[str, Model]):
        style = {"description_width": "initial"}

        def count(value: int, description: str, minimum: int = 1, maximum: int = MAX_GPUS, tip: str = "",
                  width: str = _NARROW.width) -> w.BoundedIntText:
            return w.BoundedIntText(value=value, min=minimum, max=maximum, description=description,
                                    layout=w.Layout(width=width), style=style, tooltip=tip)

        self.by_field: dict[str, w.ValueWidget] = {
            "model": w.Dropdown(options=model_options(custom), value=state.model, description="model", layout=_WIDE,
                                style=style),
            "gpus": GpuPicker(state.gpus, layout=w.Layout(width="100%")),
            "precision": w.Dropdown(options=[(precision_label(p), p) for p in TRAINING_PRECISIONS],
                                    value=state.precision, description="precision", layout=_NARROW, style=style),
            "micro_batch": count(state.micro_batch, "micro-batch", maximum=1 << 20, tip="samples per GPU per micro-batch"),
            "seq_len": w.BoundedIntText(value=state.seq_len, min=1, max=1 << 22, step=1024, description="sequence length",
                                        layout=_NARROW, style=style),
            "gpu_count": count(state.gpu_count, "GPUs per job", tip="dp x tp x pp"),
            "tp": count(state.tp, "tensor parallel (tp)", tip="inside one scale-up domain"),
            "pp": count(state.pp, "pipeline stages (pp)"),
            "ep": count(state.ep, "expert parallel (ep)", tip="MoE models: a divisor of dp x cp",
                        width="280px"),  # room for "expert parallel (ep): MoE only" beside the value
            "cp": count(state.cp, "context parallel (cp)", tip="each sequence split over cp ranks"),
            "virtual_stages": count(state.virtual_stages, "virtual stages per pp rank", tip="interleaved 1F1B"),
            "sharding": w.ToggleButtons(options=[(SHARDING_WORDS[s], s) for s in SHARDINGS], value=state.sharding,
                                        description="data parallel", style={**style, "button_width": "76px"},
                                        tooltips=[SHARDING_TIPS[s] for s in SHARDINGS]),
            "lora_rank": count(state.lora_rank, "LoRA rank (0 = full)", minimum=0, maximum=MAX_LORA_RANK,
                               tip="adapters on the attention projections; base weights frozen"),
            "global_batch": count(state.global_batch, "global batch (0 = auto)", minimum=0, maximum=MAX_GLOBAL_BATCH,
                                  tip="samples per optimizer step"),
            "checkpointing": w.Dropdown(options=list(CHECKPOINTING), value=state.checkpointing,
                                        description="act. checkpointing", layout=_NARROW, style=style),
            "calibrated": w.Checkbox(value=state.calibrated, description="calibrated where profiled", indent=False),
            "stack": w.Dropdown(options=stack_options(), value=state.stack, description="stack", layout=_WIDE,
                                style=style),
            "compile": w.Checkbox(value=state.compile, description="torch.compile", indent=False),
            "param_dtype": w.Dropdown(options=param_dtype_options(state.stack), value=state.param_dtype,
                                      description="parameters", style=style,
                                      layout=w.Layout(width="310px")),  # "fp32 parameters (bf16 autocast)" uncut
        }
        for name, control in self.by_field.items():
            control.add_class(f"wb-{name.replace('_', '-')}")
        c = self.by_field
        self.split = w.HTML()
        self.split.add_class("wb-split")
        self.box = w.VBox([
            w.HBox([
                w.VBox([c["model"], c["precision"], c["checkpointing"], c["calibrated"]]),
                w.VBox([c["micro_batch"], c["seq_len"], c["global_batch"]]),
                w.VBox([c["gpu_count"], c["tp"], c["pp"], c["cp"]]),
                w.VBox([c["ep"], c["virtual_stages"], c["lora_rank"]]),
                w.VBox([c["stack"], c["param_dtype"], c["compile"], c["sharding"]]),
            ], layout=w.Layout(flex_flow="row wrap")),
            self.split,
            c["gpus"],
        ])
        self._show_dependent(state, custom)

    def show(self, state: WorkbenchState, custom: dict[str, Model]) -> None:
        """Put ``state``'s values into the controls (the caller mutes their observers meanwhile)."""
        options = model_options(custom)
        if list(self.by_field["model"].options) != options:
            self.by_field["model"].options = options
        dtypes = param_dtype_options(state.stack)  # the stack's own dtypes, before the value is set
        if list(self.by_field["param_dtype"].options) != dtypes:
            self.by_field["param_dtype"].options = dtypes
        for name, control in self.by_field.items():
            value = getattr(state, name)
            if control.value != value:
                control.value = value
        self._show_dependent(state, custom)

    def _show_dependent(self, state: WorkbenchState, custom: dict[str, Model]) -> None:
        """Controls that apply only sometimes say so and are disabled: compile for stacks that always or never
        compile, the parameter dtype for stacks that train with one, ep for models without experts, tp and pp for
        recommendation models; the stack's tooltip says whether it was chosen or follows the model."""
        stack, box = get_stack(state.stack), self.by_field["compile"]
        self.by_field["stack"].tooltip = (
            "your choice: kept when the model changes" if state.stack_chosen else
            "the model's default stack, following the model; choose one to keep it")
        self.by_field["param_dtype"].disabled = len(stack.param_dtypes) == 1
        box.disabled = stack.compile != "recipe"
        box.description = "torch.compile" if stack.compile == "recipe" else (
            f"torch.compile: {'always' if stack.compile == 'always' else 'never'} for this stack")
        model = custom.get(state.model) or get_model(state.model)
        family = family_of(model)
        applies = {*family.parallelisms(model), *(("lora_rank",) if family.trains_lora else ())}
        moe = "ep" in applies
        self.by_field["ep"].disabled = not moe and state.ep == 1
        self.by_field["ep"].description = "expert parallel (ep)" if moe else "expert parallel (ep): MoE only"
        for name in ("tp", "pp", "cp", "virtual_stages", "lora_rank"):
            self.by_field[name].disabled = name not in applies and getattr(state, name) in (0, 1)
        self.split.value = f"<small>{html.escape(configuration_text(state, model))}</small>"


def parse_config_text(text: str, origin: str = "pasted config.json") -> dict:
    """A pasted or uploaded Hugging Face config.json as a dict; a JSON error names its line and column."""
    data = parse_json(text, origin)  # the bounded loader's parser: errors name the line and column
    if not isinstance(data, dict):
        raise SpecError(origin, "<top>", type(data).__name__, "a JSON object like a Hugging Face config.json")
    return data


def upload_text(content: bytes, origin: str = "uploaded file") -> str:
    """An uploaded file's text, as the bounded loader reads files: a size limit, UTF-8 with or without a BOM."""
    if len(content) > DEFAULT_MAX_BYTES:
        raise SpecError(origin, "<file>", f"{len(content)} bytes", f"a file of at most {DEFAULT_MAX_BYTES} bytes")
    return decode_text(content, origin)


PASTED = "pasted config.json"


class ModelInput:
    """Paste or upload a Hugging Face ``config.json``, name it, and add it as a model with the button
    (``workbench.models.from_hf_config``). An upload only fills the text box (a file that cannot be read says so at
    once); the model is added when "Add model" is pressed, so the name box can be filled first."""

    def __init__(self, on_model: Callable[[Model], None]):
        self.on_model = on_model
        self.text = w.Textarea(placeholder='{"hidden_size": 4096, "num_hidden_layers": 32, ...}',
                               layout=w.Layout(width="420px", height="90px"))
        self.upload = w.FileUpload(accept=".json", multiple=False, description="upload config.json")
        self.name = w.Text(placeholder="name (optional)", layout=w.Layout(width="180px"))
        self.button = w.Button(description="Add model", icon="plus")
        self.status = w.HTML()
        self.origin = PASTED
        """Where the text box's text came from (the uploaded file's name until the text is edited)."""
        self._filling = False
        self.button.on_click(lambda _: self.add_text())
        self.upload.observe(lambda change: self.add_upload(change["new"]), names="value")
        self.text.observe(self._on_edit, names="value")
        self.box = w.Accordion([w.VBox([self.text, w.HBox([self.upload, self.name, self.button]), self.status])],
                               titles=("Your model from a Hugging Face config.json",))
        self.box.selected_index = None

    def _on_edit(self, change) -> None:
        if not self._filling:
            self.origin = PASTED  # edited by hand: no longer the uploaded file as it was

    def add_text(self) -> None:
        """What "Add model" does: build the model from the text box (pasted, or filled by an upload)."""
        origin = self.origin
        self._add(lambda: self._build(self.text.value, origin), origin)

    def add_upload(self, files) -> None:
        """Read an uploaded config.json into the text box (checked: size, UTF-8, JSON object); "Add model" adds it."""
        if not files:
            return  # the upload was cleared: nothing to add
        upload = files[0]
        origin = str(upload.get("name") or "uploaded file") if isinstance(upload, Mapping) else "uploaded file"
        with shown_errors(self._shower(origin)) as outcome:
            text = upload_text(bytes(upload["content"]), origin)
            if not text.strip():
                raise SpecError(origin, "<file>", text, "the text of a Hugging Face config.json (it is empty)")
            parse_config_text(text, origin)
        if outcome.failed:
            return
        self._filling = True
        try:
            self.text.value = text
        finally:
            self._filling = False
        self.origin = origin
        self.status.value = (f"read <b>{html.escape(origin)}</b>: give the model a name (optional), then press "
                             "<b>Add model</b>")

    def _shower(self, origin: str) -> Callable[[str], None]:
        def show(message: str) -> None:
            body = message
            for prefix in (f"{origin}: ", "<dict>: "):  # the loader's errors name the dict, or already the origin
                while body.startswith(prefix):
                    body = body.removeprefix(prefix)
            self.status.value = error_html(f"{origin}: {body}")

        return show

    def _build(self, text: str, origin: str) -> Model:
        if not text.strip():
            raise SpecError(origin, "<text>", text, "the text of a Hugging Face config.json (it is empty)")
        return from_hf_config(parse_config_text(text, origin), self.name.value.strip() or None)

    def _add(self, build: Callable[[], Model], origin: str) -> None:
        """Build the model and hand it on; the outcome, added or why not, always ends in ``status``."""
        with shown_errors(self._shower(origin)) as outcome:
            model = build()
            self.on_model(model)
        if not outcome.failed:
            self.status.value = f"added <b>{html.escape(model.name)}</b> ({model.num_params / 1e9:.3g} B parameters)"
