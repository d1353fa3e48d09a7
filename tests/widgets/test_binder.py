"""binder/ (repo2docker) installs what pyproject.toml and ./dev install: same requirements, same CPU torch."""

import os
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(lines: list[str]) -> dict[str, str]:
    """name -> normalised specifier, from requirement strings (comments and blank lines skipped)."""
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            out[req.name.lower()] = str(req.specifier)
    return out


def test_binder_requirements_are_the_core_and_lab_requirements():
    project = _pyproject()["project"]
    expected = _requirements(project["dependencies"] + project["optional-dependencies"]["lab"])
    listed = _requirements((BINDER / "requirements.txt").read_text().splitlines())
    assert listed == expected, "binder/requirements.txt must equal pyproject's dependencies + the lab extra"


def test_binder_python_satisfies_requires_python():
    version = (BINDER / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.\d+", version), version
    requires = SpecifierSet(_pyproject()["project"]["requires-python"])
    assert version.removeprefix("python-") + ".0" in requires


def test_post_build_installs_dev_s_cpu_torch_then_the_project_with_the_lab_extra():
    post_build = BINDER / "postBuild"
    text = post_build.read_text()
    assert os.access(post_build, os.X_OK) and text.startswith("#!/bin/bash")
    assert "set -euo pipefail" in text
    torch_spec = re.search(r'TORCH_SPEC=\$\{TORCH_SPEC:-([^}]+)\}', (ROOT / "dev").read_text()).group(1)
    torch_line = next(line for line in text.splitlines() if "torch==" in line)
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line and f'"{torch_spec}"' in torch_line
    assert 'pip install --no-cache-dir ".[lab]"' in text
    assert text.index("torch==") < text.index('".[lab]"')  # CPU torch first, or a dependency pulls CUDA torch


def test_readme_launch_link_opens_the_workbench_notebook():
    readme = (ROOT / "README.md").read_text()
    assert "mybinder.org/v2/gh/" in readme and "labpath=notebooks%2Fworkbench.ipynb" in readme
