"""The benchmark harness on a machine without a GPU, and catalog matching of driver device names."""

import pytest

pytest.importorskip("torch")

from workbench.bench import NoGPUError, detect_gpu, match_catalog, run_suite  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402


@pytest.mark.parametrize("device,name", [
    ("NVIDIA H200", "h200-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI355X", "mi355x"),
])
def test_device_names_match_the_catalog(device, name):
    assert match_catalog(device).name == name


def test_unknown_device_matches_nothing():
    assert match_catalog("NVIDIA GeForce RTX 4090") is None


def test_no_gpu_says_so_and_offers_the_interpreter(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NoGPUError, match="kernels check"):
        detect_gpu()
    with pytest.raises(NoGPUError):
        run_suite("quick")


def test_bad_suite_and_kernel_names():
    with pytest.raises(WorkbenchError, match="quick, full"):
        run_suite("huge")
    with pytest.raises(WorkbenchError, match="gemm"):
        run_suite("quick", ["conv2d"])


def test_every_suite_case_carries_a_prediction():
    """Each case of every kernel module's full suite gets a model time, so it lands on the roofline."""
    import math

    from workbench.bench import KERNEL_MODULES, predicted_ms
    from workbench.hardware import get_gpu
    from workbench.kernels.cases import bench_cases

    gpu = get_gpu("h200-sxm")
    for name in KERNEL_MODULES:
        for case in bench_cases(name, "full"):
            ms = predicted_ms(case.row, gpu, case.bytes)
            assert math.isfinite(ms) and ms > 0, case.name
    assert math.isnan(predicted_ms({"op": "conv2d"}, gpu)) and math.isnan(predicted_ms({"op": "gemm"}, None))
