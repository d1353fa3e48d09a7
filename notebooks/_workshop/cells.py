"""Cell makers shared by the workshop notebooks' cell files (see ``notebooks/_build.py``)."""

from __future__ import annotations

import nbformat


def md(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(text.strip("\n"))


def exercise(text: str, wrong_answer: str) -> nbformat.NotebookNode:
    """The learner's answer cell; ``wrong_answer`` replaces it in the test that checks the check cell."""
    cell = code(text)
    cell.metadata["tags"] = ["exercise"]
    cell.metadata["workbench"] = {"wrong_answer": wrong_answer.strip("\n")}
    return cell


def check(text: str) -> nbformat.NotebookNode:
    cell = code(text)
    cell.metadata["tags"] = ["check"]
    return cell


def setup() -> nbformat.NotebookNode:
    """The first code cell of every workshop notebook."""
    return code('''
import os

import altair as alt
import pandas as pd

import workbench

alt.renderers.enable("jupyter", offline=True)  # charts draw without a network: the JS ships with vl-convert
SMALL = os.environ.get("WORKBENCH_SMALL") == "1"  # CI sets it: fewer points, same story
''')
