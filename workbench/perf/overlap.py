"""Which data-parallel communication no compute can hide: the edges of the FSDP2 and DDP schedules.

Data-parallel collectives run on their own CUDA streams beside the compute stream, so most of them hide behind
compute; ``workbench.predict`` hides those jointly (exposed = max(0, their sum - ``comm_overlap`` x step
compute), ``comm_overlap`` a guess). Some cannot hide whatever the overlap, because the schedule leaves no compute
to run beside them -- its edges. Derived here from the schedule, not fitted:

FSDP2 (``torch.distributed.fsdp.fully_shard``) as ``workbench.train.parallel.apply_fsdp`` applies it: one unit per
block, every block but the last resharded after forward, then the root unit (embedding, final norm, output head).

- forward start, per micro-batch: the root's pre-forward makes the all-gather streams wait for the compute stream
  (``FSDPState._root_pre_forward``: ``all_gather_stream.wait_stream(current_stream)``, or the optimizer's event),
  so the root's all-gather starts with nothing beside it and the embedding lookup waits for it; the first block's
  all-gather is issued next on the same all-gather stream, beside only the embedding lookup. Exposed:
  AG(root) + max(0, AG(first block) - embedding forward). Every later block's all-gather is issued while the block
  before it computes (implicit forward prefetch: the CPU runs ahead) and hides.
- backward end, once per step: the first block's reduce-scatter is issued by its post-backward, beside only the
  embedding's backward; the root's forward inputs (token ids) need no gradient, so its post-backward -- the
  reduce-scatter of the embedding, final-norm and head gradients -- runs in the root's final callback after all
  backward compute, and that callback makes the compute stream wait for every reduce-scatter before the optimizer
  (``FSDPState._root_post_backward_final_callback``). Exposed: max(0, RS(first block) - embedding backward) + RS(root).
- the root is never resharded after forward (``FSDPState._lazy_init`` sets its ``post_forward_mesh_info = None``)
  and the last block keeps its parameters (``reshard_after_forward=False``), so backward re-gathers blocks 0..L-2
  only, each prefetched one block ahead (``FSDPParamGroup._backward_prefetch``). Under gradient accumulation every
  micro-batch gathers again (``reshard_after_backward`` stays True) and only the last one reduce-scatters
  (``set_requires_gradient_sync``).

The embedding's compute is counted once as hiding time: the part of it that runs beside the first block's
collectives on an edge is not also in the window the hidden collectives share (``exposed_seconds``). Counting it in
both made a step slower on a GPU with more HBM bandwidth: a faster embedding shrank the edge's window by as much as
it saved, and the joint window by ``comm_overlap`` times that again (issue 15).

DDP (``torch.nn.parallel.DistributedDataParallel``, ``bucket_cap_mb`` 25 MiB by default): each bucket of gradients
is all-reduced as soon as it fills during backward; the last bucket holds the parameters whose gradients come
last -- a transformer's token embedding, in a bucket of its own when larger than the cap -- and its all-reduce
starts after the last backward kernel; the optimizer waits for it. Exposed: AR(last bucket), once per step.

Megatron's distributed optimizer (zero1: Megatron-Core ``DistributedDataParallel`` with ``overlap_grad_reduce`` and
``overlap_param_gather``): gradients reduce-scattered bucket by bucket during backward, the last bucket (the token
embedding's gradient, ready last) after the last backward kernel; after the optimizer step each bucket's updated bf16
parameters are all-gathered, overlapped with the next forward, which waits only for the first bucket. Exposed:
RS(last bucket) + AG(first bucket), once per step. Buckets of ``megatron_bucket_params(dp)`` parameters
(megatron/core/distributed/distributed_data_parallel.py: ``bucket_size = max(40000000, 1000000 * dp)``).

Context parallelism's ring attention passes each rank's K/V chunk to its neighbour cp - 1 times per attention
forward (and K/V plus their gradients in backward) while the attention of the chunk in hand computes
(Megatron-Core's ``AttnFuncWithCPAndKVP2P``; Liu et al. 2023, "Ring Attention"): exposed = max(0, exchange -
attention compute), ``ring_exchange_exposed_s``. A stack that runs another ring (PyTorch's all-gather ring under
torchtitan) says so in its YAML: ``workbench.perf.context_parallel``.

Sources: torch/distributed/fsdp/_fully_shard/_fsdp_state.py and _fsdp_param_group.py (PyTorch 2.11 to 2.13);
torch/nn/parallel/distributed.py (``_DEFAULT_BUCKET_CAP_MB``). Not modelled: NCCL kernels slowing the compute they
overlap (they occupy SMs), a collective longer than the compute it overlaps (the joint pool's business), pipeline
stages' own edges (each stage is priced as the busiest one, with the root's edges on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from workbench.perf.comm import COLLECTIVES, Collective

Edge = Literal["hidden", "forward_start", "backward_end"]
EDGES: tuple[str, ...] = ("hidden", "forward_start", "backward_end")

DDP_BUCKET_CAP_BYTES = 25 * 2**20
"""DistributedDataParallel's default gradient bucket (``bucket_cap_mb=25``, MiB: torch/nn/parallel/distributed.py)."""


