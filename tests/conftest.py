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


def _language_namespaces() -> list:
    """The triton.language namespaces Triton's interpreter patches (``runtime.interpreter._patch_lang``)."""
    try:
        import triton.language as tl
    except ImportError:
        return []
    return [tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base]


_LANGUAGE = [(space, dict(vars(space))) for space in _language_namespaces()]


@pytest.fixture(autouse=True)
def _unpatched_triton_language():
    """Put back what an interpreted kernel left patched in triton.language. Triton 3.7.1's interpreter replaces
    ``tl.core.program_id``, ``arange``, ``full`` and more with interpreter builtins for a launch and does not undo
    all of it (a CPU run of ``flash_attention`` leaves them patched); a later ``triton.compile`` in the same process
    (the Gluon cross-compilation tests) then gets raw IR values back from ``gl.program_id`` ('ir.value' object has
    no attribute 'dtype'), so those tests failed or passed by the order they ran in."""
    yield
    for space, original in _LANGUAGE:
        for name, value in original.items():
            now = vars(space).get(name, _MISSING)
            if now is not value and getattr(now, "__module__", "") == "triton.runtime.interpreter":
                setattr(space, name, value)  # only the interpreter's own patches: nothing else is undone


_MISSING = object()


@pytest.fixture
def h200_spec() -> dict:
    """The H200 catalog file as a dict, to edit into user GPUs and broken specs."""
    return copy.deepcopy(yaml.safe_load((_catalog_dir() / "h200-sxm.yaml").read_text()))
