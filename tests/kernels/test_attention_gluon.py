"""FA3-style Gluon attention forward (workbench/kernels/attention_gluon.py). Gluon has no interpreter: on the CPU
these check the config space and its checks, and compile every shipped config for sm_90 ahead of time (no spills,
shared memory within sm_90's, the overlapped wgmma wait kept). On an sm_90 GPU with TRITON_INTERPRET=0 they check
O and lse against the float64 reference on shapes with GQA, causal masks and sequences that are not a multiple of
the tiles. Speed is benchmarks/kernels/attention_gluon_bench.py's job on an H200."""

import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.kernels import attention_gluon
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels.attention_gluon import (
    SM90_SHARED_BYTES,
    carry_config_space,
    config_space,
    default_config,
    gluon_attention_forward,
    l2_section_config_space,
    o_tma_config_space,
    persistent_config_space,
    register_budget,
    resolve_config,
    section_heads,
    shared_bytes,
    short_config_space,
    stagger_config_space,
    supported,
)
from workbench.kernels.attention_gluon_persistent import (TILE_OVERHEAD_BLOCKS, balanced_tile_table, launch_order_tile,
                                                          staggered_launch_order, tile_table)
from workbench.kernels.reference import reference_attention

BUCKETS = [(d, causal) for d in (64, 128) for causal in (False, True)]


@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_every_config_passes_its_own_checks_and_fits_shared_memory(head_dim, causal):
    space = config_space(head_dim, causal)
    assert space and space[0] == default_config(head_dim, causal)
    assert len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert resolve_config(config, head_dim, causal) is config
        assert shared_bytes(config, head_dim) <= SM90_SHARED_BYTES


def test_shared_bytes_counts_q_the_k_v_ring_and_the_barriers():
    config = {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 3, "PINGPONG": True}
    assert shared_bytes(config, 128) == 2 * (128 * 128 + 2 * 3 * 128 * 128) + 8 * (2 + 12 + 2)  # 224 KiB + 128


@pytest.mark.parametrize("change, key", [({"BLOCK_M": 256}, "BLOCK_M"), ({"BLOCK_N": 176}, "BLOCK_N"),
                                         ({"NUM_STAGES": 1}, "NUM_STAGES"), ({"PINGPONG": 1}, "PINGPONG"),
                                         ({"BLOCK_M": 64, "PINGPONG": True}, "PINGPONG"),
                                         ({"BLOCK_N": 256, "NUM_STAGES": 3}, "shared memory")])
def test_a_bad_config_names_the_key(change, key):
    with pytest.raises(KernelInputError, match=key):
        resolve_config({**default_config(128, False), **change}, 128, False)


