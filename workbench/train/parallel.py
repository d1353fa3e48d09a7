"""PyTorch distributed for the job: process group, device mesh, FSDP2, tensor parallelism, activation
checkpointing and regional torch.compile -- applied in torchtitan's order (TP, AC, compile, FSDP).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch import nn

from workbench.train.spec import JobError, JobSpec

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""torch dtypes of the recipe's precision names; tf32 is fp32 storage with TF32 matmuls (set by the builder)."""


@dataclass
class World:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    initialized_here: bool
    """We created the process group (and destroy it at the end)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_world(device: str = "auto", need_group: bool = False) -> World:
    """Join torchrun's process group (WORLD_SIZE set), or make a one-rank group when ``need_group`` (FSDP2 on a
    single process). ``device``: "auto" (this rank's GPU if there is one), "cuda" or "cpu"."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise JobError("--device cuda: no CUDA device is visible to torch")
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    created = False
    if not dist.is_initialized() and (world_size > 1 or need_group):
        backend = "nccl" if use_cuda else "gloo"
        if world_size > 1:
            dist.init_process_group(backend, device_id=dev if use_cuda else None)
        else:  # one rank: an in-process store, no ports
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        created = True
    return World(rank, world_size, local_rank, dev, created)


def checkpoint_block(block: nn.Module, mode: str) -> nn.Module:
    """Wrap a block for activation checkpointing: ``full`` recomputes the whole block in backward; ``selective``
    saves the outputs of GEMMs (fp8 ones included) and attention and recomputes the rest (norms, SwiGLU, RoPE),
    torchtitan's op-level selective checkpointing and the ``selective`` the workbench's memory model counts. The
    policy sees ops only: the Triton bf16 GEMM and attention (autograd Functions around raw launches) are
    recomputed in backward under ``selective``."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten._scaled_mm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        if hasattr(aten, name):
            save.add(getattr(aten, name).default)
    from workbench.train.layers import fp8_matmul_op  # noqa: F401  (registers the op)

    save.add(torch.ops.workbench_train.fp8_matmul.default)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return checkpoint_wrapper(block, context_fn=partial(create_selective_checkpoint_contexts, policy),
                              preserve_rng_state=False)


def apply_tensor_parallel(model: nn.Module, mesh) -> None:
    """Megatron-style TP on every block: q/k/v and gate/up column-wise, o and down row-wise (one all-reduce
    after each). Embeddings, norms and the output head stay replicated (the analytical model shards the
    embeddings tp ways, so memory measured under tp > 1 runs a little above the prediction)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attention.wqkv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "ffn.w_gate_up": ColwiseParallel(), "ffn.w_down": RowwiseParallel()}
    for block in model.blocks.values():
        parallelize_module(block, mesh, plan)
        block.attention.tp = mesh.size()


def apply_fsdp(model: nn.Module, mesh, spec: JobSpec) -> None:
    """FSDP2 (``fully_shard``) on every block, then the root: fp32 (or the recipe's param dtype) shards,
    parameters gathered in the compute dtype, gradients reduced in the reduce dtype."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    compute = DTYPES[spec.compute_dtype] if DTYPES[spec.compute_dtype] != DTYPES[spec.param_dtype] else None
    mp = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=DTYPES[spec.reduce_dtype])
    blocks = list(model.blocks.values())
    for i, block in enumerate(blocks):
        # the last block's parameters are needed again at once by backward: keep them gathered
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def build_mesh(world: World, spec: JobSpec):
    """(dp mesh, tp mesh or None) over this job's ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    if spec.tp == 1:
        return init_device_mesh(world.device.type, (spec.dp,), mesh_dim_names=("dp",)), None
    mesh = init_device_mesh(world.device.type, (spec.dp, spec.tp), mesh_dim_names=("dp", "tp"))
    return mesh["dp"], mesh["tp"]
