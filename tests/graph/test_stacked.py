"""workbench.graph.stacked: a candidate's tables built from pieces shared through the step model's memo are the
tables built afresh, op for op, and the single-GPU tables are ``stack_kernels.stack_step_ops``' flat list."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph import stacked
from workbench.graph.stack_kernels import stack_step_ops, torchtitan_flavor
from workbench.models import get_model
from workbench.perf.timer_key import KeyedOps, timer_key
from workbench.stack_memory import host_time_s, launch_counts
from workbench.stacks import get_stack

MODEL = get_model("llama3-8b")
LAYOUTS = ((1, 1, 1, "fsdp"), (8, 1, 1, "fsdp"), (8, 1, 1, "ddp"), (4, 1, 2, "fsdp"), (2, 2, 2, "fsdp"),
           (2, 4, 1, "fsdp"), (16, 1, 1, "fsdp"))
"""(dp, tp, pp, sharding): one GPU, FSDP2 over 8 and 16 ranks (float8 gathers over 8, 4, 2 and 16 shards), DDP,
pipeline and tensor parallelism."""


def _configs():
    for (dp, tp, pp, sharding), mb, precision, ac in itertools.product(LAYOUTS, (1, 2), ("bf16", "fp8"),
                                                                        ("none", "selective", "full")):
        p = Parallelism(dp=dp, tp=tp, pp=pp, sharding=sharding)
        yield TrainingConfig(mb, 2048, global_batch=dp * mb * 4, precision=precision, activation_checkpointing=ac,
                             parallelism=p).resolved(MODEL)


def _same(a: stacked.StackStep, b: stacked.StackStep, stack) -> None:
    assert a.microbatch_ops == b.microbatch_ops and a.step_ops == b.step_ops
    for ops, _ in a.microbatch_parts:  # a block keyed by its family (first keyed at another micro-batch) as op by op
        if type(ops) is KeyedOps:
            assert list(ops.family.keys(ops)) == [timer_key(op) for op in ops]
    assert [op.extra for op in a.microbatch_ops + a.step_ops] == [op.extra for op in b.microbatch_ops + b.step_ops]
    assert (a.flavor, a.policy, a.dims, a.fsdp_gather_scale) == (b.flavor, b.policy, b.dims, b.fsdp_gather_scale)
    assert a.host_s(stack, 4) == b.host_s(stack, 4) and a.memory(stack, 141e9) == b.memory(stack, 141e9)


@pytest.mark.parametrize("stack_name", ["torchtitan", "pytorch-eager"])
def test_shared_pieces_are_the_fresh_tables(stack_name):
    """One memo over every layout, precision and checkpointing mode (as a search shares it): each table equals
    the one built with no memo, so no piece is shared beyond what its key says it reads."""
    stack = get_stack(stack_name)
    memo: dict = {}
    checked = 0
    for cfg, compiled in itertools.product(_configs(), (False, True)):
        shared, gap = stacked.stack_tables(MODEL, cfg, stack, compiled=compiled, param_dtype="fp32", memo=memo)
        assert gap == stacked.scope_gap(MODEL, cfg, stack.kernels)
        if shared is None:
            continue
        _same(shared, stacked.stack_step(MODEL, cfg, stack, compiled=compiled, param_dtype="fp32"), stack)
        checked += 1
    assert checked >= 40  # pytorch-eager: one GPU and plain data parallelism only


@pytest.mark.parametrize("policy", ["none", "selective-op", "full", "selective-3"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("float8", ["none", "rowwise"])
def test_one_gpu_tables_are_the_flat_step(policy, compiled, float8):
    """One block's ops copied over the stage's blocks are the blocks' ops counted over the layers
    (``stack_step_ops``), the launch counts and host time with them."""
    stack = dataclasses.replace(get_stack("torchtitan"), checkpointing={"none": policy, "selective": policy,
                                                                          "full": policy})
    cfg = TrainingConfig(2, 2048, precision="fp8" if float8 != "none" else "bf16").resolved(MODEL)
    tables = stacked.stack_step(MODEL, cfg, stack, compiled=compiled, param_dtype="fp32")
    flat = stack_step_ops(MODEL, 2, 2048, torchtitan_flavor(compiled, float8), policy)
    micro = tables.microbatch_ops  # (the step's optimizer counts the model's parameters its own way)
    assert micro == flat[:len(micro)] and [op.extra for op in micro] == [op.extra for op in flat[:len(micro)]]
    assert [op.name.split(".")[0] for op in flat[len(micro):]] == [op.name.split(".")[0] for op in tables.step_ops]
    flavor = tables.flavor
    counts = launch_counts(tables.microbatch_ops, flavor, MODEL.num_layers)
    step = launch_counts(tables.step_ops, dataclasses.replace(flavor, compile_blocks=False), 0)
    constants = {name: c.value for name, c in stack.constants.items()}
    assert tables.host_s(stack, 3) == host_time_s({k: 3 * counts[k] + step[k] for k in counts}, constants)


def test_a_memo_is_one_models():
    memo: dict = {}
    cfg = TrainingConfig(1, 2048).resolved(MODEL)
    stacked.stack_tables(MODEL, cfg, get_stack("torchtitan"), compiled=False, param_dtype="fp32", memo=memo)
    with pytest.raises(ValueError, match="one model's and one stack's"):
        stacked.stack_tables(get_model("llama3.2-1b"), cfg, get_stack("torchtitan"), compiled=False,
                             param_dtype="fp32", memo=memo)


@pytest.mark.parametrize("stack_name", ["torchtitan", "torchtitan-flash2", "pytorch-eager"])
def test_a_blocks_ops_differ_across_micro_batches_in_their_sizes_only(stack_name):
    """``stacked._BlockLayout`` (launch counts, weight-shard cast runs, recomputed ops) is made from one
    micro-batch's block and shared by every micro-batch of its flavor, sequence and layout: a branch of
    ``block_ops`` on a size that changed a name, count, kind, layer, dtype, phase or tag (as ``head_ops``' loss
    splits by size) would make it wrong, and fails here."""
    stack = get_stack(stack_name)
    sizes = ("shape", "flops", "bytes_read", "bytes_written")
    flavors = [(compiled, dtype, recipe, fsdp, gathers)
               for compiled, dtype, fsdp in itertools.product((False, True), ("fp32", "bf16"), (False, True))
               for recipe, gathers in (("none", 0), ("rowwise", 0), ("tensorwise", stacked.ANY_SHARDS))
               if stack.kernels == "torchtitan" or recipe == "none"]
    checked = 0
    for (compiled, dtype, recipe, fsdp, gathers), seq, tp, cp in itertools.product(flavors, (2048, 8192), (1, 2, 4),
                                                                                    (1, 2)):
        flavor = stacked._flavor(MODEL, stack.kernels, compiled, dtype, fsdp, recipe, gathers)
        blocks = []
        for micro_batch in (1, 2, 3, 8, 64):
            d = dataclasses.replace(stacked.Dims.of(MODEL, micro_batch, seq, tp, cp), sdpa_backend=stack.sdpa_backend,
                                    context_parallel=stack.context_parallel, layers=1)
            fwd, bwd = stacked.block_ops(d, flavor)
            blocks.append([{k: v for k, v in vars(op).items() if k not in sizes} for op in fwd + bwd])
        assert all(block == blocks[0] for block in blocks)
        checked += 1
    assert checked >= 24


@pytest.mark.parametrize("compiled", [False, True])
def test_a_gathered_forward_differs_across_shard_counts_in_its_sizes_only(compiled):
    """Under FSDP2's float8 all-gather a block's forward is one piece per shard count: the block built with
    ``ANY_SHARDS``, its weight-shard casts made again for the shards (``stacked._gathered_forward``). Its launch
    counts, its timer family and which of its ops a recomputed block reruns are the layout's, shared by every shard
    count and micro-batch: a cast whose ops differed in a name, count, kind, layer, dtype, phase or tag from one
    shard count to another would make them wrong, and fails here."""
    sizes = ("shape", "flops", "bytes_read", "bytes_written")
    checked = 0
    for dtype, seq, tp, micro_batch in itertools.product(("fp32", "bf16"), (2048, 8192), (1, 2, 4), (1, 3)):
        flavor = stacked._flavor(MODEL, "torchtitan", compiled, dtype, True, "tensorwise", stacked.ANY_SHARDS)
        d = dataclasses.replace(stacked.Dims.of(MODEL, micro_batch, seq, tp), layers=1)
        fwd, bwd = map(tuple, stacked.block_ops(d, flavor))
        layout = stacked._BlockLayout.of(fwd, bwd, compiled, True)
        assert sum(cast for *_, cast in layout.runs) == 7  # every linear's weight-shard cast, found
        forwards = [stacked._gathered_forward({}, (shards,), fwd, layout.runs, d, shards) for shards in (2, 8, 64)]
        assert all(len(f) == len(fwd) for f in forwards)
        assert forwards[0] != forwards[2]  # the casts were made again (their sizes)
        fields = [[{k: v for k, v in vars(op).items() if k not in sizes} for op in f] for f in [fwd, *forwards]]
        assert all(f == fields[0] for f in fields)
        for policy in ("full", "selective-op", "selective-op-all-mm"):
            assert all(stacked._recomputed_indices(f, policy) == stacked._recomputed_indices(fwd, policy)
                       for f in forwards)
        checked += 1
    assert checked == 24
