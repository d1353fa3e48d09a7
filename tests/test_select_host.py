"""workbench/select/host.py: runtime picks are priced per call, max(GPU time, the host time of the config's path), so
a small GEMM goes to the path that is cheapest to launch, and a large one keeps the pick GPU time alone gives."""

import pytest

from workbench.hardware import get_gpu
from workbench.kernels.spaces import gemm_config_space, gluon_config_space, split_k_config_space, tma_config_space
from workbench.paths import CALIBRATION_DIR_ENV
from workbench.perf.efficiency import default_constants
from workbench.select import host as host_model
from workbench.select import rank_configs, select_config, vendor_choice

H200 = get_gpu("h200-sxm")
LARGE = {"m": 8192, "n": 6144, "k": 4096}  # ~0.5 ms on the H200: no host time comes near it
TINY = {"m": 512, "n": 512, "k": 512}  # ~5 us of GPU time: every path is host-bound


def test_each_config_names_its_path():
    assert host_model.host_path(gemm_config_space("cuda", dtype_bytes=2)[0]) == "gemm"
    assert host_model.host_path(split_k_config_space(2)[0]) == "gemm_split_k"
    assert host_model.host_path(tma_config_space(2)[0]) == "tma"
    assert host_model.host_path(gluon_config_space("exact")[0]) == "gluon"


def test_host_times_come_from_the_spec_with_a_dtype_of_their_own_where_measured():
    constants = default_constants(H200)
    assert host_model.host_call_s("gemm", "fp8", constants) == pytest.approx(constants["host_call_us.gemm.fp8"] * 1e-6)
    assert host_model.host_call_s("gemm", "bf16", constants) == pytest.approx(constants["host_call_us.gemm"] * 1e-6)
    assert host_model.host_call_s("gemm_split_k", "bf16", constants) > host_model.host_call_s("gemm", "bf16", constants)
    assert "calibrate me" in constants.provenance["host_call_us.tma"]
    with pytest.raises(ValueError, match="path"):
        host_model.host_call_s("cublas", "bf16", constants)


def test_a_calibration_profile_overrides_a_host_time(tmp_path, monkeypatch):
    (tmp_path / "h200-sxm.yaml").write_text("gpu: h200-sxm\nconstants:\n  host_call_us.gluon: 12.5\n")
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    assert host_model.host_constants(H200)["host_call_us.gluon.fp8"] == 12.5
    assert host_model.host_constants(H200, calibrated=False)["host_call_us.gluon"] != 12.5


def test_gpu_time_ranking_is_unchanged_without_host_bound():
    ranked = rank_configs("gemm", TINY, "fp8", "h200", layout="nt")
    assert all(c.host_s == 0 for c in ranked)
    assert [c.time_s for c in ranked] == sorted(c.time_s for c in ranked)


@pytest.mark.parametrize("dtype, layout", [("bf16", "nn"), ("bf16", "nt"), ("fp8", "nt")])
def test_large_gemms_keep_their_gpu_time_pick(dtype, layout):
    gpu_only = select_config("gemm", LARGE, dtype, "h200", layout=layout)
    per_call = select_config("gemm", LARGE, dtype, "h200", layout=layout, host_bound=True)
    assert per_call.config == gpu_only.config and per_call.call_s == per_call.time_s > per_call.host_s > 0


def test_a_tiny_gemm_goes_to_the_path_cheapest_to_launch():
    ranked = rank_configs("gemm", TINY, "fp8", "h200", layout="nt", host_bound=True)
    best = ranked[0]
    assert best.time_s < best.host_s == best.call_s  # host-bound
    cheapest = min(c.host_s for c in ranked)
    assert best.host_s == cheapest
    # among the configs of that path, the GPU time still decides
    same_path = [c for c in ranked if host_model.host_path(c.config) == host_model.host_path(best.config)]
    assert best.time_s == min(c.time_s for c in same_path if c.call_s == best.call_s)
    assert [c.call_s for c in ranked] == sorted(c.call_s for c in ranked)


def test_the_shim_prices_both_sides_per_call():
    constants = host_model.host_constants(H200)
    choice = vendor_choice(TINY, "bf16", "h200", host_bound=True)
    gpu_only = vendor_choice(TINY, "bf16", "h200")
    assert choice.vendor_s == pytest.approx(max(gpu_only.vendor_s, host_model.host_call_s("vendor", "bf16", constants)))
    cheapest = min(host_model.host_call_s(path, "bf16", constants) for path in ("gemm", "gemm_split_k", "tma"))
    assert choice.triton_s >= cheapest  # no Triton path launches for less
    assert choice.choice == "vendor"
    large, large_gpu = (vendor_choice(LARGE, "fp8", "h200", layout="nt", host_bound=flag) for flag in (True, False))
    assert (large.choice, large.config, large.triton_s, large.vendor_s) == \
        (large_gpu.choice, large_gpu.config, large_gpu.triton_s, large_gpu.vendor_s)