@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_the_short_sequence_candidates_pass_their_checks_and_fit_their_ctas_per_sm(head_dim, causal):
    space = short_config_space(head_dim, causal)
    assert space and len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        ctas = config.get("CTAS_PER_SM", 1)
        assert resolve_config(config, head_dim, causal) is config
        assert ctas * (shared_bytes(config, head_dim) + 1024) <= 228 * 1024
        per_thread, consumer = register_budget(config)
        if ctas > 1:
            threads = 128 * (config["BLOCK_M"] // 64 + 1)
            assert ctas * per_thread * threads <= 65536 and per_thread % 8 == 0 and consumer % 8 == 0


def test_the_register_budget_splits_the_register_file_over_the_resident_ctas():
    one = {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_STAGES": 2, "PINGPONG": True}
    assert register_budget(one) == (None, 240)  # Triton's own cap (168 x 384 threads), FA3's 240 a consumer
    assert register_budget({**one, "BLOCK_M": 64, "PINGPONG": False, "CTAS_PER_SM": 2}) == (128, 232)
    assert register_budget({**one, "CTAS_PER_SM": 2}) == (80, 104)  # (80 x 384 - 24 x 128) / 256
    assert register_budget({**one, "BLOCK_M": 64, "PINGPONG": False, "CTAS_PER_SM": 3}) == (80, 136)


@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_the_persistent_candidates_pass_their_checks_and_hold_two_q_buffers(head_dim, causal):
    space = persistent_config_space(head_dim, causal)
    assert space and len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    for config in space:
        assert config["PERSISTENT"] is True and resolve_config(config, head_dim, causal) is config
        one_tile = {k: v for k, v in config.items() if k != "PERSISTENT"}
        q_tile_bytes = config["BLOCK_M"] * head_dim * 2
        consumers = config["BLOCK_M"] // 64
        assert shared_bytes(config, head_dim) == shared_bytes(one_tile, head_dim) + q_tile_bytes + 8 * 3 * consumers
        assert config.get("CTAS_PER_SM", 1) * (shared_bytes(config, head_dim) + 1024) <= 228 * 1024


def test_the_persistent_option_is_off_by_default_and_its_value_is_checked():
    assert attention_gluon.OPTIONAL_KEYS["PERSISTENT"] is False
    assert all("PERSISTENT" not in c for d, causal in BUCKETS for c in _spaces(d, causal, persistent=False))
    with pytest.raises(KernelInputError, match="PERSISTENT"):
        resolve_config({**default_config(128, True), "PERSISTENT": 1}, 128, True)
    with pytest.raises(KernelInputError, match="shared memory"):  # 3 stages of 128 x 128 and two Q buffers
        resolve_config({**default_config(128, True), "NUM_STAGES": 3, "PERSISTENT": True}, 128, True)


@pytest.mark.parametrize("mib, seq, group, batch_heads, heads", [
    (0, 512, 1, 512, 512),  # off: one section of every head
    (32, 512, 1, 512, 128),  # B=16, S=512, 32 heads (a01): K and V 256 KiB a head, 128 of them in 32 MiB
    (32, 1024, 4, 256, 256),  # GQA 4 (a03): 64 kv heads fit, 4 query heads each: every head
    (16, 2048, 4, 256, 64),  # 16 kv heads of 1 MiB, times the group
    (32, 3000, 1, 512, 16),  # 32 MiB / 1.5 MB = 21.8 kv heads: the power of two below
    (8, 32768, 2, 16, 2),  # one kv head (16 MiB) over the budget: still one, with its group
])
def test_a_section_holds_the_power_of_two_of_kv_heads_whose_k_and_v_fit_its_budget(mib, seq, group, batch_heads,
                                                                                  heads):
    assert section_heads({"L2_SECTION_MIB": mib}, seq, 128, group, batch_heads) == heads


def test_the_l2_section_candidates_pass_their_checks_and_a_bad_section_is_named():
    space = l2_section_config_space(128, True)
    assert space and len({json.dumps(c, sort_keys=True) for c in space}) == len(space)
    assert all(resolve_config(c, 128, True) is c and c["L2_SECTION_MIB"] > 0 for c in space)
    assert l2_section_config_space(128, False) == [] and attention_gluon.OPTIONAL_KEYS["L2_SECTION_MIB"] == 0
    unsectioned = [{k: v for k, v in c.items() if k != "L2_SECTION_MIB"} for c in space if c.get("PERSISTENT")]
    assert all(c in unsectioned for c in persistent_config_space(128, True))  # every persistent tile shape
    for bad in (-1, 2.0, True, 4096):
        with pytest.raises(KernelInputError, match="L2_SECTION_MIB"):
            resolve_config({**default_config(128, True), "L2_SECTION_MIB": bad}, 128, True)
    with pytest.raises(KernelInputError, match="L2_SECTION_MIB"):  # full attention has no causal order to section
        resolve_config({**default_config(128, False), "L2_SECTION_MIB": 32}, 128, False)


@pytest.mark.parametrize("seq, batch_heads, section, programs, block_m, block_n, causal", [
    (512, 512, 128, 132, 128, 128, True),  # a01 at 32 MiB: 2,048 tiles of 1-4 key blocks
    (1024, 128, 128, 132, 128, 64, True),  # a05's tiles at 64 keys: 2-16 blocks, fewer tiles than twice the programs
    (333, 8, 8, 5, 128, 128, True),  # ragged: the last query tile holds 77 rows
    (2048, 64, 64, 132, 128, 128, False),  # full attention: equal tiles, the stride order already balanced
])
def test_the_balanced_table_deals_every_tile_once_to_the_least_loaded_program(seq, batch_heads, section, programs,
                                                                             block_m, block_n, causal):
    tiles_m = -(-seq // block_m)
    table = balanced_tile_table(seq, batch_heads, section, programs, block_m, block_n, causal)
    offsets, tiles = table[:programs + 1], table[programs + 1:-1]
    assert offsets[0] == 0 and offsets[-1] == len(tiles) == tiles_m * batch_heads
    assert len(table) == programs + 1 + len(tiles) + 1  # the offsets, the tiles, the pad the kernel loads ahead into
    assert sorted(tiles) == list(range(tiles_m * batch_heads))  # each tile once
    runs = [tiles[offsets[p]:offsets[p + 1]] for p in range(programs)]
    assert all(run == sorted(run) for run in runs) and [run[0] for run in runs] == list(range(programs))

    def cost(tile):
        pid_m = launch_order_tile(tile, tiles_m, batch_heads, section, causal)[0]
        return TILE_OVERHEAD_BLOCKS + -(-(min(pid_m * block_m + block_m, seq) if causal else seq) // block_n)

    balanced = [sum(map(cost, run)) for run in runs]
    stride = [sum(map(cost, range(p, tiles_m * batch_heads, programs))) for p in range(programs)]
    longest = max(map(cost, tiles))
    assert max(balanced) <= max(stride) and max(balanced) <= sum(balanced) / programs + longest  # Graham's LPT bound
    if (seq, batch_heads) == (512, 512):  # a01: the stride order's 16 tiles of 40 blocks become at most 55 steps
        assert (max(stride), max(balanced)) == (56.0, 55.0)


def test_the_balanced_order_is_off_by_default_and_only_for_the_persistent_kernel():
    assert attention_gluon.OPTIONAL_KEYS["BALANCED_TILES"] is False
    persistent = persistent_config_space(128, True)[0]
    assert resolve_config({**persistent, "BALANCED_TILES": True}, 128, True)["BALANCED_TILES"] is True
    for bad in ({**default_config(128, True), "BALANCED_TILES": True}, {**persistent, "BALANCED_TILES": 1}):
        with pytest.raises(KernelInputError, match="BALANCED_TILES"):
            resolve_config(bad, 128, True)


@pytest.mark.parametrize("tiles_m, batch_heads, section", [(4, 512, 32), (4, 512, 512), (8, 256, 48), (1, 7, 3),
                                                          (3, 10, 4)])
def test_the_staggered_order_runs_each_tile_once_with_at_most_tiles_m_sections_live(tiles_m, batch_heads, section):
    order = staggered_launch_order(tiles_m, batch_heads, section)
    assert sorted(order) == list(range(tiles_m * batch_heads))
    sections = -(-batch_heads // section)
    seen_kinds = {}  # section -> the kinds of its tiles met so far, in order
    for tile in order:
        kind, head = divmod(tile, batch_heads)
        seen_kinds.setdefault(head // section, []).append(kind)
    for kinds in seen_kinds.values():  # each section: its longest tiles first, then the next, ...
        assert kinds == sorted(kinds)
    # a section's K/V is needed from its longest tiles to its shortest: at most tiles_m sections overlap
    first = {s: order.index(next(t for t in order if (t % batch_heads) // section == s)) for s in range(sections)}
    last = {s: max(i for i, t in enumerate(order) if (t % batch_heads) // section == s) for s in range(sections)}
    for s in range(sections):
        assert sum(first[o] <= last[s] and first[s] <= last[o] for o in range(sections)) <= 2 * tiles_m - 1


def test_a_stride_table_deals_the_order_as_the_kernel_without_a_table_would():
    programs, order = 132, staggered_launch_order(4, 512, 32)
    table = tile_table(512, 512, 32, programs, 128, 128, True, stagger=True, greedy=False)
    offsets, tiles = table[:programs + 1], table[programs + 1:-1]
    for p in range(programs):
        assert tiles[offsets[p]:offsets[p + 1]] == order[p::programs]
    assert balanced_tile_table(512, 512, 32, programs, 128, 128, True) == tile_table(512, 512, 32, programs, 128, 128,
                                                                                     True)


def test_o_s_tma_store_takes_one_more_tile_a_consumer_and_is_refused_where_it_cannot_run():
    assert attention_gluon.OPTIONAL_KEYS["O_TMA_STORE"] is False
    for causal in (True, False):
        space = o_tma_config_space(128, causal)
        wired = [c for _, _, c in attention_gluon.PERSISTENT_FORWARD[(128, causal)]]
        assert all({**c, "O_TMA_STORE": True} in space for c in wired)
        for config in space:
            assert resolve_config(config, 128, causal) is config
            twin = {key: value for key, value in config.items() if key != "O_TMA_STORE"}
            assert shared_bytes(config, 128) == shared_bytes(twin, 128) + config["BLOCK_M"] * 128 * 2
    assert o_tma_config_space(64, True) == []
    persistent = persistent_config_space(128, True)[0]
    for bad in ({**default_config(128, True), "O_TMA_STORE": True}, {**persistent, "O_TMA_STORE": 1},
                {**persistent, "O_TMA_STORE": True, "CARRY_TILES": True}):
        with pytest.raises(KernelInputError, match="O_TMA_STORE"):
            resolve_config(bad, 128, True)


def test_the_staggered_candidates_and_the_option_s_checks():
    assert attention_gluon.OPTIONAL_KEYS["L2_STAGGER"] is False
    space = stagger_config_space(128, True)
    assert space and all(resolve_config(c, 128, True) is c and c["L2_STAGGER"] for c in space)
    assert stagger_config_space(128, False) == [] and stagger_config_space(64, True) == []
    assert all(attention_gluon._constexprs(c, True)["TABLE"] and not attention_gluon._constexprs(c, True)["SECTIONED"]
               for c in space)
    persistent = persistent_config_space(128, True)[0]
    for bad, causal in (({**persistent, "L2_STAGGER": True}, True),  # nothing to stagger without sections
                        ({**default_config(128, True), "L2_SECTION_MIB": 8, "L2_STAGGER": True}, True),
                        ({**space[0], "L2_STAGGER": 1}, True)):
        with pytest.raises(KernelInputError, match="L2_STAGGER"):
            resolve_config(bad, 128, causal)


@pytest.mark.parametrize("head_dim, causal", BUCKETS)
def test_the_carried_candidates_are_persistent_configs_whose_consumers_run_every_key_block(head_dim, causal):
    space = carry_config_space(head_dim, causal)
    assert (len(space) > 0) == (head_dim == 128)
    for config in space:
        assert config["CARRY_TILES"] is True and config["PERSISTENT"] is True
        assert resolve_config(config, head_dim, causal) is config
        assert not causal or config["BLOCK_N"] == 128
        twin = {key: value for key, value in config.items() if key != "CARRY_TILES"}
        assert shared_bytes(config, head_dim) == shared_bytes(twin, head_dim)  # the same buffers and barriers
    wired = [{k: v for k, v in c.items() if k != "O_TMA_STORE"}
             for _, _, c in attention_gluon.PERSISTENT_FORWARD.get((head_dim, causal), ())]
    assert all({**c, "CARRY_TILES": True} in space for c in wired)


def test_the_carried_option_is_off_by_default_and_refused_where_it_cannot_run():
    assert attention_gluon.OPTIONAL_KEYS["CARRY_TILES"] is False
    assert all("CARRY_TILES" not in c for d, causal in BUCKETS for c in _spaces(d, causal, carry=False))
    persistent = {**persistent_config_space(128, True)[0], "CARRY_TILES": True}
    assert resolve_config(persistent, 128, False) is persistent
    for bad, causal in (({**default_config(128, True), "CARRY_TILES": True}, True),  # not persistent
                        ({**persistent, "CARRY_TILES": 1}, True),
                        ({**persistent, "BLOCK_N": 64, "NUM_STAGES": 3}, True)):  # the first consumer skips a block
        with pytest.raises(KernelInputError, match="CARRY_TILES"):
            resolve_config(bad, 128, causal)
    assert resolve_config({**persistent, "BLOCK_N": 64, "NUM_STAGES": 3}, 128, False)["BLOCK_N"] == 64


@pytest.mark.parametrize("change, key", [({"CTAS_PER_SM": 4}, "CTAS_PER_SM"), ({"CTAS_PER_SM": 2}, "shared memory"),
                                         ({"CTA_PER_SM": 2}, "CTA_PER_SM")])
def test_a_bad_residency_or_an_unknown_key_is_named(change, key):
    with pytest.raises(KernelInputError, match=key):  # the default's 128 x 128 tiles do not fit twice an SM
        resolve_config({**default_config(128, True), **change}, 128, True)


def test_a_config_missing_a_key_lists_the_keys():
    config = dict(default_config(64, True))
    del config["NUM_STAGES"]
    with pytest.raises(KernelInputError, match="NUM_STAGES"):
        resolve_config(config, 64, True)


@pytest.mark.skipif(not interpreting(), reason="CPU tensors under TRITON_INTERPRET=1 (tests/conftest.py sets it)")
def test_cpu_inputs_are_refused_before_any_launch():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    with pytest.raises(KernelInputError):
        gluon_attention_forward(q, q, q)
    with pytest.raises(KernelInputError, match="dtype"):
        gluon_attention_forward(q.float(), q.float(), q.float())


@pytest.mark.slow
def test_every_shipped_config_compiles_for_sm90_without_spills():
    """Ahead-of-time sm_90 builds (no GPU) of every config of every (head_dim, causal) bucket: no spills, the
    shared memory the estimate says, the overlapped loop's wgmma.wait_group 1 without ptxas serializing."""
    pytest.importorskip("triton.backends.nvidia")
    import triton

    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    if not attention_gluon.HAS_GLUON or version < (3, 6):
        pytest.skip(f"triton {triton.__version__} cannot build this kernel: it is written for the Gluon API of "
                    "triton 3.6 and 3.7 (triton.experimental.gluon)")
    code = ("import json; from workbench.kernels import attention_gluon as g\n"
            "cases = [(c, d, causal) for d in (64, 128) for causal in (False, True)\n"
            "         for c in g.config_space(d, causal) + g.short_config_space(d, causal)\n"
            "         + g.persistent_config_space(d, causal) + g.l2_section_config_space(d, causal)\n"
            "         + g.carry_config_space(d, causal) + g.stagger_config_space(d, causal)\n"
            "         + g.o_tma_config_space(d, causal)]\n"
            "print(json.dumps([[c, d, causal, g.inspect_build(c, d, causal).as_dict()] for c, d, causal in cases]))")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "0"},
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    builds = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(builds) == sum(len(_spaces(d, c)) for d, c in BUCKETS)
    for config, head_dim, causal, build in builds:
        per_thread = register_budget(config)[0]
        if per_thread is not None:  # CTAS_PER_SM > 1: the build keeps to its share of the register file
            assert build["registers"] <= per_thread, (config, build)
        assert build["spill_bytes"] == 0 and not build["serialized"], (config, head_dim, causal, build)
        assert 0 <= build["shared_bytes"] - shared_bytes(config, head_dim) <= 1024, (config, head_dim, build)
        assert build["shared_bytes"] <= SM90_SHARED_BYTES
        assert build["wait_groups"] == [0, 1], (config, head_dim, causal, build)
        consumers = config["BLOCK_M"] // 64
        assert build["launched_warps"] == 4 * consumers + 4, (config, build)  # + the producer's warpgroup


on_hopper = pytest.mark.skipif(interpreting() or not supported(), reason="runs the kernel: needs an sm_90 GPU with "
                               "TRITON_INTERPRET=0 (CI has neither; the lead runs these on the H200)")
GPU_SHAPES = [  # (batch, heads_q, heads_kv, seq, head_dim, causal)
    (2, 4, 4, 256, 64, False),
    (2, 4, 4, 256, 128, True),
    (1, 8, 2, 333, 128, False),  # GQA 4, sequence not a multiple of any tile
    (1, 8, 2, 333, 64, True),
    (2, 4, 1, 1000, 128, True),  # MQA, many key blocks (ring phases wrap), ragged tail on the diagonal
    (1, 2, 2, 40, 64, True),  # one partial tile: block 0 is the diagonal and the tail
    (1, 2, 2, 2048, 128, False),
]


def _config_ids(config: dict) -> str:
    return (f"{config['BLOCK_M']}x{config['BLOCK_N']}-s{config['NUM_STAGES']}{'-pp' if config['PINGPONG'] else ''}"
            f"-c{config.get('CTAS_PER_SM', 1)}{'-persistent' if config.get('PERSISTENT') else ''}"
            f"{'-l2s%d' % config['L2_SECTION_MIB'] if config.get('L2_SECTION_MIB') else ''}"
            f"{'-balanced' if config.get('BALANCED_TILES') else ''}{'-carry' if config.get('CARRY_TILES') else ''}"
            f"{'-staggered' if config.get('L2_STAGGER') else ''}{'-otma' if config.get('O_TMA_STORE') else ''}")


def _spaces(d: int, causal: bool, persistent: bool = True, carry: bool = True) -> list[dict]:
    return (config_space(d, causal) + short_config_space(d, causal)
            + (persistent_config_space(d, causal) + l2_section_config_space(d, causal) if persistent else [])
            + (carry_config_space(d, causal) if persistent and carry else [])
            + (stagger_config_space(d, causal) + o_tma_config_space(d, causal) if persistent else []))


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal", GPU_SHAPES)
@pytest.mark.parametrize("index", range(max(len(_spaces(d, c)) for d, c in BUCKETS)))
def test_matches_the_float64_reference_on_the_gpu(b, hq, hkv, s, d, causal, index):
    space = _spaces(d, causal)
    if index >= len(space):
        pytest.skip(f"bucket ({d}, {causal}) has {len(space)} configs")
    config = space[index]
    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
    o, lse = gluon_attention_forward(q, k, v, causal, config=config)
    ref_o, ref_lse = reference_attention(q, k, v, causal, return_lse=True)
    assert o.shape == q.shape and o.dtype == torch.bfloat16 and lse.shape == (b, hq, s) and lse.dtype == torch.float32
    err = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    assert err <= 2e-2, (_config_ids(config), err)  # attention.TOLERANCE["bf16"]
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-2, _config_ids(config)  # fp32 stats of bf16 scores


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, d, causal", [
    (4, 32, 4, 1000, 128, True),  # 512-1024 tiles over 132-264 programs: ring and Q phases wrap across tiles
    (3, 16, 1, 2047, 128, False),  # MQA, odd length, 16-32 key blocks a tile
    (4, 32, 8, 520, 64, True),  # a ragged tail on every head's last tile
])
@pytest.mark.parametrize("index", range(max(len(persistent_config_space(d, c)) for d, c in BUCKETS)))
def test_the_persistent_kernel_walks_many_tiles_a_program_and_matches_the_one_tile_kernel(b, hq, hkv, s, d, causal,
                                                                                           index):
    """More tiles than programs (the GPU_SHAPES have one tile a program at most): each program's phases continue
    over several tiles. Against the float64 reference, and against the one-tile kernel at the same tiles (the
    same per-tile code: a phase or schedule error moves O far past the 1e-3 asked here)."""
    space = persistent_config_space(d, causal)
    if index >= len(space):
        pytest.skip(f"bucket ({d}, {causal}) has {len(space)} persistent configs")
    config = space[index]
    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
               for h in (hq, hkv, hkv))
    o, lse = gluon_attention_forward(q, k, v, causal, config=config)
    one_tile = {key: value for key, value in config.items() if key != "PERSISTENT"}
    o_1, lse_1 = gluon_attention_forward(q, k, v, causal, config=one_tile)
    ref_o, ref_lse = reference_attention(q, k, v, causal, return_lse=True)
    assert ((o.double() - ref_o).norm() / ref_o.norm()).item() <= 2e-2, _config_ids(config)
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-2, _config_ids(config)
    assert ((o.double() - o_1.double()).norm() / o_1.double().norm()).item() <= 1e-3, _config_ids(config)
    assert (lse - lse_1).abs().max().item() <= 1e-4, _config_ids(config)


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s, mib", [
    (5, 6, 2, 4096, 8),  # 4 kv heads of 2 MiB a section, 12 query heads: sections of 12, 12 and 6 (a ragged last)
    (4, 32, 32, 512, 4),  # 16 heads of 256 KiB a section, 8 sections of 64 tiles over 132 programs
])
@pytest.mark.parametrize("index", range(len(l2_section_config_space(128, True))))
def test_the_sectioned_tile_order_computes_every_tile_once_as_the_unsectioned_one(b, hq, hkv, s, mib, index):
    """The order changes, not the per-tile code: O and lse bitwise equal to the same config without sections (a
    tile skipped leaves torch.empty's garbage in O; one done twice races on it)."""
    config = {**l2_section_config_space(128, True)[index], "L2_SECTION_MIB": mib}
    assert section_heads(config, s, 128, hq // hkv, b * hq) < b * hq  # more than one section
    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s)
    q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
               for h in (hq, hkv, hkv))
    o, lse = gluon_attention_forward(q, k, v, True, config=config)
    o_0, lse_0 = gluon_attention_forward(q, k, v, True, config={**config, "L2_SECTION_MIB": 0})
    assert torch.equal(o, o_0) and torch.equal(lse, lse_0), _config_ids(config)
    ref_o = reference_attention(q[:1], k[:1], v[:1], True)
    assert ((o[:1].double() - ref_o).norm() / ref_o.norm()).item() <= 2e-2, _config_ids(config)


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s", [
    (4, 32, 32, 512),  # 512 tiles over 132 programs: runs of 3 and 4 tiles, rings and turns across them
    (2, 4, 1, 1000),  # MQA, ragged tail on the diagonal
    (1, 8, 2, 333),  # fewer tiles than programs: one tile each
])
@pytest.mark.parametrize("index", [i for i, c in enumerate(l2_section_config_space(128, True))
                                   if c.get("BALANCED_TILES")])
def test_the_balanced_tile_order_computes_every_tile_once_as_the_stride_order(b, hq, hkv, s, index):
    """Only the order changes: O and lse bitwise equal to the same tiles in the stride order, unsectioned."""
    config = l2_section_config_space(128, True)[index]
    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s)
    q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
               for h in (hq, hkv, hkv))
    stride = {key: value for key, value in config.items() if key not in ("L2_SECTION_MIB", "BALANCED_TILES")}
    o_0, lse_0 = gluon_attention_forward(q, k, v, True, config=stride)
    for mib in (config["L2_SECTION_MIB"], 0):
        o, lse = gluon_attention_forward(q, k, v, True, config={**config, "L2_SECTION_MIB": mib})
        assert torch.equal(o, o_0) and torch.equal(lse, lse_0), (_config_ids(config), mib)


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s", [
    (4, 32, 32, 512),  # a01's tiles at B=4: 512 tiles (causal: of 1-4 key blocks) over 132 programs
    (4, 32, 4, 1000),  # GQA 8, a ragged tail (on the diagonal), phases across ~4-8 tiles a program
    (3, 16, 1, 2047),  # MQA, odd length, 16 key blocks a tile
    (1, 8, 2, 333),  # fewer tiles than programs: one tile each, its P V after the loop
    (1, 2, 2, 40),  # one partial tile
])
@pytest.mark.parametrize("causal, index", [(causal, i) for causal in (True, False)
                                           for i in range(len(carry_config_space(128, causal)))])
