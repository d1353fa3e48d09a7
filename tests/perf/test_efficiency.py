"""GEMM fractions from a GPU's own measured matmul ceiling (workbench.perf.efficiency.measured_gemm_fractions)."""

import dataclasses

import pytest

from workbench.errors import SpecError
from workbench.hardware import get_gpu, list_gpus
from workbench.hardware_scaling import scaled
from workbench.perf import efficiency
from workbench.perf.efficiency import FRACTION_DECIMALS, default_constants, measured_gemm_fractions


def _arch(gpu_name: str) -> dict[str, float]:
    return efficiency._defaults().per_arch[get_gpu(gpu_name).architecture][0]


def _share() -> float:
    return efficiency._defaults().sustained_share


def test_gb200_reads_its_own_mamf_not_the_b200s():
    c = default_constants(get_gpu("gb200"))
    best = round(3615.6 / 5000, FRACTION_DECIMALS)  # specs/gpus/gb200.yaml measured.matmul_tflops.fp8 over its peak
    assert c["gemm_fraction_unthrottled.fp8"] == best == 0.723
    assert c["gemm_fraction.fp8"] == round(best * _share(), FRACTION_DECIMALS) == 0.685
    assert c["gemm_fraction.bf16"] == 0.691 < _arch("gb200")["gemm_fraction.bf16"]  # 1822 of 2500; B200: 0.736
    assert c["gemm_fraction.fp16"] == c["gemm_fraction.bf16"]  # no fp16 figure: bf16's (same peak)
    assert "gb200's own measured matmul ceiling, fp8 3615.6 of 5000" in c.provenance["gemm_fraction.fp8"]


@pytest.mark.parametrize("gpu_name, keys", [
    ("h100-sxm", ["gemm_fraction.bf16", "gemm_fraction_unthrottled.bf16"]),
    ("h200-sxm", ["gemm_fraction.fp8", "gemm_fraction_unthrottled.fp8"]),
    ("b200", ["gemm_fraction.bf16", "gemm_fraction.fp8", "gemm_fraction_unthrottled.fp8"]),
    ("b300", ["gemm_fraction.bf16", "gemm_fraction.fp8"]),
    ("a100-sxm-80gb", ["gemm_fraction.bf16"]),
    ("mi355x", ["gemm_fraction.bf16", "gemm_fraction_unthrottled.bf16"]),
])
def test_a_part_whose_figure_is_its_architectures_source_gets_exactly_that_constant(gpu_name, keys):
    own, _ = measured_gemm_fractions(get_gpu(gpu_name))
    assert {k: own[k] for k in keys} == {k: _arch(gpu_name)[k] for k in keys}


def test_uncertain_figures_are_skipped():
    # h200-sxm's bf16 is the H100's figure ("H200 is the same"); b200's fp16 comes through a secondary summary
    assert "gemm_fraction.bf16" not in measured_gemm_fractions(get_gpu("h200-sxm"))[0]
    b200 = default_constants(get_gpu("b200"))
    assert b200["gemm_fraction.fp16"] == b200["gemm_fraction.bf16"]  # bf16's MAMF, not the uncertain 1929.6


def test_h100_fp8_reads_its_own_mamf_and_the_500w_variant_its_base_parts():
    h100, variant = default_constants(get_gpu("h100-sxm")), default_constants(get_gpu("h100-sxm-96gb-500w"))
    assert h100["gemm_fraction.fp8"] == round(round(1402.6 / 1978.9, 3) * _share(), 3) == 0.672
    assert h100["gemm_fraction.fp8"] < _arch("h100-sxm")["gemm_fraction.fp8"]  # the H200's 1453.4
    # the constants describe the part at its rating; workbench.power scales them to the variant's 500 W
    for key in ("gemm_fraction.fp8", "gemm_fraction.bf16", "gemm_fraction_unthrottled.fp8"):
        assert variant[key] == h100[key]


def test_a_variant_reads_its_base_parts_share_of_its_own_peaks():
    variant = get_gpu("h100-sxm-96gb-500w")
    faster = dataclasses.replace(variant, peak_dense_tflops={
        **variant.peak_dense_tflops, "fp8": dataclasses.replace(variant.peak_dense_tflops["fp8"], value=2500)})
    assert default_constants(faster)["gemm_fraction.fp8"] == default_constants(get_gpu("h100-sxm"))["gemm_fraction.fp8"]


@pytest.mark.parametrize("gpu_name", ["gb300", "mi350x", "mi250x"])
def test_parts_without_a_measurement_fall_back_to_their_architecture(gpu_name):
    gpu = get_gpu(gpu_name)
    assert measured_gemm_fractions(gpu) == ({}, {})
    c = default_constants(gpu)
    assert all(c[k] == v for k, v in _arch(gpu_name).items())


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.name)
def test_every_measured_ceiling_of_the_catalog_is_below_its_peak(gpu):
    for key, figure in gpu.measured.items():
        precision = key.removeprefix("matmul_tflops.")
        if precision != key and precision in gpu.peak_dense_tflops:
            assert 0 < figure.value < gpu.peak_tflops(precision), key


def test_a_what_if_ceiling_past_the_peak_reads_the_whole_peak():
    gpu = scaled(get_gpu("gb200"), "measured.matmul_tflops.fp8", 2.0)  # 7231 of 5000
    assert default_constants(gpu)["gemm_fraction_unthrottled.fp8"] == 1.0


def test_a_what_if_with_more_flops_keeps_the_share_its_measurement_reached():
    gpu = get_gpu("gb200")
    for field in ("peak_dense_tflops.fp8", "compute_units"):
        more = scaled(gpu, field, 2.0)
        assert default_constants(more)["gemm_fraction.fp8"] == default_constants(gpu)["gemm_fraction.fp8"]


def test_a_sustained_share_above_one_is_refused(tmp_path, monkeypatch):
    text = (efficiency._specs_dir() / "efficiency.yaml").read_text()
    share = efficiency._defaults().sustained_share
    wrong = text.replace(f"mamf_sustained_share: {{value: {share}", "mamf_sustained_share: {value: 1.2", 1)
    assert wrong != text
    (tmp_path / "efficiency.yaml").write_text(wrong)
    monkeypatch.setattr(efficiency, "_specs_dir", lambda: tmp_path)
    efficiency._defaults.cache_clear()
    try:
        with pytest.raises(SpecError, match=r"mamf_sustained_share\.value"):
            efficiency._defaults()
    finally:
        monkeypatch.undo()
        efficiency._defaults.cache_clear()
