"""TMA persistent GEMM (workbench/kernels/gemm_tma.py) against the float64 torch reference, on the Triton CPU
interpreter (or an sm_90+ GPU with TRITON_INTERPRET=0): edge tiles, more tiles than programs, both B layouts,
host- and device-built descriptors, the split epilogue, fp8 scales and bias; plus the input checks, the config
space and an sm_90 cross-compilation of the default configs."""

import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.kernels import gemm_tma
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels.gemm import TOLERANCE, reference_matmul, reference_scaled_matmul
from workbench.kernels.gemm_tma import (
    SM90_SHARED_BYTES,
    config_space,
    matmul_tma,
    scaled_matmul_tma,
    shared_bytes,
    supported,
)

DEVICE = "cpu" if interpreting() else "cuda"
runs = pytest.mark.skipif(not supported(DEVICE if interpreting() or torch.cuda.is_available() else "cpu"),
                          reason="needs triton >= 3.4 (tensor descriptors) and TRITON_INTERPRET=1 or an sm_90+ GPU")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# 16 x 32 x 16 tiles and 3 programs: 37 x 40 has 3 x 2 = 6 tiles, so each program walks two (persistence)
SMALL = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, EPILOGUE_SUBTILE=1, WARP_SPECIALIZE=False,
             num_warps=4, num_stages=2, NUM_SMS=3)
VARIANTS = {"host": {}, "host-subtile": {"EPILOGUE_SUBTILE": 2},
            "device-ws": {"WARP_SPECIALIZE": True},
            "device-ws-subtile": {"WARP_SPECIALIZE": True, "EPILOGUE_SUBTILE": 2},
            # split-K: 72 = 5 K steps of 16 in 2 or 3 slices (the last slice's steps past K load zeros), 12 or 18
            # units on 3 programs
            "split2": {"SPLIT_K": 2}, "split3-subtile": {"SPLIT_K": 3, "EPILOGUE_SUBTILE": 2},
            # stream-K: 6 tiles on 4 programs, one whole wave of 4, then 2 tiles x 5 K steps in runs of 3: the
            # second tile's steps split over three runs
            "stream-k": {"STREAM_K": True, "NUM_SMS": 4}}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours.double() - ref.to(ours.device)).norm() / ref.norm()).item()


