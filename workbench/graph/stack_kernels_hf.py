"""What DeepSpeed ZeRO-2 and ZeRO-3 launch for one step of Hugging Face transformers' ``LlamaForCausalLM`` (the
``deepspeed-zero2`` and ``deepspeed-zero3`` stacks, ``kernels: hf-deepspeed`` in ``specs/stacks/``).

The model is HF's eager Llama (transformers 5.17, ``models/llama/modeling_llama.py``) with ``attn_implementation =
"sdpa"``, trained with DeepSpeed's ``bf16: {enabled: true}``: the engine casts the module to bf16 (no autocast, no
casts in the step), the ZeRO optimizer keeps fp32 master weights and fp32 Adam moments. What differs from the plain
loop of ``workbench.graph.stack_kernels``:

- ``LlamaRMSNorm`` is six torch ops, not ``F.rms_norm``: ``x.to(float32)``, ``pow(2)``, ``mean(-1)``, ``+ eps``,
  ``rsqrt``, ``x * rsqrt``, ``.to(bf16)``, ``weight *`` -- and their autograd backward, op by op (16 kernels);
- RoPE is ``q * cos + rotate_half(q) * sin`` with ``rotate_half`` = slice, ``neg``, ``cat`` (9 backward kernels);
- SDPA runs cuDNN's flash attention: its output is already [B, S, H, d] in memory (no transpose copy before
  o_proj), its backward launches four helper kernels beside the main one;
- the loss is ``ForCausalLMLoss`` (``loss/loss_utils.py``): the labels padded and shifted, ``logits.float()`` then
  ``F.cross_entropy`` (the eager loss tables of ``stack_kernels``); the bf16 logits are freed once upcast;
- the embedding's backward takes torch's direct path at 3,072 tokens or fewer (``embedding_backward_feature_kernel``
  after the zeroed table; ``aten/src/ATen/native/cuda/Embedding.cu``), the sorted path above;
- ZeRO's gradient hooks and step (``workbench.graph.stack_kernels_zero``), and ZeRO-3's per-submodule
  gather/release hooks (a copy per fetch and CPU per submodule, ``DeepSpeedStep``).

On dp > 1 ranks the same tables price one rank's share (the partitions 1/dp, the model's kernels whole), ZeRO's
collectives are ``stack_kernels_zero.zero_collectives`` (``DeepSpeedStep.data_parallel_schedules``: the step model
times them on ``workbench.perf.overlap``'s schedule) and the memory is ``zero_memory`` on ``dp`` ranks. CPU
optimizer offload (``offload: optimizer``, DeepSpeed's ``offload_optimizer``) takes the update and its fp32 state
off the GPU; ``workbench.offload`` prices the host's side (gradients down, the host AdamW, parameters up).

A stack's ``kernel_patch`` swaps the block's memory-bound kernels and the loss for a library's (``BLOCK_TABLES``:
``liger``, Liger-Kernel's, ``workbench.graph.stack_kernels_liger``), and its ``sdpa_backend`` tags the attention ops
(``flash-attn``: HF's ``flash_attention_3`` / ``_4``, priced at that kernel's fractions; the helper kernels stay
cuDNN's, as FlashAttention's backward also launches a preprocess and an fp32 -> bf16 postprocess).

Conventions are ``stack_kernels``' (one ``Op`` per CUDA kernel, bytes per element of the walked tensor, ``False``
= not vectorized). The kernel counts were checked against the Kineto trace of ``deepspeed-zero2 1b mb1 s2048
ac=none`` (``benchmarks/results/h200/stacks/deepspeed/``, a fit row): 38 forward kernels per decoder layer (plus 3
memsets inside cuBLAS / cuDNN calls, not tabled), 79 backward kernels per layer plus 9 gradient-bucket copies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from workbench.errors import SpecError
from workbench.graph.execution import Kernel
from workbench.graph.ops import AttentionShape, Op, attention, gemm_with_grads
from workbench.graph.stack_kernels import (
    LOSS_EAGER_KERNELS,
    RESIDUAL_ADD_B,
    STRIDED_COPY,
    SWIGLU_BWD,
    SWIGLU_FWD,
    Dims,
    StackFlavor,
    _k,
    _splits,
    _tag,
    embedding_ops,
    grad_accumulate,
)
from workbench.graph.stack_kernels_liger import (
    LIGER_RMSNORM_BWD,
    LIGER_RMSNORM_FWD,
    LIGER_ROPE_BWD,
    LIGER_ROPE_FWD,
    LIGER_SWIGLU_BWD,
    LIGER_SWIGLU_FWD,
    liger_activation_bytes,
    liger_loss_ops,
)
from workbench.graph.stack_kernels_zero import (
    param_sizes,
    step_kernels,
    zero_collectives,
    zero_gather_ops,
    zero_grad_ops,
    zero_memory,
    zero_step_ops,
)
from workbench.graph.stacked import StackStep, _recompute, one_piece
from workbench.memory import MemoryBreakdown
from workbench.stack_memory import launch_counts
from workbench.stack_memory_zero import zero3_reserved
from workbench.stacks import Stack

ZERO_STAGES = (2, 3)
FLAVOR = StackFlavor("hf-deepspeed", param_dtype="bf16")
"""bf16 parameters, no autocast, eager, untied unless the model ties (set per model)."""

# HF modules per decoder layer (each gets ZeRO-3's four hooks): LlamaDecoderLayer, self_attn, q/k/v/o_proj, mlp,
# gate/up/down_proj, act_fn, input_layernorm, post_attention_layernorm; and outside the layers: LlamaForCausalLM,
# LlamaModel, embed_tokens, rotary_emb, norm, lm_head.
MODULES_PER_LAYER = 14
MODULES_OUTSIDE = 6

# ---------------------------------------------------------------------------------------------------------------
# LlamaRMSNorm (modeling_llama.py), per element of [T, h], bf16 stream:
#   x32 = x.to(float32); var = x32.pow(2).mean(-1, keepdim=True); y = x32 * torch.rsqrt(var + eps)
#   return weight * y.to(bf16)
# the upcast is the non-vectorized direct_copy; ``x32 * rsqrt`` and ``weight *`` broadcast (not vectorized); the
# [T, 1] add and rsqrt launch only.
HF_RMSNORM_FWD: tuple[Kernel, ...] = (
    ("to_fp32", 2, 4, False), ("pow", 4, 4, True), ("mean", 4, 0, True), ("add_eps", 0, 0, True),
    ("rsqrt", 0, 0, True), ("mul_rsqrt", 4, 4, False), ("to_bf16", 4, 2, True), ("mul_weight", 2, 2, False))
# autograd, in reverse (16 kernels per norm in the trace): weight * y -> dy * weight (dx path) and (dy * y).sum over
# tokens (dw); .to(bf16) -> grad to fp32; x32 * r -> grad * r (dx32) and (grad * x32).sum(-1) (dr); rsqrt's
# backward -0.5 * r**3 * grad on [T, 1] (pow, two products); mean -> expand / h (writes [T, h] fp32); pow's backward
# 2 * x32.pow(1) * grad, and pow(x, 1) is a copy (``Memcpy DtoD``, 9 us for [2048, 2048] fp32); the two dx32 paths
# added; .to(float32) -> grad to bf16.
HF_RMSNORM_BWD: tuple[Kernel, ...] = (
    ("grad_mul_weight", 2, 2, False), ("grad_weight_mul", 4, 2, True), ("grad_weight_sum", 2, 0, True),
    ("grad_to_fp32", 2, 4, False), ("grad_mul_rsqrt", 4, 4, False), ("grad_rsqrt_mul", 8, 4, True),
    ("grad_rsqrt_sum", 4, 0, True), ("rsqrt_backward_pow", 0, 0, True), ("rsqrt_backward_scale", 0, 0, True),
    ("rsqrt_backward_mul", 0, 0, True), ("mean_backward", 0, 4, False), ("pow_backward_copy", 4, 4, True),
    ("pow_backward_scale", 4, 4, True), ("pow_backward_mul", 8, 4, True), ("grad_accumulate", 8, 4, True),
    ("grad_to_bf16", 4, 2, True))
# apply_rotary_pos_emb, per element of q or k ([B, H, S, d] bf16; cos, sin [B, S, d] broadcast over heads):
# q * cos, rotate_half(q) = cat((-q[..., d/2:], q[..., :d/2])) (neg of one half, then cat), * sin, add.
HF_ROPE_FWD: tuple[Kernel, ...] = (("mul_cos", 2, 2, False), ("neg_half", 1, 1, False), ("cat", 2, 2, False),
                                   ("mul_sin", 2, 2, False), ("add", 4, 2, True))
# backward (9 kernels per q or k in the trace): grad * sin, cat -> two slices (views), neg's grad on one half, each
# slice's backward a zeroed full tensor and a copy into its half, the two slice grads added, grad * cos, the sum.
HF_ROPE_BWD: tuple[Kernel, ...] = (("grad_mul_sin", 2, 2, False), ("neg_half", 1, 1, False),
                                   ("slice_zeros_lo", 0, 2, True), ("slice_copy_lo", 1, 1, False),
                                   ("slice_zeros_hi", 0, 2, True), ("slice_copy_hi", 1, 1, False),
                                   ("slice_grads_add", 4, 2, True), ("grad_mul_cos", 2, 2, False),
                                   ("grad_accumulate", 4, 2, False))
# LlamaRotaryEmbedding, once per forward (per [B, S, d] element): position ids to float, inv_freq @ positions, cat,
# cos, sin, attention scaling x2, .to(bf16) x2: small, counted for their launches (9 in the trace).
HF_ROTARY_TABLES: tuple[Kernel, ...] = tuple((n, 0, 0, True) for n in (
    "positions_float", "freqs_mm", "cat", "cos", "sin", "cos_scale", "sin_scale", "cos_to_bf16", "sin_to_bf16"))
HF_MASK_KERNELS = 12
"""LlamaModel's cache_position, position_ids and the sdpa causal mask's checks (transformers ``masking_utils``):
arange, adds, a cat, compares, a cumulative sum, a device-to-host copy: 12 small kernels in the trace."""
HF_LOSS_EXTRA_FWD = 5
"""ForCausalLMLoss's label pad and shift (fill, copy) and the engine's loss scaling (two products, the backward's
seed): small kernels beside the cross-entropy tables (5 in the trace)."""
HF_LOSS_EXTRA_BWD = 2
"""The loss scaling's two products in backward."""
# cuDNN's flash backward (``cudnn_generated_fort_native_sdpa_sm90_flash_bprop``) launches beside its main kernel,
# per element of [T, q]: o . do (``compute_dot_do_o``: reads o and do), the fp32 dQ accumulator to bf16
# (``convert_dq_to_16bits``), and with grouped KV heads dK, dV summed over each group (``fmha_reduce_head`` x2:
# reads fp32 per q head, writes bf16 per KV head).
SDPA_BWD_HELPERS: tuple[Kernel, ...] = (("dot_do_o", 4, 0, True), ("convert_dq", 4, 2, True))


