"""Recommendation models: DLRM-DCNv2 and HSTU-style generative recommenders.

Both keep fp32 embedding tables row-sharded over the data-parallel GPUs (row-wise Adagrad fused into the tables'
backward) and replicate their dense layers (DDP, AdamW): data parallelism only, no LoRA, zero1 or CPU offload, and
no stack kernel tables but their own: a named stack prices them as the fused-step bound, and their default stack is
that bound (``ideal``). The pooled embeddings go all-to-all over the dp GPUs; the dense gradients all-reduce. A
micro-batch is priced whole (``graph.recsys``).

DLRM under the ``hugectr`` stack (NVIDIA's MLPerf DLRM-DCNv2, ``specs/stacks/hugectr.yaml``): the dense layers' bias
and ReLU run in the GEMMs' cuBLASLt epilogues, the tables train with element-wise Adagrad, and the stack's
``embedding_placement`` replicates the small tables (``EmbeddingPlacement``): only the model-parallel shards' pooled
vectors cross the all-to-all, and the replicated tables' gradients all-reduce with the dense ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config import TrainingConfig, check_replicated_dense_config
from workbench.errors import SpecError
from workbench.families import Family, register
from workbench.graph.execution import Execution
from workbench.graph.hstu_gr_kernels import hstu_gr_microbatch_ops
from workbench.graph.ops import Op, memory_op
from workbench.graph.recsys import dlrm_job_embedding_ops, dlrm_microbatch_ops, hstu_microbatch_ops
from workbench.hardware import GPU
from workbench.memory import MemoryBreakdown, dlrm_memory, hstu_memory
from workbench.models import DLRMModel, EmbeddingTable, HSTUModel
from workbench.perf.overlap import ScheduledCollective
from workbench.schema import Fields
from workbench.stack_memory_hstu import hstu_gr_memory
from workbench.step_comm import embedding_traffic, replicated_dense_data_parallel

HUGECTR_KERNELS = "hugectr"
"""The kernel table of NVIDIA's MLPerf DLRM-DCNv2 (``Stack.kernels``; DLRM models only, ``DLRMFamily``)."""
EPILOGUE_FUSED = ("relu",)
"""Ops HugeCTR's MLP layer runs inside its GEMMs: cuBLASLt epilogues RELU_AUX_BIAS forward (bias + ReLU, a 1-bit
mask saved) and DRELU_BGRAD backward (dReLU + bias gradient) (NVIDIA-Merlin/HugeCTR 79b6bef
HugeCTR/src/layers/functors/fused_gemm_functors.cu, CublasDesc::set_fprop_attr / set_bprop_attr)."""
ADAGRAD_STATES = 2
"""fp32 arrays an Adagrad table row lives in, weight and accumulator, both read and written by the update (HugeCTR's
element-wise Adagrad: the MLPerf planner counts 8 B per element for it, training_results_v5.0 NVIDIA
dlrm_dcnv2/implementations/hugectr/sharding/__init__.py ``byte_per_elem = 8``); the fused step's row-wise Adagrad
moves the weight alone."""


@dataclass(frozen=True)
class EmbeddingPlacement:
    """How a stack places a DLRM's tables over the data-parallel GPUs (``embedding_placement`` in its YAML).

    A table whose weights and optimizer state (rows x dim x ``table_bytes_per_element``) are smaller than
    ``data_parallel_below_gib`` is replicated: each GPU looks up its own samples in it and its gradient all-reduces.
    The others are model parallel: a GPU looks up the whole global batch in the shards it holds and sends one
    pooled vector per shard and sample through the all-to-all. With ``split_hot_tables``, a model-parallel table
    with more lookups per sample than one GPU's balanced share (all model-parallel lookups / GPUs) is row-split over
    the fewest power-of-two GPUs that bring each shard under that share: the outcome of NVIDIA's MLPerf planner
    (sharding/planner.py) for this model on 8 GPUs at MEM_COMM_BW_RATIO 9 to 12 (21 shards), re-run for that check,
    not its search."""

    data_parallel_below_gib: float
    table_bytes_per_element: float
    split_hot_tables: bool
    source: str

    def data_parallel(self, table: EmbeddingTable) -> bool:
        return table.rows * table.dim * self.table_bytes_per_element < self.data_parallel_below_gib * 1e9

    def model_parallel_shards(self, model: DLRMModel, gpus: int) -> int:
        """Shards of the model-parallel tables over ``gpus``: the pooled vectors per sample in the all-to-all."""
        sharded = [t for t in model.tables if not self.data_parallel(t)]
        share = sum(t.pooling for t in sharded) / max(1, gpus)
        shards = 0
        for table in sharded:
            split = 1
            while self.split_hot_tables and table.pooling / split > share and split * 2 <= gpus:
                split *= 2
            shards += split
        return shards

    def replicated_rows(self, model: DLRMModel) -> int:
        return sum(t.rows for t in model.tables if self.data_parallel(t))