@dataclass(frozen=True)
class ScheduledCollective:
    """One collective of the data-parallel schedule and where it sits in the step."""

    name: str
    collective: Collective
    size_bytes: float
    """One occurrence's full logical buffer (``workbench.perf.comm``'s convention)."""
    occurrences: int
    """Per optimizer step."""
    edge: Edge
    """hidden: issued while compute runs, hidden jointly with the rest; forward_start / backward_end: an edge."""
    beside_compute: bool = False
    """On an edge: the embedding's own compute can run beside it (the first block's collective); else nothing can."""

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(f"{self.name}: collective {self.collective!r}; expected one of {', '.join(COLLECTIVES)}")
        if self.edge not in EDGES:
            raise ValueError(f"{self.name}: edge {self.edge!r}; expected one of {', '.join(EDGES)}")
        if self.size_bytes < 0 or self.occurrences < 0:
            raise ValueError(f"{self.name}: size_bytes {self.size_bytes} and occurrences {self.occurrences}: "
                             "expected both >= 0")


def fsdp_schedule(prefix: str, root_params: float, block_params: float, layers: int, *, gather_bytes: float,
                  reduce_bytes: float, grad_accumulation: int = 1) -> list[ScheduledCollective]:
    """FSDP2's collectives of one step for ``layers`` block units of ``block_params`` and a root unit of
    ``root_params`` (0: no root, e.g. a block's experts), parameters gathered at ``gather_bytes`` each (the compute
    dtype) and gradients reduced at ``reduce_bytes`` (the reduce dtype). Zero-sized entries are left out."""
    if layers < 1 or grad_accumulation < 1:
        raise ValueError(f"{prefix}: layers {layers} and grad_accumulation {grad_accumulation} must be >= 1")
    if root_params == 0 and block_params == 0:  # nothing sharded (a dense model's experts): every entry is empty
        return []
    accum, interior = grad_accumulation, layers - 1
    gather_root, gather_block = root_params * gather_bytes, block_params * gather_bytes
    reduce_root, reduce_block = root_params * reduce_bytes, block_params * reduce_bytes
    plan = [
        ScheduledCollective(f"{prefix}.all_gather_root", "all_gather", gather_root, accum, "forward_start"),
        ScheduledCollective(f"{prefix}.all_gather_first_block", "all_gather", gather_block, accum, "forward_start",
                            beside_compute=True),
        # forward: blocks 1..L-1; backward: blocks 0..L-2 (the last block and the root stay gathered)
        ScheduledCollective(f"{prefix}.all_gather_blocks", "all_gather", gather_block, 2 * interior * accum, "hidden"),
        ScheduledCollective(f"{prefix}.reduce_scatter_blocks", "reduce_scatter", reduce_block, interior, "hidden"),
        ScheduledCollective(f"{prefix}.reduce_scatter_first_block", "reduce_scatter", reduce_block, 1, "backward_end",
                            beside_compute=True),
        ScheduledCollective(f"{prefix}.reduce_scatter_root", "reduce_scatter", reduce_root, 1, "backward_end"),
    ]
    return [s for s in plan if s.size_bytes > 0 and s.occurrences > 0]


