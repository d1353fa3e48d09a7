"""Every notebook runs top to bottom on a CPU-only machine; the workshop notebooks' check cells really check.

Workshop notebooks (``notebooks/0N_*.ipynb``) run in small mode (``WORKBENCH_SMALL=1``) as a learner gets them:
each ``exercise`` cell an empty stub, on which its ``check`` cell must print NOT YET (not fail). Then, in the same
kernel, the solution from ``notebooks/solutions/`` is run and the check must print PASS; then the wrong answer
from the solution cell's metadata, and the check must print NOT YET again: a check that passes everything, or
a solution that does not pass, fails this test. The solutions copies are committed executed (full size, charts
as PNG pictures) so a reader sees them on the repository page; they are checked as they are, not re-run.
"""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
SOLUTIONS_DIR = NOTEBOOK_DIR / "solutions"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
WORKSHOP = [p for p in NOTEBOOKS if p.name[:2].isdigit()]
SOLUTIONS_MAX_BYTES = 4_000_000
"""What the rendered solutions copies may weigh together (about 1.9 MB when written): a few MB in git at most."""

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


def _answer_names(stub: str) -> list[str]:
    """The names an answer stub leaves to the learner; fails unless it is only ``name = ...`` lines (comments
    aside), i.e. unless the answer cell ships empty."""
    names = []
    for statement in ast.parse(stub).body:
        assert (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and isinstance(statement.value, ast.Constant) and statement.value.value is Ellipsis), \
            f"an answer cell must ship empty (only `name = ...` lines), found: {ast.unparse(statement)}"
        names.append(statement.targets[0].id)
    assert names, "an answer cell names at least one answer"
    return names


def _assigned(source: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Store)}


def _solutions(path: Path):
    solutions = SOLUTIONS_DIR / path.name
    assert solutions.is_file(), f"{path.name} has no solutions copy in notebooks/solutions/: run notebooks/_build.py"
    return nbformat.read(solutions, as_version=4)


@pytest.mark.parametrize("path", WORKSHOP, ids=lambda p: p.name)
def test_exercise_cells_ship_empty_and_solutions_fill_them(path):
    notebook, solutions = nbformat.read(path, as_version=4), _solutions(path)
    solution_cells = {cell.id: cell for cell in solutions.cells}
    exercises, checks = _tagged(notebook, "exercise"), _tagged(notebook, "check")
    assert exercises and [i + 1 for i in exercises] == checks, "each answer cell is followed by its check cell"
    for index in exercises:
        cell = notebook.cells[index]
        names = _answer_names(cell.source)
        assert "workbench" not in cell.metadata, "the learner's notebook carries no solution or wrong answer"
        assert all(f'"{name}"' in notebook.cells[index + 1].source for name in names), \
            "the check cell must name every answer it waits for (its guard against the empty stub)"
        solution = solution_cells[cell.id]
        assert set(names) <= _assigned(solution.source), f"the solution of cell {cell.id} must assign {names}"
        assert set(names) <= _assigned(solution.metadata["workbench"]["wrong_answer"]), \
            f"the wrong answer of cell {cell.id} must assign {names}"


@pytest.mark.parametrize("path", WORKSHOP, ids=lambda p: p.name)
def test_workshop_notebook(path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_SMALL", "1")
    monkeypatch.delenv("WORKBENCH_CHARTS", raising=False)
    notebook = nbformat.read(path, as_version=4)
    solution_cells = {cell.id: cell for cell in _solutions(path).cells}
    assert notebook.metadata.get("kernelspec"), "JupyterLab asks for a kernel without metadata.kernelspec"
    checks, exercises = _tagged(notebook, "check"), _tagged(notebook, "exercise")
    assert checks and len(exercises) == len(checks), "each exercise cell needs its check cell"
    client = _client(notebook, path)
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)  # raises CellExecutionError on an error: the stubs must not crash
        for check_index in checks:
            text = _text(notebook.cells[check_index])
            assert "NOT YET" in text and "PASS" not in text, f"check cell {check_index} on the empty stub: {text}"
        everything = "".join(_text(c) for c in notebook.cells if c.cell_type == "code")
        charts = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
        # The solution must pass its check, and the check must fail a wrong answer.
        for exercise_index, check_index in zip(exercises, checks):
            solution = solution_cells[notebook.cells[exercise_index].id]
            for answer, verdict, other in ((solution.source, "PASS", "NOT YET"),
                                           (solution.metadata["workbench"]["wrong_answer"], "NOT YET", "PASS")):
                rerun = nbformat.v4.new_code_cell(notebook.cells[check_index].source)
                client.execute_cell(nbformat.v4.new_code_cell(answer), exercise_index)
                client.execute_cell(rerun, check_index)
                text = _text(rerun)
                assert verdict in text and other not in text, f"check cell {check_index} after {answer!r}: {text}"
                everything += text
    assert "not JSON compliant" not in everything, "NaN in chart data: select the columns a chart needs"
    for expected in EXPECTED[path.name]:
        alternatives = expected if isinstance(expected, tuple) else (expected,)
        assert any(text in everything for text in alternatives), f"{path.name} never printed {expected!r}"
    assert charts, "a workshop notebook draws at least one chart"


def _load_build():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOK_DIR / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


def _cell_sources(notebook) -> list[tuple]:
    return [(c.get("id"), c.cell_type, c.source, c.metadata) for c in notebook.cells]


def test_solutions_are_what_build_writes_rendered():
    """Each solutions copy holds what _build.py writes, executed: every code cell ran without an error, every
    check printed PASS, the charts are PNG pictures (what a repository page shows; widgets it cannot draw)."""
    build = _load_build()
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        for name in build.NOTEBOOKS:
            path = SOLUTIONS_DIR / f"{name}.ipynb"
            committed = nbformat.read(path, as_version=4)
            assert _cell_sources(committed) == _cell_sources(build.build(name, solutions=True)), \
                f"solutions/{name}.ipynb differs from what _build.py writes: run it"
            code = [c for c in committed.cells if c.cell_type == "code"]
            unrendered = [c.id for c in code if c.execution_count is None]
            assert not unrendered, f"solutions/{name}.ipynb was not rendered (cells {unrendered}): run _build.py"
            outputs = [o for c in code for o in c.outputs]
            assert not [o for o in outputs if o.output_type == "error"], f"solutions/{name}.ipynb shows an error"
            for index in _tagged(committed, "check"):
                text = _text(committed.cells[index])
                assert "PASS" in text and "NOT YET" not in text, f"solutions/{name}.ipynb check {index}: {text}"
            assert any("image/png" in o.get("data", {}) for o in outputs), f"solutions/{name}.ipynb has no picture"
            assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), \
                f"solutions/{name}.ipynb has widget outputs, which a repository page cannot draw"
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
    size = sum(p.stat().st_size for p in SOLUTIONS_DIR.glob("*.ipynb"))
    assert size <= SOLUTIONS_MAX_BYTES, f"the rendered solutions weigh {size / 1e6:.1f} MB: keep charts small"


def test_committed_notebooks_are_what_build_writes():
    """The learners' .ipynb files are what notebooks/_build.py writes (outputs stripped); edit the cell files, then
    rebuild."""
    build = _load_build()
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        for name in build.NOTEBOOKS:
            committed = (NOTEBOOK_DIR / f"{name}.ipynb").read_text()
            expected = nbformat.writes(build.build(name)) + "\n"
            assert committed == expected, f"{name}.ipynb differs from what _build.py writes: rebuild it"
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
