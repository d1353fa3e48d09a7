"""What Liger-Kernel launches in place of HF Llama's eager ops (``kernel_patch: liger`` on an ``hf-deepspeed``
stack: ``specs/stacks/deepspeed-zero3-liger.yaml``).

``AutoLigerKernelForCausalLM`` calls ``apply_liger_kernel_to_llama`` with its defaults (Liger-Kernel v0.8.0,
``src/liger_kernel/transformers/monkey_patch.py``): ``rope=True, rms_norm=True, swiglu=True,
fused_linear_cross_entropy=True, cross_entropy=False``. Each replaces a sequence of eager kernels of
``workbench.graph.stack_kernels_hf`` by one Triton kernel (``src/liger_kernel/ops/``):

- ``LigerRMSNorm`` (``rms_norm.py``, casting mode ``llama``, ``in_place=True``): the forward reads x and writes y
  (bf16) and the fp32 ``RSTD`` per row; it saves x and RSTD. The backward reads dy and x and writes dx over dy, each
  program adding its rows' dW into one fp32 row of ``_dW [sm_count, h]``, then ``_dW.sum(0).to(bf16)``;
- ``liger_rotary_pos_emb`` (``rope.py``): q and k transposed back to their physical [B, S, H, d] layout (views of
  the projections' outputs: no copy) and rotated in place by one kernel for both; its backward the same kernel on
  dq, dk. It saves only cos and sin;
- ``LigerSwiGLUMLP`` (``swiglu.py``): ``LigerSiLUMulFunction`` reads gate's and up's outputs a, b and writes
  silu(a) * b; it saves a and b, and its backward reads dc, a, b and writes da, db over a and b;
- ``LigerFusedLinearCrossEntropyFunction`` (``fused_linear_cross_entropy.py``; ``llama_lce_forward`` skips the
  logits in training): the hidden states are cut into ``chunk_size = next_power_of_2(ceil(BT / ceil(V / H)))``
  rows; per chunk the bf16 logits GEMM, ``liger_cross_entropy_kernel`` (online softmax over the row, then the
  gradient written over the logits in place), ``grad_input[chunk] = dlogits @ W`` and ``grad_weight +=
  mm(dlogits.T, x_chunk).float()`` (a bf16 [V, H] product, its fp32 copy, the add into the bf16 accumulator):
  the head's three GEMMs run inside the forward and no [BT, V] tensor is ever alive. Its backward returns the
  stored gradients (``grad_output`` is 1.0: the scaling is skipped).

Attention is not Liger's: the stack's ``sdpa_backend`` (``flash-attn``: HF's ``flash_attention_3`` /
``flash_attention_4``) prices it. Conventions are ``stack_kernels``' (one ``Kernel`` per CUDA kernel: name, bytes
read and written per element of the walked tensor, vectorized).
"""

from __future__ import annotations

import math

from workbench.graph.execution import Kernel
from workbench.graph.ops import Op, gemm
from workbench.graph.stack_kernels import Dims, _k

# LigerRMSNorm, per element of [T, h] (bf16 stream); RSTD is [T] fp32 (a row's 4 bytes, not counted per element)
LIGER_RMSNORM_FWD: tuple[Kernel, ...] = (("liger_rms_norm_forward", 2, 2, True),)
# the backward kernel, then ``_dW.sum(dim=0)`` over [sm_count, h] fp32 and ``.to(bf16)``: launches on small tensors
LIGER_RMSNORM_BWD: tuple[Kernel, ...] = (("liger_rms_norm_backward", 4, 2, True), ("dw_partials_sum", 0, 0, True),
                                         ("dw_to_bf16", 0, 0, True))
# liger_rotary_pos_emb, per element of q and k together (one kernel, in place): reads and writes each element
LIGER_ROPE_FWD: tuple[Kernel, ...] = (("liger_rope_forward", 2, 2, True),)
LIGER_ROPE_BWD: tuple[Kernel, ...] = (("liger_rope_backward", 2, 2, True),)
# LigerSiLUMulFunction, per element of [T, ffn]: a, b -> c; backward dc, a, b -> da, db (over a and b)
LIGER_SWIGLU_FWD: tuple[Kernel, ...] = (("liger_swiglu_forward", 4, 2, True),)
LIGER_SWIGLU_BWD: tuple[Kernel, ...] = (("liger_swiglu_backward", 6, 4, True),)
# liger_cross_entropy_kernel, per logit of a chunk (bf16): the online max / sum pass reads the row, the second pass
# reads it again and writes the gradient over it
LIGER_CROSS_ENTROPY: tuple[Kernel, ...] = (("liger_cross_entropy", 4, 2, True),)
# ``grad_weight += torch.mm(dlogits.T, x_chunk).float()``, per element of [V, h]: the bf16 product cast to fp32,
# then added into the bf16 accumulator (reads fp32 and bf16, writes bf16)
LIGER_GRAD_WEIGHT_ACCUMULATE: tuple[Kernel, ...] = (("grad_weight.float", 2, 4, True), ("grad_weight_add", 6, 2, True))
FLCE_SMALL_FWD = 5
"""FLCE's small kernels per forward: ``grad_input`` and ``loss_1d`` zeroed, ``target != ignore_index``, its
``.sum()`` (and the ``.item()`` copy to the host), ``torch.sum(loss_1d)``; ``grad_weight``'s zeroing is tabled."""
FLCE_SMALL_BWD = 2
"""``torch.equal(grad_output, torch.tensor(1.0))`` in backward: the scalar's copy and the compare."""


