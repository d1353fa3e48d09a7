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

from workbench.config import CHECKPOINTING, TRAINING_PRECISIONS
from workbench.errors import SpecError, WorkbenchError
from workbench.fileio import DEFAULT_MAX_BYTES, decode_text, parse_json
from workbench.hardware import list_gpus
from workbench.models import Model, from_hf_config, list_models
from workbench.stacks import get_stack, list_stacks
from widgets.data import precision_label
from widgets.state import WorkbenchState

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


def model_options(custom: dict[str, Model]) -> list[tuple[str, str]]:
    """(label, name) for the model dropdown: the catalog, then the user's models from config.json."""
    catalog = [(f"{m.name} ({getattr(m, 'display_name', m.name)})", m.name) for m in list_models()]
    return catalog + [(f"{name} (your config.json)", name) for name in custom]


class Controls:
    """One widget per ``WorkbenchState`` field (``by_field``), laid out in ``box``."""

    def __init__(self, state: WorkbenchState, custom: dict[str, Model]):
        style = {"description_width": "initial"}
        self.by_field: dict[str, w.ValueWidget] = {
            "model": w.Dropdown(options=model_options(custom), value=state.model, description="model", layout=_WIDE,
                                style=style),
            "gpus": w.SelectMultiple(options=[(g.display_name, g.name) for g in list_gpus()], value=state.gpus,
                                     rows=6, description="GPUs", layout=w.Layout(width="300px"), style=style),
            "precision": w.Dropdown(options=[(precision_label(p), p) for p in TRAINING_PRECISIONS],
                                    value=state.precision, description="precision", layout=_NARROW, style=style),
            "micro_batch": w.BoundedIntText(value=state.micro_batch, min=1, max=1 << 20, description="micro-batch",
                                            layout=_NARROW, style=style),
            "seq_len": w.BoundedIntText(value=state.seq_len, min=1, max=1 << 22, step=1024, description="sequence length",
                                        layout=_NARROW, style=style),
            "gpu_count": w.BoundedIntText(value=state.gpu_count, min=1, max=1 << 17, description="GPUs per job",
                                          layout=_NARROW, style=style),
            "checkpointing": w.Dropdown(options=list(CHECKPOINTING), value=state.checkpointing,
                                        description="act. checkpointing", layout=_NARROW, style=style),
            "calibrated": w.Checkbox(value=state.calibrated, description="calibrated where profiled", indent=False),
            "stack": w.Dropdown(options=stack_options(), value=state.stack, description="stack", layout=_WIDE,
                                style=style),
            "compile": w.Checkbox(value=state.compile, description="torch.compile", indent=False),
        }
        self.by_field["stack"].add_class("wb-stack")
        self.by_field["checkpointing"].add_class("wb-checkpointing")
        self.by_field["compile"].add_class("wb-compile")
        self.by_field["gpus"].add_class("wb-gpus")
        self.by_field["precision"].add_class("wb-precision")
        self.by_field["model"].add_class("wb-model")
        c = self.by_field
        self.box = w.HBox([
            w.VBox([c["model"], c["precision"], c["checkpointing"], c["calibrated"]]),
            c["gpus"],
            w.VBox([c["micro_batch"], c["seq_len"], c["gpu_count"]]),
            w.VBox([c["stack"], c["compile"]]),
        ])
        self._show_compile(state)

    def show(self, state: WorkbenchState, custom: dict[str, Model]) -> None:
        """Put ``state``'s values into the controls (the caller mutes their observers meanwhile)."""
        options = model_options(custom)
        if list(self.by_field["model"].options) != options:
            self.by_field["model"].options = options
        for name, control in self.by_field.items():
            value = getattr(state, name)
            if control.value != value:
                control.value = value
        self._show_compile(state)

    def _show_compile(self, state: WorkbenchState) -> None:
        """The compile box applies to stacks that follow the configuration; for the others it shows what the stack
        does and is disabled."""
        stack, box = get_stack(state.stack), self.by_field["compile"]
        box.disabled = stack.compile != "recipe"
        box.description = "torch.compile" if stack.compile == "recipe" else (
            f"torch.compile: {'always' if stack.compile == 'always' else 'never'} for this stack")


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


class ModelInput:
    """Paste or upload a Hugging Face ``config.json`` and add it as a model (``workbench.models.from_hf_config``)."""

    def __init__(self, on_model: Callable[[Model], None]):
        self.on_model = on_model
        self.text = w.Textarea(placeholder='{"hidden_size": 4096, "num_hidden_layers": 32, ...}',
                               layout=w.Layout(width="420px", height="90px"))
        self.upload = w.FileUpload(accept=".json", multiple=False, description="upload config.json")
        self.name = w.Text(placeholder="name (optional)", layout=w.Layout(width="180px"))
        self.button = w.Button(description="Add model", icon="plus")
        self.status = w.HTML()
        self.button.on_click(lambda _: self.add_text())
        self.upload.observe(lambda change: self.add_upload(change["new"]), names="value")
        self.box = w.Accordion([w.VBox([self.text, w.HBox([self.upload, self.name, self.button]), self.status])],
                               titles=("Your model from a Hugging Face config.json",))
        self.box.selected_index = None

    def add_text(self) -> None:
        self._add(lambda: self._build(self.text.value, "pasted config.json"), "pasted config.json")

    def add_upload(self, files) -> None:
        if not files:
            return  # the upload was cleared: nothing to add
        upload = files[0]
        origin = str(upload.get("name") or "uploaded file") if isinstance(upload, Mapping) else "uploaded file"
        self._add(lambda: self._build(upload_text(bytes(upload["content"]), origin), origin), origin)

    def _build(self, text: str, origin: str) -> Model:
        if not text.strip():
            raise SpecError(origin, "<text>", text, "the text of a Hugging Face config.json (it is empty)")
        return from_hf_config(parse_config_text(text, origin), self.name.value.strip() or None)

    def _add(self, build: Callable[[], Model], origin: str) -> None:
        """Build the model and hand it on; the outcome, added or why not, always ends in ``status``."""
        def show(message: str) -> None:
            if not message.startswith(origin):  # the loader's errors name the dict, not where it came from
                message = f"{origin}: {message.removeprefix('<dict>: ')}"
            self.status.value = error_html(message)

        with shown_errors(show) as outcome:
            model = build()
            self.on_model(model)
        if not outcome.failed:
            self.status.value = f"added <b>{html.escape(model.name)}</b> ({model.num_params / 1e9:.3g} B parameters)"
