"""Model construction for the job: the recipe's model on meta, its kernels and fp8 linears swapped in, then TP,
activation checkpointing, torch.compile and FSDP2 / DDP, then materialised on the device and initialised."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from workbench.train.dlrm import DLRM, RowWiseAdagrad
from workbench.train.layers import Float8Linear, KernelSet, TritonLinear, swap_linear
from workbench.train.llama import Llama
from workbench.train.parallel import DTYPES, World, apply_fsdp, apply_tensor_parallel, build_mesh, checkpoint_block
from workbench.train.spec import JobError, JobSpec

BLOCK_LINEARS = ("attention.wqkv", "attention.wo", "ffn.w_gate_up", "ffn.w_down")


@dataclass
class Built:
    """A model ready to train, its optimizers, and how it was built."""

    model: nn.Module
    optimizers: list[torch.optim.Optimizer]
    autocast_dtype: torch.dtype | None
    """Set when the forward runs under torch.autocast (DDP / single process without FSDP, and DLRM)."""
    fsdp: bool
    ddp: bool
    fp8_backend: str
    """none, torchao, workbench-triton (scaled_matmul) or emulated (CPU)."""
    notes: list[str] = field(default_factory=list)


def kernel_set(spec: JobSpec) -> KernelSet:
    return KernelSet(triton=spec.triton_ops(), gemm_configs=spec.kernel_configs("gemm"),
                     gemm_vendor=spec.vendor_shapes("gemm"), compile_loss=spec.compile)


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _set(module: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_get(module, parent) if parent else module, name, new)


def _swap_block_linears(model: Llama, spec: JobSpec, kernels: KernelSet, world: World, notes: list[str],
                        fp8_emulate: bool = False) -> str:
    """fp8 (torchao where it imports, else the project's fp8 GEMM; the project's fp32 emulation of it when
    ``fp8_emulate``) or Triton GEMMs in the blocks' linears. Embedding, output head and norms stay out of fp8.
    The recipe name goes to torchao unchanged: ``Float8LinearConfig.from_recipe_name`` takes the strings
    ``tensorwise``, ``rowwise`` and ``rowwise_with_gw_hp`` (pytorch/ao ``torchao/float8/config.py``), and
    ``layers.FP8_LINEAR_RECIPES`` implements the same three on the project's path."""
    if spec.fp8 != "none":
        if world.device.type == "cuda" and not fp8_emulate:
            try:
                from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            except ImportError:
                notes.append("torchao is not installed: fp8 through workbench.kernels.dispatch.triton_scaled_matmul")
            else:
                config = Float8LinearConfig.from_recipe_name(spec.fp8)
                convert_to_float8_training(model.blocks, config=config)
                return "torchao"
        for block in model.blocks.values():
            for path in BLOCK_LINEARS:
                _set(block, path, swap_linear(_get(block, path), Float8Linear, recipe=spec.fp8,
                                              emulate=fp8_emulate, kernels=kernels))
        if fp8_emulate:
            notes.append("fp8 emulated (dequantize + fp32 matmul, same rounding as the fp8 GEMM): --fp8-emulate")
            return "emulated"
        if world.device.type == "cuda":
            return "workbench-triton"
        from workbench.kernels._common import interpreting

        return "workbench-triton-interpreter" if interpreting() else "emulated"
    if kernels.uses("gemm"):
        for block in model.blocks.values():
            for path in BLOCK_LINEARS:
                _set(block, path, swap_linear(_get(block, path), TritonLinear, kernels=kernels))
    return "none"


def _matmul_precision(spec: JobSpec) -> None:
    """fp32 matmuls on TF32 tensor cores when the recipe computes in tf32, IEEE fp32 otherwise."""
    torch.backends.cuda.matmul.allow_tf32 = spec.compute_dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = spec.compute_dtype == "tf32"


def build_transformer(spec: JobSpec, world: World, fp8_emulate: bool = False) -> Built:
    kernels, notes = kernel_set(spec), []
    if spec.tp > 1 and (spec.fp8 != "none" or kernels.triton):
        raise JobError(f"recipe {spec.name!r}: tp = {spec.tp} with fp8 or Triton kernels: the reference job runs "
                       "those on whole (non-DTensor) weights only; use tp: 1 or vendor kernels")
    _matmul_precision(spec)
    with torch.device("meta"):
        model = Llama(spec.model, kernels, spec.seq_len)
    if spec.param_dtype != "fp32":
        model.to(DTYPES[spec.param_dtype])
    fp8_backend = _swap_block_linears(model, spec, kernels, world, notes, fp8_emulate)
    fsdp = spec.sharding == "fsdp"
    dp_mesh = tp_mesh = None
    if fsdp or spec.tp > 1:
        dp_mesh, tp_mesh = build_mesh(world, spec)
    if tp_mesh is not None:
        apply_tensor_parallel(model, tp_mesh)
    for key, block in list(model.blocks.items()):
        if spec.checkpointed(int(key)):
            block = checkpoint_block(block, spec.checkpointing)
        if spec.compile:
            block.compile()
        model.blocks[key] = block
    if fsdp:
        apply_fsdp(model, dp_mesh, spec)
    model.to_empty(device=world.device)
    with torch.no_grad():
        model.init_weights()
    ddp = not fsdp and world.world_size > 1
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[world.device] if world.device.type == "cuda" else None)
    autocast = None if fsdp or DTYPES[spec.compute_dtype] == DTYPES[spec.param_dtype] else DTYPES[spec.compute_dtype]
    cuda = world.device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=cuda, foreach=None if cuda else True)
    return Built(model, [optimizer], autocast, fsdp, ddp, fp8_backend, notes)


def build_dlrm(spec: JobSpec, world: World, max_table_rows: int | None) -> Built:
    kernels, notes = kernel_set(spec), []
    if spec.checkpointing != "none":
        notes.append("activation checkpointing is not applied to DLRM (its activations are small)")
    assert spec.family == "dlrm", spec.family
    _matmul_precision(spec)
    with torch.device(world.device):
        model = DLRM(spec.model, kernels, max_table_rows)
    model.init_weights()
    if kernels.uses("gemm"):
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear):
                _set(model, name, swap_linear(module, TritonLinear, kernels=kernels))
    if spec.compile:
        model.bottom.compile()
        model.top.compile()
        for layer in model.cross:
            layer.compile()
    cuda = world.device.type == "cuda"
    dense = [p for name, p in model.named_parameters() if name != "weight"]
    optimizers = [torch.optim.AdamW(dense, lr=1e-3, fused=cuda, foreach=None if cuda else True),
                  RowWiseAdagrad([model.weight], lr=0.005)]
    autocast = None if DTYPES[spec.compute_dtype] == torch.float32 else DTYPES[spec.compute_dtype]
    return Built(model, optimizers, autocast, False, False, "none", notes)
