"""Peak HBM per GPU: parameters, gradients, optimizer states and activations, under DP/FSDP/TP/PP sharding and
activation checkpointing none/selective/full; what fits, and the largest micro-batch that does.

Mixed precision keeps fp32 master parameters, fp32 gradients (the reduce dtype) and two fp32 AdamW moments:
16 bytes per parameter, sharded dp-ways under FSDP (ZeRO-3, Rajbhandari et al. 2020). FSDP also holds the
bf16 parameters of the layers being gathered (current + prefetched) and of the root group (embeddings, output
head), which FSDP2 keeps gathered from forward to backward; it makes these copies on one GPU too. The loss is the
job's chunked cross-entropy (``workbench.train.layers.ChunkedCrossEntropy``): its backward holds the logits, their
gradient and a few fp32 chunks, never fp32 logits whole; it peaks before any block's backward (or recompute)
runs. Activation bytes per block follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), adapted to flash attention (no s^2 scores stored), GQA and gated FFNs. Under fp8 they stay
in the activation dtype (bf16) whatever the recipe: the job's fp8 linear saves its bf16 input and weight and
quantizes again in backward (``workbench.train.layers``), which is also what rowwise_with_gw_hp's bf16 weight-gradient
GEMM needs, so fp8, fp8_gw_hp and bf16 hold the same activation bytes.

zero1 (Megatron's distributed optimizer, megatron/core/optimizer/distrib_optimizer.py; its docs'
distrib_optimizer.md table: bf16 parameters with fp32 gradients take 6 + 12/d bytes per parameter) keeps bf16
parameters (2) and fp32 gradients (4) replicated and shards the fp32 master weights and both moments (12) over the
d = dp x cp ranks that hold the same weights. Context parallelism splits each sample's tokens over cp ranks: every
activation term is 1/cp. An interleaved pipeline (``virtual_stages`` v > 1) makes the first stage hold
(1 + (pp - 1) / (pp v)) times the activations of 1F1B (Korthikanti et al. 2022, Sec. 4.2.3; the schedule of
Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Sec. 2.2).
LoRA (Hu et al. 2021) freezes the base: its weights are held in bf16 only (2 bytes, no master copy, gradient or
moments); the adapters take the full 16 bytes per parameter.

CPU offload (``TrainingConfig.offload``; DeepSpeed's ZeRO-Offload, Ren et al. 2021, and ZeRO-Infinity, Rajbhandari
et al. 2021): the fp32 master weights and both moments (12 bytes per parameter of the rank's shard) leave HBM; the
GPU keeps its bf16 parameters. Under ZeRO-3 (fsdp) the reduced gradient shard is copied to the host as it is made
(DeepSpeed's stage 3 ``partition_grads`` writes it into the host's fp32 gradient buffer), so no gradient shard stays
in HBM; under ZeRO-1/2 (zero1) the gradients stay as without offload. ``optimizer+params`` (fsdp only) also moves
the bf16 parameter shard to the host: HBM holds only the gathered layers.

A stack that holds its step differently from the project's job says how in ``StackMemoryTraits``
(``workbench.stack_memory_megatron.te_memory_traits`` for Megatron-Core + TransformerEngine): the bytes of its working
weights and of its gradient buffer, whether its linears save their inputs quantized for the weight gradient (and
none when the weight is frozen), and its loss's bytes per logit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

from workbench.config import Parallelism, TrainingConfig, activation_dtype
from workbench.families import family_of
from workbench.hardware import GPU
from workbench.models import BlockKind, DLRMModel, HSTUModel, Model, TransformerModel
from workbench.precision import get_precision

GB = 1e9
MASTER_STATE_BYTES = 16
"""fp32 master weights (4) + fp32 gradients (4) + AdamW first and second moments (4 + 4)."""
FRAMEWORK_OVERHEAD_GB = 2.0
"""Guess, calibrate against torch.cuda.max_memory_reserved: CUDA context, library workspaces, allocator slack."""
HEADROOM_FRACTION = 0.05
"""Share of HBM kept free when deciding what fits (fragmentation); a guess."""
GATHERED_LAYERS = 2
"""FSDP keeps the current and one prefetched layer unsharded."""
LOSS_CHUNK_ELEMENTS = 1 << 28
"""fp32 logits per chunk of rows in the job's loss (``workbench.train.layers.CE_CHUNK_ELEMENTS``; not imported: the
memory model does not import torch)."""
LOSS_CHUNKS_LIVE = 3
"""fp32 chunks live at once in that loss's backward: the previous chunk's probabilities while the next chunk's
upcast and its difference from the log-sum-exp are made (``ChunkedCrossEntropy.backward``); counted from the code,
an upper bound (one chunk only: 2.5)."""
COMPILED_LOSS_CHUNKS_LIVE = 0
"""fp32 [rows, V] chunks the same loss holds when the recipe compiles (``KernelSet.compile_loss``): none. Inductor's
kernel for a chunk's log-sum-exp keeps only [rows] fp32 buffers (the max and the result), and the gradient's kernel
stores each chunk's bf16 gradient straight into dlogits (``workbench.graph.execution`` ``CE_COMPILED_*``). The H200
runs of the recommended Llama 3.2 1B recipe agree: the job's peak allocated memory fell by 3.221 GB when the loss was
compiled, 3 fp32 chunks of 2^28 (``benchmarks/results/h200/stacks/codesign/``, ``before_compiled_loss/``)."""
ROWWISE_ADAGRAD_BYTES_PER_ROW = 4


@dataclass(frozen=True)
class StackMemoryTraits:
    """What a stack holds differently from the project's job (which ``None`` traits mean); the stack's memory module
    builds them with their sources (``stack_memory_megatron.te_memory_traits``)."""

    weight_bytes: float = 2.0
    """Bytes per parameter of the weights the GEMMs read, trained or frozen (bf16: 2; fp8 parameters: 1, plus 1 where
    a cached transpose sits beside them)."""
    frozen_weight_bytes: float | None = None
    """Bytes per parameter of LoRA's frozen base; None: ``weight_bytes``."""
    grad_bytes: float = 4.0
    """Bytes per parameter of the gradient buffer (the reduce dtype: fp32 4, bf16 2)."""
    saved_input_bytes: float | None = None
    """Bytes per element of the input a linear saves for its weight gradient, None: the activation dtype (the job's
    linears save their bf16 input whatever the recipe). Set: the linear saves its input only for the weight
    gradient, so a frozen linear (LoRA's base) saves none; a LoRA adapter saves its own bf16 copy."""
    loss_bytes_per_logit: float | None = None
    """The loss's peak bytes per logit of this rank's vocabulary shard; None: the job's chunked loss."""
    kernels: str | None = None
    """The stack's kernel table where its model family has a memory model for that code (``Family.own_kernels``:
    HSTU under ``generative-recommenders``, ``workbench.stack_memory_hstu``); None: the family's own."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU, by what holds them."""

    params: float
    grads: float
    optimizer: float
    activations: float
    workspace: float
    capacity: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.workspace

    @property
    def usable(self) -> float:
        return self.capacity * (1 - HEADROOM_FRACTION)

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    def as_gb(self) -> dict[str, float]:
        return {k: getattr(self, k) / GB for k in ("params", "grads", "optimizer", "activations", "workspace", "total", "capacity")}


