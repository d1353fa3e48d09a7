"""FA3-style Gluon attention backward (workbench/kernels/attention_gluon_bwd.py). Gluon has no interpreter: on the
CPU these check the config space and its checks, and compile every config for sm_90 ahead of time (spills within
``KNOWN_SPILL_BYTES``, none elsewhere; shared memory within sm_90's; the S^T / dP^T overlap's wgmma.wait_group 1
kept). On an sm_90 GPU with TRITON_INTERPRET=0 they check dQ, dK, dV against the float64 reference on shapes with
GQA, causal masks and sequences that are not a multiple of the tiles. Speed is
benchmarks/kernels/attention_gluon_bwd_bench.py's job on an H200."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from workbench.kernels import _common, attention_gluon_bwd
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels.attention_gluon_bwd import (
    KNOWN_SPILL_BYTES,
    SM90_SHARED_BYTES,
    backward_rule,
    config_space,
    default_config,
    gluon_attention_backward,
    pinned_backward_config,
    resolve_config,
    shared_bytes,
    supported,
)
from workbench.kernels.reference import reference_attention, reference_attention_grads

BUCKETS = [(d, causal) for d in (64, 128) for causal in (False, True)]


def _key(config: dict, head_dim: int, causal: bool) -> tuple:
    return (head_dim, causal, config["BLOCK_M"], config["BLOCK_N"], config["NUM_STAGES"])


@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_every_config_passes_its_own_checks_and_fits_shared_memory(head_dim, causal):
    space = config_space(head_dim, causal)
    assert space and space[0] == default_config(head_dim, causal)
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert resolve_config(config, head_dim, causal) is config
        assert shared_bytes(config, head_dim) <= SM90_SHARED_BYTES


def test_known_spills_name_configs_of_the_space():
    keys = {_key(c, d, causal) for d, causal in BUCKETS for c in config_space(d, causal)}
    assert set(KNOWN_SPILL_BYTES) <= keys


def test_shared_bytes_counts_k_v_the_q_do_ds_ring_the_barriers_and_the_dq_conversion():
    config = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2}
    tiles = 2 * 128 * 128 + 2 * 2 * 64 * 128 + 2 * 128 * 64  # K, V; Q, dO ring; dS^T per slot
    assert attention_gluon_bwd.tile_bytes(config, 128) == 2 * tiles + 8 * (1 + 4 * 2)
    assert shared_bytes(config, 128) == 2 * tiles + 8 * (1 + 4 * 2) + 2 * 64 * 64 * 4  # a fp32 dQ tile a consumer


@pytest.mark.parametrize("change, key", [({"BLOCK_M": 32}, "BLOCK_M"), ({"BLOCK_N": 256}, "BLOCK_N"),
                                         ({"NUM_STAGES": 1}, "NUM_STAGES"), ({"NUM_STAGES": 2.0}, "NUM_STAGES"),
                                         ({"BLOCK_M": 128, "NUM_STAGES": 3}, "shared memory")])
def test_a_bad_config_names_the_key(change, key):
    with pytest.raises(KernelInputError, match=key):
        resolve_config({**default_config(128, False), **change}, 128, False)


@pytest.mark.parametrize("tiles", [(64, 64, 2), (128, 128, 2)])
def test_the_configs_that_gave_wrong_gradients_on_the_h200_are_refused(tiles):
    """Under ptxas 12.8 (Triton 3.6's and 3.7's: ``PTXAS_RING_FIX``), with the step built twice."""
    config = dict(zip(("BLOCK_M", "BLOCK_N", "NUM_STAGES"), tiles))
    with pytest.raises(KernelInputError, match="config_space"):
        resolve_config(config, 64, True)


def test_an_unknown_config_key_is_named():
    with pytest.raises(KernelInputError, match="PINGPONG"):
        resolve_config({**default_config(128, True), "PINGPONG": True}, 128, True)


def test_a_config_missing_a_key_lists_the_keys():
    config = dict(default_config(64, True))
    del config["NUM_STAGES"]
    with pytest.raises(KernelInputError, match="NUM_STAGES"):
        resolve_config(config, 64, True)


@pytest.mark.parametrize("change, key", [({"DS_BUFFERS": 1}, "DS_BUFFERS"), ({"DS_BUFFERS": 4}, "DS_BUFFERS"),
                                         ({"DS_BUFFERS": True}, "DS_BUFFERS"), ({"DQ_UNDER_DK": 1}, "DQ_UNDER_DK"),
                                         ({"STRICT_ORDER": "yes"}, "STRICT_ORDER"), ({"PINGPONG": 1}, "PINGPONG"),
                                         ({"WG_BARRIER": True}, "WG_BARRIER"),  # a ring-fault guard, gone
                                         ({"NUM_STAGES": 5, "DS_BUFFERS": 2}, "shared memory")])
def test_a_bad_variant_key_is_named(change, key):
    """d=128 with two consumers splits dQ: each reads the other's dS^T of the step, so DS_BUFFERS >= 2."""
    with pytest.raises(KernelInputError, match=key):
        attention_gluon_bwd.check_variant({**default_config(128, False), **change}, 128)


@pytest.mark.parametrize("split", [0, 1.0, "2", True])
def test_a_bad_group_split_is_named(split):
    with pytest.raises(KernelInputError, match="GROUP_SPLIT"):
        attention_gluon_bwd.check_variant({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "GROUP_SPLIT": split}, 64)


