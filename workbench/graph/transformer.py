"""The operators of one transformer training micro-batch on one GPU (one pipeline stage, one tensor shard).

Layout per block (Llama / GPT-2 / Mixtral), T = micro_batch x seq tokens, tensor-parallel shards marked /tp:

    x -> norm -> qkv GEMM [T, h] x [h, (q + 2kv)/tp] -> rope -> flash attention -> o GEMM [T, q/tp] x [q/tp, h]
      -> + x -> norm -> gate_up GEMM [T, h] x [h, 2f/tp] -> swiglu -> down GEMM [T, f/tp] x [f/tp, h] -> + x

MoE blocks replace the FFN by a router GEMM, a token permutation and grouped expert GEMMs (top-k of E,
balanced routing assumed). Backward has a dgrad and a wgrad GEMM per forward GEMM; activation checkpointing
adds the recomputed forward ops to the backward phase.

Context parallelism (cp) gives each rank seq/cp of every sample's tokens: every GEMM and elementwise op runs on
T/cp rows, and ring attention computes the rank's queries against all keys in cp steps of seq/cp x seq/cp blocks,
load-balanced over the causal mask (each rank holds two mirrored chunks: Megatron-Core's and torchtitan's split),
priced as cp causal blocks of seq/cp: 1/cp of the causal score matrix. LoRA (``cfg.lora_rank``, Hu et al. 2021)
freezes every base weight: the base GEMMs keep forward and dgrad (the gradient still flows to the input) and lose
their wgrad, the embedding computes no gradient, and each targeted linear gets two small adapter GEMMs
(x [T, in] A [in, r], then [T, r] B [r, out]) with all three passes, in the activation dtype (Transformer Engine
and PEFT run adapters outside fp8).
"""

from __future__ import annotations

import math
from dataclasses import replace

from workbench.config import TrainingConfig, activation_dtype, attention_dtype
from workbench.graph.execution import (
    Execution,
    chunked_cross_entropy,
    eager_rmsnorm,
    eager_rope,
    eager_swiglu,
    fp8_linear_quantize,
    fsdp_ops,
)
from workbench.graph.ops import AttentionShape, FlatShape, Op, RowsShape, attention, gemm_with_grads, memory_op
from workbench.models import TransformerModel
from workbench.precision import is_8bit_training


def local_tokens(cfg: TrainingConfig) -> int:
    """Tokens of one micro-batch on one rank: micro_batch x seq_len, split cp-ways by context parallelism."""
    return cfg.micro_batch * cfg.seq_len // cfg.parallelism.cp


def _fp8_casts(name: str, ops: list[Op], act_dtype: str) -> list[Op]:
    """Per-tensor fp8 GEMMs first cast their bf16 inputs (amax + scale + cast): read 2 bytes, write 1 per element."""
    casts = []
    for op in ops:
        s = op.shape
        inputs = s.groups * (s.m * s.k + s.k * s.n)
        casts.append(memory_op(f"{op.name}.cast_fp8", "copy", FlatShape(inputs), act_dtype, reads=1, writes=0.5,
                               phase=op.phase, count=op.count, layer=op.layer))
    return casts


