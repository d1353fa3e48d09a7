"""The launch-plan caches of the GEMM and attention wrappers (issue 20): a repeated call reuses its plan, a call that
differs in anything the plan depends on (layout, dtype, options, config) gets its own and the right result, and a bad
call still fails naming the argument, also after a good call of the same shapes."""

import pytest
import torch

from workbench.kernels import attention, dispatch, gemm, gemm_tma
from workbench.kernels._common import KernelInputError, PlanCache, clear_plan_caches, interpreting

pytestmark = pytest.mark.skipif(not interpreting() and not torch.cuda.is_available(),
                                reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cpu" if interpreting() else "cuda"
SMALL_TILES = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def _error(ours, ref) -> float:
    return ((ours.double() - ref.to(ours.device)).norm() / ref.norm()).item()


def test_repeated_calls_reuse_one_plan_and_new_layouts_get_their_own():
    clear_plan_caches()
    a, b = _randn(37, 29), _randn(29, 53, seed=1)
    for _ in range(3):
        assert _error(dispatch.triton_matmul(a, b), gemm.reference_matmul(a, b)) < gemm.TOLERANCE["fp32"]
    assert len(dispatch._MATMUL_PLANS) == 1
    a2, b2 = _randn(37, 29, seed=2), _randn(29, 53, seed=3)  # other tensors, same shapes and strides: same plan
    assert _error(dispatch.triton_matmul(a2, b2), gemm.reference_matmul(a2, b2)) < gemm.TOLERANCE["fp32"]
    assert len(dispatch._MATMUL_PLANS) == 1
    a_col = a.t().contiguous().t()  # the same values column-major: another layout, another plan
    assert _error(dispatch.triton_matmul(a_col, b), gemm.reference_matmul(a, b)) < gemm.TOLERANCE["fp32"]
    assert len(dispatch._MATMUL_PLANS) == 2


@pytest.mark.parametrize("change", ["fp16", "bias_relu", "out_fp32", "strided_bias", "small_tiles", "k_tail"])
def test_calls_that_differ_in_what_a_plan_depends_on_get_the_right_result(change):
    a, b = _randn(37, 32), _randn(32, 53, seed=1)
    dispatch.triton_matmul(a, b)  # a plan for the plain call first: none of the calls below may reuse it
    kwargs, ref_kwargs = {}, {}
    if change == "fp16":
        a, b = a.half(), b.half()
    elif change == "bias_relu":
        kwargs = ref_kwargs = dict(bias=_randn(53, seed=4), activation="relu")
    elif change == "out_fp32":
        a, b, kwargs = a.half(), b.half(), dict(out_dtype=torch.float32)
    elif change == "strided_bias":  # a bias view with stride 2: the kernel reads it with unit stride, after a copy
        bias = _randn(106, seed=5)[::2]
        kwargs = ref_kwargs = dict(bias=bias)
    elif change == "small_tiles":
        kwargs = dict(config=SMALL_TILES)
    else:
        a, b = a[:, :29], b[:29]  # K = 29 in views of the same buffers (strides kept, a K tail)
    dtype = "fp16" if a.dtype == torch.float16 else "fp32"
    assert _error(dispatch.triton_matmul(a, b, **kwargs), gemm.reference_matmul(a, b, **ref_kwargs)) < gemm.TOLERANCE[dtype]


@pytest.mark.parametrize("bad,argument", [
    (dict(config=dict(SMALL_TILES, BLOCK_K=24)), "config['BLOCK_K']"),
    (dict(activation="tanh"), "activation"),
    (dict(precision="bf16"), "precision"),
    (dict(bias=torch.zeros(53, device="meta")), "device"),
    (dict(config={"BLOCK_M": [16]}), "config"),  # an unhashable value: the unchecked path checks it
])
def test_bad_calls_fail_after_good_calls_of_the_same_shapes(bad, argument):
    a, b = _randn(37, 29), _randn(29, 53)
    dispatch.triton_matmul(a, b, config=SMALL_TILES)
    dispatch.triton_matmul(a, b, bias=_randn(53), activation="relu")
    with pytest.raises(KernelInputError) as info:
        dispatch.triton_matmul(a, b, **bad)
    assert str(info.value).startswith(f"{argument}: got ")


def test_plan_cache_is_bounded():
    cache = PlanCache()
    cache.LIMIT = 3
    for i in range(7):
        cache.put(i, str(i))
    assert len(cache) <= 3 and cache[6] == "6"


@pytest.mark.parametrize("scales", ["row_2d", "row_1d", "tensor_0d", "tensor_1d", "strided_row"])
def test_scaled_matmul_takes_every_scale_form(scales):
    m, n, k = 40, 48, 32
    a = torch.randn(m, k).to(DEVICE, torch.float8_e4m3fn)
    b = torch.randn(n, k).to(DEVICE, torch.float8_e4m3fn).t()  # column-major [K, N]
    if scales == "row_2d":
        sa, sb = _randn(m, 1).abs() + 0.5, _randn(1, n, seed=1).abs() + 0.5
    elif scales == "row_1d":
        sa, sb = _randn(m).abs() + 0.5, _randn(n, seed=1).abs() + 0.5
    elif scales == "tensor_0d":
        sa, sb = torch.tensor(0.5, device=DEVICE), torch.tensor(2.0, device=DEVICE)
    elif scales == "tensor_1d":
        sa, sb = torch.tensor([0.5], device=DEVICE), torch.tensor([2.0], device=DEVICE)
    else:  # [M, 1] and [1, N] views that are not contiguous: copied for the kernel
        sa, sb = (_randn(m, 2).abs() + 0.5)[:, :1], (_randn(n, 2, seed=1).abs() + 0.5)[:, :1].t()
        assert not sa.is_contiguous() and not sb.is_contiguous()
    for _ in range(2):  # the second call runs the cached plan
        out = dispatch.triton_scaled_matmul(a, b, sa, sb)
        assert _error(out, gemm.reference_scaled_matmul(a, b, sa, sb)) < gemm.TOLERANCE["fp8"]


tma = pytest.mark.skipif(not gemm_tma.supported(DEVICE if interpreting() or torch.cuda.is_available() else "cpu"),
                         reason="needs triton >= 3.4 (tensor descriptors) and TRITON_INTERPRET=1 or an sm_90+ GPU")


@tma
def test_tma_descriptors_are_rebuilt_over_each_calls_tensors():
    config = gemm_tma.config_space("interpreter")[0]
    for seed in range(3):  # the first call builds the descriptors, the next ones copy their fields
        a, b = _randn(40, 32, dtype=torch.float16, seed=seed), _randn(32, 48, dtype=torch.float16, seed=seed + 7)
        out = gemm_tma.matmul_tma(a, b, config)
        assert torch.allclose(out.float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)
    plans = [p for p in gemm_tma._MATMUL_PLANS.values() if p.out_shape == (40, 48)]
    assert plans and all(p.descriptors is not None and p.descriptors[0]["base"] is None for p in plans)


@tma
def test_a_cached_tma_plan_still_checks_the_address():
    config = gemm_tma.config_space("interpreter")[0]
    a, b = _randn(40, 32, dtype=torch.float16), _randn(32, 48, dtype=torch.float16)
    gemm_tma.matmul_tma(a, b, config)
    buffer = _randn(40 * 32 + 1, dtype=torch.float16)
    shifted = buffer[1:].view(40, 32)  # the same shape and strides, 2 bytes off a 16-byte boundary
    with pytest.raises(KernelInputError, match="16-byte aligned"):
        gemm_tma.matmul_tma(shifted, b, config)


def _qkv(b=1, hq=2, hkv=1, s=20, d=16, requires_grad=False):
    q, k, v = (_randn(b, h, s, d, seed=i) for i, h in enumerate((hq, hkv, hkv)))
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def test_attention_launches_directly_without_a_gradient_to_record():
    q, k, v = _qkv()
    assert attention.flash_attention(q, k, v).grad_fn is None
    qg, kg, vg = _qkv(requires_grad=True)
    assert attention.flash_attention(qg, kg, vg).grad_fn is not None
    with torch.no_grad():
        out = attention.flash_attention(qg, kg, vg)
    assert out.grad_fn is None
    assert _error(out, attention.reference_attention(q, k, v)) < 1e-5


def test_attention_bad_calls_fail_after_good_ones():
    q, k, v = _qkv()
    attention.flash_attention(q, k, v, causal=True)
    with pytest.raises(KernelInputError, match=r"^causal\b"):
        attention.flash_attention(q, k, v, causal=1)  # 1 == True as a key: it must not hit the cached plan
    with pytest.raises(KernelInputError, match=r"^scale\b"):
        attention.flash_attention(q, k, v, causal=True, scale=-1.0)


def test_attention_backward_takes_a_strided_output_and_grad():
    q, k, v = _qkv(s=24)
    do = _randn(1, 2, 24, 16, seed=9)
    o, lse = attention.flash_attention_fwd(q, k, v, causal=True)
    expected = attention.flash_attention_bwd(do, q, k, v, o, lse, causal=True)
    o_strided = o.transpose(1, 2).contiguous().transpose(1, 2)  # the same values in [B, S, H, D] memory
    do_strided = do.transpose(1, 2).contiguous().transpose(1, 2)
    got = attention.flash_attention_bwd(do_strided, q, k, v, o_strided, lse, causal=True)
    for ours, ref in zip(got, expected):
        assert torch.allclose(ours, ref, atol=1e-6)


@tma
def test_config_none_hands_a_bf16_call_the_tma_pick_and_falls_back_on_a_misaligned_base(monkeypatch):
    """config=None on Hopper: the selector ranks TMA's bf16 configs too (the dgrad layout, B column-major); a cached
    TMA route still runs gemm.py for a view whose base is not 16-byte aligned (TMA would refuse it)."""
    clear_plan_caches()
    tma_config = gemm_tma.config_space("interpreter")[0] if interpreting() else gemm_tma.config_space("bf16")[0]
    asked = []

    def default_config(a, b, kind, accumulation="exact", *, tma=None, split_k=True):
        asked.append(tma)
        return tma_config if tma else dict(SMALL_TILES)

    routed = []
    real_tma = gemm_tma.matmul_tma
    monkeypatch.setattr(dispatch, "_tma_takes", lambda a, b: True)
    monkeypatch.setattr(dispatch, "_default_config", default_config)
    monkeypatch.setattr(gemm, "default_config", lambda *args, **kw: default_config(*args, tma=False))
    monkeypatch.setattr(gemm_tma, "matmul_tma", lambda a, b, config=None, **kw: routed.append(config) or real_tma(a, b, config, **kw))
    w = _randn(48, 40, dtype=torch.float16, seed=1)  # a weight [N, K]: b = w.t() is column-major ("nt")
    a = _randn(32, 40, dtype=torch.float16)
    assert _error(dispatch.triton_matmul(a, w.t()), gemm.reference_matmul(a, w.t())) < gemm.TOLERANCE["fp16"]
    assert routed == [tma_config] and True in asked
    buffer = _randn(32 * 40 + 8, dtype=torch.float16, seed=2)
    shifted = buffer[4:4 + 32 * 40].view(32, 40)  # same shape and strides, base 8 bytes off 16-byte alignment
    assert shifted.data_ptr() % 16 and len(dispatch._MATMUL_PLANS) == 1
    assert _error(dispatch.triton_matmul(shifted, w.t()), gemm.reference_matmul(shifted, w.t())) < gemm.TOLERANCE["fp16"]
    assert routed == [tma_config] and len(dispatch._MATMUL_PLANS) == 1  # the cached plan ran gemm.py, no new plan
