"""Context parallelism's ring attention as a stack runs it: how K/V travel between the cp ranks, what each exchange
hides behind, and the elementwise kernels that merge the per-chunk results.

Each cp rank holds ``s = seq_len / cp`` tokens of every sample (two head-tail chunks under load balancing) and
computes its queries against every rank's keys in ``cp`` steps, one SDPA call per step on (local q, one K/V chunk),
merging each step's output through its log-sum-exp. A stack says how in its YAML (``context_parallel``, read into
``ContextParallel``); a stack that says nothing gets ``GENERIC_RING`` (Megatron-Core's p2p ring:
``workbench.step_comm.transformer_traffic``, hidden behind all of the attention).

PyTorch's ring (``torch/distributed/tensor/experimental/_attention.py``, ``_templated_ring_attention`` and
``_templated_ring_attention_backward``; read at pytorch 0123248a, the same algorithm as the Dec-2024 torch 1963fc8
torchtitan's tables name: benchmarks/published/audit.md), which torchtitan runs:

- rotate ``allgather`` (``_AllGatherRotater``, torchtitan's default ``context_parallel_rotate_method`` at 9dec370
  and v0.2.2): one all-gather of the concatenated K,V per attention call, issued before step 0 and awaited at
  step 1, so it hides behind step 0's SDPA only: 1/cp of the call. ``alltoall`` (``_AllToAllRotater``,
  ``ft_c.permute_tensor`` to the next rank): one chunk per step, each beside that step's SDPA.
- backward: K,V rotated again by the same rotater; dK,dV accumulated in fp32 (``convert_to_f32``) and sent to the
  next rank by permute every step (``dkv_rotater`` is always ``ALL_TO_ALL``), each awaited after the next step's
  SDPA backward: cp - 1 of them beside one step each, the last one awaited after the loop, exposed.
- K,V as the model hands them to SDPA: torchtitan 9dec370 calls ``repeat_kv`` first (``kv_heads: repeated``: the
  query heads' count of K/V), v0.2.2 passes the grouped heads (``enable_gqa``; ``kv_heads: grouped``).
- merges (``_SDPAMerger``): every step's output upcast to fp32 and merged with the running one
  (``out - sigmoid(block_lse - lse) * (out - block_out)``), the load-balanced steps updating half the rows through
  ``torch.cat``; backward accumulates dQ, dK, dV in fp32 and casts them back: ``ring_merge_ops``, priced by the
  memory-bound model. Under ``torch.compile`` the ring is in the compiled block's graph (the code is written to be
  traced: ``_maybe_wait``), so Inductor fuses each merge into one pass (``RING_FUSED_*``); eager runs the merger's
  ops one by one (``RING_EAGER_*``).

The per-step SDPA calls are priced as the op graph has them: cp causal blocks of ``s`` (step 0 is one causal
``s x s`` call, each later step one non-causal ``s x s/2`` call: the same FLOPs; at these sizes, ``s`` >= 4096 in
every published row, the kernel is at its plateau). Not modelled: the later steps run non-causal, about 10% faster
per FLOP in FlashAttention-2's forward (FA3 paper: 370 vs 335 TFLOP/s at 16k): these predictions err slow there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from workbench.graph.execution import Kernel

ROTATE_METHODS: tuple[str, ...] = ("p2p", "allgather", "alltoall")
"""How K/V reach the other cp ranks: ``p2p`` (Megatron-Core's ring: one chunk per step beside its compute, priced
against all of the attention), ``allgather`` and ``alltoall`` (PyTorch's ring: the module docstring)."""
KV_HEADS: tuple[str, ...] = ("grouped", "repeated")
"""The heads of the K/V the ring moves: the model's (grouped-query) kv heads, or repeated to the query heads."""
MERGES: tuple[str, ...] = ("none", "torch-fp32")
"""The elementwise merge kernels priced beside the SDPA calls: none (the generic ring; a stack whose kernel fuses
them), or PyTorch's ``_SDPAMerger`` and fp32 gradient accumulation (``ring_merge_ops``)."""


@dataclass(frozen=True)
class ContextParallel:
    """How one stack runs context parallelism's attention (a stack YAML's ``context_parallel``)."""

    rotate: Literal["p2p", "allgather", "alltoall"]
    """``ROTATE_METHODS``."""
    kv_heads: Literal["grouped", "repeated"]
    """``KV_HEADS``."""
    grad_bytes: int
    """Bytes per element of the dK/dV the backward sends on (PyTorch: fp32, ``convert_to_f32``)."""
    merge: Literal["none", "torch-fp32"]
    """``MERGES``."""
    source: str
    """Where the stack's ring is read from."""


GENERIC_RING = ContextParallel("p2p", "grouped", 2, "none", "Megatron-Core AttnFuncWithCPAndKVP2P; Liu et al. 2023")
"""What a stack without a ``context_parallel`` entry is priced with: ``step_comm.transformer_traffic``'s ring."""


class RingExchange(NamedTuple):
    """One kind of ring collective of a block's attention before it is timed: ``per_call`` occurrences of
    ``collective`` over ``group`` ranks, ``size_bytes`` each, in each of the block's ``calls`` attention calls of one
    micro-batch; each occurrence hides behind ``window`` of that call's attention compute, except ``tail`` of them,
    which nothing hides (awaited after the loop)."""

    name: str
    collective: str
    size_bytes: float
    group: int
    spans: bool
    phase: Literal["fwd", "bwd"]
    calls: int
    per_call: int
    window: float
    tail: int = 0


def ring_exchanges(cp: ContextParallel, *, tokens: int, kv_width: int, q_width: int, act_bytes: int, group: int,
                   spans: bool, forward_calls: int) -> list[RingExchange]:
    """The ring collectives of one block's attention per micro-batch under PyTorch's ring (``cp.rotate``
    allgather or alltoall); ``tokens`` on this rank, K/V ``kv_width`` wide (grouped heads x head_dim), queries
    ``q_width``; ``forward_calls``: 2 when full checkpointing reruns the forward, else 1."""
    if cp.rotate == "p2p":
        raise ValueError("the p2p ring is the generic one (step_comm.transformer_traffic); no PyTorch exchanges")
    width = q_width if cp.kv_heads == "repeated" else kv_width
    kv = tokens * 2 * width * act_bytes  # one rank's K and V, concatenated (torch.cat of the flattened pair)
    dkv = tokens * 2 * width * cp.grad_bytes
    step = 1.0 / group  # one step of a call: the load-balanced steps do equal work
    if cp.rotate == "allgather":  # one all-gather of every rank's K,V per call, awaited at step 1
        return [RingExchange("cp.all_gather_kv", "all_gather", kv * group, group, spans, "fwd", forward_calls, 1, step),
                RingExchange("cp.all_gather_kv.bwd", "all_gather", kv * group, group, spans, "bwd", 1, 1, step),
                RingExchange("cp.send_recv_grad_kv", "send_recv", dkv, group, spans, "bwd", 1, group, step, tail=1)]
    return [RingExchange("cp.send_recv_kv", "send_recv", kv, group, spans, "fwd", forward_calls, group - 1, step),
            # backward: the K,V chunk and the dK,dV of the step before travel together beside one step
            RingExchange("cp.send_recv_kv_and_grads", "send_recv", kv + dkv, group, spans, "bwd", 1, group - 1, step),
            RingExchange("cp.send_recv_grad_kv", "send_recv", dkv, group, spans, "bwd", 1, 1, 0.0, tail=1)]


def attention_call_s(attention_s: float, layers: int, forward_calls: int) -> tuple[float, float]:
    """(forward, backward) seconds of one block's attention call, from ``attention_s``, the micro-batch's attention
    compute (every block's forward, rerun forward and backward), split by FLOPs: the backward does 2.5x the
    forward's (FlashAttention-2, Dao 2023, Sec. 3.1: five matmuls to the forward's two)."""
    forward = attention_s / (layers * (forward_calls + 2.5))
    return forward, 2.5 * forward


def ring_exposed_s(exchange: RingExchange, occurrence_s: float, call_s: float) -> float:
    """Exposed seconds of one ``exchange`` in one call: each occurrence beyond its window of the call's
    ``call_s`` attention compute, the ``tail`` ones whole."""
    if occurrence_s < 0 or call_s < 0:
        raise ValueError(f"exchange {occurrence_s} s and attention {call_s} s must be >= 0")
    hidden = exchange.per_call - exchange.tail
    return hidden * max(0.0, occurrence_s - exchange.window * call_s) + exchange.tail * occurrence_s


# --- the merge kernels: (name, bytes read, bytes written per element, vectorized), elements = one rank's
# queries x heads x head_dim ([s, hq * d]; the K/V ones over [s, 2 * kv heads * d]), per step or per call.
# Compiled (Inductor fuses each step's merge): read the running fp32 out and the step's bf16 out, write fp32 out
# (a load-balanced step merges half the rows and copies the other half through torch.cat: within 10% of it).
RING_FUSED_FWD_STEP: tuple[Kernel, ...] = (("merge_out_lse", 6, 4, True),)
RING_FUSED_FWD_CALL: tuple[Kernel, ...] = (("first_out_to_fp32", 2, 4, True), ("out_to_bf16", 4, 2, True))
RING_FUSED_KV_CALL: tuple[Kernel, ...] = (("kv_contiguous_cat", 2, 2, True),)  # key/value .contiguous(), torch.cat
# backward, per step: dQ += the step's bf16 dq (fp32); dK,dV: the received fp32 buffer + the step's bf16 grads,
# concatenated for the next rank; per call: the fp32 zeros and the casts back to bf16
RING_FUSED_BWD_STEP_Q: tuple[Kernel, ...] = (("grad_q_accumulate", 6, 4, True),)
RING_FUSED_BWD_STEP_KV: tuple[Kernel, ...] = (("grad_kv_accumulate_cat", 6, 4, True),)
RING_FUSED_BWD_CALL_Q: tuple[Kernel, ...] = (("grad_q_zeros", 0, 4, True), ("grad_q_to_bf16", 4, 2, True))
RING_FUSED_BWD_CALL_KV: tuple[Kernel, ...] = (("grad_kv_zeros", 0, 4, True), ("grad_kv_to_bf16", 4, 2, True),
                                              ("kv_contiguous_cat", 2, 2, True))
# Eager: the merger's ops one by one (block_out.to(fp32); out - block_out; sigmoid(...) * that; out - that;
# _partial_update's torch.cat on half the steps); backward: in-place += per gradient, _partial_update's cat on half
# the steps (the whole tensor), and the torch.cat of dK,dV for the next rank; the [s, heads] lse ops are ~1/d.
RING_EAGER_FWD_STEP: tuple[Kernel, ...] = (("block_out_to_fp32", 2, 4, True), ("sub", 8, 4, True),
                                           ("sigmoid_mul", 4, 4, True), ("sub_merge", 8, 4, True),
                                           ("partial_cat", 2, 2, True))
RING_EAGER_FWD_CALL: tuple[Kernel, ...] = (("first_out_to_fp32", 2, 4, True), ("out_to_bf16", 4, 2, True))
RING_EAGER_KV_STEP: tuple[Kernel, ...] = (("kv_contiguous_cat", 2, 2, True),)  # torch.cat every step but the last
RING_EAGER_BWD_STEP_Q: tuple[Kernel, ...] = (("grad_q_add", 6, 4, True), ("partial_cat", 2, 2, True))
RING_EAGER_BWD_STEP_KV: tuple[Kernel, ...] = (("grad_kv_add", 6, 4, True), ("partial_cat", 2, 2, True),
                                              ("grad_kv_cat", 4, 4, True))
RING_EAGER_BWD_CALL_Q: tuple[Kernel, ...] = RING_FUSED_BWD_CALL_Q
RING_EAGER_BWD_CALL_KV: tuple[Kernel, ...] = (("grad_kv_zeros", 0, 4, True), ("grad_kv_to_bf16", 4, 2, True))


class RingMergeTables(NamedTuple):
    """The merge kernels of one attention call: (table, elements, repeats) per phase, ``repeats`` per call."""

    forward: tuple[tuple[tuple[Kernel, ...], int, int], ...]
    backward: tuple[tuple[tuple[Kernel, ...], int, int], ...]


def ring_merge_tables(cp: ContextParallel, *, tokens: int, q_width: int, kv_width: int, group: int,
                      compiled: bool) -> RingMergeTables:
    """The merge kernels of one block's attention call under ``cp`` (``merge`` torch-fp32) on ``group`` ranks:
    ``tokens`` on this rank, queries ``q_width`` wide, K/V ``kv_width`` (grouped heads x head_dim)."""
    if cp.merge == "none" or group <= 1:
        return RingMergeTables((), ())
    q = tokens * q_width
    kv = tokens * 2 * (q_width if cp.kv_heads == "repeated" else kv_width)
    steps = group - 1  # merges after step 0
    if compiled:
        return RingMergeTables(
            forward=((RING_FUSED_FWD_STEP, q, steps), (RING_FUSED_FWD_CALL, q, 1), (RING_FUSED_KV_CALL, kv, 1)),
            backward=((RING_FUSED_BWD_STEP_Q, q, group), (RING_FUSED_BWD_STEP_KV, kv, group),
                      (RING_FUSED_BWD_CALL_Q, q, 1), (RING_FUSED_BWD_CALL_KV, kv, 1)))
    return RingMergeTables(
        forward=((RING_EAGER_FWD_STEP, q, steps), (RING_EAGER_FWD_CALL, q, 1), (RING_EAGER_KV_STEP, kv, steps)),
        backward=((RING_EAGER_BWD_STEP_Q, q, group), (RING_EAGER_BWD_STEP_KV, kv, group),
                  (RING_EAGER_BWD_CALL_Q, q, 1), (RING_EAGER_BWD_CALL_KV, kv, 1), (RING_EAGER_KV_STEP, kv, steps)))
