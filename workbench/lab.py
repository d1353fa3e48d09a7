"""``workbench lab``: open the workbench notebook in JupyterLab."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from workbench.errors import WorkbenchError

DEFAULT_NOTEBOOK = Path("notebooks") / "workbench.ipynb"


def find_notebook(notebook: str | None = None) -> Path:
    """The notebook to open: the given path, else notebooks/workbench.ipynb here or in the source checkout."""
    candidates = [Path(notebook)] if notebook else [Path.cwd() / DEFAULT_NOTEBOOK,
                                                     Path(__file__).resolve().parents[1] / DEFAULT_NOTEBOOK]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise WorkbenchError(f"notebook not found (looked at {', '.join(str(p) for p in candidates)}); "
                         f"run from the repository root or pass --notebook PATH")


def launch(notebook: str | None = None, *, port: int = 0, open_browser: bool = True,
           jupyter_args: list[str] | None = None) -> int:
    """Start JupyterLab with the notebook open; ``jupyter_args`` go to Jupyter unchanged. Returns its exit code."""
    if importlib.util.find_spec("jupyterlab") is None:
        raise WorkbenchError("JupyterLab is not installed: install the UI extras with "
                             "`pip install -e '.[lab]'` (./dev lab does this for you)")
    path = find_notebook(notebook)
    root = path.parent.parent if path.parent.name == "notebooks" else path.parent
    command = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
               str(path.relative_to(root))]
    if port:
        command.append(f"--port={port}")
    if not open_browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI run as root; Jupyter refuses without this
        command.append("--allow-root")
    command += jupyter_args or []
    print("starting:", " ".join(command), flush=True)
    return subprocess.call(command, cwd=root)
