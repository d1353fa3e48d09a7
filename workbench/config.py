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

# Plausibility limits of a training step's shape (a policy, not physics): beyond them the model's numbers stop
# meaning anything (and searches stop finishing), so a value past one is a typo, not a question.
MAX_GPUS = 1 << 20
"""1,048,576 GPUs: several times the largest training clusters announced (~10^5 GPUs)."""
MAX_MICRO_BATCH = 1 << 24
"""16,777,216 samples per GPU per micro-batch (DLRM trains at 2^16; transformers at 1-64)."""
MAX_SEQ_LEN = 1 << 24
"""16,777,216 tokens per sample (long-context training reaches ~2^20)."""
MAX_GLOBAL_BATCH = 1 << 32
"""Samples per optimizer step."""


def default_micro_batch(model: Model) -> int:
    """The micro-batch a question about ``model`` means when it names none (``micro_batch`` 0 or None): the
    recommendation models' own ``default_batch`` (DLRM 65,536, HSTU 64: the batch they are trained at, one sample
    being one user request), 1 sequence for a transformer. The CLI (``workbench predict``), the API (``predict``,
    ``TrainingConfig``) and the widget all read it here."""
    return 1 if isinstance(model, TransformerModel) else int(model.default_batch)


def default_seq_len(model: Model) -> int:
    """Tokens per sample when none is named (``seq_len`` 0): the model's ``default_seq_len``; 1 for DLRM, which
    has no sequence (one sample is one set of dense and sparse features)."""
    return int(getattr(model, "default_seq_len", 1))


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
    """One training step's shape. ``global_batch`` (samples) defaults to micro_batch x dp (no accumulation).
    ``resolved(model)`` fills the defaults (``default_micro_batch``, ``default_seq_len``) and checks the rest."""

    micro_batch: int = 0
    """Samples per GPU per micro-batch; 0 uses the model's default (``default_micro_batch``)."""
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
        for name in ("micro_batch", "seq_len", "global_batch"):
            _integer(origin, name, getattr(self, name))
        mb = self.micro_batch or default_micro_batch(model)
        seq = self.seq_len or default_seq_len(model)
        _positive(origin, "micro_batch", mb, MAX_MICRO_BATCH, "or 0 for the model's default")
        _positive(origin, "seq_len", seq, MAX_SEQ_LEN, "or 0 for the model's default")
        if self.activation_checkpointing not in CHECKPOINTING:
            raise SpecError(origin, "activation_checkpointing", self.activation_checkpointing, f"one of {', '.join(CHECKPOINTING)}")
        if self.precision not in TRAINING_PRECISIONS:
            get_precision(self.precision)  # unknown names get the registry's error
            raise SpecError(origin, "precision", self.precision, f"a training precision: {', '.join(TRAINING_PRECISIONS)}")
        p = self.parallelism
        for name in ("dp", "tp", "pp", "ep"):
            _positive(origin, f"parallelism.{name}", getattr(p, name), MAX_GPUS)
        if p.gpus > MAX_GPUS:
            raise SpecError(origin, "parallelism", f"dp={p.dp}, tp={p.tp}, pp={p.pp}",
                            f"at most {MAX_GPUS:,} GPUs in all (dp x tp x pp = {p.gpus:,})")
        if p.sharding not in ("ddp", "fsdp"):
            raise SpecError(origin, "parallelism.sharding", p.sharding, "ddp or fsdp")
        if self.global_batch:
            _positive(origin, "global_batch", self.global_batch, MAX_GLOBAL_BATCH, "or 0 for micro_batch x dp")
            if self.global_batch % (mb * p.dp):
                raise SpecError(origin, "global_batch", self.global_batch,
                                f"a multiple of micro_batch x dp = {mb} x {p.dp} = {mb * p.dp}")
        if p.dp % p.ep:
            raise SpecError(origin, "parallelism.ep", p.ep, f"a divisor of dp={p.dp}")
        if isinstance(model, TransformerModel):
            _check_transformer_split(model, p, origin)
        elif p.tp > 1 or p.pp > 1:
            raise SpecError(origin, "parallelism", f"tp={p.tp}, pp={p.pp}",
                            f"tp=1 and pp=1 for {model.kind} models (tables shard by rows/columns, MLPs replicate)")
        if isinstance(model, (DLRMModel,)) and p.ep > 1:
            raise SpecError(origin, "parallelism.ep", p.ep, "1 (DLRM has no experts)")
        return TrainingConfig(mb, seq, self.precision, p, self.activation_checkpointing, self.global_batch)


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


def _integer(origin: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(origin, name, value, "an integer")


def _positive(origin: str, name: str, value: object, maximum: int, default: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise SpecError(origin, name, value, f"a positive integer up to {maximum:,}{f' ({default})' if default else ''}")


def activation_dtype(precision: str) -> str:
    """The dtype activations are stored and elementwise ops run in, for a GEMM precision."""
    return {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16"}.get(precision, "bf16")


def attention_dtype(precision: str) -> str:
    """Flash attention runs in the activation dtype (8-bit training keeps attention in bf16)."""
    return activation_dtype(precision) if precision not in ("fp32", "tf32") else precision