def _block_activation_elements(model: TransformerModel, mode: str, kind: BlockKind | None = None) -> float:
    """Saved activation elements per token of one block of ``kind`` (None: ``typical_block``; already divided by
    nothing: caller shards). Latent attention saves its latents and per-head q, k (query/key width) and v, o (value
    width); a windowed block saves what a full one does (flash attention keeps no scores)."""
    kind = model.typical_block() if kind is None else kind
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    gated = model.ffn_activation == "swiglu"
    if kind.moe:  # the top-k routed experts' and the shared experts' widths
        k = model.experts_per_token
        width = f * k + model.shared_experts * model.shared_expert_size
        moe = h * k + model.num_experts * 2  # dispatched tokens + fp32 router logits
    else:
        width, moe = model.dense_ffn_size, 0
    ffn_in = (2 if gated else 1) * width  # gate/up output: input of the activation's backward
    ffn_act = width                       # activation output: input of the down GEMM
    if mode == "full":
        return h
    mla = model.latent_attention
    if mla is None:
        attention = (q + 2 * kv) + q + (q + kv if model.qk_norm else 0)  # q/k/v, attention output, q/k norm inputs
        normed = 0
    else:  # the latents (the norm's input), per-head q and k, v and the attention output
        latent = mla.q_lora_rank + mla.kv_lora_rank
        attention = latent + mla.qk_rope_head_dim + 2 * q + 2 * model.num_heads * mla.v_head_dim
        normed = latent  # the normed latents: the up projections' inputs, recomputed unless mode is none
    saved = 2 * h + attention + ffn_in + moe  # norm inputs, attention, ffn inputs
    if mode == "none":
        saved += 2 * h + ffn_act + normed  # norm outputs and activation output are kept instead of recomputed
    return saved


