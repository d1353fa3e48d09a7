"""The operators of one transformer training micro-batch on one GPU (one pipeline stage, one tensor shard).

Layout per block (Llama / GPT-2 / Mixtral), T = micro_batch x seq tokens, tensor-parallel shards marked /tp:

    x -> norm -> qkv GEMM [T, h] x [h, (q + 2kv)/tp] -> rope -> flash attention -> o GEMM [T, q/tp] x [q/tp, h]
      -> + x -> norm -> gate_up GEMM [T, h] x [h, 2f/tp] -> swiglu -> down GEMM [T, f/tp] x [f/tp, h] -> + x

MoE blocks replace the FFN by a router GEMM, a token permutation and grouped expert GEMMs (top-k of E,
balanced routing assumed), plus a dense FFN of the shared experts' summed width when the model has them
(DeepSeek-V3, Llama 4). Backward has a dgrad and a wgrad GEMM per forward GEMM; activation checkpointing adds the
recomputed forward ops to the backward phase.

A model's blocks may be of several kinds (``TransformerModel.block_kinds``: an MoE model's dense layers, windowed
layers); ``block_ops`` builds one kind and the stage is each kind's ops times its copies. Multi-head latent
attention (DeepSeek-V3) replaces the qkv GEMM by a down projection to the latents [T, h] x [h, q_lora + kv_lora +
rope] (replicated over tp, as Megatron-Core's MLA), their RMSNorm and the up projections [T, q_lora] x [q_lora,
heads x d_qk / tp] and [T, kv_lora] x [kv_lora, heads x (d_nope + d_v) / tp]; its flash attention has query/key
width d_qk = d_nope + d_rope and value width d_v. A windowed layer's attention computes only the key tiles its
window reaches (``window_fraction``). Qwen3's per-head q/k RMSNorm is one memory-bound op over q and k.

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
from workbench.graph.ops import (
    ATTENTION_BLOCK,
    AttentionShape,
    FlatShape,
    Op,
    RowsShape,
    attention,
    gemm_with_grads,
    kernel_pass,
    memory_op,
    nbytes,
    new_op,
)
from workbench.graph.recomputed import RecomputedOps
from workbench.models import BlockKind, TransformerModel
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


def window_fraction(seq: int, window: int, window_kind: str) -> float:
    """Fraction of a [seq, seq] score matrix a block-skipping kernel computes when each query sees only its window
    of keys (``TransformerModel.window_kind``), counted in ``ATTENTION_BLOCK`` tiles as ``AttentionShape``'s causal
    mask is: query block i computes key blocks from the one holding its first query's earliest key through i."""
    blocks = math.ceil(seq / ATTENTION_BLOCK)
    computed = 0
    for i in range(blocks):
        first_query = i * ATTENTION_BLOCK
        earliest_key = ((first_query // window) * window if window_kind == "chunked"
                        else max(0, first_query - window + 1))
        computed += i - earliest_key // ATTENTION_BLOCK + 1
    return computed / (blocks * blocks)


def attention_op(name: str, shape: AttentionShape, dtype: str, *, phase: str, v_dim: int, window: int,
                 window_kind: str, count: int, layer: str) -> Op:
    """``ops.attention`` (flash attention) for a value head width ``v_dim`` apart from the query/key's
    (``shape.head_dim``; latent attention) and a key ``window`` (0: full causal): forward FLOPs 2 x b x h x
    (scores computed) x (d_qk + d_v), the backward 2.5x; q, k, v, o, lse bytes as ``ops.attention`` counts them."""
    s = shape
    if v_dim == s.head_dim and (not window or window >= s.seq):  # every key: flash attention as ops.attention has it
        return attention(name, shape, dtype, phase=phase, count=count, layer=layer)
    fraction = window_fraction(s.seq, window, window_kind) if window and window < s.seq else s.causal_fraction()
    fwd_flops = 2.0 * s.batch * s.heads_q * s.seq * s.seq * (s.head_dim + v_dim) * fraction
    a = nbytes(dtype)
    q = s.batch * s.heads_q * s.seq * s.head_dim * a
    kv = s.batch * s.heads_kv * s.seq * (s.head_dim + v_dim) * a
    out = s.batch * s.heads_q * s.seq * v_dim * a
    lse = s.batch * s.heads_q * s.seq * 4  # fp32 log-sum-exp saved for backward
    flops, read, written = ((fwd_flops, q + kv, out + lse) if phase == "fwd" else
                            (2.5 * fwd_flops, q + kv + 2 * out + lse, q + kv))  # bwd reads o and do; writes dq, dk, dv
    return new_op(name, "attention", phase, kernel_pass(shape, phase), dtype, flops, read, written, count, layer)


def block_ops(model: TransformerModel, cfg: TrainingConfig, layers: int,
              execution: Execution | None = None, kind: BlockKind | None = None) -> tuple[list[Op], list[Op], list[Op]]:
    """(forward, backward, recomputation) ops of ``layers`` identical blocks of ``kind`` (None: the model's
    ``typical_block``) for one micro-batch.

    With an ``execution`` (the reference job), eager blocks get the job's unfused norm, SwiGLU and RoPE kernels
    and fp8 GEMMs the job's quantize kernels for all three GEMMs' operands (``workbench.graph.execution``)."""
    kind = model.typical_block() if kind is None else kind
    p = cfg.parallelism
    b, s, h = cfg.micro_batch, cfg.seq_len // p.cp, model.hidden_size  # s: this rank's share of the sequence
    tokens = b * s
    # sequence parallelism under tp (Korthikanti et al. 2022, Megatron-Core's and torchtitan's TP): the fused bound
    # runs the norms and residual adds on this rank's tokens / tp; the reference job's eager blocks do not
    rows = -(-tokens // p.tp) if execution is None else tokens
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
    eight_bit = is_8bit_training(gemm_dtype)

    def gemms(name: str, m: int, out: int, k: int, layer: str, groups: int = 1, targets: tuple[str, ...] = ()) -> None:
        f, dg, wg = gemm_with_grads(name, m, out, k, gemm_dtype, groups=groups, count=n, layer=layer)
        fwd.append(f)
        if cfg.lora:  # a frozen base weight needs no gradient
            bwd.append(dg)
            adapted = [t for t in targets if t in lora]
            if adapted:
                adapters(name, m, k, out * sum(shapes[t][1] for t in adapted) // sum(shapes[t][1] for t in targets),
                         len(adapted), layer, groups)
        else:
            bwd.extend((dg, wg))
        if eight_bit and execution is not None and groups == 1:
            quantize = fp8_linear_quantize(name, m, out, k, count=n, layer=layer, wgrad_fp8=wg.dtype == f.dtype)
            fwd.extend(o for o in quantize if o.phase == "fwd")
            bwd.extend(o for o in quantize if o.phase == "bwd")
        elif eight_bit:  # the fused step's casts: wgrad reuses dgrad's and forward's
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
            elementwise(name, norm, rows, h, layer, 1, 1, 2, 1)

    def ffn(prefix: str, width: int, layer: str) -> None:
        """A dense FFN of ``width`` (split tp-ways): gate_up, SwiGLU (or up, GELU), down."""
        gated = model.ffn_activation == "swiglu"
        gemms(f"{prefix}gate_up" if gated else f"{prefix}up", tokens, (2 if gated else 1) * width, h, layer,
              targets=("gate", "up") if gated else ("up",))
        if gated and execution is not None and execution.eager("swiglu"):
            eager(eager_swiglu(f"{prefix}swiglu", tokens, width, count=n, layer=layer))
        elif gated:
            elementwise(f"{prefix}swiglu", "swiglu", tokens, width, layer, 2, 1, 3, 2)
        else:
            elementwise(f"{prefix}gelu", "gelu", tokens, width, layer, 1, 1, 2, 1)
        gemms(f"{prefix}down", tokens, h, width, layer, targets=("down",))

    # attention block
    norm_op("attn_norm", "attention")
    mla = model.latent_attention
    v_dim = model.head_dim
    if mla is None:
        gemms("qkv", tokens, q + 2 * kv, h, "attention", targets=("q", "k", "v"))
        if model.qk_norm:  # per-head RMSNorm of q and k, before RoPE
            elementwise("qk_norm", "rmsnorm", tokens, q + kv, "attention", 1, 1, 2, 1)
        if execution is not None and not execution.compile:
            eager(eager_rope("rope", tokens, q, kv, model.head_dim, s, count=n, layer="attention"))
        else:
            elementwise("rope", "rope", tokens, q + kv, "attention", 1, 1, 1, 1)
    else:  # latent attention: the down projections are replicated over tp (Megatron-Core's MLA), the ups split
        v_dim = mla.v_head_dim
        latent = mla.q_lora_rank + mla.kv_lora_rank
        gemms("latent_down", tokens, latent + mla.qk_rope_head_dim, h, "attention",
              targets=("q_a", "kv_a") if mla.q_lora_rank else ("kv_a",))
        elementwise("latent_norm", "rmsnorm", tokens, latent, "attention", 1, 1, 2, 1)
        if mla.q_lora_rank:
            gemms("q_up", tokens, heads_q * mla.qk_head_dim, mla.q_lora_rank, "attention", targets=("q_b",))
        else:
            gemms("q_proj", tokens, heads_q * mla.qk_head_dim, h, "attention", targets=("q",))
        gemms("kv_up", tokens, heads_q * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, "attention",
              targets=("kv_b",))
        elementwise("rope", "rope", tokens, (heads_q + 1) * mla.qk_rope_head_dim, "attention", 1, 1, 1, 1)
    shape = AttentionShape(b * p.cp, s, heads_q, heads_kv, model.head_dim, causal=True)  # cp ring blocks of s
    for phase, ops in (("fwd", fwd), ("bwd", bwd)):
        ops.append(attention_op(f"attention.{phase}", shape, attention_dtype(cfg.precision), phase=phase,
                                v_dim=v_dim, window=kind.window, window_kind=model.window_kind, count=n,
                                layer="attention"))
    gemms("o_proj", tokens, h, heads_q * v_dim if mla else q, "attention", targets=("o",))
    elementwise("attn_residual", "add", rows, h, "attention", 2, 1, 2, 1, recomputed=False)

    # feed-forward block
    norm_op("ffn_norm", "mlp")
    if kind.moe:
        expert_ffn = model.ffn_hidden_size // p.tp
        gated = model.ffn_activation == "swiglu"
        routed = tokens * model.experts_per_token
        local_experts = model.num_experts // p.ep
        per_expert = math.ceil(routed * p.ep / model.num_experts)
        gemms("router", tokens, model.num_experts, h, "moe")
        elementwise("dispatch", "permute", routed, h, "moe", 1, 1, 1, 1, recomputed=False)
        gemms("experts.gate_up", per_expert, (2 if gated else 1) * expert_ffn, h, "moe", groups=local_experts,
              targets=("gate", "up") if gated else ("up",))
        elementwise("experts.act", "swiglu" if gated else "gelu", routed, expert_ffn, "moe",
                    2 if gated else 1, 1, 3 if gated else 2, 2 if gated else 1)
        gemms("experts.down", per_expert, h, expert_ffn, "moe", groups=local_experts, targets=("down",))
        elementwise("combine", "permute", routed, h, "moe", 1, 1, 1, 1, recomputed=False)
        if model.shared_experts:  # every token, beside its routed experts: one dense FFN of their summed width
            ffn("shared_expert.", model.shared_experts * model.shared_expert_size // p.tp, "moe")
    else:
        ffn("", model.dense_ffn_size // p.tp, "mlp")
    elementwise("mlp_residual", "add", rows, h, "mlp", 2, 1, 2, 1, recomputed=False)

    if cfg.activation_checkpointing == "full":
        kept = range(len(fwd))
    elif cfg.activation_checkpointing == "none":
        kept = []
    else:  # the forward ops selective checkpointing listed, where they are in the forward
        place = {id(op): i for i, op in enumerate(fwd)}
        kept = [place[id(op)] for op in recompute]
    return fwd, bwd, RecomputedOps(fwd, kept)  # each renamed recompute.*, in the backward


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
    """Every op of one micro-batch on the busiest pipeline stage (its blocks of each kind plus embedding and head)."""
    blocks = [block_ops(model, cfg, layers, execution, kind)
              for kind, layers in model.stage_blocks(cfg.parallelism.pp)]
    return (embedding_ops(model, cfg) + [op for fwd, _, _ in blocks for op in fwd] + head_ops(model, cfg, execution)
            + [op for _, bwd, _ in blocks for op in bwd] + [op for _, _, recompute in blocks for op in recompute])


def block_pieces(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None,
                 kind: BlockKind | None = None) -> tuple[list, ...]:
    """(embedding, one block's forward, head, one block's backward, its recomputation): the ops of a micro-batch
    before the blocks of ``kind`` (None: ``typical_block``) are multiplied (independent of pp)."""
    fwd, bwd, recompute = block_ops(model, cfg, 1, execution, kind)
    return embedding_ops(model, cfg), fwd, head_ops(model, cfg, execution), bwd, recompute


def block_graph(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None,
                kind: BlockKind | None = None) -> tuple:
    """``block_pieces`` for every checkpointing mode at once: (embedding, forward, head, backward, {mode:
    recomputation}). ``block_ops`` reads the mode only to pick the recomputation -- none recomputes nothing,
    selective its listed ops, full every forward op, each renamed ``recompute.*`` in the backward -- so one
    ``selective`` build gives all three (``tests/test_step.py`` checks each against ``block_ops`` run in that
    mode). The step model (``workbench.step.StepModel``) prices each kind of block once and multiplies it by its
    copies on the stage (``TransformerModel.stage_blocks``)."""
    ends, fwd, head, bwd, selective = block_pieces(model, replace(cfg, activation_checkpointing="selective"),
                                                   execution, kind)
    full = RecomputedOps(fwd, range(len(fwd)))
    return ends, fwd, head, bwd, {"none": [], "selective": selective, "full": full}


def stage_counts(blocks: list[tuple[tuple[list, ...], int]]) -> list:
    """The items of a stage's ``block_pieces`` -- one (pieces, copies) per kind of block, the ends and head taken
    from the first -- in micro-batch order (embedding, every kind's forward, head, every kind's backward, every
    kind's recomputation), a block item's count x its copies. An item is an op, or a tuple whose first two fields
    are (op, count)."""
    def each(items, times):
        return [(item, item.count * times) if isinstance(item, Op) else (item[0], item[1] * times, *item[2:])
                for item in items]

    ends, head = blocks[0][0][0], blocks[0][0][2]
    return (each(ends, 1) + [i for pieces, n in blocks for i in each(pieces[1], n)] + each(head, 1)
            + [i for pieces, n in blocks for i in each(pieces[3], n)]
            + [i for pieces, n in blocks for i in each(pieces[4], n)])


def transformer_step_ops(model: TransformerModel, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    """Ops that run once per step, not per micro-batch: with the reference job under FSDP2, its own
    parameter and gradient copies (which run with any dp, one rank included; the collectives are in comm)."""
    p = cfg.parallelism
    if execution is None or p.sharding != "fsdp":
        return []
    stage = model.stage_blocks(p.pp)
    layers = sum(n for _, n in stage)
    block = sum(n * model.block_params(kind) for kind, n in stage) / layers / p.tp  # one block, gathered (mean)
    root = model.embedding_params() / p.tp + model.hidden_size  # embedding, head, final norm
    return fsdp_ops(block, root, layers, p.dp, units=layers + 1, params_per_unit=6,
                    grad_accumulation=cfg.grad_accumulation)


def attention_pairs(model: TransformerModel, kind: BlockKind, seq: int) -> float:
    """Query-key pairs one head of a block of ``kind`` scores over a causal sequence of ``seq`` tokens, as model
    FLOPs count them (continuous: seq^2 / 2 for full attention, PaLM's convention): a sliding window of w keys
    gives seq w - w^2 / 2, chunks of w give seq / w chunks of w^2 / 2 (and the remainder's)."""
    w = kind.window
    if not w or w >= seq:
        return seq * seq * 0.5
    if model.window_kind == "chunked":
        return (seq // w) * w * w * 0.5 + (seq % w) ** 2 * 0.5
    return seq * w - w * w * 0.5


def model_flops_per_sample(model: TransformerModel, seq: int, lora: bool = False) -> float:
    """Useful training FLOPs per sample (fwd + bwd, no recomputation): 6 x active params x tokens plus causal
    attention (PaLM appendix B convention: 6 N T + 12 L h s T / 2 for causal; per head 2 x (d_qk + d_v) FLOPs per
    scored pair forward, which is 4 d when the two widths agree; a windowed block scores ``attention_pairs``).
    LoRA (frozen base): 4 N T, forward and dgrad only (the adapters' FLOPs, ~rank / hidden of that, are left out)."""
    matmul_params = model.num_active_params - model.vocab_size * model.hidden_size * (0 if model.tied_embeddings else 1)
    dense = (4.0 if lora else 6.0) * matmul_params * seq
    mla = model.latent_attention
    attention_flops = 0.0
    for kind, n in model.block_kinds():
        if mla is None and not kind.window:  # full attention, one head width
            attention_flops += 3 * 4.0 * n * model.num_heads * model.head_dim * seq * seq * 0.5
        else:
            widths = model.head_dim + (mla.v_head_dim if mla else model.head_dim)
            attention_flops += 3 * 2.0 * n * model.num_heads * widths * attention_pairs(model, kind, seq)
    return dense + attention_flops
