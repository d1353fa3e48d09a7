"""The deepspeed-zero2 and deepspeed-zero3 stacks (HF transformers' Llama under DeepSpeed ZeRO): loading, the
shape of their predictions, ZeRO-3's sharded parameters, golden values, bad stack files, the split file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_hf import (
    HF_RMSNORM_BWD,
    HF_RMSNORM_FWD,
    HF_ROPE_BWD,
    deepspeed_step,
    hf_activation_bytes,
    hf_block_ops,
)
from workbench.graph.stack_kernels_zero import reduce_buckets, sub_groups, tensor_iterator_pieces, zero_memory
from workbench.predict import predict
from workbench.stacks import get_stack, list_stacks, load_stack
from workbench.validation import benchmark_model

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("deepspeed-zero2", "deepspeed-zero3")


def _predict(stack, micro_batch=1, seq_len=2048, ac="none", model="1b", dp=1):
    model = benchmark_model(model) if dp == 1 else "llama3-8b"
    return predict(model, "h200", TrainingConfig(micro_batch, seq_len, "bf16", Parallelism(dp=dp), ac), stack=stack)


@pytest.mark.parametrize("name", STACKS)
def test_stack_loads_with_its_zero_stage(name):
    stack = get_stack(name)
    assert stack.kernels == "hf-deepspeed" and stack.param_dtypes == ("bf16",) and not stack.compiled(True)
    assert stack.constant("zero_stage", 0) == int(name[-1])
    assert name in [s.name for s in list_stacks()]
    assert all(c.source for c in stack.constants.values())


@pytest.mark.parametrize("name", STACKS)
def test_predictions_grow_with_micro_batch_and_sequence(name):
    for ac in ("none", "full"):
        # non-decreasing: a host-bound step (ZeRO-3's hooks at few tokens) takes as long with one more sample
        steps = [_predict(name, mb, s, ac).summary for mb, s in ((1, 2048), (2, 2048), (4, 2048))]
        assert [a.step_time_s <= b.step_time_s for a, b in zip(steps, steps[1:])] == [True, True]
        assert steps[0].step_time_s < steps[-1].step_time_s
        # non-decreasing: below some token count the step's flat fp32 gradient is the peak (measured: 8b-4l's
        # allocated peak is 42.38 GB at 2,048, 4,096 and 8,192 tokens)
        assert [a.memory.total <= b.memory.total for a, b in zip(steps, steps[1:])] == [True, True]
        assert steps[0].memory.total < steps[-1].memory.total
        seqs = [_predict(name, 1, s, ac).summary for s in (2048, 4096, 8192)]
        assert [a.step_time_s <= b.step_time_s for a, b in zip(seqs, seqs[1:])] == [True, True]
        assert seqs[0].step_time_s < seqs[-1].step_time_s
        assert [a.memory.total <= b.memory.total for a, b in zip(seqs, seqs[1:])] == [True, True]
        assert not steps[0].priced_as_bound


def test_checkpointing_trades_memory_for_time():
    for name in STACKS:
        none, full = _predict(name, 2, 4096, "none").summary, _predict(name, 2, 4096, "full").summary
        assert full.step_time_s > none.step_time_s and full.memory.total < none.memory.total


def test_zero3_shards_the_parameters_over_data_parallel_ranks():
    zero2, zero3 = (_predict(name, 1, 4096, "full", dp=8).summary.memory for name in STACKS)
    assert zero3.total < zero2.total
    assert zero3.params < zero2.params / 4  # 16-bit parameters / 8, plus what is gathered
    assert zero3.optimizer == pytest.approx(zero2.optimizer)  # both partition the fp32 master and moments
    # on one GPU ZeRO-3 partitions nothing, but its step updates 1e9-element sub-groups where ZeRO-2 casts the whole
    # partition to fp32: either can peak higher (measured 8b-4l s4096: 41.57 GB allocated under ZeRO-3, 42.38 GB
    # under ZeRO-2); test_zero_memory_terms_follow_deepspeed_buffers compares the two at the loss


def test_zero_memory_terms_follow_deepspeed_buffers():
    d = Dims.of(benchmark_model("1b"), 1, 2048)
    activations, loss = hf_activation_bytes(d, "none")
    m = zero_memory(d, tied=True, stage=2, dp=1, activations=activations, loss=loss)
    params = 1_235_814_400  # Llama 3.2 1B, tied
    assert m.params == 2 * params and m.master_and_moments == 12 * params and m.grad_partition == 2 * params
    assert m.bucket == 2 * 500_000_000  # reduce_bucket_size default, bf16
    assert m.step_transient == 6 * params  # the step's flat bf16 copy and its fp32 cast, alive together
    # ZeRO-2 allocates the partition and bucket in backward and frees the bucket before the step: 22 B/parameter
    assert m.at_step == 22 * params
    assert m.at_loss == 14 * params + activations + loss
    m3 = zero_memory(d, tied=True, stage=3, dp=1, activations=activations, loss=loss)
    assert m3.at_loss > m.at_loss  # ZeRO-3 holds its flat gradient buffer and bucket from initialization


def test_hf_rmsnorm_is_unfused():
    assert len(HF_RMSNORM_FWD) == 8 and len(HF_RMSNORM_BWD) == 16 and len(HF_ROPE_BWD) == 9
    fwd, bwd = hf_block_ops(Dims.of(benchmark_model("1b"), 1, 2048))
    assert sum(op.extra.get("aten") == "rms_norm" for op in fwd) == 2 * len(HF_RMSNORM_FWD)
    assert not any(op.extra.get("aten", "").startswith("cast") for op in fwd)  # bf16 params: no autocast casts


def test_kernel_counts_match_the_traced_step():
    """deepspeed-zero2 1b mb1 s2048 ac=none (benchmarks/results/h200/stacks/deepspeed/traces): 38 forward and 79
    backward kernels per decoder layer (memsets inside library calls left out), 3 gradient buckets, the
    overflow check's 13 kernels per gradient, 4 TensorIterator pieces over the fp32 partition."""
    d = Dims.of(benchmark_model("1b"), 1, 2048)
    fwd, bwd = hf_block_ops(d)
    assert sum(op.count for op in fwd) == 38 * d.layers and sum(op.count for op in bwd) == 79 * d.layers
    assert reduce_buckets(d, tied=True) == [486_578_176, 486_567_936, 262_668_288]
    assert tensor_iterator_pieces(1_235_814_400, 4) == 4 and tensor_iterator_pieces(262_668_288, 4) == 1
    assert len(sub_groups(d, tied=True, dp=1)) == 2  # ZeRO-3's sub_group_size 1e9
    tables = deepspeed_step(benchmark_model("1b"), TrainingConfig(1, 2048, "bf16", Parallelism(), "none"),
                            get_stack("deepspeed-zero2"))
    overflow = sum(op.count for op in tables.step_ops if op.name.startswith("zero.overflow"))
    assert overflow == 13 * 146 + 3
    adam = sum(op.count for op in tables.step_ops if op.name.startswith("optimizer"))
    assert adam == 59  # FusedAdamMathFunctor launches in the trace


