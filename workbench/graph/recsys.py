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
SORT_RADIX_BITS = 8
"""Bits per pass of the radix sort ``torch.sort`` runs on CUDA (cub ``DeviceRadixSort`` onesweep: 8-bit digits,
cub/agent/agent_radix_sort_onesweep.cuh), so int32 row ids take 4 passes."""
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


def _mlp(name: str, batch: int, widths: list[tuple[str, int, int]], cfg: TrainingConfig, layer: str,
         input_grad: bool = True) -> list[Op]:
    """Linear + ReLU layers; ``input_grad=False``: the first layer's input needs no gradient (no dgrad GEMM)."""
    act = activation_dtype(cfg.precision)
    ops: list[Op] = []
    for i, (lname, d_in, d_out) in enumerate(widths):
        gemms = gemm_with_grads(f"{name}.{lname}", batch, d_out, d_in, cfg.precision, layer=layer)
        ops += [g for g in gemms if input_grad or i or not g.name.endswith(".dgrad")]
        ops += [memory_op(f"{name}.{lname}.relu.fwd", "relu", RowsShape(batch, d_out), act, reads=1, writes=1, layer=layer),
                memory_op(f"{name}.{lname}.relu.bwd", "relu", RowsShape(batch, d_out), act, reads=2, writes=1,
                          phase="bwd", layer=layer)]
    return ops


def unique_rows(model: DLRMModel, batch: int) -> float:
    """Expected distinct rows a micro-batch looks up, with uniform random indices (the job's ``RecsysBatches``):
    per table rows x (1 - exp(-lookups / rows))."""
    return sum(t.rows * -math.expm1(-batch * t.pooling / t.rows) for t in model.tables)


