import dataclasses

import pytest

from workbench.graph.ops import GemmShape
from workbench.hardware import get_gpu
from workbench.perf.efficiency import default_constants
from workbench.perf.gemm import gemm_time

H200 = get_gpu("h200")
C = default_constants(H200)


def _t(m, n, k, dtype="bf16", gpu=H200):
    return gemm_time(GemmShape(m, n, k), dtype, gpu, C)


def test_large_square_gemm_runs_near_the_achievable_fraction():
    est = _t(8192, 8192, 8192)
    achieved = 2 * 8192**3 / est.time_s / 1e12
    assert 0.7 * 989.4 < achieved <= C["gemm_fraction.bf16"] * 989.4
    assert est.bound == "compute" and est.wave_efficiency > 0.9


def test_tail_wave_costs_a_whole_wave():
    # 256x128 tiles: 132 tiles fill one wave exactly; one more row of tiles spills into a second wave.
    one_wave = _t(256 * 12, 128 * 11, 4096)
    spill = _t(256 * 12 + 256, 128 * 11, 4096)
    assert spill.time_s > 1.5 * one_wave.time_s * (12 / 13)
    assert spill.wave_efficiency < one_wave.wave_efficiency


def test_padding_to_instruction_and_tile_granules():
    aligned = _t(4096, 4096, 4096)
    odd = _t(4097, 4096, 4096)  # one extra row: a row of padded tiles, absorbed here by the tail wave
    assert odd.time_s >= aligned.time_s
    assert odd.padding_efficiency < 1.0 == aligned.padding_efficiency
    # K pads to the bf16 instruction's 16: K=4104 (16-byte aligned rows) costs as much as K=4112
    assert _t(4096, 4096, 4104).compute_s == pytest.approx(_t(4096, 4096, 4112).compute_s)


def test_rows_not_16_byte_aligned_take_the_slow_path():
    from workbench.graph.ops import GemmShape
    from workbench.perf.gemm import alignment_bytes

    assert alignment_bytes(GemmShape(64, 4096, 4096), "bf16") == 16
    assert alignment_bytes(GemmShape(64, 4096, 4098), "bf16") == 4
    assert alignment_bytes(GemmShape(64, 4097, 4096), "bf16") == 2
    assert alignment_bytes(GemmShape(64, 4097, 4096), "fp32") == 16  # vector units: alignment does not matter
    assert _t(4096, 4097, 4096).time_s > 2 * _t(4096, 4096, 4096).time_s


def test_skinny_gemm_is_memory_bound_and_uses_split_k():
    est = _t(16, 4096, 14336)
    assert est.bound == "memory"
    deep = _t(128, 128, 65536)
    assert deep.split_k > 1


def test_fp8_is_faster_than_bf16_on_hopper_and_fp32_slowest():
    assert _t(8192, 8192, 8192, "fp8").time_s < _t(8192, 8192, 8192, "bf16").time_s < _t(8192, 8192, 8192, "tf32").time_s
    assert _t(8192, 8192, 8192, "tf32").time_s < _t(8192, 8192, 8192, "fp32").time_s


def test_amd_uses_its_own_tile_menu():
    mi300x = get_gpu("mi300x")
    est = gemm_time(GemmShape(8192, 8192, 8192), "bf16", mi300x, default_constants(mi300x))
    assert est.tile in {(256, 256), (256, 128), (128, 256)}


def test_more_bandwidth_helps_a_memory_bound_gemm():
    faster = dataclasses.replace(H200, hbm_bandwidth_tb_s=dataclasses.replace(H200.hbm_bandwidth_tb_s, value=9.6))
    assert _t(16, 8192, 8192, gpu=faster).time_s < _t(16, 8192, 8192).time_s


