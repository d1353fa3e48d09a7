"""What the reference training job (``python -m workbench.train``) really executes, beyond the fused step.

The step graphs (``transformer.py``, ``recsys.py``) price every memory-bound op as one fused kernel moving the
fewest bytes. That is what a compiled production stack runs; the project's own job differs wherever its torch
code runs outside ``torch.compile`` (``compile: false`` recipes, and the head, loss, FSDP2 and fp8 quantization
in every recipe; a compiled recipe compiles only the loss's per-chunk math, ``CE_COMPILED_*``). Given an
``Execution``, the graphs emit instead the op sequence the job's torch code launches: one ``Op`` per CUDA kernel,
with the bytes that kernel moves (per element of the tensor it walks), each paying the model's per-kernel fixed
cost (``memory_launch_us``) and priced at the achievable bandwidth of what it is -- a reduction
(``memory_fraction.sum``) or a pointwise op (``memory_fraction.add``), not the fused op class it is reported under.
Sources are the job's files, quoted per table below.

Kernels that TensorIterator cannot vectorize (an operand broadcast, e.g. ``* rstd`` [T, 1], or a
non-contiguous view, e.g. the halves of RoPE or SwiGLU's ``chunk``) are marked ``unvectorized``: PyTorch's CUDA
``gpu_kernel`` takes the vectorized path only when every operand is contiguous (aten/src/ATen/native/cuda/
CUDALoops.cuh, ``launch_vectorized_kernel``), and the slower ``elementwise_kernel`` path reaches
``memory_unvectorized_efficiency`` of the bandwidth (a guess, calibrate me). Transposing copies of 1-byte
operands (fp8's K-major copies) reach ``memory_transpose_efficiency``.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.graph.ops import FlatShape, Op, Phase, flat_shape, new_op

TRITON_OPS: tuple[str, ...] = ("rmsnorm", "swiglu", "cross_entropy", "attention", "gemm", "embedding_bag")
"""Ops a recipe can route to the project's Triton kernels (``kernels: [{op: ..., choice: triton}]``)."""


@dataclass(frozen=True)
class Execution:
    """How the reference job runs a recipe: which parts are compiled, which ops run the project's Triton kernels."""

    compile: bool = True
    """``torch.compile`` on each block (transformers) or each dense layer (DLRM); the rest runs eagerly."""
    triton_ops: frozenset[str] = frozenset()
    """Ops the recipe routes to the project's Triton kernels (one fused kernel each; see ``TRITON_OPS``)."""

    def eager(self, op: str) -> bool:
        """Whether ``op`` of a *block* runs as the job's unfused torch code."""
        return not self.compile and op not in self.triton_ops

    def fused(self, op: str) -> bool:
        """Whether ``op`` *outside* the compiled blocks (head, loss) runs as one fused kernel."""
        return op in self.triton_ops

    @property
    def compiled_loss(self) -> bool:
        """Whether the loss is the chunked cross-entropy compiled per chunk (a compiled recipe that does not route
        it to the Triton kernel: ``workbench.train.layers.KernelSet.compile_loss``)."""
        return self.compile and not self.fused("cross_entropy")


# A kernel of an unfused sequence: (name, bytes read, bytes written per element of the walked tensor, path).
# Element = the [rows, cols] tensor the sequence is about. Path: True = TensorIterator's vectorized kernel;
# False = its non-vectorized one (a broadcast or strided operand, or an upcast: the H200 profiles show every
# bf16 -> fp32 ``.float()`` as ``unrolled_elementwise_kernel<direct_copy_kernel_cuda>`` and the fp32 -> bf16
# casts as the vectorized ``bfloat16_copy_kernel``); "transpose" = a copy that transposes (a strided walk);
# "gather" = reads (or writes) rows at random positions: embedding rows, priced at ``memory_gather_efficiency``.
Kernel = tuple[str, float, float, "bool | str"]

