"""Every notebook runs top to bottom on a CPU-only machine; the workshop notebooks' check cells really check.

Workshop notebooks (``notebooks/0N_*.ipynb``) run in small mode (``WORKBENCH_SMALL=1``). Their ``check`` cells must
print PASS with the shipped answers; then, in the same kernel, the ``exercise`` cell's wrong answer (from its
metadata) is run and the check cell must print NOT YET instead: a check that passes everything fails this test.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
WORKSHOP = [p for p in NOTEBOOKS if p.name[:2].isdigit()]

# What each workshop notebook must print: its PASS line and the story's key results (a tuple: any one of them).
EXPECTED = {
    "01_roofline_basics.ipynb": ["PASS: mi355x has the highest bf16 ridge point", "memory-bound on MI355X"],
    "02_gemm_shapes.ipynb": ["PASS:", "waves of", ("No GPU here", "GEMM suite measured here on"), "odd shapes measured on H200"],
    "03_kernel_selection.ipynb": ["PASS: timing the selector's top", "held-out shapes ranked in"],
    "04_memory_and_parallelism.ipynb": ["PASS:", "B200s hold it", "best 8-GPU recipe on AMD Instinct MI350X"],
    "05_recsys_codesign.ipynb": ["PASS: with", "the rest fits one B200", "of the item rows must live on the host"],
    "06_export_a_recipe.ipynb": ["PASS:", "read back equal to what was written: True", "[train] tiny"],
}


def _tagged(notebook, tag: str) -> list[int]:
    return [i for i, c in enumerate(notebook.cells) if tag in c.get("metadata", {}).get("tags", [])]


def _text(cell) -> str:
    """Everything a code cell printed or displayed, as text."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "")))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "".join(parts)


def _client(notebook, path: Path):
    return nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                   resources={"metadata": {"path": str(path.parent)}})


def test_every_notebook_exists_with_expectations():
    assert sorted(p.name for p in WORKSHOP) == sorted(EXPECTED)


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p not in WORKSHOP], ids=lambda p: p.name)
def test_app_notebook_runs(path):
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata.get("kernelspec"), "JupyterLab asks for a kernel without metadata.kernelspec"
    _client(notebook, path).execute()  # raises CellExecutionError on the first failing cell
    errors = [o for c in notebook.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("path", WORKSHOP, ids=lambda p: p.name)
def test_workshop_notebook(path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_SMALL", "1")
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata.get("kernelspec"), "JupyterLab asks for a kernel without metadata.kernelspec"
    checks, exercises = _tagged(notebook, "check"), _tagged(notebook, "exercise")
    assert checks and len(exercises) == len(checks), "each exercise cell needs its check cell"
    client = _client(notebook, path)
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)  # raises CellExecutionError on an error
        for check_index in checks:
            text = _text(notebook.cells[check_index])
            assert "PASS" in text and "NOT YET" not in text, f"check cell {check_index} with the shipped answer: {text}"
        everything = "".join(_text(c) for c in notebook.cells if c.cell_type == "code")
        charts = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
        # The checks must fail a wrong answer: rerun each exercise with its wrong answer, then its check.
        for exercise_index, check_index in zip(exercises, checks):
            wrong = nbformat.v4.new_code_cell(notebook.cells[exercise_index].metadata["workbench"]["wrong_answer"])
            rerun = nbformat.v4.new_code_cell(notebook.cells[check_index].source)
            client.execute_cell(wrong, exercise_index)
            client.execute_cell(rerun, check_index)
            text = _text(rerun)
            assert "NOT YET" in text and "PASS" not in text, f"check cell {check_index} with a wrong answer: {text}"
    assert "not JSON compliant" not in everything, "NaN in chart data: select the columns a chart needs"
    for expected in EXPECTED[path.name]:
        alternatives = expected if isinstance(expected, tuple) else (expected,)
        assert any(text in everything for text in alternatives), f"{path.name} never printed {expected!r}"
    assert charts, "a workshop notebook draws at least one chart"


def test_committed_notebooks_are_what_build_writes():
    """The .ipynb files are generated by notebooks/_build.py (outputs stripped); edit the cell files, then rebuild."""
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOK_DIR / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        for name in build.NOTEBOOKS:
            committed = (NOTEBOOK_DIR / f"{name}.ipynb").read_text()
            expected = nbformat.writes(build.build(name)) + "\n"
            assert committed == expected, f"{name}.ipynb differs from what _build.py writes: rebuild it"
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
