"""Writes the workshop notebooks (``notebooks/0N_*.ipynb``) from the cell texts in ``notebooks/_workshop/``.

The .ipynb files are what users open and what is committed (outputs stripped); this script is how they are made,
so a change to a notebook is a change to its cell file here, then ``python notebooks/_build.py``.

Cell conventions the tests rely on (``tests/test_notebooks.py``):

- a cell tagged ``exercise`` holds the learner's answer (shipped answered, so the notebook runs clean in CI);
  its metadata ``workbench.wrong_answer`` is a wrong answer the test swaps in to see the check cell say so;
- a cell tagged ``check`` compares the answer against the library and prints ``PASS`` or ``NOT YET``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
NOTEBOOKS = (
    "01_roofline_basics",
    "02_gemm_shapes",
    "03_kernel_selection",
    "04_memory_and_parallelism",
    "05_recsys_codesign",
    "06_export_a_recipe",
)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def build(name: str) -> nbformat.NotebookNode:
    cells = importlib.import_module(f"_workshop.{name[3:]}").cells()
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = KERNELSPEC
    notebook.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"{name[:2]}-{index:02d}"  # stable ids: rebuilding an unchanged notebook changes nothing
    return notebook


def main(names: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    for name in names or NOTEBOOKS:
        if name not in NOTEBOOKS:
            raise SystemExit(f"unknown notebook {name!r}; expected one of {', '.join(NOTEBOOKS)}")
        notebook = build(name)
        nbformat.validate(notebook)
        text = nbformat.writes(notebook) + "\n"
        path = HERE / f"{name}.ipynb"
        tmp = path.with_suffix(".ipynb.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: a reader never sees half a notebook
        print(f"wrote {path.relative_to(HERE.parent)} ({len(notebook.cells)} cells)")


if __name__ == "__main__":
    main(sys.argv[1:])