def sdpa_reduce_head(d: Dims) -> tuple[Kernel, ...]:
    if d.kv >= d.q:
        return ()
    return (("reduce_head_dk", 4, 2 * d.kv / d.q, True), ("reduce_head_dv", 4, 2 * d.kv / d.q, True))


@dataclass(frozen=True)
class BlockTables:
    """The memory-bound kernels of one LlamaDecoderLayer: HF's eager ops, or a kernel patch's (``kernel_patch``)."""

    rmsnorm_fwd: tuple[Kernel, ...]
    rmsnorm_bwd: tuple[Kernel, ...]
    rope_fwd: tuple[Kernel, ...]
    rope_bwd: tuple[Kernel, ...]
    swiglu_fwd: tuple[Kernel, ...]
    swiglu_bwd: tuple[Kernel, ...]
    rope_per_tensor: bool
    """One RoPE call per q and per k (HF's), or one kernel over both (Liger's)."""
    rope_grad_copy: bool
    """SDPA's dq, dk reach RoPE's backward transposed: a strided copy each (HF's eager RoPE); Liger's RoPE
    transposes them back to the physical layout instead."""


HF_TABLES = BlockTables(HF_RMSNORM_FWD, HF_RMSNORM_BWD, HF_ROPE_FWD, HF_ROPE_BWD, SWIGLU_FWD, SWIGLU_BWD,
                        rope_per_tensor=True, rope_grad_copy=True)
