"""What DeepSpeed's ZeRO optimizers (stage 2 and 3, DeepSpeed 0.19.8) launch and allocate around HF's Llama: the
gradient hooks' bucket copies, the step's overflow check, fp64 gradient norm, flatten, fp32 cast, clip and
optimizer, and the peak memory of one rank. The model's own kernels are ``workbench.graph.stack_kernels_hf``.

Read from ``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py`` and checked against the Kineto trace of
``deepspeed-zero2 1b mb1 s2048 ac=none`` (a fit row of ``benchmarks/stacks/deepspeed_split.json``;
``benchmarks/results/h200/stacks/deepspeed/traces/``), which ran ``torch.optim.AdamW(fused=True)`` as the client
optimizer over DeepSpeed's flat fp32 partition (DeepSpeed's FusedAdam did not build on the device machine).
ZeRO-3's step is from the source only: no ZeRO-3 row was traced.

Conventions are ``stack_kernels``' (one ``Op`` per CUDA kernel, bytes per element of the walked tensor, ``False`` =
not vectorized, ``(name, 0, 0, True)`` = a kernel that only launches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.graph.execution import Kernel
from workbench.graph.ops import Op
from workbench.graph.stack_kernels import INT32_INDEX_BYTES, Dims, StackFlavor, _k, optimizer_ops
from workbench.perf.overlap import ScheduledCollective

# DeepSpeed 0.19.8 runtime/zero/config.py defaults (elements): reduce_bucket_size = allgather_bucket_size = 5e8,
# stage3_prefetch_bucket_size = 5e7, stage3_param_persistence_threshold = 1e5, sub_group_size = 1e9;
# overlap_comm defaults to True for stage 3 only (``overlap_comm_valid``).
REDUCE_BUCKET_ELEMENTS = 500_000_000
PREFETCH_BUCKET_ELEMENTS = 50_000_000
PERSISTENCE_THRESHOLD_ELEMENTS = 100_000
SUB_GROUP_ELEMENTS = 1_000_000_000
REUSE_DISTANCE_ELEMENTS = 1_000_000_000
"""stage3_max_reuse_distance (config.py default 1e9): ``PartitionedParameterCoordinator.__params_to_release`` keeps a
submodule's parameters gathered when they are used again within this many parameter elements of the trace."""
COMM_BYTES = 2
"""Bytes per element of ZeRO's collectives: ``communication_data_type`` defaults to the engine's bf16
(runtime/engine.py), for the gradient reductions and the parameter gathers alike."""
CAT_BATCH_TENSORS = 128
"""aten/src/ATen/native/cuda/Shape.cu CAT_ARRAY_BATCH_SIZE: ``torch.cat`` of n tensors launches ceil(n / 128)
``CatArrayBatchedCopy`` kernels (2 for the 146 gradients of Llama 3.2 1B in the trace)."""


def tensor_iterator_pieces(elements: int, bytes_per_element: int) -> int:
    """Kernels one TensorIterator op over ``elements`` launches: it halves the iteration space until every operand's
    byte offsets fit int32 (``TensorIteratorBase::with_32bit_indexing``): 4 for the fp32 copy of 1.24 B elements
    in the trace (4.9 GB: halved twice), 1 below 2 GiB."""
    pieces, size = 1, elements * bytes_per_element
    while size / pieces > INT32_INDEX_BYTES:
        pieces *= 2
    return pieces


# ---------------------------------------------------------------------------------------------------------------
# The parameters as ZeRO walks them

def param_sizes(d: Dims, tied: bool) -> list[int]:
    """Elements of each parameter tensor in ``model.parameters()`` order: the embedding, per layer q, k, v, o,
    gate, up, down and the two norm weights, the final norm, the untied head."""
    layer = [i * o for _, i, o in d.linears()] + [d.hidden, d.hidden]
    head = [] if tied else [d.vocab * d.hidden]
    return [d.vocab * d.hidden] + layer * d.layers + [d.hidden] + head


