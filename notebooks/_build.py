"""Writes the workshop notebooks and their solutions from the cell texts in ``notebooks/_workshop/``.

    .venv/bin/python notebooks/_build.py [--no-render] [NAME ...]

Two copies of each notebook come out of one cell file, and both are committed:

- ``notebooks/0N_*.ipynb``, what a learner opens: outputs stripped, each exercise's answer cell an empty stub
  (``name = ...  # hint``) for the learner to fill in;
- ``notebooks/solutions/0N_*.ipynb``, the same notebook with one solution in each answer cell, **executed** here
  (full size, not CI's small mode) with the charts rendered as PNG pictures, so a reader sees every chart and
  each check's PASS on the repository page without running anything. Run in JupyterLab, it draws the usual
  interactive charts again. ``--no-render`` skips the execution (quick edits; the test then asks for a render).

A change to a notebook is a change to its cell file here, then this script. Cell conventions the tests rely on
(``tests/test_notebooks.py``):

- a cell tagged ``exercise`` is the learner's answer cell; in the solutions copy its metadata
  ``workbench.wrong_answer`` is a wrong answer the test swaps in to see the check cell say so;
- a cell tagged ``check`` follows it, compares the answer against the library and prints ``PASS`` or
  ``NOT YET`` (also ``NOT YET`` on the empty stub: it names the answers still missing).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SOLUTIONS = HERE / "solutions"
NOTEBOOKS = (
    "01_roofline_basics",
    "02_gemm_shapes",
    "03_kernel_selection",
    "04_memory_and_parallelism",
    "05_recsys_codesign",
    "06_export_a_recipe",
)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
EXERCISE_KEY = "workbench"  # as in _workshop/cells.py: an exercise cell's solution and wrong answer
RENDER_TIMEOUT_S = 900
"""Seconds one cell may take while rendering (the full-size notebooks take well under a minute each here)."""


def build(name: str, *, solutions: bool = False) -> nbformat.NotebookNode:
    """The learner's notebook ``name``, or with ``solutions`` its solutions copy (not executed)."""
    if name not in NOTEBOOKS:
        raise SystemExit(f"unknown notebook {name!r}; expected one of {', '.join(NOTEBOOKS)}")
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    cells = importlib.import_module(f"_workshop.{name[3:]}").cells()
    for index, cell in enumerate(cells):
        cell["id"] = f"{name[:2]}-{index:02d}"  # stable ids: rebuilding an unchanged notebook changes nothing
        answer = cell.metadata.pop(EXERCISE_KEY, None)
        if answer is not None and solutions:
            cell.source = answer["solution"]
            cell.metadata[EXERCISE_KEY] = {"wrong_answer": answer["wrong_answer"]}
    if solutions:
        intro = nbformat.v4.new_markdown_cell(
            f"**Solutions copy** of [`{name}.ipynb`](../{name}.ipynb): one solution in each answer cell, run by "
            "`notebooks/_build.py` with the charts saved as pictures. Open the notebook above to do the "
            "exercises yourself.")
        intro["id"] = f"{name[:2]}-solutions"
        cells.insert(0, intro)
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = KERNELSPEC
    notebook.metadata["language_info"] = {"name": "python"}
    return notebook


@contextlib.contextmanager
def _environment(**values: str | None):
    """``os.environ`` with ``values`` set (None: unset) inside the block; the kernel started there inherits it."""
    before = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def render(notebook: nbformat.NotebookNode, folder: Path) -> None:
    """Execute ``notebook`` in place, from ``folder``, full size, charts as PNG (see the module docstring)."""
    import nbclient

    with _environment(WORKBENCH_CHARTS="png", WORKBENCH_SMALL=None):
        nbclient.NotebookClient(notebook, timeout=RENDER_TIMEOUT_S, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": str(folder)}}).execute()
    notebook.metadata.pop("widgets", None)  # no widget state: the pictures are the outputs


def _write(path: Path, notebook: nbformat.NotebookNode) -> None:
    from workbench.fileio import write_text

    nbformat.validate(notebook)
    write_text(path, nbformat.writes(notebook) + "\n", overwrite=True)  # atomic: never half a notebook
    print(f"wrote {path.relative_to(HERE.parent)} ({len(notebook.cells)} cells, {path.stat().st_size / 1e3:.0f} kB)")


def main(args: list[str]) -> None:
    render_solutions = "--no-render" not in args
    names = [a for a in args if a != "--no-render"] or list(NOTEBOOKS)
    for name in names:
        _write(HERE / f"{name}.ipynb", build(name))
        solutions = build(name, solutions=True)
        if render_solutions:
            render(solutions, SOLUTIONS)
        _write(SOLUTIONS / f"{name}.ipynb", solutions)


if __name__ == "__main__":
    main(sys.argv[1:])
