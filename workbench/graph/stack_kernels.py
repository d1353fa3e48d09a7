"""What plain PyTorch (eager or ``torch.compile`` per block) and torchtitan launch for one Llama training step.

``workbench.graph.execution`` models the project's own job; this module models the two stacks users run most:

- ``pytorch-eager``: a loop as ``benchmarks/stacks/plain_pytorch.py`` writes it -- separate q/k/v/o and w1/w2/w3
  ``nn.Linear``s, ``F.rms_norm``, RoPE on the halves (``chunk``/``mul``/``cat``) in the activation dtype, SDPA,
  ``F.cross_entropy(logits.float())``, fused AdamW -- with fp32 parameters under ``torch.autocast(bf16)`` or with
  bf16 parameters and no autocast;
- ``pytorch-compile``: the same with each block under ``torch.compile`` (head, loss, embedding stay eager);
- ``torchtitan`` (0.2.2, llama3): the same layers, RoPE as a complex multiply, the loss compiled with the model
  when compile is on, gradient clipping, per-op or per-layer selective checkpointing. **On one GPU torchtitan applies
  no FSDP** (``ParallelDims.fsdp_enabled`` is false for dp_shard = 1) and trains under autocast with fp32
  parameters (``torchtitan/distributed/utils.py`` ``maybe_enable_amp``: "Mixed precision training is handled by
  AMP", which every H200 log of ``benchmarks/results/h200/stacks/torchtitan/logs.tar.gz`` prints); with more than
  one rank its FSDP2 copies are ``execution.fsdp_ops``.

Conventions are ``execution.py``'s: one ``Op`` per CUDA kernel (``kernels``), bytes read and written per element of
the tensor the table walks, ``False`` = TensorIterator's non-vectorized path (mixed dtypes, broadcasts, strided
views, and every bf16 -> fp32 upcast, which the H200 profiles show as ``unrolled_elementwise_kernel<direct_copy>``).
Each table names the torch code it comes from and the kernel names of the H200 profile that confirm it
(``benchmarks/results/h200/stacks/plain_pytorch/plain_pytorch.jsonl``, rows ``1b mb1 s8192``; counts per block).
Forward ops carry ``extra["aten"]`` (``mm`` with its ``mm_index`` in the block, ``sdpa``, ``cast``...) so that
``recompute_ops`` can apply torchtitan's selective-op policy to them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Literal

from workbench.graph.execution import ROPE_BWD, ROPE_FWD, Kernel, KernelSpec, kernel_ops, kernel_specs, kernels
from workbench.graph.ops import AttentionShape, Op, attention, gemm_with_grads, replace_op
from workbench.perf.context_parallel import ContextParallel, ring_merge_tables

ParamDtype = Literal["fp32", "bf16"]
Float8Recipe = Literal["none", "rowwise", "tensorwise"]
Policy = str
"""Activation checkpointing: ``none``, ``full``, ``selective-op`` (torchtitan's per-op policy) or ``selective-N``
(every N-th block fully checkpointed, torchtitan's ``selective_ac_option = "N"``)."""

INT32_INDEX_BYTES = 2**31 - 1
"""TensorIterator splits a kernel whose byte offsets overflow int32 into sub-kernels
(aten/src/ATen/TensorIterator.cpp ``can_use_32bit_indexing`` / ``with_32bit_indexing``): the fp32 [T, V] logits of
8192 tokens launch their ``.float()`` as 2 kernels in the profile."""
MTA_CHUNK_ELEMENTS = 65536
MTA_BLOCKS_PER_LAUNCH = 320
"""aten/src/ATen/native/cuda/MultiTensorApply.cuh: kChunkSize = 65536, depth_to_max_blocks = 320 (fused AdamW,
foreach norm and mul launch once per 320 chunks: 60 launches for 1.24 B parameters in the profile)."""


@dataclass(frozen=True)
class StackFlavor:
    """What one of these stacks runs, as far as kernels go."""

    name: str
    param_dtype: ParamDtype = "fp32"
    """fp32 parameters under autocast(bf16), or bf16 parameters without autocast."""
    compile_blocks: bool = False
    compile_loss: bool = False
    rope: Literal["halves", "complex"] = "halves"
    grad_clip: bool = False
    tied: bool = False
    float8: Float8Recipe = "none"
    """torchao ``Float8Linear`` on the blocks' linears (torchtitan's ``[quantize.linear.float8]`` with
    ``filter_fqns = ["output"]``: the head stays bf16); ``none``: every linear in bf16."""
    float8_all_gather: int = 0
    """FSDP2's float8 all-gather over this many weight shards (torchtitan ``enable_fsdp_float8_all_gather`` with
    ``precompute_float8_dynamic_scale_for_fsdp``; tensorwise only); 0: off (``float8_linear_casts``)."""

    @property
    def autocast(self) -> bool:
        return self.param_dtype == "fp32"

    @property
    def stream_bytes(self) -> int:
        """Bytes per element of the residual stream: fp32 when parameters are (embedding output fp32, fp32 + bf16 -> fp32)."""
        return 4 if self.param_dtype == "fp32" else 2


def pytorch_flavor(param_dtype: ParamDtype = "fp32", compile: bool = False, tied: bool = False) -> StackFlavor:
    return StackFlavor("pytorch-compile" if compile else "pytorch-eager", param_dtype, compile, False, "halves",
                       False, tied)


def torchtitan_flavor(compile: bool = False, float8: Float8Recipe = "none") -> StackFlavor:
    """torchtitan 0.2.2 llama3 on one GPU: autocast, fp32 parameters, untied head, compile = blocks + loss;
    ``float8``: torchao's recipe on the blocks' linears."""
    return StackFlavor("torchtitan", "fp32", compile, compile, "complex", True, False, float8)


@dataclass(frozen=True)
class Dims:
    tokens: int
    seq: int
    batch: int
    hidden: int
    q: int
    kv: int
    ffn: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    """Blocks on this GPU: the model's, or the busiest pipeline stage's ``ceil(layers / pp)``."""
    sp: int = 1
    """Sequence parallelism (tensor parallelism as torchtitan and Megatron-Core run it): the norms, residual adds
    and their gradients run on ``tokens / sp`` rows (``stream_tokens``); the GEMMs, RoPE, attention and SwiGLU on
    every token of the micro-batch with the heads and FFN columns split ``sp`` ways."""
    cp: int = 1
    """Context parallelism: ``seq`` is this rank's ``seq_len / cp``; attention is ``cp`` causal blocks of it (the
    load-balanced ring: ``workbench.graph.transformer``'s convention)."""
    sdpa_backend: str = ""
    """The SDPA kernel the stack's attention runs (``workbench.perf.attention.SDPA_BACKENDS``; empty: the generic
    fractions). Set from the stack (a torchtitan of before cuDNN-first SDPA on Hopper, or its CP ring of Dec 2024:
    ``flash2``); tagged on the attention ops as ``extra["sdpa_backend"]``."""
    context_parallel: ContextParallel | None = None
    """The stack's ring under cp > 1 (``Stack.context_parallel``): its merge kernels join the attention's
    (``ring_merge_ops``); None: none (the generic ring)."""

    @classmethod
    def of(cls, model, micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1, pp: int = 1) -> Dims:
        """One GPU's dims: the whole model for tp = cp = pp = 1; else its shard (heads, kv heads, FFN and vocab
        split tp ways, at least one kv head; the sequence split cp ways; the busiest stage's blocks)."""
        seq = seq_len // cp
        return cls(micro_batch * seq, seq, micro_batch, model.hidden_size, model.q_size // tp,
                   max(model.kv_size // tp, model.head_dim), model.ffn_hidden_size // tp,
                   math.ceil(model.vocab_size / tp), model.num_heads // tp, max(model.num_kv_heads // tp, 1),
                   model.head_dim, math.ceil(model.num_layers / pp), tp, cp)

    @property
    def stream_tokens(self) -> int:
        """Rows of the residual stream on this GPU (``tokens / sp`` under sequence parallelism)."""
        return self.tokens // self.sp

    def attention_shape(self) -> AttentionShape:
        """The causal attention of one block: ``cp`` ring blocks of the local sequence (``cp`` = 1: the sequence)."""
        return AttentionShape(self.batch * self.cp, self.seq, self.heads, self.kv_heads, self.head_dim, causal=True)

    def linears(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in, out) of a block's linears in forward order (mm_index 1..7)."""
        h, f = self.hidden, self.ffn
        return (("wq", h, self.q), ("wk", h, self.kv), ("wv", h, self.kv), ("wo", self.q, h), ("w1", h, f),
                ("w3", h, f), ("w2", f, h))

    @property
    def block_params(self) -> int:
        return sum(i * o for _, i, o in self.linears()) + 2 * self.hidden


# ---------------------------------------------------------------------------------------------------------------
# Eager tables, per element of the walked tensor. A = autocast with fp32 parameters, B = bf16 parameters.

# F.rms_norm (aten/src/ATen/native/layer_norm.cpp rms_norm -> the fused layer-norm kernel with rms flag):
# ``vectorized_layer_norm_kernel<float, float>`` under A (fp32 stream in, fp32 out), ``<BFloat16, float>`` under B;
# backward ``layer_norm_grad_input_kernel_vectorized`` (reads dy, x; writes dx) + ``GammaBetaBackward`` (dw).
@functools.cache  # one table object per argument: ``_k`` keeps its specs by table
def rmsnorm_tables(s: int) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    return (("rms_norm", s, s, True),), (("grad_input", 2 * s, s, True), ("grad_weight", 2 * s, 0, True))


# autocast (aten/src/ATen/autocast_mode.h cached_cast): every F.linear casts its fp32 input to bf16 -- activations
# once per call (not cached: y is cast 3x for q/k/v and 2x for w1/w3), leaf weights once per autocast region
# (cached). ``bfloat16_copy_kernel`` (vectorized): 12 per block (7 weights + 5 inputs), 24 per block again
# in the full-AC recompute (the recompute runs in a fresh autocast region). Backward: each cast's grad goes back to
# fp32 (``unrolled_elementwise_kernel<direct_copy>``, 12 per block: 7 weight grads + 5 input grads).
CAST_TO_BF16: tuple[Kernel, ...] = (("to_bf16", 4, 2, True),)
CAST_TO_FP32: tuple[Kernel, ...] = (("to_fp32", 2, 4, False),)
# the grad of a bf16 branch added to the fp32 stream: add's backward casts dx to the branch dtype
GRAD_TO_BF16: tuple[Kernel, ...] = (("grad_to_bf16", 4, 2, True),)
# fp32 stream + bf16 branch: ``unrolled_elementwise_kernel<CUDAFunctor_add<float>>`` (mixed dtypes, not vectorized)
RESIDUAL_ADD_A: tuple[Kernel, ...] = (("residual_add", 6, 4, False),)
RESIDUAL_ADD_B: tuple[Kernel, ...] = (("residual_add", 4, 2, True),)
# autograd's accumulation of two gradients of one tensor (``CUDAFunctor_add``, 5 per block: 2 residual + 3 fan-out)
@functools.cache
def grad_accumulate(s: int) -> tuple[Kernel, ...]:
    return (("grad_accumulate", 2 * s, s, True),)


# F.silu(w1(y)) * w3(y), per element of [T, f] (bf16 under both): silu, mul (vectorized); backward: grad * w3out,
# grad * silu(w1out) (``BinaryFunctor<MulFunctor>``, vectorized), ``silu_backward_kernel``.
SWIGLU_FWD: tuple[Kernel, ...] = (("silu", 2, 2, True), ("mul", 4, 2, True))
SWIGLU_BWD: tuple[Kernel, ...] = (("mul_up", 4, 2, True), ("mul_silu", 4, 2, True), ("silu_backward", 4, 2, True))
# plain_pytorch.py rope(): the job's table (execution.ROPE_FWD) except that the forward cat runs the
# non-vectorized ``CatArrayBatchedCopy`` (the profile), cos/sin .to(bf16) per call (launch only, [S, d/2]).
ROPE_HALVES_FWD: tuple[Kernel, ...] = tuple((n, r, w, False if n == "cat" else v) for n, r, w, v in ROPE_FWD)
ROPE_HALVES_BWD: tuple[Kernel, ...] = ROPE_BWD
# torchtitan apply_rotary_emb, per real element of q or k: xq.float() (upcast), view_as_complex(x) * freqs_cis
# (``elementwise_kernel<128, 2, BinaryFunctor<complex<float>>>``, broadcast: not vectorized), type_as (to bf16);
# backward: grad.float(), grad * conj(freqs) (same kernel), .to(bf16) (``conj_kernel`` on freqs: launch only).
ROPE_COMPLEX_FWD: tuple[Kernel, ...] = (("x.float", 2, 4, False), ("complex_mul", 4, 4, False), ("to_bf16", 4, 2, True))
ROPE_COMPLEX_BWD: tuple[Kernel, ...] = (("grad.float", 2, 4, False), ("conj", 0, 0, True),
                                        ("complex_mul", 4, 4, False), ("to_bf16", 4, 2, True))
# o.transpose(1, 2).reshape(b, s, h) (fwd) and the q/k grads' transposed views (bwd): strided ``direct_copy``
STRIDED_COPY: tuple[Kernel, ...] = (("strided_copy", 2, 2, False),)

# ---------------------------------------------------------------------------------------------------------------
# Inductor-compiled blocks (torch.compile per block), per element, from the kernel names of the profiles of
# ``1b mb2 s4096 fp32 compile`` and torchtitan's trace of ``8b4l-bf16-full-compile`` (names in the comment):
@functools.cache  # (callers only read the dict)
def compiled_block_tables(s: int) -> dict[str, tuple[tuple[Kernel, ...], tuple[Kernel, ...], str]]:
    """{part: (forward kernels, backward kernels, walked tensor)}; ``s`` = stream bytes (4 under autocast)."""
    return {
        # triton_red_fused__fused_rms_norm__to_copy_0 (x -> y bf16); ..._rms_norm__to_copy__unsafe_view_add_7
        # (x + attn out -> y, the sum not stored); bwd: triton_{red,per}_fused__fused_rms_norm_backward__to_copy_add
        # (dy of the 3 or 2 consumers, x, the stream grad -> dx, the branch grad in bf16) + the dw column sums
        # (reduce_kernel<sum_functor>)
        "attn_norm": ((("rms_norm", s, 2, True),), (("rms_norm_bwd", 3 * 2 + 2 * s, s + 2, True),
                                                    ("dw_sum", s, 0, True)), "hidden"),
        "ffn_norm": ((("add_rms_norm", s + 2, 2, True),), (("rms_norm_bwd", 2 * 2 + 2 * s + 2, s + 2, True),
                                                          ("dw_sum", s, 0, True)), "hidden"),
        # triton_poi_fused__unsafe_view_add_cat_mul_split_sub_transpose_view (fwd), ..._add_cat_clone_mul_neg_slice
        "rope": ((("rope", 2, 2, True),), (("rope_bwd", 2, 2, True),), "qk"),
        # triton_poi_fused_clone_transpose_6: the SDPA output's transposed copy
        "o_copy": ((("transpose_copy", 2, 2, True),), (), "q"),
        # triton_poi_fused__unsafe_view_mul_silu_9; bwd ..._mul_silu_silu_backward (reads gate, up, grad)
        "swiglu": ((("silu_mul", 4, 2, True),), (("silu_mul_bwd", 6, 4, True),), "ffn"),
        # triton_poi_fused__unsafe_view_add_10: x + attn out + mlp out -> the fp32 block output
        "residual": ((("residual_add", s + 4, s, True),), (), "hidden"),
    }


# Loss. Eager: logits.float() (direct_copy, split per 2^31 bytes), F.cross_entropy = log_softmax
# (``cunn_SoftMaxForward<float>``: a [V]-long fp32 row does not fit in shared memory, so 3 passes: max, sum of exp,
# write: 12 B read, 4 written) + nll_loss (launch only); backward: the zeroed grad of log_softmax's output
# (``FillFunctor<float>``, nll_loss_backward's scatter), ``cunn_SoftMaxBackward`` (sum of grad, then grad and
# output -> dx: 12 B read, 4 written), dlogits.to(bf16) (``bfloat16_copy``). 48 B per logit.
LOSS_EAGER_FWD: tuple[Kernel, ...] = (("logits.float", 2, 4, False), ("log_softmax", 12, 4, True), ("nll", 0, 0, True))
LOSS_EAGER_BWD: tuple[Kernel, ...] = (("zero_grad_input", 0, 4, True), ("nll_backward", 0, 0, True),
                                      ("log_softmax_backward", 12, 4, True), ("dlogits.to_bf16", 4, 2, True))
LOSS_EAGER_KERNELS: tuple[tuple[tuple[Kernel], str, bool], ...] = tuple(
    ((kernel,), phase, kernel[0] in ("logits.float", "dlogits.to_bf16"))
    for phase, table in (("fwd", LOSS_EAGER_FWD), ("bwd", LOSS_EAGER_BWD)) for kernel in table)
"""The eager loss one kernel at a time, in step order: (its one-kernel table, phase, whether it splits per 2^31
bytes of fp32 logits, ``INT32_INDEX_BYTES``)."""
# torchtitan's compiled loss (trace): triton_red_fused__log_softmax__to_copy_prepare_softmax_online (reads bf16
# logits, writes fp32 log-probs: 1.51 ms for 1.07 G logits = 6.1 B at 4.3 TB/s) and
# triton_red_fused__log_softmax__log_softmax_backward_data__..._nll_loss_backward (reads them, writes bf16 dlogits).
LOSS_COMPILED_FWD: tuple[Kernel, ...] = (("log_softmax_online", 2, 4, True), ("nll", 0, 0, True))
LOSS_COMPILED_BWD: tuple[Kernel, ...] = (("log_softmax_nll_backward", 4, 2, True),)

# Fused AdamW (torch/optim/adamw.py fused=True -> _fused_adamw_, FusedAdamMathFunctor), per parameter: reads p, g,
# m, v, writes p, m, v; the moments have the parameter's dtype (torch.zeros_like(p) in _init_group), so bf16
# parameters move half the bytes.
@functools.cache
def adamw_table(param_bytes: int) -> tuple[Kernel, ...]:
    return (("fused_adamw", 4 * param_bytes, 3 * param_bytes, True),)


# torch.nn.utils.clip_grad_norm_ (torchtitan dist_utils.clip_grad_norm_, foreach): _foreach_norm (LpNormFunctor)
# then _foreach_mul_ by the clip coefficient, per fp32 gradient element.
GRAD_CLIP: tuple[Kernel, ...] = (("foreach_norm", 4, 0, True), ("foreach_mul", 4, 4, True))


# ---------------------------------------------------------------------------------------------------------------
# torchao 0.16 float8, recipe "rowwise" (torchao/float8/config.py Float8LinearConfig.from_recipe_name: input,
# weight and grad_output AXISWISE e4m3, round_scales_to_power_of_2). matmul_with_hp_or_float8_args
# (torchao/float8/float8_linear.py) saves the bf16 input and the fp32 weight (no autocast copy: Float8Linear.forward
# casts only the input to bf16) and casts each GEMM's operands itself, six casts per linear y = x W^T:
# forward x along -1 and W^T along 0; backward dy along -1 and W^T along -1 (dgrad), dy along 0 and x along 0
# (wgrad, in fp8 too). One cast = hp_tensor_to_float8_dynamic (torchao/float8/float8_scaling_utils.py):
# tensor_to_scale (torchao/float8/float8_utils.py: amax(abs(x), dim, keepdim), .to(float64), finfo.max /
# clamp(amax, EPS), .to(float32), _round_scale_down_to_power_of_2 = exp2(floor(log2))) then _ToFloat8ConstrFunc
# (torchao/float8/float8_training_tensor.py: x.to(float32) * scale, to_fp8_saturated = clamp, .to(e4m3)).
# float8_ops.py preprocess_addmm makes _scaled_mm's A row-major and B column-major with .contiguous(): dgrad's W,
# wgrad's dy^T and x are transposing copies. The GEMMs are ``_scaled_mm`` (cuBLASLt fp8, rowwise scales) with the
# operand's original dtype out (bf16); the weight gradient reaches the fp32 parameter through autograd's cast.
#
# Eager, per element of the cast tensor; the [rows, 1] scale ops launch only (7 kernels: to float64, clamp,
# div, to float32, log2, floor, exp2).
_FP8_SCALE_OPS: tuple[Kernel, ...] = tuple((n, 0, 0, True) for n in ("amax.to_f64", "amax.clamp", "max_div_amax",
                                                                       "scale.to_f32", "log2", "floor", "exp2"))
FP8_CAST_EAGER_BF16: tuple[Kernel, ...] = (
    ("abs", 2, 2, True), ("amax", 2, 0, True), *_FP8_SCALE_OPS, ("x.to_f32", 2, 4, False),
    ("mul_scale", 4, 4, False), ("clamp", 4, 4, True), ("to_e4m3", 4, 1, True))
"""A bf16 operand (x, dy): the upcast is TensorIterator's non-vectorized copy, ``* scale`` broadcasts [rows, 1]."""
FP8_CAST_EAGER_FP32: tuple[Kernel, ...] = (
    ("abs", 4, 4, True), ("amax", 4, 0, True), *_FP8_SCALE_OPS, ("mul_scale", 4, 4, False), ("clamp", 4, 4, True),
    ("to_e4m3", 4, 1, True))
"""The fp32 weight: ``.to(float32)`` is a no-op."""
FP8_K_MAJOR_COPY: tuple[Kernel, ...] = (("k_major_copy", 1, 1, "transpose"),)
"""preprocess_addmm's ``.contiguous()`` of a transposed fp8 operand (the job's FP8_TRANSPOSE, sourced there)."""
# Compiled (inductor), from the kernel names of the fit traces (benchmarks/results/h200/stacks/torchtitan/fp8/
# f-8b4l-fp8row-full-compile and f-1b-fp8row-selop-compile, benchmarks/stacks/fp8_split.json), per element:
# - a row cast of an activation is fused into the kernel that makes it (triton_red_fused__fused_rms_norm__scaled_mm_
#   _to_copy_abs_amax_clamp_exp2_floor_log2_mul_reciprocal_t_view_0; ..._silu_t_view_10 for w2's input): that
#   kernel's second loop re-reads the row and writes fp8 (2 + 1 B); one per distinct input (q/k/v share theirs,
#   so do w1/w3: identical casts are one node after CSE);
# - a row cast of the fp32 weight (triton_red_fused__scaled_mm__to_copy_abs_amax_..._t_view_9): amax loop, cast
#   loop (4 + 4 B), fp8 out;
# - dy along -1 fused into dy's producer (rms_norm backward, silu backward: ..._fused_rms_norm_backward__scaled_mm_
#   _to_copy_abs_add_amax...): 2 + 1 B;
# - a column cast (dy, x, W along the reduction dim of wgrad / dgrad): a column amax (triton_red_fused_abs_amax_t_*)
#   then a pointwise cast that writes the transposed fp8 operand (triton_poi_fused__to_copy_clamp_exp2_floor_log2_
#   mul_reciprocal_t_*). The cast reads its rows coalesced and writes the fp8 columns with a stride: its read is
#   priced as a streaming kernel and its write on the transposing path (memory_transpose_efficiency, sourced on
#   eager fp8 copies that stride on both sides), as two ops of one kernel (the write op adds a launch cost that
#   the kernel does not have: 4 us x 18 per block). Fitted choice: the fit traces' transposing casts reach ~0.55
#   TB/s (triton_poi_..._t_7, [T, ffn] in 721 us), between the two paths; calibrate me (a Triton transpose
#   efficiency of its own);
# - wgrad's bf16 output to the fp32 parameter's gradient: as the bf16 tables' upcast.
FP8_ROW_CAST_FUSED: tuple[Kernel, ...] = (("fp8_row_cast", 2, 1, True),)
FP8_WEIGHT_ROW_CAST: tuple[Kernel, ...] = (("fp8_weight_row_cast", 8, 1, True),)
@functools.cache
def fp8_column_cast(hp_bytes: int, amax: bool = True) -> tuple[Kernel, ...]:
    """A column cast of a ``hp_bytes`` tensor; ``amax`` False: its scale is already known (tensorwise)."""
    return ((("fp8_col_amax", hp_bytes, 0, True),) if amax else ()) + (
        ("fp8_col_cast.read", hp_bytes, 0, True), ("fp8_col_cast.write_t", 0, 1, "transpose"))


# Recipe "tensorwise" (Float8LinearConfig's default: input, weight and grad_output TENSORWISE e4m3, scales not
# rounded to a power of 2): the same six casts per linear (matmul_with_hp_or_float8_args casts each GEMM operand
# from its high-precision tensor), each with one scale per tensor: eager, 4 scale launches (to float64, clamp, div,
# to float32); compiled, the amax is a whole-tensor reduction, so a cast cannot live in its producer's row loop:
# the producer adds a partial amax (launch only), a separate kernel casts (2 B read, 1 written; guess, calibrate me
# on a tensorwise trace); a column cast of a tensor already cast along its rows reuses that scale (inductor CSEs the
# identical amax), leaving the transposing cast. With FSDP2's float8 all-gather (torchao/float8/fsdp_utils.py
# WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather, scales from precompute_float8_dynamic_scale_for_fsdp
# after the optimizer step), the weight reaches the linear already in fp8: its forward cast is this rank's fp32
# shard's (hp_tensor_and_scale_to_float8: * scale, clamp, to e4m3, in FSDP's eager pre-all-gather hook), and
# dgrad's W^T is the saved fp8 weight's transposing copy (float8_linear.py: an operand that
# ``tensor_already_casted_to_fp8`` is not cast again).
_FP8_TENSOR_SCALE_OPS: tuple[Kernel, ...] = tuple((n, 0, 0, True) for n in ("amax.to_f64", "amax.clamp",
                                                                              "max_div_amax", "scale.to_f32"))
FP8_TENSOR_CAST_EAGER_BF16: tuple[Kernel, ...] = (
    ("abs", 2, 2, True), ("amax", 2, 0, True), *_FP8_TENSOR_SCALE_OPS, ("x.to_f32", 2, 4, False),
    ("mul_scale", 4, 4, False), ("clamp", 4, 4, True), ("to_e4m3", 4, 1, True))
FP8_TENSOR_CAST_EAGER_FP32: tuple[Kernel, ...] = (
    ("abs", 4, 4, True), ("amax", 4, 0, True), *_FP8_TENSOR_SCALE_OPS, ("mul_scale", 4, 4, False),
    ("clamp", 4, 4, True), ("to_e4m3", 4, 1, True))
FP8_TENSOR_CAST_COMPILED: tuple[Kernel, ...] = (("fp8_partial_amax", 0, 0, True), ("fp8_tensor_cast", 2, 1, True))
FP8_SHARD_CAST: tuple[Kernel, ...] = (("mul_scale", 4, 4, False), ("clamp", 4, 4, True), ("to_e4m3", 4, 1, True))
"""The fp32 weight shard's cast before FSDP2's float8 all-gather, its scale precomputed (a 0-dim broadcast)."""
FP8_TRANSPOSE_COMPILED: tuple[Kernel, ...] = (("fp8_t.read", 1, 0, True), ("fp8_t.write_t", 0, 1, "transpose"))
"""An fp8 operand's transposing copy in a compiled graph: priced as the compiled column casts are (a coalesced
read, a strided write; ``fp8_column_cast``'s fitted choice), not as eager's K-major copy."""
FP8_PRECOMPUTE_SCALE: tuple[Kernel, ...] = (("foreach_amax", 4, 0, True),)
"""precompute_float8_dynamic_scale_for_fsdp, per element of the fp32 shards: ``torch._foreach_norm(weights,
ord=math.inf)`` (an all-reduce of the amaxes follows: a few KB, not priced), one launch per 320 chunks."""


def weight_shard_cast(name: str, i: int, o: int, shards: int, count: int, layer: str, **tags) -> list[Op]:
    """The cast of this rank's fp32 shard of a linear's weight W[o, i] before FSDP2's float8 all-gather over
    ``shards`` ranks (``FP8_SHARD_CAST``), tagged ``tags`` besides its ``aten``: the only kernels of a block that
    read the shard count."""
    return _k(f"{name}.w_shard.fp8", "fp8_quantize", FP8_SHARD_CAST, max(1, i * o // shards), "fwd", count, layer,
              "fp8_cast", **tags)


_K_MAJOR: dict[int, tuple[tuple[Kernel, ...], tuple[Kernel, ...]]] = {}
"""(table, ``table + FP8_K_MAJOR_COPY``) by the table's identity (``_k_major``)."""


def _k_major(table: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    """``table + FP8_K_MAJOR_COPY``, one tuple per table (by identity, as ``_k`` keys its specs: a fresh
    concatenation per call would make its kernel specs again every time). The tables are this module's constants
    (the entry holds its table: no other takes its id while it lives)."""
    hit = _K_MAJOR.get(id(table))
    if hit is None:
        hit = _K_MAJOR[id(table)] = (table, table + FP8_K_MAJOR_COPY)
    return hit[1]


def _eager_cast(recipe: Float8Recipe, hp_bytes: int) -> tuple[Kernel, ...]:
    if recipe == "tensorwise":
        return FP8_TENSOR_CAST_EAGER_FP32 if hp_bytes == 4 else FP8_TENSOR_CAST_EAGER_BF16
    return FP8_CAST_EAGER_FP32 if hp_bytes == 4 else FP8_CAST_EAGER_BF16


def float8_linear_casts(name: str, t: int, i: int, o: int, *, compiled: bool, mm_index: int, count: int,
                        layer: str, input_cast: bool = True, shared_input: bool = False,
                        recipe: Float8Recipe = "rowwise", weight_bytes: int = 4,
                        all_gather_shards: int = 0) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of torchao's casts of one linear y[t, o] = x[t, i] W[o, i]^T, ``count`` times.
    Compiled, the activation casts (x along -1 and 0) run once per distinct input: ``input_cast`` False for a
    linear that shares its input with an earlier one (wk, wv after wq; w3 after w1), ``shared_input`` True for the
    first of those (wq, w1). ``weight_bytes``: the weight as the linear sees it (4: fp32 under autocast; 2: FSDP2's
    bf16 compute copy); ``all_gather_shards``: FSDP2's float8 all-gather over that many shards (tensorwise)."""
    fwd: list[Op] = []
    bwd: list[Op] = []
    tag = {"mm_index": mm_index}  # the forward casts' tags beside their aten, fp8_cast
    act_table, w_table = _eager_cast(recipe, 2), _eager_cast(recipe, weight_bytes)

    def scales(rows: int) -> int:  # scale elements: a row's, or one per tensor
        return 1 if recipe == "tensorwise" else rows

    if all_gather_shards:  # the fp32 shard, cast in FSDP's (eager) pre-all-gather hook: forward only
        fwd += weight_shard_cast(name, i, o, all_gather_shards, count, layer, **tag)
    if not compiled:
        fwd += _k(f"{name}.x.fp8", "fp8_quantize", act_table, t * i, "fwd", count, layer, "fp8_cast",
                  rows=scales(t), **tag)
        if not all_gather_shards:
            fwd += _k(f"{name}.w.fp8", "fp8_quantize", w_table, i * o, "fwd", count, layer, "fp8_cast",
                      rows=scales(o), **tag)
        bwd += _k(f"{name}.dy.fp8", "fp8_quantize", act_table, t * o, "bwd", count, layer, "fp8_cast", rows=scales(t))
        w_t = () if all_gather_shards else w_table
        for operand, elements, table, rows in (("w_t", i * o, w_t, i),
                                               ("dy_t", t * o, act_table, o),
                                               ("x_t", t * i, act_table, i)):
            bwd += _k(f"{name}.{operand}.fp8", "fp8_quantize", _k_major(table), elements, "bwd", count,
                      layer, "fp8_cast", rows=scales(rows))
        return fwd, bwd
    tag["compiled_cast"] = True
    tensorwise = recipe == "tensorwise"
    row_cast = FP8_TENSOR_CAST_COMPILED if tensorwise else FP8_ROW_CAST_FUSED
    if input_cast:  # a shared input's cast is rerun when any GEMM it feeds is: wq's feeds wk, w1's feeds w3
        x_tag = {**tag, "mm_index": mm_index + 1 if shared_input else mm_index}
        fwd += _k(f"{name}.x.fp8", "fp8_quantize", row_cast, t * i, "fwd", count, layer, "fp8_cast", **x_tag)
        bwd += _k(f"{name}.x_t.fp8", "fp8_quantize", fp8_column_cast(2, amax=not tensorwise), t * i, "bwd", count,
                  layer, "fp8_cast")
    if not all_gather_shards:
        weight_cast = (FP8_TENSOR_CAST_COMPILED if tensorwise and weight_bytes == 2 else
                       FP8_WEIGHT_ROW_CAST if weight_bytes == 4 else (("fp8_weight_row_cast", 4, 1, True),))
        fwd += _k(f"{name}.w.fp8", "fp8_quantize", weight_cast, i * o, "fwd", count, layer, "fp8_cast", **tag)
    bwd += _k(f"{name}.dy.fp8", "fp8_quantize", row_cast, t * o, "bwd", count, layer, "fp8_cast")
    w_t = FP8_K_MAJOR_COPY if all_gather_shards else fp8_column_cast(weight_bytes, amax=not tensorwise)
    bwd += _k(f"{name}.w_t.fp8", "fp8_quantize", w_t, i * o, "bwd", count, layer, "fp8_cast")
    bwd += _k(f"{name}.dy_t.fp8", "fp8_quantize", fp8_column_cast(2, amax=not tensorwise), t * o, "bwd", count,
              layer, "fp8_cast")
    return fwd, bwd


def float8_tp_linear_casts(name: str, t: int, ts: int, i: int, o: int, *, colwise: bool, casts_input: bool,
                           compiled: bool, mm_index: int, count: int, layer: str,
                           all_gather_shards: int = 0) -> tuple[list[Op], list[Op]]:
    """(forward, backward) casts of one linear under torchao's float8 tensor parallelism (tensorwise with tp > 1:
    torchtitan ``apply_tp`` with ``enable_float8_tensorwise_tp``; torchao/float8/float8_tensor_parallel.py).
    ``Float8ColwiseParallel`` / ``PrepareFloat8ModuleInput`` cast a column-parallel linear's input on the
    sequence-parallel shard [ts, i] before the all-gather (in fp8), once per module input (``casts_input``: wq for
    q/k/v, w1 for w1/w3), and its output grad [t, o] where it is; ``Float8RowwiseParallel`` casts its input
    [t, i] where it is and its output grad on the shard [ts, o] before that all-gather. Operands that arrive in
    fp8 are not cast again (float8_linear.py ``tensor_already_casted_to_fp8``): the wgrad's x^T and dy^T and
    dgrad's W^T are transposing copies (a tensorwise scale survives the transpose)."""
    tag = {"mm_index": mm_index + 1 if colwise and casts_input else mm_index}  # beside their aten, fp8_cast
    if compiled:
        tag["compiled_cast"] = True
    cast = FP8_TENSOR_CAST_COMPILED if compiled else FP8_TENSOR_CAST_EAGER_BF16
    fwd: list[Op] = []
    bwd: list[Op] = []
    if all_gather_shards:  # the fp32 shard, cast in FSDP's (eager) pre-all-gather hook
        fwd += weight_shard_cast(name, i, o, all_gather_shards, count, layer, **tag)
    else:
        fwd += _k(f"{name}.w.fp8", "fp8_quantize", cast, i * o, "fwd", count, layer, "fp8_cast", **tag)
    if casts_input:
        rows = ts if colwise else t
        fwd += _k(f"{name}.x.fp8", "fp8_quantize", cast, rows * i, "fwd", count, layer, "fp8_cast", rows=1,
                  **tag)  # rows=1: one scale per tensor
    rows = t if colwise else ts
    bwd += _k(f"{name}.dy.fp8", "fp8_quantize", cast, rows * o, "bwd", count, layer, "fp8_cast", rows=1)
    transpose = FP8_TRANSPOSE_COMPILED if compiled else FP8_K_MAJOR_COPY
    # compiled, the shared input's transpose is one node (inductor's CSE), as its cast is
    operands = (("w_t", i * o), ("dy_t", t * o)) + ((("x_t", t * i),) if casts_input or not compiled else ())
    for operand, elements in operands:
        bwd += _k(f"{name}.{operand}.fp8", "fp8_quantize", transpose, elements, "bwd", count, layer, "fp8_cast")
    return fwd, bwd


def _float8_casts(name: str, d: Dims, i: int, o: int, *, compiled: bool, mm_index: int, layer: str,
                  f8_args: dict) -> tuple[list[Op], list[Op]]:
    """One block linear's float8 casts: ``float8_tp_linear_casts`` under tensorwise tensor parallelism, else
    ``float8_linear_casts`` (compiled: the inputs q/k/v and w1/w3 share cast once)."""
    n = d.layers
    if d.sp > 1 and f8_args["recipe"] == "tensorwise":
        colwise = name not in ("wo", "w2")
        return float8_tp_linear_casts(name, d.tokens, d.stream_tokens, i, o, colwise=colwise,
                                      casts_input=name in ("wq", "w1", "wo", "w2"), compiled=compiled,
                                      mm_index=mm_index, count=n, layer=layer,
                                      all_gather_shards=f8_args["all_gather_shards"])
    if not compiled:
        return float8_linear_casts(name, d.tokens, i, o, compiled=False, mm_index=mm_index, count=n, layer=layer,
                                   **f8_args)
    return float8_linear_casts(name, d.tokens, i, o, compiled=True, mm_index=mm_index, count=n, layer=layer,
                               input_cast=name not in ("wk", "wv", "w3"), shared_input=name in ("wq", "w1"),
                               **f8_args)


def _tag(ops: list[Op], **extra) -> list[Op]:
    """Copies of ``ops`` with ``extra`` added to each one's ``extra`` (an op is never changed once made: ``_k``
    hands the same ops to every caller; a builder tags its own kernels through ``_k``'s ``tags``)."""
    return [replace_op(op, extra={**op.extra, **extra}) for op in ops]


_K_SPECS: dict[tuple, tuple[tuple, tuple[KernelSpec, ...]]] = {}
"""(table, ``kernel_specs``) of each (prefix, table, tags) ``_k`` was asked for, the table by identity (by value,
4 and 4.0 bytes would be one key): a recipe search makes one block's kernels at every micro-batch size from the
same tables, so only the sizes are new."""
_K_OPS: dict[tuple, tuple[tuple, tuple[Op, ...]]] = {}
"""(table, ops) of each ``_k`` call, by its arguments (the table by identity, as ``_K_SPECS``): the tables of one
recipe search ask for most kernels again -- the float8 flavors' and the bf16 ones' norms, RoPE and adds at one
micro-batch, the compiled and eager ones' attention, every weight's casts at each micro-batch -- and an op is
never changed once made, so the calls share one set (a first torchtitan search of Llama 3 8B on 8 H200s asked
for 7,499 kernel ops, 3,174 of them distinct)."""
K_MEMO_LIMIT = 10_000
"""Entries ``_K_SPECS``, ``_K_OPS`` and ``_BLOCK_LINEARS`` keep before they start over (a long session pricing
many models; a table made per call would be a new key each time: this module's tables are constants, or made once
per argument)."""


def _k(prefix: str, kind: str, table, elements: int, phase: str, count: int, layer: str, aten: str,
       rows: int = 0, launches: int = 1, **tags) -> list[Op]:
    """``kernels`` of ``table`` (fp32) tagged ``aten`` and ``tags`` (entries of each op's ``extra``);
    ``launches``: the same work split over that many launches of each kernel. A list of its own, of ops that
    every call with these arguments shares (``_K_OPS``)."""
    key = (prefix, id(table), aten, kind, elements, phase, count, layer, rows, launches, *tags.items())
    hit = _K_OPS.get(key)
    if hit is None:  # (the entry holds its table: no other table takes its id while it lives)
        if len(_K_OPS) > K_MEMO_LIMIT:
            _K_OPS.clear()
        hit = _K_OPS[key] = (table, tuple(_kernel_ops(prefix, kind, table, elements, phase, count, layer, aten,
                                                      rows, launches, tags)))
    return list(hit[1])


def _kernel_ops(prefix: str, kind: str, table, elements: int, phase: str, count: int, layer: str, aten: str,
                rows: int, launches: int, tags: dict) -> list[Op]:
    """The ops of ``_k``, made."""
    key = (prefix, id(table), aten, *tags.items())
    hit = _K_SPECS.get(key)
    if hit is None:
        if len(_K_SPECS) > K_MEMO_LIMIT:
            _K_SPECS.clear()
        hit = _K_SPECS[key] = (table, kernel_specs(prefix, table, aten=aten, **tags))
    if launches == 1:
        return kernel_ops(hit[1], kind, elements, phase=phase, count=count, layer=layer, dtype="fp32", rows=rows)
    # the same work over ``launches`` kernels: each op's bytes and FLOPs scaled down
    ops = kernel_ops(hit[1], kind, elements, phase=phase, count=count * launches, layer=layer, dtype="fp32",
                     rows=rows)
    return [replace_op(o, bytes_read=o.bytes_read / launches, bytes_written=o.bytes_written / launches,
                       flops=o.flops / launches, shape=type(o.shape)(max(1, o.shape.elements // launches)))
            for o in ops]


_BLOCK_LINEARS: dict[tuple, tuple[Op, Op, Op]] = {}
"""``_linear_gemms`` by its arguments (``_K_OPS``' reason: a recipe search's bf16 flavors, eager and compiled, ask
for one micro-batch's GEMMs alike, and so do its float8 ones)."""


def _linear_gemms(name: str, t: int, i: int, o: int, dtype: str, count: int, layer: str, mm_index: int,
                  **tags) -> tuple[Op, Op, Op]:
    """A block linear y[t, o] = x[t, i] W^T: ``gemm_with_grads``, the forward tagged ``aten`` mm, its
    ``mm_index`` and ``tags``; made once per arguments and shared, as ``_k``'s ops."""
    key = (name, t, i, o, dtype, count, layer, mm_index, *tags.items())
    hit = _BLOCK_LINEARS.get(key)
    if hit is None:
        if len(_BLOCK_LINEARS) > K_MEMO_LIMIT:
            _BLOCK_LINEARS.clear()
        f, dg, wg = gemm_with_grads(name, t, o, i, dtype, count=count, layer=layer)
        hit = _BLOCK_LINEARS[key] = (_tag([f], aten="mm", mm_index=mm_index, **tags)[0], dg, wg)
    return hit


def ring_merge_ops(d: Dims, *, compiled: bool) -> tuple[list[Op], list[Op]]:
    """(forward, backward) merge kernels of the ``d.layers`` blocks' ring attention under the stack's
    ``d.context_parallel`` (``workbench.perf.context_parallel.ring_merge_tables``; none for cp = 1 or a ring
    without them). The forward's are tagged as SDPA's: what SDPA's output is, selective-op checkpointing saves."""
    if d.context_parallel is None or d.cp <= 1:
        return [], []
    tables = ring_merge_tables(d.context_parallel, tokens=d.tokens, q_width=d.q, kv_width=d.kv, group=d.cp,
                               compiled=compiled)
    fwd = [op for table, elements, repeats in tables.forward
           for op in _k("attention.ring", "add", table, elements, "fwd", d.layers * repeats, "attention", "sdpa")]
    bwd = [op for table, elements, repeats in tables.backward
           for op in _k("attention.ring", "add", table, elements, "bwd", d.layers * repeats, "attention", "sdpa")]
    return fwd, bwd


def _splits(elements: int, bytes_per_element: int) -> int:
    return max(1, math.ceil(elements * bytes_per_element / INT32_INDEX_BYTES))


def block_ops(d: Dims, flavor: StackFlavor) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels of the ``d.layers`` blocks (count = layers), without recomputation."""
    n, t, ts = d.layers, d.tokens, d.stream_tokens  # ts: the residual stream's rows (t / tp under sequence parallel)
    fwd: list[Op] = []
    bwd: list[Op] = []
    A, s = flavor.autocast, flavor.stream_bytes
    f8 = flavor.float8 != "none"
    gemm_dtype = "fp8" if f8 else "bf16"  # rowwise and tensorwise: all three GEMMs in fp8 (workbench.precision)
    f8_args = dict(recipe=flavor.float8, weight_bytes=4 if flavor.param_dtype == "fp32" else 2,
                   all_gather_shards=flavor.float8_all_gather) if f8 else {}

    def linear(name: str, i: int, o: int, mm_index: int, layer: str) -> None:
        f, dg, wg = _linear_gemms(name, t, i, o, gemm_dtype, n, layer, mm_index)
        if A:  # the weight's cast to bf16 (fwd; not under float8: torchao casts the fp32 weight) and its grad's
            if not f8:  # back to fp32 (bwd)
                fwd.extend(_k(f"{name}.weight", "copy", CAST_TO_BF16, i * o, "fwd", n, layer, "cast_weight"))
            bwd.extend(_k(f"{name}.weight_grad", "copy", CAST_TO_FP32, i * o, "bwd", n, layer, "cast"))
        fwd.append(f)
        bwd.extend([dg, wg])
        if f8:
            cf, cb = _float8_casts(name, d, i, o, compiled=False, mm_index=mm_index, layer=layer, f8_args=f8_args)
            fwd.extend(cf)
            bwd.extend(cb)

    if flavor.compile_blocks:
        tables = compiled_block_tables(s)
        width = {"hidden": d.hidden, "qk": d.q + d.kv, "q": d.q, "ffn": d.ffn}
        for part, (tf, tb, walk) in tables.items():
            layer = "mlp" if part in ("ffn_norm", "swiglu", "residual") else "attention"
            kind = {"attn_norm": "rmsnorm", "ffn_norm": "rmsnorm", "rope": "rope", "o_copy": "copy",
                    "swiglu": "swiglu", "residual": "add"}[part]
            rows = ts if walk == "hidden" else t
            e = rows * width[walk]
            fwd.extend(_k(part, kind, tf, e, "fwd", n, layer, part, rows=rows))
            if tb:
                bwd.extend(_k(part, kind, tb, e, "bwd", n, layer, part, rows=rows))
        if flavor.rope == "complex":  # inductor leaves the complex multiply to aten (trace: 6 per block w/ full AC)
            for x, w in (("q", d.q), ("k", d.kv)):
                fwd.extend(_k(f"rope.{x}", "rope", (("complex_mul", 4, 4, False),), t * w, "fwd", n, "attention", "rope"))
                bwd.extend(_k(f"rope.{x}", "rope", (("complex_mul", 4, 4, False),), t * w, "bwd", n, "attention", "rope"))
        for idx, (name, i, o) in enumerate(d.linears(), 1):
            layer = "attention" if idx <= 4 else "mlp"
            if f8:
                cf, cb = _float8_casts(name, d, i, o, compiled=True, mm_index=idx, layer=layer, f8_args=f8_args)
                # w2's forward feeds only the residual add: the partitioner never recomputes it (the fit trace of
                # f-8b4l-fp8row-full-compile has 108 _scaled_mm per step, not 4 x 7 x 4 = 112)
                last = {"last": True} if name == "w2" else {}
                f, dg, wg = _linear_gemms(name, t, i, o, gemm_dtype, n, layer, idx, **last)
                fwd.append(f)
                fwd.extend(_tag(cf, **last) if last else cf)
                bwd.extend([dg, wg] + cb)
                if A:  # the wgrad's bf16 output to the fp32 parameter's gradient
                    bwd.extend(_k(f"{name}.weight_grad", "copy", (("to_fp32", 2, 4, True),), i * o, "bwd", n, layer, "cast"))
                continue
            f, dg, wg = _linear_gemms(name, t, i, o, gemm_dtype, n, layer, idx)
            fwd.append(f)
            bwd.extend([dg, wg])
            if A:  # triton_poi_fused__to_copy_t_* (fwd cast, recomputed under AC) and _to_copy_* (wgrad upcast)
                fwd.extend(_k(f"{name}.weight", "copy", (("to_bf16", 4, 2, True),), i * o, "fwd", n, "attention", "cast_weight"))
                bwd.extend(_k(f"{name}.weight_grad", "copy", (("to_fp32", 2, 4, True),), i * o, "bwd", n, "attention", "cast"))
        shape = d.attention_shape()
        backend = {"sdpa_backend": d.sdpa_backend} if d.sdpa_backend else {}
        fwd.append(_tag([attention("attention.fwd", shape, "bf16", phase="fwd", count=n, layer="attention")], aten="sdpa", **backend)[0])
        bwd.extend(_tag([attention("attention.bwd", shape, "bf16", phase="bwd", count=n, layer="attention")], **backend))
        ring_f, ring_b = ring_merge_ops(d, compiled=True)
        fwd.extend(ring_f)
        bwd.extend(ring_b)
        return fwd, bwd

    norm_f, norm_b = rmsnorm_tables(s)
    th, tg = ts * d.hidden, t * d.hidden  # the stream [ts, h]; a linear's (gathered) input [t, h]
    # --- attention half: x -> rms_norm -> (cast y) x3 -> wq, wk, wv -> rope -> sdpa -> copy -> wo -> + x
    fwd.extend(_k("attn_norm", "rmsnorm", norm_f, th, "fwd", n, "attention", "rms_norm", rows=ts))
    for idx, (name, i, o) in enumerate(d.linears()[:3], 1):
        if A:
            fwd.extend(_k(f"{name}.input", "copy", CAST_TO_BF16, tg, "fwd", n, "attention", "cast"))
            bwd.extend(_k(f"{name}.input_grad", "copy", CAST_TO_FP32, tg, "bwd", n, "attention", "cast"))
        linear(name, i, o, idx, "attention")
    bwd.extend(_k("attn.input_grads", "add", grad_accumulate(s), tg, "bwd", 2 * n, "attention", "add"))
    for x, w in (("q", d.q), ("k", d.kv)):
        if flavor.rope == "halves":
            fwd.extend(_k(f"rope.{x}", "rope", ROPE_HALVES_FWD, t * w, "fwd", n, "attention", "rope",
                          rows=d.seq * d.head_dim // 2))
            bwd.extend(_k(f"rope.{x}", "rope", ROPE_HALVES_BWD, t * w, "bwd", n, "attention", "rope"))
            bwd.extend(_k(f"rope.{x}.grad_copy", "copy", STRIDED_COPY, t * w, "bwd", n, "attention", "copy"))
        else:
            fwd.extend(_k(f"rope.{x}", "rope", ROPE_COMPLEX_FWD, t * w, "fwd", n, "attention", "rope"))
            bwd.extend(_k(f"rope.{x}", "rope", ROPE_COMPLEX_BWD, t * w, "bwd", n, "attention", "rope",
                          rows=d.seq * d.head_dim // 2))
    shape = d.attention_shape()
    backend = {"sdpa_backend": d.sdpa_backend} if d.sdpa_backend else {}
    fwd.append(_tag([attention("attention.fwd", shape, "bf16", phase="fwd", count=n, layer="attention")], aten="sdpa", **backend)[0])
    bwd.extend(_tag([attention("attention.bwd", shape, "bf16", phase="bwd", count=n, layer="attention")], **backend))
    ring_f, ring_b = ring_merge_ops(d, compiled=False)
    fwd.extend(ring_f)
    bwd.extend(ring_b)
    fwd.extend(_k("attention.o_copy", "copy", STRIDED_COPY, t * d.q, "fwd", n, "attention", "copy"))
    linear("wo", d.q, d.hidden, 4, "attention")
    fwd.extend(_k("attn_residual", "add", RESIDUAL_ADD_A if A else RESIDUAL_ADD_B, th, "fwd", n, "attention", "add"))
    if A:
        bwd.extend(_k("attn_residual.grad", "copy", GRAD_TO_BF16, th, "bwd", n, "attention", "cast"))
    bwd.extend(_k("attn_norm", "rmsnorm", norm_b, th, "bwd", n, "attention", "rms_norm", rows=ts))
    bwd.extend(_k("attn.residual_grad", "add", grad_accumulate(s), th, "bwd", n, "attention", "add"))
    # --- feed-forward half: rms_norm -> (cast y) x2 -> w1, w3 -> silu * mul -> w2 -> + x
    fwd.extend(_k("ffn_norm", "rmsnorm", norm_f, th, "fwd", n, "mlp", "rms_norm", rows=ts))
    for idx, (name, i, o) in ((5, d.linears()[4]), (6, d.linears()[5])):
        if A:
            fwd.extend(_k(f"{name}.input", "copy", CAST_TO_BF16, tg, "fwd", n, "mlp", "cast"))
            bwd.extend(_k(f"{name}.input_grad", "copy", CAST_TO_FP32, tg, "bwd", n, "mlp", "cast"))
        linear(name, i, o, idx, "mlp")
    bwd.extend(_k("ffn.input_grads", "add", grad_accumulate(s), tg, "bwd", n, "mlp", "add"))
    fwd.extend(_k("swiglu", "swiglu", SWIGLU_FWD, t * d.ffn, "fwd", n, "mlp", "swiglu"))
    bwd.extend(_k("swiglu", "swiglu", SWIGLU_BWD, t * d.ffn, "bwd", n, "mlp", "swiglu"))
    linear("w2", d.ffn, d.hidden, 7, "mlp")
    fwd.extend(_k("mlp_residual", "add", RESIDUAL_ADD_A if A else RESIDUAL_ADD_B, th, "fwd", n, "mlp", "add",
                  last=True))  # non-reentrant checkpoint's early stop: never recomputed (add saves nothing)
    if A:
        bwd.extend(_k("mlp_residual.grad", "copy", GRAD_TO_BF16, th, "bwd", n, "mlp", "cast"))
    bwd.extend(_k("ffn_norm", "rmsnorm", norm_b, th, "bwd", n, "mlp", "rms_norm", rows=ts))
    bwd.extend(_k("ffn.residual_grad", "add", grad_accumulate(s), th, "bwd", n, "mlp", "add"))
    return fwd, bwd


def recompute_ops(fwd: list[Op], policy: Policy, layers: int) -> list[Op]:
    """The forward kernels ``policy`` runs again in backward (phase bwd, prefixed ``recompute.``).

    - ``full`` (torch.utils.checkpoint per block, non-reentrant): every forward op but the block's last residual
      add (the recompute stops once the last saved tensor is back: ``early_stop``);
    - ``selective-op`` (torchtitan ``_apply_op_sac`` with ``_op_sac_save_list``): ops whose output is MUST_SAVE
      are not rerun: SDPA, and ``aten.mm`` except every second one (mm_count % 2 == 0 recomputes: wk, wo, w3 of
      wq..w2); everything else -- norms, casts, RoPE, SwiGLU, adds -- is PREFER_RECOMPUTE;
    - ``selective-N`` (``_apply_layer_sac``): blocks N, 2N, ... (1-based ``_layer_sac_count % N == 0``) fully
      checkpointed: ``full`` for layers // N of the blocks.
    """
    count = recomputed_blocks(policy, layers)
    if count <= 0:
        return []
    mode = _block_mode(policy)
    scale = count / layers
    return [replace_op(op, name=f"recompute.{op.name}", phase="bwd", count=max(1, round(op.count * scale)))
            for op in fwd if not _saved(op, mode)]


def recomputed_blocks(policy: Policy, layers: int) -> int:
    """How many of ``layers`` blocks ``policy`` recomputes (``recompute_ops``): all of them, none, or
    ``selective-N``'s layers // N."""
    if policy == "none":
        return 0
    if policy.startswith("selective-") and policy != "selective-op":
        return layers // int(policy.split("-", 1)[1])
    return layers


def block_recompute_ops(fwd: list[Op] | tuple[Op, ...], policy: Policy) -> list[Op]:
    """``recompute_ops`` of one block: the forward kernels ``policy`` reruns in each block it recomputes, with the
    counts of ``fwd`` (one block's; ``recomputed_blocks`` says how many blocks run them)."""
    return [replace_op(fwd[i], name=f"recompute.{fwd[i].name}", phase="bwd")
            for i in block_recomputed_indices(fwd, policy)]


def block_recomputed_indices(fwd: list[Op] | tuple[Op, ...], policy: Policy) -> list[int]:
    """Where in ``fwd`` the ops ``block_recompute_ops`` reruns are, in order (``graph.recomputed``)."""
    if policy == "none":
        return []
    mode = _block_mode(policy)
    return [i for i, op in enumerate(fwd) if not _saved(op, mode)]


def _block_mode(policy: Policy) -> Policy:
    """What a recomputed block reruns under ``policy``: ``selective-N``'s blocks are fully checkpointed."""
    return "full" if policy.startswith("selective-") and policy != "selective-op" else policy


def _saved(op: Op, mode: Policy) -> bool:
    """Whether a recomputed block under ``mode`` (full or selective-op) keeps ``op``'s output instead of rerunning
    it (``recompute_ops``)."""
    a = op.extra.get("aten")
    if op.extra.get("last"):
        return True
    if mode == "full":
        return False
    if mode == "selective-op":  # (a float8 cast of a saved GEMM's operand: only compiled, by the partitioner)
        return a == "sdpa" or (a == "mm" and op.extra["mm_index"] % 2 == 1) or (
            a == "fp8_cast" and op.extra.get("compiled_cast", False) and op.extra["mm_index"] % 2 == 1)
    raise ValueError(f"unknown checkpointing policy {mode!r} (none, full, selective-op, selective-N)")


def head_ops(d: Dims, flavor: StackFlavor) -> list[Op]:
    """Final norm, head GEMM (bf16), the fp32 loss, forward and backward; tied heads add the grad accumulation."""
    t, h, v = d.tokens, d.hidden, d.vocab
    A, s = flavor.autocast, flavor.stream_bytes
    norm_f, norm_b = rmsnorm_tables(s)
    ts = d.stream_tokens  # sequence parallel: the final norm on the stream's rows, the head on all of them
    ops = _k("final_norm", "rmsnorm", norm_f, ts * h, "fwd", 1, "head", "rms_norm", rows=ts)
    ops += _k("final_norm", "rmsnorm", norm_b, ts * h, "bwd", 1, "head", "rms_norm", rows=ts)
    if A:
        ops += _k("lm_head.input", "copy", CAST_TO_BF16, t * h, "fwd", 1, "head", "cast")
        ops += _k("lm_head.weight", "copy", CAST_TO_BF16, v * h, "fwd", 1, "head", "cast_weight")
        ops += _k("lm_head.input_grad", "copy", CAST_TO_FP32, t * h, "bwd", 1, "head", "cast")
        ops += _k("lm_head.weight_grad", "copy", CAST_TO_FP32, v * h, "bwd", 1, "head", "cast")
    ops += gemm_with_grads("lm_head", t, v, h, "bf16", layer="head")
    logits = t * v
    if flavor.compile_loss:
        ops += _k("loss", "cross_entropy", LOSS_COMPILED_FWD, logits, "fwd", 1, "head", "loss", rows=t)
        ops += _k("loss", "cross_entropy", LOSS_COMPILED_BWD, logits, "bwd", 1, "head", "loss", rows=t)
    else:
        for table, phase, splits in LOSS_EAGER_KERNELS:
            ops += _k("loss", "cross_entropy", table, logits, phase, 1, "head", "loss", rows=t,
                      launches=_splits(logits, 4) if splits else 1)
    if flavor.tied:  # the head's and the embedding's gradients of the one table
        ops += _k("tied.grad_accumulate", "add", grad_accumulate(flavor.stream_bytes), v * h, "bwd", 1, "head", "add")
    return ops


def embedding_ops(d: Dims, flavor: StackFlavor) -> list[Op]:
    """F.embedding forward (``vectorized_gather_kernel``) and embedding_dense_backward (the table's zeroed grad,
    a sort of the ids, ``compute_grad_weight`` + ``sum_and_scatter``; cub sort kernels launch only)."""
    t, h = d.tokens, d.hidden
    gather, zero_grad, sort, scatter = embedding_tables(flavor.stream_bytes)
    ops = _k("embedding", "embedding", gather, t * h, "fwd", 1, "embedding", "embedding")
    ops += _k("embedding", "embedding", zero_grad, d.vocab * h, "bwd", 1, "embedding", "embedding")
    ops += _k("embedding", "embedding", sort, t, "bwd", 1, "embedding", "embedding", rows=t)
    ops += _k("embedding", "embedding", scatter, t * h, "bwd", 1, "embedding", "embedding")
    return ops


@functools.cache  # one table object per argument: ``_k`` keeps its ops by table
def embedding_tables(s: int) -> tuple[tuple[Kernel, ...], ...]:
    """``embedding_ops``' tables for a stream of ``s`` bytes per element: the gather, the table's zeroed grad, the
    sort of the ids, the scatter of the grads."""
    return ((("gather", s, s, "gather"),), (("zero_table_grad", 0, s, True),), (("sort", 0, 0, True),) * 12,
            (("compute_grad_weight", s, 4, "gather"), ("sum_and_scatter", 4, s, "gather")))


def optimizer_ops(params: int, flavor: StackFlavor) -> list[Op]:
    """Fused AdamW over every parameter (plus torchtitan's gradient clipping), one launch per 320 chunks."""
    pb = 4 if flavor.param_dtype == "fp32" else 2
    launches = max(1, math.ceil(params / (MTA_CHUNK_ELEMENTS * MTA_BLOCKS_PER_LAUNCH)))
    ops = _k("optimizer", "optimizer", adamw_table(pb), params, "optimizer", 1, "optimizer", "optimizer",
             launches=launches)
    # priced at memory_fraction.fused_adamw.<param dtype> (specs/efficiency.yaml): fused AdamW is not a stream copy
    ops = [dataclasses.replace(o, dtype=flavor.param_dtype, extra={**o.extra, "bandwidth_kind": "fused_adamw"})
           for o in ops]
    if flavor.grad_clip:
        ops += _k("grad_clip", "optimizer", GRAD_CLIP, params, "optimizer", 1, "optimizer", "grad_clip",
                  launches=launches)
    return ops


def stack_step_ops(model, micro_batch: int, seq_len: int, flavor: StackFlavor, policy: Policy = "none") -> list[Op]:
    """Every kernel of one step of a single-GPU, single-micro-batch run of ``flavor`` (counts per step)."""
    d = Dims.of(model, micro_batch, seq_len)
    flavor = dataclasses.replace(flavor, tied=model.tied_embeddings)
    fwd, bwd = block_ops(d, flavor)
    params = d.layers * d.block_params + d.vocab * d.hidden * (1 if flavor.tied else 2) + d.hidden
    return (embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute_ops(fwd, policy, d.layers)
            + optimizer_ops(params, flavor))
