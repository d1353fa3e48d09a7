"""The op graph's FLOPs against torch.utils.flop_counter on small real torch modules."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from workbench.config import TrainingConfig  # noqa: E402
from workbench.graph.ops import AttentionShape, attention  # noqa: E402
from workbench.graph.transformer import transformer_microbatch_ops  # noqa: E402
from workbench.models import TransformerModel  # noqa: E402


class TinyLlama(torch.nn.Module):
    """A Llama-style decoder written out in plain torch, the layout the op graph assumes."""

    def __init__(self, m: TransformerModel):
        super().__init__()
        self.m = m
        h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
        self.embed = torch.nn.Embedding(m.vocab_size, h)
        self.blocks = torch.nn.ModuleList()
        for _ in range(m.num_layers):
            self.blocks.append(torch.nn.ModuleDict({
                "qkv": torch.nn.Linear(h, q + 2 * kv, bias=False),
                "o": torch.nn.Linear(q, h, bias=False),
                "gate_up": torch.nn.Linear(h, 2 * f, bias=False),
                "down": torch.nn.Linear(f, h, bias=False),
            }))
        self.head = torch.nn.Linear(h, m.vocab_size, bias=False)

    def forward(self, tokens):
        m = self.m
        b, s = tokens.shape
        x = self.embed(tokens)  # x: [b, s, h]
        for blk in self.blocks:
            y = F.rms_norm(x, (m.hidden_size,))
            q, k, v = blk["qkv"](y).split([m.q_size, m.kv_size, m.kv_size], dim=-1)
            q = q.view(b, s, m.num_heads, m.head_dim).transpose(1, 2)  # q: [b, hq, s, d]
            k = k.view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
            v = v.view(b, s, m.num_kv_heads, m.head_dim).transpose(1, 2)
            with sdpa_kernel(SDPBackend.MATH):
                a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            x = x + blk["o"](a.transpose(1, 2).reshape(b, s, m.q_size))
            gate, up = blk["gate_up"](F.rms_norm(x, (m.hidden_size,))).chunk(2, dim=-1)
            x = x + blk["down"](F.silu(gate) * up)
        logits = self.head(F.rms_norm(x, (m.hidden_size,)))
        return F.cross_entropy(logits.flatten(0, 1), tokens.flatten())


def _tiny(**overrides) -> TransformerModel:
    args = dict(name="tiny", display_name="tiny", source="test", vocab_size=96, hidden_size=64, num_layers=2,
                num_heads=4, num_kv_heads=2, ffn_hidden_size=160)
    return TransformerModel(**{**args, **overrides})


def _torch_flops(model: TransformerModel, batch: int, seq: int) -> tuple[int, int]:
    net = TinyLlama(model)
    tokens = torch.randint(0, model.vocab_size, (batch, seq))
    with FlopCounterMode(display=False) as fwd_counter:
        loss = net(tokens)
    with FlopCounterMode(display=False) as bwd_counter:
        loss.backward()
    return fwd_counter.get_total_flops(), bwd_counter.get_total_flops()


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (8, 1)])
def test_transformer_step_flops_match_torch(heads, kv_heads):
    model = _tiny(num_heads=heads, num_kv_heads=kv_heads)
    batch, seq = 3, 40
    torch_fwd, torch_bwd = _torch_flops(model, batch, seq)
    # torch's math attention computes the full (non-causal) score matrix and has no recomputation.
    ops = transformer_microbatch_ops(model, TrainingConfig(batch, seq))
    matmul = [op for op in ops if op.kind == "gemm"]
    ours_fwd = sum(op.flops * op.count for op in matmul if op.phase == "fwd")
    ours_bwd = sum(op.flops * op.count for op in matmul if op.phase == "bwd")
    full = attention("a", AttentionShape(batch, seq, heads, kv_heads, model.head_dim, causal=False), "bf16", phase="fwd")
    ours_fwd += full.flops * model.num_layers
    ours_bwd += 2 * full.flops * model.num_layers  # flash's 2.5x counts a recomputed QK^T that the math path keeps
    assert ours_fwd == torch_fwd
    assert ours_bwd == torch_bwd


def test_flash_backward_is_two_and_a_half_forwards():
    shape = AttentionShape(2, 256, 8, 2, 64, causal=False)
    fwd = attention("a", shape, "bf16", phase="fwd")
    bwd = attention("a", shape, "bf16", phase="bwd")
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)


def test_causal_skips_masked_blocks():
    full = attention("a", AttentionShape(1, 4096, 8, 8, 128, causal=False), "bf16", phase="fwd")
    causal = attention("a", AttentionShape(1, 4096, 8, 8, 128, causal=True), "bf16", phase="fwd")
    blocks = 4096 // 128
    assert causal.flops == pytest.approx(full.flops * (blocks + 1) / (2 * blocks))
