"""Cell makers shared by the workshop notebooks' cell files (see ``notebooks/_build.py``)."""

from __future__ import annotations

import textwrap

import nbformat

EXERCISE_KEY = "workbench"
"""The cell metadata key under which an exercise cell carries its solution and wrong answer until
``notebooks/_build.py`` writes it: the exercise notebook gets neither, the solutions notebook both (the test
swaps the wrong answer in to see the check say NOT YET)."""


def md(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(text.strip("\n"))


def exercise(answers: dict[str, str], *, solution: str, wrong_answer: str,
             check: str) -> list[nbformat.NotebookNode]:
    """An exercise's two cells: the answer cell and its check.

    ``answers`` maps each name the learner assigns to a hint of what it holds. The answer cell ships as a stub
    (``name = ...  # hint``), the solution goes to the solutions notebook, and ``check`` (code that prints
    ``PASS`` or ``NOT YET``) runs only once every name has a value: on the stub, or before the answer cell has
    run, it prints which names are missing instead of failing on ``...``."""
    stub = "\n".join([
        "# Your answer: replace each ... below, run this cell, then the check cell under it.",
        *(f"{name} = ...  # {hint}" for name, hint in answers.items()),
    ])
    cell = code(stub)
    cell.metadata["tags"] = ["exercise"]
    cell.metadata[EXERCISE_KEY] = {"solution": solution.strip("\n"), "wrong_answer": wrong_answer.strip("\n")}
    return [cell, _check(tuple(answers), check)]


def _check(names: tuple[str, ...], text: str) -> nbformat.NotebookNode:
    body = text.strip("\n")
    if "'''" in body or '"""' in body:  # indenting would change a triple-quoted string's text
        raise ValueError("a check cell's code must not hold triple-quoted strings (it is indented under a guard)")
    listed = ", ".join(f'"{name}"' for name in names) + ("," if len(names) == 1 else "")
    guard = (f"unanswered = [name for name in ({listed}) if globals().get(name, ...) is ...]\n"
             "if unanswered:\n"
             "    print(f\"NOT YET: give {' and '.join(unanswered)} a value in the answer cell above and run it, \"\n"
             "          \"then run this check again\")\n"
             "else:\n")
    cell = code(guard + textwrap.indent(body, "    "))
    cell.metadata["tags"] = ["check"]
    return cell


def setup() -> nbformat.NotebookNode:
    """The first code cell of every workshop notebook."""
    return code('''
import os

import altair as alt
import pandas as pd

import workbench

if os.environ.get("WORKBENCH_CHARTS") == "png":  # notebooks/_build.py renders the solutions as pictures GitHub shows
    alt.renderers.enable("png")
else:
    alt.renderers.enable("jupyter", offline=True)  # charts draw without a network: the JS ships with vl-convert
SMALL = os.environ.get("WORKBENCH_SMALL") == "1"  # CI sets it: fewer points, same story
''')