def embedding_placement_from(entry: Fields) -> EmbeddingPlacement:
    """A stack's ``embedding_placement`` mapping, validated (its keys named in the error)."""
    placement = EmbeddingPlacement(
        data_parallel_below_gib=entry.number("data_parallel_below_gib", minimum=0),
        table_bytes_per_element=entry.number("table_bytes_per_element", above=0),
        split_hot_tables=entry.boolean("split_hot_tables"),
        source=entry.string("source"))
    entry.finish()
    return placement


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

    own_kernels = (HUGECTR_KERNELS,)

    def stack_microbatch_ops(self, model: DLRMModel, cfg: TrainingConfig, execution: Execution | None,
                             kernels: str) -> list[Op]:
        """The ``hugectr`` kernel table: the fused step without the ReLU kernels (``EPILOGUE_FUSED``) and with the
        tables' update moving the Adagrad accumulator beside the weight (``ADAGRAD_STATES``); other stacks: the
        fused step."""
        ops = dlrm_microbatch_ops(model, cfg, execution)
        if kernels != HUGECTR_KERNELS:
            return ops
        return [_adagrad_update(op) if op.name == "embedding_bags.bwd_update" else op
                for op in ops if op.kind not in EPILOGUE_FUSED]

    def stack_critical_traffic(self, model: DLRMModel, cfg: TrainingConfig, domain: int, stack):
        """The all-to-all of a stack with an ``embedding_placement``: one pooled vector per model-parallel shard
        and sample (``EmbeddingPlacement.model_parallel_shards``); otherwise one per table."""
        placement = stack.embedding_placement
        if placement is None:
            return self.critical_traffic(model, cfg, domain)
        shards = placement.model_parallel_shards(model, cfg.parallelism.dp)
        return embedding_traffic(cfg.micro_batch * shards, model.embedding_dim, cfg, domain)

    def stack_data_parallel_collectives(self, model: DLRMModel, cfg: TrainingConfig, stack):
        """The dense all-reduce, plus, under an ``embedding_placement``, the replicated tables' fp32 gradients
        (HugeCTR groups them with the dense ones: ``grouped_all_reduce=True`` in the MLPerf train.py; their
        dtype is a guess, calibrate me) beside backward."""
        schedules = self.data_parallel_collectives(model, cfg)
        placement = stack.embedding_placement
        rows = placement.replicated_rows(model) if placement is not None else 0
        if rows:
            grads = ScheduledCollective("embedding.data_parallel_tables.all_reduce", "all_reduce",
                                        rows * model.embedding_dim * 4, 1, "hidden")
            schedules = [([grads], cfg.parallelism.dp), *schedules]
        return schedules

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


def _adagrad_update(op: Op) -> Op:
    """The fused step's table update (one weight read and written per looked-up row element) with HugeCTR's
    element-wise Adagrad: weight and accumulator both, the pooled gradient as before."""
    pooled = op.bytes_read / (op.bytes_written or 1.0) - 1.0  # the pooled gradient's share of the reads
    return memory_op(op.name, op.kind, op.shape, op.dtype, reads=ADAGRAD_STATES + pooled, writes=ADAGRAD_STATES,
                     phase=op.phase, layer=op.layer)


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
