"""A Llama-family decoder (Dubey et al. 2024, "The Llama 3 Herd of Models"): RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU FFN, built from a catalog ``TransformerModel``.

The layout follows the workbench's analytical model (``workbench.graph.transformer``): one fused q/k/v GEMM
and one fused gate/up GEMM per block. Under tensor parallelism the fused weights are laid out rank by rank
([q_0 k_0 v_0 | q_1 k_1 v_1 | ...]), so a column-wise shard gives each rank its own q, k and v heads.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.models import TransformerModel
from workbench.train.layers import KernelSet

ROPE_THETA = 500_000.0
"""Llama 3's rotary base (config.json rope_theta)."""
NORM_EPS = 1e-5


def rope_tables(seq_len: int, head_dim: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [S, D/2] in fp32 for positions 0..S-1."""
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)  # [S, D/2]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, S, D] rotated pairwise (first half / second half of D, as Hugging Face Llama), in x's dtype.

    Products with the constant tables save only the tables for backward, so eager RoPE keeps no activation
    beyond its output (an fp32 upcast here would hold an fp32 copy of q and k per layer)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)  # [B, H, S, D/2] each (views)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, m: TransformerModel, kernels: KernelSet):
        super().__init__()
        self.kernels = kernels
        self.heads, self.kv_heads, self.head_dim = m.num_heads, m.num_kv_heads, m.head_dim
        self.tp = 1
        """Tensor-parallel degree; set by ``parallel.apply_tensor_parallel``: local heads = heads / tp."""
        self.wqkv = nn.Linear(m.hidden_size, m.q_size + 2 * m.kv_size, bias=False)
        self.wo = nn.Linear(m.q_size, m.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape  # x: [B, S, h]
        hq, hkv, d = self.heads // self.tp, self.kv_heads // self.tp, self.head_dim
        qkv = self.wqkv(x)  # [B, S, (hq + 2 hkv) d] (this rank's heads)
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q = q.view(b, s, hq, d).transpose(1, 2)  # [B, hq, S, d]
        k = k.view(b, s, hkv, d).transpose(1, 2)  # [B, hkv, S, d]
        # v copied out of qkv, so attention's saved q, k (rotated copies) and v free qkv for the allocator: the
        # saved activations are then q + 2 kv + the output, as workbench.memory counts them
        v = v.view(b, s, hkv, d).transpose(1, 2).contiguous()
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = self.kernels.attention(q, k, v)  # [B, hq, S, d]
        return self.wo(o.transpose(1, 2).reshape(b, s, hq * d))  # [B, S, h]


class FeedForward(nn.Module):
    def __init__(self, m: TransformerModel, kernels: KernelSet):
        super().__init__()
        self.kernels = kernels
        self.w_gate_up = nn.Linear(m.hidden_size, 2 * m.ffn_hidden_size, bias=False)
        self.w_down = nn.Linear(m.ffn_hidden_size, m.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(self.kernels.swiglu(self.w_gate_up(x)))  # [B, S, h] -> [B, S, 2f] -> [B, S, f] -> [B, S, h]


class Block(nn.Module):
    def __init__(self, m: TransformerModel, kernels: KernelSet):
        super().__init__()
        self.kernels = kernels
        self.attention_norm = nn.Parameter(torch.ones(m.hidden_size))
        self.attention = Attention(m, kernels)
        self.ffn_norm = nn.Parameter(torch.ones(m.hidden_size))
        self.ffn = FeedForward(m, kernels)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.kernels.rms_norm(x, self.attention_norm, NORM_EPS), cos, sin)  # [B, S, h]
        return x + self.ffn(self.kernels.rms_norm(x, self.ffn_norm, NORM_EPS))


class Llama(nn.Module):
    """Token ids [B, S] -> logits [B, S, V], or the loss given targets."""

    def __init__(self, m: TransformerModel, kernels: KernelSet, seq_len: int):
        super().__init__()
        self.config, self.kernels, self.seq_len = m, kernels, seq_len
        self.embedding = nn.Embedding(m.vocab_size, m.hidden_size)
        self.blocks = nn.ModuleDict({str(i): Block(m, kernels) for i in range(m.num_layers)})
        self.norm = nn.Parameter(torch.ones(m.hidden_size))
        self.output = nn.Linear(m.hidden_size, m.vocab_size, bias=False)
        if m.tied_embeddings:
            self.output.weight = self.embedding.weight
        cos, sin = rope_tables(seq_len, m.head_dim)
        self.register_buffer("rope_cos", cos, persistent=False)  # [S, d/2]
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self) -> None:
        """Normal(0, 0.02) linears and embeddings, depth-scaled output projections (GPT-2 style), unit norms."""
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("wo.weight", "w_down.weight")):
                nn.init.normal_(p, std=std / math.sqrt(2 * self.config.num_layers))
            else:
                nn.init.normal_(p, std=std)
        cos, sin = rope_tables(self.seq_len, self.config.head_dim, self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)  # [B, S, h]
        s = tokens.shape[1]
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for block in self.blocks.values():
            x = block(x, cos, sin)
        return self.kernels.rms_norm(x, self.norm, NORM_EPS)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, V]; with ``targets`` [B, S], the mean next-token loss instead (inside forward, so that
        FSDP2 and DDP see the whole step through their forward hooks)."""
        logits = self.output(self.hidden(tokens))  # [B, S, V]
        if targets is None:
            return logits
        return self.kernels.cross_entropy(logits.flatten(0, 1), targets.flatten())
