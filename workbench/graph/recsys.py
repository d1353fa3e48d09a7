"""Operators of one recommendation-model micro-batch on one GPU: DLRM-DCNv2 and HSTU.

Embedding tables are sharded across the data-parallel GPUs (model parallel, TorchRec style), so each GPU does,
on average, the lookups of a whole micro-batch; dense layers are replicated. Table weights are fp32, trained
with row-wise Adagrad fused into the backward pass (FBGEMM's table-batched embedding kernels).
"""

from __future__ import annotations

import math

from workbench.config import TrainingConfig, activation_dtype
from workbench.graph.execution import Execution, kernels
from workbench.graph.ops import AttentionShape, FlatShape, Op, RowsShape, attention, gemm_with_grads, memory_op
from workbench.models import DLRMModel, HSTUModel

TABLE_DTYPE = "fp32"
COALESCE_SORT_KERNELS = 25
"""Kernels of ``coalesce``'s cub merge sort of the row ids per step (H200 profile of dlrm-mb32k-compiled: 1 block
sort + 12 partition + 12 merge kernels); launch-bound."""
SAMPLED_SOFTMAX_NEGATIVES = 512
"""Negatives per position in HSTU's sampled-softmax loss (a guess; Zhai et al. 2024 sample in-batch negatives)."""


def _embedding_ops(name: str, lookups: int, dim: int, pooled_rows: int, layer: str) -> list[Op]:
    """Gather + sum-pool ``lookups`` rows of ``dim`` into ``pooled_rows`` outputs; backward fuses the update."""
    gathered = FlatShape(lookups * dim)
    pooled_fraction = pooled_rows / lookups
    return [
        memory_op(f"{name}.fwd", "embedding", gathered, TABLE_DTYPE, reads=1, writes=pooled_fraction, layer=layer),
        # reads the pooled grad and the rows, writes rows back (weights + one row-wise Adagrad state each)
        memory_op(f"{name}.bwd_update", "embedding", gathered, TABLE_DTYPE, reads=1 + pooled_fraction, writes=1,
                  phase="bwd", layer=layer),
    ]


def _mlp(name: str, batch: int, widths: list[tuple[str, int, int]], cfg: TrainingConfig, layer: str) -> list[Op]:
    act = activation_dtype(cfg.precision)
    ops: list[Op] = []
    for lname, d_in, d_out in widths:
        ops += gemm_with_grads(f"{name}.{lname}", batch, d_out, d_in, cfg.precision, layer=layer)
        ops += [memory_op(f"{name}.{lname}.relu.fwd", "relu", RowsShape(batch, d_out), act, reads=1, writes=1, layer=layer),
                memory_op(f"{name}.{lname}.relu.bwd", "relu", RowsShape(batch, d_out), act, reads=2, writes=1,
                          phase="bwd", layer=layer)]
    return ops


def unique_rows(model: DLRMModel, batch: int) -> float:
    """Expected distinct rows a micro-batch looks up, with uniform random indices (the job's ``RecsysBatches``):
    per table rows x (1 - exp(-lookups / rows))."""
    return sum(t.rows * -math.expm1(-batch * t.pooling / t.rows) for t in model.tables)


def dlrm_job_embedding_ops(model: DLRMModel, cfg: TrainingConfig) -> tuple[list[Op], list[Op]]:
    """The reference job's sparse path (``workbench/train/dlrm.py``), per micro-batch and per step.

    Backward: ``F.embedding_bag(sparse=True)`` materialises one fp32 gradient row per lookup (index_select of
    the pooled gradient). Optimizer (``RowWiseAdagrad.step``): ``coalesce`` (sort the lookups' row ids, gather
    and sum duplicate rows), the rows' squared norms, the accumulator's index_add_ / gather / sqrt / scale on
    [rows], the in-place scale of the values, and ``index_add_`` of the values into the table (read-modify-write
    of each row). Around the interaction (eager, between the compiled dense layers): the pooled bags'
    transpose + reshape copy and the cast to the dense dtype, and its cast back in backward."""
    b, d = cfg.micro_batch, model.embedding_dim
    lookups = b * sum(t.pooling for t in model.tables)
    unique = unique_rows(model, b * cfg.grad_accumulation)
    pooled = b * len(model.tables) * d
    # row gathers / scatters of random 512-B rows: TensorIterator-free index kernels, priced as unvectorized
    per_mb = kernels("embedding_bags.sparse_grad", "embedding", (("index_select", 4, 4, False),), lookups * d,
                     phase="bwd", layer="embedding")
    per_mb += kernels("interaction.pooled", "copy", (("transpose_reshape", 4, 4, False), ("to_bf16", 4, 2, True)),
                      pooled, phase="fwd", layer="interaction")
    per_mb += kernels("interaction.pooled_grad", "copy", (("to_fp32", 2, 4, False),), pooled, phase="bwd",
                      layer="interaction")
    # coalesce: a cub merge sort of the row ids (~25 small kernels on the H200 profile), then one kernel that
    # gathers the values in sorted order and sums the duplicates
    sort = tuple((f"sort_ids.{i}", 0, 0, True) for i in range(COALESCE_SORT_KERNELS))
    opt = kernels("rowwise_adagrad.coalesce", "optimizer", (*sort, ("coalesce_values", 4, 0, False)),
                  lookups * cfg.grad_accumulation * d, phase="optimizer", layer="embedding", rows=lookups)
    opt += kernels("rowwise_adagrad.coalesce", "optimizer", (("coalesced_rows", 0, 4, False),), int(unique) * d,
                   phase="optimizer", layer="embedding")
    opt += kernels("rowwise_adagrad", "optimizer",
                   (("row_norm", 4, 0, True), ("acc.index_add_", 0, 0, True), ("acc.gather", 0, 0, True),
                    ("sqrt", 0, 0, True), ("add_eps", 0, 0, True), ("scale", 0, 0, True),
                    ("values.mul_", 4, 4, False), ("table.index_add_", 8, 4, False)),
                   int(unique) * d, phase="optimizer", layer="embedding", rows=int(unique))
    return per_mb, opt


