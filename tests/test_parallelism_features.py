"""zero1 sharding, interleaved pipelines, context parallelism and LoRA: what each changes, and that off they change
nothing; and the published-results evaluation that uses them (benchmarks/published/evaluate.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import SpecError
from workbench.graph.transformer import model_flops_per_sample, transformer_microbatch_ops
from workbench.hardware import get_gpu
from workbench.memory import memory_breakdown
from workbench.models import get_model
from workbench.predict import data_parallel_plan, predict
from workbench.perf.efficiency import constants_for

ROOT = Path(__file__).resolve().parents[1]
MODEL = get_model("llama3-8b")
GPU = get_gpu("h200")


def cfg(mb=1, seq=8192, gb=0, ac="none", lora=0, **par) -> TrainingConfig:
    return TrainingConfig(mb, seq, "bf16", Parallelism(**par), ac, gb, lora_rank=lora).resolved(MODEL)


def _ops(c: TrainingConfig, model=MODEL):
    return {o.name: o for o in transformer_microbatch_ops(model, c)}


# -- off by default ---------------------------------------------------------------------------------------------

def test_defaults_are_off():
    p, c = Parallelism(), TrainingConfig()
    assert (p.cp, p.virtual_stages, p.sharding, c.lora_rank) == (1, 1, "fsdp", 0)
    assert c.beyond_stack_tables() is None


# -- zero1 ------------------------------------------------------------------------------------------------------

def test_zero1_memory_is_megatrons_6_plus_12_over_d():
    d = 8
    m = {s: memory_breakdown(MODEL, cfg(dp=d, sharding=s), GPU) for s in ("ddp", "zero1", "fsdp")}
    n = MODEL.num_params
    per_param = {s: (b.params + b.grads + b.optimizer) / n for s, b in m.items()}
    assert per_param["zero1"] == pytest.approx(6 + 12 / d)
    assert per_param["ddp"] == pytest.approx(16)
    assert per_param["fsdp"] < per_param["zero1"] < per_param["ddp"]


def test_zero1_reduce_scatters_gradients_and_gathers_parameters():
    c = cfg(dp=8, sharding="zero1")
    plan = data_parallel_plan(MODEL, c, GPU, constants_for(GPU, False))
    kinds = {s.collective for s, *_ in plan}
    assert kinds == {"reduce_scatter", "all_gather"}
    rs = sum(s.size_bytes * s.occurrences for s, *_ in plan if s.collective == "reduce_scatter")
    ag = sum(s.size_bytes * s.occurrences for s, *_ in plan if s.collective == "all_gather")
    assert rs == pytest.approx(MODEL.num_params * 4, rel=1e-6)  # fp32 gradients
    assert ag == pytest.approx(MODEL.num_params * 2, rel=1e-6)  # bf16 parameters
    assert {s.edge for s, *_ in plan} == {"hidden", "forward_start", "backward_end"}


def test_zero1_optimizer_updates_one_shard():
    full = predict(MODEL, GPU, cfg(dp=8, sharding="ddp"))
    sharded = predict(MODEL, GPU, cfg(dp=8, sharding="zero1"))
    assert sharded.summary.optimizer_s < full.summary.optimizer_s / 4


# -- interleaved pipelines ----------------------------------------------------------------------------------------

def test_interleaving_divides_the_bubble_and_multiplies_pipeline_sends():
    one = predict(MODEL, GPU, cfg(dp=1, pp=4, gb=16))
    two = predict(MODEL, GPU, cfg(dp=1, pp=4, gb=16, virtual_stages=2))
    assert two.summary.bubble_s == pytest.approx(one.summary.bubble_s / 2)
    def send(p):
        return next(c for c in p.comms if c.name == "pp.send_recv_activations").time_s

    assert send(two) == pytest.approx(2 * send(one))


def test_interleaving_holds_more_first_stage_activations():
    pp, v = 4, 2
    a1 = memory_breakdown(MODEL, cfg(pp=pp, gb=16, ac="full"), GPU).activations
    a2 = memory_breakdown(MODEL, cfg(pp=pp, gb=16, ac="full", virtual_stages=v), GPU).activations
    assert a1 < a2 < a1 * (1 + (pp - 1) / (pp * v)) * 1.0001  # the block part grows by that factor, the loss not


def test_virtual_stages_need_a_pipeline_and_a_layer_each():
    with pytest.raises(SpecError, match="virtual_stages"):
        cfg(virtual_stages=2)
    with pytest.raises(SpecError, match="virtual_stages"):
        cfg(pp=4, virtual_stages=9, gb=4)  # 32 layers / 4 stages = 8 per stage


# -- context parallelism ------------------------------------------------------------------------------------------

def test_cp_splits_tokens_and_attention_over_ranks():
    base, split = _ops(cfg(dp=1)), _ops(cfg(dp=1, cp=4))
    assert split["qkv.fwd"].flops == pytest.approx(base["qkv.fwd"].flops / 4)
    # 1/cp of the causal scores, plus the diagonal blocks of cp shorter chunks (17/32 vs 65/128 of each square)
    assert split["attention.fwd"].flops == pytest.approx(base["attention.fwd"].flops / 4 * (17 / 32) / (65 / 128))
    assert Parallelism(dp=2, tp=2, pp=2, cp=4).gpus == 32


def test_cp_activations_and_ring_exchange():
    # a quarter of a 32k sequence holds what a whole 8k one does (flash attention stores no s x s scores)
    m1 = memory_breakdown(MODEL, cfg(dp=1, seq=8192, ac="full"), GPU)
    m4 = memory_breakdown(MODEL, cfg(dp=1, seq=32768, ac="full", cp=4), GPU)
    assert m4.activations == pytest.approx(m1.activations)
    p = predict(MODEL, GPU, cfg(dp=1, seq=32768, cp=4), stack="ideal")  # the generic p2p ring
    ring = next(c for c in p.comms if c.name == "cp.ring_send_recv_kv")
    assert 0 <= ring.exposed_s <= ring.time_s and ring.time_s > 0
    assert p.summary.gpus == 4
    # torchtitan's (the default stack's) is PyTorch's: one K/V all-gather per attention call, fp32 dK/dV sends
    names = {c.name for c in predict(MODEL, GPU, cfg(dp=1, seq=32768, cp=4)).comms}
    assert {"cp.all_gather_kv", "cp.send_recv_grad_kv"} <= names and "cp.ring_send_recv_kv" not in names


def test_cp_ranks_share_weights():
    # dp=2 x cp=4: fsdp shards over 8 ranks, as dp=8 does
    assert memory_breakdown(MODEL, cfg(dp=2, cp=4), GPU).optimizer == pytest.approx(
        memory_breakdown(MODEL, cfg(dp=8), GPU).optimizer)
    with pytest.raises(SpecError, match="seq_len"):
        cfg(cp=4, seq=8196)


# -- LoRA ---------------------------------------------------------------------------------------------------------

def test_lora_freezes_the_base():
    ops = _ops(cfg(lora=16, sharding="ddp"))
    assert not [n for n in ops if n.endswith(".wgrad") and ".lora_" not in n]
    assert "embedding.scatter_add" not in ops
    assert {"qkv.lora_a.wgrad", "qkv.lora_b.wgrad", "o_proj.lora_a.fwd"} <= set(ops)
    assert "gate_up.lora_a.fwd" not in ops  # default targets: q, k, v, o
    a = ops["qkv.lora_a.fwd"].shape
    assert (a.n, a.k) == (3 * 16, MODEL.hidden_size)


def test_lora_memory_and_flops():
    c = cfg(lora=16, sharding="ddp")
    m = memory_breakdown(MODEL, c, GPU)
    adapters = MODEL.num_layers * MODEL.lora_params_per_layer(16, ("q", "k", "v", "o"))
    assert m.grads == pytest.approx(4 * adapters)
    assert m.optimizer == pytest.approx(8 * adapters)
    assert m.params == pytest.approx(2 * MODEL.num_params + 4 * adapters)
    full, lora = model_flops_per_sample(MODEL, 8192), model_flops_per_sample(MODEL, 8192, lora=True)
    assert lora < full


def test_lora_validation():
    with pytest.raises(SpecError, match="lora_targets"):
        TrainingConfig(1, 8192, lora_rank=16, lora_targets=("q", "qq")).resolved(MODEL)
    with pytest.raises(SpecError, match="sharding"):
        cfg(dp=8, lora=16, sharding="fsdp")
    with pytest.raises(SpecError, match="lora_rank"):
        TrainingConfig(lora_rank=4).resolved(get_model("dlrm-dcnv2"))


# -- the stack step falls back --------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack, change", [("pytorch-eager", dict(cp=2)), ("torchtitan", dict(sharding="zero1")),
                                           ("torchtitan", dict(lora=16, sharding="ddp"))])
def test_stacks_fall_back_to_the_bound(stack, change):
    """What a stack's tables do not hold (plain PyTorch has no context parallelism; torchtitan no ZeRO-1 or LoRA)
    is priced as the bound, and the notes say so. torchtitan's cp is in its tables (tests/test_stack_parallel.py)."""
    p = predict(MODEL, GPU, cfg(dp=2, **change), stack=stack)
    assert p.summary.priced_as_bound
    assert any("outside this stack's kernel tables" in n for n in p.notes)