def test_carried_tile_boundaries_compute_the_same_tiles_bitwise(b, hq, hkv, s, causal, index):
    """CARRY_TILES moves a tile's last P V into the next tile's first turn: the same wgmmas on the same operands,
    so O and lse are bitwise those of the config without it (a tile's O stored with the next tile's sums, or a
    ring or turn phase off by one, moves them far)."""
    config = carry_config_space(128, causal)[index]
    q, k, v, o = _bitwise_twins(b, hq, hkv, s, causal, config, ("CARRY_TILES",))
    ref_o = reference_attention(q[:1], k[:1], v[:1], causal)
    assert ((o[:1].double() - ref_o).norm() / ref_o.norm()).item() <= 2e-2, _config_ids(config)


def _bitwise_twins(b, hq, hkv, s, causal, config, options):
    """(q, k, v, O) of ``config`` on random inputs of this shape, after checking O and lse bitwise equal to those of
    its twin without ``options`` (an option that only reorders or restages work)."""
    generator = torch.Generator(device="cuda").manual_seed(b * 1000 + s)
    q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
               for h in (hq, hkv, hkv))
    o, lse = gluon_attention_forward(q, k, v, causal, config=config)
    twin = {key: value for key, value in config.items() if key not in options}
    o_0, lse_0 = gluon_attention_forward(q, k, v, causal, config=twin)
    assert torch.equal(o, o_0) and torch.equal(lse, lse_0), _config_ids(config)
    return q, k, v, o


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s", [
    (16, 32, 32, 512),  # a01: 16 sections of 32 heads (8 MiB), 19 rounds
    (4, 32, 4, 1000),  # GQA 8, a ragged tail on the diagonal
    (3, 7, 7, 384),  # a ragged last section
    (1, 8, 2, 333),  # fewer tiles than programs
])
@pytest.mark.parametrize("index", range(len(stagger_config_space(128, True))))
def test_the_staggered_order_computes_every_tile_once_as_the_stride_order(b, hq, hkv, s, index):
    """Only the order changes: O and lse bitwise equal to the same tiles in the stride order, unsectioned."""
    _bitwise_twins(b, hq, hkv, s, True, stagger_config_space(128, True)[index],
                   ("L2_SECTION_MIB", "BALANCED_TILES", "L2_STAGGER"))


