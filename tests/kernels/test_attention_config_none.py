"""What ``attention.flash_attention``'s config=None runs on sm_90 (workbench/kernels/attention.py with the rules of
attention_gluon.pinned_forward_config and attention_gluon_bwd.pinned_backward_config): on the CPU, the forward and
backward each of the 20 attention shapes of benchmarks/kernels/shapes.yaml gets, and the errors of bad explicit
backward configs; on an sm_90 GPU with TRITON_INTERPRET=0, that the plan takes those kernels and that forward and
backward match the float64 reference in every (head_dim, causal, sequence) bucket of the rules."""

from pathlib import Path

import pytest
import torch
import yaml

from workbench.kernels import attention_gluon, attention_gluon_bwd
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels.attention import flash_attention
from workbench.kernels.reference import reference_attention_grads
from workbench.kernels.spaces import attention_pinned_config

SHAPES = yaml.safe_load((Path(__file__).resolve().parents[2] / "benchmarks/kernels/shapes.yaml").read_text())
TRITON_64 = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "TMA": False}
GLUON_64 = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": False, "CTAS_PER_SM": 2}
GLUON_128 = {False: {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 3, "PINGPONG": True},
             True: {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": True}}
PERSISTENT_128 = {  # attention_gluon.PERSISTENT_FORWARD: d=128 causal up to 4,096, full 1,025-4,096
    False: {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": False, "CTAS_PER_SM": 1, "PERSISTENT": True,
            "O_TMA_STORE": True},
    True: {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": True, "CTAS_PER_SM": 1, "PERSISTENT": True,
           "O_TMA_STORE": True}}
SECTIONED_128 = {**PERSISTENT_128[True], "L2_SECTION_MIB": 32}  # d=128 causal up to 1,024: tiles in L2 sections
GLUON_BWD = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2}  # attention_gluon_bwd.default_config
EXPECTED = {  # id: (forward kernel, backward kernel), from the H200 runs the rules cite
    "a01": ("gluon", "gluon"), "a02": ("triton", "triton"), "a03": ("gluon", "gluon"),
    "a04": ("triton", "triton"), "a05": ("gluon", "gluon"), "a06": ("gluon", "gluon"),
    "a07": ("gluon", "gluon"), "a08": ("triton", "triton"), "a09": ("gluon", "gluon"),
    "a10": ("gluon", "gluon"), "a11": ("triton", "triton"), "a12": ("gluon", "gluon"),
    "a13": ("gluon", "gluon"), "a14": ("gluon", "gluon"), "a15": ("gluon", "triton"),
    "a16": ("gluon", "gluon"), "a17": ("gluon", "gluon"), "a18": ("gluon", "triton"),
    "a19": ("gluon", "gluon"), "a20": ("gluon", "triton"),
}


def _forward_on_sm90(head_dim: int, causal: bool, seq: int) -> tuple[str, dict | None]:
    """config=None's forward on sm_90 for contiguous bf16 inputs (attention._plan's order): the Gluon kernel where
    its rule takes the shape, else the Triton kernel at the bucket's pinned config."""
    gluon = attention_gluon.pinned_forward_config(head_dim, causal, seq)
    if gluon is not None:
        return "gluon", gluon
    return "triton", attention_pinned_config("sm_90", "fwd", head_dim, causal, seq)


@pytest.mark.parametrize("shape", SHAPES["attention"], ids=lambda shape: shape["id"])
def test_each_of_the_twenty_shapes_gets_the_rules_kernels_and_configs(shape):
    d, causal, seq = shape["head_dim"], shape["causal"], shape["seq"]
    forward, config = _forward_on_sm90(d, causal, seq)
    backward_config = attention_gluon_bwd.backward_rule(d, causal, seq)
    want_forward, want_backward = EXPECTED[shape["id"]]
    assert (forward, "gluon" if backward_config else "triton") == (want_forward, want_backward)
    if forward == "gluon" and d == 128 and seq <= 4096:
        assert config == (SECTIONED_128 if causal and seq <= 1024 else PERSISTENT_128[causal])
    elif forward == "gluon":
        assert config == (GLUON_64 if d == 64 else GLUON_128[causal])
    elif d == 64:  # the d=64 rule up to 4,096: 64x64 tiles, 3 stages, pointer loads
        assert config == TRITON_64
    if backward_config is not None:
        assert backward_config == GLUON_BWD


def test_the_d128_forward_is_persistent_up_to_4096_then_one_tile():
    assert _forward_on_sm90(128, True, 128) == ("gluon", SECTIONED_128)
    assert _forward_on_sm90(128, True, 1024) == ("gluon", SECTIONED_128)
    assert _forward_on_sm90(128, True, 1024 + 128) == ("gluon", PERSISTENT_128[True])
    assert _forward_on_sm90(128, True, 4096) == ("gluon", PERSISTENT_128[True])
    assert _forward_on_sm90(128, True, 4096 + 128) == ("gluon", GLUON_128[True])
    assert _forward_on_sm90(128, False, 1024)[0] == "triton"  # no fit shape there: what was wired
    assert _forward_on_sm90(128, False, 1024 + 128) == ("gluon", PERSISTENT_128[False])
    assert _forward_on_sm90(128, False, 4096 + 128) == ("gluon", GLUON_128[False])
    assert _forward_on_sm90(128, True, 1000)[0] == "triton"  # not a whole number of 128-key blocks


def test_the_d64_forward_switches_to_gluon_above_4096():
    assert _forward_on_sm90(64, True, 4096) == ("triton", TRITON_64)
    assert _forward_on_sm90(64, False, 4096 + 128) == ("gluon", GLUON_64)
    assert _forward_on_sm90(64, False, 4096 + 64)[0] == "triton"  # not a whole number of 128-key blocks


def _inputs():
    """Small q, k, v where the kernels of this run can take them: CPU tensors under the interpreter, else CUDA."""
    if not interpreting() and not torch.cuda.is_available():
        pytest.skip("TRITON_INTERPRET=0 without a GPU: the wrapper refuses CPU tensors first")
    device = "cpu" if interpreting() else "cuda"
    return [torch.randn(1, 2, 64, 64, dtype=torch.bfloat16, device=device) for _ in range(3)]


@pytest.mark.parametrize("bwd_config, match", [
    ({"backend": "cudnn", "BLOCK_M": 64, "BLOCK_N": 64}, "backend"),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 3}, "NUM_STAGES"),  # a Gluon config without its backend
    ([64, 128], "bwd_config"),
])
def test_a_bad_backward_config_is_named(bwd_config, match):
    q, k, v = _inputs()
    with pytest.raises(KernelInputError, match=match):
        flash_attention(q, k, v, False, bwd_config=bwd_config)