# -- CLI ----------------------------------------------------------------------------------------------------------

def test_cli_flags_reach_the_config(capsys):
    from workbench.cli import main

    assert main(["predict", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "16", "--cp", "2", "--pp", "2",
                 "--virtual-stages", "2", "--global-batch", "8", "--sharding", "zero1", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["config"]
    assert (c["cp"], c["pp"], c["dp"], c["virtual_stages"], c["sharding"], c["lora_rank"]) == (2, 2, 4, 2, "zero1", 0)
    assert main(["predict", "--model", "llama3-8b", "--gpu", "h200", "--lora-rank", "-1"]) == 2
    assert "--lora-rank" in capsys.readouterr().err


# -- the evaluation -------------------------------------------------------------------------------------------------

def _evaluation():
    spec = importlib.util.spec_from_file_location("published_evaluate", ROOT / "benchmarks/published/evaluate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


HEADER = ("id,source,framework,model,gpu,gpus,tp,pp,dp,cp,ep,fsdp,micro_batch,global_batch,seq_len,precision,ac,"
          "metric,value,unit,notes,confidence\n")


def test_evaluation_maps_rows_to_predictions(tmp_path):
    ev = _evaluation()
    table = tmp_path / "t.csv"
    table.write_text(HEADER + "A,s,fw,L8,H200,8,1,1,8,1,1,8,1,8,8192,bf16,none,tokens_per_sec_per_gpu,9000,tok/s,,high\n"
                     "B,s,fw,L8,H200,8,1,1,4,2,1,4,1,4,8192,bf16,none,tokens_per_sec_per_gpu,9000,tok/s,,medium\n"
                     "C,s,fw,L8,H200,8,1,1,8,1,1,8,1,8,8192,bf16,none,tokens_per_sec_per_gpu,9000,tok/s,,low\n"
                     "D,s,fw,L8,H200,8,1,1,8,1,1,8,1,8,8192,bf16,none,mlperf_time_to_train,9,min,,high\n"
                     "D-thr,s,fw,L8,H200,8,1,1,8,1,1,8,1,8,8192,bf16,none,train_throughput,9,samples/s,,high\n")
    row = dict(dp=8, tp=1, pp=1, ep=1, sharding="fsdp", micro_batch=1, global_batch=8, seq_len=8192,
               precision="bf16", checkpointing="none")
    mapping = {"frameworks": {"fw": {"stack": "ideal", "proxy": True}}, "models": {"L8": "llama3-8b"},
               "gpus": {"H200": "h200-sxm"},
               "rows": {"A": row, "B": {**row, "dp": 4, "cp": 2, "global_batch": 4}, "D-thr": row}}
    (tmp_path / "m.yaml").write_text(json.dumps(mapping))
    results, twins = ev.evaluate(table, tmp_path / "m.yaml")
    by_id = {r.id: r for r in results}
    assert set(by_id) == {"A", "B", "D-thr"}  # low confidence and time-to-train rows are not scored
    assert twins == [("D", ["D-thr"])]
    direct = predict("llama3-8b", "h200", TrainingConfig(1, 8192, parallelism=Parallelism(dp=8), global_batch=8),
                     stack="ideal")  # the mapping's stack (predict's default is torchtitan now)
    assert by_id["A"].predicted == pytest.approx(direct.summary.tokens_per_s / 8)
    assert by_id["D-thr"].predicted == pytest.approx(direct.summary.samples_per_s)
    assert by_id["B"].predicted is not None
    ablated, _ = ev.evaluate(table, tmp_path / "m.yaml", without=frozenset({"cp"}))
    assert {r.id: r.reason for r in ablated}["B"].startswith("needs context parallelism")
    assert "| A |" in ev.render_markdown(results, twins)


def test_committed_mapping_covers_every_scorable_row():
    ev = _evaluation()
    table = ROOT.parent / "shared/reference/published/training_throughput.csv"
    if not table.exists():
        pytest.skip(f"{table} is not in this checkout")
    from workbench.fileio import load_yaml

    rows = [r for r in ev.load_table(table) if ev.is_scorable(r)]
    mapping = load_yaml(ev.MAPPING)
    assert {r["id"] for r in rows} == set(mapping["rows"])
    for r in rows:
        spec = mapping["rows"][r["id"]]
        if "not_expressible" not in spec:
            assert math.prod(spec.get(k, 1) for k in ("dp", "tp", "pp", "cp")) == int(r["gpus"]), r["id"]
            assert dataclasses.replace(ev.build_call(r, mapping)[2]) is not None
