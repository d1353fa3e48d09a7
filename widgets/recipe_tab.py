"""The Recipe tab: preview a recipe for one of the chosen GPUs (the simplest configuration within 5% of the
fastest at a fixed global batch, found by ``workbench.recipe.search``, or exactly the current settings), export it to a file (atomically, never
overwriting unless asked) and offer it for download as a data-URI link (works offline).

Recipes are searched, built and written by ``workbench.recipe`` (``search``, ``make_recipe``, ``dumps``,
``save_recipe``); this tab only collects the choices and shows the text.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import re
from pathlib import Path

import ipywidgets as w

from workbench.errors import WorkbenchError
from workbench.models import get_model
from workbench.predict import Prediction
from workbench.recipe.io import FORMATS as CORE_FORMATS
from workbench.recipe.schema import PrecisionPolicy
from widgets.state import WorkbenchState, resolved_global_batch, training_config

SUFFIXES: dict[str, str] = {"yaml": ".yaml", "json": ".json", "torchtitan-py": ".py", "torchtitan-args": ".sh",
                            "torchtitan-toml": ".toml"}
FORMATS: dict[str, str] = {fmt: SUFFIXES.get(fmt, ".txt") for fmt in CORE_FORMATS}
"""Export formats offered, with their file suffixes: every format of ``workbench.recipe.FORMATS`` (what
``workbench recipe --format`` takes), in its order."""
_LONG_FLOAT = re.compile(r"(?<![\w.])(-?\d+\.\d{4,})(?![\w.])")
"""A number with more than three decimals in the preview (the file keeps them all)."""


def preview_text(text: str) -> str:
    """The recipe text as the preview shows it: every long float to 4 significant digits, or whole from 1,000 up
    (the exported file and the download keep full precision)."""
    def short(value: float) -> str:
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    return _LONG_FLOAT.sub(lambda m: short(float(m.group(1))), text)
KINDS: dict[str, str] = {"fastest that fits": "searched", "current settings": "current"}
"""Which recipe the tab shows: the search's best for the model, GPU, GPU count, precision, sequence length and
global batch, or the workbench's settings as they are (tp, pp, ep, sharding, micro-batch)."""


def searched_recipe(state: WorkbenchState, gpu: str, precision: str):
    """The simplest configuration within 5% of the fastest (``workbench.recipe.search``: micro-batch, checkpointing, FSDP/DDP,
    TP, PP, EP) for ``state``'s model, GPU count, sequence length, stack and parameter dtype on ``gpu``, as a
    recipe predicted for that stack with the compile flag the search chose."""
    from workbench.predict import predict
    from workbench.recipe.build import make_recipe
    from workbench.recipe.search import search

    dtype = state.param_dtype
    best = search(state.model, gpu, state.gpu_count, precision=precision, seq_len=state.seq_len,
                  global_batch=resolved_global_batch(state, get_model(state.model)), stack=state.stack,
                  param_dtype=dtype).best
    policy = dataclasses.replace(PrecisionPolicy.for_precision(best.config.precision), param_dtype=dtype)
    return make_recipe(state.model, gpu, best.config, precision=policy, compile=best.compile,
                       prediction=predict(state.model, gpu, best.config, stack=state.stack, compile=best.compile,
                                          param_dtype=dtype))


def build_recipe(state: WorkbenchState, gpu: str, prediction: Prediction | None = None):
    """The recipe for ``state``'s settings on ``gpu`` (its tp, pp, ep, sharding and global batch), with its
    prediction."""
    try:
        from workbench.recipe import make_recipe
    except ImportError:  # not re-exported yet by the package
        from workbench.recipe.build import make_recipe

    # a precision the GPU lacks was predicted as its fallback: the recipe records what was modelled
    precision = prediction.precision.effective.name if prediction is not None else state.precision
    config = dataclasses.replace(training_config(state, get_model(state.model)), precision=precision)
    policy = dataclasses.replace(PrecisionPolicy.for_precision(precision), param_dtype=state.param_dtype)
    return make_recipe(state.model, gpu, config, prediction=prediction, precision=policy)


def default_path(state: WorkbenchState, gpu: str, fmt: str, kind: str = "searched") -> str:
    suffix = "" if kind == "searched" else "-current"
    return str(Path("recipes") / f"{state.model}-{gpu}-{state.gpu_count}x{suffix}{FORMATS[fmt]}")


def download_link(path: Path, text: str) -> str:
    """An HTML link that downloads ``text`` as ``path.name`` from a data URI (no server round trip)."""
    payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return (f"<a class='wb-download' download='{html.escape(path.name)}' "
            f"href='data:text/plain;charset=utf-8;base64,{payload}'>download {html.escape(path.name)}</a>")


