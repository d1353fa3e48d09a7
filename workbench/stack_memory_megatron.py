"""Peak memory of Megatron-Core's single-GPU step (``workbench.graph.stack_kernels_megatron``): bf16 parameters in
DDP's contiguous buffer, the fp32 grad buffer (allocated once, alive the whole step), the distributed optimizer's
fp32 main parameters and two Adam moments (sharded over the data-parallel ranks), what each recompute mode saves,
and the core attention's scores.

Sources (megatron/core, 0.19.2): distributed/param_and_grad_buffer.py (one ``grad_data`` per buffer, fp32 with
``grad_reduce_in_fp32``, Megatron-LM's default under ``--bf16``); optimizer/distrib_optimizer.py
(``shard_fp32_from_float16_groups``: an fp32 copy of this rank's shard; Adam's ``exp_avg``/``exp_avg_sq`` fp32,
``OptimizerConfig.exp_avg_dtype``); transformer/dot_product_attention.py (the scores, and the global memory
buffer ``get_global_memory_buffer().get_tensor(..., "mpu")`` that stays allocated); tensor_parallel/random.py
``CheckpointFunction`` (full recompute saves each layer's input; selective saves the core attention's q, k, v).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_megatron import MegatronFlavor, parameter_count
from workbench.graph.stack_kernels_megatron_moe import Experts
from workbench.memory import StackMemoryTraits

ATTENTION_BACKWARD_BYTES_PER_SCORE = 10.0
"""Local core attention's backward, alive at once per score: the bf16 dprobs from the PV GEMM's backward (2), its
fp32 copy (4) and softmax_backward's fp32 result (4): read from fused_softmax.py's autograd graph; calibrate me on
a recompute row's peak."""
LOSS_BYTES_PER_LOGIT = 6.0
"""The bf16 logits (alive in GPTModel.forward) and VocabParallelCrossEntropy's fp32 copy, modified in place
(max, exp, div) and saved as the softmax; its backward works in place and casts to bf16: 2 + 4."""
FOREACH_TEMP_BYTES = 4.0
"""torch.optim.AdamW foreach's ``exp_avg_sq_sqrt = torch._foreach_sqrt(...)``: a new fp32 list per step (local
spec only; TE's FusedAdam works in place)."""


FP8_PARAM_BYTES = 1.0
"""Under NeMo's per-tensor fp8 recipes the parameters are TE fp8 tensors, no bf16 copy beside them
(nemo/collections/llm/recipes/precision/mixed_precision.py ``bf16_with_fp8_mixed`` and
``bf16_with_fp8_current_scaling_mixed``: ``fp8_param_gather = True``; MLPerf's LoRA recipe, NeMo
scripts/performance/llm/mlperf_lora_llama2_70b.py, too). On Hopper TE caches each weight's fp8 transpose for the step
(``workbench.graph.te_fp8``: made on the first micro-batch, kept): one byte more."""
MXFP8_SCALE_BYTES_PER_ELEMENT = 1.0 / 32
"""One e8m0 scale per 32 elements, per direction (``te_fp8.MX_BLOCK``)."""
FP8_GRAD_BYTES = 2.0
"""NeMo's performance recipes reduce gradients in bf16 under fp8 (scripts/performance/helpers.py
``set_precision_configs``: ``recipe.trainer.plugins.grad_reduce_in_fp32 = False``; the MLPerf LoRA recipe sets the
same); under bf16 they keep ``bf16_mixed``'s ``grad_reduce_in_fp32=True``: a 4-byte buffer."""


def te_memory_traits(recipe: str, fp8_any_layout: bool) -> StackMemoryTraits:
    """What Megatron-Core + TE holds differently from the job beyond one GPU (``workbench.memory``), for TE's fp8
    ``recipe`` (``stacked_megatron.fp8_recipe``: none, delayed, current, mxfp8) on a GPU whose fp8 GEMMs take any
    layout or not (``te_fp8.fp8_gemm_any_layout``).

    Weights: per-tensor fp8 parameters (``FP8_PARAM_BYTES``, + the transpose on Hopper); MXFP8 keeps bf16 parameters
    and caches each weight quantized row-wise and column-wise with its scales (``te_fp8``). Gradients:
    ``FP8_GRAD_BYTES`` under fp8. Saved activations: TE's linears save their input quantized, column-wise only, and
    only when the weight needs a gradient (transformer_engine/pytorch/module/linear.py and layernorm_linear.py:
    the input is kept for wgrad, ``weight.requires_grad``); a LoRA adapter (Megatron's own linear) keeps the bf16 copy
    it reads. The loss: Megatron's ``LOSS_BYTES_PER_LOGIT``."""
    if recipe == "none":
        return StackMemoryTraits(loss_bytes_per_logit=LOSS_BYTES_PER_LOGIT)
    if recipe == "mxfp8":
        quantized = 1.0 + MXFP8_SCALE_BYTES_PER_ELEMENT
        return StackMemoryTraits(weight_bytes=2.0 + 2 * quantized, grad_bytes=FP8_GRAD_BYTES,
                                 saved_input_bytes=quantized, loss_bytes_per_logit=LOSS_BYTES_PER_LOGIT)
    weights = FP8_PARAM_BYTES * (1 if fp8_any_layout else 2)
    # LoRA as NeMo's MLPerf recipe runs it (mlperf_lora_llama2_70b.py: disable_parameter_transpose_cache=True): the
    # frozen base's fp8 weights without a cached transpose
    return StackMemoryTraits(weight_bytes=weights, frozen_weight_bytes=FP8_PARAM_BYTES, grad_bytes=FP8_GRAD_BYTES,
                             saved_input_bytes=1.0, loss_bytes_per_logit=LOSS_BYTES_PER_LOGIT)


