"""Model families (workbench.families): the registry, each built-in family's protocol against the functions it
delegates to, and a family registered by a test that trains end to end through predict."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workbench.config import Parallelism, TrainingConfig, default_micro_batch, default_seq_len
from workbench.errors import SpecError, UnknownNameError, WorkbenchError
from workbench.families import (
    PARALLELISMS,
    Family,
    family_names,
    family_of,
    get_family,
    is_registered_model,
    list_families,
    register,
    unregister,
)
from workbench.graph import stacked
from workbench.graph.ops import RowsShape, gemm_with_grads, memory_op
from workbench.graph.recsys import dlrm_microbatch_ops, hstu_microbatch_ops
from workbench.graph.transformer import transformer_microbatch_ops
from workbench.hardware import get_gpu
from workbench.memory import GB, MemoryBreakdown, memory_breakdown
from workbench.models import DLRMModel, HSTUModel, TransformerModel, get_model, list_models, model_from_dict
from workbench.perf.overlap import ddp_last_bucket_bytes, ddp_schedule
from workbench.predict import predict
from workbench.recipe.build import embedding_placements, revised_model
from workbench.step import microbatch_ops, optimizer_op
from workbench.step_comm import RingExchange, Traffic, critical_path, data_parallel_plan


# ------------------------------------------------------------------------------------------------ the registry
def test_the_built_in_families_are_registered_by_their_models_kind():
    assert set(family_names()) >= {"transformer", "dlrm", "hstu"}
    assert {f.name for f in list_families()} == set(family_names())
    for model in list_models():
        family = family_of(model)
        assert family is get_family(model.kind)
        assert isinstance(model, family.model_type)
        assert is_registered_model(model)
    assert family_of(get_model("mixtral-8x7b")) is family_of(get_model("llama3-8b"))  # MoE is a transformer


def test_an_unknown_family_or_model_type_says_what_is_registered():
    with pytest.raises(UnknownNameError, match="transformer"):
        get_family("vit")
    with pytest.raises(WorkbenchError, match="no model family for str.*registered families: .*transformer"):
        family_of("llama3-8b")
    assert not is_registered_model("llama3-8b")


def test_a_name_or_a_model_type_registers_once():
    with pytest.raises(WorkbenchError, match="registered already"):
        register(get_family("dlrm"))
    with pytest.raises(WorkbenchError, match="not a workbench.families.Family"):
        register(object())  # type: ignore[arg-type]


def test_a_subclass_of_a_model_type_belongs_to_its_family():
    @dataclass(frozen=True)
    class PaddedLlama(TransformerModel):
        pass

    base = get_model("llama3.2-1b")
    padded = PaddedLlama(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    assert family_of(padded) is get_family("transformer")


# ------------------------------------------------------------------------------------ the built-in families
@pytest.mark.parametrize("name, parallelisms", [
    ("llama3-8b", ("dp", "tp", "pp", "cp", "virtual_stages")),
    ("mixtral-8x7b", PARALLELISMS),
    ("dlrm-dcnv2", ("dp",)),
    ("hstu-gr", ("dp",)),
])
def test_which_parallelisms_apply(name, parallelisms):
    model = get_model(name)
    assert family_of(model).parallelisms(model) == parallelisms


def test_what_each_family_trains_with():
    transformer, dlrm, hstu = (get_family(n) for n in ("transformer", "dlrm", "hstu"))
    assert transformer.shardings == ("ddp", "fsdp", "zero1") and transformer.trains_lora and transformer.offloads
    assert transformer.repeats_blocks and not dlrm.repeats_blocks and not hstu.repeats_blocks
    for family in (dlrm, hstu):
        assert family.shardings == ("ddp", "fsdp") and not family.trains_lora and not family.offloads
        assert family.padding_fields == {}
    assert set(transformer.padding_fields) == {"vocab_size", "ffn_hidden_size"}


@pytest.mark.parametrize("name, micro_batch, seq_len, tokens", [
    ("llama3-8b", 1, 8192, 8192), ("dlrm-dcnv2", 65536, 1, 1), ("hstu-gr", 64, 2048, 2048)])
def test_defaults_and_tokens_per_sample(name, micro_batch, seq_len, tokens):
    model = get_model(name)
    family = family_of(model)
    assert default_micro_batch(model) == family.default_micro_batch(model) == micro_batch
    assert default_seq_len(model) == family.default_seq_len(model) == seq_len
    assert family.tokens_per_sample(model, TrainingConfig().resolved(model)) == tokens


def test_each_family_delegates_its_ops_and_memory():
    gpu = get_gpu("h200")
    for name, ops in (("llama3-8b", transformer_microbatch_ops), ("mixtral-8x7b", transformer_microbatch_ops),
                      ("dlrm-dcnv2", dlrm_microbatch_ops), ("hstu-gr", lambda m, c, e: hstu_microbatch_ops(m, c))):
        model = get_model(name)
        family = family_of(model)
        cfg = TrainingConfig(parallelism=Parallelism(dp=4, sharding="ddp")).resolved(model)
        assert family.microbatch_ops(model, cfg, None) == microbatch_ops(model, cfg) == ops(model, cfg, None)
        assert family.memory_breakdown(model, cfg, gpu, False) == memory_breakdown(model, cfg, gpu)
        assert optimizer_op(model, cfg).shape.elements == max(1, int(family.optimizer_params(model, cfg)))
        assert (family.model_flops_per_sample(model, cfg.seq_len, False) is None) == (not family.repeats_blocks)


def test_the_collectives_are_the_familys_traffic():
    gpu = get_gpu("h200")
    from workbench.perf.efficiency import constants_for

    c = constants_for(gpu, False)
    llama, dlrm = get_model("mixtral-8x7b"), get_model("dlrm-dcnv2")
    cfg = TrainingConfig(1, 4096, parallelism=Parallelism(dp=4, tp=2, ep=2, cp=2)).resolved(llama)
    traffic, ring = family_of(llama).critical_traffic(llama, cfg, 8)
    assert [t.name for t in traffic] == ["tp.all_reduce_activations", "ep.all_to_all_tokens",
                                         "pp.send_recv_activations"]
    assert all(isinstance(t, Traffic) for t in traffic) and isinstance(ring, RingExchange) and ring.group == 2
    exposed, timed_ring = critical_path(llama, cfg, gpu, c)
    assert [e.name for e in exposed] == [t.name for t in traffic if t.group > 1] and timed_ring[0] == ring.chunk_bytes
    cfg = TrainingConfig(parallelism=Parallelism(dp=8, sharding="ddp")).resolved(dlrm)
    traffic, ring = family_of(dlrm).critical_traffic(dlrm, cfg, 8)
    assert [t.name for t in traffic] == ["embedding.all_to_all"] and ring is None
    assert [s.name for s, *_ in data_parallel_plan(dlrm, cfg, gpu, c)] == [
        s.name for schedule, _ in family_of(dlrm).data_parallel_collectives(dlrm, cfg) for s in schedule]


def test_each_family_checks_its_own_config():
    with pytest.raises(SpecError, match="tp=1 and pp=1 for dlrm models"):
        TrainingConfig(parallelism=Parallelism(dp=2, tp=2)).resolved(get_model("dlrm-dcnv2"))
    with pytest.raises(SpecError, match="DLRM has no experts"):
        TrainingConfig(parallelism=Parallelism(dp=2, ep=2)).resolved(get_model("dlrm-dcnv2"))
    with pytest.raises(SpecError, match="divisor of num_heads"):
        TrainingConfig(parallelism=Parallelism(tp=3)).resolved(get_model("llama3-8b"))
    with pytest.raises(SpecError, match="non-transformer models"):
        TrainingConfig(offload="optimizer", parallelism=Parallelism(dp=2)).resolved(get_model("hstu-gr"))
    with pytest.raises(SpecError, match="experts_per_token"):
        revised_model("mixtral-8x7b", {"experts_per_token": 9})  # Family.check_model


def test_stack_tables_and_embedding_tables():
    cfg = TrainingConfig()
    assert stacked.scope_gap(get_model("dlrm-dcnv2"), cfg.resolved(get_model("dlrm-dcnv2"))) == "dlrm models"
    assert stacked.scope_gap(get_model("mixtral-8x7b"), cfg.resolved(get_model("mixtral-8x7b"))) == "MoE blocks"
    assert stacked.scope_gap(get_model("llama3-8b"), cfg.resolved(get_model("llama3-8b"))) is None
    dlrm = get_model("dlrm-dcnv2")
    assert [p.table for p in embedding_placements(dlrm, 2)] == [f"table_{i}" for i in range(len(dlrm.tables))]
    assert embedding_placements(get_model("hstu-gr"), 1)[0].table == "items"
    assert embedding_placements(get_model("llama3-8b"), 8) == ()
    assert isinstance(dlrm, DLRMModel) and isinstance(get_model("hstu-gr"), HSTUModel)


# ------------------------------------------------------------------------- a new family, registered by a test
@dataclass(frozen=True)
class ToyMLP:
    """A stack of square ReLU MLP layers on dense features: the smallest model a family can describe."""

    name: str
    display_name: str
    source: str
    width: int
    num_layers: int
    default_batch: int = 4096
    kind: str = "toy-mlp"

    @property
    def num_params(self) -> int:
        return self.num_layers * (self.width * self.width + self.width)


class ToyMLPFamily(Family):
    name = "toy-mlp"
    model_type = ToyMLP
    shardings = ("ddp",)

    def default_micro_batch(self, model):
        return model.default_batch

    def default_seq_len(self, model):
        return 1

    def parallelisms(self, model):
        return ("dp",)

    def check_config(self, model, cfg, seq_len, origin):
        p = cfg.parallelism
        if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1 or p.sharding != "ddp" or cfg.lora:
            raise SpecError(origin, "parallelism", p, "ddp data parallelism only (toy-mlp models)")

    def model_from_fields(self, f, common):
        return ToyMLP(**common, width=int(f.number("width", integer=True, minimum=1)),
                      num_layers=int(f.number("num_layers", integer=True, minimum=1)))

    def microbatch_ops(self, model, cfg, execution):
        ops = []
        for i in range(model.num_layers):  # x: [batch, width]
            ops += gemm_with_grads(f"layer{i}", cfg.micro_batch, model.width, model.width, cfg.precision, layer="mlp")
            ops.append(memory_op(f"layer{i}.relu", "relu", RowsShape(cfg.micro_batch, model.width), "bf16",
                                 reads=1, writes=1, layer="mlp"))
        return ops

    def optimizer_params(self, model, cfg):
        return model.num_params

    def tokens_per_sample(self, model, cfg):
        return 1

    def memory_breakdown(self, model, cfg, gpu, compiled_loss):
        n = model.num_params
        return MemoryBreakdown(params=4 * n, grads=4 * n, optimizer=8 * n,
                               activations=2 * cfg.micro_batch * model.width * model.num_layers * 2,
                               workspace=2 * GB, capacity=gpu.hbm_capacity_gb.value * GB)

    def data_parallel_collectives(self, model, cfg):
        grads = model.num_params * 4
        return [(ddp_schedule("ddp.toy", grads, ddp_last_bucket_bytes(grads, 0.0)), cfg.parallelism.dp)]

    def critical_traffic(self, model, cfg, domain):
        return [], None


@pytest.fixture
def toy_family():
    family = register(ToyMLPFamily())
    yield family
    unregister(family.name)
    assert "toy-mlp" not in family_names()


def test_a_registered_family_trains_end_to_end_through_predict(toy_family):
    model = ToyMLP("toy", "Toy MLP", "a test", width=4096, num_layers=8)
    assert get_model(model) is model and family_of(model) is toy_family
    p = predict(model, "h200", TrainingConfig(parallelism=Parallelism(dp=8, sharding="ddp")))
    s = p.summary
    assert p.config.micro_batch == 4096 and p.config.seq_len == 1
    assert s.step_time_s > 0 and s.memory.fits and s.tokens_per_s == s.samples_per_s
    assert 0 < s.mfu < 1 and s.model_flops_per_step > 0  # the priced ops' FLOPs
    assert [c.name for c in p.comms][0].startswith("ddp.toy") and s.communication_total_s > 0
    assert {o.op.layer for o in p.ops} == {"mlp", "optimizer"}
    with pytest.raises(SpecError, match="toy-mlp"):
        predict(model, "h200", TrainingConfig(parallelism=Parallelism(dp=2, tp=2)))
    named = predict(model, "h200", TrainingConfig(parallelism=Parallelism(sharding="ddp")), stack="torchtitan")
    # no kernel tables for it: the fused-step bound, noted
    assert any("toy-mlp models are outside this stack's kernel tables" in n for n in named.notes)


def test_a_registered_family_reads_its_catalog_entries(toy_family):
    model = model_from_dict({"kind": "toy-mlp", "name": "Toy", "display_name": "Toy MLP", "source": "a test",
                             "width": 1024, "num_layers": 2})
    assert model == ToyMLP("toy", "Toy MLP", "a test", 1024, 2)
    with pytest.raises(SpecError, match="one of transformer, dlrm, hstu, toy-mlp"):
        model_from_dict({"kind": "vit", "name": "v", "display_name": "v", "source": "x"})
    with pytest.raises(SpecError, match="depth"):  # unknown fields fail as a built-in family's do
        model_from_dict({"kind": "toy-mlp", "name": "t", "display_name": "t", "source": "x", "width": 8,
                         "num_layers": 1, "depth": 3})


def test_a_registered_family_runs_through_the_recipe_search(toy_family):
    from workbench.recipe.search import default_global_batch, layouts, search

    model = ToyMLP("toy", "Toy MLP", "a test", width=4096, num_layers=8)
    result = search(model, "h200", 8)  # the family's search defaults: no per-kind table to miss it
    # the standard: its default micro-batch (4,096) as a power of two per GPU
    assert result.global_batch == default_global_batch(model, 8) == 8 * 512
    assert layouts(model, get_gpu("h200"), 8) == [Parallelism(dp=8, sharding="ddp")]  # dp only, its sharding
    configs = [c.config for c in result.candidates]
    assert {c.parallelism.sharding for c in configs} == {"ddp"}  # its shardings, of the search's fsdp and ddp
    assert {c.activation_checkpointing for c in configs} == {"none"}  # checkpointing is not modelled for it
    assert max(c.micro_batch for c in configs) <= toy_family.max_micro_batch == 1024
    best = result.best
    assert best.fits and best.config.samples_per_step == result.global_batch
    again = predict(model, "h200", best.config)
    assert again.summary.tokens_per_s == pytest.approx(best.tokens_per_s, rel=1e-12)  # predict's pipeline
    with pytest.raises(SpecError, match="shardings.*one or more of ddp"):
        search(model, "h200", 8, shardings=("fsdp",))


def test_the_search_asks_each_built_in_family_for_its_defaults():
    transformer, dlrm, hstu = get_family("transformer"), get_family("dlrm"), get_family("hstu")
    assert (transformer.max_micro_batch, dlrm.max_micro_batch, hstu.max_micro_batch) == (1024, 1 << 20, 4096)
    assert transformer.checkpoints_activations and not dlrm.checkpoints_activations
    assert transformer.standard_global_batch(get_model("llama3-8b"), 8192) == 512  # 4M tokens
    assert dlrm.standard_global_batch(get_model("dlrm-dcnv2"), 1) == 65536
    assert dlrm.searched_shardings(get_model("dlrm-dcnv2"), ("fsdp",)) == ("ddp",)  # fsdp runs as ddp there
    assert transformer.searched_shardings(get_model("llama3-8b"), ("zero1", "fsdp")) == ("zero1", "fsdp")