LIGER_TABLES = BlockTables(LIGER_RMSNORM_FWD, LIGER_RMSNORM_BWD, LIGER_ROPE_FWD, LIGER_ROPE_BWD, LIGER_SWIGLU_FWD,
                           LIGER_SWIGLU_BWD, rope_per_tensor=False, rope_grad_copy=False)
"""Liger-Kernel's (``workbench.graph.stack_kernels_liger``)."""
BLOCK_TABLES = {"": HF_TABLES, "liger": LIGER_TABLES}
"""``Stack.kernel_patch`` -> the block's memory-bound kernels."""


# the embedding's backward at 3,072 tokens or fewer (Embedding.cu ``embedding_dense_backward_cuda``): the zeroed
# table and one ``embedding_backward_feature_kernel`` (reads the gradient rows, accumulates into the table's rows)
EMBEDDING_DIRECT_MAX_TOKENS = 3072


def hf_embedding_ops(d: Dims, flavor: StackFlavor) -> list[Op]:
    """F.embedding forward and its backward: the direct path up to 3,072 tokens, else ``embedding_ops``' sorted one."""
    if d.tokens > EMBEDDING_DIRECT_MAX_TOKENS:
        return embedding_ops(d, flavor)
    t, h, s = d.tokens, d.hidden, flavor.stream_bytes
    ops = _k("embedding", "embedding", (("gather", s, s, "gather"),), t * h, "fwd", 1, "embedding", "embedding")
    ops += _k("embedding", "embedding", (("zero_table_grad", 0, s, True),), d.vocab * h, "bwd", 1, "embedding",
              "embedding")
    ops += _k("embedding", "embedding", (("feature_kernel", s, 2 * s, "gather"),), t * h, "bwd", 1, "embedding",
              "embedding")
    return ops


