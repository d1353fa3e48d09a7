"""Split-K in gemm.py (issue 20): K slices per output tile, fp32 partials summed by a second kernel, the bias once,
scales per partial; and the plan caches: a repeated call resolves no config."""

import pytest
import torch

from workbench.kernels import attention, dispatch, gemm
from workbench.kernels._common import KernelInputError, clear_plan_caches, interpreting
from workbench.kernels.dispatch import triton_matmul as matmul
from workbench.kernels.dispatch import triton_scaled_matmul as scaled_matmul
from workbench.kernels.gemm import TOLERANCE, reference_matmul, reference_scaled_matmul

pytestmark = pytest.mark.skipif(not interpreting() and not torch.cuda.is_available(),
                                reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cpu" if interpreting() else "cuda"
TILES = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)
DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def _error(ours, ref) -> float:
    return ((ours.double() - ref.to(ours.device)).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("m,n,k,split", [(37, 53, 100, 3),  # K tail: 7 BLOCK_K steps over 3 slices
                                         (16, 64, 256, 4),
                                         (20, 24, 40, 4)])  # 3 steps over 4 slices: the last slice is empty
def test_split_k_matches_the_reference_and_the_unsplit_kernel(dtype, m, n, k, split):
    a, b, bias = _randn(m, k, dtype=dtype), _randn(k, n, dtype=dtype, seed=1), _randn(n, dtype=dtype, seed=2)
    out = matmul(a, b, bias=bias, config=dict(TILES, SPLIT_K=split))
    ref = reference_matmul(a, b, bias=bias)
    assert out.dtype == dtype and out.shape == (m, n)
    assert _error(out, ref) < TOLERANCE[DTYPES[dtype]]
    unsplit = matmul(a, b, bias=bias, config=TILES)
    assert _error(out, ref) <= 1.05 * _error(unsplit, ref) + 1e-6  # the split costs no accuracy


def test_split_k_takes_transposed_operands():
    a, b = _randn(64, 48).t(), _randn(40, 64, seed=1).t()  # a: [48, 64] column-major, b: [64, 40] column-major
    assert _error(matmul(a, b, config=dict(TILES, SPLIT_K=2)), reference_matmul(a, b)) < TOLERANCE["fp32"]


def test_split_k_partials_are_summed_in_fp32_before_the_bf16_cast():
    """Slice 0's partial is 257 (not a bf16 number: it rounds to 256), slice 1's is 1. In fp32 the sum is 258,
    which bf16 holds exactly; bf16 partials would give 256 + 1 -> 256."""
    k = 32  # two slices of one BLOCK_K = 16 step each
    a = torch.ones(16, k, dtype=torch.bfloat16, device=DEVICE)
    b = torch.zeros(k, 16, dtype=torch.bfloat16, device=DEVICE)
    b[0], b[1], b[16] = 256.0, 1.0, 1.0  # column sums: 257 over K 0-15, 1 over K 16-31
    out = matmul(a, b, config=dict(TILES, SPLIT_K=2))
    assert out.dtype == torch.bfloat16 and torch.all(out == 258.0)
    assert torch.all(matmul(a, b, config=TILES) == 258.0)  # one fp32 accumulator: the same


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_split_k_fp8_applies_the_scales_to_every_partial_and_the_bias_once(scaling):
    m, n, k = 37, 48, 96
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(0)).to(torch.float8_e4m3fn).to(DEVICE)
    b = torch.randn(n, k, generator=torch.Generator().manual_seed(1)).to(torch.float8_e4m3fn).to(DEVICE).t()
    if scaling == "tensor":
        scale_a, scale_b = torch.tensor(0.7, device=DEVICE), torch.tensor(1.3, device=DEVICE)
    else:
        scale_a, scale_b = _randn(m, seed=2).abs() + 0.5, _randn(n, seed=3).abs() + 0.5
    bias = _randn(n, dtype=torch.bfloat16, seed=4)
    config = dict(TILES, BLOCK_K=32, SPLIT_K=3)
    out = scaled_matmul(a, b, scale_a, scale_b, bias=bias, config=config)
    assert out.dtype == torch.bfloat16
    assert _error(out, reference_scaled_matmul(a, b, scale_a, scale_b, bias=bias)) < TOLERANCE["fp8"]


