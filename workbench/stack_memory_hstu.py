"""Peak memory of generative-recommenders' HSTU training step on one GPU (the ``generative-recommenders`` stack:
upstream's ``STULayer`` at db1bf8f, ``benchmarks/train/hstu_vendor/``, in the step of
``benchmarks/train/hstu_step.py``).

What each STU layer keeps for backward, per token, with ``STULayerConfig``'s defaults (``recompute_normed_x``,
``recompute_uvqk``, ``recompute_y`` all True):

- ``_HSTUPreprocessAndAttentionFunction`` (``ops/triton/triton_hstu_preprocess_and_attention.py``) saves the layer's
  input ``x`` [L, d] and the input norm's fp32 mean and rstd [L]; neither the normed x nor uvqk [L, W] (both
  recomputed in backward). The Triton HSTU attention is pointwise (SiLU, no softmax): no score matrix, no
  log-sum-exp; its forward allocates only its output.
- ``HSTUComputeOutputFunction`` (``ops/triton/triton_hstu_linear.py``) saves ``attn`` and ``silu(u)`` [L, H x Dl]
  and the output norm's fp32 mean and rstd; not y = cat(u, attn, norm(attn) * u) [L, 3 H Dl] (recomputed). The
  dropout mask is regenerated from its seed (an int8 mask is saved only on sm100+).
- Every weight is cast to bf16 each forward (``.to(x.dtype)``) and the autograd Functions save the copies: two
  bytes per dense parameter beside the fp32 ones.

Around the layers (the benchmark's loss, ``hstu_step.HSTURetrieval.loss``): the input dropout's bool mask [L, d]
(CUDA ``native_dropout``), ``F.normalize``'s saved fp32 inputs of the query (``x.float()``) and of the next-item
target (``roll(emb)``), and in the loss's backward each normalize's fp32 temporaries (the incoming gradient upcast,
two ``div`` results, a ``neg`` and a ``mul``: ``NORMALIZE_BACKWARD_TEMPORARIES``). The peak is the largest of four
moments (``HSTUPeak``): the loss's forward (the logits [L, 1 + R] chain), the cross-entropy's backward (three fp32
[L, 1 + R]), the normalizes' backward, and the last layer's backward (the recomputed normed x and uvqk, duvqk, the
gradients in flight). At the run's shapes (d 512, 8 x 64 heads, 512 negatives) the normalizes' backward is the
largest; at narrow widths the logits' moments are.

Checked, not fitted: a CPU replay of the same step (upstream's autograd Functions with each Triton kernel replaced by
a torch op allocating the same outputs, every live tensor counted; ``tests/test_stack_memory_hstu.py``, at two
widths) finds the same tensors at its peak; the H200 runs' slope between B32 and B64 at S 2048
(``benchmarks/results/h200/train/hstu_second/rows.jsonl``) is 65,293 bytes per token, this model's 65,296.

Static: the fp32 item table (row-sharded over the dp GPUs) with its row-wise Adagrad state, the fp32 dense
parameters and AdamW's two moments. Dense gradients are None at the loss's moments (``zero_grad(set_to_none=True)``)
and all there at the last layer's (an upper bound). Not counted: the learned positions (``S x d`` fp32 with AdamW, 17
MB at S 2048), the batch's int64 ids, cuBLAS workspaces. The workspace term is the recsys family's
``FRAMEWORK_OVERHEAD_GB`` (a guess against max_memory_reserved; the runs' reserved - allocated was 1.1-2.0 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config import TrainingConfig
from workbench.graph.recsys import SAMPLED_SOFTMAX_NEGATIVES
from workbench.hardware import GPU
from workbench.memory import FRAMEWORK_OVERHEAD_GB, GB, ROWWISE_ADAGRAD_BYTES_PER_ROW, MemoryBreakdown
from workbench.models import HSTUModel

BF16 = 2
FP32 = 4
BOOL = 1
NORM_STATS_BYTES = 2 * FP32
"""A layer norm's saved fp32 mean and rstd, per row."""
NORMALIZE_BACKWARD_TEMPORARIES = 5
"""fp32 [L, d] tensors alive at once in ``F.normalize``'s backward (``x / norm.clamp_min(eps).expand_as(x)``): the
gradient upcast from bf16 (``_to_copy``), ``div``'s two results, its ``neg`` and ``mul`` for the denominator's
gradient; counted from torch's autograd formulas and seen in the CPU replay."""
FORWARD_LOCALS = (FP32, BF16, BF16, BF16)
"""Per-d bytes the loss's forward holds besides the saved tensors: the gathered fp32 ``emb`` (a local until the loss
returns), the stack's bf16 output, the bf16 query and target."""