def test_a_group_split_that_does_not_divide_the_group_is_refused_when_planned():
    q, do, o = (torch.zeros(1, 6, 128, 64, dtype=torch.bfloat16) for _ in range(3))
    k = v = torch.zeros(1, 2, 128, 64, dtype=torch.bfloat16)  # a GQA group of 3
    config = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "GROUP_SPLIT": 2}
    with pytest.raises(KernelInputError, match="a divisor of the GQA group 3"):
        attention_gluon_bwd._plan(q, k, v, do, o, False, 0.125, config)


def test_variants_pass_their_checks_but_not_the_config_space():
    for config, head_dim in [({**default_config(128, True), "DQ_UNDER_DK": True}, 128),
                             ({**default_config(128, True), "NUM_STAGES": 4, "DS_BUFFERS": 2}, 128),
                             ({"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 3, "DS_BUFFERS": 1}, 64)]:
        assert attention_gluon_bwd.check_variant(config, head_dim) is config
        with pytest.raises(KernelInputError, match="VARIANT_KEYS"):
            resolve_config(config, head_dim, True)


THREE_STAGES = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 3}
"""The default before the one-step build (2026-12-02), in config_space under every ptxas."""


def test_ds_buffers_set_the_ds_tiles_and_the_default_build_keeps_its_constexprs():
    config = THREE_STAGES
    two = {**config, "DS_BUFFERS": 2}
    assert shared_bytes(config, 128) - shared_bytes(two, 128) == 2 * 64 * 64 * 2  # one [64, 64] tile a consumer
    assert shared_bytes({**config, "DS_BUFFERS": 3}, 128) == shared_bytes(config, 128)
    plain = attention_gluon_bwd._constexprs(config, False, 128)
    assert plain["DS_BUFFERS"] == 0 and plain["DQ_UNDER_DK"] is False and plain["STRICT_ORDER"] is False
    assert attention_gluon_bwd._constexprs({**config, "DS_BUFFERS": 3}, False, 128) == plain  # 3 = one per ring slot
    assert attention_gluon_bwd._constexprs(two, False, 128)["DS_BUFFERS"] == 2


def test_dq_leaves_from_whole_rows_wherever_the_conversion_fits():
    for head_dim in (64, 128):
        for causal in (False, True):
            two, three = config_space(head_dim, causal)[:2]
            assert attention_gluon_bwd._constexprs(two, causal, head_dim)["DQ_COALESCED"] is True
            assert attention_gluon_bwd.dq_coalesced(three, head_dim) is (head_dim == 64)  # 213 KB of tiles at 128
            assert shared_bytes(two, head_dim) == attention_gluon_bwd.tile_bytes(two, head_dim) + \
                2 * attention_gluon_bwd.DQ_SCRATCH_BYTES <= SM90_SHARED_BYTES
            assert shared_bytes(three, head_dim) == attention_gluon_bwd.tile_bytes(three, head_dim) + (
                2 * attention_gluon_bwd.DQ_SCRATCH_BYTES if head_dim == 64 else 0)
    assert attention_gluon_bwd.dq_coalesced({"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2}, 64) is False


def _emulated_grads(q, k, v, do, causal, block_m, block_n):
    """dQ, dK, dV (float64) by this kernel's block schedule and masks, replayed in torch: ``_kv_schedule``'s query
    range and masked steps per key block, ``_step``'s P^T / dS^T with the same ``where`` masks, query rows past a
    head's end read from the next head's rows (zeros past the tensor) as the kernel's 2-D TMA views read them."""
    b, hq, s, d = q.shape
    hkv, group, scale = k.shape[1], hq // k.shape[1], d ** -0.5
    o, lse = reference_attention(q, k, v, causal, return_lse=True)
    delta = (o * do).sum(-1)

    def rows(t, start, n):  # rows [start, start + n) of t's 2-D view [rows, ...], zeros past its end
        flat = t.reshape(-1, *t.shape[3:])
        out = flat.new_zeros((n, *flat.shape[1:]))
        out[:max(0, min(n, flat.shape[0] - start))] = flat[start:start + n]
        return out

    dq, dk, dv = (torch.zeros(t.shape[0] * t.shape[1] * s, d, dtype=torch.float64) for t in (q, k, v))
    for bh_kv in range(b * hkv):
        q_head0 = bh_kv // hkv * hq + bh_kv % hkv * group
        for start_n in range(0, s, block_n):
            end, full_end = -(-s // block_m) * block_m, s // block_m * block_m
            lo, diag_end = 0, 0
            if causal:
                lo = start_n // block_m * block_m
                diag_end = max(lo, min(-(-(start_n + block_n - 1) // block_m) * block_m, full_end))
                full_end = max(diag_end, full_end)
            if start_n + block_n > s:
                diag_end = full_end = end
            for first_key in range(start_n, start_n + block_n, 64):  # one consumer warpgroup each
                offs_n = first_key + torch.arange(64)
                k_t, v_t = rows(k, bh_kv * s + first_key, 64), rows(v, bh_kv * s + first_key, 64)
                for g in range(group):
                    for start_m in range(lo, end, block_m):
                        row = (q_head0 + g) * s + start_m
                        q_i, do_i, lse_i, delta_i = (rows(t, row, block_m) for t in (q, do, lse, delta))
                        offs_m = start_m + torch.arange(block_m)
                        p_t = torch.exp((k_t @ q_i.T) * scale - lse_i)
                        masked = start_m < diag_end or start_m >= full_end
                        if masked:
                            keep = offs_m[None, :] < s
                            keep = keep & ((offs_m[None, :] >= offs_n[:, None]) if causal else (offs_n[:, None] < s))
                            p_t = torch.where(keep, p_t, 0.0)
                        ds_t = p_t * (v_t @ do_i.T - delta_i)
                        dv[bh_kv * s + offs_n[offs_n < s]] += (p_t @ do_i)[offs_n < s]
                        dk[bh_kv * s + offs_n[offs_n < s]] += (ds_t @ q_i)[offs_n < s] * scale
                        kept = offs_m < s if masked else torch.ones(block_m, dtype=torch.bool)
                        dq[row + torch.arange(block_m)[kept]] += (ds_t.T @ k_t)[kept] * scale
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


@pytest.mark.parametrize("tiles", [(64, 64), (64, 128), (128, 128)])
@pytest.mark.parametrize("b, hq, hkv, s, causal", [(1, 4, 2, 333, True), (1, 4, 2, 333, False), (2, 2, 2, 256, False),
                                                   (1, 2, 1, 40, True), (1, 2, 2, 200, True)])
def test_the_block_schedule_and_masks_give_the_reference_gradients(tiles, b, hq, hkv, s, causal):
    """Also for the tiles ``config_space`` dropped: their wrong H200 gradients are not the schedule's."""
    generator = torch.Generator().manual_seed(s)
    q, k, v, do = (torch.randn(b, h, s, 64, dtype=torch.float64, generator=generator) for h in (hq, hkv, hkv, hq))
    want = reference_attention_grads(q, k, v, do, causal)[1:]
    for name, got, ref in zip(("dq", "dk", "dv"), _emulated_grads(q, k, v, do, causal, *tiles), want):
        assert torch.allclose(got, ref, rtol=1e-9, atol=1e-9), name


SHAPES = yaml.safe_load((Path(__file__).resolve().parents[2] / "benchmarks/kernels/shapes.yaml").read_text())
GLUON_BACKWARD_IDS = {shape["id"] for shape in SHAPES["attention"] if shape["head_dim"] == 128}
"""The shapes of shapes.yaml whose config=None backward is this kernel (``BACKWARD_BY_BUCKET``): every d=128
shape."""


@pytest.mark.parametrize("shape", SHAPES["attention"], ids=lambda shape: shape["id"])
def test_the_backward_rule_on_the_twenty_attention_shapes(shape):
    config = backward_rule(shape["head_dim"], shape["causal"], shape["seq"])
    assert (config is not None) == (shape["id"] in GLUON_BACKWARD_IDS)
    if config is not None:
        assert config == default_config(shape["head_dim"], shape["causal"]) and config["NUM_STAGES"] == 2


@pytest.mark.parametrize("fixed", [False, True], ids=["ptxas12.8", "ptxas13"])
@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_the_one_step_2_stage_ring_comes_first_under_any_ptxas(head_dim, causal, fixed, monkeypatch):
    """ONE_STEP (the default build) is right under ptxas 12.8 too; the two-branch build stays an experiment."""
    monkeypatch.setattr(attention_gluon_bwd, "rings_build_right", lambda: fixed)
    assert [c["NUM_STAGES"] for c in config_space(head_dim, causal)] == [2, 3]
    assert attention_gluon_bwd._constexprs(default_config(head_dim, causal), causal, head_dim)["ONE_STEP"] == 1
    with pytest.raises(KernelInputError, match="config_space"):
        resolve_config({**default_config(head_dim, causal), "ONE_STEP": 0}, head_dim, causal)


def _fake_ptxas(tmp_path: Path, output: str) -> str:
    path = tmp_path / "ptxas"
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {output!r}\n")
    path.chmod(0o755)
    return str(path)


def test_the_ptxas_release_is_read_from_its_version_line(tmp_path):
    release_13 = _fake_ptxas(tmp_path, "Cuda compilation tools, release 13.0, V13.0.88")
    assert _common._ptxas_release(release_13) == (13, 0)
    (tmp_path / "old").mkdir()
    assert _common._ptxas_release(_fake_ptxas(tmp_path / "old", "release 12.8, V12.8.93")) == (12, 8)
    (tmp_path / "odd").mkdir()
    assert _common._ptxas_release(_fake_ptxas(tmp_path / "odd", "no version here")) is None
    assert _common._ptxas_release(str(tmp_path / "missing")) is None


def test_the_ring_fix_needs_ptxas_13(monkeypatch):
    for release, right in ((None, False), ((12, 8), False), ((12, 9), False), ((13, 0), True), ((13, 2), True)):
        monkeypatch.setattr(attention_gluon_bwd, "ptxas_release", lambda release=release: release)
        assert attention_gluon_bwd.rings_build_right() is right


def test_the_backward_rule_leaves_ragged_and_other_head_dims_to_triton():
    assert backward_rule(128, False, 2048) is not None
    assert backward_rule(128, False, 2048 + 64) is None  # not a whole number of 128-key blocks
    assert backward_rule(96, False, 2048) is None
    q = torch.randn(1, 2, 2048, 128, dtype=torch.bfloat16, device="cpu")  # CPU tensors: never this kernel
    assert pinned_backward_config(q, q, q, False) is None


def test_the_group_split_is_the_smallest_divisor_from_the_minimum_that_fills_the_sms(monkeypatch):
    monkeypatch.setattr(attention_gluon_bwd, "GROUP_SPLIT_MIN", 1)
    monkeypatch.setattr(attention_gluon_bwd, "GROUP_SPLIT_FILL", 2.0)
    split, sms = attention_gluon_bwd.group_split, 132
    assert split(264, 8, sms) == 1  # enough programs already
    assert split(263, 8, sms) == 2 and split(128, 8, sms) == 4
    assert split(1, 8, sms) == 8  # one query head a program at most
    assert split(10, 6, sms) == 6 and split(10, 1, sms) == 1
    monkeypatch.setattr(attention_gluon_bwd, "GROUP_SPLIT_MIN", 2)
    assert split(264, 8, sms) == 2 and split(10 ** 6, 6, sms) == 2  # at least the minimum where it divides
    assert split(10 ** 6, 3, sms) == 3 and split(10 ** 6, 1, sms) == 1  # else the next divisor up, or none
    with pytest.raises(KernelInputError, match="positive counts"):
        split(0, 8, sms)


def test_the_shipped_group_split_halves_llama_groups_and_fills_the_h200_twice_for_mqa():
    split = attention_gluon_bwd.group_split
    assert split(1024, 8, 132) == 2  # a07, a13 (1,024 programs, GQA 8)
    assert split(128, 8, 132) == 4  # a05 (MQA 16 x 1024): 8 key blocks x 16 x 1
    assert split(32, 8, 132) == 8 and split(512, 1, 132) == 1  # few programs; MHA


def test_a_group_split_is_taken_with_a_config_of_the_space_and_nothing_else():
    config = {**config_space(128, True)[0], "GROUP_SPLIT": 4}
    assert resolve_config(config, 128, True) == config
    with pytest.raises(KernelInputError, match="VARIANT_KEYS"):
        resolve_config({**config, "DQ_UNDER_DK": True}, 128, True)


@pytest.mark.skipif(not interpreting(), reason="CPU tensors under TRITON_INTERPRET=1 (tests/conftest.py sets it)")
def test_cpu_inputs_are_refused_before_any_launch():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 16)
    with pytest.raises(KernelInputError):
        gluon_attention_backward(q, q, q, q, q, lse)
    with pytest.raises(KernelInputError, match="lse"):
        gluon_attention_backward(q, q, q, q, q, lse.double())


class _Recorder:
    """Stands in for a kernel object: records each ``kernel[grid](*args, **kwargs)`` (no compiled kernel comes
    back, so ``KernelLaunch`` keeps the JIT path and every launch is recorded)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append((self.name, grid, args, kwargs))


KERNELS = ("_bwd_preprocess_kernel", "_attn_bwd_kernel", "_convert_kernel")


@pytest.fixture
def recorded_launches(monkeypatch):
    """The wrapper's host path on CPU tensors, its three kernels recorded instead of launched."""
    if not attention_gluon_bwd.HAS_GLUON or not interpreting():
        pytest.skip("the host path on CPU tensors: needs triton with Gluon and TRITON_INTERPRET=1 (on a GPU, "
                    "test_a_repeated_call_launches_directly_on_each_calls_tensors runs the real launches)")
    log = []
    for name in KERNELS:
        monkeypatch.setattr(attention_gluon_bwd, name, _Recorder(name, log))
    monkeypatch.setattr(attention_gluon_bwd, "check_gluon_device", lambda q: None)  # an sm_90 GPU, pretended
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # a CPU tensor's device index
    attention_gluon_bwd._PLANS.clear()
    yield log
    attention_gluon_bwd._PLANS.clear()


def _cpu_inputs(b=2, hq=4, hkv=2, s=256, d=128):
    q, do, o = (torch.randn(b, hq, s, d, dtype=torch.bfloat16) for _ in range(3))
    k, v = (torch.randn(b, hkv, s, d, dtype=torch.bfloat16) for _ in range(2))
    return do, q, k, v, o, torch.randn(b, hq, s)


def test_a_repeated_call_reuses_its_plan_and_launches_on_each_calls_tensors(recorded_launches):
    calls = [_cpu_inputs() for _ in range(3)]
    results = [gluon_attention_backward(*inputs, causal=True) for inputs in calls]
    assert len(attention_gluon_bwd._PLANS) == 1
    assert [name for name, *_ in recorded_launches] == list(KERNELS) * 3
    config = default_config(128, True)
    for i, ((do, q, k, v, o, lse), (dq, dk, dv)) in enumerate(zip(calls, results)):
        pre, main, post = recorded_launches[3 * i:3 * i + 3]
        assert pre[2][:2] == (o, do) and pre[2][5:] == (2 * 4 * 256, 0)  # no dKV_acc rows: no split
        descriptors, (dq_acc, dk_out, dv_out), scalars = main[2][:6], main[2][6:9], main[2][9:]
        assert [t.base.data_ptr() for t in descriptors] == [t.data_ptr() for t in (q, k, v, do, lse)] + [
            pre[2][2].data_ptr()]  # q, k, v, dO, lse and this call's delta
        assert [list(t.block_shape) for t in descriptors] == [[64, 128]] * 4 + [[64]] * 2
        assert dk_out is dk and dv_out is dv and dq_acc is pre[2][3] and post[2][:2] == (dq_acc, dq)
        assert post[1] == (2 * 4 * 256 * 128 // attention_gluon_bwd._POST_BLOCK,) and post[2][4:6] == (
            2 * 4 * 256 * 128, 0)  # dQ's blocks only
        assert main[1] == (256 // config["BLOCK_N"], 2 * 2) and scalars == (256, 2, 2, 128 ** -0.5,
                                                                             128 ** -0.5 * 1.4426950408889634)
        assert main[3]["NUM_STAGES"] == config["NUM_STAGES"] and main[3]["STRICT_ORDER"] is False
        assert dq.shape == q.shape and dk.shape == k.shape and dq.dtype == q.dtype


def test_a_group_split_zeroes_and_converts_its_dkv_accumulators_in_the_same_three_launches(recorded_launches):
    do, q, k, v, o, lse = _cpu_inputs(b=2, hq=8, hkv=1, s=256)  # MQA: a group of 8, split 4 ways
    config = {**default_config(128, True), "GROUP_SPLIT": 4}
    dq, dk, dv = gluon_attention_backward(do, q, k, v, o, lse, True, config=config)
    (pre_name, _, pre, _), (_, grid, main, _), (_, post_grid, post, _) = recorded_launches
    rows, kv_rows = 2 * 8 * 256, 2 * 1 * 256
    dq_acc, dkv_acc = pre[3], pre[4]
    assert pre_name == "_bwd_preprocess_kernel" and pre[5:] == (rows, 2 * kv_rows)  # zeroes dQ_acc and dKV_acc
    assert dkv_acc.dtype == torch.float32 and dkv_acc.shape == (2, *k.shape)
    assert grid == (256 // config["BLOCK_N"], 2 * 1 * 4)  # a key block's programs share its group 4 ways
    assert main[6] is dq_acc and main[7].data_ptr() == dkv_acc[0].data_ptr() and \
        main[8].data_ptr() == dkv_acc[1].data_ptr()  # dK, dV added into dKV_acc
    block = attention_gluon_bwd._POST_BLOCK
    assert post[:3] == (dq_acc, dq, dkv_acc) and post[4:6] == (rows * 128, 2 * kv_rows * 128)
    assert post_grid == ((rows * 128 + block - 1) // block + (2 * kv_rows * 128 + block - 1) // block,)
    dkv = post[3]
    assert dkv.dtype == k.dtype and dk.data_ptr() == dkv[0].data_ptr() and dv.data_ptr() == dkv[1].data_ptr()
    assert dk.shape == k.shape and dv.shape == v.shape and dq.shape == q.shape


def test_each_distinct_call_gets_its_own_plan_and_bad_inputs_are_still_checked(recorded_launches):
    do, q, k, v, o, lse = _cpu_inputs()
    gluon_attention_backward(do, q, k, v, o, lse, True)
    gluon_attention_backward(do, q, k, v, o, lse, False)  # causal is in the key
    gluon_attention_backward(do, q, k, v, o, lse, True, scale=0.1)  # so is the scale
    gluon_attention_backward(*_cpu_inputs(s=384), causal=True)  # and the shapes
    assert len(attention_gluon_bwd._PLANS) == 4
    with pytest.raises(KernelInputError, match="sequence length"):
        gluon_attention_backward(*_cpu_inputs(s=200), causal=True)
    with pytest.raises(KernelInputError, match="lse"):
        gluon_attention_backward(do, q, k, v, o, lse.double(), True)
    with pytest.raises(KernelInputError, match="config"):
        gluon_attention_backward(do, q, k, v, o, lse, True, config={"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2})


def test_strided_inputs_are_copied_once_per_call(recorded_launches):
    do, q, k, v, o, lse = _cpu_inputs()
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, [B, S, H, D] strides
    for _ in range(2):
        gluon_attention_backward(do, q_t, k, v, o, lse, True)
    descriptors = [launch[2][:6] for launch in recorded_launches if launch[0] == "_attn_bwd_kernel"]
    assert all(d[0].base.is_contiguous() and d[0].base.data_ptr() != q_t.data_ptr() for d in descriptors)


def test_launch_backward_plans_once_for_attention_py(recorded_launches):
    do, q, k, v, o, lse = _cpu_inputs()
    config = default_config(128, False)
    for _ in range(2):
        attention_gluon_bwd.launch_backward(do, q, k, v, o, lse, False, 0.125, config)
    assert len(attention_gluon_bwd._PLANS) == 1 and len(recorded_launches) == 6


def test_flash_attentions_plan_keeps_one_backward_plan_per_do_layout_and_launches_as_launch_backward(
        recorded_launches):
    from workbench.kernels import attention

    do, q, k, v, o, lse = _cpu_inputs()
    config = default_config(128, True)
    plan = attention._AttentionPlan()
    plan.causal, plan.scale, plan.gluon_bwd, plan.gluon_bwd_plans = True, 128 ** -0.5, config, {}
    first = attention._gluon_backward_plan(plan, do, q, k, v, o)
    assert attention._gluon_backward_plan(plan, do.clone(), q, k, v, o) is first  # same layout: same plan
    do_t = do.transpose(1, 2).contiguous().transpose(1, 2)  # same values, [B, S, H, D] strides
    other = attention._gluon_backward_plan(plan, do_t, q, k, v, o)
    assert other is not first and other.copy[3] and not first.copy[3]  # this dO is copied, that one is not
    grads = attention_gluon_bwd.run_backward(other, do_t, q, k, v, o, lse)
    reference = attention_gluon_bwd.launch_backward(do_t, q, k, v, o, lse, True, 128 ** -0.5, config)
    ours, theirs = recorded_launches[:3], recorded_launches[3:]
    assert [(name, grid, kwargs) for name, grid, _, kwargs in ours] == [
        (name, grid, kwargs) for name, grid, _, kwargs in theirs]
    assert all(len(a) == len(b) and all(type(x) is type(y) and (not isinstance(x, (int, float)) or x == y)
                                        for x, y in zip(a, b)) for (_, _, a, _), (_, _, b, _) in zip(ours, theirs))
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    for i in range(attention.GLUON_BWD_PLANS + 1):  # bounded: it starts over past GLUON_BWD_PLANS layouts
        attention._gluon_backward_plan(plan, torch.empty_strided(do.shape, (0, 0, 0, 1 + i)), q, k, v, o)
    assert len(plan.gluon_bwd_plans) <= attention.GLUON_BWD_PLANS


def test_cpu_host_mode_times_the_cached_call_below_a_replanned_one(tmp_path):
    """benchmarks/kernels/attention_gluon_bwd_host_bench.py: the stubbed host path."""
    if not attention_gluon_bwd.HAS_GLUON or not interpreting():
        pytest.skip("a CPU measurement: needs triton with Gluon; skipped on the GPU runs (TRITON_INTERPRET=0)")
    bench = Path(__file__).resolve().parents[2] / "benchmarks/kernels/attention_gluon_bwd_host_bench.py"
    result = subprocess.run([sys.executable, str(bench), "--out", str(tmp_path), "--rounds", "2",
                             "--calls", "30"], env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((tmp_path / "host_cpu.json").read_text())["us_per_call"]
    cached, replanned = (figures[next(k for k in figures if k.startswith(prefix))] for prefix in ("checked", "re-"))
    assert 0 < cached < replanned


@pytest.mark.slow
def test_every_config_compiles_for_sm90_within_its_known_spills():
    """Ahead-of-time sm_90 builds (no GPU) of every config of every (head_dim, causal) bucket: spills no more than
    ``KNOWN_SPILL_BYTES`` says (none for the rest), the shared memory the estimate says, S^T's wgmma.wait_group 1
    (dP^T's GEMM still running under the exponentials) without ptxas serializing."""
    pytest.importorskip("triton.backends.nvidia")
    import triton

    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    if not attention_gluon_bwd.HAS_GLUON or version < (3, 6):
        pytest.skip(f"triton {triton.__version__} cannot build this kernel: it is written for the Gluon API of "
                    "triton 3.6 and 3.7 (triton.experimental.gluon)")
    code = ("import json; from workbench.kernels import attention_gluon_bwd as g\n"
            "cases = [(c, d, causal) for d in (64, 128) for causal in (False, True)\n"
            "         for c in g.config_space(d, causal)]\n"
            "print(json.dumps([[c, d, causal, g.inspect_build(c, d, causal).as_dict()] for c, d, causal in cases]))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    builds = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(builds) == sum(len(config_space(d, causal)) for d, causal in BUCKETS)
    for config, head_dim, causal, build in builds:
        allowed = KNOWN_SPILL_BYTES.get(_key(config, head_dim, causal), 0)
        assert build["spill_bytes"] <= allowed and not build["serialized"], (config, head_dim, causal, build)
        # above the estimate: the compiler's scratch (layout conversions, alignment), 1-2.5 KiB with triton 3.7.1
        assert 0 <= build["shared_bytes"] - shared_bytes(config, head_dim) <= attention_gluon_bwd.COMPILER_SCRATCH_BYTES, \
            (config, head_dim, build)
        assert build["shared_bytes"] <= SM90_SHARED_BYTES
        assert build["wait_groups"] == [0, 1], (config, head_dim, causal, build)
        consumers = config["BLOCK_N"] // 64
        assert build["launched_warps"] == 4 * consumers + 4, (config, build)  # + the producer's warpgroup


@pytest.mark.slow
@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, False)])
def test_the_strict_order_variant_builds_like_the_default(head_dim, causal):
    """STRICT_ORDER (fenced barrier inits, dS^T stored before the dV/dK GEMMs: the module docstring's H200
    experiment) builds for sm_90 with the default's shared memory, S^T's wait_group 1 and no serialization."""
    pytest.importorskip("triton.backends.nvidia")
    if not attention_gluon_bwd.HAS_GLUON:
        pytest.skip("needs triton with Gluon")
    config = default_config(head_dim, causal)
    plain = attention_gluon_bwd.inspect_build(config, head_dim, causal)
    strict = attention_gluon_bwd.inspect_build(config, head_dim, causal, strict_order=True)
    assert strict.shared_bytes == plain.shared_bytes and strict.wait_groups == plain.wait_groups == (0, 1)
    assert not strict.serialized and strict.spill_bytes <= 128  # 100 B at d=128 causal with triton 3.7.1


@pytest.mark.slow
@pytest.mark.parametrize("config, head_dim, causal", [
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 3, "DQ_UNDER_DK": True}, 128, True),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 4, "DS_BUFFERS": 2}, 128, False),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 3, "DS_BUFFERS": 1, "DQ_UNDER_DK": True}, 64, False),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": 1}, 128, True),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": 2}, 64, False),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "GROUP_SPLIT": 4}, 128, True),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "GROUP_SPLIT": 2}, 64, False),
])
def test_variants_build_for_sm90_within_their_shared_memory(config, head_dim, causal):
    """The VARIANT_KEYS builds (benchmarks/kernels/attention_gluon_bwd_variants.py's) compile for sm_90: shared
    memory as estimated and within sm_90's, S^T's wait_group 1 (DQ_UNDER_DK adds none other than 0 and 1: its
    dQ wait leaves dK's GEMM in flight with num_outstanding=1), no ptxas serialization."""
    pytest.importorskip("triton.backends.nvidia")
    if not attention_gluon_bwd.HAS_GLUON:
        pytest.skip("needs triton with Gluon")
    build = attention_gluon_bwd.inspect_build(config, head_dim, causal)
    assert 0 <= build.shared_bytes - shared_bytes(config, head_dim) <= 4096 and build.shared_bytes <= SM90_SHARED_BYTES
    assert build.wait_groups == (0, 1) and not build.serialized
    assert build.spill_bytes <= 512, build  # triton 3.7.1: 212, 8 and 224 bytes


