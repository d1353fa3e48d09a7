"""One HSTU training step built from the public generative-recommenders STU layers (vendored under
``hstu_vendor/``, commit in ``hstu_vendor/VENDORED.md``), at the workbench's ``hstu-gr`` shape.

What one step runs (``train_step``), per micro-batch of ``B`` user histories packed jagged into ``L`` tokens:

    x = item_emb(ids) * sqrt(d) + pos_emb(positions)      # [L, d] fp32 gather (sparse grad), then bf16; dropout
    x = STUStack(16 x STULayer)(x, offsets)                # upstream modules/stu.py, HammerKernel.TRITON on a GPU
    y = normalize(x)                                       # l2 norm, as the research trainer's user_embedding_norm
    loss = sampled softmax(y, next item, R negatives)      # temperature 0.05 (research configs)
    loss.backward(); AdamW(fused).step() on the dense params; RowWiseAdagrad.step() on the item table

The STU layer's own defaults are kept (``STULayerConfig``: output dropout 0.3, recompute of normed x, uvqk and y in
backward, sort by length); ``target_aware=False`` (a retrieval step has no target items). Negatives: ``shared``
draws R item ids per step for every position (logits one [L, d] x [d, R] GEMM: what the workbench prices);
``per_position`` draws R per position and gathers [L, R, d] (the research trainer's ``LocalNegativesSampler`` /
``InBatchNegativesSampler``, ``research/modeling/sequential/autoregressive_losses.py``).

The item table trains with the workbench job's ``RowWiseAdagrad`` (``workbench/train/dlrm.py``: coalesced sparse
gradient, one accumulator per row), standing in for TorchRec's fused row-wise Adagrad, which the H200 lacks.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

VENDOR = Path(__file__).resolve().parent / "hstu_vendor"
if str(VENDOR) not in sys.path:
    sys.path.insert(0, str(VENDOR))
import fbgemm_jagged  # noqa: E402  (hstu_vendor/: torch stand-ins for the two fbgemm_gpu jagged ops)

fbgemm_jagged.register()
from generative_recommenders.common import HammerKernel  # noqa: E402
from generative_recommenders.modules.stu import STULayer, STULayerConfig, STUStack  # noqa: E402

TEMPERATURE = 0.05  # research configs (configs/*/hstu-sampled-softmax-*.gin: train_fn.temperature)
INPUT_DROPOUT = 0.2  # research configs' train_fn.dropout_rate (the positional preprocessor's dropout)


@dataclass(frozen=True)
class HSTUShape:
    """The model's sizes; ``from_workbench`` reads them from the catalog's ``HSTUModel``."""

    item_rows: int
    dim: int
    layers: int
    heads: int
    attention_dim: int
    linear_dim: int

    @classmethod
    def from_workbench(cls, model, item_rows: int | None = None) -> HSTUShape:
        return cls(item_rows or model.item_table_rows, model.embedding_dim, model.num_layers, model.num_heads,
                   model.attention_dim, model.linear_dim)


@dataclass(frozen=True)
class Batch:
    """One micro-batch, jagged: ``ids`` [L] item ids, ``offsets`` [B + 1], ``lengths`` [B], ``positions`` [L]."""

    ids: torch.Tensor
    offsets: torch.Tensor
    lengths: torch.Tensor
    positions: torch.Tensor
    max_seq_len: int
    negatives: torch.Tensor
    """[R] item ids (``shared``) or [L, R] (``per_position``)."""


def make_batch(shape: HSTUShape, batch: int, seq_len: int, lengths: str, negatives: int, per_position: bool,
               device: torch.device, generator: torch.Generator) -> Batch:
    """Uniform random item ids (as the workbench's ``RecsysBatches``); ``lengths`` ``full`` (every history
    ``seq_len`` long: what the workbench prices) or ``uniform`` (lengths uniform in [1, seq_len])."""
    if lengths == "full":
        lens = torch.full((batch,), seq_len, dtype=torch.int64)
    elif lengths == "uniform":
        lens = torch.randint(1, seq_len + 1, (batch,), generator=generator)
    else:
        raise ValueError(f"lengths={lengths!r}: expected 'full' or 'uniform'")
    offsets = torch.zeros(batch + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lens, 0)
    total = int(offsets[-1])
    positions = torch.arange(total) - torch.repeat_interleave(offsets[:-1], lens)
    ids = torch.randint(0, shape.item_rows, (total,), generator=generator)
    neg_shape = (total, negatives) if per_position else (negatives,)
    neg = torch.randint(0, shape.item_rows, neg_shape, generator=generator)
    return Batch(ids.to(device), offsets.to(device), lens.to(device), positions.to(device), seq_len, neg.to(device))


class HSTURetrieval(torch.nn.Module):
    """Item table + learned positions + the upstream ``STUStack``; ``loss`` is the sampled softmax."""

    def __init__(self, shape: HSTUShape, max_seq_len: int, kernel: HammerKernel, dtype: torch.dtype):
        super().__init__()
        self.shape, self.dtype = shape, dtype
        self.item_emb = torch.nn.Embedding(shape.item_rows, shape.dim, sparse=True)  # fp32 table
        self.pos_emb = torch.nn.Embedding(max_seq_len, shape.dim)
        config = STULayerConfig(embedding_dim=shape.dim, num_heads=shape.heads, hidden_dim=shape.linear_dim,
                                attention_dim=shape.attention_dim, target_aware=False)
        self.stu = STUStack([STULayer(config) for _ in range(shape.layers)])
        self.stu.set_hammer_kernel(kernel)

    def loss(self, b: Batch, per_position: bool) -> torch.Tensor:
        emb = self.item_emb(b.ids)  # [L, d] fp32
        x = emb * math.sqrt(self.shape.dim) + self.pos_emb(b.positions)
        x = F.dropout(x, INPUT_DROPOUT, self.training).to(self.dtype)
        x = self.stu(x=x, x_lengths=b.lengths, x_offsets=b.offsets, max_seq_len=b.max_seq_len,
                     num_targets=b.lengths.new_zeros(b.lengths.shape))  # [L, d] bf16; target_aware=False: unused
        query = F.normalize(x.float(), dim=-1).to(self.dtype)  # [L, d]
        # supervision: the next item of the same history (the research trainer's shifted input embeddings)
        target = F.normalize(torch.roll(emb, -1, 0), dim=-1).to(self.dtype)  # [L, d]
        keep = torch.ones_like(b.ids, dtype=torch.bool)
        keep[b.offsets[1:] - 1] = False  # a history's last position has no next item
        positive = (query * target).sum(-1, keepdim=True)  # [L, 1]
        neg = F.normalize(self.item_emb(b.negatives), dim=-1).to(self.dtype)  # [R, d] or [L, R, d]
        if per_position:
            negative = torch.einsum("ld,lrd->lr", query, neg)  # [L, R]: a batched mat-vec, memory bound
        else:
            negative = query @ neg.T  # [L, R]: one GEMM
        logits = torch.cat([positive, negative], dim=1).float() / TEMPERATURE  # [L, 1 + R]
        nll = F.cross_entropy(logits, torch.zeros_like(b.ids), reduction="none")
        return (nll * keep).sum() / keep.sum()


def build(shape: HSTUShape, max_seq_len: int, device: torch.device, kernel: HammerKernel,
          dtype: torch.dtype = torch.bfloat16):
    """The model and its two optimizers: fused AdamW (fp32 dense params, on CUDA) and row-wise Adagrad."""
    from workbench.train.dlrm import RowWiseAdagrad

    model = HSTURetrieval(shape, max_seq_len, kernel, dtype).to(device).train()
    dense = [p for n, p in model.named_parameters() if not n.startswith("item_emb.")]
    adamw = torch.optim.AdamW(dense, lr=1e-3, weight_decay=0.0, fused=device.type == "cuda")
    adagrad = RowWiseAdagrad([model.item_emb.weight], lr=0.01)
    return model, (adamw, adagrad)


def train_step(model: HSTURetrieval, optimizers, batch: Batch, per_position: bool) -> torch.Tensor:
    loss = model.loss(batch, per_position)
    loss.backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.detach()


def count_params(model: HSTURetrieval) -> dict:
    stu = sum(p.numel() for p in model.stu.parameters())
    return {"stu_params": stu, "pos_params": model.pos_emb.weight.numel(),
            "table_params": model.item_emb.weight.numel()}
