"""What Megatron-Core launches for one Llama training step on one GPU: its local layer spec (measured) and its
TransformerEngine spec as NeMo runs it (not measured: TE does not build for the lent H200).

``megatron-local`` is ``benchmarks/stacks/megatron_runs.py``: Megatron-Core 0.19.2, ``get_gpt_layer_local_spec``,
bf16 parameters, ``DistributedDataParallel`` with an fp32 grad buffer, the distributed optimizer over fp32 main
parameters with ``torch.optim.AdamW`` (foreach; Megatron's fallback without TE or Apex,
megatron/core/optimizer/__init__.py). Per block, in ``[s, b, h]`` layout (file:function of megatron/core):

- ``torch.nn.RMSNorm`` (transformer/torch_norm.py ``WrappedTorchNorm``: Apex absent) = ``F.rms_norm``'s kernel;
- one QKV GEMM (``ColumnParallelLinear`` h -> q + 2 kv); k and v stay views of its output, q is reshaped off its
  strided split into a copy (attention.py ``get_query_key_value_tensors``: ``query.reshape(..., np, hn)``);
- RoPE unfused (models/common/embeddings/rope_utils.py ``_apply_rotary_pos_emb_bshd``): ``t * cos``,
  ``_rotate_half`` (neg, cat), ``* sin``, add, ``cat((t, t_pass))`` with an empty ``t_pass``;
- core attention (transformer/dot_product_attention.py ``DotProductAttention``), **unfused**: GQA
  ``repeat_interleave`` of k and v, ``baddbmm`` QK^T [b*np, s, s] bf16 (its backward scales dq and dk by alpha),
  fusions/fused_softmax.py ``forward_torch_softmax`` (``masked_softmax_fusion`` off: its kernels come from
  Apex/TE): ``.float()``, the causal mask built per call (``get_default_causal_mask``: ones, triu, bool),
  ``masked_fill_``, ``torch.softmax`` in fp32, ``.bfloat16()``; ``bmm`` with V; ``permute(2, 0, 1, 3)
  .contiguous()``. Backward: ``masked_fill``'s is out of place (a clone, then the fill) and torch's softmax
  backward launches ``grad * output`` before its row reduction (aten/src/ATen/native/cuda/SoftMax.cu
  ``softmax_backward_cuda_out``);
- ``linear_proj`` GEMM, bias-dropout-add = ``residual + x`` (dropout 0: no kernel);
- ``linear_fc1`` one gate+up GEMM h -> 2f, ``glu`` = ``chunk``, ``F.silu`` of the gate half, ``up +
  glu_linear_offset`` (0.0, still a kernel: it makes the strided half contiguous), ``*`` (transformer/mlp.py),
  ``linear_fc2``;
- every weight gradient, the norms' included, added to its fp32 ``main_grad`` by DDP's hook
  (distributed/distributed_data_parallel.py ``param.main_grad.add_(param.grad.data)``:
  ``gradient_accumulation_fusion`` needs Apex).

Checked kernel by kernel against the H200 trace of the fit row ``1b mb1 s2048 ac=none`` and the kernel lists of the
other fit rows (benchmarks/results/h200/stacks/megatron/README.md, "Fit"). Three kernels run below the streaming
bandwidth their TensorIterator path would give and are priced at their own measured fractions (specs/efficiency.yaml):
the bf16 -> fp32 casts (``unrolled_elementwise_kernel<direct_copy>``: ``memory_fraction.upcast_copy``) and torch's
fp32 softmax forward, a warp per row up to 2048 columns (``softmax_warp_forward``: ``memory_fraction.softmax_warp``),
a block per row above (``cunn_SoftMaxForwardReg``: ``memory_fraction.softmax_block``).

Loss: tensor_parallel/cross_entropy.py ``VocabParallelCrossEntropy``: ``.float()``, max, in-place ``-=`` max,
``exp``, sum, ``div_``; backward ``mul_`` by the grad and ``.to(bf16)``.

``megatron`` (TE, as NeMo's Llama recipes set it: ``TELayerNormColumnParallelLinear``, ``apply_rope_fusion``,
``bias_activation_fusion``, ``TEDotProductAttention``, ``gradient_accumulation_fusion``,
``cross_entropy_loss_fusion``, TE ``FusedAdam``): one fused kernel per norm, RoPE, SwiGLU; flash attention; the
wgrad GEMM accumulates into ``main_grad`` in fp32 (no add kernel); a fused Adam. Its per-element bytes are read
from TE's kernels' inputs and outputs, not measured: calibrate them on a TE trace.

Conventions are ``stack_kernels``' (``execution.kernels``): one ``Op`` per kernel, bytes per element of the walked
tensor, ``False`` = TensorIterator's non-vectorized path. Forward ops carry ``extra["aten"]``; core attention's ops
carry ``extra["core_attn"]`` (what Megatron's selective recompute reruns).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from workbench.graph import te_fp8
from workbench.graph.execution import Kernel
from workbench.graph.ops import Op, attention, gemm, gemm_with_grads
from workbench.graph.stack_kernels import (
    MTA_BLOCKS_PER_LAUNCH,
    MTA_CHUNK_ELEMENTS,
    Dims,
    _k,
    _tag,
    embedding_ops,
    rmsnorm_tables,
    StackFlavor,
)
from workbench.graph import stack_kernels_megatron_gpt as gpt
from workbench.graph.stack_kernels_megatron_moe import Experts, expert_parameters, moe_ops, router_parameters
from workbench.graph.te_fp8 import TeFp8Recipe

MEGATRON_POLICIES = ("none", "selective-core-attn", "full-uniform")
"""Megatron's recompute: none; ``selective-core-attn`` (``recompute_granularity="selective"``,
``recompute_modules=["core_attn"]``: the core attention's forward reruns in backward, its inputs q, k, v saved);
``full-uniform`` (``recompute_method="uniform"``, ``recompute_num_layers=1``: tensor_parallel/random.py
``CheckpointFunction`` saves each layer's input and reruns the whole layer, its last add included)."""


@dataclass(frozen=True)
class MegatronFlavor:
    """Which of Megatron-Core's layer specs runs the step."""

    name: str
    te: bool
    """TransformerEngine's spec (fused kernels) or the local spec (Megatron-Core's own modules)."""
    tied: bool = False
    compile_blocks: bool = False
    """Never compiled (``workbench.stack_memory.launch_counts`` reads these two)."""
    compile_loss: bool = False
    fp8: TeFp8Recipe = "none"
    """TransformerEngine's fp8 recipe on the blocks' linears (``workbench.graph.te_fp8``); ``none``: bf16."""
    fp8_transpose: bool = True
    """Whether fp8 column-wise data is a transposed copy (Hopper); False where fp8 GEMMs take any layout
    (Blackwell: ``te_fp8``)."""
    bf16_end_blocks: tuple[int, int] = (0, 0)
    """Blocks kept in bf16 at the model's start and end under fp8 (the stack's ``fp8_bf16_end_blocks``)."""
    gpt_block: bool = False
    """GPT-2/GPT-3 blocks as TE's TransformerLayer runs them (``stack_kernels_megatron_gpt``: LayerNorm, GeLU MLP,
    biases, learned positions; TE spec only); False: Llama-style blocks (RMSNorm, SwiGLU, RoPE)."""

    def as_stack_flavor(self) -> StackFlavor:
        """The plain tables' flavor for the pieces they share (embedding): bf16 parameters, no autocast."""
        return StackFlavor(self.name, "bf16", tied=self.tied)


def megatron_flavor(te: bool) -> MegatronFlavor:
    return MegatronFlavor("megatron" if te else "megatron-local", te)


# ---------------------------------------------------------------------------------------------------------------
# Local spec tables, per element of the walked tensor (bf16 activations; fp32 inside the softmax).

# _apply_rotary_pos_emb_bshd per element of q (or k): t * cos_ (broadcast [s, 1, 1, d]), -x2 on half the elements,
# cat((-x2, x1)), * sin_, the add, cat((t, t_pass)); cos/sin of the [s, d] freqs (cos, * mscale, .to) launch only.
ROPE_LOCAL_FWD: tuple[Kernel, ...] = (
    ("cos", 0, 0, True), ("cos_mscale", 0, 0, True), ("cos_to", 0, 0, True), ("sin", 0, 0, True),
    ("sin_mscale", 0, 0, True), ("sin_to", 0, 0, True), ("mul_cos", 2, 2, False), ("neg", 1, 1, False),
    ("cat_rotate", 2, 2, False), ("mul_sin", 2, 2, False), ("add", 4, 2, True), ("cat_pass", 2, 2, False))
# backward: grad * sin, cat's slices, neg, chunk's cat, grad * cos, the two grads' sum, t[..., :rot_dim]'s
# slice_backward (zeros + copy)
ROPE_LOCAL_BWD: tuple[Kernel, ...] = (
    ("mul_sin", 2, 2, False), ("neg", 1, 1, False), ("chunk_cat", 2, 2, False), ("mul_cos", 2, 2, False),
    ("grad_add", 4, 2, True), ("slice_zeros", 0, 2, True), ("slice_copy", 2, 2, False))
# repeat_interleave(np/ng) of k or v per element of the repeated [s, b, np, hn]: reads 1/g of it; backward sums
# the g copies (derivatives.yaml repeat_interleave_backward_int: a reduction)
def repeat_kv_tables(group: int) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    return (("repeat_interleave", 2 / group, 2, False),), (("repeat_sum", 2, 2 / group, True),)


# forward_torch_softmax per score [b*np, s, s]: .float(), masked_fill_ in place (broadcast [s, s] bool: not
# vectorized), softmax (one read, one write), .bfloat16(); backward: the bf16 grad to fp32,
# softmax_backward_cuda_out's tmp = grad * output, then its row kernel (cunn_SoftMaxBackwardSmem: reads tmp and
# output), masked_fill's out-of-place backward (a device-to-device clone, then the fill), to bf16. H200, fit row
# 1b s2048 (134 M scores a layer): forward 386, 405, 341, 186 us; backward 384, 371, 370, 254, 405, 186 us.
SOFTMAX_LOCAL_FWD: tuple[Kernel, ...] = (("scores.float", 2, 4, False), ("masked_fill", 4, 4, False),
                                         ("softmax", 4, 4, True), ("probs.bfloat16", 4, 2, True))
SOFTMAX_LOCAL_BWD: tuple[Kernel, ...] = (("grad.float", 2, 4, False), ("grad_times_probs", 8, 4, True),
                                         ("softmax_backward", 8, 4, True), ("masked_fill.clone", 4, 4, True),
                                         ("masked_fill", 4, 4, False), ("grad.bfloat16", 4, 2, True))
SOFTMAX_WARP_MAX_COLUMNS = 2048
"""torch's fp32 softmax forward runs a warp per row up to this many columns (SoftMax.cu ``host_softmax``:
``dim_size <= 2048 && dim_size * sizeof(scalar_t) <= 8192``), a block per row above."""
UPCAST = "upcast_copy"
"""The bf16 -> fp32 casts' kernel (``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``): priced at
``memory_fraction.upcast_copy``, not the unvectorized path's guess."""


def _at_fraction(ops: list[Op], prefix: str, kinds: dict[str, str]) -> list[Op]:
    """``ops`` (``_k(prefix, ...)``), the kernels named in ``kinds`` priced at ``memory_fraction.<kind>``."""
    out = []
    for op in ops:
        kind = kinds.get(op.name[len(prefix) + 1:])
        if kind is not None:
            extra = {k: v for k, v in op.extra.items() if k != "unvectorized"}
            op = dataclasses.replace(op, extra={**extra, "bandwidth_kind": kind})
        out.append(op)
    return out
# get_default_causal_mask(sq) per [s, s] element, every call: torch.ones (fp32), triu, .bool()
CAUSAL_MASK: tuple[Kernel, ...] = (("ones", 0, 4, True), ("triu", 4, 4, True), ("bool", 4, 1, True))
# glu per element of [T, f]: F.silu of the strided gate half, up + glu_linear_offset (strided in, contiguous out),
# their product (both contiguous: vectorized); backward: the two products (vectorized), silu_backward (on the
# strided half), chunk's backward cat into [T, 2f] (CatArrayBatchedCopy_vectorized); the add's backward is the grad
GLU_LOCAL_FWD: tuple[Kernel, ...] = (("silu", 2, 2, False), ("up_offset", 2, 2, False), ("mul", 4, 2, True))
GLU_LOCAL_BWD: tuple[Kernel, ...] = (("mul_up", 4, 2, True), ("mul_gate", 4, 2, True),
                                     ("silu_backward", 4, 2, False), ("chunk_cat", 4, 4, True))
RESIDUAL_ADD: tuple[Kernel, ...] = (("residual_add", 4, 2, True),)
GRAD_ACCUMULATE: tuple[Kernel, ...] = (("grad_accumulate", 4, 2, True),)
# split of mixed_qkv: q's reshape off its strided view copies it (per element of q; both specs); the local
# backward cats the q, k, v grads into [s, b, ng, (np/ng + 2) hn]
QUERY_RESHAPE: tuple[Kernel, ...] = (("query_reshape", 2, 2, False),)
QKV_SPLIT_BWD: tuple[Kernel, ...] = (("qkv_cat", 2, 2, False),)
# baddbmm's backward scales the bmm grads of q and k by alpha = 1/sqrt(hn), per element of [b*np, s, hn]
ALPHA_SCALE: tuple[Kernel, ...] = (("alpha_scale", 2, 2, True),)
STRIDED_COPY: tuple[Kernel, ...] = (("strided_copy", 2, 2, False),)
# DDP's hook per weight element: fp32 main_grad += bf16 grad (mixed dtypes: not vectorized)
MAIN_GRAD_ADD: tuple[Kernel, ...] = (("main_grad_add", 6, 4, False),)
# VocabParallelCrossEntropy per logit: .float(), max, -= max (broadcast), exp_, sum, div_ (broadcast);
# backward: mul_ by grad_output (broadcast), .float()'s backward to bf16
LOSS_LOCAL_FWD: tuple[Kernel, ...] = (("logits.float", 2, 4, False), ("max", 4, 0, True), ("sub_max", 4, 4, False),
                                      ("exp", 4, 4, True), ("sum", 4, 0, True), ("div", 4, 4, False))
LOSS_LOCAL_BWD: tuple[Kernel, ...] = (("mul_grad", 4, 4, False), ("dlogits.to_bf16", 4, 2, True))

# ---------------------------------------------------------------------------------------------------------------
# TE spec tables (not measured; guess, calibrate me on a TE trace). TE's rmsnorm fwd (transformer_engine/common/
# normalization: reads x, writes the bf16 ln_out and fp32 rsigma per row) and bwd (reads dy, x; writes dx; dgamma
# partial sums); fused RoPE (transformer_engine/common/fused_rope: one read, one write per element each way);
# megatron/core/fusions/fused_bias_swiglu.py (jit_fuser: one kernel reads gate and up, writes the product;
# backward reads both and the grad, writes both grads).
NORM_TE_FWD: tuple[Kernel, ...] = (("te_rmsnorm", 2, 2, True),)
NORM_TE_BWD: tuple[Kernel, ...] = (("te_rmsnorm_bwd", 4, 2, True), ("te_dgamma_reduce", 0, 0, True))
ROPE_TE_FWD: tuple[Kernel, ...] = (("te_fused_rope", 2, 2, True),)
ROPE_TE_BWD: tuple[Kernel, ...] = (("te_fused_rope_bwd", 2, 2, True),)
SWIGLU_FUSED_FWD: tuple[Kernel, ...] = (("bias_swiglu", 4, 2, True),)
SWIGLU_FUSED_BWD: tuple[Kernel, ...] = (("bias_swiglu_bwd", 6, 4, True),)
# fusions/fused_cross_entropy.py (jit_fuser'd VocabParallelCrossEntropy): the fp32 upcast and max in one pass,
# exp/sum in a second writing the fp32 softmax, backward one pass to bf16 dlogits: guess, calibrate me
LOSS_FUSED_FWD: tuple[Kernel, ...] = (("logits_max", 2, 0, True), ("exp_sum", 2, 4, True))
LOSS_FUSED_BWD: tuple[Kernel, ...] = (("dlogits", 4, 2, True),)


TP_OVERLAP_PARTNERS: dict[str, str] = {
    "linear_qkv.fwd": "qkv_fprop", "linear_proj.fwd": "proj_fprop", "linear_fc1.fwd": "fc1_fprop",
    "linear_fc2.fwd": "fc2_fprop", "linear_proj.dgrad": "proj_dgrad", "linear_fc2.dgrad": "fc2_dgrad",
    "linear_qkv.dgrad": "qkv_dgrad", "linear_fc1.dgrad": "fc1_dgrad", "linear_qkv.wgrad": "qkv_wgrad",
    "linear_fc1.wgrad": "fc1_wgrad"}
"""Each GEMM TE's userbuffers overlap a sequence-parallel collective with -> its slot in NeMo's
tp_overlap_configs/userbuffers.py ``TransformerLayerTPOverlapCfg`` (TE's ``initialize_ub`` names): the
column-parallel fprops' input all-gathers and the row-parallel dgrads' dy all-gathers (``qkv_fprop``,
``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``), the row-parallel fprops' reduce-scatters (``proj_fprop``,
``fc2_fprop``), the column-parallel dgrads' re-gather of their saved local input (``qkv_dgrad``, ``fc1_dgrad``)
and their output's reduce-scatter behind the wgrad GEMM (``qkv_wgrad``, ``fc1_wgrad``). Tagged
``extra["tp_overlap"]`` (``workbench.graph.te_tp_overlap`` prices each slot as NeMo configures it)."""


def _gemm_grads(name: str, t: int, i: int, o: int, count: int, layer: str, mm_index: int,
                flavor: MegatronFlavor, *, casts_input: bool = False, casts_grad: bool = True
                ) -> tuple[list[Op], list[Op]]:
    """A linear y[t, o] = x[t, i] W^T: forward GEMM, dgrad and wgrad, and the weight gradient into main_grad
    (the local spec's DDP hook add; TE's gradient_accumulation_fusion writes main_grad from the wgrad GEMM,
    which then reads and writes the fp32 [i, o] accumulator: priced as extra wgrad output bytes). Under TE fp8
    the three GEMMs run in fp8 with dy's cast (and, ``casts_input``, a plain Linear's input cast: a
    LayerNormLinear's input is its norm's output, ``block_ops``; ``casts_grad`` False: dy's cast is fused into the
    kernel before, a GPT block's dgelu); the weight's casts are once per step."""
    f, dg, wg = gemm_with_grads(name, t, o, i, te_fp8.gemm_dtype(flavor.fp8), count=count, layer=layer)
    fwd: list[Op] = []
    bwd = [dg]
    if flavor.te:
        bwd.append(dataclasses.replace(wg, bytes_read=wg.bytes_read + 4 * i * o, bytes_written=4 * i * o))
        for op in (f, *bwd):
            if op.name in TP_OVERLAP_PARTNERS:
                op.extra["tp_overlap"] = TP_OVERLAP_PARTNERS[op.name]
    else:
        bwd.append(wg)
        bwd += _k(f"{name}.main_grad", "add", MAIN_GRAD_ADD, i * o, "bwd", count, layer, "main_grad")
    if flavor.fp8 != "none":
        if casts_input:
            fwd += te_fp8.input_casts(_k, name, flavor.fp8, t, i, flavor.fp8_transpose, count, layer)
        if casts_grad:
            bwd = te_fp8.grad_output_casts(_k, name, flavor.fp8, t, o, flavor.fp8_transpose, count, layer) + bwd
    return fwd + _tag([f], aten="mm", mm_index=mm_index), bwd


def core_attention_ops(d: Dims, flavor: MegatronFlavor, count: int) -> tuple[list[Op], list[Op]]:
    """(forward, backward) of the core attention, every forward op tagged ``core_attn``."""
    shape = d.attention_shape()  # under cp (TE only): cp ring blocks of the local sequence
    if flavor.te:  # TEDotProductAttention: cuDNN / flash fused attention
        fwd = [attention("core_attn.fwd", shape, "bf16", phase="fwd", count=count, layer="attention")]
        bwd = [attention("core_attn.bwd", shape, "bf16", phase="bwd", count=count, layer="attention")]
        return _tag(fwd, aten="sdpa", core_attn=True), bwd
    t, s, heads, hd = d.tokens, d.seq, d.heads, d.head_dim
    scores = d.batch * heads * s * s
    group = d.heads // d.kv_heads
    fwd: list[Op] = []
    bwd: list[Op] = []
    if group > 1:
        rf, rb = repeat_kv_tables(group)
        for x in ("k", "v"):
            fwd += _k(f"core_attn.repeat_{x}", "copy", rf, t * d.q, "fwd", count, "attention", "copy")
            bwd += _k(f"core_attn.repeat_{x}", "copy", rb, t * d.q, "bwd", count, "attention", "copy")
    batched = d.batch * heads  # [b*np] independent [s, hn] x [hn, s] products
    fwd.append(gemm("core_attn.qk", s, s, hd, "bf16", groups=batched, count=count, layer="attention"))
    bwd += [gemm("core_attn.qk.dq", s, hd, s, "bf16", phase="bwd", groups=batched, count=count, layer="attention"),
            gemm("core_attn.qk.dk", s, hd, s, "bf16", phase="bwd", groups=batched, count=count, layer="attention")]
    fwd += _k("core_attn.mask", "softmax", CAUSAL_MASK, s * s, "fwd", count, "attention", "mask")
    softmax = "softmax_warp" if s <= SOFTMAX_WARP_MAX_COLUMNS else "softmax_block"
    fwd += _at_fraction(_k("core_attn.softmax", "softmax", SOFTMAX_LOCAL_FWD, scores, "fwd", count, "attention",
                           "softmax", rows=batched * s), "core_attn.softmax", {"scores.float": UPCAST, "softmax": softmax})
    bwd += _at_fraction(_k("core_attn.softmax", "softmax", SOFTMAX_LOCAL_BWD, scores, "bwd", count, "attention",
                           "softmax", rows=batched * s), "core_attn.softmax", {"grad.float": UPCAST})
    for x in ("q", "k"):  # [b*np, s, hn] each (k repeated)
        bwd += _k(f"core_attn.qk.d{x}", "copy", ALPHA_SCALE, t * d.q, "bwd", count, "attention", "copy")
    fwd.append(gemm("core_attn.pv", s, hd, s, "bf16", groups=batched, count=count, layer="attention"))
    bwd += [gemm("core_attn.pv.dprobs", s, s, hd, "bf16", phase="bwd", groups=batched, count=count, layer="attention"),
            gemm("core_attn.pv.dv", s, hd, s, "bf16", phase="bwd", groups=batched, count=count, layer="attention")]
    fwd += _k("core_attn.context", "copy", STRIDED_COPY, t * d.q, "fwd", count, "attention", "copy")
    bwd += _k("core_attn.context_grad", "copy", STRIDED_COPY, t * d.q, "bwd", count, "attention", "copy")
    return _tag(fwd, core_attn=True), bwd


def _linear_after_norm(d: Dims, flavor: MegatronFlavor, name: str, o: int, layer: str, mm_index: int,
                       **grads) -> tuple[list[Op], list[Op]]:
    """The linear of a TE LayerNormLinear / LayerNormMLP after its norm (the norm itself is the caller's): the
    norm output's fp8 casts under an fp8 recipe, then the linear's GEMMs (``_gemm_grads``, ``grads`` its cast
    flags)."""
    n, t, ts = d.layers, d.tokens, d.stream_tokens
    fwd: list[Op] = []
    bwd: list[Op] = []
    if flavor.fp8 != "none":
        fwd, bwd = te_fp8.norm_output_casts(_k, name, flavor.fp8, ts, t, d.hidden, flavor.fp8_transpose, n, layer)
    f, b = _gemm_grads(name, t, d.hidden, o, n, layer, mm_index, flavor, **grads)
    return fwd + f, bwd + b


def block_ops(d: Dims, flavor: MegatronFlavor, experts: Experts | None = None) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of the ``d.layers`` blocks (count = layers), without recomputation;
    ``experts``: an MoE model's routed experts on this rank (``stack_kernels_megatron_moe``: TE spec only)."""
    if flavor.gpt_block:
        return gpt_block_ops(d, flavor)
    n, t, ts = d.layers, d.tokens, d.stream_tokens  # ts: t / tp under sequence parallelism
    th = ts * d.hidden  # the residual stream's elements: norms, bias-dropout-adds and their grads
    fwd: list[Op] = []
    bwd: list[Op] = []
    norm_f, norm_b = (NORM_TE_FWD, NORM_TE_BWD) if flavor.te else rmsnorm_tables(2)
    norm_f = te_fp8.norm_table(flavor.fp8, norm_f)  # a LayerNormLinear's norm: fp8 out under delayed scaling

    def layernorm_linear(name: str, o: int, layer: str, mm_index: int) -> None:
        nonlocal fwd, bwd
        f, b = _linear_after_norm(d, flavor, name, o, layer, mm_index)
        fwd += f
        bwd += b

    # --- attention: input_layernorm -> linear_qkv -> RoPE(q, k) -> core attention -> linear_proj -> + x
    fwd += _k("input_layernorm", "rmsnorm", norm_f, th, "fwd", n, "attention", "rms_norm", rows=ts)
    layernorm_linear("linear_qkv", d.q + 2 * d.kv, "attention", 1)
    fwd += _k("linear_qkv.split", "copy", QUERY_RESHAPE, t * d.q, "fwd", n, "attention", "copy")
    if not flavor.te:
        bwd += _k("linear_qkv.split", "copy", QKV_SPLIT_BWD, t * (d.q + 2 * d.kv), "bwd", n, "attention", "copy")
    rope_f, rope_b = (ROPE_TE_FWD, ROPE_TE_BWD) if flavor.te else (ROPE_LOCAL_FWD, ROPE_LOCAL_BWD)
    for x, w in (("q", d.q), ("k", d.kv)):
        fwd += _k(f"rope.{x}", "rope", rope_f, t * w, "fwd", n, "attention", "rope", rows=d.seq * d.head_dim)
        bwd += _k(f"rope.{x}", "rope", rope_b, t * w, "bwd", n, "attention", "rope", rows=d.seq * d.head_dim)
    f, b = core_attention_ops(d, flavor, n)
    fwd += f
    bwd += b
    f, b = _gemm_grads("linear_proj", t, d.q, d.hidden, n, "attention", 2, flavor, casts_input=True)
    fwd += f
    bwd += b
    fwd += _k("self_attn_bda", "add", RESIDUAL_ADD, th, "fwd", n, "attention", "add")
    bwd += _k("input_layernorm", "rmsnorm", norm_b, th, "bwd", n, "attention", "rms_norm", rows=ts)
    bwd += _k("input_layernorm.main_grad", "add", MAIN_GRAD_ADD, d.hidden, "bwd", n, "attention", "main_grad")
    bwd += _k("attn.residual_grad", "add", GRAD_ACCUMULATE, th, "bwd", n, "attention", "add")
    # --- MLP: pre_mlp_layernorm -> linear_fc1 (gate | up) -> glu -> linear_fc2 -> + x (MoE: the routed experts)
    if experts is not None:
        if not flavor.te:
            raise ValueError("Megatron's MoE tables are the TE spec's (megatron stack), not the local spec's")
        fwd += _k("pre_mlp_layernorm", "rmsnorm", NORM_TE_FWD, th, "fwd", n, "mlp", "rms_norm", rows=ts)
        f, b = moe_ops(d, experts, flavor, _gemm_grads, (SWIGLU_FUSED_FWD, SWIGLU_FUSED_BWD), MAIN_GRAD_ADD)
        fwd += f
        bwd += b
        fwd += _k("mlp_bda", "add", RESIDUAL_ADD, th, "fwd", n, "mlp", "add")
        bwd += _k("pre_mlp_layernorm", "rmsnorm", NORM_TE_BWD, th, "bwd", n, "mlp", "rms_norm", rows=ts)
    else:
        fwd += _k("pre_mlp_layernorm", "rmsnorm", norm_f, th, "fwd", n, "mlp", "rms_norm", rows=ts)
        layernorm_linear("linear_fc1", 2 * d.ffn, "mlp", 3)
        glu_f, glu_b = (SWIGLU_FUSED_FWD, SWIGLU_FUSED_BWD) if flavor.te else (GLU_LOCAL_FWD, GLU_LOCAL_BWD)
        fwd += _k("glu", "swiglu", glu_f, t * d.ffn, "fwd", n, "mlp", "swiglu")
        bwd += _k("glu", "swiglu", glu_b, t * d.ffn, "bwd", n, "mlp", "swiglu")
        f, b = _gemm_grads("linear_fc2", t, d.ffn, d.hidden, n, "mlp", 4, flavor, casts_input=True)
        fwd += f
        bwd += b
        fwd += _k("mlp_bda", "add", RESIDUAL_ADD, th, "fwd", n, "mlp", "add")
        bwd += _k("pre_mlp_layernorm", "rmsnorm", norm_b, th, "bwd", n, "mlp", "rms_norm", rows=ts)
    bwd += _k("pre_mlp_layernorm.main_grad", "add", MAIN_GRAD_ADD, d.hidden, "bwd", n, "mlp", "main_grad")
    bwd += _k("mlp.residual_grad", "add", GRAD_ACCUMULATE, th, "bwd", n, "mlp", "add")
    return fwd, bwd


def gpt_block_ops(d: Dims, flavor: MegatronFlavor) -> tuple[list[Op], list[Op]]:
    """``block_ops`` of GPT-2/GPT-3 blocks under TE's TransformerLayer (``stack_kernels_megatron_gpt``): LayerNorm
    -> biased QKV (no RoPE, no split copy) -> attention -> proj -> bias-dropout-add; LayerNorm -> fc1 -> gelu -> fc2
    -> bias-dropout-add; the biases' and norms' gradients."""
    if not flavor.te:
        raise ValueError("GPT blocks are in the TE spec's tables (megatron stack), not the local spec's")
    n, t, ts = d.layers, d.tokens, d.stream_tokens
    th = ts * d.hidden
    recipe, transpose = flavor.fp8, flavor.fp8_transpose
    norm_f, norm_b = gpt.norm_tables(recipe)
    fwd: list[Op] = []
    bwd: list[Op] = []

    def norm_linear(norm: str, name: str, o: int, layer: str, mm_index: int, **grads) -> None:
        """A LayerNormLinear / LayerNormMLP's norm, its output's fp8 casts and the linear after it."""
        nonlocal fwd, bwd
        fwd += _k(norm, "layernorm", norm_f, th, "fwd", n, layer, "layer_norm", rows=ts)
        f, b = _linear_after_norm(d, flavor, name, o, layer, mm_index, **grads)
        fwd += f
        bwd += b

    def residual(name: str, norm: str, layer: str) -> None:
        """The block half's bias-dropout-add (the returned bias's gradient) and its norm's backward."""
        nonlocal fwd, bwd
        fwd += _k(f"{layer}_bda", "add", RESIDUAL_ADD, th, "fwd", n, layer, "add")
        bwd += gpt.row_bias_grad_ops(name, d, n, layer)
        bwd += _k(norm, "layernorm", norm_b, th, "bwd", n, layer, "layer_norm", rows=ts)
        bwd += _k(f"{layer}.residual_grad", "add", GRAD_ACCUMULATE, th, "bwd", n, layer, "add")

    # --- attention: LayerNormLinear(qkv, bias in the epilogue) -> fused attention -> proj (bias returned)
    norm_linear("input_layernorm", "linear_qkv", d.q + 2 * d.kv, "attention", 1)
    bwd += gpt.qkv_bias_grad_ops(d, recipe, n)
    f, b = core_attention_ops(d, flavor, n)
    fwd += f
    bwd += b
    f, b = _gemm_grads("linear_proj", t, d.q, d.hidden, n, "attention", 2, flavor, casts_input=True)
    fwd += f
    bwd += b
    residual("linear_proj", "input_layernorm", "attention")
    # --- MLP: LayerNormMLP = norm -> fc1 (bias in the epilogue under fp8) -> gelu -> fc2 (bias returned)
    norm_linear("pre_mlp_layernorm", "linear_fc1", d.ffn, "mlp", 3, casts_grad=False)
    f, b = gpt.gelu_ops(d, recipe, transpose, n)
    fwd += f
    bwd += b
    f, b = _gemm_grads("linear_fc2", t, d.ffn, d.hidden, n, "mlp", 4, flavor)
    fwd += f
    bwd += b
    residual("linear_fc2", "pre_mlp_layernorm", "mlp")
    for name, elements, layer in gpt.small_parameters(d):
        bwd += _k(f"{name}.main_grad", "add", MAIN_GRAD_ADD, elements, "bwd", n, layer, "main_grad")
    return fwd, bwd


def recompute_ops(fwd: list[Op], policy: str) -> list[Op]:
    """The forward kernels ``policy`` reruns in backward (``MEGATRON_POLICIES``), prefixed ``recompute.``."""
    if policy == "none":
        return []
    if policy == "selective-core-attn":
        rerun = [op for op in fwd if op.extra.get("core_attn")]
    elif policy == "full-uniform":
        rerun = list(fwd)
    else:
        raise ValueError(f"unknown Megatron recompute policy {policy!r} (one of {', '.join(MEGATRON_POLICIES)})")
    return [dataclasses.replace(op, name=f"recompute.{op.name}", phase="bwd") for op in rerun]


def head_ops(d: Dims, flavor: MegatronFlavor) -> list[Op]:
    """final_layernorm, output_layer (+ main_grad, or the tied table's grad accumulation), the fp32 loss."""
    t, h, v, ts = d.tokens, d.hidden, d.vocab, d.stream_tokens
    if flavor.gpt_block:  # TE's LayerNorm, weight and bias
        norm_f, norm_b = gpt.norm_tables("none")
        ops = _k("final_layernorm", "layernorm", norm_f, ts * h, "fwd", 1, "head", "layer_norm", rows=ts)
        ops += _k("final_layernorm", "layernorm", norm_b, ts * h, "bwd", 1, "head", "layer_norm", rows=ts)
        ops += _k("final_layernorm.bias.main_grad", "add", MAIN_GRAD_ADD, h, "bwd", 1, "head", "main_grad")
    else:
        norm_f, norm_b = (NORM_TE_FWD, NORM_TE_BWD) if flavor.te else rmsnorm_tables(2)
        ops = _k("final_layernorm", "rmsnorm", norm_f, ts * h, "fwd", 1, "head", "rms_norm", rows=ts)
        ops += _k("final_layernorm", "rmsnorm", norm_b, ts * h, "bwd", 1, "head", "rms_norm", rows=ts)
    ops += _k("final_layernorm.main_grad", "add", MAIN_GRAD_ADD, h, "bwd", 1, "head", "main_grad")
    f, dg, wg = gemm_with_grads("output_layer", t, v, h, "bf16", layer="head")
    ops += [f, dg, wg]
    if flavor.tied:  # autograd sums the head's and the embedding's gradients of one table, then one hook add
        ops += _k("tied.grad_accumulate", "add", GRAD_ACCUMULATE, v * h, "bwd", 1, "head", "add")
    ops += _k("output_layer.main_grad", "add", MAIN_GRAD_ADD, v * h, "bwd", 1, "head", "main_grad")
    loss_f, loss_b = (LOSS_FUSED_FWD, LOSS_FUSED_BWD) if flavor.te else (LOSS_LOCAL_FWD, LOSS_LOCAL_BWD)
    ops += _at_fraction(_k("loss", "cross_entropy", loss_f, t * v, "fwd", 1, "head", "loss", rows=t), "loss",
                        {} if flavor.te else {"logits.float": UPCAST})
    ops += _k("loss", "cross_entropy", loss_b, t * v, "bwd", 1, "head", "loss", rows=t)
    return ops


def megatron_embedding_ops(d: Dims, flavor: MegatronFlavor) -> list[Op]:
    """The plain tables' F.embedding (bf16), the [b, s, h] -> [s, b, h] copy for b > 1, and the table's
    main_grad add (untied only: a tied table's add is the head's)."""
    ops = embedding_ops(d, flavor.as_stack_flavor())
    if d.batch > 1:
        ops += _k("embedding.transpose", "copy", STRIDED_COPY, d.tokens * d.hidden, "fwd", 1, "embedding", "copy")
    if not flavor.tied:
        ops += _k("embedding.main_grad", "add", MAIN_GRAD_ADD, d.vocab * d.hidden, "bwd", 1, "embedding", "main_grad")
    if flavor.gpt_block:  # learned absolute positions
        ops += gpt.position_embedding_ops(d, flavor.as_stack_flavor().stream_bytes, MAIN_GRAD_ADD)
    return ops


# Optimizer, per fp32 main parameter. Local: torch.optim.AdamW foreach (torch/optim/adam.py _multi_tensor_adam,
# capturable off): _foreach_mul_ (decay), lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_; TE: FusedAdam's one
# multi_tensor_adam kernel (reads p, g, m, v; writes p, m, v). Both: the zeroed fp32 grad buffer
# (zero_grad_buffer), the grad norm (clip_grad = 1.0: a read), the clip's scale (local_multi_tensor_scale:
# src * scale, copy_; TE: multi_tensor_scale), and _copy_main_params_to_model_params (fp32 -> bf16). The clip's
# scale runs only when the norm exceeds clip_grad (the measured rows: both profiled steps of 1b s4096, one of two
# of 1b s2048): priced as always. The local norm syncs the host once per tensor and once more
# (optimizer/clip_grads.py's fallback local_multi_tensor_l2_norm: torch.tensor(per-tensor norms) reads each 0-dim
# CUDA norm, then float() of their norm): a 4-byte device-to-host copy each (grad_norm_syncs).
ADAMW_FOREACH: tuple[Kernel, ...] = (
    ("decay_mul", 4, 4, True), ("lerp", 8, 4, True), ("mul", 4, 4, True), ("addcmul", 12, 4, True),
    ("sqrt", 4, 4, True), ("div", 4, 4, True), ("add_eps", 4, 4, True), ("addcdiv", 12, 4, True))
ADAM_FUSED: tuple[Kernel, ...] = (("multi_tensor_adam", 16, 12, True),)
GRAD_BUFFER_ZERO: tuple[Kernel, ...] = (("zero_grad_buffer", 0, 4, True),)
GRAD_NORM: tuple[Kernel, ...] = (("grad_norm", 4, 0, True),)
CLIP_LOCAL: tuple[Kernel, ...] = (("clip_mul", 4, 4, True), ("clip_copy", 4, 4, True))
CLIP_TE: tuple[Kernel, ...] = (("multi_tensor_scale", 4, 4, True),)
MAIN_TO_MODEL: tuple[Kernel, ...] = (("main_to_bf16_param", 4, 2, True),)
NORM_ITEM: tuple[Kernel, ...] = (("norm_item", 0, 0, True),)


def grad_norm_syncs(tensors: int, flavor: MegatronFlavor) -> int:
    """Host syncs of the gradient norm: one per tensor and the total (local), the total only (TE's
    multi_tensor_l2norm)."""
    return 1 if flavor.te else tensors + 1


def optimizer_ops(params: int, tensors: int, flavor: MegatronFlavor, fp8_params: int = 0) -> list[Op]:
    """The once-per-step kernels over ``params`` main parameters in ``tensors`` tensors: the local spec launches
    its per-tensor ops once per tensor, the foreach and fused ones once per 320 chunks of 65536. ``fp8_params``
    of them are fp8 parameters (``fp8_param_gather``): their copy back is ``fp8_step_ops``', not a bf16 one."""
    chunks = max(1, math.ceil(params / (MTA_CHUNK_ELEMENTS * MTA_BLOCKS_PER_LAUNCH)))
    ops = _k("grad_buffer", "optimizer", GRAD_BUFFER_ZERO, params, "optimizer", 1, "optimizer", "optimizer")
    adam = ADAM_FUSED if flavor.te else ADAMW_FOREACH
    adam_ops = _k("adam", "optimizer", adam, params, "optimizer", 1, "optimizer", "optimizer", launches=chunks)
    if flavor.te:  # one fused kernel: priced as fused AdamW (specs/efficiency.yaml memory_fraction.fused_adamw)
        adam_ops = [dataclasses.replace(o, extra={**o.extra, "bandwidth_kind": "fused_adamw"}) for o in adam_ops]
    ops += adam_ops
    per_tensor = 1 if flavor.te else tensors
    ops += _k("clip", "optimizer", GRAD_NORM + (CLIP_TE if flavor.te else CLIP_LOCAL), params, "optimizer", 1,
              "optimizer", "grad_clip", launches=chunks if flavor.te else per_tensor)
    ops += _k("clip", "optimizer", NORM_ITEM, 1, "optimizer", grad_norm_syncs(tensors, flavor), "optimizer",
              "grad_clip")
    ops += _k("main_to_model", "optimizer", MAIN_TO_MODEL, max(1, params - fp8_params), "optimizer", 1, "optimizer",
              "optimizer", launches=tensors)
    return ops


def block_linears(d: Dims, experts: Experts | None = None, gpt_block: bool = False
                  ) -> tuple[tuple[str, int, int, int], ...]:
    """(name, in, out, copies) of one block's linears on this rank (MoE: each local expert's fc1 and fc2; a GPT
    block's fc1 is h -> f, no gate)."""
    attention = (("linear_qkv", d.hidden, d.q + 2 * d.kv, 1), ("linear_proj", d.q, d.hidden, 1))
    if experts is None:
        fc1 = d.ffn if gpt_block else 2 * d.ffn
        return attention + (("linear_fc1", d.hidden, fc1, 1), ("linear_fc2", d.ffn, d.hidden, 1))
    return attention + (("experts.linear_fc1", d.hidden, 2 * d.ffn, experts.local),
                        ("experts.linear_fc2", d.ffn, d.hidden, experts.local))


def fp8_step_ops(d: Dims, flavor: MegatronFlavor, fp8_layers: int, shard: int, experts: Experts | None = None,
                 expert_shard: int = 1) -> list[Op]:
    """Once per step under TE fp8: the ``fp8_layers`` fp8 blocks' weight casts (``te_fp8.weight_step_casts``,
    main shards over ``shard`` ranks; the experts' over ``expert_shard``)."""
    ops: list[Op] = []
    for name, i, o, copies in block_linears(d, experts, flavor.gpt_block):
        ranks = expert_shard if name.startswith("experts.") else shard
        ops += te_fp8.weight_step_casts(_k, name, flavor.fp8, i, o, ranks, flavor.fp8_transpose,
                                        fp8_layers * copies, "optimizer")
    return ops


def fp8_microbatch_ops(flavor: MegatronFlavor) -> list[Op]:
    """Per micro-batch under delayed scaling: the amax and scale update after the forward and after the backward
    autocast region (``te_fp8.AMAX_UPDATE``); nothing for the other recipes."""
    if flavor.fp8 != "delayed":
        return []
    return (_k("fp8_meta", "fp8_quantize", te_fp8.AMAX_UPDATE, 1, "fwd", 1, "head", "fp8_cast")
            + _k("fp8_meta", "fp8_quantize", te_fp8.AMAX_UPDATE, 1, "bwd", 1, "head", "fp8_cast"))


def fp8_layer_split(layers: int, stages: int, flavor: MegatronFlavor) -> tuple[int, int]:
    """(fp8 blocks, bf16 blocks) of the busiest stage's ``layers``: the model's first and last blocks kept in bf16
    (``flavor.bf16_end_blocks``), on one stage both ends, else the larger end (the busiest stage is taken to hold
    the first or the last stage's share)."""
    if flavor.fp8 == "none":
        return 0, layers
    start, end = flavor.bf16_end_blocks
    kept = min(start + end if stages == 1 else max(start, end), layers)
    return layers - kept, kept


def parameter_count(d: Dims, tied: bool, experts: Experts | None = None, gpt_block: bool = False
                    ) -> tuple[int, int]:
    """(parameters, parameter tensors): per block the QKV, proj, fc1, fc2 weights (MoE: the router and the
    local experts' fc1 and fc2) and two norms; the table(s) and the final norm. ``gpt_block``: GPT blocks' weights,
    biases and LayerNorms (``stack_kernels_megatron_gpt.gpt_parameters``), the position table, the final norm's
    bias."""
    if gpt_block:
        block, tensors = gpt.gpt_parameters(d)
        params = (d.layers * block + d.vocab * d.hidden * (1 if tied else 2) + d.seq * d.cp * d.hidden
                  + 2 * d.hidden)
        return params, tensors * d.layers + (2 if tied else 3) + 2
    attention = d.hidden * (d.q + 2 * d.kv) + d.q * d.hidden + 2 * d.hidden
    if experts is None:
        block, tensors = attention + 3 * d.hidden * d.ffn, 6
    else:
        block = attention + router_parameters(d, experts) + expert_parameters(d, experts)
        tensors = 5 + 2 * experts.local
    params = d.layers * block + d.vocab * d.hidden * (1 if tied else 2) + d.hidden
    return params, tensors * d.layers + (2 if tied else 3)


def megatron_step_ops(model, micro_batch: int, seq_len: int, flavor: MegatronFlavor,
                      policy: str = "none") -> list[Op]:
    """Every kernel of one single-GPU, single-micro-batch step of ``flavor`` (counts per step)."""
    d = Dims.of(model, micro_batch, seq_len)
    flavor = dataclasses.replace(flavor, tied=model.tied_embeddings, gpt_block=flavor.te and gpt.is_gpt_block(model))
    fwd, bwd = block_ops(d, flavor)
    params, tensors = parameter_count(d, flavor.tied, gpt_block=flavor.gpt_block)
    return (megatron_embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute_ops(fwd, policy)
            + optimizer_ops(params, tensors, flavor))