def dlrm_job_embedding_ops(model: DLRMModel, cfg: TrainingConfig, triton_forward: bool = False
                           ) -> tuple[list[Op], list[Op]]:
    """The reference job's sparse path (``workbench/train/dlrm.py``), per micro-batch and per step.

    Per micro-batch: the lookups, random 512-B rows (torch's ``embedding_bag`` kernel at
    ``memory_gather_efficiency``, the project's Triton kernel where the recipe selects it at
    ``memory_gather_efficiency.triton``); backward only records the pooled gradient. Around the interaction
    (eager, between the compiled dense layers): the pooled bags' transpose + reshape copy and the cast to the
    dense dtype, both undone in backward (the dense side: ``_dlrm_job_dense_ops``). Per step
    (``RowWiseAdagrad.step`` -> ``kernels.rowwise_adagrad``): the bag of each lookup, the sort of the lookups by
    row, the segments (one host sync), then one fused kernel that sums each touched row's pooled gradients and
    updates its accumulator and weights in place."""
    b, d = cfg.micro_batch, model.embedding_dim
    accum = cfg.grad_accumulation
    lookups = b * sum(t.pooling for t in model.tables)
    bags = b * len(model.tables)
    pooled = bags * d
    # forward: one gathered fp32 row per lookup, one pooled row written per bag (per element of the lookups' rows)
    fwd = (("gather", 4, 4 * bags / lookups, "gather"),)
    per_mb = kernels("embedding_bags.fwd", "embedding", fwd, lookups * d, phase="fwd", layer="embedding",
                     gather="triton" if triton_forward else "torch")
    per_mb += kernels("interaction.pooled", "copy", (("transpose_reshape", 4, 4, False), ("to_bf16", 4, 2, True)),
                      pooled, phase="fwd", layer="interaction")
    # backward of the cast and of the transpose + reshape (a strided copy back to [T, B, d])
    per_mb += kernels("interaction.pooled_grad", "copy", (("to_fp32", 2, 4, False), ("transpose", 4, 4, False)),
                      pooled, phase="bwd", layer="interaction")
    n = lookups * accum
    unique = int(unique_rows(model, b * accum))
    step = "rowwise_adagrad"
    # segment_by_row: arange, diff, cumsum on the bags (launch-only); repeat_interleave writes each lookup's bag id
    opt = kernels(f"{step}.bag_ids", "optimizer", (("arange", 0, 0, True), ("diff", 0, 0, True),
                                                   ("cumsum", 0, 0, True), ("repeat_interleave", 0, 8, True)),
                  n, phase="optimizer", layer="embedding", rows=bags * accum)
    # torch.sort of int32 keys with int64 positions: iota, a histogram pass, one onesweep pass per 8-bit digit
    # reading and writing key + position (4 + 8 B)
    passes = tuple((f"radix_pass.{i}", 12, 12, True) for i in range(32 // SORT_RADIX_BITS))
    opt += kernels(f"{step}.sort", "optimizer", (("keys.to_int32", 8, 4, True), ("iota", 0, 8, True),
                                                 ("histogram", 4, 0, True), *passes), n, phase="optimizer",
                   layer="embedding")
    # bag_of_lookup[order]: an 8-B read at a random position per lookup (a 32-B sector)
    opt += kernels(f"{step}.sorted_bags", "optimizer", (("index", 8 + 32, 8, True),), n, phase="optimizer",
                   layer="embedding")
    # unique_consecutive(return_counts): reads the sorted keys; the rows (4 B) and counts (8 B) are per unique row
    opt += kernels(f"{step}.unique", "optimizer", (("run_length_encode", 4, 12 * unique / n, True),), n,
                   phase="optimizer", layer="embedding")
    # the GPU idles while the host launches the step's first kernels, reads unique_consecutive's count (the step's one
    # host sync) and launches what follows it: one time per step (``dlrm_step_host_idle_us``)
    opt.append(Op(f"{step}.host_idle", "optimizer", "optimizer", FlatShape(1), "fp32", flops=0.0, bytes_read=0.0,
                  bytes_written=0.0, layer="embedding", extra={"host_idle": "dlrm_step_host_idle_us"}))
    opt += kernels(f"{step}.segments", "optimizer", (("zeros", 0, 8, True), ("cumsum", 8, 8, True)), unique,
                   phase="optimizer", layer="embedding")
    # the fused kernel (kernels/rowwise_adagrad.py bytes_moved): per lookup its bag id and a gathered pooled-gradient
    # row; per touched row id, segment bound, accumulator read + write, weight row read + write
    reads, writes = n * (8 + 4 * d) + unique * (4 + 8 + 4 + 4 * d), unique * (4 + 4 * d)
    opt += kernels(f"{step}.fused_update", "optimizer", (("gather_sum_update", reads / n, writes / n, "gather"),), n,
                   phase="optimizer", layer="embedding", gather="triton.rowwise_adagrad")
    return per_mb, opt


# workbench/train/dlrm.py CrossLayer run eagerly (``compile: false``), per element of x [B, D] bf16: forward
# x0 * up(down(x)) and + x as two kernels; backward MulBackward's two products (grad * y, grad * x0) and the up
# projection's bias gradient (a column sum of grad, dtype-kept bf16).
CROSS_EAGER_FWD = (("mul_x0", 4, 2, True), ("add_x", 4, 2, True))
CROSS_EAGER_BWD = (("grad_y", 4, 2, True), ("grad_x0", 4, 2, True), ("up.bias_grad", 2, 0, True))
# DLRM.forward's loss outside every compiled module, on [B] (launch-bound): logits.squeeze(1).float() and
# binary_cross_entropy_with_logits (rsub, mul_, log_sigmoid_forward, sub_, mean, fill_), its backward (div x2,
# sigmoid, sub_, mul_, div_, fill_), and train_step's loss / accum and step_loss += (H200 profile of
# dlrm-mb32k-compiled, benchmarks/results/h200/train/profile/dlrm-mb32k-compiled_kernels.csv: its cross_entropy
# and loss-sized elementwise rows)
LOSS_FWD = tuple((f"k{i}", 0, 0, True) for i in range(7))
LOSS_BWD = tuple((f"k{i}", 0, 0, True) for i in range(7))
LOSS_STEP = tuple((f"k{i}", 0, 0, True) for i in range(3))


def _dlrm_job_dense_ops(model: DLRMModel, cfg: TrainingConfig, execution: Execution) -> list[Op]:
    """The reference job's dense-side kernels beyond the fused step graph, per micro-batch.

    Both modes: each biased ``nn.Linear``'s bias gradient (a column sum of its [B, out] output gradient: one
    reduction kernel; the compiled profile shows them as ``aten::sum`` / ``triton_red_fused_sum``) and the loss.
    Compiled (each dense layer its own graph, ``workbench/train/build.py``): autograd sums x0's gradient over the
    cross layers that read it, between the compiled graphs (the H200 profile of dlrm-mb32k-compiled: 3 DtoD
    memcpys and 2 add_ of [B, D] bf16 in backward). Eager (``compile: false``): the cross layers' elementwise ops
    unfused (``CROSS_EAGER_*``) and autograd's accumulation of every gradient read twice -- x_l by the next
    layer's down projection and its ``+ x`` (one add each), x0 also by every layer's product (L + 1 adds) --
    and autocast's casts: every Linear's fp32 weight and bias to bf16 in forward, their bf16 gradients back
    to fp32 in backward (``ToCopyBackward``; bf16 -> fp32 takes TensorIterator's unrolled path)."""
    b, d, layers = cfg.micro_batch, model.interaction_width, model.cross_layers
    width = b * d
    eager = not execution.compile
    biased = [(n, o) for n, _, o in model.mlp_layers() if not n.endswith(".down")]  # CrossLayer.down: bias=False
    ops = []
    for name, out in biased:
        if eager and name.startswith("cross."):
            continue  # in CROSS_EAGER_BWD
        ops += kernels(f"{name}.bias_grad", "sum", (("column_sum", 2, 0, True),), b * out, phase="bwd",
                       layer="interaction" if name.startswith("cross.") else name.split(".")[0], dtype="bf16")
    ops += kernels("loss.fwd", "cross_entropy", LOSS_FWD, 1, phase="fwd", layer="loss", rows=b)
    ops += kernels("loss.bwd", "cross_entropy", LOSS_BWD, 1, phase="bwd", layer="loss", rows=b)
    ops += kernels("loss.step", "cross_entropy", LOSS_STEP, 1, phase="fwd", layer="loss", rows=1)
    if not eager:
        accumulate = tuple((f"copy.{i}", 2, 2, True) for i in range(layers))
        accumulate += tuple((f"add_.{i}", 4, 2, True) for i in range(layers - 1))
        return ops + kernels("interaction.x0_grad", "copy", accumulate, width, phase="bwd", layer="interaction",
                             dtype="bf16")
    for i in range(layers):
        ops += kernels(f"cross.{i}.mix.fwd", "mul", CROSS_EAGER_FWD, width, phase="fwd", layer="interaction",
                       dtype="bf16")
        ops += kernels(f"cross.{i}.mix.bwd", "mul", CROSS_EAGER_BWD, width, phase="bwd", layer="interaction",
                       dtype="bf16")
    accumulate = tuple((f"add.{i}", 4, 2, True) for i in range(2 * layers))  # (L + 1) for x0, 1 per x_1..x_{L-1}
    ops += kernels("interaction.grad_accumulate", "add", accumulate, width, phase="bwd", layer="interaction",
                   dtype="bf16")
    for name, fan_in, out in model.mlp_layers():
        params = (("weight", fan_in * out),) + ((("bias", out),) if not name.endswith(".down") else ())
        layer = "interaction" if name.startswith("cross.") else name.split(".")[0]
        for what, size in params:
            ops += kernels(f"{name}.{what}.autocast", "copy", (("to_bf16", 4, 2, True),), size, phase="fwd",
                           layer=layer)
            ops += kernels(f"{name}.{what}.grad_to_fp32", "copy", (("to_fp32", 2, 4, False),), size, phase="bwd",
                           layer=layer)
    return ops


def dlrm_microbatch_ops(model: DLRMModel, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    """One micro-batch's ops; with ``execution``, as the reference job runs them (``dlrm_job_embedding_ops``,
    ``_dlrm_job_dense_ops``): the cross layers' elementwise ops unfused when not compiled."""
    b = cfg.micro_batch
    act = activation_dtype(cfg.precision)
    lookups = b * sum(t.pooling for t in model.tables)
    if execution is None:
        ops = _embedding_ops("embedding_bags", lookups, model.embedding_dim, b * len(model.tables), "embedding")
    else:  # the job: its lookups (torch's or the Triton kernel), the update in the optimizer step
        ops = dlrm_job_embedding_ops(model, cfg, "embedding_bag" in execution.triton_ops)[0]
    eager = execution is not None and not execution.compile
    layers = model.mlp_layers()
    # the job's dense features need no gradient: no dgrad for the first bottom layer
    ops += _mlp("bottom", b, [(n.split(".", 1)[1], i, o) for n, i, o in layers if n.startswith("bottom")], cfg,
                "bottom_mlp", input_grad=execution is None)
    d = model.interaction_width
    ops.append(memory_op("interaction.concat", "permute", RowsShape(b, d), act, reads=1, writes=1, layer="interaction"))
    for i in range(model.cross_layers):
        ops += gemm_with_grads(f"cross.{i}.down", b, model.cross_low_rank, d, cfg.precision, layer="interaction")
        ops += gemm_with_grads(f"cross.{i}.up", b, d, model.cross_low_rank, cfg.precision, layer="interaction")
        if not eager:  # x_{l+1} = x0 * (up + bias) + x_l, one fused kernel each way (eager: _dlrm_job_dense_ops)
            ops += [memory_op(f"cross.{i}.mix.fwd", "mul", RowsShape(b, d), act, reads=3, writes=1, layer="interaction"),
                    memory_op(f"cross.{i}.mix.bwd", "mul", RowsShape(b, d), act, reads=4, writes=3, phase="bwd",
                              layer="interaction")]
    ops += _mlp("top", b, [(n.split(".", 1)[1], i, o) for n, i, o in layers if n.startswith("top")], cfg, "top_mlp")
    if execution is not None:
        ops += _dlrm_job_dense_ops(model, cfg, execution)
    return ops


def hstu_microbatch_ops(model: HSTUModel, cfg: TrainingConfig) -> list[Op]:
    b, s, d = cfg.micro_batch, cfg.seq_len, model.embedding_dim
    tokens = b * s
    act = activation_dtype(cfg.precision)
    n = model.num_layers
    heads = model.num_heads
    uvqk = model.uvqk_width
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
    # K = cat([u, attn, norm(attn) * u]): three times heads x linear_dim (HSTUModel.output_in_width)
    ops += gemm_with_grads("output", tokens, d, model.output_in_width, cfg.precision, count=n, layer="hstu")
    rows("residual", "add", d, 2, 1, 2, 1)
    ops += gemm_with_grads("sampled_softmax", tokens, SAMPLED_SOFTMAX_NEGATIVES, d, cfg.precision, layer="loss")
    return ops
