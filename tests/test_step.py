"""The step-model pipeline (workbench.step): its op graph is the family's, its memoized timer is op_time, and its
fast summary is exactly the prediction's, on every path (stacks, cp, virtual stages, zero1, LoRA, the job)."""

import dataclasses
import itertools

import pytest

from workbench.config import CHECKPOINTING, Parallelism, TrainingConfig
from workbench.graph.execution import Execution
from workbench.graph.ops import FlatShape, memory_op
from workbench.graph.transformer import transformer_microbatch_ops
from workbench.hardware import get_gpu
from workbench.models import get_model
from workbench.perf import op_time
from workbench.perf.efficiency import constants_for
from workbench.predict import predict
from workbench.perf.timer_key import TIMER_EXTRAS, timer_key
from workbench.step import StepModel, _block_graph, _block_pieces, microbatch_ops


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "gpt2-small"])
def test_one_block_times_the_stage_is_the_family_graph(model):
    m = get_model(model)
    for ac, pp, execution, lora in itertools.product(("none", "selective", "full"), (1, 3), (None, Execution()),
                                                     (0, 8)):
        cfg = TrainingConfig(2, 1024, "bf16", Parallelism(dp=2, tp=2, pp=pp, sharding="ddp"), ac,
                             lora_rank=lora).resolved(m)
        ours, theirs = microbatch_ops(m, cfg, execution), transformer_microbatch_ops(m, cfg, execution)
        assert ours == theirs
        assert [o.extra for o in ours] == [o.extra for o in theirs]  # extra is not compared by Op equality


def test_the_prediction_lists_the_family_graph_op_by_op():
    m = get_model("llama3-8b")
    cfg = TrainingConfig(1, 4096, "bf16", Parallelism(dp=4, pp=4), "selective", 32).resolved(m)
    p = predict(m, "h100", cfg, stack="ideal")  # the fused graph (the default stack, torchtitan, has its own ops)
    micro = transformer_microbatch_ops(m, cfg)
    assert [o.op for o in p.ops[:len(micro)]] == micro
    assert [o.executions for o in p.ops[:len(micro)]] == [op.count * cfg.grad_accumulation for op in micro]


def test_the_memoized_timer_tells_apart_what_op_time_reads():
    gpu = get_gpu("h200")
    step = StepModel("llama3-8b", gpu)
    base = memory_op("copy", "copy", FlatShape(1 << 24), "bf16", reads=1, writes=1)
    variants = [base, dataclasses.replace(base, extra={"transpose": True}),
                dataclasses.replace(base, extra={"unvectorized": True}),
                dataclasses.replace(base, extra={"gather": "torch"}),
                dataclasses.replace(base, extra={"bandwidth_kind": "rmsnorm"}),
                dataclasses.replace(base, dtype="fp32", bytes_read=base.bytes_read * 2)]
    times = [step.op_time(op) for op in variants]  # each first, then again from the memo
    assert [step.op_time(op) for op in variants] == times
    assert times == [op_time(op, gpu, constants_for(gpu, False)) for op in variants]
    assert len({t.time_s for t in times}) == len(times)


def test_the_timer_key_holds_each_flag_op_time_reads():
    """``timer_key`` spells its ``extra`` flags out one by one: they are ``TIMER_EXTRAS``, in its order."""
    base = memory_op("copy", "copy", FlatShape(1 << 24), "bf16", reads=1, writes=1)
    flagged = dataclasses.replace(base, extra={name: f"{name} value" for name in reversed(TIMER_EXTRAS)})
    assert timer_key(flagged)[-1] == tuple(f"{name} value" for name in TIMER_EXTRAS)
    assert timer_key(base)[-1] == timer_key(dataclasses.replace(base, extra={"aten": "mm"}))[-1] == (None,) * 6


CONFIGS = [
    TrainingConfig(2, 4096, "bf16", Parallelism(dp=8), "none", 64),
    TrainingConfig(1, 8192, "bf16", Parallelism(dp=2, tp=4, cp=2), "full", 8),
    TrainingConfig(1, 4096, "fp8", Parallelism(dp=4, pp=4, virtual_stages=2, sharding="zero1"), "selective", 32),
    TrainingConfig(4, 2048, "bf16", Parallelism(dp=8, sharding="ddp"), "none", 64, lora_rank=16),
    TrainingConfig(1, 8192, "bf16", Parallelism(dp=1), "selective", 4),
]


@pytest.mark.parametrize("stack, execution", [(None, None), ("torchtitan", None), ("pytorch-eager", None),
                                               ("workbench-job", None), (None, Execution(compile=True))])
def test_summary_is_exactly_the_prediction(stack, execution):
    step = StepModel("llama3.2-1b", "h200", stack=stack, execution=execution)
    for cfg in CONFIGS + CONFIGS[::-1]:  # a second pass runs from the caches
        cfg = cfg.resolved(step.model)
        for compile in (False, True):
            full = predict("llama3.2-1b", "h200", cfg, stack=stack, execution=execution, compile=compile)
            assert step.summary(cfg, compile=compile) == full.summary
            assert step.prediction(cfg, compile=compile).summary == full.summary
            fast = step.summary(cfg, compile=compile, max_micro_batch=False)
            assert fast == dataclasses.replace(full.summary, max_micro_batch=-1)


def test_the_bubble_shrinks_with_virtual_stages_on_every_path():
    step = StepModel("llama3-8b", "h100")
    one, two = (TrainingConfig(1, 4096, "bf16", Parallelism(dp=2, pp=4, virtual_stages=v), "none", 16)
                for v in (1, 2))
    assert step.summary(two).bubble_s == pytest.approx(step.summary(one).bubble_s / 2, rel=1e-12)
    assert step.summary(two).bubble_s == predict("llama3-8b", "h100", two).summary.bubble_s


