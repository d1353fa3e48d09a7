"""TransformerEngine's tensor-parallel communication overlap (userbuffers, ``tp_comm_overlap=True``) as NeMo's
performance recipes run it: what the step still waits for of the sequence-parallel all-gathers and reduce-scatters,
and what the overlap costs the GEMMs it runs beside.

NeMo's performance scripts (scripts/performance/llm/pretrain_llama3_70b.py, pretrain_llama31_405b.py) set
``tp_comm_overlap_cfg`` per GPU (h100 / b200 / gb200) and compute dtype from the model's
``tp_overlap_configs/userbuffers.py`` entry (``UB_CONFIGS`` below); TE's ``initialize_ub`` (transformer_engine/
pytorch/module/base.py ``get_default_config``) fills what a config leaves out and prices the rest
(``TE_DEFAULTS``). Each block's linears pair one collective of the [tokens, hidden] activations with one GEMM
(``stack_kernels_megatron.TP_OVERLAP_PARTNERS``: the GEMM op carries its userbuffers slot in
``extra["tp_overlap"]``). Per collective of ``c`` seconds beside a GEMM priced at ``g`` seconds on the whole GPU
(``sm`` SMs), the step pays beyond ``g`` (transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp):

- ``ring_exchange`` (``CommOverlapP2PBase``: the column-parallel fprops' input all-gathers, the row-parallel
  dgrads' dy all-gathers; and, in NeMo's fp8 configs, the row-parallel fprops' reduce-scatters): the GEMM runs as
  tp GEMMs of tokens / tp rows (``split_overlap_ag`` / ``split_overlap_rs``), priced as such through the GEMM
  model (``g_c``: their sum, on ``sm - num_sm`` SMs under ``set_sm_margin``), while the copy engines
  (``use_ce``: no SMs) move tp - 1 chunks: (g_c - g) + max(0, c - g_c (tp - 1) / tp); a reduce-scatter adds the
  reduction of the tp received chunks (one memory-bound kernel, ``RS_REDUCE``);
- ``pipeline`` (``CommOverlapBase::split_overlap_rs``, NeMo's bf16 row-parallel fprops): ``num_splits`` GEMMs
  of tokens / num_splits rows on ``sm - num_sm`` SMs (``set_sm_margin``: ``_math_sms``), each chunk's
  reduce-scatter (``num_sm`` SMs) behind the next chunk, the last one's exposed:
  (g_c - g) + c / splits + max(0, c - g_c) (splits - 1) / splits;
- ``bulk`` (``CommOverlapBase::bulk_overlap``: the column-parallel dgrads' re-gather of the saved local input,
  ``qkv_dgrad`` / ``fc1_dgrad``, and the dgrad's reduce-scatter behind the wgrad GEMM, ``qkv_wgrad`` /
  ``fc1_wgrad``): the comm kernel takes ``num_sm`` SMs from the GEMM (launched on all of them:
  ``set_sm_margin`` off) while it runs: the GEMM ends at g + c num_sm / sm, the pair at the later of that and c:
  max(c - g, c num_sm / sm).

The step model's tensor-parallel traffic is ``step_comm.transformer_traffic``'s: all-reduce equivalents of the
activations, 4 per block and micro-batch (2 more under full recompute), i.e. twice as many all-gathers or
reduce-scatters of the same bytes (ring all-reduce = reduce-scatter + all-gather). TE's backward re-gathers each
LayerNormLinear's input for its wgrad (the ``qkv_dgrad`` / ``fc1_dgrad`` bulk all-gathers): 2 more per block and
micro-batch, added here to the traffic's seconds. Collectives left without a tagged partner stay exposed. The
collectives' own seconds are the link's (the comm kernels' few SMs are taken to reach it: guess, calibrate me on
a TE trace); the SM shares are linear in SMs (a compute-bound GEMM: guess, calibrate me).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from workbench.graph.ops import GemmShape, Op, RowsShape, memory_op

Method = Literal["ring_exchange", "pipeline", "bulk"]
TP_TRAFFIC = "tp.all_reduce_activations"
"""``step_comm.transformer_traffic``'s tensor-parallel collective."""