def backward_order(d: Dims, tied: bool) -> list[int]:
    """The same tensors in the order their gradient hooks fire: the untied head, the final norm, the layers last to
    first, the embedding (tied: the shared table fires last, once its two gradients are summed)."""
    sizes = param_sizes(d, tied)
    embedding, layers, norm, head = sizes[0], sizes[1:-1 if tied else -2], sizes[-1 if tied else -2], sizes[-1:]
    return ([] if tied else head) + [norm] + layers[::-1] + [embedding]


def reduce_buckets(d: Dims, tied: bool) -> list[int]:
    """Elements of each reduction ZeRO's gradient hooks run (``reduce_independent_p_g_buckets_and_remove_grads``):
    a bucket is reduced when the next gradient would overflow ``reduce_bucket_size``; a gradient larger than the
    bucket is reduced on its own. Llama 3.2 1B: 486.5 M, 486.5 M, 262.7 M elements (3 in the trace)."""
    out, current = [], 0
    for n in backward_order(d, tied):
        if current and current + n > REDUCE_BUCKET_ELEMENTS:
            out.append(current)
            current = 0
        current += n
        if current > REDUCE_BUCKET_ELEMENTS:  # the extra-large gradient: reduced before the next one is added
            out.append(current)
            current = 0
    return out + ([current] if current else [])


def sub_groups(d: Dims, tied: bool, dp: int) -> list[int]:
    """Elements of ZeRO-3's optimizer sub-groups on one rank (``_create_fp16_sub_groups``): parameters in order,
    a group closed once it reaches ``sub_group_size``; the step runs once per sub-group."""
    sizes = [math.ceil(n / dp) for n in param_sizes(d, tied)]
    if sum(sizes) <= SUB_GROUP_ELEMENTS:
        return [sum(sizes)]
    out, current = [], 0
    for n in sizes:
        current += n
        if current >= SUB_GROUP_ELEMENTS:
            out.append(current)
            current = 0
    return out + ([current] if current else [])


def gathered_params(d: Dims, tied: bool) -> tuple[int, int]:
    """(elements, submodules) ZeRO-3 fetches per pass: every parameter above the persistence threshold (the norm
    weights stay resident), one ``torch.cat`` of the partitions per submodule (``_all_gather_dtype``)."""
    big = d.layers * (d.block_params - 2 * d.hidden) + d.vocab * d.hidden * (1 if tied else 2)
    return big, d.layers * 7 + (1 if tied else 2)


# ---------------------------------------------------------------------------------------------------------------
# The gradient hooks, per micro-batch (bf16 gradients)

GRAD_TO_BUCKET: tuple[Kernel, ...] = (("grad_to_bucket", 2, 2, True),)
"""Each gradient copied into the contiguous reduce bucket by its hook (``contiguous_gradients``; a same-dtype
``copy_``: one ``Memcpy DtoD`` per parameter in the trace, 146 for the 1B)."""
BUCKET_AVERAGE: tuple[Kernel, ...] = (("bucket_average", 2, 2, True),)
"""``average_tensor`` / ``__avg_scatter_contiguous_grads``: ``tensor.div_(dp)`` over the bucket, launched at
world size 1 too (``BUnaryFunctor<MulFunctor>``: 3 launches, 1.15 ms for the 1B's 1.24 B elements). The
collective itself (no kernel at world size 1 in the trace) is the step model's communication at dp > 1."""
BUCKET_TO_PARTITION: tuple[Kernel, ...] = (("bucket_to_partition", 2, 2, True),)
"""After the reduction, each gradient copied from the bucket into the flat partition, one copy per parameter
(stage 2 ``copy_grads_in_partition`` into ``grads_in_partition``, stage 3 ``partition_grads`` into
``grad_partitions_flat_buffer``; both bf16); 146 ``Memcpy DtoD`` in the trace, not one per bucket."""
GATHER_PARAM: tuple[Kernel, ...] = (("gather_param", 2, 2, True),)
"""ZeRO-3's fetch of a submodule's parameters: the partitions concatenated into the all-gather buffer
(``torch.cat(..., out=partitions[rank])``) -- from the source: no ZeRO-3 row was traced."""