def hf_block_ops(d: Dims, tables: BlockTables = HF_TABLES) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of HF's ``d.layers`` LlamaDecoderLayers (bf16), without recomputation; the
    memory-bound ones from ``tables`` (HF's eager ops or a kernel patch's), attention tagged ``d.sdpa_backend``."""
    n, t, th = d.layers, d.tokens, d.tokens * d.hidden
    fwd: list[Op] = []
    bwd: list[Op] = []

    def linear(name: str, i: int, o: int, mm_index: int, layer: str) -> None:
        f, dg, wg = gemm_with_grads(name, t, o, i, "bf16", count=n, layer=layer)
        fwd.extend(_tag([f], aten="mm", mm_index=mm_index))
        bwd.extend([dg, wg])

    def norm(name: str, layer: str) -> None:
        fwd.extend(_k(name, "rmsnorm", tables.rmsnorm_fwd, th, "fwd", n, layer, "rms_norm", rows=t))
        bwd.extend(_k(name, "rmsnorm", tables.rmsnorm_bwd, th, "bwd", n, layer, "rms_norm", rows=t))

    # --- self-attention: norm -> q/k/v_proj -> RoPE -> SDPA -> o_proj (SDPA's output read as is) -> + residual
    norm("input_layernorm", "attention")
    for idx, (name, i, o) in enumerate(d.linears()[:3], 1):
        linear(name, i, o, idx, "attention")
    bwd.extend(_k("attn.input_grads", "add", grad_accumulate(2), th, "bwd", 2 * n, "attention", "add"))
    for x, w in ((("q", d.q), ("k", d.kv)) if tables.rope_per_tensor else (("qk", d.q + d.kv),)):
        fwd.extend(_k(f"rope.{x}", "rope", tables.rope_fwd, t * w, "fwd", n, "attention", "rope"))
        bwd.extend(_k(f"rope.{x}", "rope", tables.rope_bwd, t * w, "bwd", n, "attention", "rope"))
        if tables.rope_grad_copy:
            bwd.extend(_k(f"rope.{x}.grad_copy", "copy", STRIDED_COPY, t * w, "bwd", n, "attention", "copy"))
    shape = AttentionShape(d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, causal=True)
    backend = {"sdpa_backend": d.sdpa_backend} if d.sdpa_backend else {}
    fwd.extend(_tag([attention("attention.fwd", shape, "bf16", phase="fwd", count=n, layer="attention")], aten="sdpa",
                    **backend))
    bwd.extend(_tag([attention("attention.bwd", shape, "bf16", phase="bwd", count=n, layer="attention")], **backend))
    bwd.extend(_k("attention.bwd_helpers", "copy", SDPA_BWD_HELPERS + sdpa_reduce_head(d), t * d.q, "bwd", n,
                  "attention", "sdpa_helper"))
    linear("wo", d.q, d.hidden, 4, "attention")
    fwd.extend(_k("attn_residual", "add", RESIDUAL_ADD_B, th, "fwd", n, "attention", "add"))
    bwd.extend(_k("attn.residual_grad", "add", grad_accumulate(2), th, "bwd", n, "attention", "add"))
    # --- MLP: norm -> gate/up_proj -> silu * mul -> down_proj -> + residual
    norm("post_attention_layernorm", "mlp")
    for idx, (name, i, o) in ((5, d.linears()[4]), (6, d.linears()[5])):
        linear(name, i, o, idx, "mlp")
    bwd.extend(_k("ffn.input_grads", "add", grad_accumulate(2), th, "bwd", n, "mlp", "add"))
    fwd.extend(_k("swiglu", "swiglu", tables.swiglu_fwd, t * d.ffn, "fwd", n, "mlp", "swiglu"))
    bwd.extend(_k("swiglu", "swiglu", tables.swiglu_bwd, t * d.ffn, "bwd", n, "mlp", "swiglu"))
    linear("w2", d.ffn, d.hidden, 7, "mlp")
    fwd.extend(_k("mlp_residual", "add", RESIDUAL_ADD_B, th, "fwd", n, "mlp", "add", last=True))
    bwd.extend(_k("ffn.residual_grad", "add", grad_accumulate(2), th, "bwd", n, "mlp", "add"))
    return fwd, bwd


def _launches(prefix: str, n: int, phase: str) -> list[Op]:
    return _k(prefix, "copy", ((prefix.rsplit(".", 1)[-1], 0, 0, True),), 1, phase, 1, "head", "launch",
              launches=n)


def hf_head_ops(d: Dims, tied: bool, kernel_patch: str = "") -> list[Op]:
    """The mask and rotary tables, the final norm, lm_head (bf16), ForCausalLMLoss (fp32 upcast + cross-entropy);
    tied: the head's and the embedding's gradients of one table summed (bf16). ``kernel_patch`` liger: Liger's
    norm, and its fused linear cross-entropy in place of lm_head and the loss (``stack_kernels_liger``)."""
    t, h, v = d.tokens, d.hidden, d.vocab
    tables = BLOCK_TABLES[kernel_patch]
    ops = _launches("causal_mask", HF_MASK_KERNELS, "fwd")
    ops += _k("rotary_emb", "rope", HF_ROTARY_TABLES, d.batch * d.seq * d.head_dim, "fwd", 1, "head", "rope",
              rows=d.batch * d.seq * d.head_dim)
    ops += _k("norm", "rmsnorm", tables.rmsnorm_fwd, t * h, "fwd", 1, "head", "rms_norm", rows=t)
    ops += _k("norm", "rmsnorm", tables.rmsnorm_bwd, t * h, "bwd", 1, "head", "rms_norm", rows=t)
    if kernel_patch == "liger":
        ops += liger_loss_ops(d)
        if tied:
            ops += _k("tied.grad_accumulate", "add", grad_accumulate(2), v * h, "bwd", 1, "head", "add")
        return ops
    ops += gemm_with_grads("lm_head", t, v, h, "bf16", layer="head")
    logits = t * v
    for table, phase, splits in LOSS_EAGER_KERNELS:
        ops += _k("loss", "cross_entropy", table, logits, phase, 1, "head", "loss", rows=t,
                  launches=_splits(logits, 4) if splits else 1)
    ops += _launches("loss.labels_and_scale", HF_LOSS_EXTRA_FWD, "fwd")
    ops += _launches("loss.scale_backward", HF_LOSS_EXTRA_BWD, "bwd")
    if tied:
        ops += _k("tied.grad_accumulate", "add", grad_accumulate(2), v * h, "bwd", 1, "head", "add")
    return ops


# ---------------------------------------------------------------------------------------------------------------
# Memory (bytes per GPU), from what autograd saves in HF's Llama; ZeRO's buffers are stack_kernels_zero's.

def hf_saved_per_token(d: Dims, mode: str) -> float:
    """Bytes one LlamaDecoderLayer saves for backward per token (bf16 stream), ``mode`` none or full.

    none: per RMSNorm the fp32 upcast (pow and ``x32 * rsqrt`` save it: 4h) and the bf16 normalized output
    (``weight *`` saves it; the projections share it: 2h); SDPA's q, k (after RoPE), v, out and fp32 lse (o_proj
    saves SDPA's output itself: cuDNN writes it [B, S, H, d], the transpose and reshape are views); gate's output
    (silu), silu's and up's outputs (mul), down's input: 8f. RoPE saves only its [S, d] tables. full (HF gradient
    checkpointing, non-reentrant, per layer): the layer's input."""
    h, q, kv, f = d.hidden, d.q, d.kv, d.ffn
    if mode == "full":
        return 2 * h
    return 2 * 6 * h + 2 * q + 4 * kv + 2 * q + 8 * f + 4 * d.heads