@dataclass(frozen=True)
class UbSlot:
    """One GEMM's userbuffers overlap (a ``ub_cfgs`` entry of TE's ``initialize_ub``)."""

    method: Method
    num_sm: int = 1
    """SMs of the comm kernel (pipeline, bulk; ring exchange moves data with the copy engines)."""
    set_sm_margin: bool = False
    """The GEMM runs on the other ``sm - num_sm`` SMs (``_math_sms``); off: on all, sharing with the comm kernel."""
    num_splits: int = 0
    """Chunks of a pipelined GEMM (0: tp, ring exchange's)."""


SLOTS = ("qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop", "proj_dgrad", "fc2_dgrad", "qkv_dgrad", "fc1_dgrad",
         "qkv_wgrad", "fc1_wgrad")
REGATHER_SLOTS = ("qkv_dgrad", "fc1_dgrad")
"""The bulk all-gathers of the saved local input for the wgrad: traffic ``step_comm`` does not count."""
REDUCE_SCATTER_SLOTS = ("proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad")


def _cfg(qkv_dgrad: int, qkv_wgrad: int, fc1_dgrad: int, fc1_wgrad: int, proj: UbSlot, fc2: UbSlot
         ) -> dict[str, UbSlot]:
    """A ``TransformerLayerTPOverlapCfg``: four bulk slots by their num_sm, the ring-exchange all-gathers, the
    row-parallel fprops' reduce-scatters."""
    ring = UbSlot("ring_exchange")
    return {"qkv_dgrad": UbSlot("bulk", qkv_dgrad), "qkv_wgrad": UbSlot("bulk", qkv_wgrad),
            "fc1_dgrad": UbSlot("bulk", fc1_dgrad), "fc1_wgrad": UbSlot("bulk", fc1_wgrad),
            "qkv_fprop": ring, "proj_dgrad": ring, "fc1_fprop": ring, "fc2_dgrad": ring,
            "proj_fprop": proj, "fc2_fprop": fc2}


_RING_RS = UbSlot("ring_exchange", 1, True)


def _pipe(num_sm: int) -> UbSlot:
    return UbSlot("pipeline", num_sm, True, 4)