# golden values: a change that moves every prediction shows here (update them deliberately). Last moved when the
# tables were checked against the H200 trace (HF's 16-kernel RMSNorm and 9-kernel RoPE backward, cuDNN's SDPA helpers,
# ZeRO's per-gradient overflow check and fp64 norms, the step's flatten / fp32 / clip / bf16 pieces, ZeRO-2's memory
# at the loss without its gradient buffers and at the step with 22 B per parameter) and the host constants fitted on
# the fit rows of benchmarks/stacks/deepspeed_split.json. ZeRO-3 moved again when its second fit row was measured
# (session 10): host_zero3_module_us 290 -> 295, reserved/allocated 1.037 -> 1.098 (the median of both fit rows).
# ZeRO-2 8b-4l moved -0.02% when stack_kernels._k split FLOPs over launches as it splits bytes (per-launch ops
# had carried the whole FLOPs each). ZeRO-3 1b s2048 moved +6.02 GB when the step's sub-group copies got their own
# segments (workbench.stack_memory_zero: at 2,048 tokens neither fits a freed fp32 logits block).
GOLDEN = {
    ("deepspeed-zero2", "1b", 1, 2048, "none"): (0.1234133, 32054553907.2),
    ("deepspeed-zero2", "8b-4l", 1, 8192, "full"): (0.23074947513576494, 49882022682.624),  # recomputed SDPA at the forward rate
    ("deepspeed-zero3", "1b", 1, 2048, "none"): (0.2495627, 36589593325.056),  # + the step's new segments
    ("deepspeed-zero3", "8b-4l", 1, 8192, "full"): (0.23802435767345556, 50285315059.200005),  # recomputed SDPA at the forward rate
}


@pytest.mark.parametrize("key", list(GOLDEN))
def test_golden_predictions(key):
    stack, model, mb, seq, ac = key
    step_s, memory = GOLDEN[key]
    summary = _predict(stack, mb, seq, ac, model).summary
    assert summary.step_time_s == pytest.approx(step_s, rel=1e-9)
    assert summary.memory.total == pytest.approx(memory, rel=1e-9)


