"""Megatron-Core's MoE layer as NeMo runs Mixtral (the ``megatron`` stack's tables, ``stack_kernels_megatron``):
what one rank launches for the routed experts in place of the dense MLP. NOT MEASURED (TE does not build on the
lent H200): kernels read from the modules' inputs and outputs; calibrate me on a TE trace.

As NeMo's Mixtral recipes set it (nemo/collections/llm/gpt/model/mixtral.py ``MixtralConfig``, NVIDIA/NeMo@8cfedd7:
``moe_token_dispatcher_type="alltoall"``, ``moe_router_load_balancing_type="aux_loss"``, top-2, no pre-softmax;
``moe_grouped_gemm`` and ``moe_permute_fusion`` left at Megatron's False; the performance recipe's
``MegatronTokenDropCallback``: capacity factor 1.0, ``moe_pad_expert_input_to_capacity=True``), per MoE layer on
this rank (megatron/core/transformer/moe/, NVIDIA/Megatron-LM@d98e8a6):

- ``pre_mlp_layernorm`` (``block_ops``): a plain TE norm (the MoE spec does not fuse it into a linear), bf16 out;
- router.py ``TopKRouter``: the gating GEMM [ts, h] x [h, E] (bf16, no fp8), then the unfused routing kernels
  over the [ts, E] logits (``ROUTER_FWD`` / ``ROUTER_BWD``: top-k, softmax of the top-k, the capacity drop's
  top-k over tokens, the aux loss's softmax over every expert and its sums: launch-bound);
- token_dispatcher.py ``MoEAlltoAllTokenDispatcher``: ``permute`` (moe_utils.py, unfused, drop-and-pad: an
  index_select of the ts x topk routed rows), the expert-parallel all-to-all (``step_comm``'s
  ``ep.all_to_all_tokens``), under tp > 1 the tensor-parallel all-gather of the received tokens (expert tensor
  parallelism = tp, Megatron's default), the chunk sort when a rank holds more than one expert; the reverse after
  the experts, then ``unpermute`` (the probs' product and a scatter-add into [ts, h]);
- experts.py ``SequentialMLP``: per local expert a TEColumnParallelLinear fc1 (h -> 2 f / tp), the fused SwiGLU,
  a TERowParallelLinear fc2, each on ``capacity x ep x tp`` tokens (capacity = ceil(ts topk / E): padded, so
  every expert's GEMM has that shape), in fp8 under TE's recipe with their input and dy casts.

Not priced: the tensor-parallel gathers / reduce-scatters of the expert tokens (``step_comm`` counts the dense
block's), the aux loss's all-reduce of tokens per expert (latency only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.graph.execution import Kernel
from workbench.graph.ops import Op, gemm_with_grads
from workbench.graph.stack_kernels import Dims, _k

ROUTER_FWD: tuple[Kernel, ...] = (
    ("topk", 4, 1, True), ("topk_softmax", 1, 1, True), ("probs_zeros", 0, 4, True), ("probs_scatter", 1, 4, True),
    ("map_zeros", 0, 1, True), ("map_scatter", 1, 1, True), ("capacity_topk", 4, 1, True),
    ("capacity_zeros", 0, 1, True), ("capacity_scatter", 1, 1, True), ("capacity_and", 2, 1, True),
    ("probs_mask", 5, 4, True), ("aux_softmax", 2, 4, True), ("aux_topk", 4, 1, True), ("aux_map_scatter", 1, 1, True),
    ("tokens_per_expert", 1, 0, True), ("aux_probs_sum", 4, 0, True), ("aux_loss_mul", 0, 0, True),
    ("aux_loss_sum", 0, 0, True), ("aux_loss_scale", 0, 0, True))
"""The routing kernels per element of the [ts, E] logits (router.py ``routing`` on the unfused path:
``topk_routing_with_score_function``, ``apply_router_token_dropping``, ``compute_routing_scores_for_aux_loss``,
``_apply_aux_loss``): kernel count and bytes read from the code, not measured -- guess, calibrate me."""
ROUTER_BWD: tuple[Kernel, ...] = (
    ("probs_mask_bwd", 5, 4, True), ("probs_gather_bwd", 4, 1, True), ("topk_softmax_bwd", 2, 1, True),
    ("topk_scatter_bwd", 1, 4, True), ("aux_loss_bwd", 0, 4, True), ("aux_softmax_bwd", 8, 4, True),
    ("logits_grad_add", 8, 4, True), ("logits_to_bf16", 4, 2, True))
"""Their backward (autograd of the same ops): guess, calibrate me."""
PERMUTE_FWD: tuple[Kernel, ...] = (("routing_map_t", 1, 1, True), ("sorted_indices", 1, 8, True),
                                   ("index_select", 2, 2, False))
"""``permute`` per routed row of h: the map's transpose and its indices (per [ts, E] element, folded in: small),
the gather of each routed token's row (bf16 read and write; an index gather: not vectorized)."""
PERMUTE_BWD: tuple[Kernel, ...] = (("grad_zeros", 0, 2, True), ("index_add", 4, 2, False))
"""Its backward: the zeroed [ts, h] grad and the index_add of the routed rows' grads into it."""
UNPERMUTE_FWD: tuple[Kernel, ...] = (("probs_mul", 2, 2, True), ("out_zeros", 0, 2, True),
                                     ("scatter_add", 4, 2, False))
