"""The collectives of one training step (``workbench.step.StepModel`` adds them to the priced ops): the
data-parallel plan (FSDP2 gathers and reduce-scatters, DDP all-reduces, ZeRO-1's distributed optimizer) on the
schedule of ``workbench.perf.overlap``, and the tensor-, expert-, pipeline- and context-parallel traffic on the
critical path. What each model family's step sends its family says (``Family.data_parallel_collectives``,
``Family.critical_traffic``); the formulas are here, one function per family (``transformer_data_parallel``, ...).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

from workbench.config import TrainingConfig, activation_dtype
from workbench.families import family_of
from workbench.graph.transformer import local_tokens
from workbench.hardware import GPU
from workbench.models import DLRMModel, HSTUModel, Model, TransformerModel
from workbench.perf.comm import collective_time, group_link
from workbench.perf.context_parallel import (
    ContextParallel,
    RingExchange as StackRingExchange,
    attention_call_s,
    ring_exchanges,
    ring_exposed_s,
)
from workbench.perf.efficiency import Constants
from workbench.perf.overlap import (
    ExposureSchedule,
    ScheduledCollective,
    ddp_last_bucket_bytes,
    ddp_schedule,
    fsdp_schedule,
    megatron_bucket_params,
    ring_exchange_exposed_s,
    zero1_schedule,
)
from workbench.precision import get_precision


@dataclass(frozen=True)
class CommPrediction:
    name: str
    collective: str
    size_bytes: float
    group: int
    link: str
    time_s: float
    """All occurrences in one step."""
    exposed_s: float
    """What compute does not hide."""
    position: str = "hidden"
    """Where it sits in the step: hidden (issued while compute runs, hidden jointly with the other such traffic),
    forward_start / backward_end (an edge of the data-parallel schedule: ``workbench.perf.overlap``) or critical
    (tensor-, expert-, pipeline-parallel traffic on the critical path, all exposed)."""



DataParallelPlan = list[tuple[ScheduledCollective, int, str, float]]
"""The data-parallel collectives of one step: (collective, group size, link name, seconds per occurrence)."""


FSDP_BLOCK_GATHERS = ("fsdp.all_gather_first_block", "fsdp.all_gather_blocks")
"""The dense blocks' FSDP2 all-gathers (``overlap.fsdp_schedule``): what a float8 all-gather shrinks."""


def data_parallel_plan(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, *,
                       block_gather_scale: float = 1.0, schedules: Schedules | None = None) -> DataParallelPlan:
    """The step's data-parallel collectives (FSDP2 gathers and reduce-scatters, DDP all-reduces) on the schedule of
    ``workbench.perf.overlap``, each timed once. Depends on the parallelism, gradient accumulation and activation
    dtype only -- not on the micro-batch -- so ``workbench.step.StepModel`` caches it. ``block_gather_scale``: the
    dense blocks' all-gather bytes relative to the compute dtype's (a stack's FSDP2 float8 all-gather,
    ``graph.stacked.StackStep.fsdp_gather_scale``; 1 everywhere else). ``schedules``: a stack's own collectives
    in place of the family's (DeepSpeed ZeRO: ``graph.stack_kernels_hf.DeepSpeedStep.data_parallel_schedules``)."""
    p = cfg.parallelism
    dp_spans = p.weight_replicas * p.tp > gpu.scale_up_domain_gpus.value
    if schedules is None:
        schedules = family_of(model).data_parallel_collectives(model, cfg)
    planned = [(s, group) for schedule, group in schedules if group > 1 for s in schedule]
    if block_gather_scale != 1.0:
        planned = [(dataclasses.replace(s, size_bytes=s.size_bytes * block_gather_scale)
                    if s.name in FSDP_BLOCK_GATHERS else s, group) for s, group in planned]
    link = group_link(gpu, c, dp_spans)  # every data-parallel group spans the same ranks' links
    return [(s, group, link.name, collective_time(s.collective, s.size_bytes, group, link)) for s, group in planned]


Schedules = list[tuple[list[ScheduledCollective], int]]
"""A family's data-parallel collectives: (schedule, group size) pairs in step order
(``Family.data_parallel_collectives``)."""