def test_context_parallelism_hides_its_ring_behind_attention_in_the_summary():
    cfg = TrainingConfig(1, 32768, "bf16", Parallelism(dp=2, cp=4), "none", 8)
    s = StepModel("llama3-8b", "h200").summary(cfg)
    comms = predict("llama3-8b", "h200", cfg).comms
    # torchtitan's ring (PyTorch's): the K/V all-gather beside each call's first step, fp32 dK/dV beside the next
    for name in ("cp.all_gather_kv", "cp.send_recv_grad_kv"):
        ring = next(c for c in comms if c.name == name)
        assert ring.exposed_s < ring.time_s  # attention compute hides part of it
    assert s.communication_s == sum(c.exposed_s for c in comms)


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "gpt2-small"])
def test_one_build_gives_the_block_of_every_checkpointing_mode(model):
    m = get_model(model)
    for precision, tp, execution, lora in itertools.product(("bf16", "fp8"), (1, 2),
                                                            (None, Execution(), Execution(compile=True)), (0, 8)):
        base = TrainingConfig(2, 1024, precision, Parallelism(dp=2, tp=tp, sharding="ddp"),
                              lora_rank=lora).resolved(m)
        ends, fwd, head, bwd, recompute = _block_graph(m, base, execution)
        for ac in CHECKPOINTING:
            theirs = _block_pieces(m, dataclasses.replace(base, activation_checkpointing=ac), execution)
            ours = (ends, fwd, head, bwd, recompute[ac])
            assert ours == theirs, (precision, tp, execution, lora, ac)
            assert [[o.extra for o in piece] for piece in ours] == [[o.extra for o in piece] for piece in theirs]


def test_the_caches_shared_by_sharding_and_layout_give_each_config_its_own_numbers():
    # one model warmed by configurations that share a micro-batch graph, accumulation or collectives: each summary
    # must still be exactly a fresh predict's (a cache keyed too narrowly would hand one config another's numbers)
    step = StepModel("mixtral-8x7b", "mi300x")
    configs = [TrainingConfig(mb, 4096, precision, Parallelism(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, sharding=sharding),
                              ac, global_batch).resolved(step.model)
               for mb, precision, (dp, tp, pp, ep, cp), sharding, ac, global_batch in itertools.product(
                   (1, 2), ("bf16", "fp8"), ((4, 2, 2, 2, 1), (8, 2, 1, 4, 1), (4, 2, 1, 2, 2), (4, 2, 1, 2, 1),
                                             (2, 2, 4, 1, 1)), ("fsdp", "ddp", "zero1"), ("none", "full"), (64, 128))]
    for cfg in configs + configs[::-1]:
        assert step.summary(cfg) == predict("mixtral-8x7b", "mi300x", cfg).summary, cfg


def test_the_fused_steps_micro_batch_stage_is_shared_only_by_configs_whose_blocks_match():
    # the fused step caches one micro-batch Stage per (block shape, precision, tp/ep/cp, pp, checkpointing, LoRA):
    # configurations that differ in anything else (dp, sharding, accumulation) share it, and each summary must still
    # be exactly a fresh predict's
    step = StepModel("llama3-8b", "h100", stack="ideal")
    configs = [TrainingConfig(mb, 4096, precision, Parallelism(dp=dp, tp=tp, pp=pp, sharding=sharding), ac,
                              global_batch).resolved(step.model)
               for mb, precision, (dp, tp, pp), sharding, ac, global_batch in itertools.product(
                   (1, 2), ("bf16", "fp8"), ((8, 1, 1), (4, 2, 1), (4, 1, 2), (2, 2, 2)), ("fsdp", "ddp"),
                   ("none", "selective", "full"), (64, 128))]
    for cfg in configs + configs[::-1]:
        assert step.summary(cfg) == predict("llama3-8b", "h100", cfg, stack="ideal").summary, cfg


def test_a_summary_has_its_dataclass_fields_in_order():
    # the step model makes its summaries without the frozen __init__: the fields, in order (as_dict reads them so)
    from workbench.step_result import StepSummary

    step = StepModel("llama3.2-1b", "h200")
    for cfg in CONFIGS[:2]:
        s = step.summary(cfg.resolved(step.model))
        assert list(s.__dict__) == [f.name for f in dataclasses.fields(StepSummary)]
        assert s == StepSummary(**s.__dict__) and hash(s) == hash(StepSummary(**s.__dict__))


def test_one_step_model_prices_padded_and_unpadded_vocabularies_alike():
    """Megatron pads the vocabulary per tensor-parallel degree (``Stack.padded_model``): a layout that pads it after
    one that does not uses another laid-out model, whose tables pieces live in a memo of their own
    (``graph.stacked.shared_memo``: one per model and stack) -- one memo per step model refused it (ValueError) --
    and its step is what a fresh step model gives."""

    def cfg(step, tp):
        return TrainingConfig(1, 4096, "bf16", Parallelism(dp=8 // tp, tp=tp), "none",
                              global_batch=8).resolved(step.model)

    step = StepModel("llama3-8b", "h200-sxm", stack="megatron")
    times = [step.summary(cfg(step, tp)).step_time_s for tp in (1, 2, 4)]
    assert step._laid_out(cfg(step, 4)) is not step.model  # tp 4 pads this vocabulary
    fresh = StepModel("llama3-8b", "h200-sxm", stack="megatron")
    assert times[2] == fresh.summary(cfg(fresh, 4)).step_time_s
