"""Where the shipped data lives: the installed ``workbench.specs`` package, or ``specs/`` of a source checkout
that is run without installing (``PYTHONPATH=. python ...``)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path


@cache
def specs_dir() -> Path:
    try:
        return Path(str(resources.files("workbench.specs")))
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[1] / "specs"
        if not checkout.is_dir():
            raise
        return checkout