class RecipePanel:
    """``box`` is the tab's content; ``refresh(state, predictions)`` rebuilds the preview."""

    def __init__(self):
        self.gpu = w.Dropdown(description="target GPU", layout=w.Layout(width="380px"))  # display names uncut
        self.gpu.add_class("wb-recipe-gpu")
        self.format = w.Dropdown(options=list(FORMATS), value="yaml", description="format")
        self.kind = w.ToggleButtons(options=list(KINDS.items()), value="searched")
        self.path = w.Text(description="file", layout=w.Layout(width="420px"))
        self.overwrite = w.Checkbox(value=False, description="overwrite an existing file", indent=False)
        self.export_button = w.Button(description="Export recipe", icon="download", button_style="primary")
        self.export_button.add_class("wb-export")
        self.preview = w.HTML()
        self.message = w.HTML()
        self.message.add_class("wb-export-message")
        self.note = w.HTML()
        self.box = w.VBox([self.note, self.kind, w.HBox([self.gpu, self.format]), self.preview,
                           w.HBox([self.path, self.overwrite, self.export_button]), self.message])
        self.export_button.on_click(lambda _: self.export())
        self.gpu.observe(lambda _: self._render(), names="value")
        self.format.observe(lambda _: self._render(), names="value")
        self.kind.observe(lambda _: self._render(), names="value")
        self.state: WorkbenchState | None = None
        self.catalog_model = True
        self.predictions: dict[str, Prediction] = {}
        self.recipe = None
        self.text = ""
        self._path_edited = False
        self.path.observe(self._on_path, names="value")
        self._setting_path = False

    def _on_path(self, change) -> None:
        if not self._setting_path:
            self._path_edited = True

    def draw(self, context) -> None:
        """``refresh`` from a ``widgets.panels.PanelContext`` (``widgets.panels.Panel``)."""
        self.refresh(context.state, context.comparison.predictions, catalog_model=context.catalog_model)

    def refresh(self, state: WorkbenchState, predictions: dict[str, Prediction], *, catalog_model: bool = True) -> None:
        """Show the recipe for ``state``; ``catalog_model`` False (a model from a config.json) explains that
        recipes name catalog models (their overrides are applied to the catalog entry)."""
        if self.state is not None and state != self.state:
            self.message.value = ""  # the last export's message (or error) is about the previous settings
        self.state, self.predictions, self.catalog_model = state, predictions, catalog_model
        options = [(p.gpu.display_name, name) for name, p in predictions.items()]  # shown by name, valued by id
        if list(self.gpu.options) != options:
            names = [name for _, name in options]
            keep = self.gpu.value if self.gpu.value in names else (names[0] if names else None)
            self.gpu.options = options
            self.gpu.value = keep
        self._render()

    def _render(self) -> None:
        self.note.value = ""  # nothing of the previous model's recipe (or its error) stays
        if self.state is None or not self.gpu.value:
            self.preview.value = "<i>no GPU with a prediction selected</i>"
            return
        if not self.catalog_model:
            self.recipe, self.text = None, ""
            self.preview.value = (f"<i>No recipe for {html.escape(self.state.model)}: recipes name a catalog model "
                                  "(plus field overrides); add your model to specs/models/ to export one.</i>")
            self.export_button.disabled = True
            return
        try:
            prediction = self.predictions.get(self.gpu.value)
            if self.kind.value == "searched":
                precision = prediction.precision.effective.name if prediction is not None else self.state.precision
                self.recipe = searched_recipe(self.state, self.gpu.value, precision)
            else:
                self.recipe = build_recipe(self.state, self.gpu.value, prediction)
            from workbench.recipe import dumps

            self.text = dumps(self.recipe, self.format.value)
        except ImportError as exc:
            self.recipe, self.text = None, ""
            self.note.value = ("<b>Recipe export is not available:</b> this install's <code>workbench.recipe</code> "
                               f"lacks what the tab needs ({html.escape(str(exc))}).")
            self.preview.value = ""
            self.export_button.disabled = True
            return
        except WorkbenchError as exc:
            self.recipe, self.text = None, ""
            self.preview.value = f"<span style='color:#b00'>no recipe: {html.escape(str(exc))}</span>"
            self.export_button.disabled = True
            return
        self.export_button.disabled = False
        self.note.value = ("The <b>simplest configuration within 5% of the fastest</b> (the model's uncertainty; "
                           "the global batch held) for this model, GPU count, precision and "
                           "sequence length (<code>workbench.recipe.search</code>), with the analytical model's "
                           "prediction." if self.kind.value == "searched" else
                           "Recipe for the <b>current settings</b> (the workbench's tp, pp, ep, sharding, micro-batch "
                           "and global batch), with the analytical model's prediction.")
        self.note.value += " Numbers in the preview are rounded to 4 digits; the file keeps them in full."
        self.preview.value = (f"<pre class='wb-recipe-preview' style='max-height:320px;overflow:auto'>"
                              f"{html.escape(preview_text(self.text))}</pre>")
        if not self._path_edited:
            self._setting_path = True
            self.path.value = default_path(self.state, self.gpu.value, self.format.value, self.kind.value)
            self._setting_path = False

    def export(self, path: str | Path | None = None, *, overwrite: bool | None = None) -> Path | None:
        """Write the previewed recipe (``workbench.recipe.save_recipe``: atomic; an existing file is kept unless
        ``overwrite``) and show a download link. Returns the path written, or None (the message says why)."""
        if self.recipe is None:
            self.message.value = "<span style='color:#b00'>nothing to export</span>"
            return None
        from workbench.recipe import save_recipe

        target = Path(path or self.path.value)
        try:
            written = save_recipe(self.recipe, target, format=self.format.value,
                                  overwrite=self.overwrite.value if overwrite is None else overwrite)
        except FileExistsError as exc:
            self.message.value = f"<span style='color:#b00'>{html.escape(str(exc))} (tick overwrite)</span>"
            return None
        except (WorkbenchError, OSError) as exc:
            self.message.value = f"<span style='color:#b00'>could not write {html.escape(str(target))}: {html.escape(str(exc))}</span>"
            return None
        written = Path(written)
        self.message.value = (f"wrote <code>{html.escape(str(written))}</code> · "
                              f"{download_link(written, written.read_text(encoding='utf-8'))}")
        return written
