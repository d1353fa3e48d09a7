import pytest

from workbench.hardware import get_gpu
from workbench.precision import UnsupportedPrecisionError, get_precision, resolve_precision, runs_natively


def test_bytes_per_element_include_block_scales():
    assert get_precision("bf16").bytes_per_element == 2
    assert get_precision("fp8").bytes_per_element == 1
    assert get_precision("mxfp4").bytes_per_element == pytest.approx(0.5 + 1 / 32)
    assert get_precision("nvfp4").bytes_per_element == pytest.approx(0.5 + 1 / 16)


@pytest.mark.parametrize("gpu,precision", [("mi355x", "tf32"), ("a100", "fp8"), ("h100-sxm", "mxfp4"), ("mi300x", "mxfp8")])
def test_missing_hardware_path_is_a_clear_error(gpu, precision):
    with pytest.raises(UnsupportedPrecisionError) as err:
        resolve_precision(get_gpu(gpu), precision)
    message = str(err.value)
    assert precision in message and "It runs:" in message and "fallback" in message


def test_fallback_is_opt_in_and_visible():
    resolved = resolve_precision(get_gpu("mi355x"), "tf32", allow_fallback=True)
    assert resolved.is_fallback and resolved.effective.name == "fp32"
    assert "no tf32 path" in resolved.note


def test_native_formats():
    assert runs_natively(get_gpu("b200"), get_precision("nvfp4"))
    assert runs_natively(get_gpu("mi355x"), get_precision("mxfp4"))
    assert not runs_natively(get_gpu("mi355x"), get_precision("nvfp4"))
    assert not resolve_precision(get_gpu("h200"), "bf16").is_fallback


def test_unknown_precision_lists_valid_ones():
    with pytest.raises(KeyError, match="bf16"):
        get_precision("bf61")
