"""The installed package: a wheel carries the data, and the core imports without heavy or UI packages."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    return next(out.glob("*.whl"))


def test_wheel_carries_the_specs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "workbench/specs/gpus/h200-sxm.yaml" in names
    assert "workbench/specs/models/llama3-70b.yaml" in names
    assert "workbench/specs/efficiency.yaml" in names
    assert "workbench/specs/calibration/h200-sxm.yaml" in names
    assert "workbench/specs/stacks/torchtitan.yaml" in names
    assert "workbench/specs/validation/h200_stacks.yaml" in names
    assert "workbench/specs/gpus/variants/h100-sxm-96gb-500w.yaml" in names


def test_wheel_works_without_the_source_tree(wheel, tmp_path):
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    code = ("import workbench, sys; assert workbench.__file__.startswith(sys.argv[1]), workbench.__file__; "
            "print(len(workbench.list_gpus()), len(workbench.list_models()), "
            "round(workbench.predict('llama3-8b', 'mi355x', micro_batch=1, seq_len=2048, calibrated=False).summary.mfu, 3))")
    result = subprocess.run([sys.executable, "-c", code, str(unpacked)], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    gpus, models, mfu = result.stdout.split()
    import workbench
    assert int(gpus) == len(workbench.list_gpus()) and int(models) >= 7 and 0 < float(mfu) < 1  # the wheel's catalog is the tree's


def test_core_imports_no_torch_triton_pandas_or_ui():
    code = ("import sys, workbench, workbench.predict, workbench.rows, workbench.calibration, workbench.cli; "
            "workbench.predict('llama3-8b', 'h200', micro_batch=1, seq_len=1024); "
            "print(sorted(m for m in ('torch', 'triton', 'pandas', 'ipywidgets', 'altair') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
