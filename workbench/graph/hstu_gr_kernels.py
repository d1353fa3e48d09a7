"""The kernels an HSTU micro-batch runs under the public generative-recommenders implementation (the
``generative-recommenders`` stack; ``benchmarks/train/hstu_vendor/`` holds the code at commit db1bf8f).

Per STU layer (``modules/stu.py``: ``STULayer`` with its ``STULayerConfig`` defaults, ``HammerKernel.TRITON``), on
``L = batch x seq_len`` tokens, ``d`` the embedding width, ``W`` the uvqk width, ``H x Dl`` the heads' linear width:

    forward   input layer norm (Triton)      -> uvqk = addmm(normed_x, W_uvqk, b) [L, W] (Triton _addmm_fwd)
              silu(u) [L, H x Dl] (torch)    -> _hstu_attn_fwd (Triton; SiLU attention, causal)
              _ln_mul_dropout_fwd: y = cat(u, attn, dropout(norm(attn) * u)) [L, 3 x H x Dl]
              out = addmm(y, W_out, x) [L, d] (Triton _addmm_fwd, the residual as its bias)
    backward  dy = dout W_out^T, dW_out = y^T dout (cuBLAS); _ln_mul_dropout_bwd_dx_du, which also recomputes y
              (recompute_y_in_backward) and its dwdb reduction; the input norm and the uvqk addmm recomputed
              (recompute_normed_x / recompute_uvqk_in_backward); _hstu_attn_bwd into duvqk; silu_backward;
              triton_addmm_bwd (two cuBLAS mm and the bias' column sum); the input norm's backward; autograd's
              add of the residual's gradient to the norm's.

(``ops/triton/triton_hstu_preprocess_and_attention.py``, ``ops/triton/triton_hstu_linear.py:
HSTUComputeOutputFunction``, ``ops/triton/triton_addmm.py: triton_addmm_bwd``.)

The two upstream Triton kernel families that are far from their roofs price at their own fractions: the HSTU
attention as ``sdpa_backend`` ``hstu-triton`` (``attention_fwd_fraction.hstu-triton`` /
``attention_bwd_fraction.hstu-triton``) and the fused norm-mul-dropout as bandwidth classes
``hstu_ln_mul_dropout_fwd`` / ``hstu_ln_mul_dropout_bwd`` (``memory_fraction.<class>``). Until a GPU's kernel fit
(``benchmarks/train/hstu_kernels.py``) gives them, they fall back to the generic attention and memory fractions.
"""

from __future__ import annotations

from workbench.config import TrainingConfig, activation_dtype
from workbench.graph.ops import AttentionShape, Op, RowsShape, attention, gemm, gemm_with_grads, memory_op, replace_op
from workbench.models import HSTUModel

ATTENTION_BACKEND = "hstu-triton"
"""``Op.extra["sdpa_backend"]`` of upstream's Triton HSTU attention (``ops/triton/triton_hstu_attention.py``)."""
LN_MUL_DROPOUT_FWD = "hstu_ln_mul_dropout_fwd"
LN_MUL_DROPOUT_BWD = "hstu_ln_mul_dropout_bwd"
"""Bandwidth classes of ``_ln_mul_dropout_fwd`` and ``_ln_mul_dropout_bwd_dx_du`` (``Op.extra["bandwidth_kind"]``)."""


def hstu_gr_layer_ops(model: HSTUModel, tokens: int, batch: int, seq_len: int, dtype: str) -> list[Op]:
    """One STU layer's kernels for ``tokens`` tokens (``count`` 1), forward then backward, in launch order."""
    act = activation_dtype(dtype)
    d, uvqk, linear = model.embedding_dim, model.uvqk_width, model.num_heads * model.linear_dim
    wide = model.output_in_width

    def rows(name: str, kind: str, cols: int, reads: float, writes: float, phase: str = "fwd", **extra) -> Op:
        op = memory_op(name, kind, RowsShape(tokens, cols), act, reads=reads, writes=writes, phase=phase,
                       layer="hstu")
        return replace_op(op, extra=extra) if extra else op

    # pointwise SiLU attention: QK^T over attention_dim, AV over linear_dim -> head_dim = their mean
    shape = AttentionShape(batch, seq_len, model.num_heads, model.num_heads,
                           (model.attention_dim + model.linear_dim) // 2, causal=True)
    tagged = {"sdpa_backend": ATTENTION_BACKEND}
    uvqk_fwd, uvqk_dgrad, uvqk_wgrad = gemm_with_grads("uvqk", tokens, uvqk, d, dtype, layer="hstu")
    out_fwd, out_dgrad, out_wgrad = gemm_with_grads("output", tokens, d, wide, dtype, layer="hstu")
    return [
        rows("input_norm.fwd", "layernorm", d, 1, 1),
        uvqk_fwd,
        rows("silu_u.fwd", "silu", linear, 1, 1),
        replace_op(attention("hstu_attention.fwd", shape, act, phase="fwd", layer="hstu"), extra=tagged),
        # reads attn and u, writes y = cat(u, attn, dropout(norm(attn) * u)); the dropout mask from a seed
        rows("ln_mul_dropout.fwd", "layernorm", linear, 2, 3, bandwidth_kind=LN_MUL_DROPOUT_FWD),
        out_fwd,
        out_dgrad,
        out_wgrad,
        # reads dy [L, 3 x linear], attn and u; writes dattn, du and the recomputed y [L, 3 x linear]
        rows("ln_mul_dropout.bwd", "layernorm", linear, 5, 5, phase="bwd", bandwidth_kind=LN_MUL_DROPOUT_BWD),
        rows("input_norm.recompute", "layernorm", d, 1, 1, phase="bwd"),
        gemm("uvqk.recompute", tokens, uvqk, d, uvqk_fwd.dtype, phase="bwd", layer="hstu"),
        replace_op(attention("hstu_attention.bwd", shape, act, phase="bwd", layer="hstu"), extra=tagged),
        rows("silu_u.bwd", "silu", linear, 2, 1, phase="bwd"),
        uvqk_dgrad,
        uvqk_wgrad,
        rows("uvqk.bias_grad", "sum", uvqk, 1, 0, phase="bwd"),
        rows("input_norm.bwd", "layernorm", d, 2, 1, phase="bwd"),
        rows("residual.grad_add", "add", d, 2, 1, phase="bwd"),
    ]


def hstu_gr_microbatch_ops(model: HSTUModel, cfg: TrainingConfig, shared: list[Op]) -> list[Op]:
    """One micro-batch as generative-recommenders runs it: ``shared`` (the bound's item gather and update and its
    sampled-softmax GEMMs, which the benchmark's step runs outside the STU stack) and the layers' kernels, each
    ``count`` the number of layers."""
    b, s = cfg.micro_batch, cfg.seq_len
    layer = [replace_op(op, count=model.num_layers)
             for op in hstu_gr_layer_ops(model, b * s, b, s, cfg.precision)]
    tokens = b * s
    act = activation_dtype(cfg.precision)
    # the positional preprocessor's input dropout (research configs' 0.2: hstu_step.INPUT_DROPOUT), fwd and bwd
    dropout = [memory_op("input_dropout.fwd", "mul", RowsShape(tokens, model.embedding_dim), act, reads=1, writes=2,
                         layer="hstu"),
               memory_op("input_dropout.bwd", "mul", RowsShape(tokens, model.embedding_dim), act, reads=2, writes=1,
                         phase="bwd", layer="hstu")]
    return [op for op in shared if op.layer in ("embedding", "loss")] + dropout + layer
