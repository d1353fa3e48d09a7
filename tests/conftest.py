import copy
import os

# Kernel tests run on Triton's CPU interpreter. It must be chosen before any kernel module is imported (the
# @triton.jit decorator reads it), so it is set here, in the first conftest pytest loads; tests that compile for
# real GPUs (test_crosscompile.py) start their own interpreter with TRITON_INTERPRET=0.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import yaml

from workbench.hardware import _catalog_dir


@pytest.fixture
def h200_spec() -> dict:
    """The H200 catalog file as a dict, to edit into user GPUs and broken specs."""
    return copy.deepcopy(yaml.safe_load((_catalog_dir() / "h200-sxm.yaml").read_text()))