def _spec(**changes):
    spec = {"schema_version": 1, "name": "my-zero", "display_name": "mine", "summary": "s", "source": "s",
            "kernels": "hf-deepspeed", "compile": "never", "param_dtypes": ["bf16"],
            "checkpointing": {"none": "none", "selective": "workbench-selective", "full": "full"},
            "constants": {"zero_stage": {"value": 3, "kind": "sourced", "source": "DeepSpeed config"}}}
    spec.update(changes)
    return spec


def test_a_user_stack_file_predicts():
    stack = load_stack(_spec())
    assert _predict(stack).summary.step_time_s > 0


@pytest.mark.parametrize("changes, field", [
    ({"kernels": "deepspeed"}, "kernels"),
    ({"zero_stages": 3}, "zero_stages"),
    ({"constants": {"zero_stage": {"value": 3, "kind": "sourced"}}}, "source"),
    ({"constants": {"zero_stage": {"value": -3, "kind": "sourced", "source": "x"}}}, "value"),
])
def test_bad_stack_files_name_the_field(changes, field):
    with pytest.raises(SpecError, match=field):
        load_stack(_spec(**changes))


def test_an_unpriced_zero_stage_is_an_error():
    stack = load_stack(_spec(constants={"zero_stage": {"value": 1, "kind": "sourced", "source": "x"}}))
    with pytest.raises(SpecError, match="zero_stage"):
        _predict(stack)


def test_split_was_written_for_the_runner_rows():
    split = json.loads((ROOT / "benchmarks" / "stacks" / "deepspeed_split.json").read_text())
    runner = ROOT / "benchmarks" / "stacks" / "deepspeed_runs.py"

    def labels(sweep):
        out = subprocess.run([sys.executable, str(runner), "--list", "--sweep", sweep], capture_output=True,
                             text=True, check=True).stdout
        return sorted(json.loads(line)["label"] for line in out.splitlines())

    main = labels("main")
    assert sorted(split["fit"] + split["test"]) == main
    assert sorted(split["holdout"]) == labels("holdout")
    assert len(split["fit"]) <= len(main) // 2
    assert not set(split["holdout"]) & set(main)


def _runner_module():
    import importlib.util

    path = ROOT / "benchmarks" / "stacks" / "deepspeed_runs.py"
    spec = importlib.util.spec_from_file_location("deepspeed_runs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_repeats_run_every_row_once_per_round_in_rotated_order():
    runs = _runner_module()
    split = json.loads((ROOT / "benchmarks" / "stacks" / "deepspeed_split.json").read_text())
    rows = runs.repeat_rows(list(runs.REPEAT_ROWS), 3, 10, "torch")
    assert len(rows) == 3 * len(runs.REPEAT_ROWS)
    rounds = [[r.label for r in rows if r.repeat == k] for k in range(3)]
    assert all(sorted(labels) == sorted(runs.REPEAT_ROWS) for labels in rounds)
    assert len({labels[0] for labels in rounds}) == 3  # no row always first
    assert all(r.diagnose and not r.trace and r.optimizer == "torch" and r.steps == 10 for r in rows)
    known = set(split["fit"] + split["test"] + split["holdout"])
    extra = {r.label for r in runs.DIAGNOSTIC_ROWS}
    assert not extra & known  # the diagnostic rows are never fitted or evaluated
    assert set(runs.REPEAT_ROWS) <= known | extra
    with pytest.raises(SystemExit, match="unknown"):
        runs.repeat_rows(["deepspeed-zero3 1b mb9 s1 ac=none"], 1, 10, "torch")


def test_repeat_report_gives_each_rows_spread():
    runs = _runner_module()
    measured = {"label": "deepspeed-zero3 1b mb1 s2048 ac=none", "steps": 2, "step_times_s": [0.25, 0.30],
                "gc_during_timed_steps": {"collections": [4, 1, 0], "seconds": [0.001, 0.003, 0.0]},
                "phases_s": {"forward": 0.1, "backward": 0.15, "step": 0.05}, "python_calls": 123456}
    records = [{**measured, "step_time_s": 0.30}, {**measured, "step_time_s": 0.24},
               {"label": measured["label"], "skipped": "time budget"}]
    report = runs.repeat_report(records)
    assert "| deepspeed-zero3 1b mb1 s2048 ac=none | 300.0, 240.0 (+1 not measured) | 300.0 | 1.25 | 1.20 | 2.0 |" \
        in report
    assert "100 / 150 / 50 | 123,456 |" in report