@on_hopper
@pytest.mark.parametrize("b, hq, hkv, s", [
    (4, 32, 32, 512),  # 512 tiles over 132 programs: each consumer's O tile reused every tile
    (4, 32, 4, 1024),  # GQA 8, causal tiles of 1-8 blocks
    (3, 16, 1, 2048),  # MQA, 16 key blocks a tile
    (1, 8, 2, 333),  # not a multiple of 64: the register stores (the plan's O_TMA off)
    (2, 4, 2, 192),  # 64-row tail tiles: the second consumer's rows past S are clipped away by the tile count
])
@pytest.mark.parametrize("causal, index", [(causal, i) for causal in (True, False)
                                           for i in range(len(o_tma_config_space(128, causal)))])
def test_o_s_tma_store_writes_the_same_o_as_the_register_stores(b, hq, hkv, s, causal, index):
    """The same O, bitwise: only the path O takes to global memory changes (a tile stored to the wrong rows, or
    a shared tile overwritten before its store has read it, moves it far)."""
    _bitwise_twins(b, hq, hkv, s, causal, o_tma_config_space(128, causal)[index], ("O_TMA_STORE",))


@on_hopper
def test_a_repeated_call_reuses_its_plan_and_launches_directly_on_new_tensors():
    from workbench.kernels.attention_gluon import _PLANS

    config = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2, "PINGPONG": False, "CTAS_PER_SM": 2}
    inputs = [[torch.randn(2, h, 384, 128, device="cuda", dtype=torch.bfloat16) for h in (4, 2, 2)]
              for _ in range(3)]
    outs = [gluon_attention_forward(q, k, v, True, config=config) for q, k, v in inputs]
    plans = [p for p in _PLANS.values() if p.lse_shape == (2, 4, 384)]
    assert len(plans) == 1 and plans[0].launch.handle is not None  # after the first launch: the direct path
    for (q, k, v), (o, lse) in zip(inputs, outs):  # each call read its own tensors
        ref_o, ref_lse = reference_attention(q, k, v, True, return_lse=True)
        assert ((o.double() - ref_o).norm() / ref_o.norm()).item() <= 2e-2
        assert (lse.double() - ref_lse).abs().max().item() <= 1e-2


