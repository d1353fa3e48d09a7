"""Reserved memory of DeepSpeed ZeRO-3's step on one rank: the segments its optimizer step maps beside the ones the
forward and the loss left in the caching allocator.

ZeRO-3 holds its gradient partition and reduce bucket from initialization (``workbench.graph.stack_kernels_zero``),
so the step is the only phase that allocates large new tensors, one optimizer sub-group at a time
(``DeepSpeedZeroOptimizer_Stage3.step`` -> ``_prepare_fp32_grad_for_sub_group``, deepspeed/runtime/zero/stage3.py):
``self.flatten(averaged_gradients[i])`` (bf16, 2 B per element of the sub-group) and its ``.to(fp32)`` (4 B), alive
together. PyTorch's caching allocator serves a request from a cached free block at least as large (best fit; a
block is split but never merged with blocks of other segments) or maps a new segment of the request's size
(c10/cuda/CUDACachingAllocator.cpp ``get_free_block``, ``alloc_block``). The largest blocks the backward frees are
the loss's own tensors, each in a segment of its size (HF's ``ForCausalLMLoss``: fp32 [tokens, vocab]; Liger's fused
loss: its fp32 [vocab, hidden] product): a step tensor larger than that needs a new segment, and since later
forwards fill the smaller segments that fit them best, the new ones stay, reserved on top of the loss's peak.
DeepSpeed 0.19.8 ran (the source read: its 0.16.5 ``stage3.py``, the same sub-group step). ZeRO-2 allocates its
gradient partition and bucket in backward, between the activations' frees: not described by this rule.
"""

from __future__ import annotations

from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_liger import flce_chunks
from workbench.graph.stack_kernels_zero import ZeroMemory, sub_groups

SUB_GROUP_COPY_BYTES = (2, 4)
"""Bytes per element of a sub-group's step tensors alive together: the flat bf16 gradient and its fp32 copy
(``_prepare_fp32_grad_for_sub_group``)."""


def largest_loss_block(d: Dims, kernel_patch: str = "") -> float:
    """Bytes of the largest tensor the loss frees before the step: HF's fp32 upcast of the logits (and each of its
    fp32 log-softmax and gradient), or under Liger the fp32 copy of a chunk's [vocab, hidden] weight-gradient
    product or a chunk's bf16 logits, whichever is larger (``stack_kernels_liger.flce_peak_bytes``)."""
    if kernel_patch == "liger":
        chunk, _ = flce_chunks(d)
        return max(4 * d.vocab * d.hidden, 2 * min(chunk, d.tokens) * d.vocab)
    return 4 * d.tokens * d.vocab


def step_segment_bytes(d: Dims, tied: bool, dp: int, kernel_patch: str = "") -> float:
    """Bytes of ZeRO-3's step tensors (the largest sub-group's flat bf16 gradient and fp32 copy) that no block
    freed by the loss can hold: the new segments the step maps (the module docstring)."""
    group = max(sub_groups(d, tied, dp))
    block = largest_loss_block(d, kernel_patch)
    return float(sum(b * group for b in SUB_GROUP_COPY_BYTES if b * group > block))


def zero3_reserved(m: ZeroMemory, ratio: float, d: Dims, tied: bool, dp: int, kernel_patch: str = "") -> float:
    """Peak reserved bytes: the fitted reserved/allocated ``ratio`` times the peak allocation, plus the step's new
    segments when the loss holds the peak (a step-held peak already counts them). Offloaded: no GPU step tensors."""
    reserved = ratio * m.peak_allocated
    if m.step_transient == 0 or m.at_step >= m.at_loss:
        return reserved
    return reserved + step_segment_bytes(d, tied, dp, kernel_patch)