def ddp_last_bucket_bytes(grad_bytes: float, last_ready_bytes: float, cap_bytes: float = DDP_BUCKET_CAP_BYTES) -> float:
    """Bytes of DDP's last gradient bucket: the last-ready parameter alone when it exceeds the cap (DDP gives such a
    tensor its own bucket), else a cap's worth -- never more than all the gradients."""
    return min(grad_bytes, max(last_ready_bytes, cap_bytes))


def ddp_schedule(prefix: str, grad_bytes: float, last_bucket_bytes: float) -> list[ScheduledCollective]:
    """DDP's gradient all-reduces of one step: the buckets filled during backward (hidden) and the last one."""
    if not 0 <= last_bucket_bytes <= grad_bytes:
        raise ValueError(f"{prefix}: last bucket {last_bucket_bytes} B must lie in [0, {grad_bytes}] (all gradients)")
    plan = [ScheduledCollective(f"{prefix}.all_reduce_buckets", "all_reduce", grad_bytes - last_bucket_bytes, 1,
                                "hidden"),
            ScheduledCollective(f"{prefix}.all_reduce_last_bucket", "all_reduce", last_bucket_bytes, 1,
                                "backward_end")]
    return [s for s in plan if s.size_bytes > 0]


MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
"""Megatron-Core's smallest default gradient bucket, in parameters (``max(40000000, 1000000 * dp)``)."""
MEGATRON_BUCKET_PARAMS_PER_RANK = 1_000_000


def megatron_bucket_params(dp: int) -> int:
    """Parameters per gradient bucket of Megatron-Core's DDP by default (the module docstring)."""
    return max(MEGATRON_MIN_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * dp)


def zero1_schedule(prefix: str, grad_bytes: float, last_bucket_bytes: float, param_bytes: float,
                   first_bucket_param_bytes: float) -> list[ScheduledCollective]:
    """Megatron's distributed optimizer in one step: gradient reduce-scatters (hidden, the last bucket at the backward
    end) and parameter all-gathers (hidden, the first bucket at the forward start)."""
    if not 0 <= last_bucket_bytes <= grad_bytes or not 0 <= first_bucket_param_bytes <= param_bytes:
        raise ValueError(f"{prefix}: buckets (last {last_bucket_bytes} B of {grad_bytes} B gradients, first "
                         f"{first_bucket_param_bytes} B of {param_bytes} B parameters) must lie within the totals")
    plan = [
        ScheduledCollective(f"{prefix}.all_gather_first_bucket", "all_gather", first_bucket_param_bytes, 1,
                            "forward_start"),
        ScheduledCollective(f"{prefix}.all_gather_params", "all_gather", param_bytes - first_bucket_param_bytes, 1,
                            "hidden"),
        ScheduledCollective(f"{prefix}.reduce_scatter_buckets", "reduce_scatter", grad_bytes - last_bucket_bytes, 1,
                            "hidden"),
        ScheduledCollective(f"{prefix}.reduce_scatter_last_bucket", "reduce_scatter", last_bucket_bytes, 1,
                            "backward_end"),
    ]
    return [s for s in plan if s.size_bytes > 0]


def ring_exchange_exposed_s(exchange_s: float, attention_s: float) -> float:
    """Exposed seconds of ring attention's K/V exchange beside the attention compute it overlaps (both per step)."""
    if exchange_s < 0 or attention_s < 0:
        raise ValueError(f"exchange {exchange_s} s and attention {attention_s} s must be >= 0")
    return max(0.0, exchange_s - attention_s)


def edge_exposed_s(blocking_s: float, beside_s: float, window_s: float) -> float:
    """Exposed seconds of one edge, its collectives in a row on one stream: those no compute can run beside
    (``blocking_s``) in full, those beside a ``window_s`` of compute (the embedding's) beyond that window."""
    if min(blocking_s, beside_s, window_s) < 0:
        raise ValueError(f"edge times must be >= 0: blocking {blocking_s}, beside {beside_s}, window {window_s}")
    return blocking_s + max(0.0, beside_s - window_s)


