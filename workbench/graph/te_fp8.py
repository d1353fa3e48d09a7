"""TransformerEngine's fp8 casts around Megatron-Core's TE linears (the ``megatron`` stack's fp8 tables).

Not measured: TransformerEngine does not build for the lent H200. Read from TransformerEngine's source (main,
d0067d0) and NeMo's precision recipes (nemo/collections/llm/recipes/precision/mixed_precision.py):

- **delayed scaling** (``bf16_with_fp8_mixed``: ``fp8="hybrid"`` -- e4m3 forward, e5m2 gradients --
  ``Fp8Recipe.delayed``, amax history 1024, ``fp8_param_gather=True``): ``Float8Quantizer``. The norm of a
  ``LayerNormLinear`` writes fp8 itself (pytorch/csrc/extensions/normalization.cpp ``Impl::FULLY_FUSED``); every
  other cast is one ``nvte_quantize_v2`` kernel that also writes the transpose when the tensor has column-wise usage
  (the fused cast-transpose); the amaxes and scales are updated once per autocast region (forward and backward
  of each micro-batch: ``FP8GlobalStateManager.reduce_and_update_fp8_tensors``).
- **current (per-tensor) scaling** (``bf16_with_fp8_current_scaling_mixed``: ``Fp8Recipe.tensorwise``, the first
  and last blocks in bf16 unless the run turns it off -- NeMo 25.04's performance scripts do: the stack's
  ``fp8_bf16_end_blocks`` -- ``fp8_param_gather=True``): ``Float8CurrentScalingQuantizer``. The norm writes bf16 and
  its amax in one kernel (``Impl::FUSED_NORM_AMAX_FP8``), then ``quantize_with_amax``: the scale
  (``nvte_compute_scale_from_amax``) and the cast; any other cast first reads the tensor for its amax
  (pytorch/csrc/quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax``, [amax
  all-reduce], scale, ``nvte_quantize_v2``).
- **MXFP8** (``bf16_with_mxfp8_mixed``: ``Fp8Recipe.mxfp8``, ``fp8_param_gather=False``; Blackwell): one e8m0
  scale per 32 elements along the rows and another along the columns, both written by one quantize kernel; the
  norm writes bf16 and is quantized after it (``Impl::UNFUSED`` unless ``NVTE_NORM_FWD_USE_CUDNN``).

Column-wise data (wgrad's x^T and dy^T, dgrad's W^T) is a transposed copy on Hopper only: Blackwell's fp8 GEMMs
take any layout (common/transformer_engine.cpp ``nvte_is_non_tn_fp8_gemm_supported``: sm 10.x and >= 13.0), so
per-tensor quantizers there write no transpose (pytorch/csrc/quantizer.cpp ``with_transpose = columnwise_usage &&
!is_non_tn_fp8_gemm_supported``). Under sequence parallelism the all-gather takes row-wise fp8 only
(layernorm_linear.py ``supports_only_rowwise_all_gather``): the gathered norm output is transposed in backward.

Weights: with ``fp8_param_gather`` the parameters are fp8 tensors the distributed optimizer writes from its fp32
main shard after the step (one cast per step; current scaling reads the shard for its amax first); the transpose
(Hopper) is made once per step, on the first micro-batch (``is_first_microbatch``: Megatron's schedules set it,
TE caches the workspace across the other micro-batches). MXFP8 keeps bf16 parameters and quantizes each weight
once per step on the first micro-batch, cached after. What stays bf16: attention (no fp8 DPA in these recipes),
norms' arithmetic, softmax, RoPE, SwiGLU, the loss and the output layer (Megatron's own ColumnParallelLinear).

Not priced: the amax all-reduces (delayed: one small all-reduce per autocast region; current: one per column-parallel
input under sequence parallelism) -- latency-bound, a few tens of us per micro-batch: guess, calibrate me on a TE
trace. Tables per element of the walked tensor, ``execution.kernels``' convention (every TE cast kernel is
vectorized).
"""

from __future__ import annotations

from typing import Literal

from workbench.graph.execution import Kernel
from workbench.graph.ops import Op

TeFp8Recipe = Literal["none", "delayed", "current", "mxfp8"]
TE_FP8_RECIPES: tuple[str, ...] = ("delayed", "current", "mxfp8")
MX_BLOCK = 32
"""Elements per MXFP8 e8m0 scale (OCP MX v1.0)."""


FP8_ANY_LAYOUT_ARCHITECTURES: tuple[str, ...] = ("blackwell", "blackwell-ultra")
"""Catalog architectures of sm 10.x (B200, GB200: sm100; B300: sm103), whose fp8 GEMMs take any operand layout
(``nvte_is_non_tn_fp8_gemm_supported``: sm 10.x and >= 13.0; not sm 12.x)."""


def fp8_gemm_any_layout(gpu) -> bool:
    """Whether TransformerEngine's per-tensor fp8 on ``gpu`` writes no transposes (its fp8 GEMMs take any layout)."""
    return gpu.architecture in FP8_ANY_LAYOUT_ARCHITECTURES


def gemm_dtype(recipe: TeFp8Recipe) -> str:
    """The GEMMs' precision under ``recipe`` (all three of a linear: ``fp8="hybrid"`` runs dgrad and wgrad in fp8)."""
    return {"none": "bf16", "delayed": "fp8", "current": "fp8", "mxfp8": "mxfp8"}[recipe]


