import copy

import pytest
import yaml

from workbench.hardware import _catalog_dir


@pytest.fixture
def h200_spec() -> dict:
    """The H200 catalog file as a dict, to edit into user GPUs and broken specs."""
    return copy.deepcopy(yaml.safe_load((_catalog_dir() / "h200-sxm.yaml").read_text()))