# workbench/train/layers.py RMSNormFunction.forward, x bf16 [T, h]; the [T, 1] ops (+ eps, rsqrt) and the weight's
# .float() are launch-only kernels (bytes / h ~ 0).
RMSNORM_FWD: tuple[Kernel, ...] = (
    ("x.float", 2, 4, False), ("square", 4, 4, True), ("mean", 4, 0, True), ("add_eps", 0, 0, True),
    ("rsqrt", 0, 0, True), ("x.float", 2, 4, False), ("mul_rstd", 4, 4, False), ("weight.float", 0, 0, True),
    ("mul_weight", 4, 4, False), ("to_bf16", 4, 2, True),
)
# RMSNormFunction.backward: xhat, dy_w, the row mean of dy_w * xhat, dx, dw = column sum of dy * xhat.
RMSNORM_BWD: tuple[Kernel, ...] = (
    ("x.float", 2, 4, False), ("xhat", 4, 4, False), ("dy.float", 2, 4, False), ("weight.float", 0, 0, True),
    ("dy_w", 4, 4, False), ("dy_w_xhat", 8, 4, True), ("mean", 4, 0, True), ("xhat_mean", 4, 4, False),
    ("sub", 8, 4, True), ("mul_rstd", 4, 4, False), ("dy.float", 2, 4, False), ("dy_xhat", 8, 4, True),
    ("dw_sum", 4, 0, True), ("dw.to", 0, 0, True), ("dx.to_bf16", 4, 2, True),
)
# SwiGLUFunction, per element of the [T, f] output (gate_up is [T, 2f] bf16): forward silu(gate) * up on the
# chunk views; backward in fp32 on gate_up.float() (8 B per output element written).
SWIGLU_FWD: tuple[Kernel, ...] = (("silu", 2, 2, False), ("mul_up", 4, 2, False))
SWIGLU_BWD: tuple[Kernel, ...] = (
    ("gate_up.float", 4, 8, False), ("sigmoid", 4, 4, False), ("dout.float", 2, 4, False), ("dout_up", 8, 4, False),
    ("mul_sig", 8, 4, True), ("one_minus_sig", 4, 4, True), ("gate_mul", 8, 4, False), ("one_plus", 4, 4, True),
    ("dgate", 8, 4, True), ("dout.float", 2, 4, False), ("dout_gate", 8, 4, False), ("dup", 8, 4, True),
    ("cat", 8, 8, True), ("to_bf16", 8, 4, True),
)
# workbench/train/llama.py apply_rope on q or k [B, H, S, D] bf16 (a transposed view of qkv), per element:
# four products of half-size strided views with the [S, D/2] tables, a sub, an add, the cat.
ROPE_FWD: tuple[Kernel, ...] = (
    ("cos.to", 0, 0, True), ("sin.to", 0, 0, True), ("x1_cos", 1, 1, False), ("x2_sin", 1, 1, False),
    ("sub", 2, 1, True), ("x2_cos", 1, 1, False), ("x1_sin", 1, 1, False), ("add", 2, 1, True), ("cat", 2, 2, True),
)
# autograd of the above: neg of the sub's second input, four products with the tables, two accumulating adds,
# the chunk's backward (cat of the halves).
ROPE_BWD: tuple[Kernel, ...] = (
    ("neg", 1, 1, True), ("g_cos", 1, 1, False), ("g_sin", 1, 1, False), ("g2_cos", 1, 1, False),
    ("g2_sin", 1, 1, False), ("acc_x1", 2, 1, True), ("acc_x2", 2, 1, True), ("cat", 2, 2, True),
)
# layers.py ChunkedCrossEntropy, per logit, logits bf16 [N, V]: forward per chunk logits.float() and
# torch.logsumexp (amax, sub, exp, sum; log and add on [rows]); backward per chunk float, - lse, exp_,
# scatter_add_ (launch only), * scale, .to(bf16), the copy into dlogits.
CE_FWD: tuple[Kernel, ...] = (
    ("logits.float", 2, 4, False), ("amax", 4, 0, True), ("sub_max", 4, 4, False), ("exp", 4, 4, True),
    ("sum", 4, 0, True), ("log", 0, 0, True), ("add_max", 0, 0, True),
)
CE_BWD: tuple[Kernel, ...] = (
    ("logits.float", 2, 4, False), ("sub_lse", 4, 4, False), ("exp_", 4, 4, True), ("scatter_add_", 0, 0, True),
    ("mul_scale", 4, 4, True), ("to_bf16", 4, 2, True), ("copy_into_dlogits", 2, 2, True),
)
# The same loss in a compiled recipe (``ChunkedCrossEntropy(..., compiled=True)``, ``KernelSet.compile_loss``): the
# same chunks, each chunk's math one torch.compile'd function. Forward, ``_chunk_lse`` (upcast, amax, exp-sum, log)
# is one inductor reduction kernel (triton_red_fused__to_copy_logsumexp): logsumexp's decomposition puts a where()
# between the amax and the subtraction, so inductor's online-softmax rewrite (fx_passes/post_grad.py,
# ``prepare_softmax_pattern``: x - amax(x)) does not match, and the looped reduction walks each [V] row twice (the
# max, then the sum of exp): 2 x 2 B of bf16 read per logit, an fp32 [rows] out; then the eager copy of that [rows]
# into lse (launch only). Backward, ``_chunk_grad_into`` (upcast, - lse, exp, - one-hot, * scale, .to(bf16), copy_)
# is one pointwise kernel (triton_poi_fused__to_copy_arange_copy__eq_exp_mul_sub_...) that writes the chunk of
# dlogits in place: 2 B read, 2 B written. The kernel structure is inductor's for these two functions (its generated
# code for them on torch 2.13: one kernel each, no [rows, V] buffer, the gradient stored into the dlogits view);
# no H200 trace of the compiled loss yet (the committed job trace, stacks/job_trace/, predates it): calibrate me on
# one. Priced like the compiled loss of the stacks' tables (graph/stack_kernels.py ``LOSS_COMPILED_*``).
CE_COMPILED_FWD: tuple[Kernel, ...] = (("logsumexp", 4, 0, True), ("lse_copy", 0, 0, True))
CE_COMPILED_BWD: tuple[Kernel, ...] = (("softmax_grad_into_dlogits", 2, 2, True),)
CE_CHUNK_ELEMENTS = 1 << 28
"""layers.py ``CE_CHUNK_ELEMENTS``: logits rows per chunk = this // vocab."""

