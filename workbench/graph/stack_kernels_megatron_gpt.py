"""What the ``megatron`` (TE) stack launches for a GPT-2/GPT-3 block (LayerNorm with bias, GeLU MLP, biased linears,
learned absolute positions, no GQA) beyond what its Llama block launches (``stack_kernels_megatron``).

NeMo trains GPT-3 175B on TransformerEngine's own ``TransformerLayer`` (NVIDIA/NeMo nemo/collections/llm/gpt/
model/gpt.py ``GPTConfig175B``: ``use_transformer_engine_full_layer_spec=True``, ``bias_activation_fusion``,
``bias_dropout_add_fusion``, dropout 0; ``GPTConfig``: ``position_embedding_type="learned_absolute"``,
``share_embeddings_and_output_weights``, ``cross_entropy_loss_fusion``; Megatron-Core's ``TransformerConfig``
``add_bias_linear=True``): a ``LayerNormLinear`` QKV, TE's fused attention, a ``Linear`` projection, a
``LayerNormMLP`` (fc1, gelu, fc2). Per block, from TransformerEngine's transformer_engine/pytorch/module/
layernorm_mlp.py (v1.x, as NeMo 24.07 ran it; the fp8 and bf16 paths read below):

- the norms are TE's LayerNorm kernels (transformer_engine/common/normalization: forward one kernel, x in, ln_out
  and per-row mu / rsigma out; backward ``layernorm_bwd`` and its dgamma / dbeta finalize): the RMSNorm tables'
  bytes (the extra per-row mu is negligible);
- QKV's bias is added in the GEMM's epilogue (``fp8_gemm(..., bias=..., use_bias=True)`` / ``gemm(bias=...)``);
  its gradient comes from dy's cast under fp8 (``grad_output_preprocess`` with ``use_bias``: TE's
  ``fp8_cast_transpose_bgrad_fused``, the cast kernel writes dbias partials, then a ``reduce_dbias`` kernel) and
  from the wgrad GEMM's epilogue in bf16 (``gemm(grad=True, use_bias=True)``: no kernel);
- the row-parallel biases (proj, fc2) are returned (``return_bias``: "For RPL, bias has to be added after TP
  collectives") and added in the block's fused bias-dropout-add (one kernel, the residual add's bytes); their
  gradient is a reduction of the stream's gradient over its rows (``BIAS_GRAD_SUM``);
- fc1 -> gelu, fp8 (delayed scaling): the fp8 GEMM adds fc1's bias in its epilogue and writes bf16 ``fc1_out``,
  then ``tex.gelu(fc1_out, fp8_meta, ...)`` writes fp8 ``gelu_out`` in one kernel (``gemm_gelu_fusion`` is off:
  ``NVTE_GEMM_GELU_FUSION`` defaults to 0); fc2's wgrad transposes ``gelu_out`` (``tex.fp8_transpose``, Hopper
  only under ``te_fp8``'s layout rule); backward one ``fp8_cast_transpose_bgrad_dgelu_fused`` kernel (reads fc2's
  dgrad and ``fc1_out``, writes fp8 dgelu and its transpose, fc1's dbias partials) and its ``reduce_dbias``;
- fc1 -> gelu, bf16 (``bias_gelu_nvfusion``: ``NVTE_BIAS_GELU_NVFUSION`` defaults to 1): the GEMM without bias, then
  TE's jit ``bias_gelu_fused`` (one kernel); backward ``bgrad_dgelu_fused`` (the dgelu kernel and the bias's sum
  over rows: two kernels, guess, calibrate me);
- current scaling (TE 2.x ``Float8CurrentScalingQuantizer``, ``te_fp8``) and MXFP8: TE 2.x computes the activation
  and quantizes it; the tables price current scaling as the bf16 activation writing its amax, then the scale and
  the cast (``te_fp8.activation_output_casts``), and dgelu in bf16 with its bias sum, then dy's full current-scaling
  cast; MXFP8 as one fused activation-quantize kernel each way: guess, calibrate me on a TE 2.x trace;
- TE's attention reads q, k, v straight out of the fused QKV output (``qkv_layout`` ``sbh3d``): no split copy;
- every bias and norm parameter's gradient is added to its fp32 ``main_grad`` by DDP's hook
  (``gradient_accumulation_fusion`` covers the weights only): one add per tensor;
- the embedding adds the learned position table's rows (megatron/core/models/common/embeddings/
  language_model_embedding.py ``LanguageModelEmbedding``: ``word_embeddings + position_embeddings``), whose
  backward is the word table's (``stack_kernels.embedding_ops``) over a [seq, hidden] table.

Tables per element of the walked tensor, ``execution.kernels``' convention.
"""

