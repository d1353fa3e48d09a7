"""``workbench.stack_memory``: what a compiled block saves, checked against the AOT forward graph torch's partitioner
builds for the plain loop's block (on the CPU), and the reserved/allocated ratio by checkpointing mode."""

from __future__ import annotations

import functools

import pytest

from workbench.graph.stack_kernels import Dims, pytorch_flavor
from workbench.stack_memory import reserved_ratio, saved_per_token
from workbench.stacks import get_stack

TINY = dict(hidden=128, heads=4, kv_heads=2, ffn=352)
SEQ = 48  # no other dimension of TINY is 48: a saved tensor with a 48 in its shape is per token


def _tiny_dims() -> Dims:
    head_dim = TINY["hidden"] // TINY["heads"]
    return Dims(SEQ, SEQ, 1, TINY["hidden"], TINY["hidden"], TINY["kv_heads"] * head_dim, TINY["ffn"], 1000,
                TINY["heads"], TINY["kv_heads"], head_dim, 1)


def _compiled_saved_bytes_per_token(param_dtype: str) -> float:
    """Bytes per token of what the plain loop's block (benchmarks/stacks/plain_pytorch.py) saves for backward under
    inductor's decompositions and min-cut partitioner (``compiler="inductor"``, as ``compile_fx`` calls it), less the two fp32 rsqrt per token and the RoPE tables (which ``saved_per_token`` leaves
    out); the block input counts (it is held for this block's backward)."""
    import torch
    import torch._functorch.partitioners as partitioners
    import torch.nn.functional as F
    from torch import nn
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_compiler
    from torch._inductor.decomposition import select_decomp_table

    h, heads, kv_heads, ffn = TINY["hidden"], TINY["heads"], TINY["kv_heads"], TINY["ffn"]
    head_dim = h // heads

    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class Block(nn.Module):  # plain_pytorch.py's Block
        def __init__(self):
            super().__init__()
            kv = kv_heads * head_dim
            self.attn_norm, self.ffn_norm = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
            self.wq, self.wk = nn.Linear(h, h, bias=False), nn.Linear(h, kv, bias=False)
            self.wv, self.wo = nn.Linear(h, kv, bias=False), nn.Linear(h, h, bias=False)
            self.w1, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
            self.w2 = nn.Linear(ffn, h, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            y = F.rms_norm(x, (h,), self.attn_norm, 1e-5)
            q = self.wq(y).view(b, s, heads, head_dim).transpose(1, 2)
            k = self.wk(y).view(b, s, kv_heads, head_dim).transpose(1, 2)
            v = self.wv(y).view(b, s, kv_heads, head_dim).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
            y = F.rms_norm(x, (h,), self.ffn_norm, 1e-5)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    saved: list[torch.Tensor] = []

    def recording(joint, inputs, *args, **kwargs):
        forward, backward = partitioners.min_cut_rematerialization_partition(joint, inputs, *args, **kwargs)
        user_outputs = kwargs.get("num_fwd_outputs", args[0] if args else 1)
        outputs = next(n for n in forward.graph.nodes if n.op == "output").args[0]
        saved.extend(n.meta["val"] for n in outputs[user_outputs:]
                     if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor))
        return forward, backward

    dtype = torch.float32 if param_dtype == "fp32" else torch.bfloat16
    angles = torch.outer(torch.arange(SEQ, dtype=torch.float32), torch.rand(head_dim // 2))
    x = torch.randn(1, SEQ, h, dtype=dtype, requires_grad=True)
    torch._dynamo.reset()
    # inductor's decompositions and partitioner, no code generation (the forward and backward graphs run as traced)
    backend = aot_autograd(fw_compiler=make_boxed_compiler(lambda gm, _: gm), decompositions=select_decomp_table(),
                           partition_fn=functools.partial(recording, compiler="inductor"))
    block = torch.compile(Block().to(dtype), backend=backend)
    with torch.autocast("cpu", torch.bfloat16, enabled=param_dtype == "fp32"):
        out = block(x * 1, angles.cos(), angles.sin())
    out.float().sum().backward()
    torch._dynamo.reset()
    left_out = {(1, SEQ, 1), (SEQ, head_dim // 2)}  # rsqrt per norm, the cos / sin tables
    per_token = [t for t in saved if SEQ in t.shape and tuple(t.shape) not in left_out]
    return sum(t.numel() * t.element_size() for t in per_token) / SEQ


@pytest.mark.slow
@pytest.mark.parametrize("param_dtype", ["fp32", "bf16"])
def test_compiled_block_saves_what_the_partitioner_saves(param_dtype):
    pytest.importorskip("torch")
    expected = saved_per_token(_tiny_dims(), pytorch_flavor(param_dtype, compile=True), "none")
    assert _compiled_saved_bytes_per_token(param_dtype) == expected


def test_reserved_ratio_by_checkpointing():
    eager = get_stack("pytorch-eager")
    assert reserved_ratio(eager, "full") == eager.constant("reserved_over_allocated_checkpointed", 0.0)
    assert reserved_ratio(eager, "none") == eager.constant("reserved_over_allocated", 0.0)
    assert reserved_ratio(eager, "full") > reserved_ratio(eager, "none")
    titan = get_stack("torchtitan")  # no checkpointed ratio of its own: the one ratio
    assert reserved_ratio(titan, "full") == reserved_ratio(titan, "none") == titan.constant("reserved_over_allocated",
                                                                                            0.0)
