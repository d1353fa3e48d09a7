"""Recommendation models: DLRM-DCNv2 and HSTU-style generative recommenders.

Both keep fp32 embedding tables row-sharded over the data-parallel GPUs (row-wise Adagrad fused into the tables'
backward) and replicate their dense layers (DDP, AdamW): data parallelism only, no LoRA, zero1 or CPU offload, and
no stack kernel tables: a named stack prices them as the fused-step bound, and their default stack is that bound
(``ideal``). The pooled embeddings go all-to-all over the dp GPUs; the dense gradients all-reduce. A micro-batch is
priced whole (``graph.recsys``).
"""

from __future__ import annotations

from workbench.config import TrainingConfig, check_replicated_dense_config
from workbench.errors import SpecError
from workbench.families import Family, register
from workbench.graph.execution import Execution
from workbench.graph.hstu_gr_kernels import hstu_gr_microbatch_ops
from workbench.graph.ops import Op
from workbench.graph.recsys import dlrm_job_embedding_ops, dlrm_microbatch_ops, hstu_microbatch_ops
from workbench.hardware import GPU
from workbench.memory import MemoryBreakdown, dlrm_memory, hstu_memory
from workbench.models import DLRMModel, HSTUModel
from workbench.stack_memory_hstu import hstu_gr_memory
from workbench.step_comm import embedding_traffic, replicated_dense_data_parallel


class _Recommender(Family):
    """What DLRM and HSTU share: row-sharded tables, replicated dense layers."""

    def default_micro_batch(self, model: DLRMModel | HSTUModel) -> int:
        return int(model.default_batch)

    def parallelisms(self, model: DLRMModel | HSTUModel) -> tuple[str, ...]:
        return ("dp",)

    def check_config(self, model: DLRMModel | HSTUModel, cfg: TrainingConfig, seq_len: int, origin: str) -> None:
        check_replicated_dense_config(model, cfg, origin)

    def optimizer_params(self, model: DLRMModel | HSTUModel, cfg: TrainingConfig) -> float:
        return model.dense_params  # tables update inside their backward kernel

    def data_parallel_collectives(self, model: DLRMModel | HSTUModel, cfg: TrainingConfig):
        return replicated_dense_data_parallel(model, cfg)

    default_stack = "ideal"
    """No shipped stack trains them (torchtitan, Megatron and DeepSpeed runs here are Llama trainers; TorchRec is
    not a stack yet): unnamed, a step is the fused-step bound, labelled as one, not a Llama trainer's name."""

    def searched_shardings(self, model: DLRMModel | HSTUModel, requested: tuple[str, ...]) -> tuple[str, ...]:
        return ("ddp",)  # dense layers replicate and tables row-shard whichever is asked: fsdp runs as ddp

    def standard_global_batch(self, model: DLRMModel | HSTUModel, seq_len: int) -> float:
        return float(model.default_batch)  # the catalog's (DLRM 65,536, MLPerf's; HSTU 64, a representative guess)


class DLRMFamily(_Recommender):
    name = "dlrm"
    model_type = DLRMModel
    max_micro_batch = 1 << 20

    def default_seq_len(self, model: DLRMModel) -> int:
        return 1  # one sample is one set of dense and sparse features

    def check_config(self, model: DLRMModel, cfg: TrainingConfig, seq_len: int, origin: str) -> None:
        super().check_config(model, cfg, seq_len, origin)
        if cfg.parallelism.ep > 1:
            raise SpecError(origin, "parallelism.ep", cfg.parallelism.ep, "1 (DLRM has no experts)")

    def microbatch_ops(self, model: DLRMModel, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
        return dlrm_microbatch_ops(model, cfg, execution)

    def step_ops(self, model: DLRMModel, cfg: TrainingConfig, execution: Execution) -> list[Op]:
        return dlrm_job_embedding_ops(model, cfg)[1]  # the job's sparse table update, once per step

    def tokens_per_sample(self, model: DLRMModel, cfg: TrainingConfig) -> int:
        return 1

    def memory_breakdown(self, model: DLRMModel, cfg: TrainingConfig, gpu: GPU,
                         compiled_loss: bool, traits=None) -> MemoryBreakdown:
        return dlrm_memory(model, cfg, gpu)  # no stack holds a DLRM differently (traits unused)

    def critical_traffic(self, model: DLRMModel, cfg: TrainingConfig, domain: int):
        # one pooled vector per table and sample
        return embedding_traffic(cfg.micro_batch * len(model.tables), model.embedding_dim, cfg, domain)

    def embedding_tables(self, model: DLRMModel) -> tuple[tuple[str, int, int], ...]:
        return tuple((f"table_{i}", t.rows, t.dim) for i, t in enumerate(model.tables))


class HSTUFamily(_Recommender):
    name = "hstu"
    model_type = HSTUModel
    max_micro_batch = 4096

    def default_seq_len(self, model: HSTUModel) -> int:
        return int(model.default_seq_len)

    own_kernels = ("generative-recommenders",)

    def microbatch_ops(self, model: HSTUModel, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
        return hstu_microbatch_ops(model, cfg)  # the reference job runs no HSTU: the fused step either way

    def stack_microbatch_ops(self, model: HSTUModel, cfg: TrainingConfig, execution: Execution | None,
                             kernels: str) -> list[Op]:
        """The ``generative-recommenders`` stack's kernels (``graph.hstu_gr_kernels``); other stacks: the fused step."""
        ops = hstu_microbatch_ops(model, cfg)
        return hstu_gr_microbatch_ops(model, cfg, ops) if kernels == "generative-recommenders" else ops

    def tokens_per_sample(self, model: HSTUModel, cfg: TrainingConfig) -> int:
        return cfg.seq_len

    def memory_breakdown(self, model: HSTUModel, cfg: TrainingConfig, gpu: GPU,
                         compiled_loss: bool, traits=None) -> MemoryBreakdown:
        """The ``generative-recommenders`` stack's step (``traits.kernels``): what upstream's STU layers save under
        their recompute flags (``workbench.stack_memory_hstu``); any other stack: the fused step's ``hstu_memory``."""
        if traits is not None and traits.kernels == "generative-recommenders":
            return hstu_gr_memory(model, cfg, gpu)
        return hstu_memory(model, cfg, gpu)

    def critical_traffic(self, model: HSTUModel, cfg: TrainingConfig, domain: int):
        # one item embedding per token
        return embedding_traffic(cfg.micro_batch * cfg.seq_len, model.embedding_dim, cfg, domain)

    def embedding_tables(self, model: HSTUModel) -> tuple[tuple[str, int, int], ...]:
        return (("items", model.item_table_rows, model.embedding_dim),)


register(DLRMFamily())
register(HSTUFamily())
