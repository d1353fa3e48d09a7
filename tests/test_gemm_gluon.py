"""Gluon fp8 GEMM (workbench/kernels/gemm_gluon.py) without a GPU: Gluon has no interpreter, so these check the
host side (input validation, the empty-product shortcuts, the config checks and space) and compile the default
configs for sm_90 ahead of time (registers, spills, shared memory, the overlapped wgmma wait). Numerics and
speed are benchmarks/archive/gluon_fp8_probe.py's job on an H200."""

import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.kernels import gemm_gluon
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels.gemm_gluon import (
    SM90_SHARED_BYTES,
    accumulator_registers,
    config_space,
    resolve_config,
    scaled_matmul_gluon,
    shared_bytes,
    supported,
)

host_side = pytest.mark.skipif(not interpreting(), reason="the host-side checks run on CPU tensors under "
                               "TRITON_INTERPRET=1 (tests/conftest.py sets it)")


def _operands(m=64, n=32, k=48):
    a = torch.randn(m, k).to(torch.float8_e4m3fn)  # a: [M, K] row-major
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()  # b: [K, N] column-major
    return a, b, torch.tensor(1.5), torch.tensor(0.5)


@host_side
@pytest.mark.parametrize("case, match", [
    ("a_bf16", "a_fp8.dtype"),
    ("b_row_major", "column-major"),
    ("scale_fp16", "scale_a.dtype"),
    ("scale_shape", "scale_b.shape"),
    ("bias_shape", "bias"),
    ("n_unaligned", "N: got 12"),
    ("k_mismatch", "b_fp8.shape"),
    ("out_dtype", "out.dtype"),
])
def test_bad_inputs_name_the_argument(case, match):
    a, b, sa, sb = _operands()
    bias, out = None, None
    if case == "a_bf16":
        a = a.to(torch.bfloat16)
    elif case == "b_row_major":
        b = b.contiguous()
    elif case == "scale_fp16":
        sa = sa.half()
    elif case == "scale_shape":
        sb = torch.ones(5)
    elif case == "bias_shape":
        bias = torch.ones(31)
    elif case == "n_unaligned":
        a, b, sa, sb = _operands(n=12)
    elif case == "k_mismatch":
        b = torch.randn(32, 40).to(torch.float8_e4m3fn).t()
    elif case == "out_dtype":
        out = torch.empty(64, 32)
    with pytest.raises(KernelInputError, match=match):
        scaled_matmul_gluon(a, b, sa, sb, bias, out=out)


@host_side
def test_empty_products_skip_the_kernel():
    a, b, sa, sb = _operands(m=0)
    assert scaled_matmul_gluon(a, b, sa, sb).shape == (0, 32)
    a, b, sa, sb = _operands(k=0)
    bias = torch.randn(32)
    out = scaled_matmul_gluon(a, b, sa, sb, bias)  # the epilogue of a zero accumulator: the bias, in bf16
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, bias.to(torch.bfloat16).expand(64, 32))


@host_side
def test_valid_inputs_on_the_interpreter_say_gluon_needs_a_gpu():
    a, b, sa, sb = _operands()
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET" if gemm_gluon.HAS_GLUON else "triton"):
        scaled_matmul_gluon(a, b, sa, sb)


def test_supported_is_false_without_a_hopper_gpu():
    if interpreting() or not torch.cuda.is_available():
        assert not supported()


@pytest.mark.parametrize("accumulation", ["exact", "fast"])
def test_config_space_passes_its_own_checks(accumulation):
    space = config_space(accumulation)
    assert resolve_config(None, exact=accumulation == "exact") == space[0]
    for config in space:
        assert resolve_config(config, exact=accumulation == "exact") is config
        assert shared_bytes(config) <= SM90_SHARED_BYTES
    assert any(c["WARP_SPECIALIZE"] for c in space) and any(not c["WARP_SPECIALIZE"] for c in space)


@pytest.mark.parametrize("change, exact, match", [
    ({"BLOCK_N": 256, "NUM_STAGES": 3}, True, "registers per thread"),  # three 128-register copies: the fast path only
    ({"BLOCK_M": 64}, True, "BLOCK_M"),  # 8 warps = 2 warpgroups = 128 rows
    ({"BLOCK_N": 512}, False, "BLOCK_N"),
    ({"BLOCK_K": 96}, True, "BLOCK_K"),
    ({"num_warps": 12}, True, "num_warps"),
    ({"NUM_STAGES": 2, "WARP_SPECIALIZE": False}, True, "NUM_STAGES"),  # inline loads deadlock with 2 (the loader warp does not)
    ({"NUM_STAGES": 1, "WARP_SPECIALIZE": True}, True, "NUM_STAGES"),
    ({"NUM_STAGES": 7}, True, "shared memory"),
    ({"WARP_SPECIALIZE": "yes"}, True, "WARP_SPECIALIZE"),
    ({"GROUP_M": 0}, True, "GROUP_M"),
])
def test_bad_configs_are_refused(change, exact, match):
    config = {**config_space("exact")[0], **change}
    with pytest.raises(KernelInputError, match=match):
        resolve_config(config, exact=exact)


