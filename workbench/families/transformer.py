"""Decoder-only transformers (Llama, GPT, Mixtral, Qwen3, DeepSeek-V3, GPT-OSS, Llama 4): dense or
mixture-of-experts (``num_experts > 1``).

Every parallelism applies (tp, pp, cp, interleaved stages; ep when the model has experts), every sharding (ddp,
fsdp, zero1), LoRA (on models whose blocks are all alike, without latent attention or shared experts) and CPU
offload; the stacks' own kernel tables price its dense Llama-style blocks. A micro-batch is the embedding, each kind
of block repeated over its copies on the stage (``TransformerModel.stage_blocks``: a dense first layer, an MoE
layer, a sliding-window layer...) and the head: the step model prices each kind once.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.config import SHARDINGS, TrainingConfig, check_transformer_config
from workbench.errors import SpecError
from workbench.families import PARALLELISMS, Family, register
from workbench.graph import stacked
from workbench.graph import transformer as graph
from workbench.graph.execution import Execution
from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.memory import transformer_memory
from workbench.models import BlockKind, TransformerModel, _check_transformer
from workbench.step_comm import transformer_data_parallel, transformer_traffic

_DENSE_PARALLELISMS = tuple(d for d in PARALLELISMS if d != "ep")
_NO_LORA = ("multi-head latent attention", "shared experts", "dense and MoE layers")
"""Block features LoRA is not modelled on (``TransformerModel.non_llama_features``): its adapters are counted per
q/k/v/o and per expert of one uniform block."""


class TransformerFamily(Family):
    name = "transformer"
    model_type = TransformerModel
    shardings = SHARDINGS
    trains_lora = True
    offloads = True
    repeats_blocks = True
    padding_fields = {"vocab_size": "LM-head GEMM n and embedding rows; mask the padded logits",
                      "ffn_hidden_size": "FFN GEMM n/k; zero-initialised padding stays zero under training"}

    def default_micro_batch(self, model: TransformerModel) -> int:
        return 1

    def default_seq_len(self, model: TransformerModel) -> int:
        return int(model.default_seq_len)

    def parallelisms(self, model: TransformerModel) -> tuple[str, ...]:
        return PARALLELISMS if model.is_moe else _DENSE_PARALLELISMS

    def check_config(self, model: TransformerModel, cfg: TrainingConfig, seq_len: int, origin: str) -> None:
        check_transformer_config(model, cfg, seq_len, origin)
        tp = cfg.parallelism.tp
        widths = {"dense_ffn_hidden_size": model.dense_ffn_size,
                  "shared_expert_ffn_size": model.shared_experts * model.shared_expert_size}
        for key, width in widths.items():
            if width % tp:
                raise SpecError(origin, "parallelism.tp", tp, f"a divisor of {key}={width}")
        unmodelled = [f for f in model.non_llama_features() if f in _NO_LORA]
        if cfg.lora and unmodelled:
            raise SpecError(origin, "lora_rank", cfg.lora_rank, f"0 for {model.name}: LoRA is modelled on blocks "
                            f"without {' or '.join(_NO_LORA)} (it has {', '.join(unmodelled)})")

    def check_model(self, model: TransformerModel, origin: str) -> None:
        _check_transformer(model, origin)

    def microbatch_ops(self, model: TransformerModel, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
        """``graph.transformer.transformer_microbatch_ops``' ops, built as the step model prices them: one block's
        ops, their counts x the stage's layers."""
        blocks = [(graph.block_pieces(model, cfg, execution, kind), n) for kind, n in self.stage_blocks(model, cfg)]
        return [op if op.count == n else dataclasses.replace(op, count=n) for op, n in graph.stage_counts(blocks)]

    def step_ops(self, model: TransformerModel, cfg: TrainingConfig, execution: Execution) -> list[Op]:
        return graph.transformer_step_ops(model, cfg, execution)

    def block_graph(self, model: TransformerModel, cfg: TrainingConfig, execution: Execution | None,
                    kind: BlockKind | None = None) -> tuple:
        return graph.block_graph(model, cfg, execution, kind)

    def stage_layers(self, model: TransformerModel, cfg: TrainingConfig) -> int:
        return math.ceil(model.num_layers / cfg.parallelism.pp)

    def stage_blocks(self, model: TransformerModel, cfg: TrainingConfig) -> tuple[tuple[BlockKind, int], ...]:
        return model.stage_blocks(cfg.parallelism.pp)

    def optimizer_params(self, model: TransformerModel, cfg: TrainingConfig) -> float:
        """The rank's dense and expert weights (its shard under fsdp / zero1); under LoRA only the adapters train
        (zero1: this rank's shard of them)."""
        p = cfg.parallelism
        if cfg.lora:
            return (math.ceil(model.num_layers / p.pp) * model.lora_params_per_layer(cfg.lora_rank, cfg.lora_targets)
                    / p.tp / (p.weight_replicas if p.sharding == "zero1" else 1))
        return model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=p.shards_optimizer)

    def tokens_per_sample(self, model: TransformerModel, cfg: TrainingConfig) -> int:
        return cfg.seq_len

    def model_flops_per_sample(self, model: TransformerModel, seq_len: int, lora: bool) -> float:
        return graph.model_flops_per_sample(model, seq_len, lora=lora)

    def memory_breakdown(self, model: TransformerModel, cfg: TrainingConfig, gpu: GPU, compiled_loss: bool,
                         traits=None):
        return transformer_memory(model, cfg, gpu, compiled_loss, traits)

    def data_parallel_collectives(self, model: TransformerModel, cfg: TrainingConfig):
        return transformer_data_parallel(model, cfg)

    def critical_traffic(self, model: TransformerModel, cfg: TrainingConfig, domain: int):
        return transformer_traffic(model, cfg, domain)

    def stack_table_gap(self, model: TransformerModel, cfg: TrainingConfig, kernels: str) -> str | None:
        return stacked.transformer_scope_gap(model, cfg, kernels)

    # -- what the recipe search varies
    checkpoints_activations = True
    standard_tokens_per_step: int = 1 << 22
    """4M tokens per optimizer step: the global batch Llama 2 trained every size at (Touvron et al. 2023, Llama 2,
    section 2.2) and Llama 3 405B started at (Dubey et al. 2024, The Llama 3 Herd of Models, section 3.4.1); the
    catalog's transformers have no batch of their own, so it is their standard (``standard_global_batch``)."""

    def standard_global_batch(self, model: TransformerModel, seq_len: int) -> float:
        return self.standard_tokens_per_step / seq_len


register(TransformerFamily())