@pytest.mark.slow
def test_ring_counters_take_the_division_by_three_out_of_the_spills():
    """The 3-stage ring's d=128 spills under ptxas 12.8 are ring-slot arithmetic (KNOWN_SPILL_BYTES): carried
    counters spill less. ptxas 13.0 builds both without spills (the H200, 2026-12-02)."""
    pytest.importorskip("triton.backends.nvidia")
    if not attention_gluon_bwd.HAS_GLUON:
        pytest.skip("needs triton with Gluon")
    two_branches = {**THREE_STAGES, "ONE_STEP": 0}  # the build these figures were read from
    plain = attention_gluon_bwd.inspect_build(two_branches, 128, False)
    counted = attention_gluon_bwd.inspect_build({**two_branches, "RING_COUNTERS": True}, 128, False)
    if attention_gluon_bwd.rings_build_right():
        assert counted.spill_bytes == plain.spill_bytes == 0, (counted, plain)
    else:
        assert counted.spill_bytes < plain.spill_bytes, (counted, plain)  # triton 3.7.1: 8 against 64 bytes
    assert counted.shared_bytes == plain.shared_bytes and counted.wait_groups == (0, 1) and not counted.serialized


on_hopper = pytest.mark.skipif(interpreting() or not supported(), reason="runs the kernel: needs an sm_90 GPU with "
                               "TRITON_INTERPRET=0 (CI has neither; the lead runs these on the H200)")