LOSS_BYTES_PER_LOGIT = 12
"""ForCausalLMLoss's peak per logit: the fp32 upcast (4) and log_softmax's saved fp32 output (4) in forward, with the
bf16 logits (2) until the upcast returns; in backward the saved output, the zeroed fp32 grad and the fp32 result
(4 + 4 + 4). The model's bf16 logits are not held (the loop keeps only ``.loss``)."""


def hf_activation_bytes(d: Dims, policy: str) -> tuple[float, float]:
    """(activations, loss) bytes alive at the loss: every layer's saved tensors (or checkpointed inputs)."""
    per_layer = hf_saved_per_token(d, "full" if policy == "full" else "none") * d.tokens
    return d.layers * per_layer, LOSS_BYTES_PER_LOGIT * d.tokens * d.vocab


# ---------------------------------------------------------------------------------------------------------------
# The step

HOST_US = {
    # CPU per kernel of ZeRO's step loops over the gradients (overflow check, fp64 norms, the update): fitted on the
    # trace of a fit row (the stacks' yamls); this default is the guess the tables were written with
    "host_step_kernel_us": 10.0,
    # CPU per parameter tensor of the gradient hook (reduce_ready_partitions_and_remove_grads: bucket bookkeeping):
    # guess, calibrate me
    "host_grad_hook_us": 25.0,
    # CPU per submodule per forward or backward pass of ZeRO-3's hooks (PartitionedParameterCoordinator: trace,
    # fetch, prefetch, release): guess, calibrate me on a host-bound ZeRO-3 row
    "host_zero3_module_us": 60.0,
    # as workbench.stack_memory.HOST_US
    "host_eager_kernel_us": 20.0,
    "host_recompute_kernel_us": 20.0,
}