"""``unpermute`` per routed row element: the rows times their probs, then scatter-added into the zeroed [ts, h]."""
UNPERMUTE_BWD: tuple[Kernel, ...] = (("gather", 2, 2, False), ("probs_mul_bwd", 4, 2, True),
                                     ("probs_grad", 4, 0, True))
"""Its backward: the gathered output grad, times the probs, and the probs' grad (a row reduction)."""
KernelPair = tuple[tuple[Kernel, ...], tuple[Kernel, ...]]
SORT_CHUNKS: tuple[Kernel, ...] = (("sort_chunks", 2, 2, True),)
"""``sort_chunks_by_idxs``: the received tokens regrouped by local expert (one copy; more than one local expert)."""


@dataclass(frozen=True)
class Experts:
    """The routed experts one rank runs."""

    num: int
    """Routed experts of the layer (E)."""
    topk: int
    ep: int
    tp: int
    """Expert tensor parallelism (Megatron's default: the tensor-parallel size)."""

    @property
    def local(self) -> int:
        return max(1, self.num // self.ep)

    def capacity(self, stream_tokens: int) -> int:
        """Tokens each expert takes from one rank: ceil(ts topk / E x capacity factor 1.0), padded to it."""
        return math.ceil(stream_tokens * self.topk / self.num)

    def expert_tokens(self, stream_tokens: int) -> int:
        """Rows of one local expert's GEMMs: every ep rank's capacity, gathered over tp."""
        return self.capacity(stream_tokens) * self.ep * self.tp


def moe_scope_gap(model) -> str | None:
    """What of an MoE ``model`` these tables do not price (None: Mixtral-like blocks, all of them covered)."""
    if model.shared_experts or model.dense_layers:
        return "MoE blocks with shared experts or dense layers"
    return None


def experts_of(model, parallelism) -> Experts | None:
    """The routed experts of ``model`` under ``parallelism`` (None: a dense model)."""
    if not model.is_moe:
        return None
    return Experts(model.num_experts, model.experts_per_token, parallelism.ep, parallelism.tp)


def moe_ops(d: Dims, e: Experts, flavor, gemm_grads, swiglu: KernelPair,
            main_grad_add: tuple[Kernel, ...]) -> tuple[list[Op], list[Op]]:
    """(forward, backward) of the ``d.layers`` MoE layers between their norm and residual add (count = layers):
    router, permute, the local experts' linears (``gemm_grads``: ``stack_kernels_megatron._gemm_grads``),
    unpermute. ``swiglu``: TE's fused SwiGLU (forward, backward) tables; ``main_grad_add``: DDP's hook add of a
    plain parameter's grad (the router's weight: not a TE linear)."""
    n, ts, h = d.layers, d.stream_tokens, d.hidden
    routed = ts * e.topk  # routed rows sent from this rank
    rows = e.expert_tokens(ts)  # rows of each local expert's GEMMs
    logits = ts * e.num
    fwd: list[Op] = []
    bwd: list[Op] = []
    router = gemm_with_grads("router.gating", ts, e.num, h, "bf16", count=n, layer="moe")
    fwd.append(router[0])
    bwd += router[1:]
    bwd += _k("router.main_grad", "add", main_grad_add, h * e.num, "bwd", n, "moe", "main_grad")
    fwd += _k("router", "softmax", ROUTER_FWD, logits, "fwd", n, "moe", "router", rows=ts)
    bwd += _k("router", "softmax", ROUTER_BWD, logits, "bwd", n, "moe", "router", rows=ts)
    fwd += _k("dispatch.permute", "permute", PERMUTE_FWD, routed * h, "fwd", n, "moe", "permute")
    bwd += _k("dispatch.permute", "permute", PERMUTE_BWD, routed * h, "bwd", n, "moe", "permute")
    if e.local > 1:
        for phase, out in (("fwd", fwd), ("bwd", bwd)):
            out += _k("dispatch.sort_chunks", "permute", SORT_CHUNKS, rows * e.local * h, phase, n, "moe", "permute")
            out += _k("combine.sort_chunks", "permute", SORT_CHUNKS, rows * e.local * h, phase, n, "moe", "permute")
    count = n * e.local
    expert_ffn = d.ffn  # one expert's FFN width on this rank: ffn / tp (Dims)
    f, b = gemm_grads("experts.linear_fc1", rows, h, 2 * expert_ffn, count, "moe", 3, flavor, casts_input=True)
    fwd += f
    bwd += b
    fwd += _k("experts.glu", "swiglu", swiglu[0], rows * expert_ffn, "fwd", count, "moe", "swiglu")
    bwd += _k("experts.glu", "swiglu", swiglu[1], rows * expert_ffn, "bwd", count, "moe", "swiglu")
    f, b = gemm_grads("experts.linear_fc2", rows, expert_ffn, h, count, "moe", 4, flavor, casts_input=True)
    fwd += f
    bwd += b
    fwd += _k("combine.unpermute", "permute", UNPERMUTE_FWD, routed * h, "fwd", n, "moe", "permute")
    bwd += _k("combine.unpermute", "permute", UNPERMUTE_BWD, routed * h, "bwd", n, "moe", "permute")
    return fwd, bwd


def expert_parameters(d: Dims, e: Experts) -> int:
    """This rank's expert parameters per layer: the local experts' fc1 (h x 2f) and fc2 (f x h), f = ffn / tp."""
    return e.local * 3 * d.hidden * d.ffn


def router_parameters(d: Dims, e: Experts) -> int:
    return d.hidden * e.num
