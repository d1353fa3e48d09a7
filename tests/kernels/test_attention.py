"""Flash attention (workbench/kernels/attention.py) against the float64 torch reference, on the Triton CPU
interpreter: tiny shapes with sequence tails, causal and not, GQA, fp32/bf16/fp16; plus input checks, config
space, FLOP counts and bench cases."""

import pytest
import torch
import triton

from workbench.kernels import attention
from workbench.kernels._common import KernelInputError, clear_plan_caches, interpreting
from workbench.kernels.cases import attention_cases as bench_cases
from workbench.kernels.attention import (
    TOLERANCE, bytes_moved, config_space, flash_attention, flash_attention_bwd, flash_attention_fwd,
    flops, reference_attention, reference_attention_grads,
)
from workbench.kernels.spaces import attention_pinned_config, attention_seq_bucket
from workbench.rows import row_to_op

pytestmark = pytest.mark.skipif(not interpreting() and not torch.cuda.is_available(),
                                reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cpu" if interpreting() else "cuda"

# Tighter than the bench tolerances: at these sizes the errors are output rounding (bf16 ~3e-3, fp16 ~3e-4).
TEST_TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
TILES = {"16x16": (16, 16), "32x16": (32, 16), "16x32": (16, 32)}


def _config(tiles: str) -> dict:
    m, n = TILES[tiles]
    return {"BLOCK_M": m, "BLOCK_N": n, "num_warps": 4, "num_stages": 1}


def _error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error; absolute when the reference is ~0 (the gradients at S=1 vanish)."""
    return ((ours.double() - ref).norm() / max(ref.norm().item(), 1.0)).item()


def _inputs(b, hq, hkv, s, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(b, h, s, d, generator=gen) for h in (hq, hkv, hkv, hq))
    return tuple(t.to(DEVICE, dtype) for t in (q, k, v, do))


def _reference_grads(q, k, v, do, causal, scale=None):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference_attention(q64, k64, v64, causal, scale, return_lse=True)
    grads = torch.autograd.grad(o64, (q64, k64, v64), do.double())
    return o64.detach(), lse64.detach(), grads


# (dtype, causal, b, hq, hkv, s, d, tiles): every S edge (1, a partial block, exact blocks, 100), both tile
# orders (the causal loop splits differ), GQA groups of 1, 2 and 4.
CASES = [
    (torch.float32, False, 1, 2, 2, 17, 16, "16x16"),
    (torch.float32, True, 1, 4, 1, 100, 32, "32x16"),
    (torch.float32, True, 2, 4, 2, 64, 64, "16x32"),
    (torch.float32, False, 1, 4, 2, 100, 64, "16x32"),
    (torch.float32, True, 1, 2, 1, 1, 16, "16x16"),
    (torch.float32, False, 1, 2, 2, 1, 32, "32x16"),
    (torch.bfloat16, True, 1, 4, 2, 100, 32, "16x16"),
    (torch.bfloat16, False, 2, 2, 2, 17, 64, "32x16"),
    (torch.float16, True, 1, 4, 1, 64, 64, "16x32"),
    (torch.float16, False, 1, 2, 1, 100, 16, "16x16"),
]


@pytest.mark.parametrize("dtype,causal,b,hq,hkv,s,d,tiles", CASES,
                         ids=[f"{str(c[0])[6:]}-{'causal' if c[1] else 'full'}-b{c[2]}hq{c[3]}hkv{c[4]}s{c[5]}d{c[6]}"
                              f"-{c[7]}" for c in CASES])
def test_forward_and_backward_match_float64_reference(dtype, causal, b, hq, hkv, s, d, tiles):
    q, k, v, do = _inputs(b, hq, hkv, s, d, dtype)
    config = _config(tiles)
    o, lse = flash_attention_fwd(q, k, v, causal, config=config)
    dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, causal, config=config)
    o64, lse64, (dq64, dk64, dv64) = _reference_grads(q, k, v, do, causal)
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == torch.float32 and lse.shape == (b, hq, s)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    tol = TEST_TOLERANCE[dtype]
    errors = {name: _error(ours, ref) for name, ours, ref in
              (("o", o, o64), ("lse", lse, lse64), ("dq", dq, dq64), ("dk", dk, dk64), ("dv", dv, dv64))}
    assert all(e < tol for e in errors.values()), errors


# The TMA path (device-built descriptors, rows past S zero-filled by the descriptor): tails, causal, GQA groups of
# 1, 2 and 4 (the dK/dV pass builds one Q and one dO descriptor per query head of the group), bf16 upcast.
TMA_CASES = [CASES[1], CASES[3], CASES[6], CASES[8]]


@pytest.mark.parametrize("dtype,causal,b,hq,hkv,s,d,tiles", TMA_CASES,
                         ids=[f"{str(c[0])[6:]}-{'causal' if c[1] else 'full'}-hq{c[3]}hkv{c[4]}s{c[5]}" for c in TMA_CASES])
def test_tma_loads_match_float64_reference(dtype, causal, b, hq, hkv, s, d, tiles):
    q, k, v, do = _inputs(b, hq, hkv, s, d, dtype)
    config = {**_config(tiles), "TMA": True}
    o, lse = flash_attention_fwd(q, k, v, causal, config=config)
    dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, causal, config=config)
    plan = attention._plan(q, k, v, causal, None, None, config)
    assert plan.bwd_tma and plan.dq.kwargs["TMA"] and attention._plan(q, k, v, causal, None, config, None).fwd_tma
    o64, lse64, (dq64, dk64, dv64) = _reference_grads(q, k, v, do, causal)
    errors = {name: _error(ours, ref) for name, ours, ref in
              (("o", o, o64), ("lse", lse, lse64), ("dq", dq, dq64), ("dk", dk, dk64), ("dv", dv, dv64))}
    assert all(e < TEST_TOLERANCE[dtype] for e in errors.values()), errors


# Kernel variants (attention.VARIANT_KEYS) against float64: the dQ pass's own tiles, with and without TMA loads;
# odd sequence lengths, causal and not, GQA 1/2/4, d 16-64.
VARIANT_CASES = [
    (torch.float32, False, 1, 2, 2, 33, 64, "16x16", {"DQ_BLOCK_M": 32, "DQ_BLOCK_N": 16}),
    (torch.float32, True, 1, 4, 2, 70, 32, "32x16", {"DQ_BLOCK_M": 16, "DQ_BLOCK_N": 32, "TMA": True}),
    (torch.float32, True, 1, 4, 1, 45, 64, "16x32", {"DQ_BLOCK_M": 32, "DQ_BLOCK_N": 32, "TMA": True}),
    (torch.bfloat16, True, 1, 4, 2, 41, 64, "16x32", {"DQ_BLOCK_M": 16, "DQ_BLOCK_N": 16}),
    (torch.float16, False, 2, 4, 1, 29, 16, "16x16", {"DQ_BLOCK_M": 16, "DQ_BLOCK_N": 32, "TMA": True}),
    (torch.bfloat16, False, 1, 4, 2, 37, 32, "32x16",
     {"DQ_BLOCK_M": 32, "DQ_BLOCK_N": 16, "DQ_NUM_WARPS": 2, "DQ_NUM_STAGES": 2, "TMA": True}),
    (torch.float32, True, 1, 8, 2, 50, 64, "16x32", {"DQ_BLOCK_M": 16, "DQ_BLOCK_N": 16, "DQ_NUM_WARPS": 8}),
]


@pytest.mark.parametrize("dtype,causal,b,hq,hkv,s,d,tiles,variant", VARIANT_CASES,
                         ids=[f"{str(c[0])[6:]}-{'causal' if c[1] else 'full'}-hq{c[3]}hkv{c[4]}s{c[5]}d{c[6]}-"
                              + "-".join(f"{k}={v}" for k, v in c[8].items()) for c in VARIANT_CASES])
def test_kernel_variants_match_float64_reference(dtype, causal, b, hq, hkv, s, d, tiles, variant):
    q, k, v, do = _inputs(b, hq, hkv, s, d, dtype)
    fwd_config = {**_config(tiles), **{key: value for key, value in variant.items() if not key.startswith("DQ")}}
    bwd_config = {**_config(tiles), **variant}
    o, lse = flash_attention_fwd(q, k, v, causal, config=fwd_config)
    dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, causal, config=bwd_config)
    plan = attention._plan(q, k, v, causal, None, fwd_config, bwd_config)
    assert plan.dq.kwargs["BLOCK_M"] == variant["DQ_BLOCK_M"]  # the dQ pass's tiles
    launch = {"num_warps": variant.get("DQ_NUM_WARPS", 4), "num_stages": variant.get("DQ_NUM_STAGES", 1)}
    assert {key: plan.dq.kwargs[key] for key in launch} == launch  # and its own launch options, where given
    assert (plan.dkdv.kwargs["num_warps"], plan.dkdv.kwargs["num_stages"]) == (4, 1)  # the config's
    assert not set(plan.dq.kwargs) & set(attention.DQ_KEYS)
    assert dq.dtype == dtype and (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    o64, lse64, (dq64, dk64, dv64) = _reference_grads(q, k, v, do, causal)
    errors = {name: _error(ours, ref) for name, ours, ref in
              (("o", o, o64), ("lse", lse, lse64), ("dq", dq, dq64), ("dk", dk, dk64), ("dv", dv, dv64))}
    assert all(e < TEST_TOLERANCE[dtype] for e in errors.values()), errors


def test_backward_pass_configs_give_each_pass_its_tiles_and_launch():
    base = {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "TMA": True}
    assert attention.backward_pass_configs(base) == {
        "dq": {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3},  # the dK/dV tiles swapped
        "dkdv": {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3}}
    own = attention.backward_pass_configs({**base, "DQ_BLOCK_M": 64, "DQ_BLOCK_N": 64, "DQ_NUM_WARPS": 8,
                                           "DQ_NUM_STAGES": 2, "waves_per_eu": 1})
    assert own["dq"] == {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "waves_per_eu": 1}
    assert own["dkdv"] == {"BLOCK_M": 32, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "waves_per_eu": 1}


def test_backward_passes_cross_compile_for_sm90_with_their_own_warps():
    """Both passes of a backward config build for sm_90 on this CPU (a fresh interpreter: compiled kernels need
    TRITON_INTERPRET=0), the dQ pass with DQ_NUM_WARPS, without spills."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json; from workbench.kernels.attention import inspect_backward\n"
            "config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3, TMA=True, DQ_BLOCK_M=128,"
            " DQ_BLOCK_N=64, DQ_NUM_WARPS=8)\n"
            "print(json.dumps({k: v.as_dict() for k, v in inspect_backward(config, 64, True).items()}))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    builds = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(builds) == {"dq", "dkdv"}
    for name, warps, block_m in (("dq", 8, 128), ("dkdv", 4, 64)):
        build, config = builds[name], json.loads(builds[name]["config"])
        assert not build["error"] and build["registers"] > 0 and build["shared_bytes"] > 0, build
        assert build["spills"] == 0 and build["fits"], build
        assert (config["num_warps"], config["BLOCK_M"]) == (warps, block_m), build


def test_tma_needs_aligned_strides_and_bases():
    """Head strides of 8 bytes (d=2 cannot be: a [B, S, H, 16] fp32 view has 64-byte head strides, so use an odd
    row stride instead) plan pointer loads; a base off the 16-byte grid launches the pointer build of a TMA plan."""
    config = {**_config("16x16"), "TMA": True}
    q, k, v, do = _inputs(1, 2, 2, 20, 16, torch.float32)
    odd = torch.randn(1, 2, 20, 17).to(DEVICE)[..., :16]  # row stride 17 floats: 68 bytes, not 16-aligned
    assert not attention._plan(odd, odd, odd, True, None, config, None).fwd_tma
    assert attention._plan(q, k, v, True, None, config, None).fwd_tma
    shifted = torch.randn(2 * 20 * 16 + 1).to(DEVICE)[1:].view(1, 2, 20, 16)  # base 4 bytes off
    o = flash_attention(shifted, k, v, causal=True, config=config)
    assert _error(o, reference_attention(shifted, k, v, causal=True)) < 1e-5


def test_a_failed_tma_build_falls_back_to_pointer_loads(monkeypatch):
    real = attention._attn_fwd_kernel

    class RefusesTma:  # a Triton that cannot build the TMA variant
        def __getitem__(self, grid):
            def launch(*args, **constexprs):
                if constexprs["TMA"]:
                    raise triton.compiler.errors.CompilationError("fake", None, "no TMA here")
                return real[grid](*args, **constexprs)
            return launch

    monkeypatch.setattr(attention, "_attn_fwd_kernel", RefusesTma())
    clear_plan_caches()
    q, k, v, _ = _inputs(1, 2, 1, 20, 16, torch.float32)
    with pytest.warns(RuntimeWarning, match="TMA build failed"):
        o = flash_attention(q, k, v, config={**_config("16x16"), "TMA": True})
    assert _error(o, reference_attention(q, k, v)) < 1e-5
    plan = attention._plan(q, k, v, False, None, {**_config("16x16"), "TMA": True}, None)
    assert not plan.fwd_tma and not plan.fwd.kwargs["TMA"] and not plan.bwd_tma
    clear_plan_caches()


def test_autograd_function_with_strided_inputs_and_custom_scale():
    """q/k/v as [B, S, H, D] views (SDPA's usual layout after a transpose), a non-default scale, .backward()."""
    b, hq, hkv, s, d = 1, 4, 2, 33, 32
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(b, s, h, d, generator=gen).to(DEVICE).transpose(1, 2).requires_grad_()
               for h in (hq, hkv, hkv))
    do = torch.randn(b, hq, s, d, generator=gen).to(DEVICE)
    scale = 0.3
    o = flash_attention(q, k, v, causal=True, scale=scale)
    o.backward(do)
    o64, _, grads = _reference_grads(q, k, v, do, True, scale)
    assert _error(o, o64) < 1e-5
    for name, t, ref in zip("qkv", (q, k, v), grads):
        assert _error(t.grad, ref) < 1e-5, name