def saved_per_token(d: Dims, flavor: MegatronFlavor, policy: str, experts: Experts | None = None) -> float:
    """Bytes one layer saves per token besides the core attention's scores.

    none, local: input_layernorm's input and linear_qkv's input (2h each), q after RoPE and the repeated k and v
    (baddbmm and bmm keep them: 2q each), linear_proj's input (2q), the same two for the MLP (2h each), the fc1
    output that silu's input view keeps (4f), silu's output and ``up + glu_linear_offset`` (the product keeps both:
    2f each), fc2's input (2f). RoPE saves only its cos/sin.
    TE: flash attention keeps q, k, v (not repeated), its output (= linear_proj's input) and the fp32 lse; the
    fused SwiGLU keeps fc1's output; fc2 its input. selective-core-attn: the core attention's inputs q, k, v
    (before the GQA repeat) instead of what it saves inside. full-uniform: the layer's input.
    MoE (TE): per token its top-k routed rows' fc1 input (2h), fc1 output (4f) and fc2 input (2f), the expert GEMMs
    padded to capacity (``Experts.expert_tokens``; the router's [t, E] tensors are small and left out).
    """
    h, q, kv, f = d.hidden, d.q, d.kv, d.ffn
    if policy == "full-uniform":
        return 2 * h
    norms = 4 * h + 4 * h  # each norm's input and its linear's input
    mlp = 4 * f + 2 * f if flavor.te else 4 * f + 2 * f + 2 * f + 2 * f
    if experts is not None:
        routed = experts.expert_tokens(d.stream_tokens) * experts.local / d.tokens  # expert rows per token
        mlp = routed * (2 * h + 4 * f + 2 * f)
    if policy == "selective-core-attn" or flavor.te:
        attention = 2 * q + 4 * kv + 2 * q + (4 * d.heads if flavor.te else 0)
    else:
        attention = 2 * q + 4 * q + 2 * q
    return norms + attention + mlp


def scores_bytes(d: Dims, flavor: MegatronFlavor, per_score: float) -> float:
    """``per_score`` bytes per element of one layer's [b * np, s, s] scores (0 under TE: flash attention)."""
    return 0.0 if flavor.te else per_score * d.batch * d.heads * d.seq * d.seq


@dataclass(frozen=True)
class MegatronMemory:
    params: float
    grad_buffer: float
    optimizer: float
    activations: float
    loss: float
    attention_backward: float
    """One layer's core-attention backward (with its recompute's saved scores under selective / full)."""
    optimizer_temp: float
    persistent_buffers: float
    """The global memory buffer of the local core attention's baddbmm (bf16 scores of one layer)."""

    @property
    def static(self) -> float:
        return self.params + self.grad_buffer + self.optimizer + self.persistent_buffers

    @property
    def at_loss(self) -> float:
        return self.static + self.activations + self.loss

    @property
    def at_backward(self) -> float:
        """The last layer's backward: every layer's saved tensors still alive, its core attention's backward."""
        return self.static + self.activations + self.attention_backward

    @property
    def at_optimizer(self) -> float:
        return self.static + self.optimizer_temp

    @property
    def peak_allocated(self) -> float:
        return max(self.at_loss, self.at_backward, self.at_optimizer)


def megatron_memory(d: Dims, flavor: MegatronFlavor, policy: str, dp: int = 1,
                    experts: Experts | None = None) -> MegatronMemory:
    """Peak allocated memory of one rank (``dp`` ranks share the optimizer state; ``experts``: an MoE model's)."""
    params, _ = parameter_count(d, flavor.tied, experts, flavor.gpt_block)
    t, n = d.tokens, d.layers
    saved_scores = scores_bytes(d, flavor, 6.0 + 1.0 / (d.batch * d.heads))  # fp32 softmax, bf16 probs, mask
    activations = n * saved_per_token(d, flavor, policy, experts) * t
    if policy == "none":
        activations += n * saved_scores
        backward = scores_bytes(d, flavor, ATTENTION_BACKWARD_BYTES_PER_SCORE)
    elif policy == "selective-core-attn":
        backward = saved_scores + scores_bytes(d, flavor, ATTENTION_BACKWARD_BYTES_PER_SCORE)
    else:  # one layer rerun: its saved tensors and scores, then its attention's backward
        backward = (saved_per_token(d, flavor, "none", experts) * t + saved_scores
                    + scores_bytes(d, flavor, ATTENTION_BACKWARD_BYTES_PER_SCORE))
    return MegatronMemory(
        params=2 * params, grad_buffer=4 * params, optimizer=12 * params / dp, activations=activations,
        loss=LOSS_BYTES_PER_LOGIT * t * d.vocab, attention_backward=backward,
        optimizer_temp=0.0 if flavor.te else FOREACH_TEMP_BYTES * params / dp,
        persistent_buffers=scores_bytes(d, flavor, 2.0))