def zero_grad_ops(d: Dims, tied: bool) -> list[Op]:
    """Per micro-batch: each gradient into the bucket, each bucket averaged, each gradient into the partition."""
    params, tensors = sum(param_sizes(d, tied)), len(param_sizes(d, tied))
    buckets = len(reduce_buckets(d, tied))
    ops = _k("zero.grad", "copy", GRAD_TO_BUCKET, params, "bwd", 1, "optimizer", "zero", launches=tensors)
    ops += _k("zero.reduce", "copy", BUCKET_AVERAGE, params, "bwd", 1, "optimizer", "zero", launches=buckets)
    ops += _k("zero.partition", "copy", BUCKET_TO_PARTITION, params, "bwd", 1, "optimizer", "zero",
              launches=tensors)
    return ops


def zero_gather_ops(d: Dims, tied: bool, passes: int, dp: int = 1) -> list[Op]:
    """ZeRO-3's fetch copies: each submodule's local partitions concatenated into the all-gather buffer, 1/dp of its
    elements on ``dp`` ranks (the all-gather itself is the step model's communication, ``zero_collectives``)."""
    elements, modules = gathered_params(d, tied)
    return _k("zero3.gather", "copy", GATHER_PARAM, math.ceil(elements / dp), "fwd", passes, "optimizer", "zero",
              launches=modules)


# ---------------------------------------------------------------------------------------------------------------
# The step: overflow check, gradient norm, then per flat partition (ZeRO-3: per sub-group) flatten, fp32, clip,
# AdamW, back to bf16

OVERFLOW_PER_TENSOR: tuple[Kernel, ...] = (("amax", 2, 0, True), ("amin", 2, 0, True))
"""ZeRO-2's ``has_overflow_partitioned_grads_serial`` (bf16 ``check_grad_overflow`` defaults to true): per
gradient ``runtime.utils.has_inf_or_nan`` = ``isfinite(x.amax()) & isfinite(x.amin())``, negated, added to a
counter. The two reductions read the gradient; the rest are 0-dim."""
OVERFLOW_SCALARS_PER_TENSOR = 11
"""The 0-dim kernels of one ``has_inf_or_nan``: two ``isfinite`` (abs, == inf, == self, and: 4 each),
``logical_and``, ``logical_not``, the counter's add: 13 kernels per gradient with the two reductions (1,898 for the
1B's 146 gradients in the trace, plus 229 memsets of the reductions)."""
OVERFLOW_FLAT: tuple[Kernel, ...] = (("isinf_abs", 2, 2, True), ("isinf_eq", 2, 1, True), ("isinf_any", 1, 0, True),
                                      ("isnan_ne", 2, 1, True), ("isnan_any", 1, 0, True))
"""ZeRO-3's ``has_overflow``: ``isinf(buffer).any()`` (abs, == inf) and ``isnan(buffer).any()`` (!= self) over
the flat gradient partition (from the source: not traced)."""
NORM_PER_TENSOR: tuple[Kernel, ...] = (("to_float64", 2, 8, False), ("norm_float64", 8, 0, True))
"""``get_grad_norm_direct``: per gradient ``vector_norm(g.to(get_norm_dtype()))``, fp64 on CUDA
(``unrolled_elementwise_kernel<direct_copy>`` 5.2 ms + ``NormTwoOps<double>`` 3.1 ms for the 1B in the trace,
146 launches each)."""
NORM_SCALARS = 24
"""The norm's 0-dim tail: stack, pow, sum, sqrt, ``mask_nan_or_inf_with_val_inplace``,
``combine_grad_norm_groups``, ``is_invalid_grad_norm`` (a sync), the clip coefficient (24 in the trace)."""
STEP_SCALARS = 14
"""0-dim kernels of the step itself (the clip's reciprocal, AdamW's step count and its lr terms: 14 in the trace,
one of them the ``multi_tensor_apply`` of the step count)."""
FLATTEN: tuple[Kernel, ...] = (("flatten", 2, 2, True),)
"""``flatten_dense_tensors_aligned`` / ``self.flatten``: the bf16 gradient views concatenated into one new flat
tensor (``CatArrayBatchedCopy``, 1.24 ms for the 1B in the trace) -- a copy the partition already held."""
GRAD_TO_FP32: tuple[Kernel, ...] = (("grad_to_fp32", 2, 4, False),)
"""``flat.to(float32)``: the fp32 gradient the optimizer reads (``unrolled_elementwise_kernel<direct_copy>``,
4 pieces of 0.88 ms for the 1B)."""
CLIP_MUL: tuple[Kernel, ...] = (("clip_mul", 4, 4, False),)
"""``unscale_and_clip_grads``: ``grad.mul_(1 / combined_scale)`` by a 0-dim CUDA tensor, gradient_clipping = 1.0
(``elementwise_kernel<BinaryFunctor<MulFunctor>>``, not vectorized: 4 pieces of 0.86 ms for the 1B)."""
MASTER_TO_BF16: tuple[Kernel, ...] = (("master_to_bf16", 4, 2, True),)
"""The updated fp32 master partition copied into the bf16 parameters (``bfloat16_copy_kernel``, 4 pieces)."""
OPTIMIZER_FLAVOR = StackFlavor("hf-deepspeed", param_dtype="fp32")
"""torch's fused AdamW over the flat fp32 partition (``FusedAdamMathFunctor``: 59 launches, 9.84 ms for the 1B)."""