@dataclass(frozen=True)
class HSTUPeak:
    """Bytes per token at each candidate peak, and the static bytes (``hstu_gr_memory``)."""

    layer_saved: float
    """One STU layer's saved bytes per token."""
    weight_copies: float
    """The bf16 weight copies the layers save (bytes, not per token)."""
    moments: tuple[tuple[str, float], ...]
    """(moment, bytes per token there, all layers' saved bytes included): the loss's forward, the cross-entropy's
    backward, the normalizes' backward, the last layer's backward."""

    @property
    def per_token(self) -> float:
        return max(bytes_ for _, bytes_ in self.moments)

    @property
    def at(self) -> str:
        return max(self.moments, key=lambda m: m[1])[0]


def hstu_gr_peak(model: HSTUModel, negatives: int = SAMPLED_SOFTMAX_NEGATIVES) -> HSTUPeak:
    """Bytes per token at the step's three candidate peaks (the module docstring), bf16 activations."""
    d, heads_out, uvqk = model.embedding_dim, model.num_heads * model.linear_dim, model.uvqk_width
    layer = BF16 * (d + 2 * heads_out) + 2 * NORM_STATS_BYTES  # x; attn, silu(u); two norms' mean and rstd
    layers = model.num_layers * layer
    mask = BOOL * d  # the input dropout's mask
    # saved by the loss: F.normalize's fp32 inputs (query, target) with their [L, 1] norms and clamped norms
    normalize_saved = 2 * (FP32 * d + 2 * FP32)
    logits = FP32 * (1 + negatives)
    # at log_softmax: the bf16 negative logits [L, R] (a local), the scaled fp32 logits and their log-softmax
    loss_forward = (layers + mask + normalize_saved + sum(FORWARD_LOCALS) * d
                    + BF16 * negatives + 2 * logits)
    # in a normalize's backward: the other's saved input, the query's bf16 gradient, the temporaries
    # cross-entropy's backward: log_softmax's saved output, nll_loss's gradient and log_softmax's [L, 1 + R]; the
    # bf16 query and target still saved by the positive logit's product
    cross_entropy_backward = layers + mask + normalize_saved + 2 * BF16 * d + 3 * logits
    normalize_backward = layers + mask + normalize_saved + BF16 * d + NORMALIZE_BACKWARD_TEMPORARIES * FP32 * d
    # the last layer's preprocess backward: its compute-output's saved tensors freed; held: the item embedding's
    # fp32 gradient from the target branch, the residual's gradient; made: normed x (and new mean, rstd), uvqk and
    # duvqk, d_normed_x, d_x, beside the incoming dsilu_u and dattn
    transient = BF16 * (3 * d + 2 * uvqk + 2 * heads_out + d) + NORM_STATS_BYTES
    compute_output_saved = BF16 * 2 * heads_out + NORM_STATS_BYTES
    last_layer_backward = layers - compute_output_saved + mask + FP32 * d + transient
    return HSTUPeak(layer_saved=layer, weight_copies=BF16 * model.dense_params,
                    moments=(("loss forward", loss_forward), ("cross-entropy backward", cross_entropy_backward),
                             ("normalize backward", normalize_backward),
                             ("last layer backward", last_layer_backward)))


def hstu_gr_memory(model: HSTUModel, cfg: TrainingConfig, gpu: GPU) -> MemoryBreakdown:
    """Peak bytes per GPU of the ``generative-recommenders`` step (the module docstring): the table row-sharded
    over the dp GPUs with row-wise Adagrad, fp32 dense parameters with AdamW, the peak moment's activations."""
    p = cfg.parallelism
    peak = hstu_gr_peak(model)
    tokens = cfg.micro_batch * cfg.seq_len
    dense = model.dense_params
    grads = FP32 * dense if peak.at == "last layer backward" else 0.0  # None until the layers' backward
    return MemoryBreakdown(
        params=model.embedding_params * FP32 / p.dp + FP32 * dense,
        grads=grads,
        optimizer=model.item_table_rows * ROWWISE_ADAGRAD_BYTES_PER_ROW / p.dp + 2 * FP32 * dense,
        activations=peak.weight_copies + tokens * peak.per_token,
        workspace=FRAMEWORK_OVERHEAD_GB * GB,
        capacity=gpu.hbm_capacity_gb.value * GB,
    )