from __future__ import annotations

from workbench.graph import te_fp8
from workbench.graph.execution import Kernel
from workbench.graph.ops import Op
from workbench.graph.stack_kernels import Dims, _k
from workbench.graph.te_fp8 import TeFp8Recipe


def is_gpt_block(model) -> bool:
    """Whether ``model``'s blocks are GPT-2/GPT-3's (LayerNorm, GeLU MLP; biases and learned positions as NeMo's
    ``GPTConfig`` sets them): what ``stack_kernels_megatron.block_ops`` prices with these tables."""
    return model.norm == "layernorm" and model.ffn_activation == "gelu" and not model.is_moe


LAYERNORM_TE_FWD: tuple[Kernel, ...] = (("te_layernorm", 2, 2, True),)
LAYERNORM_TE_BWD: tuple[Kernel, ...] = (("te_layernorm_bwd", 4, 2, True), ("te_dgamma_dbeta_reduce", 0, 0, True))
LAYERNORM_FP8_FWD: tuple[Kernel, ...] = (("te_layernorm_fp8", 2, 1, True),)
"""Delayed scaling: the LayerNormMLP / LayerNormLinear norm writes fp8 itself (``_apply_normalization(..., fp8)``)."""
BIAS_GELU_FWD: tuple[Kernel, ...] = (("bias_gelu", 2, 2, True),)
BGRAD_DGELU_BWD: tuple[Kernel, ...] = (("bgrad_dgelu", 4, 2, True), ("dbias_sum", 2, 0, True))
GELU_FP8_FWD: tuple[Kernel, ...] = (("gelu_fp8", 2, 1, True),)
GELU_MXFP8_FWD: tuple[Kernel, ...] = (("gelu_mxfp8", 2, 2 + 2 / te_fp8.MX_BLOCK, True),)
REDUCE_DBIAS: tuple[Kernel, ...] = (("reduce_dbias", 0, 0, True),)
"""The second kernel of TE's fused cast + dbias: the per-block dbias partials summed (launch-bound)."""
DBIAS_SUM: tuple[Kernel, ...] = (("dbias_sum", 2, 0, True),)
BIAS_GRAD_SUM: tuple[Kernel, ...] = (("bias_grad_sum", 2, 0, True),)
"""A returned bias's gradient: the bf16 stream gradient summed over its rows."""


def norm_tables(recipe: TeFp8Recipe) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """(forward, backward) of a TE LayerNorm before a LayerNormLinear / LayerNormMLP (fp8 out under delayed
    scaling); ``recipe`` none: the bf16 kernel (the final norm's)."""
    return (LAYERNORM_FP8_FWD if recipe == "delayed" else LAYERNORM_TE_FWD), LAYERNORM_TE_BWD


def gelu_ops(d: Dims, recipe: TeFp8Recipe, transpose: bool, n: int) -> tuple[list[Op], list[Op]]:
    """(forward, backward) kernels between fc1 and fc2 over [tokens, ffn / tp]: the activation (with fc2's input
    quantization where TE fuses it), and backward dgelu with fc1's bias gradient and fc1's dy quantization (the
    module docstring's paths). fc2's input cast under current scaling and fc1's dy cast are here, not in the
    linears' (``_gemm_grads(..., casts_input=False, casts_grad=False)``)."""
    t, f = d.tokens, d.ffn
    if recipe == "none":
        fwd = _k("gelu", "gelu", BIAS_GELU_FWD, t * f, "fwd", n, "mlp", "gelu")
        return fwd, _k("gelu", "gelu", BGRAD_DGELU_BWD, t * f, "bwd", n, "mlp", "gelu")
    if recipe == "delayed":
        fwd = _k("gelu", "gelu", GELU_FP8_FWD, t * f, "fwd", n, "mlp", "gelu")
        bwd = (_k("gelu", "gelu", (("cast_transpose_dbias_dgelu", 4, 2 if transpose else 1, True),) + REDUCE_DBIAS,
                  t * f, "bwd", n, "mlp", "gelu"))
        if transpose:  # fc2's wgrad: gelu_out^T (tex.fp8_transpose)
            bwd += te_fp8.transpose_ops(_k, "linear_fc2.x_t", t * f, "bwd", n, "mlp")
        return fwd, bwd
    if recipe == "mxfp8":
        fwd = _k("gelu", "gelu", GELU_MXFP8_FWD, t * f, "fwd", n, "mlp", "gelu")
        bwd = _k("gelu", "gelu", (("dbias_dgelu_mxfp8", 4, 2 + 2 / te_fp8.MX_BLOCK, True),) + REDUCE_DBIAS,
                 t * f, "bwd", n, "mlp", "gelu")
        return fwd, bwd
    # current scaling: bf16 activation writing its amax, then the scale and the cast; dgelu + dbias in bf16, then
    # dy's amax, scale and cast
    fwd = _k("gelu", "gelu", (("gelu_amax", 2, 2, True),), t * f, "fwd", n, "mlp", "gelu")
    fwd += te_fp8.activation_output_casts(_k, "linear_fc2.x", recipe, t, f, transpose, n, "mlp")
    bwd = _k("gelu", "gelu", BGRAD_DGELU_BWD, t * f, "bwd", n, "mlp", "gelu")
    bwd += te_fp8.grad_output_casts(_k, "linear_fc1", recipe, t, f, transpose, n, "mlp")
    return fwd, bwd