def _launch_only(prefix: str, n: int) -> list[Op]:
    return _k(prefix, "optimizer", ((prefix.rsplit(".", 1)[-1], 0, 0, True),), 1, "optimizer", 1, "optimizer",
              "zero", launches=n)


def _flat_step(prefix: str, elements: int, tensors: int) -> list[Op]:
    """One flat partition's update: flatten, cast, clip, fused AdamW, back to bf16."""
    ops = _k(f"{prefix}.flatten", "copy", FLATTEN, elements, "optimizer", 1, "optimizer", "zero",
             launches=math.ceil(tensors / CAT_BATCH_TENSORS))
    pieces = tensor_iterator_pieces(elements, 4)
    ops += _k(f"{prefix}.grad_to_fp32", "copy", GRAD_TO_FP32, elements, "optimizer", 1, "optimizer", "zero",
              launches=pieces)
    ops += _k(f"{prefix}.clip", "optimizer", CLIP_MUL, elements, "optimizer", 1, "optimizer", "grad_clip",
              launches=pieces)
    ops += optimizer_ops(elements, OPTIMIZER_FLAVOR)
    ops += _k(f"{prefix}.master_to_bf16", "copy", MASTER_TO_BF16, elements, "optimizer", 1, "optimizer", "zero",
              launches=pieces)
    return ops


def zero_step_ops(d: Dims, tied: bool, stage: int, dp: int, offload: bool = False) -> list[Op]:
    """The step over this rank's partition: the overflow check, the fp64 norm per gradient, then the update --
    on the host with ``offload`` (``offload_optimizer``: DeepSpeedCPUAdam over the host's fp32 partition, timed by
    ``workbench.offload``), so no flat step on the GPU."""
    local = [math.ceil(n / dp) for n in param_sizes(d, tied)]
    elements, tensors = sum(local), len(local)
    if stage == 3:
        ops = _k("zero.overflow", "optimizer", OVERFLOW_FLAT, elements, "optimizer", 1, "optimizer", "grad_clip")
        ops += _launch_only("zero.overflow_scalars", 6)  # two logical_or_, clone, to(uint8), zero_, the sync
    else:
        ops = _k("zero.overflow", "optimizer", OVERFLOW_PER_TENSOR, elements, "optimizer", 1, "optimizer",
                 "grad_clip", launches=tensors)
        ops += _launch_only("zero.overflow_scalars", OVERFLOW_SCALARS_PER_TENSOR * tensors + 3)  # + bool, byte, item
    ops += _k("zero.norm", "optimizer", NORM_PER_TENSOR, elements, "optimizer", 1, "optimizer", "grad_clip",
              launches=tensors)
    ops += _launch_only("zero.norm_scalars", NORM_SCALARS)
    if offload:
        return ops
    groups = sub_groups(d, tied, dp) if stage == 3 else [elements]
    share = tensors / len(groups)
    for i, group in enumerate(groups):
        ops += _flat_step(f"zero.step{i}" if len(groups) > 1 else "zero.step", group, math.ceil(share))
    ops += _launch_only("zero.step_scalars", STEP_SCALARS * len(groups))
    return ops


