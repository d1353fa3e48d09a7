"""TransformerEngine's tensor-parallel communication overlap (userbuffers, ``tp_comm_overlap=True``) as NeMo's
performance recipes run it: how much of the sequence-parallel all-gathers and reduce-scatters the step still waits for.

NeMo's performance scripts (scripts/performance/llm/pretrain_*.py) set ``tp_comm_overlap_cfg`` on the
``MegatronCommOverlapCallback`` for every tp > 1 run, from nemo/collections/llm/recipes/tp_overlap_configs/
userbuffers.py. Each block's linears pair one collective of the [tokens, hidden] activations with one GEMM
(``stack_kernels_megatron.TP_OVERLAP_PARTNERS``, tagged ``extra["tp_overlap"]``):

- ``ring_exchange_ag`` (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad: ``RingExchangeOverlapCfg``): the GEMM runs
  in tp chunks, the first on the local shard while the next shard arrives: exposed
  max(0, c - g (tp - 1) / tp);
- ``rs`` (proj_fprop, fc2_fprop: ``PipelineOverlapCfg(num_splits=4)`` on H100, ``RingExchangeOverlapCfg`` on
  B200): each GEMM chunk's reduce-scatter runs behind the next chunk, the last one's is exposed:
  c / splits + max(0, c - g) (splits - 1) / splits, ``RS_SPLITS`` chunks;
- ``bulk`` (qkv_wgrad, fc1_wgrad: ``BulkOverlapCfg``): the dgrad's reduce-scatter runs whole beside the wgrad
  GEMM: max(0, c - g).

The step model's tensor-parallel traffic is ``step_comm.transformer_traffic``'s: all-reduce equivalents of the
activations, 4 per block and micro-batch (2 more under full recompute), i.e. twice as many all-gathers or
reduce-scatters of the same bytes (ring all-reduce = reduce-scatter + all-gather); collectives left without a
tagged partner stay exposed. Not priced: the SMs the pipelined reduce-scatter takes from its GEMM (``num_sm`` 16-32
of 132 on H100) and the chunked GEMMs' lower efficiency -- guess, calibrate me on a TE trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

RS_SPLITS = 4
"""Chunks of a pipelined reduce-scatter overlap (NeMo's ``PipelineOverlapCfg(num_splits=4)``; its ring-exchange
configs chunk tp ways): guess, calibrate me on a TE trace."""
TP_TRAFFIC = "tp.all_reduce_activations"
"""``step_comm.transformer_traffic``'s tensor-parallel collective."""


def partner_exposed_s(method: str, c: float, g: float, tp: int) -> float:
    """Seconds one collective of ``c`` seconds stays exposed beside its partner GEMM of ``g`` seconds."""
    if method == "ring_exchange_ag":
        return max(0.0, c - g * (tp - 1) / tp)
    if method == "rs":
        return c / RS_SPLITS + max(0.0, c - g) * (RS_SPLITS - 1) / RS_SPLITS
    if method == "bulk":
        return max(0.0, c - g)
    raise ValueError(f"unknown tp overlap method {method!r} (ring_exchange_ag, rs, bulk)")


def overlapped_tp_exposed_s(total_s: float, collectives: int, partners: Iterable[tuple[str, float, int]],
                            tp: int) -> float:
    """Exposed seconds of ``collectives`` all-gathers / reduce-scatters taking ``total_s`` in all, given the
    ``partners``' (method, GEMM seconds per execution, executions per step); the collectives without a partner
    stay exposed whole."""
    if collectives <= 0 or total_s <= 0:
        return total_s
    c = total_s / collectives
    exposed, paired = 0.0, 0
    for method, g, n in partners:
        n = min(n, collectives - paired)
        if n <= 0:
            break
        exposed += n * partner_exposed_s(method, c, g, tp)
        paired += n
    return exposed + (collectives - paired) * c


def with_tp_overlap(critical, micro, cfg, model_layers: int):
    """``critical`` (``step_comm.CriticalPath``) with the tensor-parallel collective's exposed seconds under
    userbuffers overlap; ``micro``: the priced micro-batch (``step.Stage``: (PricedOps, copies) pieces);
    ``model_layers``: the model's blocks (the busiest stage holds ``ceil(model_layers / pp)``)."""
    p = cfg.parallelism
    comms, ring = critical
    if p.tp <= 1:
        return critical
    accum = cfg.grad_accumulation
    partners = []
    for part, copies in micro:
        for op, n, t in zip(part.ops, part.counts, part.times, strict=True):
            method = op.extra.get("tp_overlap") if op.extra else None
            if method:
                partners.append((method, t.time_s, n * copies * accum))
    if not partners:
        return critical
    layers = -(-model_layers // p.pp)
    per_block = 4 + (2 if cfg.activation_checkpointing == "full" else 0)
    collectives = 2 * per_block * layers * accum
    out = [dataclasses.replace(cm, exposed_s=overlapped_tp_exposed_s(cm.time_s, collectives, partners, p.tp))
           if cm.name == TP_TRAFFIC else cm for cm in comms]
    return out, ring

