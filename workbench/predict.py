"""One training step on one GPU type: every op's predicted time, the exposed communication, the optimizer,
the pipeline bubble, and what they add up to (step time, tokens/s or samples/s, MFU, peak memory).

    >>> from workbench import predict
    >>> p = predict("llama3-8b", "h200", micro_batch=1, seq_len=8192)
    >>> p.summary.tokens_per_s, p.summary.mfu
    >>> p.summary.stack, p.summary.priced_as_bound   # the default stack, priced from its own kernel tables
    ('torchtitan', False)
    >>> predict("llama3-8b", "h200", stack="ideal").summary.priced_as_bound   # the fused-step bound
    True

``predict`` is one call of the step-model pipeline, ``workbench.step.StepModel`` (op graph, one memoized timer,
collectives and overlap, summary); recipe search asks the same pipeline for many configurations.
"""

from __future__ import annotations

from workbench.config import Parallelism, TrainingConfig
from workbench.graph.execution import Execution
from workbench.hardware import GPU, get_gpu
from workbench.models import Model, get_model
from workbench.perf.efficiency import Constants
from workbench.stacks import Stack, get_stack, resolve_stack
from workbench.step import StepModel
from workbench.step_comm import CommPrediction, DataParallelPlan, data_parallel_plan
from workbench.step_result import (
    MFU_CEILING,
    MODEL_VERSION,
    PLAUSIBLE_MFU,
    PLAUSIBLE_STEP_S,
    ImplausiblePredictionError,
    OpPrediction,
    Prediction,
    StepSummary,
)

__all__ = ["MFU_CEILING", "MODEL_VERSION", "PLAUSIBLE_MFU", "PLAUSIBLE_STEP_S", "CommPrediction", "DataParallelPlan",
           "ImplausiblePredictionError", "OpPrediction", "Prediction", "StepSummary", "data_parallel_plan",
           "predict"]


def predict(
    model: str | Model,
    gpu: str | GPU,
    config: TrainingConfig | None = None,
    *,
    micro_batch: int | None = None,
    seq_len: int = 0,
    precision: str = "bf16",
    gpus: int = 1,
    activation_checkpointing: str = "none",
    global_batch: int = 0,
    calibrated: bool = False,
    allow_fallback: bool = False,
    constants: Constants | None = None,
    execution: Execution | None = None,
    stack: str | Stack | None = None,
    compile: bool | None = None,
    param_dtype: str | None = None,
) -> Prediction:
    """Predict one training step. Pass a ``TrainingConfig``, or the keyword shortcuts (``gpus`` become FSDP ranks);
    ``micro_batch`` and ``seq_len`` None or 0 are the model's defaults (``workbench.config.default_micro_batch``).
    A result that is not a finite, positive number (a GPU or model figure far out of range) raises
    ``ImplausiblePredictionError`` rather than being returned.

    ``allow_fallback`` lets a precision the GPU lacks run as its documented fallback (noted in ``notes``).
    ``execution``: predict what the reference job (``python -m workbench.train``) runs -- eager blocks unfused
    when not compiled, its loss, FSDP2 copies, fp8 quantization and sparse table update
    (``workbench.graph.execution``; implies the ``workbench-job`` stack).
    ``stack``: the training stack that runs the step (``workbench.stacks``: ``workbench stacks`` lists them; None:
    the model family's default, ``torchtitan`` for transformers and the ``ideal`` fused-step bound for DLRM and
    HSTU, ``workbench.stacks.default_stack``; what a stack's kernel tables do not price is the bound, and
    ``summary.priced_as_bound`` and ``notes`` say so); ``compile`` the configuration's compile flag for stacks that
    follow it (None: off, torch's default; the reference job's recipes say); ``param_dtype`` fp32 (fp32 parameters
    under autocast) or bf16, where the stack trains with either (None: the stack's default).
    """
    model = get_model(model)
    stack = get_stack("workbench-job") if execution is not None and stack is None else resolve_stack(stack, model)
    gpu = get_gpu(gpu)
    if config is None:
        config = TrainingConfig(
            micro_batch=micro_batch or 0,  # None or 0: the model's default (workbench.config.default_micro_batch)
            seq_len=seq_len,
            precision=precision,
            parallelism=Parallelism.data_parallel(gpus),
            activation_checkpointing=activation_checkpointing,
            global_batch=global_batch,
        )
    step = StepModel(model, gpu, stack=stack, calibrated=calibrated, constants=constants, execution=execution)
    return step.prediction(config, compile=compile, param_dtype=param_dtype, allow_fallback=allow_fallback)