def step_kernels(ops: list[Op]) -> float:
    """Kernels the step launches (the host's work for ZeRO's Python loops over the gradients)."""
    return sum(op.count for op in ops)


# ---------------------------------------------------------------------------------------------------------------
# Memory (bytes per GPU)

@dataclass(frozen=True)
class ZeroMemory:
    """Terms of DeepSpeed ZeRO's peak on one rank (bytes), at the loss and in the step."""

    params: float        # bf16 parameters: all (ZeRO-2) or this rank's partition + resident small ones (ZeRO-3)
    gathered: float      # ZeRO-3: the largest set of fetched full parameters alive at once, plus the prefetch bucket
    master_and_moments: float  # fp32 master + Adam exp_avg, exp_avg_sq of this rank's partition
    grad_partition: float      # bf16 flat gradient partition: ZeRO-2 allocates it in backward and frees it after
                               # the step, ZeRO-3 holds it from initialization
    bucket: float              # the reduce bucket (bf16, reduce_bucket_size): ZeRO-2 allocates it at the first
                               # gradient hook and frees it at the end of backward, ZeRO-3 holds it
    step_transient: float      # what the step allocates on top: the flat copy and its fp32 cast (or ZeRO-3's
                               # overflow-check temporaries, if larger)
    activations: float
    loss: float
    stage: int = 2

    @property
    def at_loss(self) -> float:
        held = self.grad_partition + self.bucket if self.stage == 3 else 0.0
        return self.params + self.gathered + self.master_and_moments + held + self.activations + self.loss

    @property
    def at_step(self) -> float:
        bucket = self.bucket if self.stage == 3 else 0.0
        return self.params + self.master_and_moments + self.grad_partition + bucket + self.step_transient

    @property
    def peak_allocated(self) -> float:
        return max(self.at_loss, self.at_step)


def zero_memory(d: Dims, tied: bool, stage: int, dp: int, activations: float, loss: float,
                offload: bool = False) -> ZeroMemory:
    """Peak terms of one rank: ZeRO-2 partitions gradients and optimizer state over ``dp``, ZeRO-3 the bf16
    parameters too (``runtime/zero/stage_1_and_2.py``, ``stage3.py``). ``activations`` and ``loss``: what the
    model holds at the loss (``stack_kernels_hf.hf_activation_bytes``). ``offload`` (``offload_optimizer``): the
    fp32 master, moments and gradient partition live on the host (stage 3 allocates ``grad_partitions_flat_buffer``
    on ``self.device``, the CPU under offload; stage 2 accumulates into its CPU buffers), and the step's GPU
    transients go with them."""
    sizes = param_sizes(d, tied)
    params = sum(sizes)
    local = math.ceil(params / dp)
    if stage == 3:
        big, _ = gathered_params(d, tied)
        weights = 2 * (math.ceil(big / dp) + params - big)
        # one layer's (or the embedding's) full parameters fetched, the next ones prefetched
        gathered = 2 * (max(d.block_params - 2 * d.hidden, d.vocab * d.hidden) + min(PREFETCH_BUCKET_ELEMENTS, big))
        # isinf's abs (2 B) and its bool (1 B) over the partition, or a sub-group's flat copy (2 B) and fp32 (4 B)
        transient = max(3 * local, 6 * max(sub_groups(d, tied, dp)))
    else:
        # flat_grad_partition (2 B) and its .to(fp32) (4 B) are alive together (trace: 22 B per parameter at the
        # step peak of 8b-4l, 42.38 GB measured for 1.92 B parameters)
        weights, gathered, transient = 2 * params, 0.0, 6 * local
    on_gpu = 0 if offload else 1
    return ZeroMemory(params=weights, gathered=gathered, master_and_moments=12 * local * on_gpu,
                      grad_partition=2 * local * on_gpu, bucket=2 * REDUCE_BUCKET_ELEMENTS,
                      step_transient=transient * on_gpu, activations=activations, loss=loss, stage=stage)