GPU_SHAPES = [  # (batch, heads_q, heads_kv, seq, head_dim, causal): whole 128-row blocks (check_sequence)
    (2, 4, 4, 256, 64, False),
    (2, 4, 4, 256, 128, True),
    (1, 8, 2, 384, 128, False),  # GQA 4
    (1, 8, 2, 384, 64, True),
    (2, 4, 1, 1024, 128, True),  # MQA, many query blocks (ring phases wrap)
    (1, 2, 2, 128, 64, True),  # one tile: the key block is the diagonal
    (1, 2, 2, 2048, 128, False),
]
RAGGED_SHAPES = [(1, 8, 2, 333, 128, False), (1, 2, 2, 40, 64, True), (2, 4, 1, 1000, 128, True)]
"""Sequences the kernel refuses (an illegal instruction at S = 333, d = 128 on the H200, 2026-12-02)."""


def _config_ids(config: dict) -> str:
    return f"{config['BLOCK_M']}x{config['BLOCK_N']}-s{config['NUM_STAGES']}"


def _inputs(b, hq, hkv, s, d, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
            for h in (hq, hkv, hkv, hq))


def _check_grads(got, want):
    for name, g, ref in zip(("dq", "dk", "dv"), got, want):
        err = ((g.double() - ref).norm() / ref.norm()).item()
        assert err <= 2e-2, (name, err)  # attention.TOLERANCE["bf16"]


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal", GPU_SHAPES)
@pytest.mark.parametrize("index", range(max(len(config_space(d, c)) for d, c in BUCKETS)))
def test_matches_the_float64_reference_on_the_gpu(b, hq, hkv, s, d, causal, index):
    from workbench.kernels.attention import flash_attention_fwd

    space = config_space(d, causal)
    if index >= len(space):
        pytest.skip(f"bucket ({d}, {causal}) has {len(space)} configs")
    config = space[index]
    q, k, v, do = _inputs(b, hq, hkv, s, d, b * 1000 + s + d)
    o, lse = flash_attention_fwd(q, k, v, causal)
    dq, dk, dv = gluon_attention_backward(do, q, k, v, o, lse, causal, config=config)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == torch.bfloat16
    _, *want = reference_attention_grads(q, k, v, do, causal)
    try:
        _check_grads((dq, dk, dv), want)
    except AssertionError as exc:
        raise AssertionError(f"{_config_ids(config)}: {exc}") from exc


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal, split", [
    (2, 8, 1, 1024, 128, True, 8),  # MQA: one query head a program
    (2, 8, 1, 1024, 128, True, 2),
    (1, 8, 2, 384, 128, False, 4),
    (1, 8, 2, 384, 64, True, 2),
])
def test_a_group_split_matches_the_float64_reference_on_the_gpu(b, hq, hkv, s, d, causal, split):
    from workbench.kernels.attention import flash_attention_fwd

    q, k, v, do = _inputs(b, hq, hkv, s, d, 17 + split)
    o, lse = flash_attention_fwd(q, k, v, causal)
    config = {**config_space(d, causal)[0], "GROUP_SPLIT": split}
    dq, dk, dv = attention_gluon_bwd.launch_backward(do, q, k, v, o, lse, causal, d ** -0.5, config)
    assert dk.shape == k.shape and dv.shape == v.shape and dk.dtype == dv.dtype == torch.bfloat16
    assert dk.is_contiguous() and dv.is_contiguous()
    _check_grads((dq, dk, dv), reference_attention_grads(q, k, v, do, causal)[1:])