@dataclass(frozen=True)
class DeepSpeedStep(StackStep):
    """``StackStep`` with DeepSpeed's own CPU costs and ZeRO memory (on any data-parallel degree)."""

    zero_stage: int = 2
    dp: int = 1
    tied: bool = False
    recompute_passes: int = 0
    offload: bool = False
    """``offload_optimizer`` on the CPU: no fp32 state, gradient partition or flat step in HBM."""
    kernel_patch: str = ""
    """``Stack.kernel_patch``: liger holds Liger's saved tensors and no logits (``stack_kernels_liger``)."""

    covers_data_parallel_memory = True  # a class flag: the step model uses ``memory`` on several GPUs too

    def host_terms(self, grad_accumulation: int) -> dict[str, float]:
        """What each host constant multiplies in a step: per micro-batch every forward and backward kernel
        (recomputed ones pay the recompute constant on top), each gradient hook and ZeRO-3's submodule passes;
        once per step the kernels of ZeRO's step loops."""
        counts = launch_counts(self.microbatch_ops, self.flavor, self.dims.layers)
        modules = 0
        if self.zero_stage == 3:
            layer_modules = self.dims.layers * MODULES_PER_LAYER
            modules = 2 * (layer_modules + MODULES_OUTSIDE) + self.recompute_passes * layer_modules
        return {"host_eager_kernel_us": (counts["eager"] + counts["recompute"]) * grad_accumulation,
                "host_recompute_kernel_us": counts["recompute"] * grad_accumulation,
                "host_grad_hook_us": len(param_sizes(self.dims, self.tied)) * grad_accumulation,
                "host_zero3_module_us": modules * grad_accumulation,
                "host_step_kernel_us": step_kernels(self.step_ops)}

    def host_s(self, stack: Stack, grad_accumulation: int) -> float:
        """CPU seconds of the step: ``host_terms`` priced at the stack's constants (``HOST_US`` where unset)."""
        c = {**HOST_US, **{name: k.value for name, k in stack.constants.items()}}
        return 1e-6 * sum(n * c[name] for name, n in self.host_terms(grad_accumulation).items())

    def memory(self, stack: Stack, capacity_bytes: float) -> MemoryBreakdown:
        held = liger_activation_bytes if self.kernel_patch == "liger" else hf_activation_bytes
        activations, loss = held(self.dims, self.policy)
        m = zero_memory(self.dims, self.tied, self.zero_stage, self.dp, activations, loss, self.offload)
        ratio = stack.constant("reserved_over_allocated", 1.0)
        if self.zero_stage == 3:  # the step's sub-group copies in new segments (workbench.stack_memory_zero)
            reserved = zero3_reserved(m, ratio, self.dims, self.tied, self.dp, self.kernel_patch)
        else:
            reserved = ratio * m.peak_allocated
        slack = reserved - m.peak_allocated
        states = m.master_and_moments
        if m.at_loss >= m.at_step:
            held = m.at_loss - m.params - m.gathered - states - m.activations - m.loss  # ZeRO-3's partition, bucket
            return MemoryBreakdown(params=m.params + m.gathered, grads=held, optimizer=states,
                                   activations=m.activations + m.loss, workspace=slack, capacity=capacity_bytes)
        return MemoryBreakdown(params=m.params, grads=m.at_step - m.params - states, optimizer=states,
                               activations=0.0, workspace=slack, capacity=capacity_bytes)

    def data_parallel_schedules(self, cfg) -> list:
        """ZeRO's own collectives over the ``cfg.parallelism.dp`` ranks (``step_comm.Schedules``: one schedule and
        its group; none on one rank), whatever ``cfg``'s sharding says: the stack's zero_stage decides."""
        if self.dp <= 1:
            return []
        return [(zero_collectives(self.dims, self.tied, self.zero_stage, cfg.grad_accumulation), self.dp)]


