"""The step as Megatron-Core runs it (``kernels: megatron-local`` or ``megatron-te`` in ``specs/stacks/``): the ops
of ``workbench.graph.stack_kernels_megatron`` and the memory of ``workbench.stack_memory_megatron``, in the
``StackStep`` shape ``workbench.graph.stacked`` prices (``stacked.stack_step`` dispatches here)."""

from __future__ import annotations

import dataclasses

from workbench.config import TrainingConfig
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_megatron import (
    block_linears,
    block_ops,
    fp8_layer_split,
    fp8_microbatch_ops,
    fp8_step_ops,
    grad_norm_syncs,
    head_ops,
    megatron_embedding_ops,
    megatron_flavor,
    optimizer_ops,
    parameter_count,
    recompute_ops,
)
from workbench.graph.stack_kernels_megatron_gpt import is_gpt_block
from workbench.graph.stack_kernels_megatron_moe import Experts, expert_parameters, experts_of
from workbench.graph.stacked import StackStep, one_piece
from workbench.graph.te_tp_overlap import with_tp_overlap
from workbench.memory import MemoryBreakdown
from workbench.models import TransformerModel
from workbench.stack_memory_megatron import megatron_memory
from workbench.stacks import Stack

MEGATRON_KERNELS = {"megatron-local": False, "megatron-te": True}
"""A stack's ``kernels`` -> whether its layers are TransformerEngine's."""
POLICIES = {"none": "none", "selective-core-attn": "selective-core-attn", "full": "full-uniform"}
"""A stack's checkpointing policy -> Megatron's recompute (``stack_kernels_megatron.MEGATRON_POLICIES``)."""


HOST_SYNC_US = 21.5
"""CPU seconds (us) of one gradient-norm ``.item()`` after the first (``grad_norm_syncs``): a blocking 4-byte
device-to-host copy and its Python; overridden by the stack's ``host_sync_us``."""


@dataclasses.dataclass(frozen=True)
class MegatronStackStep(StackStep):
    dp: int = 1
    syncs: int = 0
    """Host syncs of the gradient norm per step (``stack_kernels_megatron.grad_norm_syncs``)."""
    experts: Experts | None = None
    """An MoE model's routed experts on this rank (``stack_kernels_megatron_moe``)."""

    def host_s(self, stack: Stack, grad_accumulation: int) -> float:
        """The launches' CPU time (``StackStep.host_s``) and the gradient norm's syncs, once per step."""
        sync_s = self.syncs * stack.constant("host_sync_us", HOST_SYNC_US) * 1e-6
        return super().host_s(stack, grad_accumulation) + sync_s

    def overlap_critical_path(self, critical, micro, cfg: TrainingConfig, model, gpu=None, price=None):
        """TE's userbuffers overlap of the tensor-parallel collectives with their GEMMs (NeMo's recipes set
        ``tp_comm_overlap`` for every tp > 1 run: ``workbench.graph.te_tp_overlap``), on ``gpu`` with ``price``
        (seconds of one execution of an op) for the chunked GEMMs."""
        if not self.flavor.te or gpu is None or price is None:
            return critical
        return with_tp_overlap(critical, micro, cfg, model, gpu, price)

    def memory(self, stack: Stack, capacity_bytes: float) -> MemoryBreakdown:
        """Peak reserved memory on one GPU: the largest of the loss's, the last layer's backward's and the
        optimizer step's allocations, times the stack's reserved/allocated ratio."""
        m = megatron_memory(self.dims, self.flavor, self.policy, self.dp, self.experts)
        slack = (stack.constant("reserved_over_allocated", 1.0) - 1) * m.peak_allocated
        transient = m.peak_allocated - m.static
        return MemoryBreakdown(params=m.params + m.persistent_buffers, grads=m.grad_buffer, optimizer=m.optimizer,
                               activations=transient, workspace=slack, capacity=capacity_bytes)


