"""What a user asks the model about: how the step is parallelised and configured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workbench.errors import SpecError
from workbench.models import DLRMModel, Model, TransformerModel
from workbench.precision import get_precision

Sharding = Literal["ddp", "fsdp"]
Checkpointing = Literal["none", "selective", "full"]
CHECKPOINTING: tuple[str, ...] = ("none", "selective", "full")
TRAINING_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp8_gw_hp", "mxfp8")
"""fp8_gw_hp: fp8 with the weight-gradient GEMM in bf16 (``workbench.precision.linear_gemm_precisions``)."""


@dataclass(frozen=True)
class Parallelism:
    """Degrees of parallelism. GPUs = dp x tp x pp; experts are sharded ep-ways inside the dp group."""

    dp: int = 1
    """Data-parallel degree: replicas (ddp) or shards (fsdp)."""
    tp: int = 1
    """Tensor (Megatron) parallel degree, inside a scale-up domain."""
    pp: int = 1
    """Pipeline stages."""
    ep: int = 1
    """Expert-parallel degree (MoE), a divisor of dp."""
    sharding: Sharding = "fsdp"
    """How the dp group holds parameters, gradients and optimizer states: ddp replicates, fsdp shards all three."""

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @staticmethod
    def data_parallel(gpus: int, sharding: Sharding = "fsdp") -> Parallelism:
        return Parallelism(dp=gpus, sharding=sharding)


@dataclass(frozen=True)
class TrainingConfig:
    """One training step's shape. ``global_batch`` (samples) defaults to micro_batch x dp (no accumulation)."""

    micro_batch: int
    seq_len: int = 0
    """Tokens per sample (transformers, HSTU); 0 uses the model's default; ignored for DLRM."""
    precision: str = "bf16"
    """GEMM compute precision; activations are bf16 for 8-bit training, params kept in fp32 master copies."""
    parallelism: Parallelism = field(default_factory=Parallelism)
    activation_checkpointing: Checkpointing = "none"
    global_batch: int = 0

    @property
    def data_parallel_batch(self) -> int:
        return self.micro_batch * self.parallelism.dp

    @property
    def grad_accumulation(self) -> int:
        return self.global_batch // self.data_parallel_batch if self.global_batch else 1

    @property
    def samples_per_step(self) -> int:
        return self.global_batch or self.data_parallel_batch

    def resolved(self, model: Model) -> TrainingConfig:
        """Validate against ``model`` and fill defaults; raises ``SpecError`` naming the bad field."""
        origin = "training config"
        seq = self.seq_len or getattr(model, "default_seq_len", 1)
        _positive(origin, "micro_batch", self.micro_batch)
        _positive(origin, "seq_len", seq)
        if self.activation_checkpointing not in CHECKPOINTING:
            raise SpecError(origin, "activation_checkpointing", self.activation_checkpointing, f"one of {', '.join(CHECKPOINTING)}")
        if self.precision not in TRAINING_PRECISIONS:
            get_precision(self.precision)  # unknown names get the registry's error
            raise SpecError(origin, "precision", self.precision, f"a training precision: {', '.join(TRAINING_PRECISIONS)}")
        p = self.parallelism
        for name in ("dp", "tp", "pp", "ep"):
            _positive(origin, f"parallelism.{name}", getattr(p, name))
        if p.sharding not in ("ddp", "fsdp"):
            raise SpecError(origin, "parallelism.sharding", p.sharding, "ddp or fsdp")
        if self.global_batch:
            _positive(origin, "global_batch", self.global_batch)
            if self.global_batch % self.data_parallel_batch:
                raise SpecError(origin, "global_batch", self.global_batch,
                                f"a multiple of micro_batch x dp = {self.micro_batch} x {p.dp} = {self.data_parallel_batch}")
        if p.dp % p.ep:
            raise SpecError(origin, "parallelism.ep", p.ep, f"a divisor of dp={p.dp}")
        if isinstance(model, TransformerModel):
            _check_transformer_split(model, p, origin)
        elif p.tp > 1 or p.pp > 1:
            raise SpecError(origin, "parallelism", f"tp={p.tp}, pp={p.pp}",
                            f"tp=1 and pp=1 for {model.kind} models (tables shard by rows/columns, MLPs replicate)")
        if isinstance(model, (DLRMModel,)) and p.ep > 1:
            raise SpecError(origin, "parallelism.ep", p.ep, "1 (DLRM has no experts)")
        return TrainingConfig(self.micro_batch, seq, self.precision, p, self.activation_checkpointing, self.global_batch)


def _check_transformer_split(model: TransformerModel, p: Parallelism, origin: str) -> None:
    if model.num_heads % p.tp:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor of num_heads={model.num_heads}")
    if model.num_kv_heads % p.tp and p.tp % model.num_kv_heads:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor or multiple of num_kv_heads={model.num_kv_heads}")
    if model.ffn_hidden_size % p.tp:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor of ffn_hidden_size={model.ffn_hidden_size}")
    if p.pp > model.num_layers:
        raise SpecError(origin, "parallelism.pp", p.pp, f"at most num_layers={model.num_layers}")
    if p.ep > 1 and (not model.is_moe or model.num_experts % p.ep):
        raise SpecError(origin, "parallelism.ep", p.ep, f"1, or a divisor of num_experts={model.num_experts} for MoE models")


def _positive(origin: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(origin, name, value, "a positive integer")


def activation_dtype(precision: str) -> str:
    """The dtype activations are stored and elementwise ops run in, for a GEMM precision."""
    return {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16"}.get(precision, "bf16")


def attention_dtype(precision: str) -> str:
    """Flash attention runs in the activation dtype (8-bit training keeps attention in bf16)."""
    return activation_dtype(precision) if precision not in ("fp32", "tf32") else precision