# ---------------------------------------------------------------------------------------------------------------
# The collectives on dp > 1 ranks (the step model times them on ``workbench.perf.overlap``'s schedule)

def zero_collectives(d: Dims, tied: bool, stage: int, grad_accumulation: int) -> list[ScheduledCollective]:
    """One step's data-parallel collectives of ZeRO-2 or ZeRO-3 with ``overlap_comm`` on (stage 3's default, and what
    the published DeepSpeed runs set), bf16 (``COMM_BYTES``), in ``ScheduledCollective`` terms.

    Both stages reduce each micro-batch's gradients bucket by bucket (``reduce_buckets``: reduce_bucket_size) on the
    reduction stream beside backward; the last bucket (the token embedding's gradient, fired last) is reduced in
    ``independent_gradient_partition_epilogue`` after the last backward kernel, and the step waits for it.
    ZeRO-2 all-reduces each bucket (``average_tensor`` with ``use_multi_rank_bucket_allreduce``, the default:
    ``allreduce_and_scatter``, each rank keeping its partition's slice) and after the step all-gathers the updated
    bf16 partitions (``all_gather_dp_groups`` inside ``optimizer.step``: nothing runs beside it). ZeRO-3
    reduce-scatters each bucket (``__avg_scatter_grads``) and gathers each submodule's parameters when it runs,
    prefetching the next ones in the recorded trace (stage3_prefetch_bucket_size) beside the current one's compute:
    hidden, but the embedding's at the forward start (nothing before it to run beside) and the first layer's (beside
    the embedding lookup only). A gathered submodule is released unless it is used again within
    ``REUSE_DISTANCE_ELEMENTS``: the head stays gathered from its forward to its backward; every layer is gathered
    again in backward -- once, also under full checkpointing, whose recompute gathers it and keeps it through its own
    backward (a layer is far below the distance) -- and the last layer is kept only when the head's two uses in
    between hold fewer elements than the distance; the embedding is gathered again for its backward (prefetched)."""
    total = sum(param_sizes(d, tied))
    last = reduce_buckets(d, tied)[-1]
    accum = grad_accumulation
    b = COMM_BYTES
    if stage == 2:
        plan = [ScheduledCollective("zero2.all_reduce_buckets", "all_reduce", b * (total - last), accum, "hidden"),
                ScheduledCollective("zero2.all_reduce_last_bucket", "all_reduce", b * last, accum, "backward_end"),
                ScheduledCollective("zero2.all_gather_params", "all_gather", b * total, 1, "forward_start")]
        return [s for s in plan if s.size_bytes > 0]
    embedding = d.vocab * d.hidden
    head = 0 if tied else embedding
    layer = d.block_params - 2 * d.hidden  # the norm weights stay resident (stage3_param_persistence_threshold)
    regathered = d.layers - (1 if 2 * head < REUSE_DISTANCE_ELEMENTS else 0)
    plan = [ScheduledCollective("zero3.all_gather_embedding", "all_gather", b * embedding, accum, "forward_start"),
            ScheduledCollective("zero3.all_gather_first_layer", "all_gather", b * layer, accum, "forward_start",
                                beside_compute=True),
            ScheduledCollective("zero3.all_gather_layers", "all_gather", b * layer, (d.layers - 1 + regathered) * accum,
                                "hidden"),
            ScheduledCollective("zero3.all_gather_head", "all_gather", b * head, accum, "hidden"),
            ScheduledCollective("zero3.all_gather_embedding_backward", "all_gather", b * embedding, accum, "hidden"),
            ScheduledCollective("zero3.reduce_scatter_buckets", "reduce_scatter", b * (total - last), accum, "hidden"),
            ScheduledCollective("zero3.reduce_scatter_last_bucket", "reduce_scatter", b * last, accum,
                                "backward_end")]
    return [s for s in plan if s.size_bytes > 0 and s.occurrences > 0]

