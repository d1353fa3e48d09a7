"""TE's userbuffers TP comm overlap as NeMo configures it (workbench.graph.te_tp_overlap)."""

import pytest

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.ops import gemm
from workbench.graph.te_tp_overlap import (
    TE_DEFAULTS,
    UB_CONFIGS,
    UbSlot,
    chunked_gemm_ratio,
    overlapped_tp_exposed_s,
    slot_cost_s,
    ub_config,
)
from workbench.hardware import get_gpu
from workbench.models import get_model
from workbench.perf import op_time
from workbench.perf.efficiency import constants_for
from workbench.predict import predict

SM = 132


def test_ring_exchange_hides_what_the_chunked_gemm_covers():
    ring = UbSlot("ring_exchange")
    assert slot_cost_s(ring, 1.0, 4.0, 4, SM) == 0.0
    assert slot_cost_s(ring, 1.0, 0.0, 4, SM) == pytest.approx(1.0)
    # chunked GEMMs 10% slower: the loss is paid, and the chunks cover less of the collective
    assert slot_cost_s(ring, 1.0, 1.0, 4, SM, chunk_ratio=1.1) == pytest.approx(0.1 + 1.0 - 1.1 * 3 / 4)
    assert slot_cost_s(UbSlot("ring_exchange", 1, True), 1.0, 4.0, 4, SM, reduce_s=0.05) == pytest.approx(
        4.0 * (SM / (SM - 1) - 1) + 0.05)  # a ring reduce-scatter: one SM of margin and its reduction kernel


def test_pipeline_pays_its_sm_margin_and_the_last_chunk():
    pipe = UbSlot("pipeline", 24, True, 4)
    assert slot_cost_s(pipe, 1.0, 10.0, 4, SM) == pytest.approx(10.0 * (SM / (SM - 24) - 1) + 1 / 4)


def test_bulk_takes_its_sms_from_the_gemm_while_it_runs():
    bulk = UbSlot("bulk", 24)
    assert slot_cost_s(bulk, 1.0, 3.0, 4, SM) == pytest.approx(24 / SM)  # hidden, but the GEMM ran on fewer SMs
    assert slot_cost_s(bulk, 3.0, 1.0, 4, SM) == pytest.approx(2.0)  # longer than its GEMM: the rest is exposed
    with pytest.raises(ValueError):
        slot_cost_s(UbSlot("async"), 1.0, 1.0, 2, SM)  # type: ignore[arg-type]


def test_unpaired_collectives_stay_exposed():
    assert overlapped_tp_exposed_s(8.0, 8, [(0.25, 4)]) == pytest.approx(4 * 0.25 + 4 * 1.0)
    assert overlapped_tp_exposed_s(8.0, 8, [(0.0, 20)]) == 0.0  # never more partners than collectives


def test_nemo_configs_by_gpu_dtype_and_width():
    # NeMo's fp8 configs reduce-scatter the row-parallel fprops by ring exchange, its bf16 ones pipelined
    assert ub_config("hopper", "fp8", 8192)["proj_fprop"].method == "ring_exchange"
    assert ub_config("blackwell", "bf16", 16384)["proj_fprop"] == UbSlot("pipeline", 32, True, 4)
    assert ub_config("hopper", "mxfp8", 8192) is UB_CONFIGS[("hopper", "fp8", 8192)]
    assert ub_config("cdna3", "bf16", 8192) is TE_DEFAULTS and ub_config("hopper", "bf16", 4096) is TE_DEFAULTS
    assert all(set(c) == set(TE_DEFAULTS) for c in UB_CONFIGS.values())


def test_chunked_gemms_price_no_faster_than_the_whole():
    gpu = get_gpu("h100-sxm")
    c = constants_for(gpu, False)

    def price(op):
        return op_time(op, gpu, c).time_s

    op = gemm("linear_qkv.fwd", 4096, 2560, 8192, "bf16")
    assert chunked_gemm_ratio(op, 1, price) == 1.0
    ratios = [chunked_gemm_ratio(op, k, price) for k in (2, 4, 8)]
    assert all(r >= 1.0 for r in ratios) and ratios[-1] > 1.0  # smaller GEMMs: waves, launches


def test_overlap_hides_part_of_the_tp_collectives_and_counts_the_regathers():
    model = get_model("llama3-70b")
    cfg = TrainingConfig(1, 4096, "fp8", Parallelism(dp=1, tp=4, pp=1), "none")
    mega = predict(model, "h100-sxm", cfg, stack="megatron")
    (tp,) = [c for c in mega.comms if c.name == "tp.all_reduce_activations"]
    assert 0 < tp.exposed_s < tp.time_s
    local = predict(model, "h100-sxm", TrainingConfig(1, 4096, "bf16", Parallelism(dp=1, tp=4, pp=1), "none"),
                    stack="megatron-local")
    (tp_local,) = [c for c in local.comms if c.name == "tp.all_reduce_activations"]
    assert tp_local.exposed_s == tp_local.time_s  # no userbuffers in the local spec
    # TE re-gathers the two LayerNormLinears' inputs for their wgrads: 10 collectives a block, not 8
    bf16 = predict(model, "h100-sxm", TrainingConfig(1, 4096, "bf16", Parallelism(dp=1, tp=4, pp=1), "none"),
                   stack="megatron")
    (tp_te,) = [c for c in bf16.comms if c.name == "tp.all_reduce_activations"]
    assert tp_te.time_s == pytest.approx(tp_local.time_s * 10 / 8)