def test_the_gluon_backward_asked_for_off_sm90_names_the_device():
    if attention_gluon_bwd.supported():
        pytest.skip("an sm_90 GPU is here: the request is valid")
    q, k, v = _inputs()
    with pytest.raises(KernelInputError):
        flash_attention(q, k, v, False, bwd_config={"backend": "gluon", **GLUON_BWD})


def test_a_triton_backend_key_is_the_plain_triton_config():
    if not interpreting():
        pytest.skip("runs the Triton kernels under the interpreter (tests/conftest.py sets TRITON_INTERPRET=1)")
    q, k, v = (t.float().requires_grad_() for t in _inputs())
    config = {"BLOCK_M": 32, "BLOCK_N": 32}
    flash_attention(q, k, v, True, bwd_config={"backend": "triton", **config}).sum().backward()
    got = q.grad.clone()
    q.grad = None
    flash_attention(q, k, v, True, bwd_config=config).sum().backward()
    assert torch.equal(got, q.grad)


on_hopper = pytest.mark.skipif(interpreting() or not attention_gluon_bwd.supported(),
                               reason="runs the kernels: needs an sm_90 GPU with TRITON_INTERPRET=0 (the lead's H200)")
GPU_SHAPES = [  # (batch, heads_q, heads_kv, seq, head_dim, causal): a few of each bucket of the two rules
    (2, 4, 4, 512, 64, False),  # fwd Triton 64x64, bwd Triton
    (1, 4, 1, 2048, 64, True),  # fwd Triton 64x64, bwd Gluon (d=64 causal, 1,025-4,096)
    (1, 4, 4, 4096, 64, True),  # same bucket, MHA
    (1, 4, 2, 8192, 64, False),  # fwd Gluon 64x128, 2 CTAs an SM; bwd Triton
    (1, 2, 2, 1024, 128, False),  # fwd Triton, bwd Gluon (d=128 non-causal)
    (1, 8, 2, 2048, 128, False),  # fwd and bwd Gluon, GQA 4 (32 programs: split 4 ways)
    (1, 4, 4, 1024, 128, True),  # bwd Gluon, MHA: no group to split
    (4, 8, 1, 1024, 128, True),  # bwd Gluon, MQA: 32 programs, the group split 8 ways (a05's shape, batch cut)
    (1, 4, 1, 4096, 128, True),  # fwd Gluon, bwd Triton, MQA
    (1, 2, 1, 8192, 128, True),  # fwd and bwd Gluon (d=128 causal above 4,096)
]


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal", GPU_SHAPES)
def test_config_none_takes_the_rules_kernels_and_matches_the_reference(b, hq, hkv, s, d, causal):
    from workbench.kernels.attention import _plan

    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
                   for h in (hq, hkv, hkv, hq))
    plan = _plan(q, k, v, causal, None, None, None)
    assert plan.gluon == attention_gluon.pinned_forward_config(d, causal, s)
    rule = attention_gluon_bwd.backward_rule(d, causal, s)
    assert plan.gluon_bwd == attention_gluon_bwd.pinned_backward_config(q, k, v, causal)
    assert (plan.gluon_bwd is None) == (rule is None)  # the rule's kernel, its GQA group split added
    if rule is not None:
        assert {key: value for key, value in plan.gluon_bwd.items() if key != "GROUP_SPLIT"} == rule
    if plan.gluon is None and d == 64:
        assert plan.fwd.kwargs["BLOCK_M"] == 64 and plan.fwd.kwargs["BLOCK_N"] == 64 and not plan.fwd_tma
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o = flash_attention(q, k, v, causal)
    o.backward(do)
    want = reference_attention_grads(q.detach(), k.detach(), v.detach(), do, causal)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), want):
        err = ((got.double() - ref).norm() / ref.norm()).item()
        assert err <= 2e-2, (name, err)  # attention.TOLERANCE["bf16"]


@on_hopper
def test_an_explicit_gluon_backward_runs_where_config_none_takes_triton():
    from workbench.kernels.attention import _plan

    generator = torch.Generator(device="cuda").manual_seed(3)
    q, k, v, do = (torch.randn(1, 4, 1024, 64, device="cuda", dtype=torch.float16, generator=generator)
                   for _ in range(4))  # d=64 non-causal: config=None's backward is Triton's
    bwd_config = {"backend": "gluon", **GLUON_BWD}
    assert _plan(q, k, v, False, None, None, None).gluon_bwd is None
    assert _plan(q, k, v, False, None, None, bwd_config).gluon_bwd == GLUON_BWD
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    flash_attention(q, k, v, False, bwd_config=bwd_config).backward(do)
    want = reference_attention_grads(q.detach(), k.detach(), v.detach(), do, False)[1:]
    for name, got, ref in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        err = ((got.double() - ref).norm() / ref.norm()).item()
        assert err <= 1e-2, (name, err)  # attention.TOLERANCE["fp16"]