def flce_chunks(d: Dims) -> tuple[int, int]:
    """(chunk rows, chunks) of the fused linear cross-entropy over ``d.tokens`` rows: ``inc_factor = ceil(V / H)``,
    ``chunk_size = next_power_of_2(ceil(BT / inc_factor))``, ``num_chunks = ceil(BT / chunk_size)``."""
    inc_factor = math.ceil(d.vocab / d.hidden)
    chunk = 1 << max(0, math.ceil(math.log2(math.ceil(d.tokens / inc_factor))))
    return chunk, math.ceil(d.tokens / chunk)


def liger_loss_ops(d: Dims) -> list[Op]:
    """The head's GEMMs and the loss as ``LigerFusedLinearCrossEntropyFunction`` runs them, all in the forward (the
    final norm, the mask and rotary tables are the caller's)."""
    t, h, v = d.tokens, d.hidden, d.vocab
    chunk, chunks = flce_chunks(d)
    ops = _k("flce", "copy", (("zero_grad_weight", 0, 2, True),), v * h, "fwd", 1, "head", "loss")
    ops += _k("flce.small", "copy", (("flce_small", 0, 0, True),), 1, "fwd", 1, "head", "loss", launches=FLCE_SMALL_FWD)
    # full chunks, then the remainder's rows (none when the chunk divides the tokens)
    for rows, count in ((chunk, t // chunk), (t % chunk, 1 if t % chunk else 0)):
        if count == 0:
            continue
        ops += [gemm("flce.logits", rows, v, h, "bf16", count=count, layer="head"),
                gemm("flce.grad_input", rows, h, v, "bf16", count=count, layer="head"),
                gemm("flce.grad_weight", v, h, rows, "bf16", count=count, layer="head")]
        ops += _k("flce", "cross_entropy", LIGER_CROSS_ENTROPY, rows * v, "fwd", count, "head", "loss", rows=rows)
    ops += _k("flce", "add", LIGER_GRAD_WEIGHT_ACCUMULATE, v * h, "fwd", chunks, "head", "add")
    ops += _k("flce.small", "copy", (("flce_small", 0, 0, True),), 1, "bwd", 1, "head", "loss", launches=FLCE_SMALL_BWD)
    return ops


# ---------------------------------------------------------------------------------------------------------------
# Memory (bytes per GPU)

def liger_saved_per_token(d: Dims, mode: str) -> float:
    """Bytes one Liger-patched LlamaDecoderLayer saves for backward per token (bf16 stream), ``mode`` none or full.

    none: per LigerRMSNorm its input x (2h; RSTD is 4 B per row) and its bf16 output, which the projections save
    (2h); FlashAttention's q, k (rotated in place), v, out and fp32 lse, o_proj's input being FA's out; gate's and
    up's outputs (LigerSiLUMulFunction: 4f) and down's input (2f); RoPE saves only cos and sin. full (HF gradient
    checkpointing, non-reentrant, per layer): the layer's input."""
    h, q, kv, f = d.hidden, d.q, d.kv, d.ffn
    if mode == "full":
        return 2 * h
    return 2 * (2 * h + 2 * h + 4) + 2 * q + 4 * kv + 2 * q + 6 * f + 4 * d.heads


def flce_peak_bytes(d: Dims) -> float:
    """The fused linear cross-entropy's peak in its forward: ``grad_input`` [T, h] and ``grad_weight`` [V, h]
    (bf16, held until backward), one chunk's bf16 logits, the bf16 [V, h] product and its fp32 copy, ``loss_1d``
    (fp32 per token)."""
    chunk, _ = flce_chunks(d)
    t, h, v = d.tokens, d.hidden, d.vocab
    return 2 * t * h + 2 * v * h + 2 * min(chunk, t) * v + (2 + 4) * v * h + 4 * t


def liger_activation_bytes(d: Dims, policy: str) -> tuple[float, float]:
    """(activations, loss) bytes alive at the peak. none: every layer's saved tensors and the fused loss's forward
    peak, together at the end of the forward. full: the checkpointed layer inputs, and the larger of the fused loss's
    forward peak and one layer's saved set, alive while the backward of its recompute runs (the loss's held
    gradients are handed back before the first layer's backward)."""
    if policy != "full":
        return d.layers * liger_saved_per_token(d, "none") * d.tokens, flce_peak_bytes(d)
    recomputed = liger_saved_per_token(d, "none") * d.tokens
    return d.layers * liger_saved_per_token(d, "full") * d.tokens, max(flce_peak_bytes(d), recomputed)