def test_split_k_refuses_an_activation_and_bad_factors():
    a, b = _randn(16, 32), _randn(32, 16, seed=1)
    with pytest.raises(KernelInputError, match=r"config\['SPLIT_K'\].*activation"):
        matmul(a, b, activation="relu", config=dict(TILES, SPLIT_K=2))
    for bad in (0, 17, 2.0, True):
        with pytest.raises(KernelInputError, match=r"config\['SPLIT_K'\]"):
            matmul(a, b, config=dict(TILES, SPLIT_K=bad))


def test_a_repeated_gemm_call_resolves_no_config(monkeypatch):
    clear_plan_caches()
    calls = []
    real = gemm.default_config

    def counting(*args, **kwargs):
        calls.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm, "default_config", counting)
    a, b = _randn(24, 32), _randn(32, 40, seed=1)
    first = dispatch.triton_matmul(a, b)
    resolved = len(calls)
    assert resolved >= 1
    second = dispatch.triton_matmul(_randn(24, 32, seed=2), _randn(32, 40, seed=3))  # same shapes and strides: the plan
    assert len(calls) == resolved and first.shape == second.shape


def test_a_repeated_attention_call_resolves_no_config(monkeypatch):
    clear_plan_caches()
    calls = []
    real = attention._resolve_config

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "_resolve_config", counting)
    q, k, v = (_randn(1, 2, 20, 16, seed=s).requires_grad_() for s in range(3))
    attention.flash_attention(q, k, v, causal=True).sum().backward()
    assert sorted(calls) == ["bwd", "fwd"]
    attention.flash_attention(q, k, v, causal=True).sum().backward()  # forward and backward from the cache
    assert sorted(calls) == ["bwd", "fwd"]


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_swap_ab_computes_c_transposed_with_the_bias_along_its_rows(layout, split):
    """A swap-AB config (spaces.skinny_config_space) launches C^T = B^T A^T: M = 5 rows become the kernel's
    columns; the bias over N runs along the kernel's rows (BIAS_PER_ROW); C is written row-major all the same."""
    m, n, k = 5, 40, 70
    a = _randn(k, m).t() if layout[0] == "t" else _randn(m, k)
    b = _randn(n, k, seed=1).t() if layout[1] == "t" else _randn(k, n, seed=1)
    bias = _randn(n, seed=2)
    config = dict(TILES, SWAP_AB=True, **({"SPLIT_K": split} if split > 1 else {}))
    out = matmul(a, b, bias=bias, config=config)
    assert out.shape == (m, n) and out.is_contiguous()
    assert _error(out, reference_matmul(a, b, bias=bias)) < TOLERANCE["fp32"]
    if split == 1:  # an activation needs no split
        relu = matmul(a, b, bias=bias, activation="relu", config=config)
        assert _error(relu, reference_matmul(a, b, bias=bias, activation="relu")) < TOLERANCE["fp32"]


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_swap_ab_fp8_swaps_the_scales_with_the_operands(scaling):
    m, n, k = 8, 48, 64
    a8 = _randn(m, k).to(torch.float8_e4m3fn)
    b8 = _randn(n, k, seed=1).to(torch.float8_e4m3fn).t()
    scale_a = torch.rand(m, 1, device=DEVICE) + 0.5 if scaling == "row" else torch.tensor(0.7, device=DEVICE)
    scale_b = torch.rand(1, n, device=DEVICE) + 0.5 if scaling == "row" else torch.tensor(1.3, device=DEVICE)
    out = scaled_matmul(a8, b8, scale_a, scale_b, config=dict(TILES, BLOCK_K=32, SWAP_AB=True))
    ref = reference_scaled_matmul(a8, b8, scale_a, scale_b)
    assert _error(out.float(), ref) < TOLERANCE["fp8"]


def test_swap_ab_must_be_a_bool():
    a, b = _randn(8, 32), _randn(32, 16, seed=1)
    with pytest.raises(KernelInputError, match="SWAP_AB"):
        matmul(a, b, config=dict(TILES, SWAP_AB=1))