@on_hopper
def test_a_repeated_call_launches_directly_on_each_calls_tensors():
    from workbench.kernels.attention import flash_attention_fwd

    attention_gluon_bwd._PLANS.clear()
    calls = [tuple(_inputs(2, 8, 2, 384, 128, seed)) for seed in range(3)]
    results = []
    for q, k, v, do in calls:
        o, lse = flash_attention_fwd(q, k, v, True)
        results.append(((q, k, v, do), gluon_attention_backward(do, q, k, v, o, lse, True)))
    plans = list(attention_gluon_bwd._PLANS.values())
    assert len(plans) == 1
    assert all(launch.handle is not None for launch in (plans[0].preprocess, plans[0].kernel, plans[0].convert))
    for (q, k, v, do), got in results:  # each call read its own tensors
        _check_grads(got, reference_attention_grads(q, k, v, do, True)[1:])


@on_hopper
def test_strided_inputs_an_explicit_scale_and_the_gluon_forward():
    from workbench.kernels.attention_gluon import gluon_attention_forward

    q = torch.randn(1, 384, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # [B, H, S, D] view
    k = torch.randn(1, 384, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(1, 384, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    do = torch.randn(1, 384, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    o, lse = gluon_attention_forward(q, k, v, True, scale=0.05)
    assert ((o.double() - reference_attention(q, k, v, True, scale=0.05)).norm() / o.double().norm()) < 2e-2
    got = gluon_attention_backward(do, q, k, v, o, lse, True, scale=0.05)
    _check_grads(got, reference_attention_grads(q, k, v, do, True, scale=0.05)[1:])


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal", RAGGED_SHAPES)
def test_a_ragged_sequence_is_refused_before_any_launch(b, hq, hkv, s, d, causal):
    from workbench.kernels.attention import flash_attention_fwd

    q, k, v, do = _inputs(b, hq, hkv, s, d, 11)
    o, lse = flash_attention_fwd(q, k, v, causal)
    with pytest.raises(KernelInputError, match="sequence length"):
        gluon_attention_backward(do, q, k, v, o, lse, causal)


@on_hopper
def test_fp16_matches_the_reference():
    from workbench.kernels.attention import flash_attention_fwd

    q, k, v, do = (t.half() for t in _inputs(2, 8, 2, 512, 64, 7))
    o, lse = flash_attention_fwd(q, k, v, True)
    got = gluon_attention_backward(do, q, k, v, o, lse, True)
    assert all(g.dtype == torch.float16 for g in got)
    _check_grads(got, reference_attention_grads(q, k, v, do, True)[1:])


@pytest.mark.parametrize("causal", [False, True])
def test_one_step_builds_the_step_and_its_gemms_once(causal):
    """ONE_STEP (1: the mask behind a runtime test, 2: every step masked) calls the step from one place: the PTX
    holds half the step's wgmmas of the two-branch build (masked and unmasked steps), and the same K/V, dK/dV
    GEMM-free rest; what ptxas 12.8's stale descriptor needs (two copies of the S^T GEMM) is gone."""
    pytest.importorskip("triton.backends.nvidia")
    if not attention_gluon_bwd.HAS_GLUON:
        pytest.skip("needs triton with Gluon")
    import re

    def wgmmas(one_step):
        config = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": one_step}
        return len(re.findall(r"wgmma\.mma_async", attention_gluon_bwd.crosscompile(config, 64, causal).asm["ptx"]))

    two_branches = wgmmas(0)
    assert two_branches > 0 and wgmmas(1) * 2 == two_branches and wgmmas(2) * 2 == two_branches


@pytest.mark.parametrize("value", [3, -1, True, "1", 1.0])
def test_one_step_takes_only_0_1_2(value):
    with pytest.raises(KernelInputError, match="ONE_STEP"):
        attention_gluon_bwd.check_variant({"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 2, "ONE_STEP": value}, 64)