def block_ops(model: TransformerModel, cfg: TrainingConfig, layers: int,
              execution: Execution | None = None) -> tuple[list[Op], list[Op], list[Op]]:
    """(forward, backward, recomputation) ops of ``layers`` identical blocks for one micro-batch.

    With an ``execution`` (the reference job), eager blocks get the job's unfused norm, SwiGLU and RoPE kernels
    and fp8 GEMMs the job's quantize kernels for all three GEMMs' operands (``workbench.graph.execution``)."""
    p = cfg.parallelism
    b, s, h = cfg.micro_batch, cfg.seq_len // p.cp, model.hidden_size  # s: this rank's share of the sequence
    tokens = b * s
    act = activation_dtype(cfg.precision)
    gemm_dtype = cfg.precision
    q, kv = model.q_size // p.tp, max(model.kv_size // p.tp, model.head_dim)
    heads_q, heads_kv = model.num_heads // p.tp, max(model.num_kv_heads // p.tp, 1)
    norm = model.norm
    n = layers

    fwd: list[Op] = []
    bwd: list[Op] = []
    recompute: list[Op] = []  # ops that selective checkpointing recomputes

    lora = cfg.lora_targets if cfg.lora else ()
    shapes = model.linear_shapes()

    def gemms(name: str, m: int, out: int, k: int, layer: str, groups: int = 1, targets: tuple[str, ...] = ()) -> None:
        f, dg, wg = gemm_with_grads(name, m, out, k, gemm_dtype, groups=groups, count=n, layer=layer)
        fwd.append(f)
        bwd.extend([dg] if cfg.lora else [dg, wg])  # a frozen base weight needs no gradient
        adapted = [t for t in targets if t in lora]
        if adapted:
            adapters(name, m, k, out * sum(shapes[t][1] for t in adapted) // sum(shapes[t][1] for t in targets),
                     len(adapted), layer, groups)
        if is_8bit_training(gemm_dtype) and execution is not None and groups == 1:
            quantize = fp8_linear_quantize(name, m, out, k, count=n, layer=layer, wgrad_fp8=wg.dtype == f.dtype)
            fwd.extend(o for o in quantize if o.phase == "fwd")
            bwd.extend(o for o in quantize if o.phase == "bwd")
        elif is_8bit_training(gemm_dtype):  # the fused step's casts: wgrad reuses dgrad's and forward's
            casts = _fp8_casts(name, [f, dg], act)
            fwd.append(casts[0])
            bwd.append(casts[1])

    def adapters(name: str, m: int, k: int, out: int, pairs: int, layer: str, groups: int) -> None:
        """LoRA's A [k, r] and B [r, out] GEMMs of ``pairs`` adapters on one (fused) linear, all three passes."""
        r = cfg.lora_rank
        for suffix, (n_out, k_in) in (("lora_a", (pairs * r, k)), ("lora_b", (out, r))):
            f, dg, wg = gemm_with_grads(f"{name}.{suffix}", m, n_out, k_in, act, groups=groups, count=n, layer=layer)
            fwd.append(f)
            bwd.extend([dg, wg])

    def elementwise(name: str, kind: str, rows: int, cols: int, layer: str, reads: float, writes: float,
                    bwd_reads: float, bwd_writes: float, recomputed: bool = True) -> None:
        shape = RowsShape(rows, cols)
        op = memory_op(f"{name}.fwd", kind, shape, act, reads=reads, writes=writes, count=n, layer=layer)
        fwd.append(op)
        bwd.append(memory_op(f"{name}.bwd", kind, shape, act, reads=bwd_reads, writes=bwd_writes, phase="bwd",
                             count=n, layer=layer))
        if recomputed:
            recompute.append(op)

    def eager(pair: tuple[list[Op], list[Op]], recomputed: bool = True) -> None:
        fwd.extend(pair[0])
        bwd.extend(pair[1])
        if recomputed:
            recompute.extend(pair[0])

    def norm_op(name: str, layer: str) -> None:
        if execution is not None and execution.eager("rmsnorm") and norm == "rmsnorm":
            eager(eager_rmsnorm(name, tokens, h, count=n, layer=layer))
        else:
            elementwise(name, norm, tokens, h, layer, 1, 1, 2, 1)

    # attention block
    norm_op("attn_norm", "attention")
    gemms("qkv", tokens, q + 2 * kv, h, "attention", targets=("q", "k", "v"))
    if execution is not None and not execution.compile:
        eager(eager_rope("rope", tokens, q, kv, model.head_dim, s, count=n, layer="attention"))
    else:
        elementwise("rope", "rope", tokens, q + kv, "attention", 1, 1, 1, 1)
    shape = AttentionShape(b * p.cp, s, heads_q, heads_kv, model.head_dim, causal=True)  # cp ring blocks of s
    fwd.append(attention("attention.fwd", shape, attention_dtype(cfg.precision), phase="fwd", count=n, layer="attention"))
    bwd.append(attention("attention.bwd", shape, attention_dtype(cfg.precision), phase="bwd", count=n, layer="attention"))
    gemms("o_proj", tokens, h, q, "attention", targets=("o",))
    elementwise("attn_residual", "add", tokens, h, "attention", 2, 1, 2, 1, recomputed=False)

    # feed-forward block
    norm_op("ffn_norm", "mlp")
    ffn = model.ffn_hidden_size // p.tp
    gated = model.ffn_activation == "swiglu"
    if model.is_moe:
        routed = tokens * model.experts_per_token
        local_experts = model.num_experts // p.ep
        per_expert = math.ceil(routed * p.ep / model.num_experts)
        gemms("router", tokens, model.num_experts, h, "moe")
        elementwise("dispatch", "permute", routed, h, "moe", 1, 1, 1, 1, recomputed=False)
        gemms("experts.gate_up", per_expert, (2 if gated else 1) * ffn, h, "moe", groups=local_experts,
              targets=("gate", "up") if gated else ("up",))
        elementwise("experts.act", "swiglu" if gated else "gelu", routed, ffn, "moe",
                    2 if gated else 1, 1, 3 if gated else 2, 2 if gated else 1)
        gemms("experts.down", per_expert, h, ffn, "moe", groups=local_experts, targets=("down",))
        elementwise("combine", "permute", routed, h, "moe", 1, 1, 1, 1, recomputed=False)
    else:
        gemms("gate_up" if gated else "up", tokens, (2 if gated else 1) * ffn, h, "mlp",
              targets=("gate", "up") if gated else ("up",))
        if gated and execution is not None and execution.eager("swiglu"):
            eager(eager_swiglu("swiglu", tokens, ffn, count=n, layer="mlp"))
        elif gated:
            elementwise("swiglu", "swiglu", tokens, ffn, "mlp", 2, 1, 3, 2)
        else:
            elementwise("gelu", "gelu", tokens, ffn, "mlp", 1, 1, 2, 1)
        gemms("down", tokens, h, ffn, "mlp", targets=("down",))
    elementwise("mlp_residual", "add", tokens, h, "mlp", 2, 1, 2, 1, recomputed=False)

    if cfg.activation_checkpointing == "full":
        recompute = list(fwd)
    elif cfg.activation_checkpointing == "none":
        recompute = []
    recompute = [Op(f"recompute.{op.name}", op.kind, "bwd", op.shape, op.dtype, op.flops, op.bytes_read,
                    op.bytes_written, op.count, op.layer, op.extra) for op in recompute]
    return fwd, bwd, recompute