def dlrm_microbatch_ops(model: DLRMModel, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    b = cfg.micro_batch
    act = activation_dtype(cfg.precision)
    lookups = b * sum(t.pooling for t in model.tables)
    ops = _embedding_ops("embedding_bags", lookups, model.embedding_dim, b * len(model.tables), "embedding")
    if execution is not None and "embedding_bag" not in execution.triton_ops:
        ops = ops[:1] + dlrm_job_embedding_ops(model, cfg)[0]  # the update runs in the optimizer step
    layers = model.mlp_layers()
    ops += _mlp("bottom", b, [(n.split(".", 1)[1], i, o) for n, i, o in layers if n.startswith("bottom")], cfg, "bottom_mlp")
    d = model.interaction_width
    ops.append(memory_op("interaction.concat", "permute", RowsShape(b, d), act, reads=1, writes=1, layer="interaction"))
    for i in range(model.cross_layers):
        ops += gemm_with_grads(f"cross.{i}.down", b, model.cross_low_rank, d, cfg.precision, layer="interaction")
        ops += gemm_with_grads(f"cross.{i}.up", b, d, model.cross_low_rank, cfg.precision, layer="interaction")
        # x_{l+1} = x0 * (up + bias) + x_l
        ops += [memory_op(f"cross.{i}.mix.fwd", "mul", RowsShape(b, d), act, reads=3, writes=1, layer="interaction"),
                memory_op(f"cross.{i}.mix.bwd", "mul", RowsShape(b, d), act, reads=4, writes=3, phase="bwd", layer="interaction")]
    ops += _mlp("top", b, [(n.split(".", 1)[1], i, o) for n, i, o in layers if n.startswith("top")], cfg, "top_mlp")
    return ops


def hstu_microbatch_ops(model: HSTUModel, cfg: TrainingConfig) -> list[Op]:
    b, s, d = cfg.micro_batch, cfg.seq_len, model.embedding_dim
    tokens = b * s
    act = activation_dtype(cfg.precision)
    n = model.num_layers
    heads = model.num_heads
    uvqk = heads * (2 * model.linear_dim + 2 * model.attention_dim)
    ops = _embedding_ops("item_embedding", tokens, d, tokens, "embedding")

    def rows(name: str, kind: str, cols: int, reads: float, writes: float, bwd_reads: float, bwd_writes: float) -> None:
        ops.append(memory_op(f"{name}.fwd", kind, RowsShape(tokens, cols), act, reads=reads, writes=writes, count=n, layer="hstu"))
        ops.append(memory_op(f"{name}.bwd", kind, RowsShape(tokens, cols), act, reads=bwd_reads, writes=bwd_writes,
                             phase="bwd", count=n, layer="hstu"))

    rows("input_norm", "layernorm", d, 1, 1, 2, 1)
    ops += gemm_with_grads("uvqk", tokens, uvqk, d, cfg.precision, count=n, layer="hstu")
    rows("uvqk_silu", "silu", uvqk, 1, 1, 2, 1)
    # pointwise SiLU attention: QK^T over attention_dim, AV over linear_dim -> head_dim = their mean
    shape = AttentionShape(b, s, heads, heads, (model.attention_dim + model.linear_dim) // 2, causal=True)
    ops.append(attention("hstu_attention.fwd", shape, act, phase="fwd", count=n, layer="hstu"))
    ops.append(attention("hstu_attention.bwd", shape, act, phase="bwd", count=n, layer="hstu"))
    rows("output_norm", "layernorm", heads * model.linear_dim, 1, 1, 2, 1)
    rows("gate", "mul", heads * model.linear_dim, 2, 1, 3, 2)
    ops += gemm_with_grads("output", tokens, d, heads * model.linear_dim, cfg.precision, count=n, layer="hstu")
    rows("residual", "add", d, 2, 1, 2, 1)
    ops += gemm_with_grads("sampled_softmax", tokens, SAMPLED_SOFTMAX_NEGATIVES, d, cfg.precision, layer="loss")
    return ops
