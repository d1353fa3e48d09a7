"""Where the shipped data lives: the installed ``workbench.specs`` package, or ``specs/`` of a source checkout
that is run without installing (``PYTHONPATH=. python ...``)."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path


@cache
def specs_dir() -> Path:
    try:
        spec = importlib.util.find_spec("workbench.specs")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations)))
        if folder.is_dir():  # a folder on disk: an install or an editable checkout (no resource reader needed)
            return folder
    if spec is not None:  # inside an archive (zipimport): the resource reader extracts the path
        from importlib import resources

        return Path(str(resources.files("workbench.specs")))
    checkout = Path(__file__).resolve().parents[1] / "specs"
    if not checkout.is_dir():
        raise ModuleNotFoundError("No module named 'workbench.specs' and no specs/ folder beside the package")
    return checkout
