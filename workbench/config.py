"""What a user asks the model about: how the step is parallelised and configured."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, get_args

from workbench.errors import SpecError
from workbench.families import family_of
from workbench.models import Model, TransformerModel
from workbench.precision import get_precision

Sharding = Literal["ddp", "fsdp", "zero1"]
SHARDINGS: tuple[str, ...] = ("ddp", "fsdp", "zero1")
LORA_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
"""Linear layers a LoRA adapter can sit on (``TrainingConfig.lora_targets``): attention q, k, v, o projections and the
FFN's gate, up (the dense FFN's only input projection when ungated) and down projections."""
DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q", "k", "v", "o")
"""The MLPerf Llama 2 70B LoRA reference: rank 16 on the attention projections (mlcommons/training
llama2_70b_lora, ``target_modules=["q_proj", "v_proj", "k_proj", "o_proj"]``, ``r=16``)."""
Offload = Literal["none", "optimizer", "optimizer+params"]
OFFLOADS: tuple[str, ...] = ("none", "optimizer", "optimizer+params")
"""CPU offload (``TrainingConfig.offload``, ``workbench.offload``): DeepSpeed's ZeRO-Offload (the optimizer states
and step on the host) and ZeRO-Infinity's parameter offload on top of it (ZeRO-3's parameter shards on the host)."""
Checkpointing = Literal["none", "selective", "full"]
CHECKPOINTING: tuple[str, ...] = ("none", "selective", "full")
ParamDtype = Literal["fp32", "bf16"]
PARAM_DTYPES: tuple[str, ...] = get_args(ParamDtype)
"""Where parameters live: fp32 (fp32 parameters under bf16 autocast) or bf16 (``predict(param_dtype=)``, a stack's
``param_dtypes``, a recipe's ``precision.param_dtype``)."""
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
MAX_POWER_LIMIT_W = 20_000
"""The GPU figures' own bound on board power (``workbench.hardware.GPU_BOUNDS['tdp_w']``)."""
MAX_LORA_RANK = 1 << 16
"""65,536: past any hidden size the catalog holds (a LoRA rank is at most the layer's width; 8-256 in practice)."""


def default_micro_batch(model: Model) -> int:
    """The micro-batch a question about ``model`` means when it names none (``micro_batch`` 0 or None): the
    recommendation models' own ``default_batch`` (DLRM 65,536, HSTU 64: the batch they are trained at, one sample
    being one user request), 1 sequence for a transformer (``Family.default_micro_batch``). The CLI (``workbench
    predict``), the API (``predict``, ``TrainingConfig``) and the widget all read it here."""
    return family_of(model).default_micro_batch(model)


def default_seq_len(model: Model) -> int:
    """Tokens per sample when none is named (``seq_len`` 0): the model's ``default_seq_len``; 1 for DLRM, which
    has no sequence (one sample is one set of dense and sparse features); ``Family.default_seq_len``."""
    return family_of(model).default_seq_len(model)


@dataclass(frozen=True)
class Parallelism:
    """Degrees of parallelism. GPUs = dp x tp x pp x cp; experts are sharded ep-ways inside the dp x cp ranks that
    hold the same weights (``weight_replicas``)."""

    dp: int = 1
    """Data-parallel degree: replicas (ddp) or shards (fsdp)."""
    tp: int = 1
    """Tensor (Megatron) parallel degree, inside a scale-up domain."""
    pp: int = 1
    """Pipeline stages."""
    ep: int = 1
    """Expert-parallel degree (MoE), a divisor of dp."""
    sharding: Sharding = "fsdp"
    """How the dp group holds parameters, gradients and optimizer states: ddp replicates all three, fsdp shards all
    three (ZeRO-3), zero1 shards the optimizer states (fp32 master weights and moments) and keeps bf16 parameters and
    gradients replicated: Megatron's distributed optimizer (gradients reduce-scattered, parameters all-gathered)."""
    cp: int = 1
    """Context-parallel degree: each sample's sequence split over cp ranks (ring attention exchanges K/V); the cp
    ranks hold the same weights, so gradients reduce over dp x cp."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank (Megatron's interleaved 1F1B, Narayanan et al. 2021): the bubble shrinks to
    1/virtual_stages of 1F1B's, at virtual_stages times the pipeline sends; 1 is plain 1F1B."""

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def weight_replicas(self) -> int:
        """Ranks that hold the same (tp, pp) slice of the weights: dp x cp. Gradients reduce over them and fsdp /
        zero1 shard over them (torchtitan's ``dp_shard_cp`` mesh, Megatron's data-parallel-with-cp group)."""
        return self.dp * self.cp

    @property
    def shards_optimizer(self) -> bool:
        """fsdp and zero1 keep 1/weight_replicas of the optimizer states (and fp32 master weights) per rank."""
        return self.sharding in ("fsdp", "zero1")

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
    lora_rank: int = 0
    """LoRA fine-tuning (Hu et al. 2021): rank of the adapters on ``lora_targets``; the base weights are frozen (no
    base weight-gradient GEMMs, gradients or optimizer states). 0: full training."""
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    """The linear layers that carry adapters when ``lora_rank`` > 0 (``LORA_TARGETS``)."""
    offload: Offload = "none"
    """CPU offload (``OFFLOADS``; ``workbench.offload``): ``optimizer`` keeps the fp32 master weights and AdamW
    moments on the host and runs the step there (gradients copied down, parameters up, over the host link);
    ``optimizer+params`` also keeps ZeRO-3's parameter shards on the host (fsdp only), fetched every pass."""
    offload_delayed_update: bool = False
    """ZeRO-Offload's one-step delayed parameter update (Ren et al. 2021, Sec. 4.3): the host step of step i
    runs beside the GPU's step i+1 instead of between them. Off by default (DeepSpeed's default)."""
    power_limit_w: float = 0
    """The board power limit the GPUs run under (``workbench.power``: compute-bound ops slow with it); 0: the GPU's
    own (its rating, or a power-limited variant's limit)."""

    @property
    def lora(self) -> bool:
        return self.lora_rank > 0

    def beyond_stack_tables(self) -> str | None:
        """The features of this configuration that the stack kernel tables (``workbench.graph.stacked``) do not
        price (they cover plain ddp / fsdp training without context parallelism or interleaving); None if none."""
        p = self.parallelism
        gaps = [name for name, on in (("context parallelism", p.cp > 1), ("interleaved pipeline stages",
                                      p.virtual_stages > 1), ("LoRA fine-tuning", self.lora),
                                      ("zero1 sharding", p.sharding == "zero1"),
                                      ("CPU offload", self.offload != "none")) if on]
        return ", ".join(gaps) or None

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
        for name in ("micro_batch", "seq_len", "global_batch", "lora_rank"):
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
        for name in ("dp", "tp", "pp", "ep", "cp", "virtual_stages"):
            _positive(origin, f"parallelism.{name}", getattr(p, name), MAX_GPUS)
        if p.gpus > MAX_GPUS:
            raise SpecError(origin, "parallelism", f"dp={p.dp}, tp={p.tp}, pp={p.pp}, cp={p.cp}",
                            f"at most {MAX_GPUS:,} GPUs in all (dp x tp x pp x cp = {p.gpus:,})")
        if p.sharding not in SHARDINGS:
            raise SpecError(origin, "parallelism.sharding", p.sharding, ", ".join(SHARDINGS))
        if self.lora_rank:
            _positive(origin, "lora_rank", self.lora_rank, MAX_LORA_RANK, "or 0 for full training")
            targets = self.lora_targets
            if not (isinstance(targets, tuple) and targets and all(t in LORA_TARGETS for t in targets)
                    and len(set(targets)) == len(targets)):
                raise SpecError(origin, "lora_targets", targets, f"a tuple of distinct names from {', '.join(LORA_TARGETS)}")
            if p.sharding == "fsdp" and p.weight_replicas > 1:
                raise SpecError(origin, "parallelism.sharding", p.sharding,
                                "ddp or zero1 with LoRA (fsdp over frozen weights is not modelled yet)")
        if self.global_batch:
            _positive(origin, "global_batch", self.global_batch, MAX_GLOBAL_BATCH, "or 0 for micro_batch x dp")
            if self.global_batch % (mb * p.dp):
                raise SpecError(origin, "global_batch", self.global_batch,
                                f"a multiple of micro_batch x dp = {mb} x {p.dp} = {mb * p.dp}")
        if p.weight_replicas % p.ep:
            raise SpecError(origin, "parallelism.ep", p.ep, f"a divisor of dp={p.dp}" if p.cp == 1
                            else f"a divisor of dp x cp = {p.weight_replicas}")
        family = family_of(model)
        family.check_config(model, self, seq, origin)  # what this family's models can run
        _check_offload(self, family.offloads, origin)
        if isinstance(self.power_limit_w, bool) or not isinstance(self.power_limit_w, (int, float)) or not (
                0 <= self.power_limit_w <= MAX_POWER_LIMIT_W):
            raise SpecError(origin, "power_limit_w", self.power_limit_w,
                            f"watts, 0..{MAX_POWER_LIMIT_W:,} (0: the GPU's own)")
        return dataclasses.replace(self, micro_batch=mb, seq_len=seq)


def check_transformer_config(model: TransformerModel, cfg: TrainingConfig, seq: int, origin: str) -> None:
    """A transformer's split (heads, FFN and layers divide over tp and pp, experts over ep), its LoRA targets,
    and a sequence that splits over cp (``Family.check_config``)."""
    p = cfg.parallelism
    _check_transformer_split(model, p, origin)
    missing = [name for name in cfg.lora_targets if name not in model.linear_shapes()] if cfg.lora else []
    if missing:
        raise SpecError(origin, "lora_targets", cfg.lora_targets,
                        f"linears {model.name} has: {', '.join(model.linear_shapes())}")
    if p.cp > 1 and seq % (2 * p.cp):
        raise SpecError(origin, "seq_len", seq, f"a multiple of 2 x cp = {2 * p.cp} (each cp rank holds two "
                        "chunks of the sequence: the load-balanced causal split)")


def check_replicated_dense_config(model: Model, cfg: TrainingConfig, origin: str) -> None:
    """A recommendation model: its tables shard by rows over dp and its dense layers replicate, so no tp, pp or cp;
    no LoRA or zero1 (``Family.check_config``)."""
    p = cfg.parallelism
    if p.tp > 1 or p.pp > 1 or p.cp > 1:
        raise SpecError(origin, "parallelism", f"tp={p.tp}, pp={p.pp}" + (f", cp={p.cp}" if p.cp > 1 else ""),
                        f"tp=1 and pp=1{' (and cp=1)' if p.cp > 1 else ''} for {model.kind} models (tables shard by "
                        "rows/columns, MLPs replicate)")
    if cfg.lora_rank or p.sharding == "zero1":
        raise SpecError(origin, "lora_rank" if cfg.lora_rank else "parallelism.sharding",
                        cfg.lora_rank or p.sharding, f"{'0' if cfg.lora_rank else 'ddp or fsdp'} for "
                        f"{model.kind} models (LoRA and zero1 are modelled for transformers)")


def _check_offload(cfg: TrainingConfig, offloads: bool, origin: str) -> None:
    """CPU offload as DeepSpeed runs it: ZeRO-1/2/3 (zero1 or fsdp here; ZeRO-0 cannot offload), families that
    model it (``Family.offloads``: transformers), full training; parameter offload with ZeRO-3 only."""
    if cfg.offload not in OFFLOADS:
        raise SpecError(origin, "offload", cfg.offload, f"one of {', '.join(OFFLOADS)}")
    if not isinstance(cfg.offload_delayed_update, bool):
        raise SpecError(origin, "offload_delayed_update", cfg.offload_delayed_update, "True or False")
    if cfg.offload == "none":
        if cfg.offload_delayed_update:
            raise SpecError(origin, "offload_delayed_update", True, "False without CPU offload (offload 'none')")
        return
    sharding = cfg.parallelism.sharding
    if not offloads or cfg.lora:
        raise SpecError(origin, "offload", cfg.offload, "'none' for LoRA and for non-transformer models (CPU "
                        "offload is modelled for full training of transformers)")
    if sharding == "ddp" or (cfg.offload == "optimizer+params" and sharding != "fsdp"):
        raise SpecError(origin, "parallelism.sharding", sharding,
                        "fsdp (ZeRO-3) for parameter offload" if cfg.offload == "optimizer+params" else
                        "fsdp (ZeRO-3) or zero1 (ZeRO-1/2) with CPU offload (DeepSpeed offloads from ZeRO-1 up)")


def _check_transformer_split(model: TransformerModel, p: Parallelism, origin: str) -> None:
    if model.num_heads % p.tp:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor of num_heads={model.num_heads}")
    if model.num_kv_heads % p.tp and p.tp % model.num_kv_heads:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor or multiple of num_kv_heads={model.num_kv_heads}")
    if model.ffn_hidden_size % p.tp:
        raise SpecError(origin, "parallelism.tp", p.tp, f"a divisor of ffn_hidden_size={model.ffn_hidden_size}")
    if p.pp > model.num_layers:
        raise SpecError(origin, "parallelism.pp", p.pp, f"at most num_layers={model.num_layers}")
    if p.virtual_stages > 1 and p.pp == 1:
        raise SpecError(origin, "parallelism.virtual_stages", p.virtual_stages, "1 without pipeline parallelism (pp=1)")
    if p.pp * p.virtual_stages > model.num_layers:
        raise SpecError(origin, "parallelism.virtual_stages", p.virtual_stages,
                        f"at most num_layers / pp = {model.num_layers // p.pp} (one layer per model chunk)")
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