def transformer_data_parallel(model: TransformerModel, cfg: TrainingConfig) -> Schedules:
    """A transformer's data-parallel collectives: FSDP2's gathers and reduce-scatters, DDP's all-reduces, ZeRO-1's
    distributed optimizer, LoRA's adapter gradients; the experts' over the ranks that hold the same experts."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    plans: Schedules = []
    act_bytes = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    layers, experts, dense, root, block = _stage_params(model, p.tp, p.pp)
    expert_group = p.weight_replicas // p.ep
    replicas = p.weight_replicas  # dp x cp: the ranks holding the same weights
    if cfg.lora:  # frozen base: only the adapters' gradients reduce (fsdp: one rank only, config.py)
        adapters = layers * model.lora_params_per_layer(cfg.lora_rank, cfg.lora_targets) / p.tp * 4
        if p.sharding == "zero1":
            plans.append((zero1_schedule("zero1.lora", adapters, ddp_last_bucket_bytes(adapters, 0.0), adapters / 2,
                                         ddp_last_bucket_bytes(adapters, 0.0) / 2), replicas))
        else:
            plans.append((ddp_schedule("ddp.lora", adapters, ddp_last_bucket_bytes(adapters, 0.0)), replicas))
    elif p.sharding == "zero1":  # Megatron's distributed optimizer: RS gradients (fp32), AG bf16 parameters
        cap = megatron_bucket_params(replicas)
        last = ddp_last_bucket_bytes(dense * 4, model.vocab_size * model.hidden_size / p.tp * 4, cap * 4)
        plans.append((zero1_schedule("zero1", dense * 4, last, dense * act_bytes, last / 4 * act_bytes), replicas))
        if experts:
            plans.append((zero1_schedule("zero1.experts", experts / p.ep * 4, 0.0, experts / p.ep * act_bytes, 0.0),
                          expert_group))
    elif p.sharding == "fsdp":
        plans.append((fsdp_schedule("fsdp", root, block, layers, gather_bytes=act_bytes, reduce_bytes=4,
                                    grad_accumulation=accum), replicas))
        plans.append((fsdp_schedule("fsdp.experts", 0.0, experts / p.ep / layers, layers, gather_bytes=act_bytes,
                                    reduce_bytes=4, grad_accumulation=accum), expert_group))
    else:  # the token embedding's gradient comes last: DDP's last bucket
        last = ddp_last_bucket_bytes(dense * 4, model.vocab_size * model.hidden_size / p.tp * 4)
        plans.append((ddp_schedule("ddp", dense * 4, last), replicas))
        if experts:
            plans.append(([ScheduledCollective("ddp.all_reduce_expert_grads", "all_reduce", experts / p.ep * 4, 1,
                                               "hidden")], expert_group))
    return plans


_STAGE_PARAMS: dict[tuple[int, int, int], tuple[TransformerModel, tuple[int, float, float, float, float]]] = {}
_STAGE_PARAMS_LIMIT = 4096
"""Entries ``_stage_params`` keeps before it starts over (a long session searching many models)."""


def _stage_params(model: TransformerModel, tp: int, pp: int) -> tuple[int, float, float, float, float]:
    """(blocks, routed-expert, dense, root and one block's dense parameters) of one tp rank of the busiest pipeline
    stage: what ``transformer_data_parallel`` gathers and reduces, once per model object and (tp, pp) -- every
    data-parallel degree, sharding and accumulation of a recipe search shares them. Keyed by the model's id; the
    entry holds the model, so the id is not reused while it lives (models are frozen)."""
    key = (id(model), tp, pp)
    hit = _STAGE_PARAMS.get(key)
    if hit is None:
        layers = math.ceil(model.num_layers / pp)
        # dense weights are gathered / reduced over the whole dp group; each rank's ep-th share of the experts
        # only over the dp / ep ranks that hold the same experts
        experts = model.stage_expert_params(pp) / tp
        dense = model.params_per_gpu(tp, pp, 1, 1, sharded=False) - experts
        root = model.embedding_params() / tp  # embedding and head (the final norm's h weights are negligible)
        if len(_STAGE_PARAMS) >= _STAGE_PARAMS_LIMIT:
            _STAGE_PARAMS.clear()
        hit = _STAGE_PARAMS[key] = (model, (layers, experts, dense, root, (dense - root) / layers))
    return hit[1]


def replicated_dense_data_parallel(model: DLRMModel | HSTUModel, cfg: TrainingConfig) -> Schedules:
    """A recommendation model's: its replicated dense layers' gradients all-reduced (DDP); the tables update in
    their own backward, row-sharded."""
    grads = model.dense_params * 4  # the first dense layers' gradients come last: DDP's last bucket
    return [(ddp_schedule("ddp.dense", grads, ddp_last_bucket_bytes(grads, 0.0)), cfg.parallelism.dp)]


def communication(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, step_compute: float, *,
                   embedding_fwd_s: float = 0.0, embedding_bwd_s: float = 0.0,
                   plan: DataParallelPlan | None = None, attention_s: float = 0.0,
                   critical: CriticalPath | None = None,
                   schedule: ExposureSchedule | None = None) -> list[CommPrediction]:
    """Collectives of one step. Data-parallel traffic (FSDP gathers, gradient reductions: ``plan``, else
    ``data_parallel_plan``) follows the FSDP2 / DDP schedule of ``workbench.perf.overlap``: what is issued while
    compute runs shares one window of compute to hide behind (exposed = max(0, sum - comm_overlap x step compute),
    split in proportion); the schedule's edges (the root's and first block's all-gathers before the first compute,
    their reduce-scatters or DDP's last bucket after the last) are exposed, less the embedding compute
    (``embedding_fwd_s`` / ``embedding_bwd_s`` per micro-batch) that runs beside the first block's. Tensor-, expert-
    and pipeline-parallel traffic sits on the critical path and stays exposed (``critical_path``, or ``critical``
    already made). Context parallelism's ring K/V exchange hides behind the step's attention compute
    (``attention_s``, per micro-batch): ``overlap.ring_exchange_exposed_s``. ``schedule``: ``plan``'s
    ``exposure_schedule``, already made."""
    planned, _, exposed_s, critical_comms = _scheduled(model, cfg, gpu, c, step_compute, embedding_fwd_s,
                                                       embedding_bwd_s, plan, attention_s, critical, schedule)
    data_parallel = [CommPrediction(s.name, s.collective, s.size_bytes, group, link, t * s.occurrences, e, s.edge)
                     for (s, group, link, t), e in zip(planned, exposed_s, strict=True)]
    return data_parallel + critical_comms


def communication_seconds(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, step_compute: float, *,
                          embedding_fwd_s: float = 0.0, embedding_bwd_s: float = 0.0,
                          plan: DataParallelPlan | None = None, attention_s: float = 0.0,
                          critical: CriticalPath | None = None,
                          schedule: ExposureSchedule | None = None) -> tuple[float, float]:
    """(exposed, all) seconds of ``communication``'s collectives, summed in its order (the same ``sum`` over the
    same numbers, so the same bits), without making a ``CommPrediction`` per collective: recipe search's path."""
    _, schedule, exposed_s, critical_comms = _scheduled(model, cfg, gpu, c, step_compute, embedding_fwd_s,
                                                        embedding_bwd_s, plan, attention_s, critical, schedule)
    return (sum(exposed_s + [cm.exposed_s for cm in critical_comms]),
            sum(schedule.totals + [cm.time_s for cm in critical_comms]))  # totals: t x occurrences, in plan order