# layers.py quantize_fp8 on a bf16 operand [M, K], per element: abs, amax along the scale's axis, t.float(),
# * scale (broadcast), clamp, .to(e4m3); the [M, 1] ops on the amax (float, clamp, div, reciprocal) launch only.
FP8_QUANTIZE: tuple[Kernel, ...] = (
    ("abs", 2, 2, True), ("amax", 2, 0, True), ("amax.float", 0, 0, True), ("amax.clamp", 0, 0, True),
    ("scale", 0, 0, True), ("t.float", 2, 4, False), ("mul_scale", 4, 4, False), ("clamp", 4, 4, True),
    ("to_e4m3", 4, 1, True), ("reciprocal", 0, 0, True),
)
FP8_TRANSPOSE: tuple[Kernel, ...] = (("k_major_copy", 1, 1, "transpose"),)
"""fp8_matmul's ``.contiguous()`` of a transposed 1-byte operand (dgrad's W, wgrad's dy^T and x)."""


def kernels(prefix: str, kind: str, table: tuple[Kernel, ...], elements: int, *, phase: Phase, count: int = 1,
            layer: str = "", dtype: str = "fp32", rows: int = 0, gather: str = "torch") -> list[Op]:
    """One ``Op`` per kernel of ``table`` over ``elements`` items; launch-only kernels walk ``rows`` items.
    ``gather``: whose kernel does the "gather" entries (``memory_gather_efficiency.torch``, ``.triton``, or a
    kernel of its own: ``.triton.rowwise_adagrad``)."""
    return kernel_ops(kernel_specs(prefix, table, gather), kind, elements, phase=phase, count=count, layer=layer,
                      dtype=dtype, rows=rows)


KernelSpec = tuple[str, float, float, bool, dict]
"""One kernel of a table as ``kernels`` makes its op, whatever the tensor's size: (op name, bytes read and written
per item, whether it walks the ``elements`` (else it only launches, over ``rows``), its ``extra``)."""


def kernel_specs(prefix: str, table: tuple[Kernel, ...], gather: str = "torch", **tags) -> tuple[KernelSpec, ...]:
    """``kernels``' ops of ``table`` less the sizes (``kernel_ops`` adds them): what a builder that makes one table's
    ops at many sizes keeps (``graph.stack_kernels._k``). ``tags``: entries added to each op's ``extra``."""
    specs = []
    for name, read, write, vectorized in table:
        walks = bool(read or write)
        r, w = (read, write) if walks else (4.0, 4.0)
        # priced at the bandwidth of what the kernel is (a reduction or a pointwise op), reported under ``kind``
        extra = {"bandwidth_kind": "sum" if r and not w else "add"}
        if vectorized == "transpose":
            extra["transpose"] = True
        elif vectorized == "gather":
            extra["gather"] = gather
        elif not vectorized:
            extra["unvectorized"] = True
        extra.update(tags)
        specs.append((f"{prefix}.{name}", r, w, walks, extra))
    return tuple(specs)


def kernel_ops(specs: tuple[KernelSpec, ...], kind: str, elements: int, *, phase: Phase, count: int, layer: str,
               dtype: str, rows: int) -> list[Op]:
    """The ops of ``kernel_specs`` over ``elements`` items (launch-only kernels over ``rows``), each with an
    ``extra`` of its own (builders tag the ops they make)."""
    # the kernels that walk the elements share one (frozen) shape, and so do the launch-only ones (a recipe search
    # makes thousands of these ops)
    walked, launched = flat_shape(elements), None
    ops = []
    for name, r, w, walks, extra in specs:
        if walks:
            n, shape = elements, walked
        else:
            n = max(1, rows)
            if launched is None:
                launched = flat_shape(n)
            shape = launched
        ops.append(new_op(name, kind, phase, shape, dtype, float(n), r * n, w * n, count, layer, extra.copy()))
    return ops