def fp8_recipe(stack: Stack, precision: str) -> str:
    """TransformerEngine's recipe for ``precision`` on ``stack`` (``workbench.graph.te_fp8``): fp8 = the stack's
    ``fp8_recipe`` (delayed or current scaling), mxfp8 = MXFP8, else none (bf16)."""
    if not MEGATRON_KERNELS[stack.kernels]:
        return "none"
    return {"fp8": stack.fp8_recipe, "mxfp8": "mxfp8"}.get(precision, "none")


def megatron_stack_step(model: TransformerModel, cfg: TrainingConfig, stack: Stack, *,
                        fp8_any_layout: bool = False) -> MegatronStackStep:
    """The ops of ``cfg`` as Megatron-Core runs it (``stacked.scope_gap`` must be None); ``fp8_any_layout``: the
    GPU's fp8 GEMMs take any layout (no fp8 transposes)."""
    policy = stack.policy(cfg.activation_checkpointing)
    if policy not in POLICIES:
        raise ValueError(f"stack {stack.name}: checkpointing policy {policy!r} is not Megatron's "
                         f"(one of {', '.join(POLICIES)})")
    p = cfg.parallelism
    d = Dims.of(model, cfg.micro_batch, cfg.seq_len, p.tp, p.cp, p.pp)  # this rank's shard (stacked's docstring)
    flavor = dataclasses.replace(megatron_flavor(MEGATRON_KERNELS[stack.kernels]), tied=model.tied_embeddings,
                                 fp8=fp8_recipe(stack, cfg.precision), fp8_transpose=not fp8_any_layout,
                                 bf16_end_blocks=stack.fp8_bf16_end_blocks,
                                 gpt_block=MEGATRON_KERNELS[stack.kernels] and is_gpt_block(model))
    fp8_layers, bf16_layers = fp8_layer_split(d.layers, p.pp, flavor)
    experts = experts_of(model, p)  # an MoE model's routed experts (stack_kernels_megatron_moe)
    fwd, bwd = [], []  # the fp8 blocks, then current scaling's bf16 ones (their counts add to d.layers)
    for layers, block_flavor in ((fp8_layers, flavor), (bf16_layers, dataclasses.replace(flavor, fp8="none"))):
        if layers:
            f, b = block_ops(dataclasses.replace(d, layers=layers), block_flavor, experts)
            fwd += f
            bwd += b
    recompute = recompute_ops(fwd, POLICIES[policy])
    microbatch = (megatron_embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute
                  + fp8_microbatch_ops(flavor))
    dp = p.weight_replicas  # the distributed optimizer shards over the data-parallel-with-cp group
    # the experts' over the expert-data-parallel group (megatron/core/parallel_state.py: the ranks of one
    # pipeline stage over expert x expert-tensor parallelism)
    expert_dp = max(1, p.gpus // (p.pp * p.ep * p.tp)) if experts else dp
    params, tensors = parameter_count(d, flavor.tied, experts, flavor.gpt_block)
    expert_params = d.layers * expert_parameters(d, experts) if experts else 0
    fp8_params = 0
    if flavor.fp8 in ("delayed", "current"):  # fp8_param_gather: the fp8 linears' weights are fp8 parameters
        fp8_params = sum(fp8_layers * i * o * copies // (expert_dp if name.startswith("experts.") else dp)
                         for name, i, o, copies in block_linears(d, experts, flavor.gpt_block))
    # the distributed optimizer steps its shard
    shard = (params - expert_params) // dp + expert_params // expert_dp
    step = optimizer_ops(max(1, shard), tensors, flavor, fp8_params=fp8_params)
    if flavor.fp8 != "none" and fp8_layers:
        step += fp8_step_ops(d, flavor, fp8_layers, dp, experts, expert_dp)
    return MegatronStackStep(flavor, POLICIES[policy], one_piece(microbatch), one_piece(step), d, dp=dp,
                             syncs=grad_norm_syncs(tensors, flavor), experts=experts)