def _randn(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(DEVICE, dtype)


def _fp8(*shape) -> torch.Tensor:
    return torch.randn(*shape).to(DEVICE, torch.float8_e4m3fn)


def _ones(*shape) -> torch.Tensor:
    return torch.ones(shape, device=DEVICE)


@runs
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_layout", ["row-major", "column-major"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_matches_reference(dtype, b_layout, variant):
    m, n, k = 37, 40, 72  # edge tiles in M and N, a K tail (TMA zero-fills past K)
    a = _randn(m, k, dtype=DTYPES[dtype])
    b = _randn(n, k, dtype=DTYPES[dtype]).t() if b_layout == "column-major" else _randn(k, n, dtype=DTYPES[dtype])
    out = matmul_tma(a, b, {**SMALL, **VARIANTS[variant]})
    assert out.shape == (m, n) and out.dtype == DTYPES[dtype]
    assert _error(out, reference_matmul(a, b)) < TOLERANCE[dtype]


@runs
def test_default_config_and_poisoned_out_buffer():
    a, b = _randn(64, 48, dtype=torch.float16), _randn(48, 80, dtype=torch.float16)
    out = torch.full((64, 80), float("nan"), dtype=torch.float16, device=DEVICE)
    assert matmul_tma(a, b, out=out) is out
    assert _error(out, reference_matmul(a, b)) < TOLERANCE["fp16"]


@runs
@pytest.mark.parametrize("variant", ["host", "device-ws-subtile"])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_matmul_matches_reference(scaling, variant):
    m, n, k = 37, 40, 80
    a, b = _fp8(m, k), _fp8(n, k).t()  # b: [K, N] column-major, as torch._scaled_mm takes it
    scale_a = torch.rand(() if scaling == "tensor" else (m, 1)).to(DEVICE) + 0.5
    scale_b = torch.rand(() if scaling == "tensor" else (n,)).to(DEVICE) + 0.5
    bias = _randn(n, dtype=torch.bfloat16)
    out = scaled_matmul_tma(a, b, scale_a, scale_b, bias, {**SMALL, "BLOCK_K": 32, **VARIANTS[variant]})
    assert out.dtype == torch.bfloat16
    assert _error(out, reference_scaled_matmul(a, b, scale_a, scale_b, bias=bias)) < TOLERANCE["fp8"]


@runs
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_split_k_scaled_matmul_applies_scales_and_bias_once(scaling):
    m, n, k = 37, 40, 160
    a, b = _fp8(m, k), _fp8(n, k).t()
    scale_a = torch.rand(() if scaling == "tensor" else (m, 1)).to(DEVICE) + 0.5
    scale_b = torch.rand(() if scaling == "tensor" else (n,)).to(DEVICE) + 0.5
    bias = _randn(n, dtype=torch.bfloat16)
    out = scaled_matmul_tma(a, b, scale_a, scale_b, bias, {**SMALL, "BLOCK_K": 32, "SPLIT_K": 2})
    assert _error(out, reference_scaled_matmul(a, b, scale_a, scale_b, bias=bias)) < TOLERANCE["fp8"]


@runs
def test_split_k_leaves_its_arrival_counts_at_zero_and_sums_in_one_order():
    a, b = _randn(37, 200, dtype=torch.bfloat16), _randn(200, 40, dtype=torch.bfloat16)
    config = {**SMALL, "SPLIT_K": 4}
    first = matmul_tma(a, b, config)
    counts = gemm_tma.split_k_arrivals(first.device, 6)
    assert int(counts.abs().sum()) == 0  # every tile's last unit zeroed its count: the next launch needs no memset
    assert torch.equal(matmul_tma(a, b, config), first)  # the partials are added in slice order, not arrival order
    assert _error(first, reference_matmul(a, b)) < TOLERANCE["bf16"]


@runs
@pytest.mark.parametrize("programs", [4, 5, 7, 16])
def test_stream_k_shares_the_last_wave_by_k_steps(programs):
    """37 x 40 in 16 x 32 tiles: 6 tiles, 13 K steps each; 4, 5 and 7 programs leave 2, 1 and 6 tiles to stream-K
    (runs shorter and longer than a tile), 16 programs more than the tiles (no whole wave). The sum is the same
    twice and the counts are zero after."""
    a, b = _randn(37, 200, dtype=torch.bfloat16), _randn(200, 40, dtype=torch.bfloat16)
    config = {**SMALL, "STREAM_K": True, "NUM_SMS": programs}
    first = matmul_tma(a, b, config)
    assert _error(first, reference_matmul(a, b)) < TOLERANCE["bf16"]
    assert torch.equal(matmul_tma(a, b, config), first)
    assert int(gemm_tma.split_k_arrivals(first.device, 6).abs().sum()) == 0


@runs
@pytest.mark.parametrize("m, n, k", [(1, 8, 16), (37, 40, 16), (16, 32, 48), (1, 1024, 32)])
@pytest.mark.parametrize("extra", [{"SPLIT_K": 8}, {"STREAM_K": True, "NUM_SMS": 1}, {"STREAM_K": True, "NUM_SMS": 7}],
                         ids=["split8", "stream-1-program", "stream-7-programs"])
def test_split_and_stream_k_edges(m, n, k, extra):
    """Slices wholly past K (8 slices of 1-3 K steps: TMA loads zeros), one row, one K step per tile, and stream-K
    with a single program (every tile a whole wave) or more programs than K steps."""
    a, b = _randn(m, k, dtype=torch.bfloat16), _randn(k, n, dtype=torch.bfloat16)
    assert _error(matmul_tma(a, b, {**SMALL, **extra}), reference_matmul(a, b)) < TOLERANCE["bf16"]


@runs
def test_split_k_checks_name_the_problem():
    a, b = _randn(32, 32, dtype=torch.bfloat16), _randn(32, 32, dtype=torch.bfloat16)
    with pytest.raises(KernelInputError, match="SPLIT_K"):
        matmul_tma(a, b, {**SMALL, "SPLIT_K": 0})
    with pytest.raises(KernelInputError, match="WARP_SPECIALIZE"):
        matmul_tma(a, b, {**SMALL, "SPLIT_K": 2, "WARP_SPECIALIZE": True})
    with pytest.raises(KernelInputError, match="STREAM_K"):
        matmul_tma(a, b, {**SMALL, "SPLIT_K": 2, "STREAM_K": True})


@runs
def test_empty_dimensions():
    assert matmul_tma(_randn(0, 16, dtype=torch.float16), _randn(16, 8, dtype=torch.float16)).shape == (0, 8)
    bias = _randn(16, dtype=torch.bfloat16)
    out = scaled_matmul_tma(_fp8(4, 0), _fp8(16, 0).t(), _ones(), _ones(), bias)  # K = 0: the bias in every row
    assert torch.equal(out, bias.expand(4, 16))


@pytest.mark.parametrize("make, match", [
    (lambda: matmul_tma(_randn(8, 8), _randn(8, 8)), "a.dtype"),  # fp32: dispatch.triton_matmul
    (lambda: matmul_tma(_randn(8, 7, dtype=torch.float16), _randn(7, 8, dtype=torch.float16)), "16-byte aligned rows"),
    (lambda: matmul_tma(_randn(16, 8, dtype=torch.float16).t(), _randn(16, 8, dtype=torch.float16)), "unit inner"),
    (lambda: matmul_tma(_randn(8, 16, dtype=torch.float16), _randn(12, 16, dtype=torch.float16).t()), "multiple of 8"),
    (lambda: matmul_tma(_randn(8, 16, dtype=torch.float16), _randn(16, 32, dtype=torch.float16)[:, ::2]),
     "row-major or column-major"),
    (lambda: matmul_tma(_randn(8, 16, dtype=torch.float16), _randn(8, 8, dtype=torch.float16)), "b.shape"),
    (lambda: scaled_matmul_tma(_fp8(8, 16), _fp8(16, 16), _ones(), _ones()), "column-major"),
    (lambda: scaled_matmul_tma(_fp8(8, 16), _fp8(16, 16).t(), _ones(3), _ones()), "scale_a.shape"),
    (lambda: scaled_matmul_tma(_fp8(8, 32), _fp8(16, 32).t(), _ones(), _ones(), None, SMALL), "at least 32"),
    (lambda: matmul_tma(_randn(8, 16, dtype=torch.float16), _randn(16, 8, dtype=torch.float16),
                        {**SMALL, "BLOCK_K": 24}), "BLOCK_K"),
    (lambda: matmul_tma(_randn(8, 16, dtype=torch.float16), _randn(16, 8, dtype=torch.float16),
                        {"BLOCK_M": 64}), "config"),
])
def test_input_checks_name_the_problem(make, match):
    with pytest.raises(KernelInputError, match=match):
        make()


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_config_space_fits_shared_memory(dtype):
    space = config_space(dtype)
    assert 8 <= len(space) <= 12
    operand = 1 if dtype == "fp8" else 2
    for c in space:
        assert shared_bytes(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"], c["EPILOGUE_SUBTILE"],
                            operand) <= SM90_SHARED_BYTES
        assert c["BLOCK_K"] * operand >= 128  # one 128-byte swizzle row per K step
        assert not c["WARP_SPECIALIZE"] or c["num_warps"] == 4  # Triton's Hopper pass engages only at 4
    with pytest.raises(KernelInputError, match="dtype"):
        config_space("fp32")


def _sm90_inspections(configs: str, inspect: str, each: str) -> list[dict]:
    """``inspect`` (a ``gemm_tma.crosscompile`` call, module ``g``; ``spaces`` is ``s``) over the list ``cs`` that
    the statement ``configs`` makes, ``for each in cs``, in a process of its own with TRITON_INTERPRET=0 (sm_90
    builds on this CPU); the inspections as dicts."""
    code = (f"import json; from workbench.kernels import gemm_tma as g, spaces as s\n{configs}\n"
            f"print(json.dumps([{inspect}.as_dict() for {each} in cs]))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_default_configs_crosscompile_for_sm90():
    pytest.importorskip("triton.backends.nvidia")
    inspections = _sm90_inspections("cs = [(g.config_space(d)[0], d) for d in ('bf16', 'fp8')]"
                                    " + [(g.config_space('fp8')[5], 'fp8')]",
                                    "g.crosscompile(c, d)", "c, d")
    for r in inspections:
        config = json.loads(r["config"])
        if config["WARP_SPECIALIZE"] and _triton_older_than(3, 7):  # triton 3.6 (the H200 machine's) fails these
            assert "PassManager::run failed" in r["error"], r  # (spaces.TMA_SM90_SPACE); the selector skips them
            continue
        assert not r["error"] and r["fits"] and r["spills"] == 0, r
        estimate = shared_bytes(config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"],
                                config["EPILOGUE_SUBTILE"], 1 if r["dtype"] == "fp8" else 2)
        assert 0 <= r["shared_bytes"] - estimate <= 1024, (r, estimate)  # plus mbarriers
    if not _triton_older_than(3, 7):  # under 3.6 the warp-specialized build fails (above)
        assert inspections[-1]["occupancy"] == 12  # warp-specialized: a producer warpgroup joins the 4 warps


def test_split_k_space_builds_for_sm90_without_spills():
    """Every fp8 split config config=None may pick (``spaces.tma_split_config_space``, row scales as torch._scaled_mm
    takes them) builds for sm_90 in its shared memory without spills."""
    pytest.importorskip("triton.backends.nvidia")
    inspections = _sm90_inspections("cs = [c for c in s.tma_split_config_space(1) if c['SPLIT_K'] in (2, 4)]",
                                    "g.crosscompile(c, 'fp8', scaling='row')", "c")
    assert len(inspections) == 4
    for r in inspections:
        assert not r["error"] and r["fits"] and r["spills"] == 0, r


def test_supported_is_false_without_a_hopper_gpu():
    if interpreting():
        assert supported("cpu") == (gemm_tma.TensorDescriptor is not None and gemm_tma.HAS_WARP_SPECIALIZE)
    elif not torch.cuda.is_available():
        assert not supported()


def _triton_older_than(major: int, minor: int) -> bool:
    import triton

    return tuple(int(part) for part in triton.__version__.split(".")[:2]) < (major, minor)


@runs
def test_tf32_takes_fp32_operands_with_b_column_major():
    """fp32 inputs multiplied as tf32 (tf32 wgmma reads B only K-major): the front door copies a row-major B."""
    from workbench.kernels.dispatch import triton_matmul

    config = dict(SMALL, BLOCK_K=32)
    a, w = torch.randn(37, 64, device=DEVICE), torch.randn(40, 64, device=DEVICE)
    out = matmul_tma(a, w.t(), config, input_precision="tf32")
    assert out.dtype == torch.float32
    assert _error(out, reference_matmul(a, w.t())) < TOLERANCE["tf32"]
    row_major = w.t().contiguous()
    assert _error(triton_matmul(a, row_major, precision="tf32", config=dict(config, KERNEL="tma")),
                    reference_matmul(a, row_major)) < TOLERANCE["tf32"]
    with pytest.raises(KernelInputError, match="column-major"):
        matmul_tma(a, row_major, config, input_precision="tf32")
    with pytest.raises(KernelInputError, match="tf32"):
        matmul_tma(a, w.t(), config)
    with pytest.raises(KernelInputError, match="precision"):
        triton_matmul(a, row_major, config=dict(config, KERNEL="tma"))


def test_tf32_space_fits_shared_memory_with_its_fp32_store_buffer():
    from workbench.kernels.spaces import tma_shared_bytes

    space = config_space("tf32")
    assert space and all(c["BLOCK_K"] * 4 <= 256 for c in space)
    for c in space:
        assert tma_shared_bytes(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"], c["EPILOGUE_SUBTILE"], 4,
                                4) <= SM90_SHARED_BYTES
