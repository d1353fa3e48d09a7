import atexit
import copy
import os
import shutil
import tempfile

# Kernel tests run on Triton's CPU interpreter. It must be chosen before any kernel module is imported (the
# @triton.jit decorator reads it), so it is set here, in the first conftest pytest loads; tests that compile for
# real GPUs (test_crosscompile.py) start their own interpreter with TRITON_INTERPRET=0.
os.environ.setdefault("TRITON_INTERPRET", "1")
# Calibrated predictions read the user's profile folder first (workbench.paths): tests, and the CLIs they start,
# use an empty one instead of the real ~/.config/workbench, so they see the shipped profiles and write nowhere real.
os.environ["WORKBENCH_HOME"] = tempfile.mkdtemp(prefix="workbench-home-")
atexit.register(shutil.rmtree, os.environ["WORKBENCH_HOME"], ignore_errors=True)

import pytest
import yaml

from workbench.hardware import _catalog_dir


@pytest.fixture(autouse=True)
def _unpatched_triton_language():
    """After each test, put back the triton.language builtins Triton's interpreter left patched
    (``workbench.kernels._common.undo_interpreter_patches``; cross-compilation does it too): the Gluon
    cross-compile tests failed by the order they ran in ('ir.value' object has no attribute 'dtype')."""
    yield
    from workbench.kernels._common import undo_interpreter_patches

    undo_interpreter_patches()


@pytest.fixture
def h200_spec() -> dict:
    """The H200 catalog file as a dict, to edit into user GPUs and broken specs."""
    return copy.deepcopy(yaml.safe_load((_catalog_dir() / "h200-sxm.yaml").read_text()))
