"""The step as Megatron-Core runs it (``kernels: megatron-local`` or ``megatron-te`` in ``specs/stacks/``): the ops
of ``workbench.graph.stack_kernels_megatron`` and the memory of ``workbench.stack_memory_megatron``, in the
``StackStep`` shape ``workbench.graph.stacked`` prices (``stacked.stack_step`` dispatches here)."""

from __future__ import annotations

import dataclasses

from workbench.config import TrainingConfig
from workbench.graph.stack_kernels import Dims
from workbench.graph.stack_kernels_megatron import (
    block_ops,
    grad_norm_syncs,
    head_ops,
    megatron_embedding_ops,
    megatron_flavor,
    optimizer_ops,
    parameter_count,
    recompute_ops,
)
from workbench.graph.stacked import StackStep, one_piece
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

    def host_s(self, stack: Stack, grad_accumulation: int) -> float:
        """The launches' CPU time (``StackStep.host_s``) and the gradient norm's syncs, once per step."""
        sync_s = self.syncs * stack.constant("host_sync_us", HOST_SYNC_US) * 1e-6
        return super().host_s(stack, grad_accumulation) + sync_s

    def memory(self, stack: Stack, capacity_bytes: float) -> MemoryBreakdown:
        """Peak reserved memory on one GPU: the largest of the loss's, the last layer's backward's and the
        optimizer step's allocations, times the stack's reserved/allocated ratio."""
        m = megatron_memory(self.dims, self.flavor, self.policy, self.dp)
        slack = (stack.constant("reserved_over_allocated", 1.0) - 1) * m.peak_allocated
        transient = m.peak_allocated - m.static
        return MemoryBreakdown(params=m.params + m.persistent_buffers, grads=m.grad_buffer, optimizer=m.optimizer,
                               activations=transient, workspace=slack, capacity=capacity_bytes)


def megatron_stack_step(model: TransformerModel, cfg: TrainingConfig, stack: Stack) -> MegatronStackStep:
    """The ops of ``cfg`` as Megatron-Core runs it (``stacked.scope_gap`` must be None)."""
    policy = stack.policy(cfg.activation_checkpointing)
    if policy not in POLICIES:
        raise ValueError(f"stack {stack.name}: checkpointing policy {policy!r} is not Megatron's "
                         f"(one of {', '.join(POLICIES)})")
    p = cfg.parallelism
    d = Dims.of(model, cfg.micro_batch, cfg.seq_len, p.tp, p.cp, p.pp)  # this rank's shard (stacked's docstring)
    flavor = dataclasses.replace(megatron_flavor(MEGATRON_KERNELS[stack.kernels]), tied=model.tied_embeddings)
    fwd, bwd = block_ops(d, flavor)
    recompute = recompute_ops(fwd, POLICIES[policy])
    microbatch = megatron_embedding_ops(d, flavor) + fwd + head_ops(d, flavor) + bwd + recompute
    dp = p.weight_replicas  # the distributed optimizer shards over the data-parallel-with-cp group
    params, tensors = parameter_count(d, flavor.tied)
    step = optimizer_ops(max(1, params // dp), tensors, flavor)  # the distributed optimizer steps its shard
    return MegatronStackStep(flavor, POLICIES[policy], one_piece(microbatch), one_piece(step), d, dp=dp,
                             syncs=grad_norm_syncs(tensors, flavor))