def exposed_seconds(plan: Sequence[ScheduledCollective], times_s: Sequence[float], *, comm_overlap: float,
                    step_compute_s: float, embedding_fwd_s: float = 0.0, embedding_bwd_s: float = 0.0) -> list[float]:
    """Exposed seconds per step of each collective of ``plan``, whose ``times_s`` are per occurrence.

    Edge ones: ``edge_exposed_s`` per occurrence (windows per micro-batch: the embedding's forward beside the forward
    start, its backward beside the backward end), the beside-compute part split in proportion. Hidden ones share one
    window: exposed = max(0, their sum - ``comm_overlap`` x (``step_compute_s`` - the embedding compute the edges'
    collectives already run beside)), split in proportion. ``step_compute_s`` includes the embedding's compute; each
    second of it hides one collective or the other, not both (counted in both, more HBM bandwidth made the step
    slower: the module docstring). ``ExposureSchedule`` sorts the plan once for many steps."""
    return ExposureSchedule(plan, times_s).exposed(comm_overlap=comm_overlap, step_compute_s=step_compute_s,
                                                   embedding_fwd_s=embedding_fwd_s, embedding_bwd_s=embedding_bwd_s)


class ExposureSchedule:
    """``exposed_seconds``' plan and times sorted once: each collective's seconds per step (``totals``), which edge
    or the hidden pool it is in, and the sums and counts of each edge's beside-compute collectives. Recipe search
    prices many steps against one data-parallel plan (they differ in their compute); ``exposed`` gives each step's
    exposed seconds with exactly ``exposed_seconds``' arithmetic, in its order."""

    __slots__ = ("totals", "edges", "hidden", "pooled")

    def __init__(self, plan: Sequence[ScheduledCollective], times_s: Sequence[float]):
        if len(plan) != len(times_s):
            raise ValueError(f"{len(plan)} collectives but {len(times_s)} times")
        self.totals = [t * s.occurrences for s, t in zip(plan, times_s, strict=True)]
        """Seconds per step of each collective (its time per occurrence x its occurrences)."""
        on_edge: dict[str, list[int]] = {"forward_start": [], "backward_end": []}
        hidden: list[int] = []
        for i, s in enumerate(plan):
            (hidden if s.edge == "hidden" else on_edge[s.edge]).append(i)
        edges = []  # per edge: (members with whether each runs beside compute, beside seconds, their most occurrences)
        for edge in ("forward_start", "backward_end"):
            members = on_edge[edge]
            beside = [i for i in members if plan[i].beside_compute]
            beside_s = sum(times_s[i] for i in beside)
            edges.append((tuple((i, plan[i].beside_compute) for i in members), beside_s,
                          max(plan[i].occurrences for i in beside) if beside else None))
        self.edges = tuple(edges)
        self.hidden = tuple(hidden)
        self.pooled = sum(self.totals[i] for i in hidden)
        """Seconds per step of the hidden collectives together."""

    def exposed(self, *, comm_overlap: float, step_compute_s: float, embedding_fwd_s: float = 0.0,
                embedding_bwd_s: float = 0.0) -> list[float]:
        """``exposed_seconds`` of the plan for one step (its arguments but the plan and times)."""
        totals = self.totals
        if not totals:  # one data-parallel rank
            return []
        out = [0.0] * len(totals)
        covered_s = 0.0  # embedding compute spent hiding edge collectives, per step
        for (members, beside_s, most), window in zip(self.edges, (embedding_fwd_s, embedding_bwd_s)):
            kept = edge_exposed_s(0.0, beside_s, window) / beside_s if beside_s > 0 else 0.0
            for i, beside in members:
                out[i] = totals[i] * (kept if beside else 1.0)
            if most is not None:
                covered_s += min(window, beside_s) * most
        pooled = self.pooled
        left = max(0.0, pooled - comm_overlap * max(0.0, step_compute_s - covered_s))
        for i in self.hidden:
            out[i] = left * totals[i] / pooled if pooled > 0 else 0.0
        return out