def exposure_schedule(plan: DataParallelPlan) -> ExposureSchedule:
    """``plan``'s collectives and times sorted once for ``overlap.exposed_seconds`` (many steps share a plan)."""
    return ExposureSchedule([s for s, _, _, _ in plan], [t for _, _, _, t in plan])


def _scheduled(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, step_compute: float,
               embedding_fwd_s: float, embedding_bwd_s: float, plan: DataParallelPlan | None, attention_s: float,
               critical: CriticalPath | None, schedule: ExposureSchedule | None = None,
               ) -> tuple[DataParallelPlan, ExposureSchedule, list[float], list[CommPrediction]]:
    """(the data-parallel plan, its ``exposure_schedule`` (``schedule``, or made), each collective's exposed seconds,
    the critical-path collectives with the cp ring's overlap applied): ``communication``'s arithmetic, shared by
    ``communication_seconds``."""
    exposed, ring = critical_path(model, cfg, gpu, c) if critical is None else critical
    if isinstance(ring, list):  # a stack's own ring (PyTorch's): each exchange beside its share of the attention
        exposed = exposed + _stack_ring_comms(model, cfg, ring, attention_s)
    elif ring is not None:
        chunk, group, link, total = ring
        exposed = exposed + [CommPrediction("cp.ring_send_recv_kv", "send_recv", chunk, group, link, total,
                                            ring_exchange_exposed_s(total, attention_s * cfg.grad_accumulation),
                                            "critical")]
    planned = data_parallel_plan(model, cfg, gpu, c) if plan is None else plan
    if schedule is None:
        schedule = exposure_schedule(planned)
    exposed_s = schedule.exposed(comm_overlap=c["comm_overlap"], step_compute_s=step_compute,
                                 embedding_fwd_s=embedding_fwd_s, embedding_bwd_s=embedding_bwd_s)
    return planned, schedule, exposed_s, exposed


