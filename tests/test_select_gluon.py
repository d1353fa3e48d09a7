"""The Gluon fp8 GEMM (gemm_gluon.py) in the selector's space and behind dispatch.triton_scaled_matmul: where it is offered,
that an exact request never gets a fast-only config, how it is priced before a sweep, and the dispatch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.kernels import dispatch, gemm_gluon
from workbench.kernels._common import KernelInputError, PlanCache, interpreting
from workbench.kernels.spaces import gluon_config_space, gluon_eligible, is_gluon
from workbench.select import config_for_device, rank_configs, select_config
from workbench.select import gemm as gemm_model
from workbench.select.profile import load_selection_profile

LLAMA_QKV = {"m": 8192, "n": 6144, "k": 4096}


def _gluon(shape=LLAMA_QKV, gpu="h200", dtype="fp8", layout="nt", **kwargs) -> list[dict]:
    return [c.config for c in rank_configs("gemm", shape, dtype, gpu, layout=layout, **kwargs) if is_gluon(c.config)]


def test_hopper_fp8_space_holds_the_gluon_configs_of_the_mode_asked():
    for accumulation in ("exact", "fast"):
        offered = _gluon(accumulation=accumulation, calibrated=False)
        assert sorted(map(gemm_model.config_key, offered)) == sorted(map(gemm_model.config_key,
                                                                         gluon_config_space(accumulation)))
        assert {c["ACCUMULATION"] for c in offered} == {accumulation}
    assert not _gluon(dtype="bf16")  # fp8 only
    assert not _gluon(layout="nn")  # fp8 wgmma reads B K-major
    assert not _gluon(shape={"m": 8192, "n": 6144, "k": 4100})  # K rows not 16-byte aligned
    assert not _gluon(gpu="b200") and not _gluon(gpu="mi300x")  # Hopper only
    assert not _gluon(gluon=False)  # a runtime without Gluon


def test_an_exact_request_never_gets_a_fast_only_config():
    fast_only = {gemm_model.config_key(c) for c in gluon_config_space("fast")} - {
        gemm_model.config_key(c) for c in gluon_config_space("exact")}
    assert fast_only  # 128 x 256 tiles: three fp32 copies do not fit the registers
    for shape in (LLAMA_QKV, {"m": 8192, "n": 4096, "k": 14336}, {"m": 256, "n": 1024, "k": 512}):
        for calibrated in (True, False):
            ranked = rank_configs("gemm", shape, "fp8", "h200", layout="nt", calibrated=calibrated)
            assert not fast_only & {c.key for c in ranked}
    with pytest.raises(Exception, match="accumulation"):
        rank_configs("gemm", LLAMA_QKV, "fp8", "h200", accumulation="fastest")


@pytest.mark.parametrize("accumulation", ["exact", "fast"])
def test_the_selectors_gluon_configs_pass_the_kernels_checks(accumulation):
    for config in gluon_config_space(accumulation):
        assert gemm_gluon.resolve_config(config, exact=accumulation == "exact") is config
    wide = next(c for c in gemm_gluon.config_space("fast") if c["BLOCK_N"] == 256)  # explicit use only
    with pytest.raises(KernelInputError, match="registers"):
        gemm_gluon.resolve_config(wide, exact=True)
    assert all(c["BLOCK_N"] == 128 for c in gluon_config_space(accumulation))  # see spaces.GLUON_SM90_SPACE


def test_eligibility_follows_the_kernels_operand_checks():
    assert gluon_eligible(8192, 6144, 4096, "nt", 1)
    assert not gluon_eligible(8192, 6144, 4096, "nt", 2)  # bf16: no Gluon kernel
    assert not gluon_eligible(8192, 6144, 4096, "nn", 1)  # B row-major
    assert not gluon_eligible(64, 64, 24, "nt", 1)  # K rows of 24 bytes
    assert not gluon_eligible(64, 12, 64, "nt", 1)  # bf16 output rows of 24 bytes


def test_before_a_sweep_gluon_is_priced_from_the_tma_fit(monkeypatch):
    import workbench.select as select

    fitted = load_selection_profile(get_h200(), "gemm", 1)
    assert fitted, "the H200 profile has an fp8 section"
    table = {k: v for k, v in fitted.items() if not k.startswith("gluon")}  # the profile as it was before run 7
    monkeypatch.setattr(select, "load_selection_profile", lambda *args, **kwargs: table)
    ranked = rank_configs("gemm", LLAMA_QKV, "fp8", "h200", layout="nt")
    assert ranked[0].source == "calibrated+anchored"
    by_key = {c.key: c.config for c in ranked}
    ws = by_key["gluon 128x128x128 g8 w8 s4 ws"]
    anchor = gemm_model.gluon_anchor(ws, table)
    tma = table["tma 128x128x128 g8 w8 s4 sub1"]  # the same tile, BLOCK_K and warps
    assert anchor == pytest.approx([v * gemm_model.GLUON_STEP_FRACTION[True] for v in tma])
    # without a profile, the spec model puts the warp-specialized Gluon configs ahead of the same TMA tile
    spec = {c.key: c.time_s for c in rank_configs("gemm", LLAMA_QKV, "fp8", "h200", layout="nt", calibrated=False)}
    assert spec["gluon 128x128x128 g8 w8 s4 ws"] < spec["tma 128x128x128 g8 w8 s4 sub1"]


def get_h200():
    from workbench.hardware import get_gpu
    return get_gpu("h200")


def test_device_picks_offer_gluon_only_when_the_runtime_says_it_runs():
    without = config_for_device("gemm", LLAMA_QKV, "fp8", "NVIDIA H200", layout="nt")
    assert without is not None and not is_gluon(without)
    exact = config_for_device("gemm", LLAMA_QKV, "fp8", "NVIDIA H200", layout="nt", gluon=True)
    fast = config_for_device("gemm", LLAMA_QKV, "fp8", "NVIDIA H200", layout="nt", gluon=True, accumulation="fast")
    assert exact == select_config("gemm", LLAMA_QKV, "fp8", "h200", layout="nt").config
    for picked, accumulation in ((exact, "exact"), (fast, "fast")):
        assert not is_gluon(picked) or picked["ACCUMULATION"] == accumulation


DEVICE = "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"
"""CPU tensors under the interpreter (CI); GPU tensors where the tests run compiled (the lead's H200 runs)."""


def _operands(m=64, n=32, k=48):
    a = torch.randn(m, k, device=DEVICE).to(torch.float8_e4m3fn)  # a: [M, K] row-major
    b = torch.randn(n, k, device=DEVICE).to(torch.float8_e4m3fn).t()  # b: [K, N] column-major
    return a, b, torch.tensor(1.5, device=DEVICE), torch.tensor(0.5, device=DEVICE)


@pytest.mark.parametrize("use_fast_accum", [False, True])
def test_scaled_matmul_routes_gluon_configs_to_the_gluon_kernel(monkeypatch, use_fast_accum):
    """The route plans the Gluon launch once (``gemm_gluon._plan_scaled``) and runs that plan on every call."""
    planned, runs = [], []
    monkeypatch.setattr(dispatch, "_SCALED_PLANS", PlanCache())  # the stand-in plan's route leaves with the test
    monkeypatch.setattr(gemm_gluon, "_plan_scaled", lambda a, b, sa, sb, bias, config, fast, out:
                        planned.append((config, fast)) or "plan")
    monkeypatch.setattr(gemm_gluon, "_run", lambda plan, a, b, bias, sa, sb, out: runs.append(plan))
    config = gluon_config_space("fast" if use_fast_accum else "exact")[0]
    for _ in range(2):
        dispatch.triton_scaled_matmul(*_operands(), config=config, use_fast_accum=use_fast_accum)
    assert planned == [(config, use_fast_accum)] and runs == ["plan", "plan"]


def test_a_config_of_the_other_mode_is_refused():
    with pytest.raises(KernelInputError, match="exact accumulation"):
        dispatch.triton_scaled_matmul(*_operands(), config=gluon_config_space("fast")[0])
    with pytest.raises(KernelInputError, match="fp8-only"):
        dispatch.triton_matmul(torch.randn(32, 32, device=DEVICE), torch.randn(32, 32, device=DEVICE),
                    config=gluon_config_space("exact")[0])


@pytest.mark.skipif(not interpreting(), reason="the CPU path runs under TRITON_INTERPRET=1 (tests/conftest.py)")
def test_where_gluon_cannot_run_an_explicit_config_says_so_and_none_is_picked():
    a, b, sa, sb = _operands()
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET" if gemm_gluon.HAS_GLUON else "triton"):
        dispatch.triton_scaled_matmul(a, b, sa, sb, config=gluon_config_space("exact")[0])
    assert not is_gluon(dispatch._default_config(a, b, "interpreter"))
    assert not dispatch._gluon_runs(a.device)


def test_load_sweeps_names_gluon_rows(tmp_path):
    from workbench.select.sweeps import kernel_of, load_sweeps

    config = json.dumps(gluon_config_space("exact")[0])
    assert kernel_of("triton", config) == "gluon" and kernel_of("vendor", "") == "vendor"
    fields = "part,shape_id,source,dtype,m,n,k,layout,kind,config,is_default,ms,error\n"
    line = 'gemm-fp8,g1,llm,fp8,64,64,64,nt,{kind},"{config}",0,{ms},\n'
    gemm_config = json.dumps({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4,
                              "num_stages": 3}).replace('"', '""')
    first, second = tmp_path / "first.csv", tmp_path / "gluon.csv"
    first.write_text(fields + line.format(kind="triton", config=gemm_config, ms=2) + line.format(kind="vendor", config="", ms=1))
    second.write_text(fields + line.format(kind="triton", config=config.replace('"', '""'), ms=0.9))
    frame = load_sweeps([first, second])
    assert sorted(zip(frame.kernel, frame.ms)) == [("gluon", 0.9), ("triton", 2), ("vendor", 1)]


def test_sweep_refuses_two_kernels_at_once():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "select" / "select_sweep.py"
    result = subprocess.run([sys.executable, str(script), "--out", "unused", "--tma", "--gluon"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and "pick one kernel" in result.stderr


def test_a_selector_chosen_gluon_config_compiles_for_sm90():
    """The exact pick for a Llama projection on the H200, built ahead of time for sm_90 (no GPU): no spills, and
    the overlapped wgmma wait the kernel exists for."""
    pytest.importorskip("triton.backends.nvidia")
    import triton

    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    if not gemm_gluon.HAS_GLUON or version < (3, 6):
        pytest.skip(f"triton {triton.__version__} has no Gluon API of 3.6/3.7")
    picked = next(c.config for c in rank_configs("gemm", LLAMA_QKV, "fp8", "h200", layout="nt") if is_gluon(c.config))
    code = ("import json, sys; from workbench.kernels import gemm_gluon as g\n"
            "print(json.dumps(g.inspect_build(json.loads(sys.argv[1]), exact=True).as_dict()))")
    result = subprocess.run([sys.executable, "-c", code, json.dumps(picked)], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    build = json.loads(result.stdout.strip().splitlines()[-1])
    assert build["spill_bytes"] == 0 and not build["serialized"] and build["wait_groups"] == [0, 1], build
