"""``workbench.stack_memory_zero``: the new segments ZeRO-3's step maps when its sub-group copies are larger than any
block the loss frees."""

from __future__ import annotations

import dataclasses

from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_zero import sub_groups, zero_memory
from workbench.stack_memory_zero import largest_loss_block, step_segment_bytes, zero3_reserved
from workbench.validation import benchmark_model


def _dims(micro_batch: int, seq_len: int) -> Dims:
    return Dims.of(benchmark_model("1b"), micro_batch, seq_len)


def test_step_copies_need_segments_larger_than_the_loss_blocks():
    """Llama 3.2 1B: the first sub-group holds 1.003 B elements (bf16 copy 2.0 GB, fp32 copy 4.0 GB); HF's fp32
    logits are 0.53 MB a token: 1.05 GB at 2,048 tokens (neither fits), 2.1 GB at 4,096 (the bf16 copy fits),
    4.2 GB at 8,192 (both fit)."""
    group = max(sub_groups(_dims(1, 2048), tied=True, dp=1))
    assert largest_loss_block(_dims(1, 8192)) == 4 * 8192 * 128256
    assert step_segment_bytes(_dims(1, 2048), tied=True, dp=1) == 6 * group
    assert step_segment_bytes(_dims(1, 4096), tied=True, dp=1) == 4 * group
    assert step_segment_bytes(_dims(2, 4096), tied=True, dp=1) == 0
    assert step_segment_bytes(_dims(1, 2048), tied=True, dp=4) < 6 * group  # smaller partitions, smaller copies


def test_liger_frees_no_logits_block():
    d = _dims(1, 8192)
    assert largest_loss_block(d, "liger") == 4 * d.vocab * d.hidden < largest_loss_block(d)


def test_reserved_adds_the_segments_only_when_the_loss_holds_the_peak():
    d = _dims(1, 2048)
    m = zero_memory(d, True, 3, 1, activations=3e9, loss=3e9)
    assert m.at_loss > m.at_step
    assert zero3_reserved(m, 1.1, d, True, 1) == 1.1 * m.peak_allocated + step_segment_bytes(d, True, 1)
    step_held = dataclasses.replace(m, activations=0.0, loss=0.0)
    assert zero3_reserved(step_held, 1.1, d, True, 1) == 1.1 * step_held.peak_allocated
    offloaded = zero_memory(d, True, 3, 1, activations=3e9, loss=3e9, offload=True)
    assert zero3_reserved(offloaded, 1.1, d, True, 1) == 1.1 * offloaded.peak_allocated