def _quantize(recipe: TeFp8Recipe, transpose: bool, amax_known: bool = False) -> tuple[Kernel, ...]:
    """One bf16 tensor quantized with row-wise and column-wise usage, per element: delayed one cast-transpose
    kernel; current an amax read (unless the producer wrote it), the scale, the cast-transpose; MXFP8 one kernel
    writing both orientations and their scales."""
    if recipe == "mxfp8":
        return (("mxfp8_quantize", 2, 2 + 2 / MX_BLOCK, True),)
    cast = ("fp8_cast_transpose" if transpose else "fp8_cast", 2, 2 if transpose else 1, True)
    if recipe == "delayed":
        return (cast,)
    return ((() if amax_known else (("amax", 2, 0, True),)) + (("compute_scale", 0, 0, True), cast))


FP8_TRANSPOSE: tuple[Kernel, ...] = (("fp8_transpose", 1, 1, True),)
"""An fp8 tensor's column-wise copy (``nvte_transpose``, Hopper)."""
NORM_FP8_FWD: tuple[Kernel, ...] = (("te_rmsnorm_fp8", 2, 1, True),)
"""Delayed scaling: the norm writes fp8 row-wise data (and its amax) itself."""
AMAX_UPDATE: tuple[Kernel, ...] = (("amax_cat", 0, 0, True), ("amax_and_scale_update", 0, 0, True))
"""Delayed scaling, per autocast region: the amax buffers concatenated for the reduction, then
``fused_amax_and_scale_update_after_reduction`` (launch-bound)."""


def _ops(k, prefix: str, table, elements: int, phase: str, count: int, layer: str) -> list[Op]:
    return k(prefix, "fp8_quantize", table, elements, phase, count, layer, "fp8_cast")


def norm_output_casts(k, name: str, recipe: TeFp8Recipe, ts: int, t: int, i: int, transpose: bool, count: int,
                      layer: str) -> tuple[list[Op], list[Op]]:
    """(forward, backward) casts of a ``LayerNormLinear``'s norm output [ts, i] (gathered to [t, i] under sequence
    parallelism, ts < t) beyond its norm kernel (``norm_table``): delayed none in forward (the norm writes fp8);
    current the scale and the cast; MXFP8 the quantize. The column-wise copy: fused into the cast on one GPU, the
    gathered tensor's transpose in backward under sequence parallelism (Hopper)."""
    sp = ts < t
    fwd: list[Op] = []
    bwd: list[Op] = []
    if recipe == "current":
        fwd += _ops(k, f"{name}.ln_out", _quantize(recipe, transpose and not sp, amax_known=True), ts * i, "fwd",
                    count, layer)
    elif recipe == "mxfp8":
        fwd += _ops(k, f"{name}.ln_out", _quantize(recipe, False), ts * i, "fwd", count, layer)
    if transpose and (recipe == "delayed" or sp) and recipe != "mxfp8":
        bwd += _ops(k, f"{name}.ln_out_t", FP8_TRANSPOSE, t * i, "bwd", count, layer)
    return fwd, bwd


def norm_table(recipe: TeFp8Recipe, bf16_table: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    """The ``LayerNormLinear``'s norm kernel: fp8 out under delayed scaling, else the bf16 kernel (current
    scaling's fused amax adds no bytes)."""
    return NORM_FP8_FWD if recipe == "delayed" else bf16_table


def input_casts(k, name: str, recipe: TeFp8Recipe, t: int, i: int, transpose: bool, count: int,
                layer: str) -> list[Op]:
    """A plain ``Linear``'s bf16 input [t, i] quantized in forward (row-wise for fprop, column-wise for wgrad)."""
    return _ops(k, f"{name}.x", _quantize(recipe, transpose), t * i, "fwd", count, layer)


def grad_output_casts(k, name: str, recipe: TeFp8Recipe, t: int, o: int, transpose: bool, count: int,
                      layer: str) -> list[Op]:
    """dy [t, o] quantized in backward (row-wise for dgrad, column-wise for wgrad: ``grad_output_preprocess``)."""
    return _ops(k, f"{name}.dy", _quantize(recipe, transpose), t * o, "bwd", count, layer)


def activation_output_casts(k, name: str, recipe: TeFp8Recipe, t: int, i: int, transpose: bool, count: int,
                            layer: str) -> list[Op]:
    """An activation's bf16 output [t, i] quantized for the next linear when the activation kernel wrote its amax
    (current scaling: the scale and the cast; ``stack_kernels_megatron_gpt``'s gelu)."""
    return _ops(k, name, _quantize(recipe, transpose, amax_known=True), t * i, "fwd", count, layer)


def transpose_ops(k, name: str, elements: int, phase: str, count: int, layer: str) -> list[Op]:
    """An fp8 tensor's column-wise copy (``FP8_TRANSPOSE``) of ``elements``."""
    return _ops(k, name, FP8_TRANSPOSE, elements, phase, count, layer)


def weight_step_casts(k, name: str, recipe: TeFp8Recipe, i: int, o: int, shard: int, transpose: bool,
                      count: int, layer: str) -> list[Op]:
    """Once per step, a linear's weight W[o, i]: with ``fp8_param_gather`` (delayed, current) the fp32 main shard
    (``shard`` ranks) cast to the fp8 parameter (current: its amax read first) and, on Hopper, the gathered fp8
    weight's transpose on the first micro-batch; MXFP8 the bf16 weight quantized on the first micro-batch."""
    elements = i * o
    if recipe == "mxfp8":
        return _ops(k, f"{name}.w", _quantize(recipe, False), elements, "optimizer", count, layer)
    cast: tuple[Kernel, ...] = (("main_to_fp8_param", 4, 1, True),)
    if recipe == "current":
        cast = (("main_amax", 4, 0, True),) + cast
    ops = _ops(k, f"{name}.w_main", cast, max(1, elements // shard), "optimizer", count, layer)
    if transpose:
        ops += _ops(k, f"{name}.w_t", FP8_TRANSPOSE, elements, "optimizer", count, layer)
    return ops