def test_unaligned_fallback_rate_depends_on_elements_per_load_not_element_size():
    from workbench.perf.gemm import unaligned_width

    # k = 4095: bf16 rows of 8190 bytes and tf32 rows of 16380 bytes are both 1 element aligned
    assert unaligned_width(GemmShape(4096, 4096, 4095), "bf16") == unaligned_width(GemmShape(4096, 4096, 4095), "tf32") == 1
    assert unaligned_width(GemmShape(4096, 4096, 4094), "bf16") == 2
    bf16, tf32 = _t(4096, 4096, 4095, "bf16"), _t(4096, 4096, 4095, "tf32")
    assert bf16.compute_s == pytest.approx(tf32.compute_s, rel=0.01)
    assert _t(4096, 4096, 4094).compute_s < bf16.compute_s  # 2-element loads beat 1-element loads


def test_memory_and_math_overlap_imperfectly_near_the_ridge_point():
    est = _t(65536, 512, 256)  # about as many seconds of memory traffic as of math
    assert est.time_s - C["gemm_launch_us"] * 1e-6 > max(est.compute_s, est.memory_s) * 1.05


def test_row_major_b_costs_a_layout_fixup_per_wave_where_the_instruction_reads_only_k_major():
    # Hopper's wgmma transposes only 16-bit operands: tf32 with torch.matmul's row-major B pays per wave;
    # fp8 (torch._scaled_mm takes B column-major) and bf16 do not.
    no_fixup = C.with_values({"gemm_layout_wave_overhead_us.default": 0.0})
    shape = GemmShape(8192, 8192, 2048)
    est = gemm_time(shape, "tf32", H200, C)
    extra = est.time_s - gemm_time(shape, "tf32", H200, no_fixup).time_s
    assert extra > 0.5 * est.waves * C["gemm_layout_wave_overhead_us.tf32"] * 1e-6
    for dtype in ("bf16", "fp8"):
        assert gemm_time(shape, dtype, H200, C).time_s == gemm_time(shape, dtype, H200, no_fixup).time_s
    b200 = get_gpu("b200")  # no K-major-only document in its catalog entry: no fix-up
    assert gemm_time(shape, "tf32", b200, C).time_s == gemm_time(shape, "tf32", b200, no_fixup).time_s


def test_tail_wave_softening_spreads_the_tail_over_every_unit():
    # 132 tiles of 256x128 fill one wave; 143 leave 11 tiles in a tail wave. Stream-K-like softening (1) prices
    # the tail as its share of the units; the spec default (~0) as a whole wave.
    spread = C.with_values({"gemm_tail_wave_softening": 1.0})
    one_wave = _t(256 * 12, 128 * 11, 4096)
    spill_whole = _t(256 * 13, 128 * 11, 4096)
    spill_spread = gemm_time(GemmShape(256 * 13, 128 * 11, 4096), "bf16", H200, spread)
    assert spill_spread.time_s < spill_whole.time_s
    assert spill_spread.time_s < 1.25 * one_wave.time_s * (13 / 12)


def test_fallback_kernels_pay_their_own_cost_per_wave_of_tiles():
    # 4097 columns: rows of B and C are 2-byte aligned, so the fallback path prices it. Every candidate tile has at
    # least one wave, so the time grows; the old pick, now dearer by one overhead per wave, bounds it from above.
    # An aligned GEMM does not pay it.
    slower = C.with_values({"gemm_unaligned_wave_overhead_us": C["gemm_unaligned_wave_overhead_us"] + 10.0})
    unaligned, aligned = GemmShape(8192, 4097, 4096), GemmShape(8192, 4096, 4096)
    base, more = gemm_time(unaligned, "bf16", H200, C), gemm_time(unaligned, "bf16", H200, slower)
    assert base.waves > 1 and more.time_s > base.time_s + 5e-6
    assert more.time_s <= base.time_s + 10e-6 * more.waves + 1e-12
    assert gemm_time(aligned, "bf16", H200, slower).time_s == gemm_time(aligned, "bf16", H200, C).time_s