def test_two_stages_suffice_with_the_loader_warp():
    config = {**config_space("exact")[0], "NUM_STAGES": 2, "WARP_SPECIALIZE": True}
    assert resolve_config(config) is config


def test_config_missing_a_key_lists_the_keys():
    config = dict(config_space("exact")[0])
    del config["NUM_STAGES"]
    with pytest.raises(KernelInputError, match="NUM_STAGES"):
        resolve_config(config)


def test_estimates_follow_the_tile():
    config = {**config_space("exact")[0], "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "NUM_STAGES": 4,
              "num_warps": 8}
    assert shared_bytes(config) == 4 * (128 + 128) * 128 + 128 * 128 * 2 + 2 * 4 * 8
    assert accumulator_registers(config, exact=True) == 3 * 64  # fp32 sum + two partials, 64 each per thread
    assert accumulator_registers(config, exact=False) == 64


def test_default_configs_compile_for_sm90():
    """Ahead-of-time sm_90 builds (no GPU): each fits, does not spill, and the exact main loop waits with
    wgmma.wait_group 1 without ptxas serializing the wgmmas (the point of this kernel)."""
    pytest.importorskip("triton.backends.nvidia")
    import triton

    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    if not gemm_gluon.HAS_GLUON or version < (3, 6):
        pytest.skip(f"triton {triton.__version__} cannot build this kernel: it is written for the Gluon API of "
                    "triton 3.6 and 3.7 (triton.experimental.gluon)")
    code = ("import json; from workbench.kernels import gemm_gluon as g\n"
            "cases = [(c, acc) for acc in ('exact', 'fast') for c in g.config_space(acc)[:3]]\n"
            "print(json.dumps([[c, acc, g.inspect_build(c, exact=acc == 'exact').as_dict()] for c, acc in cases]))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    builds = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(builds) == 6
    for config, accumulation, build in builds:
        assert build["spill_bytes"] == 0 and not build["serialized"], (config, build)
        assert 0 <= build["shared_bytes"] - shared_bytes(config) <= 1024, (config, build)  # + WS bookkeeping
        assert build["shared_bytes"] <= SM90_SHARED_BYTES
        assert build["wait_groups"] == [0, 1], (config, build)  # 1 in the main loop, 0 at the end of a tile
        assert build["launched_warps"] == config["num_warps"] + (4 if config["WARP_SPECIALIZE"] else 0)
        if not config["WARP_SPECIALIZE"]:  # one register file for all warps: the accumulators must fit in it
            assert accumulator_registers(config, exact=accumulation == "exact") <= build["registers"] <= 255


on_hopper = pytest.mark.skipif(interpreting() or not supported(), reason="runs the kernel: needs an sm_90 GPU with "
                               "TRITON_INTERPRET=0 (CI has neither; the lead runs these on the H200)")


@on_hopper
@pytest.mark.parametrize("exact, config", [(mode == "exact", c) for mode in ("exact", "fast") for c in config_space(mode)],
                         ids=lambda v: v if isinstance(v, bool) else
                         f"{v['BLOCK_N']}-s{v['NUM_STAGES']}-{'ws' if v['WARP_SPECIALIZE'] else 'inline'}")
@pytest.mark.parametrize("m, n, k, rows, bias", [
    (300, 272, 208, False, False),  # M, N edges and K not a multiple of BLOCK_K (K * 1 byte: 16-byte rows for TMA)
    (1024, 1024, 1024, True, True),  # row scales and bias; more tiles than a wave on some GPUs
    (8192, 4096, 512, False, False),  # 2048 tiles on 132 SMs: each program runs many tiles (ring phases)
])
def test_matches_the_float64_reference_on_the_gpu(exact, config, m, n, k, rows, bias):
    from workbench.kernels.gemm import reference_scaled_matmul

    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5 if rows else torch.rand((), device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5 if rows else torch.rand((), device="cuda") + 0.5
    c = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    out = scaled_matmul_gluon(a, b, sa, sb, c, config, use_fast_accum=not exact)
    ref = reference_scaled_matmul(a, b, sa, sb, bias=c)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    try:  # _scaled_mm's own error on the same inputs, where it takes them (bias with row scales may not be)
        vendor = torch._scaled_mm(a, b, sa, sb, bias=c, out_dtype=torch.bfloat16, use_fast_accum=not exact)
        bound = 1.2 * ((vendor.double() - ref).norm() / ref.norm()).item() + 1e-4
    except RuntimeError:
        bound = 3e-3  # bf16 output rounding (~1.7e-3 measured on these shapes) with margin
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert err <= bound, (err, bound)