def deepspeed_step(model, cfg, stack: Stack) -> DeepSpeedStep:
    """The ops of ``cfg`` as DeepSpeed ZeRO (``stack``'s ``zero_stage`` constant) runs HF's Llama."""
    stage = stack.constant("zero_stage", 0)
    if stage not in ZERO_STAGES:
        raise SpecError(f"stack {stack.name}", "constants.zero_stage", stage,
                        "2 or 3 (DeepSpeed's zero_optimization.stage this stack's tables price)")
    stage = int(stage)
    dp = cfg.parallelism.dp
    d = dataclasses.replace(Dims.of(model, cfg.micro_batch, cfg.seq_len), sdpa_backend=stack.sdpa_backend)
    tied = model.tied_embeddings
    flavor = dataclasses.replace(FLAVOR, tied=tied)
    policy = stack.policy(cfg.activation_checkpointing)
    fwd, bwd = hf_block_ops(d, BLOCK_TABLES[stack.kernel_patch])
    if policy == "workbench-selective":  # as stacked.stack_step: recompute the memory-bound ops only
        policy = "selective-op-all-mm"
    recompute = _recompute(fwd, policy, d.layers)
    microbatch = (hf_embedding_ops(d, flavor) + fwd + hf_head_ops(d, tied, stack.kernel_patch) + bwd + recompute
                  + zero_grad_ops(d, tied))
    recompute_passes = 1 if policy == "full" else 0
    if stage == 3:
        microbatch += zero_gather_ops(d, tied, 2 + recompute_passes, dp)
    offload = cfg.offload == "optimizer"  # stacked.scope_gap leaves parameter offload outside the tables
    step = zero_step_ops(d, tied, stage, dp, offload)
    return DeepSpeedStep(flavor, policy, one_piece(microbatch), one_piece(step), d, zero_stage=stage, dp=dp, tied=tied,
                         recompute_passes=recompute_passes, offload=offload, kernel_patch=stack.kernel_patch)