def _saved_input_delta(model: TransformerModel, mode: str, kind: BlockKind, a: float, traits: StackMemoryTraits,
                       lora_targets: tuple[str, ...] | None) -> float:
    """Bytes per token by which a block's saved linear inputs differ from ``a`` bytes per element of
    ``_block_activation_elements`` when linears save their inputs for the weight gradient only, in
    ``traits.saved_input_bytes`` (``lora_targets`` None: every weight trained). The inputs of QKV and gate/up (the
    norms' outputs) and of down (the activation's output) are saved only under ``none``; the output projection's
    input is the attention output, which flash attention keeps in bf16 anyway: a trained projection adds its
    quantized copy, a frozen one nothing (an adapter on it reads the same bf16 tensor). Latent attention's inputs
    stay as they are (not modelled)."""
    if mode == "full":
        return 0.0
    s = traits.saved_input_bytes
    width = (model.ffn_hidden_size * model.experts_per_token + model.shared_experts * model.shared_expert_size
             if kind.moe else model.dense_ffn_size)

    def kept(targets: tuple[str, ...]) -> float:  # bytes per element a linear (group) keeps of its input
        if lora_targets is None:
            return s
        return a if any(t in lora_targets for t in targets) else 0.0

    delta = kept(("o",)) * model.q_size if lora_targets is None else 0.0
    if mode == "none":
        h = model.hidden_size
        delta += (kept(("q", "k", "v")) - a) * h + (kept(("gate", "up")) - a) * h + (kept(("down",)) - a) * width
    return delta


def _transformer_memory(model: TransformerModel, cfg: TrainingConfig, gpu: GPU, compiled_loss: bool,
                        traits: StackMemoryTraits | None = None) -> MemoryBreakdown:
    p = cfg.parallelism
    # everything but the micro-batch, sequence and accumulation, once per layout (_memoized: search climbs the
    # micro-batches of one layout); p by identity, so that no Parallelism is hashed or compared per candidate
    terms = _memoized(model, ("terms", id(p), cfg.precision, cfg.activation_checkpointing, cfg.lora_rank,
                              cfg.lora_targets, traits, compiled_loss), _TransformerTerms.of, model, cfg, traits,
                      compiled_loss)
    tokens = cfg.micro_batch * cfg.seq_len // p.cp  # this rank's share of the sequence
    in_flight = min(p.pp, cfg.grad_accumulation) if p.pp > 1 else 1  # 1F1B: stage 0 holds pp micro-batches
    if p.virtual_stages > 1:  # interleaved 1F1B: the first stage's extra warm-up micro-batches (Korthikanti Sec. 4.2.3)
        in_flight *= 1 + (p.pp - 1) / (p.pp * p.virtual_stages)
    tp = p.tp
    blocks = sum(in_flight * n * (per_token * tokens / tp) for n, per_token in terms.blocks)
    recomputed = terms.recomputed
    recompute_peak = max(per_token * tokens / tp for per_token in recomputed) if recomputed is not None else 0
    logits = tokens * terms.vocab_shard
    # the loss's backward holds the saved logits, their gradient (both in the activation dtype) and fp32 chunks
    a = terms.activation_bytes
    loss_peak = 2 * a * logits + 4 * terms.loss_chunks * min(logits, LOSS_CHUNK_ELEMENTS)
    if terms.loss_bytes_per_logit is not None:  # the stack's own loss
        loss_peak = terms.loss_bytes_per_logit * logits
    # the loss peaks before the first block's backward (and recompute) starts: one or the other, not both
    activations = blocks + max(recompute_peak, loss_peak)
    breakdown = object.__new__(MemoryBreakdown)  # the fields set without the frozen __init__ (one per candidate)
    breakdown.__dict__.update(params=terms.params, grads=terms.grads, optimizer=terms.optimizer,
                              activations=activations, workspace=FRAMEWORK_OVERHEAD_GB * GB,
                              capacity=gpu.hbm_capacity_gb.value * GB)
    return breakdown