@on_hopper
def test_strided_inputs_and_an_explicit_scale():
    q = torch.randn(1, 300, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # [B, H, S, D] view
    k = torch.randn(1, 300, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(1, 300, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    o, lse = gluon_attention_forward(q, k, v, True, scale=0.05)
    ref_o, ref_lse = reference_attention(q, k, v, True, scale=0.05, return_lse=True)
    assert ((o.double() - ref_o).norm() / ref_o.norm()).item() <= 2e-2
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-2


@pytest.mark.parametrize("head_dim, causal, seq_len, picked", [
    (128, True, 2048, True), (128, False, 8192, True), (128, True, 1024, True), (128, False, 1024, False),
    (128, True, 2048 + 64, False), (64, True, 16384, True), (64, False, 8192, True), (64, True, 4096, False),
    (64, False, 4096 + 128, True), (96, False, 8192, False)])
def test_the_config_none_forward_takes_this_kernel_only_for_its_buckets_whole_block_sequences(head_dim, causal,
                                                                                              seq_len, picked):
    config = attention_gluon.pinned_forward_config(head_dim, causal, seq_len)
    assert (config is not None) == picked
    if picked:
        assert resolve_config(config, head_dim, causal) is config


@on_hopper
@pytest.mark.parametrize("hq, hkv, s, d, causal", [(8, 2, 2048, 128, True), (4, 4, 2048, 128, False),
                                                   (4, 1, 16384, 64, True)])
def test_flash_attention_runs_its_long_forward_here_and_its_backward_on_the_gluon_o_and_lse(hq, hkv, s, d, causal):
    from workbench.kernels.attention import _plan, flash_attention
    from workbench.kernels.reference import reference_attention_grads

    generator = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, do = (torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16, generator=generator)
                   for h in (hq, hkv, hkv, hq))
    assert _plan(q, k, v, causal, None, None, None).gluon is not None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o = flash_attention(q, k, v, causal)
    o.backward(do)
    want = reference_attention_grads(q.detach(), k.detach(), v.detach(), do, causal)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), want):
        err = ((got.double() - ref).norm() / ref.norm()).item()
        assert err <= 2e-2, (name, err)
