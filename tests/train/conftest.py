import pytest

from workbench.config import TrainingConfig
from workbench.recipe import save_recipe
from workbench.recipe.build import make_recipe

TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
        "ffn_hidden_size": 128, "vocab_size": 256}
"""A byte-level Llama small enough to train for tens of steps on a CPU in a few seconds."""


@pytest.fixture
def tiny_recipe(tmp_path):
    """Write a tiny-Llama recipe (h200-sxm target) and return its path; keyword arguments go to make_recipe,
    ``config`` replaces the TrainingConfig."""
    def make(name: str = "tiny", config: TrainingConfig | None = None, **kwargs):
        kwargs.setdefault("compile", False)
        recipe = make_recipe("llama3-8b", "h200-sxm", config or TrainingConfig(4, 64), overrides=TINY, **kwargs)
        return save_recipe(recipe, tmp_path / f"{name}.yaml")
    return make