class _TransformerTerms(NamedTuple):
    """What of a transformer's memory does not depend on the micro-batch, sequence or accumulation: the weights',
    gradients' and optimizer's bytes, and the activations' bytes per token (before the tp split) of the busiest
    stage's blocks. ``_transformer_memory`` multiplies them by a candidate's tokens, in the order it always has. A
    named tuple: made once per layout and checkpointing mode, and recipe search's climbs are a few micro-batches
    long, so its construction is part of a candidate's cost."""

    parallelism: Parallelism
    """The layout they are of (held: ``_transformer_memory`` keys them by its id)."""
    params: float
    grads: float
    optimizer: float
    blocks: tuple[tuple[int, float], ...]
    """(blocks of one kind on the stage, their saved bytes per token under the configuration's checkpointing)."""
    recomputed: tuple[float, ...] | None
    """Each kind's bytes per token of one block's forward kept whole during its recomputation (None under
    ``none``: nothing is recomputed)."""
    vocab_shard: int
    """This rank's share of the vocabulary: the logits per token."""
    activation_bytes: float
    loss_chunks: int
    """fp32 chunks the job's loss holds (``LOSS_CHUNKS_LIVE``, or ``COMPILED_LOSS_CHUNKS_LIVE`` compiled)."""
    loss_bytes_per_logit: float | None
    """The stack's own loss (``StackMemoryTraits.loss_bytes_per_logit``); None: the job's chunked loss."""

    @staticmethod
    def of(model: TransformerModel, cfg: TrainingConfig, traits: StackMemoryTraits | None,
           compiled_loss: bool) -> _TransformerTerms:
        p = cfg.parallelism
        stage, params, grads, optimizer = _memoized(model, ("weights", p, cfg.lora_rank, cfg.lora_targets, traits),
                                                    lambda: _weight_bytes(model, cfg, traits))
        a = get_precision(activation_dtype(cfg.precision)).bytes_per_element
        quantized_inputs = traits is not None and traits.saved_input_bytes is not None
        lora_targets = cfg.lora_targets if cfg.lora else None

        def per_token(kind: BlockKind, mode: str) -> float:  # one block's saved bytes per token, before tp
            elements = _memoized(model, ("activation elements", mode, kind),
                                 lambda: _block_activation_elements(model, mode, kind))
            delta = _saved_input_delta(model, mode, kind, a, traits, lora_targets) if quantized_inputs else 0.0
            return elements * a + delta

        mode = cfg.activation_checkpointing
        return _TransformerTerms(
            p, params, grads, optimizer, tuple((n, per_token(kind, mode)) for kind, n in stage),
            tuple(per_token(kind, "none") for kind, _ in stage) if mode != "none" else None,
            math.ceil(model.vocab_size / p.tp), a, COMPILED_LOSS_CHUNKS_LIVE if compiled_loss else LOSS_CHUNKS_LIVE,
            traits.loss_bytes_per_logit if traits is not None else None)


_MEMO: dict[tuple, tuple[Model, object]] = {}
_MEMO_LIMIT = 4096
"""Entries ``_memoized`` keeps before it starts over (a long session searching many models)."""


def _memoized(model: TransformerModel, key: tuple, build, *args):
    """``build(*args)``, computed once per model object and ``key``: the terms of a transformer's memory that do not
    depend on the micro-batch or sequence (its weights', gradients' and optimizer's bytes, by parallelism and LoRA;
    one block's saved activation elements per token, by checkpointing mode and kind of block), which recipe search
    asks again for every micro-batch it climbs. Safe: models are frozen, ``key`` holds everything ``build`` reads
    besides the model, and the entry holds the model, so its id is not reused while the entry lives (an object
    keyed by its id, such as ``_transformer_memory``'s parallelism, is held by the built value for the same reason;
    ``args`` rather than a closure: no function is made per call)."""
    memo_key = (id(model), *key)
    hit = _MEMO.get(memo_key)
    if hit is None:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        hit = _MEMO[memo_key] = (model, build(*args))
    return hit[1]