def qkv_bias_grad_ops(d: Dims, recipe: TeFp8Recipe, n: int) -> list[Op]:
    """QKV's bias gradient beyond dy's cast: fp8 delayed / MXFP8 the fused cast's ``reduce_dbias``; current
    scaling a sum of dy over its rows (guess, calibrate me); bf16 none (the wgrad GEMM's epilogue)."""
    if recipe == "none":
        return []
    table = DBIAS_SUM if recipe == "current" else REDUCE_DBIAS
    return _k("linear_qkv.dbias", "sum", table, d.tokens * (d.q + 2 * d.kv), "bwd", n, "attention", "bias")


def row_bias_grad_ops(name: str, d: Dims, n: int, layer: str) -> list[Op]:
    """A returned row-parallel bias's gradient (proj, fc2): the [tokens / tp, hidden] stream gradient summed."""
    return _k(f"{name}.dbias", "sum", BIAS_GRAD_SUM, d.stream_tokens * d.hidden, "bwd", n, layer, "bias")


def small_parameters(d: Dims) -> tuple[tuple[str, int, str], ...]:
    """(name, elements, layer) of one block's bias and norm parameters on this rank (each added to its main_grad
    by DDP's hook): the two LayerNorms' weight and bias, QKV's and fc1's column-parallel biases, proj's and fc2's."""
    h = d.hidden
    return (("input_layernorm.weight", h, "attention"), ("input_layernorm.bias", h, "attention"),
            ("linear_qkv.bias", d.q + 2 * d.kv, "attention"), ("linear_proj.bias", h, "attention"),
            ("pre_mlp_layernorm.weight", h, "mlp"), ("pre_mlp_layernorm.bias", h, "mlp"),
            ("linear_fc1.bias", d.ffn, "mlp"), ("linear_fc2.bias", h, "mlp"))


def position_embedding_ops(d: Dims, stream_bytes: int, main_grad_add: tuple[Kernel, ...]) -> list[Op]:
    """The learned position table [seq, hidden]: its gather and the add to the word embeddings (forward); the
    dense embedding backward over it (zeroed grad, the ids' sort, ``compute_grad_weight``, ``sum_and_scatter``:
    ``stack_kernels.embedding_ops``' kernels) and its main_grad add."""
    t, h, s, rows = d.tokens, d.hidden, stream_bytes, d.seq * d.cp
    ops = _k("position_embedding", "embedding", (("gather", s, s, "gather"),), t * h, "fwd", 1, "embedding",
             "embedding")
    ops += _k("position_embedding.add", "add", (("add", 2 * s, s, True),), t * h, "fwd", 1, "embedding", "add")
    ops += _k("position_embedding", "embedding", (("zero_table_grad", 0, s, True),), rows * h, "bwd", 1,
              "embedding", "embedding")
    ops += _k("position_embedding", "embedding", (("sort", 0, 0, True),) * 12, t, "bwd", 1, "embedding",
              "embedding", rows=t)
    ops += _k("position_embedding", "embedding", (("compute_grad_weight", s, 4, "gather"),
                                                  ("sum_and_scatter", 4, s, "gather")),
              t * h, "bwd", 1, "embedding", "embedding")
    ops += _k("position_embedding.main_grad", "add", main_grad_add, rows * h, "bwd", 1, "embedding", "main_grad")
    return ops


def gpt_parameters(d: Dims) -> tuple[int, int]:
    """(parameters, tensors) of one GPT block on this rank: QKV, proj, fc1, fc2 weights and ``small_parameters``."""
    weights = d.hidden * (d.q + 2 * d.kv) + d.q * d.hidden + 2 * d.hidden * d.ffn
    small = small_parameters(d)
    return weights + sum(e for _, e, _ in small), 4 + len(small)