UB_CONFIGS: dict[tuple[str, str, int], dict[str, UbSlot]] = {
    # NVIDIA/NeMo@8cfedd7 nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py, as the performance
    # scripts pick them: (gpu: h100 -> hopper, b200 / gb200 -> blackwell; compute dtype; model hidden size)
    ("hopper", "bf16", 8192): _cfg(4, 24, 2, 4, _pipe(24), _pipe(16)),        # userbuffers_bf16_h100_h8192_tp4
    ("hopper", "fp8", 8192): _cfg(4, 24, 2, 4, _RING_RS, _RING_RS),           # userbuffers_fp8_h100_h8192_tp4
    ("blackwell", "bf16", 8192): _cfg(16, 24, 2, 4, _pipe(32), _pipe(16)),    # userbuffers_bf16_b200_h8192_tp2
    ("blackwell", "fp8", 8192): _cfg(4, 24, 2, 4, _RING_RS, _RING_RS),        # userbuffers_fp8_b200_h8192_tp2
    ("hopper", "bf16", 16384): _cfg(2, 24, 2, 2, _pipe(24), _pipe(8)),        # ..._bf16_h100_h16384_tp8_cp2
    ("hopper", "fp8", 16384): _cfg(2, 24, 2, 2, _RING_RS, _RING_RS),          # ..._fp8_h100_h16384_tp8_cp2
    ("blackwell", "bf16", 16384): _cfg(8, 24, 2, 2, _pipe(32), _pipe(8)),     # ..._bf16_b200_h16384_tp4_cp2
    ("blackwell", "fp8", 16384): _cfg(8, 32, 2, 8, _RING_RS, _RING_RS),       # ..._fp8_b200_h16384_tp4_cp2
    # the same file's "GPT3 175b" entries (userbuffers_{bf16,fp8}_{h100,b200}_h12288_tp4_mbs1_seqlen2048)
    ("hopper", "bf16", 12288): _cfg(4, 4, 2, 4, _pipe(24), _RING_RS),         # userbuffers_bf16_h100_h12288_tp4
    ("hopper", "fp8", 12288): _cfg(4, 4, 2, 4, _RING_RS, _RING_RS),           # userbuffers_fp8_h100_h12288_tp4
    ("blackwell", "bf16", 12288): _cfg(4, 16, 2, 8, _RING_RS, _RING_RS),      # userbuffers_bf16_b200_h12288_tp4
    ("blackwell", "fp8", 12288): _cfg(4, 16, 2, 8, _RING_RS, _RING_RS),       # userbuffers_fp8_b200_h12288_tp4
}
"""NeMo's userbuffers configs for the Llama 3 70B (hidden 8192) and 405B (16384) and the GPT-3 175B (12288)
performance recipes."""
TE_DEFAULTS: dict[str, UbSlot] = {
    **{s: UbSlot("ring_exchange") for s in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")},
    **{s: UbSlot("pipeline", 16, True, 4) for s in ("proj_fprop", "fc2_fprop")},
    **{s: UbSlot("bulk", 16) for s in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")},
}
"""TE's ``initialize_ub`` defaults (NVIDIA/TransformerEngine@d0067d0 pytorch/module/base.py
``get_default_config``: ring exchange 1 SM, no margin; pipeline 16 SMs, 4 splits, margin; bulk 16 SMs, no
margin): a model or GPU no NeMo config names."""
ARCH_CONFIGS = {"hopper": "hopper", "blackwell": "blackwell"}
"""A GPU's architecture -> the NeMo configs it runs (H100 / H200: h100's; B200 / GB200: b200's)."""


def ub_config(architecture: str, precision: str, hidden: int) -> dict[str, UbSlot]:
    """The userbuffers slots NeMo sets for ``hidden``-wide blocks on ``architecture`` in ``precision`` (any 8-bit
    recipe reads the fp8 config), else TE's defaults."""
    dtype = "bf16" if precision in ("bf16", "fp16", "fp32") else "fp8"
    return UB_CONFIGS.get((ARCH_CONFIGS.get(architecture, ""), dtype, hidden), TE_DEFAULTS)


def chunked_gemm_ratio(op: Op, chunks: int, price: Callable[[Op], float]) -> float:
    """Seconds of ``chunks`` GEMMs of ``op``'s rows split ``chunks`` ways over seconds of ``op`` itself, both
    through the GEMM model (``price``): the chunked GEMMs' wave quantization, launches and power ramp."""
    s = op.shape
    if chunks <= 1 or not isinstance(s, GemmShape) or s.m < chunks:
        return 1.0
    a = op.bytes_read / ((s.m * s.k + s.k * s.n) * s.groups)  # bytes per operand element
    chunk = dataclasses.replace(op, shape=dataclasses.replace(s, m=s.m // chunks), flops=op.flops / chunks,
                                bytes_read=op.bytes_read - a * s.m * s.k * s.groups * (1 - 1 / chunks),
                                bytes_written=op.bytes_written / chunks)
    return chunks * price(chunk) / price(op)


def rs_reduce_op(tokens: int, hidden: int, tp: int) -> Op:
    """The ring reduce-scatter's last kernel: the tp received [tokens / tp, hidden] chunks summed into one (bf16
    reads of tp, one write)."""
    return memory_op("tp_overlap.rs_reduce", "add", RowsShape(max(1, tokens // tp), hidden), "bf16", reads=tp,
                     writes=1)


def slot_cost_s(slot: UbSlot, c: float, g: float, tp: int, sm: int, chunk_ratio: float = 1.0,
                reduce_s: float = 0.0) -> float:
    """Seconds the step pays beyond the GEMM's own ``g`` for one collective of ``c`` seconds overlapped in
    ``slot`` (the module docstring's formulas); ``chunk_ratio``: the chunked GEMMs' seconds over ``g``
    (``chunked_gemm_ratio``); ``reduce_s``: a ring reduce-scatter's reduction kernel."""
    margin = sm / max(1, sm - slot.num_sm) if slot.set_sm_margin else 1.0
    g_c = g * chunk_ratio * margin
    if slot.method == "ring_exchange":
        return (g_c - g) + max(0.0, c - g_c * (tp - 1) / tp) + reduce_s
    if slot.method == "pipeline":
        splits = slot.num_splits
        return (g_c - g) + c / splits + max(0.0, c - g_c) * (splits - 1) / splits
    if slot.method == "bulk":
        return max(c - g, c * slot.num_sm / sm)
    raise ValueError(f"unknown userbuffers method {slot.method!r} (ring_exchange, pipeline, bulk)")


def chunks_of(slot: UbSlot, tp: int) -> int:
    """GEMMs a slot splits its GEMM into: tp for ring exchange, ``num_splits`` pipelined, 1 in bulk."""
    return {"ring_exchange": tp, "pipeline": slot.num_splits, "bulk": 1}[slot.method]


def overlapped_tp_exposed_s(total_s: float, collectives: int, partners: Iterable[tuple[float, int]]) -> float:
    """Seconds the step pays for ``collectives`` all-gathers / reduce-scatters taking ``total_s`` in all, given
    each partner's (seconds it pays per execution, executions per step); the collectives without a partner stay
    exposed whole."""
    if collectives <= 0 or total_s <= 0:
        return total_s
    c = total_s / collectives
    exposed, paired = 0.0, 0
    for cost, n in partners:
        n = min(n, collectives - paired)
        if n <= 0:
            break
        exposed += n * cost
        paired += n
    return exposed + (collectives - paired) * c


def with_tp_overlap(critical, micro, cfg, model, gpu, price: Callable[[Op], float]):
    """``critical`` (``step_comm.CriticalPath``) with the tensor-parallel collective's seconds under userbuffers
    overlap: its ``time_s`` with the wgrad inputs' re-gathers, its ``exposed_s`` what the step pays (exposed
    collectives and the GEMMs' slowdown); ``micro``: the priced micro-batch (``step.Stage``: (PricedOps, copies)
    pieces); ``model``: the model (the busiest stage holds ``ceil(num_layers / pp)`` blocks); ``price``: seconds
    of one execution of an op through the op model (the chunked GEMMs, the reduction kernel)."""
    p = cfg.parallelism
    comms, ring = critical
    if p.tp <= 1:
        return critical
    accum = cfg.grad_accumulation
    tagged = []  # (slot name, op, seconds per execution, executions per step)
    for part, copies in micro:
        for op, n, t in zip(part.ops, part.counts, part.times, strict=True):
            slot = op.extra.get("tp_overlap") if op.extra else None
            if slot:
                tagged.append((slot, op, t.time_s, n * copies * accum))
    if not tagged:
        return critical
    layers = -(-model.num_layers // p.pp)
    per_block = 4 + (2 if cfg.activation_checkpointing == "full" else 0)
    base = 2 * per_block * layers * accum
    regathers = sum(n for slot, *_, n in tagged if slot in REGATHER_SLOTS)
    slots = ub_config(gpu.architecture, cfg.precision, model.hidden_size)
    sm = gpu.compute_units.value
    tokens = cfg.micro_batch * cfg.seq_len // p.cp
    reduce_s = price(rs_reduce_op(tokens, model.hidden_size, p.tp))
    out = []
    for cm in comms:
        if cm.name != TP_TRAFFIC:
            out.append(cm)
            continue
        c = cm.time_s / base
        partners = []
        for name, op, g, n in tagged:
            slot = slots[name]
            ratio = chunked_gemm_ratio(op, chunks_of(slot, p.tp), price) if g > 0 else 1.0
            ring_rs = slot.method == "ring_exchange" and name in REDUCE_SCATTER_SLOTS
            partners.append((slot_cost_s(slot, c, g, p.tp, sm, ratio, reduce_s if ring_rs else 0.0), n))
        time_s = cm.time_s + regathers * c
        out.append(dataclasses.replace(cm, time_s=time_s,
                                       exposed_s=overlapped_tp_exposed_s(time_s, base + regathers, partners)))
    return out, ring