def _weight_bytes(model: TransformerModel, cfg: TrainingConfig, traits: StackMemoryTraits | None = None
                  ) -> tuple[tuple[tuple[BlockKind, int], ...], float, float, float]:
    """(the busiest stage's blocks, and the bytes per GPU of parameters, gradients and optimizer states): what of
    a transformer's memory depends on the parallelism, LoRA and the stack's traits only (the module docstring)."""
    p = cfg.parallelism
    stage = model.stage_blocks(p.pp)
    fsdp = p.sharding == "fsdp"
    w = 2.0 if traits is None else traits.weight_bytes  # the working weights' bytes per parameter
    per_gpu = model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=fsdp)
    # FSDP2 gathers a bf16 copy even on one GPU; the root group (embeddings, output head) stays gathered from
    # its forward to the end of backward (fully_shard does not reshard the root after forward)
    gathered = (GATHERED_LAYERS * model.layer_params() + model.embedding_params()) / p.tp * w if fsdp else 0
    if cfg.lora or p.sharding == "zero1":
        return (stage, *_frozen_or_zero1_bytes(model, cfg, per_gpu, gathered, traits))
    if traits is not None:  # the stack's weights beside fp32 master weights (Megatron's fp16/bf16 optimizer)
        master = 4 * per_gpu + (0 if fsdp else w * per_gpu)
        return stage, master + gathered, traits.grad_bytes * per_gpu, 8 * per_gpu
    return stage, 4 * per_gpu + gathered, 4 * per_gpu, 8 * per_gpu


def _frozen_or_zero1_bytes(model: TransformerModel, cfg: TrainingConfig, per_gpu: float, gathered: float,
                           traits: StackMemoryTraits | None = None) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states under zero1 and / or LoRA (the module docstring)."""
    p = cfg.parallelism
    w, g = (2.0, 4.0) if traits is None else (traits.weight_bytes, traits.grad_bytes)
    if cfg.lora and traits is not None and traits.frozen_weight_bytes is not None:
        w = traits.frozen_weight_bytes
    replicas = p.weight_replicas if p.sharding == "zero1" else 1  # optimizer states sharded over them
    if cfg.lora:  # frozen base in the working dtype; adapters trained (A and B split tp-ways with their linears)
        trained = math.ceil(model.num_layers / p.pp) * model.lora_params_per_layer(cfg.lora_rank, cfg.lora_targets) / p.tp
        # zero1 keeps a bf16 working copy beside the fp32 master shard; ddp / one-GPU fsdp train fp32 adapters
        params = w * per_gpu + gathered + (2 * trained if p.sharding == "zero1" else 0) + 4 * trained / replicas
    else:  # zero1: working weights replicated, fp32 master shard
        trained = per_gpu
        params = w * per_gpu + 4 * model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=True)
    sharded_trained = trained / replicas if cfg.lora else model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep,
                                                                               sharded=True)
    return params, g * trained, 8 * sharded_trained


def dlrm_memory(model: DLRMModel, cfg: TrainingConfig, gpu: GPU) -> MemoryBreakdown:
    """DLRM: every MLP layer's output and the DCN's inputs saved per sample (``_recsys_memory``)."""
    a = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    widths = sum(o for _, _, o in model.mlp_layers())
    activations = cfg.micro_batch * (2 * widths + 2 * model.interaction_width * model.cross_layers) * a
    return _recsys_memory(model, cfg, gpu, sum(t.rows for t in model.tables), activations)


def hstu_memory(model: HSTUModel, cfg: TrainingConfig, gpu: GPU) -> MemoryBreakdown:
    """HSTU: each block's norm inputs, U/V/Q/K and gated outputs saved per token (``_recsys_memory``)."""
    a = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    heads_out = model.num_heads * model.linear_dim
    uvqk = model.num_heads * (2 * model.linear_dim + 2 * model.attention_dim)
    per_token = 2 * model.embedding_dim + 2 * uvqk + 3 * heads_out
    activations = cfg.micro_batch * cfg.seq_len * (model.num_layers * per_token * a + model.embedding_dim * 4)
    return _recsys_memory(model, cfg, gpu, model.item_table_rows, activations)


