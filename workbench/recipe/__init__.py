"""Recipes: a typed, versioned training setup for a target GPU, with its predictions; export, search, advice.

    >>> from workbench.recipe import load_recipe, save_recipe
    >>> recipe = load_recipe("llama3-8b-h200.yaml")
    >>> recipe.batch.micro_batch, recipe.parallelism.dp, recipe.predicted.tokens_per_s
"""

from workbench.recipe.io import FORMATS, dumps, load_recipe, loads, save_recipe
from workbench.recipe.schema import (
    SCHEMA_VERSION,
    ActivationCheckpointing,
    Batch,
    EmbeddingPlacement,
    KernelChoice,
    ModelChoice,
    ParallelismChoice,
    Predicted,
    PrecisionPolicy,
    Recipe,
    Revision,
    Target,
)

__all__ = [
    "FORMATS", "SCHEMA_VERSION", "ActivationCheckpointing", "Batch", "EmbeddingPlacement", "KernelChoice",
    "ModelChoice", "ParallelismChoice", "Predicted", "PrecisionPolicy", "Recipe", "Revision", "Target", "dumps",
    "load_recipe", "loads", "save_recipe",
]