def traffic(table: tuple[Kernel, ...]) -> float:
    """Bytes per element of a kernel table (all its kernels)."""
    return sum(r + w for _, r, w, _ in table)


def eager_rmsnorm(prefix: str, rows: int, cols: int, *, count: int, layer: str) -> tuple[list[Op], list[Op]]:
    e = rows * cols
    return (kernels(f"{prefix}.fwd", "rmsnorm", RMSNORM_FWD, e, phase="fwd", count=count, layer=layer, rows=rows),
            kernels(f"{prefix}.bwd", "rmsnorm", RMSNORM_BWD, e, phase="bwd", count=count, layer=layer, rows=rows))


def eager_swiglu(prefix: str, rows: int, ffn: int, *, count: int, layer: str) -> tuple[list[Op], list[Op]]:
    e = rows * ffn
    return (kernels(f"{prefix}.fwd", "swiglu", SWIGLU_FWD, e, phase="fwd", count=count, layer=layer, dtype="bf16"),
            kernels(f"{prefix}.bwd", "swiglu", SWIGLU_BWD, e, phase="bwd", count=count, layer=layer))


def eager_rope(prefix: str, tokens: int, q: int, kv: int, head_dim: int, seq: int, *, count: int,
               layer: str) -> tuple[list[Op], list[Op]]:
    """RoPE of q and k, plus the job's ``v.contiguous()`` (fwd) and the split's backward: dq, dk, dv cat into
    dqkv (bwd)."""
    fwd, bwd = [], []
    for name, width in (("q", q), ("k", kv)):
        fwd += kernels(f"{prefix}.{name}.fwd", "rope", ROPE_FWD, tokens * width, phase="fwd", count=count,
                       layer=layer, dtype="bf16", rows=seq * head_dim // 2)
        bwd += kernels(f"{prefix}.{name}.bwd", "rope", ROPE_BWD, tokens * width, phase="bwd", count=count,
                       layer=layer, dtype="bf16")
    fwd += kernels("attention.v_contiguous", "copy", (("copy", 2, 2, False),), tokens * kv, phase="fwd",
                   count=count, layer=layer, dtype="bf16")
    bwd += kernels("attention.dqkv_cat", "copy", (("cat", 2, 2, True),), tokens * (q + 2 * kv), phase="bwd",
                   count=count, layer=layer, dtype="bf16")
    return fwd, bwd


def chunked_cross_entropy(tokens: int, vocab: int, *, compiled: bool = False, layer: str = "head") -> list[Op]:
    """ChunkedCrossEntropy forward and backward, one op per kernel per chunk (chunks share a count); ``compiled``:
    its compiled per-chunk kernels (``CE_COMPILED_FWD``, ``CE_COMPILED_BWD``), else the eager ones."""
    rows = max(1, CE_CHUNK_ELEMENTS // vocab)
    fwd_table, bwd_table = (CE_COMPILED_FWD, CE_COMPILED_BWD) if compiled else (CE_FWD, CE_BWD)
    chunks, last = divmod(tokens, rows)
    ops: list[Op] = []
    for n_chunks, chunk_rows, tag in ((chunks, rows, ""), (1 if last else 0, last, ".last")):
        if not n_chunks:
            continue
        e = chunk_rows * vocab
        ops += kernels(f"cross_entropy{tag}.fwd", "cross_entropy", fwd_table, e, phase="fwd", count=n_chunks,
                       layer=layer, rows=chunk_rows)
        ops += kernels(f"cross_entropy{tag}.bwd", "cross_entropy", bwd_table, e, phase="bwd", count=n_chunks,
                       layer=layer, rows=chunk_rows)
    # the picked logits (gather + float) and the mean of lse - picked: launch-only
    ops += kernels("cross_entropy.picked", "cross_entropy", (("gather", 0, 0, True), ("float", 0, 0, True),
                                                            ("sub_mean", 0, 0, True)), tokens, phase="fwd",
                   layer=layer, rows=tokens)
    return ops


def fp8_linear_quantize(name: str, m: int, n: int, k: int, *, count: int, layer: str,
                        wgrad_fp8: bool = True) -> list[Op]:
    """layers.py _Float8LinearFunction: y[m, n] = x[m, k] W^T with W [n, k]; each fp8 GEMM quantizes both its
    operands (fwd: x, W; dgrad: dy, W; wgrad: dy^T, x) and copies the transposed ones K-major (dgrad's W, wgrad's
    dy^T and x). ``wgrad_fp8=False`` (rowwise_with_gw_hp): wgrad is a bf16 GEMM of the saved x and dy, which
    torch's matmul reads transposed in place -- no quantize, no copy. (That recipe's per-tensor W in dgrad costs
    the same kernels as a per-row one: abs, amax, scale, cast over the same elements.)"""
    ops: list[Op] = []

    def quantize(operand: str, elements: int, phase: Phase, transposed: bool) -> None:
        ops.extend(kernels(f"{name}.{operand}.quantize_fp8", "fp8_quantize", FP8_QUANTIZE, elements, phase=phase,
                           count=count, layer=layer, dtype="bf16", rows=max(1, elements // k)))
        if transposed:
            ops.extend(kernels(f"{name}.{operand}.quantize_fp8", "fp8_quantize", FP8_TRANSPOSE, elements,
                               phase=phase, count=count, layer=layer, dtype="fp8"))

    quantize("fwd.x", m * k, "fwd", False)
    quantize("fwd.w", n * k, "fwd", False)
    quantize("dgrad.dy", m * n, "bwd", False)
    quantize("dgrad.w", n * k, "bwd", True)
    if wgrad_fp8:
        quantize("wgrad.dy_t", m * n, "bwd", True)
        quantize("wgrad.x", m * k, "bwd", True)
    return ops


# FSDP2 (torch.distributed.fsdp.fully_shard) with fp32 shards, bf16 compute, fp32 reduction, per parameter:
# all-gather copy-in casts the fp32 shard into the bf16 all-gather buffer; copy-out splits the gathered buffer
# into the parameters (DtoD memcpys); reduce-scatter's _chunk_cat casts the bf16 gradients into the fp32 input;
# the reduce-scatter's output is copied into the sharded gradient. On one rank the NCCL calls themselves launch
# nothing (the H200 profile of llama1b-mb2-none-compiled shows the casts, _chunk_cat and the memcpys, no NCCL).
FSDP_ALL_GATHER: tuple[tuple[str, str, float, float], ...] = (
    ("all_gather_copy_in", "fsdp", 4, 2), ("all_gather_copy_out", "copy", 2, 2))
FSDP_REDUCE_SCATTER: tuple[tuple[str, str, float, float], ...] = (
    ("reduce_scatter_chunk_cat", "fsdp", 2, 4), ("reduce_scatter_copy_out", "copy", 4, 4))


def fsdp_ops(block_params: float, root_params: float, layers: int, dp: int, *, units: int, params_per_unit: int,
             grad_accumulation: int = 1) -> list[Op]:
    """FSDP2's own copies for ``layers`` sharded blocks plus the root (embedding, final norm, head).

    Forward gathers every unit; backward gathers again every block but the last (``parallel.apply_fsdp``
    keeps the last block and the root gathered); each unit reduce-scatters its gradients once per step. One op
    per kernel kind, counted once per parameter tensor (``params_per_unit``) as the foreach copies launch."""
    total = block_params * layers + root_params
    regathered = block_params * max(0, layers - 1)
    ops: list[Op] = []
    for phase, params, per in (("fwd", total, grad_accumulation), ("bwd", regathered, grad_accumulation)):
        if params <= 0:
            continue
        for name, kind, read, write in FSDP_ALL_GATHER:
            shard = 1 / dp if name.endswith("copy_in") else 1.0
            n = max(1, int(params * shard))
            ops.append(Op(f"fsdp.{phase}.{name}", kind, phase, FlatShape(n), "bf16", 0.0, read * n, write * n,
                          count=per, layer="fsdp"))
    for name, kind, read, write in FSDP_REDUCE_SCATTER:
        shard = 1 / dp if name.endswith("copy_out") else 1.0
        n = max(1, int(total * shard))
        upcast = {"unvectorized": True} if name.endswith("chunk_cat") else {}  # bf16 -> fp32, as .float()
        ops.append(Op(f"fsdp.bwd.{name}", kind, "bwd", FlatShape(n), "fp32", 0.0, read * n, write * n,
                      count=1, layer="fsdp", extra=upcast))
    # the fixed cost of the per-parameter kernels beyond the one op above: launch-only ops
    extra_launches = max(0, 2 * units * params_per_unit - len(ops))
    if extra_launches:
        ops.append(Op("fsdp.per_parameter_copies", "copy", "bwd", FlatShape(1), "bf16", 0.0, 0.0, 0.0,
                      count=extra_launches, layer="fsdp"))
    return ops
