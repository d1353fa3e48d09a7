"""Recipes: a typed, versioned training setup for a target GPU, with its predictions; export, search, advice.

    >>> from workbench.recipe import load_recipe, save_recipe
    >>> recipe = load_recipe("llama3-8b-h200.yaml")
    >>> recipe.batch.micro_batch, recipe.parallelism.dp, recipe.predicted.tokens_per_s
    >>> search("llama3-8b", "h200", 8).best                       # the simplest configuration within 5% of the fastest
    >>> advise("llama3-8b", "h100", "h200", 1).as_frame()          # direct port vs co-designed
"""

from workbench.recipe.advisor import Advice, AdviceItem, advise
from workbench.recipe.build import make_recipe, predict_recipe, recipe_model, revised_model, training_config
from workbench.recipe.io import FORMATS, dumps, load_recipe, loads, save_recipe
from workbench.recipe.schema import (
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    ActivationCheckpointing,
    Batch,
    EmbeddingPlacement,
    KernelChoice,
    LoRAChoice,
    ModelChoice,
    ParallelismChoice,
    PrecisionPolicy,
    Predicted,
    Recipe,
    Revision,
    Target,
)
from workbench.recipe.search import Candidate, FastEvaluator, SearchResult, search

__all__ = [
    "Advice", "AdviceItem", "Candidate", "FastEvaluator", "SearchResult", "advise", "make_recipe", "predict_recipe",
    "recipe_model", "revised_model", "search", "training_config",
    "FORMATS", "SCHEMA_VERSION", "SCHEMA_VERSIONS", "ActivationCheckpointing", "Batch", "EmbeddingPlacement",
    "KernelChoice", "LoRAChoice", "ModelChoice", "ParallelismChoice", "Predicted", "PrecisionPolicy", "Recipe",
    "Revision", "Target", "dumps", "load_recipe", "loads", "save_recipe",
]