def test_default_config_is_the_first_interpreter_entry():
    q, k, v, _ = _inputs(1, 2, 1, 20, 16, torch.float32)
    o = flash_attention(q, k, v)
    assert _error(o, reference_attention(q, k, v)) < 1e-5


def test_reference_matches_sdpa_with_gqa():
    q, k, v, _ = _inputs(2, 4, 2, 9, 16, torch.float64)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.allclose(reference_attention(q, k, v, causal=True), expected, atol=1e-12)



@pytest.mark.parametrize("causal", [False, True])
def test_closed_form_reference_grads_match_autograd(causal):
    """The bench's fwd_bwd reference (no autograd, chunked) against autograd of reference_attention."""
    q, k, v, do = _inputs(2, 4, 2, 9, 16, torch.float64, seed=3)
    o64, _, grads = _reference_grads(q, k, v, do, causal, 0.7)
    ours = reference_attention_grads(q, k, v, do, causal, 0.7)
    for a, b in zip(ours, (o64, *grads)):
        assert torch.allclose(a, b, atol=1e-12)


# ---------------------------------------------------------------------------------------------- input checks
def _t(*shape, dtype=torch.float32, device=DEVICE):
    return torch.zeros(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("q,k,v,kwargs,argument", [
    (_t(2, 8, 16), _t(2, 8, 16), _t(2, 8, 16), {}, "q"),  # 3-D
    (_t(1, 2, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8), {}, "v"),  # v not like k
    (_t(1, 2, 8, 16), _t(2, 2, 8, 16), _t(2, 2, 8, 16), {}, "k"),  # batch
    (_t(1, 2, 8, 16), _t(1, 2, 9, 16), _t(1, 2, 9, 16), {}, "k"),  # seq
    (_t(1, 2, 8, 16), _t(1, 2, 8, 32), _t(1, 2, 8, 32), {}, "k"),  # head_dim
    (_t(1, 2, 8, 48), _t(1, 2, 8, 48), _t(1, 2, 8, 48), {}, "q"),  # unsupported head_dim
    (_t(1, 4, 8, 16), _t(1, 3, 8, 16), _t(1, 3, 8, 16), {}, "k"),  # Hq % Hkv
    (_t(1, 2, 8, 16, dtype=torch.float64),) * 3 + ({}, "q"),  # dtype
    (_t(1, 2, 8, 16), _t(1, 2, 8, 16, dtype=torch.float16), _t(1, 2, 8, 16), {}, "k"),  # mixed dtypes
    (_t(1, 2, 8, 16), _t(1, 2, 8, 16, device="meta"), _t(1, 2, 8, 16), {}, "device"),
    (_t(1, 2, 8, 16),) * 3 + ({"causal": 1}, "causal"),
    (_t(1, 2, 8, 16),) * 3 + ({"scale": -1.0}, "scale"),
    (_t(1, 2, 8, 16),) * 3 + ({"config": {"BLOCK_M": 16}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"config": {"BLOCK_M": 16, "BLOCK_N": 24}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_BLOCK_M": 16}}, "config"),  # bwd key
    (_t(1, 2, 8, 16),) * 3 + ({"config": {"BLOCK_M": 16, "BLOCK_N": 16, "WARP_SPECIALIZE": False}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"bwd_config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ": "atomic"}}, "config"),  # dropped
    (_t(1, 2, 8, 16),) * 3 + ({"bwd_config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_BLOCK_M": 24}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_NUM_WARPS": 8}}, "config"),  # bwd key
    (_t(1, 2, 8, 16),) * 3 + ({"bwd_config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_NUM_WARPS": 3}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"bwd_config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_NUM_STAGES": 0}}, "config"),
    (_t(1, 2, 8, 16),) * 3 + ({"bwd_config": {"BLOCK_M": 16, "BLOCK_N": 16, "DQ_NUM_STAGES": True}}, "config"),
])
def test_bad_inputs_raise_naming_the_argument(q, k, v, kwargs, argument):
    with pytest.raises(KernelInputError, match=rf"^{argument}\b"):
        flash_attention(q, k, v, **kwargs)


def test_backward_checks_its_extra_arguments():
    q = _t(1, 2, 8, 16)
    lse = torch.zeros(1, 2, 8)
    with pytest.raises(KernelInputError, match=r"^do\b"):
        flash_attention_bwd(_t(1, 2, 8, 32), q, q, q, q, lse)
    with pytest.raises(KernelInputError, match=r"^lse\b"):
        flash_attention_bwd(q, q, q, q, q, lse.double())


def test_repeated_calls_resolve_no_config_and_cached_checks_still_fail_bad_calls(monkeypatch):
    """Issue 20: the forward + backward through autograd and the direct backward work out their configs and checks
    once per distinct call; a bad call after good ones of the same shapes still fails naming the argument."""
    clear_plan_caches()
    resolved = []
    real = attention._resolve_config
    monkeypatch.setattr(attention, "_resolve_config", lambda *a, **kw: resolved.append(a[1]) or real(*a, **kw))
    q, k, v, do = _inputs(1, 4, 2, 20, 16, torch.float32)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    for _ in range(3):
        o = flash_attention(qg, kg, vg, causal=True)
        grads = torch.autograd.grad(o, (qg, kg, vg), do)
    assert resolved == ["fwd", "bwd"]  # the first call only: one plan for both passes
    o64, _, ref = _reference_grads(q, k, v, do, True)
    assert _error(o, o64) < 1e-5 and all(_error(g, r) < 1e-5 for g, r in zip(grads, ref))
    o, lse = flash_attention_fwd(q, k, v, causal=True)
    for _ in range(2):
        direct = flash_attention_bwd(do, q, k, v, o, lse, causal=True)
    assert resolved == ["fwd", "bwd"] and len(attention._BWD_CHECKED) == 1
    assert all(_error(g, r) < 1e-5 for g, r in zip(direct, ref))
    with pytest.raises(KernelInputError, match=r"^lse\b"):  # same shapes, a dtype the cached key does not hold
        flash_attention_bwd(do, q, k, v, o, lse.double(), causal=True)
    with pytest.raises(KernelInputError, match=r"^o\b"):
        flash_attention_bwd(do, q, k, v, o.half(), lse, causal=True)


# ---------------------------------------------------------------------------------------------- config space
AMD_KEYS = {"waves_per_eu", "matrix_instr_nonkdim"}


@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_config_space_per_backend(pass_, head_dim):
    for name in ("cuda", "hip", "interpreter"):
        space = config_space(name, pass_, head_dim)
        assert space and len(space) == len({tuple(sorted(c.items())) for c in space})
        for config in space:
            assert {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} <= config.keys()
            assert (AMD_KEYS <= config.keys()) == (name == "hip"), (name, config)
            assert not (config.keys() - AMD_KEYS - {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"})
        if name == "hip":
            assert {c["num_stages"] for c in space} == {1}


def test_config_space_defaults():
    assert config_space("cuda", "fwd", 128)[0] == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    assert config_space("interpreter")[0]["BLOCK_M"] == 16
    fwd = config_space("cuda")
    assert {c["BLOCK_M"] for c in fwd} == {64, 128} and {c["BLOCK_N"] for c in fwd} == {32, 64, 128}
    assert {c["num_warps"] for c in fwd} == {4, 8} and {c["num_stages"] for c in fwd} == {2, 3, 4}
    hip = config_space("hip")
    assert {c["waves_per_eu"] for c in hip} == {0, 1, 2} and {c["matrix_instr_nonkdim"] for c in hip} == {16, 32}
    with pytest.raises(KernelInputError, match="^backend"):
        config_space("tpu")


def test_pinned_configs_per_bucket():
    assert [attention_seq_bucket(s) for s in (1, 1024, 1025, 4096, 4097, 1 << 20)] == [0, 0, 1, 1, 2, 2]
    for pass_ in ("fwd", "bwd"):
        for d in (64, 128):
            for causal in (False, True):
                for seq in (512, 2048, 16384):
                    pinned = attention_pinned_config("sm_90", pass_, d, causal, seq)
                    if pinned is None:
                        continue
                    assert {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA"} <= set(pinned)
                    assert set(pinned) <= {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", *attention.VARIANT_KEYS}
                    tiles = {k: v for k, v in pinned.items() if k not in attention.VARIANT_KEYS}
                    assert tiles in config_space("cuda", pass_, d)
    assert attention_pinned_config("sm_90", "bwd", 128, True, 8192)["BLOCK_N"] == 64
    assert attention_pinned_config("sm_80", "bwd", 128, True, 8192) is None
    with pytest.raises(KernelInputError, match=r"^config"):
        flash_attention(_t(1, 2, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16), config={**_config("16x16"), "TMA": 1.5})


# ---------------------------------------------------------------------------------------------- counts, bench
def test_flops_and_bytes():
    b, hq, s, d = 2, 8, 1024, 128
    fwd = 4 * b * hq * s * s * d
    assert flops(b, hq, s, d, False, "fwd") == fwd
    assert flops(b, hq, s, d, False, "bwd") == 2.5 * fwd
    assert flops(b, hq, s, d, False, "fwd_bwd") == 3.5 * fwd
    blocks = s // 128
    assert flops(b, hq, s, d, True, "fwd") == pytest.approx(fwd * (blocks + 1) / (2 * blocks))
    q = b * hq * s * d * 2
    kv = 2 * b * 2 * s * d * 2
    lse = b * hq * s * 4
    assert bytes_moved(b, hq, 2, s, d, True, "fwd", "bf16") == q + kv + q + lse


@pytest.mark.parametrize("suite,count", [("quick", 4), ("full", 16)])
def test_bench_cases(suite, count):
    cases = bench_cases(suite)
    assert len(cases) == count
    for case in cases:
        row = case.row
        assert row["batch"] * row["seq"] == 16384 and row["causal"] == "true" and row["dtype"] == "bf16"
        assert (row["heads_q"], row["heads_kv"], row["head_dim"]) in ((32, 8, 128), (64, 8, 128))
        op = row_to_op({key: str(value) for key, value in row.items()}, 0)
        assert op.flops == pytest.approx(case.flops) and op.bytes == pytest.approx(case.bytes)
        assert case.tolerance == TOLERANCE["bf16"]
        inputs = case.make_inputs("meta")  # shapes only, no memory
        assert inputs[0].shape == (row["batch"], row["heads_q"], row["seq"], row["head_dim"])
        assert inputs[1].shape == (row["batch"], row["heads_kv"], row["seq"], row["head_dim"])
        if row["pass"] == "fwd_bwd":
            assert len(inputs) == 4 and all(t.requires_grad for t in inputs[:3]) and not inputs[3].requires_grad
        else:
            assert len(inputs) == 3
    assert {c.row["pass"] for c in cases} == {"fwd", "fwd_bwd"}



def test_repeated_calls_resolve_configs_and_check_inputs_once_per_shape(monkeypatch):
    """The plan cache (issue 20's host-overhead target): a repeated call of one shape resolves its configs and
    checks its inputs once; another shape gets its own; results are the same from the cached plan."""
    calls = {"resolve": 0, "check": 0}
    real_resolve, real_check = attention._resolve_config, attention.check_attention_inputs

    def resolve(*args, **kwargs):
        calls["resolve"] += 1
        return real_resolve(*args, **kwargs)

    def check_inputs(*args, **kwargs):
        calls["check"] += 1
        return real_check(*args, **kwargs)

    monkeypatch.setattr(attention, "_resolve_config", resolve)
    monkeypatch.setattr(attention, "check_attention_inputs", check_inputs)
    clear_plan_caches()
    q, k, v, do = _inputs(1, 2, 1, 20, 16, torch.float32)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    outputs = [flash_attention(qg, kg, vg, causal=True) for _ in range(3)]
    grads = [torch.autograd.grad(o, (qg, kg, vg), do) for o in outputs]
    assert calls == {"resolve": 2, "check": 1}  # the forward and the backward config, one check
    assert all(torch.equal(o, outputs[0]) for o in outputs)
    assert all(torch.equal(g, h) for other in grads for g, h in zip(other, grads[0]))
    flash_attention(q[:, :, :12], k[:, :, :12], v[:, :, :12], causal=True)  # another shape: its own plan
    assert calls == {"resolve": 4, "check": 2}
    o, lse = flash_attention_fwd(q, k, v, causal=True)
    for _ in range(2):
        flash_attention_bwd(do, q, k, v, o, lse, causal=True)
    assert calls == {"resolve": 4, "check": 2}  # the direct fwd and bwd of the first shape reuse its plan
    clear_plan_caches()