class PricedRingExchange(NamedTuple):
    """One of a stack's ring collectives (``perf.context_parallel.RingExchange``) with its link and the seconds
    of one occurrence."""

    exchange: StackRingExchange
    link: str
    occurrence_s: float


CriticalPath = tuple[list[CommPrediction], "tuple[float, int, str, float] | list[PricedRingExchange] | None"]
"""The critical-path collectives of one step (tensor-, expert-, pipeline-parallel, all exposed) and context
parallelism's ring exchange: the generic ring as (chunk bytes, group, link name, seconds in the step), a stack's
own ring as its priced exchanges, or None without cp."""


def _stack_ring_comms(model: TransformerModel, cfg: TrainingConfig, ring: list[PricedRingExchange],
                      attention_s: float) -> list[CommPrediction]:
    """A stack's ring collectives over the step: each occurrence hidden behind its window of one block's
    attention call (``perf.context_parallel.ring_exposed_s``), the call's seconds split from ``attention_s`` (one
    micro-batch's attention compute) by FLOPs."""
    layers = math.ceil(model.num_layers / cfg.parallelism.pp)
    forward_calls = _forward_calls(cfg)
    fwd_s, bwd_s = attention_call_s(attention_s, layers, forward_calls)
    comms = []
    for e, link, t in ring:
        calls = layers * e.calls * cfg.grad_accumulation  # this exchange's attention calls in the step
        exposed = ring_exposed_s(e, t, fwd_s if e.phase == "fwd" else bwd_s) * calls
        comms.append(CommPrediction(e.name, e.collective, e.size_bytes, e.group, link, t * e.per_call * calls,
                                    exposed, "critical"))
    return comms


def _forward_calls(cfg: TrainingConfig) -> int:
    """Attention forward calls per block and micro-batch: full checkpointing reruns the forward in backward."""
    return 2 if cfg.activation_checkpointing == "full" else 1


class Traffic(NamedTuple):
    """One critical-path collective before it is timed: ``times`` occurrences in the step of ``collective`` over
    ``group`` ranks, ``size_bytes`` each; ``spans`` whether the group leaves the scale-up domain."""

    name: str
    collective: str
    size_bytes: float
    group: int
    spans: bool
    times: int


class RingExchange(NamedTuple):
    """Context parallelism's ring K/V exchange before it is timed: ``steps`` sends of ``chunk_bytes`` around
    ``group`` ranks in the step."""

    chunk_bytes: float
    group: int
    spans: bool
    steps: int


def critical_path(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants,
                  context_parallel: ContextParallel | None = None, stack=None) -> CriticalPath:
    """The step's tensor-, expert- and pipeline-parallel collectives, on the critical path and all exposed, and
    context parallelism's ring K/V exchange before its overlap with attention (``communication`` adds it): the
    family's traffic (``Family.critical_traffic``: ``transformer_traffic``, ``embedding_traffic``), timed. Reads the
    micro-batch, sequence, precision, checkpointing, accumulation and every parallel degree but the sharding, so
    ``workbench.step.StepModel`` caches it for FSDP, DDP and ZeRO-1 alike. ``context_parallel``: the stack's ring
    (``Stack.context_parallel``); None or ``p2p``: the family's generic ring. ``stack``: the traffic as that stack
    runs it (``Family.stack_critical_traffic``), None: the family's."""
    family, domain = family_of(model), gpu.scale_up_domain_gpus.value
    traffic, ring_exchange = (family.critical_traffic(model, cfg, domain) if stack is None
                              else family.stack_critical_traffic(model, cfg, domain, stack))
    exposed: list[CommPrediction] = []
    for name, kind, size, group, spans, times in traffic:
        if group <= 1:
            continue
        link = group_link(gpu, c, spans)
        total = collective_time(kind, size, group, link) * times
        exposed.append(CommPrediction(name, kind, size, group, link.name, total, total, "critical"))
    ring = None
    if ring_exchange is not None and context_parallel is not None and context_parallel.rotate != "p2p":
        ring = _stack_ring(model, cfg, context_parallel, ring_exchange.spans, gpu, c)
    elif ring_exchange is not None:
        chunk, group, spans, steps = ring_exchange
        link = group_link(gpu, c, spans)
        ring = (chunk, group, link.name, collective_time("send_recv", chunk, group, link) * steps)
    return exposed, ring


