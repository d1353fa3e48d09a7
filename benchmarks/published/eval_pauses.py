"""A logged throughput whose interval counts the run's evaluation pauses: what a framework logs as samples/s when
its clock runs from the start of training to its end, forward-only evaluations included.

NVIDIA's MLPerf DLRM-DCNv2 on HugeCTR is one (mlcommons/training_results_v4.1 and v5.0,
NVIDIA/benchmarks/dlrm_dcnv2/implementations/*hugectr/mlperf_logger/callbacks.py): ``LoggingCallback`` starts
``perf_counter()`` in ``on_training_start`` (beside run_start) and, in ``on_training_end``, logs tracked_stats
``throughput = (current_iter + 1) * batch_size / (perf_counter() - start)`` once per run; the run stops at the
evaluation that reaches the target AUC, so the interval is whole blocks of ``eval_interval`` training steps and one
evaluation each. train.py sets ``eval_interval = floor(0.05 * TRAIN_NUM_SAMPLES / batchsize)`` and
``max_eval_batches = ceil(EVAL_NUM_SAMPLES / batchsize_eval)``.

The reading is framework-wide data (``rows.yaml``, a framework's ``eval_pauses``: the script's constants), never a
per-row factor; each row gives its run's evaluation batch (``eval_batch``, the config's BATCHSIZE_EVAL) as it gives
its training batch. The evaluation is priced by the model itself, as the forward of a step at that batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from workbench.config import TrainingConfig
from workbench.errors import SpecError

KEYS = {"every_epoch", "train_samples", "eval_samples", "source"}


@dataclass(frozen=True)
class EvalPauses:
    """A forward-only evaluation of ``eval_samples`` after every ``every_epoch`` of an epoch of ``train_samples``,
    inside the interval the logged throughput divides by."""

    every_epoch: float
    train_samples: int
    eval_samples: int
    source: str

    @classmethod
    def from_mapping(cls, spec: object, where: str) -> EvalPauses:
        if not isinstance(spec, dict) or set(spec) != KEYS:
            raise SpecError("rows.yaml", where, spec, f"a mapping with exactly {', '.join(sorted(KEYS))}")
        pauses = cls(float(spec["every_epoch"]), int(spec["train_samples"]), int(spec["eval_samples"]),
                     str(spec["source"]))
        if not (0 < pauses.every_epoch <= 1 and min(pauses.train_samples, pauses.eval_samples) > 0):
            raise SpecError("rows.yaml", where, spec, "every_epoch in (0, 1] and positive sample counts")
        return pauses

    def interval_steps(self, global_batch: int) -> int:
        """Training steps between two evaluations (train.py: ``floor(0.05 * iter_per_epoch)``)."""
        return math.floor(self.every_epoch * self.train_samples / global_batch)

    def eval_batches(self, eval_batch: int) -> int:
        """Batches one evaluation runs (train.py: ``max_eval_batches = ceil(EVAL_NUM_SAMPLES / batchsize_eval)``)."""
        return math.ceil(self.eval_samples / eval_batch)


def eval_config(cfg: TrainingConfig, eval_batch: int) -> TrainingConfig:
    """The training configuration at the evaluation batch (all GPUs; split over the same data-parallel ranks)."""
    return dataclasses.replace(cfg, micro_batch=eval_batch // cfg.parallelism.dp, global_batch=eval_batch)


def forward_s(prediction) -> float:
    """The forward of a predicted step: its forward ops, and half of its critical-path collectives (each runs once
    forward and once backward: ``workbench.step_comm.embedding_traffic`` counts the all-to-all twice a step)."""
    ops = sum(p.total_s for p in prediction.ops if p.op.phase == "fwd")
    critical = sum(c.exposed_s for c in prediction.comms if c.position == "critical")
    return ops + critical / 2


def logged_samples_per_s(pauses: EvalPauses, step_time_s: float, global_batch: int, eval_batch: int,
                         eval_prediction) -> float:
    """Samples per second over whole blocks of training steps and the evaluation that ends each:
    ``steps x global_batch / (steps x step_time + eval_batches x forward(eval batch))``; ``eval_prediction`` is the
    step predicted at ``eval_config(cfg, eval_batch)``."""
    steps = pauses.interval_steps(global_batch)
    eval_s = pauses.eval_batches(eval_batch) * forward_s(eval_prediction)
    return steps * global_batch / (steps * step_time_s + eval_s)