def embedding_ops(model: TransformerModel, cfg: TrainingConfig) -> list[Op]:
    """Token-embedding gather (fwd) and its scatter-add into a zeroed gradient (bwd)."""
    tokens, h = local_tokens(cfg), model.hidden_size
    act = activation_dtype(cfg.precision)
    table_grad = model.vocab_size * h * 4 / cfg.parallelism.tp  # fp32 gradient buffer zeroed each micro-batch
    if cfg.lora:  # a frozen table: no gradient
        return [memory_op("embedding.gather", "embedding", FlatShape(tokens * h), act, reads=1, writes=1,
                          layer="embedding")]
    return [
        memory_op("embedding.gather", "embedding", FlatShape(tokens * h), act, reads=1, writes=1, layer="embedding"),
        memory_op("embedding.scatter_add", "embedding", FlatShape(tokens * h), act, reads=1, writes=1,
                  phase="bwd", layer="embedding", extra_bytes=table_grad),
    ]


def head_ops(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    """Final norm, LM-head GEMM (vocab split over tp) and fused softmax cross-entropy, forward and backward.

    The reference job (``execution``) runs all three outside the compiled blocks: the final norm is its eager
    RMSNorm, the head stays a bf16 linear under fp8 (only the blocks' linears are swapped), and the loss is
    ``ChunkedCrossEntropy`` (fp32 per chunk; its per-chunk math compiled when the recipe compiles) unless the recipe
    routes it to the Triton kernel."""
    if cfg.lora:  # a frozen head: no weight gradient
        return [op for op in head_ops(model, replace(cfg, lora_rank=0), execution) if op.name != "lm_head.wgrad"]
    tokens, h = local_tokens(cfg), model.hidden_size
    act = activation_dtype(cfg.precision)
    vocab = math.ceil(model.vocab_size / cfg.parallelism.tp)
    if execution is not None:
        ops: list[Op] = []
        if execution.fused("rmsnorm") or model.norm != "rmsnorm":
            ops += head_ops(model, cfg)[:2]
        else:
            f, b = eager_rmsnorm("final_norm", tokens, h, count=1, layer="head")
            ops += f + b
        head_dtype = act if is_8bit_training(cfg.precision) else cfg.precision
        ops += gemm_with_grads("lm_head", tokens, vocab, h, head_dtype, layer="head")
        if execution.fused("cross_entropy"):
            ops += head_ops(model, cfg)[-2:]
        else:
            ops += chunked_cross_entropy(tokens, vocab, compiled=execution.compiled_loss)
        return ops
    ops = [
        memory_op("final_norm.fwd", model.norm, RowsShape(tokens, h), act, reads=1, writes=1, layer="head"),
        memory_op("final_norm.bwd", model.norm, RowsShape(tokens, h), act, reads=2, writes=1, phase="bwd", layer="head"),
    ]
    ops += gemm_with_grads("lm_head", tokens, vocab, h, cfg.precision, layer="head")
    ops += [
        memory_op("cross_entropy.fwd", "cross_entropy", RowsShape(tokens, vocab), act, reads=1, writes=0, layer="head"),
        memory_op("cross_entropy.bwd", "cross_entropy", RowsShape(tokens, vocab), act, reads=1, writes=1,
                  phase="bwd", layer="head"),
    ]
    return ops


def transformer_microbatch_ops(model: TransformerModel, cfg: TrainingConfig,
                               execution: Execution | None = None) -> list[Op]:
    """Every op of one micro-batch on the busiest pipeline stage (its blocks plus embedding and head)."""
    layers = math.ceil(model.num_layers / cfg.parallelism.pp)
    fwd, bwd, recompute = block_ops(model, cfg, layers, execution)
    return embedding_ops(model, cfg) + fwd + head_ops(model, cfg, execution) + bwd + recompute


def block_pieces(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None) -> tuple[list, ...]:
    """(embedding, one block's forward, head, one block's backward, its recomputation): the ops of a micro-batch
    before the blocks are multiplied (independent of pp)."""
    fwd, bwd, recompute = block_ops(model, cfg, 1, execution)
    return embedding_ops(model, cfg), fwd, head_ops(model, cfg, execution), bwd, recompute


def block_graph(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None) -> tuple:
    """``block_pieces`` for every checkpointing mode at once: (embedding, forward, head, backward, {mode:
    recomputation}). ``block_ops`` reads the mode only to pick the recomputation -- none recomputes nothing,
    selective its listed ops, full every forward op, each renamed ``recompute.*`` in the backward -- so one
    ``selective`` build gives all three (``tests/test_step.py`` checks each against ``block_ops`` run in that
    mode). The step model (``workbench.step.StepModel``) prices the block once and multiplies it."""
    ends, fwd, head, bwd, selective = block_pieces(model, replace(cfg, activation_checkpointing="selective"),
                                                   execution)
    full = [Op(f"recompute.{op.name}", op.kind, "bwd", op.shape, op.dtype, op.flops, op.bytes_read,
               op.bytes_written, op.count, op.layer, op.extra) for op in fwd]
    return ends, fwd, head, bwd, {"none": [], "selective": selective, "full": full}


def stage_counts(pieces: tuple[list, ...], layers: int) -> list:
    """``block_pieces``' items in micro-batch order, a block item's count x ``layers``. An item is an op, or a
    tuple whose first two fields are (op, count)."""
    ends, fwd, head, bwd, recompute = pieces

    def each(items, times):
        return [(item, item.count * times) if isinstance(item, Op) else (item[0], item[1] * times, *item[2:])
                for item in items]

    return each(ends, 1) + each(fwd, layers) + each(head, 1) + each(bwd, layers) + each(recompute, layers)


def transformer_step_ops(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    """Ops that run once per step, not per micro-batch: with the reference job under FSDP2, its own
    parameter and gradient copies (which run with any dp, one rank included; the collectives are in comm)."""
    p = cfg.parallelism
    if execution is None or p.sharding != "fsdp":
        return []
    layers = math.ceil(model.num_layers / p.pp)
    block = model.layer_params() / p.tp  # unsharded (gathered) parameters of one block
    root = model.embedding_params() / p.tp + model.hidden_size  # embedding, head, final norm
    return fsdp_ops(block, root, layers, p.dp, units=layers + 1, params_per_unit=6,
                    grad_accumulation=cfg.grad_accumulation)


def model_flops_per_sample(model: TransformerModel, seq: int, lora: bool = False) -> float:
    """Useful training FLOPs per sample (fwd + bwd, no recomputation): 6 x active params x tokens plus causal
    attention (PaLM appendix B convention: 6 N T + 12 L h s T / 2 for causal). LoRA (frozen base): 4 N T, forward
    and dgrad only (the adapters' FLOPs, ~rank / hidden of that, are left out)."""
    matmul_params = model.num_active_params - model.vocab_size * model.hidden_size * (0 if model.tied_embeddings else 1)
    dense = (4.0 if lora else 6.0) * matmul_params * seq
    attention_flops = 3 * 4.0 * model.num_layers * model.num_heads * model.head_dim * seq * seq * 0.5
    return dense + attention_flops