def _recsys_memory(model: DLRMModel | HSTUModel, cfg: TrainingConfig, gpu: GPU, rows: int,
                   activations: float) -> MemoryBreakdown:
    """A recommendation model's memory: fp32 tables of ``rows`` rows row-sharded over the dp GPUs with row-wise
    Adagrad, dense layers replicated with AdamW, and the model's ``activations`` bytes."""
    p = cfg.parallelism
    dense = model.dense_params  # replicated; tables are row-sharded over the dp GPUs, fp32
    return MemoryBreakdown(
        params=model.embedding_params * 4 / p.dp + 4 * dense,
        grads=4 * dense,  # table gradients are fused into the update, never materialised
        optimizer=rows * ROWWISE_ADAGRAD_BYTES_PER_ROW / p.dp + 8 * dense,
        activations=activations,
        workspace=FRAMEWORK_OVERHEAD_GB * GB,
        capacity=gpu.hbm_capacity_gb.value * GB,
    )


def memory_breakdown(model: Model, cfg: TrainingConfig, gpu: GPU, *, compiled_loss: bool = False,
                     traits: StackMemoryTraits | None = None) -> MemoryBreakdown:
    """Peak bytes per GPU for a validated training config (``TrainingConfig.resolved``), as the model's family
    holds them (``Family.memory_breakdown``: ``transformer_memory``, ``dlrm_memory``, ``hstu_memory``);
    ``compiled_loss``: the job's chunked loss runs compiled (``COMPILED_LOSS_CHUNKS_LIVE``;
    ``Execution.compiled_loss``); ``traits``: what the stack holds differently from the job (None: the job)."""
    family = family_of(model)
    if traits is None:  # a user's family may take no traits (``Family.memory_breakdown``'s older signature)
        return family.memory_breakdown(model, cfg, gpu, compiled_loss)
    return family.memory_breakdown(model, cfg, gpu, compiled_loss, traits)


def transformer_memory(model: TransformerModel, cfg: TrainingConfig, gpu: GPU, compiled_loss: bool,
                       traits: StackMemoryTraits | None = None) -> MemoryBreakdown:
    """A transformer's peak bytes per GPU (the module docstring), CPU offload's share taken out."""
    breakdown = _transformer_memory(model, cfg, gpu, compiled_loss, traits)
    return _offloaded(model, cfg, breakdown) if cfg.offload != "none" else breakdown


def _offloaded(model: TransformerModel, cfg: TrainingConfig, m: MemoryBreakdown) -> MemoryBreakdown:
    """What stays in HBM under CPU offload (the module docstring), from the breakdown without it."""
    p = cfg.parallelism
    shard = model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=True)  # the rank's optimizer shard
    if p.sharding == "fsdp":  # params = 4 x shard (fp32, the master) + gathered bf16 layers
        kept = 0 if cfg.offload == "optimizer+params" else 2 * shard  # the bf16 shard
        return dataclasses.replace(m, params=m.params - 4 * shard + kept, grads=0.0, optimizer=0.0)
    return dataclasses.replace(m, params=m.params - 4 * shard, optimizer=0.0)  # zero1: the fp32 master shard


def max_micro_batch(model: Model, cfg: TrainingConfig, gpu: GPU, limit: int = 1 << 20, *,
                    compiled_loss: bool = False, traits: StackMemoryTraits | None = None) -> int:
    """The largest micro-batch that fits in HBM with headroom (0 if not even 1 does)."""
    def fits(mb: int) -> bool:
        trial = TrainingConfig(mb, cfg.seq_len, cfg.precision, cfg.parallelism, cfg.activation_checkpointing,
                               lora_rank=cfg.lora_rank, lora_targets=cfg.lora_targets, offload=cfg.offload)
        return memory_breakdown(model, trial, gpu, compiled_loss=compiled_loss, traits=traits).fits

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
