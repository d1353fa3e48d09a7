"""Reading and writing recipe files: YAML (safe loader, no aliases) and JSON through ``workbench.fileio``:
bounded reads, atomic writes that never overwrite unless asked.

    >>> save_recipe(recipe, "llama3-8b-h200.yaml")
    >>> load_recipe("llama3-8b-h200.yaml") == recipe
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml

from workbench.errors import MISSING, SpecError
from workbench.fileio import load_yaml, parse_yaml, write_text
from workbench.recipe.schema import Recipe

RecipeFormat = Literal["yaml", "json", "torchtitan-toml", "torchtitan-args", "torchtitan-py"]
FORMATS: tuple[str, ...] = ("yaml", "json", "torchtitan-toml", "torchtitan-args", "torchtitan-py")


def header_lines(recipe: Recipe) -> list[str]:
    """What the file is for and what the model predicts for it, as comment lines without the comment marker."""
    revised = ", ".join(f"{k}={v}" for k, v in recipe.model.overrides.items())
    lines = [f"workbench recipe (schema {recipe.schema_version}): {recipe.model.name}"
             f"{' with ' + revised if revised else ''} on {recipe.target.gpus} x {recipe.target.gpu}"]
    if recipe.lora is not None:
        lines.append(f"LoRA fine-tuning: rank-{recipe.lora.rank} adapters on {', '.join(recipe.lora.targets)}, the base "
                     "weights frozen")
    pred = recipe.predicted
    if pred is not None:
        lines.append(f"predicted by {recipe.model_version}: step {pred.step_time_s * 1e3:.1f} ms, "
                     f"{pred.tokens_per_s:,.0f} tokens/s, {pred.samples_per_s:,.2f} samples/s, "
                     f"peak memory {pred.peak_memory_gb:.1f} GB/GPU, MFU {pred.mfu:.1%}"
                     f"{'' if pred.fits else ' -- DOES NOT FIT in HBM'}")
        lines.append(f"predicted for the stack: {pred.stack}" + _bound_words(recipe, pred.stack))
    return lines


def _bound_words(recipe: Recipe, stack: str) -> str:
    """What the header adds to the stack's name when its number is the fused-step bound: always for ``ideal``, and
    for a stack whose kernel tables do not hold the recipe (LoRA, MoE blocks, ...: ``predict``'s notes say which)."""
    if stack == "ideal":
        return " (the ideal fused step: a bound, not a measured stack; a real run is slower)"
    from workbench.errors import SpecError, UnknownNameError
    from workbench.recipe.build import recipe_model, training_config
    from workbench.step import StepModel

    try:
        bound = StepModel(recipe_model(recipe), recipe.target.gpu, stack=stack).priced_as_bound(
            training_config(recipe), compile=recipe.compile)
    except (SpecError, UnknownNameError):  # a user's stack file no longer at hand: the header names it, no more
        return ""
    return (" (priced as the ideal fused step, a bound: the recipe is outside the stack's kernel tables; a real run "
            "is slower)") if bound else ""


def dumps(recipe: Recipe, format: RecipeFormat = "yaml") -> str:
    """The recipe as text in ``format`` (yaml and torchtitan-toml carry a comment header)."""
    if format == "yaml":
        header = "".join(f"# {line}\n" for line in header_lines(recipe))
        return header + yaml.safe_dump(recipe.to_dict(), sort_keys=False, default_flow_style=None, width=120)
    if format == "json":
        return json.dumps(recipe.to_dict(), indent=2) + "\n"
    if format == "torchtitan-toml":
        from workbench.recipe.torchtitan import to_torchtitan_toml

        return to_torchtitan_toml(recipe)
    if format == "torchtitan-args":
        from workbench.recipe.torchtitan import to_torchtitan_args

        return to_torchtitan_args(recipe)
    if format == "torchtitan-py":
        from workbench.recipe.torchtitan import to_torchtitan_py

        return to_torchtitan_py(recipe)
    raise SpecError("save_recipe", "format", format, f"one of {', '.join(FORMATS)}")


def loads(text: str, origin: str = "<text>") -> Recipe:
    """A recipe from YAML or JSON text (JSON is YAML; the safe loader, anchors and aliases refused)."""
    return Recipe.from_dict(parse_yaml(text.removeprefix("\ufeff"), origin), origin)


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file (YAML or JSON) through the bounded loader; errors name the file, field,
    value and what was expected."""
    data = load_yaml(path, what="recipe")
    if data is None:
        raise SpecError(str(path), "<file>", MISSING, "a recipe (the file is empty)")
    return Recipe.from_dict(data, str(path))


def save_recipe(recipe: Recipe, path: str | Path, *, format: RecipeFormat = "yaml", overwrite: bool = False) -> Path:
    """Write ``recipe`` to ``path`` atomically; an existing file is kept unless ``overwrite`` (an
    ``OutputExistsError``, also a ``FileExistsError``)."""
    return write_text(path, dumps(recipe, format), overwrite=overwrite)