def _stack_ring(model: TransformerModel, cfg: TrainingConfig, cp: ContextParallel, spans: bool, gpu: GPU,
                c: Constants) -> list[PricedRingExchange]:
    """A stack's ring collectives (``perf.context_parallel.ring_exchanges``) of one block's attention, timed."""
    p = cfg.parallelism
    exchanges = ring_exchanges(
        cp, tokens=local_tokens(cfg), kv_width=max(model.kv_size // p.tp, model.head_dim),
        q_width=model.q_size // p.tp, act_bytes=get_precision(activation_dtype(cfg.precision)).bytes_per_element,
        group=p.cp, spans=spans, forward_calls=_forward_calls(cfg))
    link = group_link(gpu, c, spans)
    return [PricedRingExchange(e, link.name, collective_time(e.collective, e.size_bytes, e.group, link))
            for e in exchanges]


def transformer_traffic(model: TransformerModel, cfg: TrainingConfig, domain: int
                        ) -> tuple[list[Traffic], RingExchange | None]:
    """A transformer's critical path: tensor-parallel all-reduces of the activations (twice more per block under
    full checkpointing), MoE's all-to-all of the routed tokens, pipeline sends (an interleaved pipeline sends
    virtual_stages times as often: Narayanan et al. 2021, Sec. 2.2), and under cp the ring's K/V chunks."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    act_bytes = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    tokens = local_tokens(cfg)
    layers = math.ceil(model.num_layers / p.pp)
    recompute_tp = 2 if cfg.activation_checkpointing == "full" else 0
    traffic = [Traffic("tp.all_reduce_activations", "all_reduce", tokens * model.hidden_size * act_bytes, p.tp,
                       p.tp > domain, (4 + recompute_tp) * layers * accum)]
    if model.is_moe:
        routed = tokens * model.experts_per_token * model.hidden_size * act_bytes
        traffic.append(Traffic("ep.all_to_all_tokens", "all_to_all", routed, p.ep, p.ep * p.tp > domain,
                               4 * model.stage_moe_layers(p.pp) * accum))
    traffic.append(Traffic("pp.send_recv_activations", "send_recv", tokens * model.hidden_size * act_bytes / p.tp,
                           p.pp, p.gpus > domain, 2 * accum * p.virtual_stages))
    ring = None
    if p.cp > 1:  # each ring step passes one K/V chunk: fwd cp-1 steps, bwd K/V and dK/dV (full AC: fwd again)
        chunk = tokens * 2 * max(model.kv_size // p.tp, model.head_dim) * act_bytes
        steps = (p.cp - 1) * (4 if cfg.activation_checkpointing == "full" else 3) * layers * accum
        ring = RingExchange(chunk, p.cp, p.cp * p.tp > domain, steps)
    return traffic, ring


def embedding_traffic(vectors: int, dim: int, cfg: TrainingConfig, domain: int
                      ) -> tuple[list[Traffic], RingExchange | None]:
    """A recommendation model's critical path: the ``vectors`` embeddings of width ``dim`` one micro-batch looks up
    in its row-sharded tables (one pooled vector per DLRM table and sample, one per HSTU token), all-to-all over the
    dp GPUs in the activation dtype, forward and backward."""
    p = cfg.parallelism
    pooled = vectors * dim * get_precision(activation_dtype(cfg.precision)).bytes_per_element
    return [Traffic("embedding.all_to_all", "all_to_all", pooled, p.dp, p.dp > domain, 2 * cfg.grad_accumulation)], None
