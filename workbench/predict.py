"""One training step on one GPU type: every op's predicted time, the exposed communication, the optimizer,
the pipeline bubble, and what they add up to (step time, tokens/s or samples/s, MFU, peak memory).

    >>> from workbench import predict
    >>> p = predict("llama3-8b", "h200", micro_batch=1, seq_len=8192)
    >>> p.summary.tokens_per_s, p.summary.mfu
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.config import Parallelism, TrainingConfig, activation_dtype
from workbench.graph.execution import Execution
from workbench.graph.ops import FlatShape, Op, memory_op
from workbench.graph.recsys import dlrm_job_embedding_ops, dlrm_microbatch_ops, hstu_microbatch_ops
from workbench.graph.transformer import model_flops_per_sample, transformer_microbatch_ops, transformer_step_ops
from workbench.hardware import GPU, get_gpu
from workbench.memory import MemoryBreakdown, memory_breakdown, max_micro_batch
from workbench.models import DLRMModel, Model, TransformerModel, get_model
from workbench.perf import op_time
from workbench.perf.comm import collective_time, group_link
from workbench.perf.efficiency import Constants, constants_for
from workbench.precision import ResolvedPrecision, get_precision, resolve_precision

if TYPE_CHECKING:
    import pandas as pd

MODEL_VERSION = "workbench-model 0.1"
"""Names the analytical model that made a prediction (recipes record it)."""


@dataclass(frozen=True)
class OpPrediction:
    """One op of the step with its predicted time per execution and in total."""

    op: Op
    time_s: float
    """One execution."""
    roofline_s: float
    bound: str
    executions: int
    """Executions per step: op.count x micro-batches."""

    @property
    def total_s(self) -> float:
        return self.time_s * self.executions


@dataclass(frozen=True)
class CommPrediction:
    name: str
    collective: str
    size_bytes: float
    group: int
    link: str
    time_s: float
    """All occurrences in one step."""
    exposed_s: float
    """What compute does not hide."""


@dataclass(frozen=True)
class StepSummary:
    step_time_s: float
    compute_bound_s: float
    memory_bound_s: float
    communication_s: float
    """Exposed communication."""
    optimizer_s: float
    bubble_s: float
    samples_per_s: float
    tokens_per_s: float
    mfu: float
    model_flops_per_step: float
    memory: MemoryBreakdown
    max_micro_batch: int
    gpus: int

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "memory"}
        out["memory_gb"] = self.memory.as_gb()
        out["fits"] = self.memory.fits
        return out


@dataclass(frozen=True)
class Prediction:
    model: Model
    gpu: GPU
    config: TrainingConfig
    precision: ResolvedPrecision
    ops: list[OpPrediction]
    comms: list[CommPrediction]
    summary: StepSummary
    calibrated: bool
    notes: list[str] = field(default_factory=list)
    model_version: str = MODEL_VERSION

    def ops_frame(self) -> pd.DataFrame:
        """One row per op: name, kind, phase, shape, FLOPs, bytes, intensity, bound, predicted time and share."""
        import pandas as pd

        step = self.summary.step_time_s
        rows = [{
            "name": p.op.name, "kind": p.op.kind, "phase": p.op.phase, "layer": p.op.layer,
            "shape": p.op.describe_shape(), "dtype": p.op.dtype, "count": p.executions,
            "flops": p.op.flops, "bytes": p.op.bytes, "arithmetic_intensity": p.op.arithmetic_intensity,
            "bound": p.bound, "roofline_ms": p.roofline_s * 1e3, "time_ms": p.time_s * 1e3,
            "total_ms": p.total_s * 1e3, "achieved_tflops": p.op.flops / p.time_s / 1e12,
            "share": p.total_s / step,
        } for p in self.ops]
        rows += [{
            "name": c.name, "kind": c.collective, "phase": "comm", "layer": "communication",
            "shape": f"{c.size_bytes / 1e6:.1f} MB x{c.group} ({c.link})", "dtype": "", "count": 1,
            "flops": 0.0, "bytes": c.size_bytes, "arithmetic_intensity": 0.0, "bound": "communication",
            "roofline_ms": float("nan"), "time_ms": c.time_s * 1e3, "total_ms": c.exposed_s * 1e3,
            "achieved_tflops": 0.0, "share": c.exposed_s / step,
        } for c in self.comms]
        return pd.DataFrame(rows)


def _microbatch_ops(model: Model, cfg: TrainingConfig, execution: Execution | None = None) -> list[Op]:
    if isinstance(model, TransformerModel):
        return transformer_microbatch_ops(model, cfg, execution)
    if isinstance(model, DLRMModel):
        return dlrm_microbatch_ops(model, cfg, execution)
    return hstu_microbatch_ops(model, cfg)


def _step_ops(model: Model, cfg: TrainingConfig, execution: Execution | None) -> list[Op]:
    """Ops that run once per step (the reference job's FSDP2 copies, its sparse table update)."""
    if execution is None:
        return []
    if isinstance(model, TransformerModel):
        return transformer_step_ops(model, cfg, execution)
    if isinstance(model, DLRMModel):
        return dlrm_job_embedding_ops(model, cfg)[1]
    return []


def _optimizer_op(model: Model, cfg: TrainingConfig) -> Op:
    """AdamW over the local dense parameters: read p, g, m, v (fp32), write p, m, v and the bf16 copy."""
    p = cfg.parallelism
    if isinstance(model, TransformerModel):
        params = model.params_per_gpu(p.tp, p.pp, p.dp, p.ep, sharded=p.sharding == "fsdp")
    else:
        params = model.dense_params  # tables update inside their backward kernel
    return memory_op("optimizer.adamw", "optimizer", FlatShape(max(1, int(params))), "fp32", reads=4, writes=3.5,
                     phase="optimizer", layer="optimizer")


def _communication(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, step_compute: float) -> list[CommPrediction]:
    """Collectives of one step. Data-parallel traffic (FSDP gathers, gradient reductions) shares one window of
    compute to hide behind, so it is hidden jointly: exposed = max(0, sum - comm_overlap x step compute), split
    in proportion. Tensor-, expert- and pipeline-parallel traffic sits on the critical path and stays exposed."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    domain = gpu.scale_up_domain_gpus.value
    act_bytes = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    dp_spans = p.dp * p.tp > domain
    hidden: list[tuple[str, str, float, int, str, float]] = []
    exposed: list[CommPrediction] = []

    def add(name, kind, size, group, spans, times, overlappable):
        if group <= 1:
            return
        link = group_link(gpu, c, spans)
        total = collective_time(kind, size, group, link) * times
        if overlappable:
            hidden.append((name, kind, size, group, link.name, total))
        else:
            exposed.append(CommPrediction(name, kind, size, group, link.name, total, total))

    if isinstance(model, TransformerModel):
        tokens = cfg.micro_batch * cfg.seq_len
        layers = math.ceil(model.num_layers / p.pp)
        # dense weights are gathered / reduced over the whole dp group; each rank's ep-th share of the experts
        # only over the dp / ep ranks that hold the same experts
        experts = layers * model.expert_params_per_layer() / p.tp
        dense = model.params_per_gpu(p.tp, p.pp, 1, 1, sharded=False) - experts
        expert_group = p.dp // p.ep
        if p.sharding == "fsdp":
            add("fsdp.all_gather_params", "all_gather", dense * act_bytes, p.dp, dp_spans, 2 * accum, True)
            add("fsdp.reduce_scatter_grads", "reduce_scatter", dense * 4, p.dp, dp_spans, 1, True)
            add("fsdp.all_gather_experts", "all_gather", experts / p.ep * act_bytes, expert_group, dp_spans,
                2 * accum, True)
            add("fsdp.reduce_scatter_expert_grads", "reduce_scatter", experts / p.ep * 4, expert_group, dp_spans, 1, True)
        else:
            add("ddp.all_reduce_grads", "all_reduce", dense * 4, p.dp, dp_spans, 1, True)
            add("ddp.all_reduce_expert_grads", "all_reduce", experts / p.ep * 4, expert_group, dp_spans, 1, True)
        recompute_tp = 2 if cfg.activation_checkpointing == "full" else 0
        add("tp.all_reduce_activations", "all_reduce", tokens * model.hidden_size * act_bytes, p.tp, p.tp > domain,
            (4 + recompute_tp) * layers * accum, False)
        if model.is_moe:
            routed = tokens * model.experts_per_token * model.hidden_size * act_bytes
            add("ep.all_to_all_tokens", "all_to_all", routed, p.ep, p.ep * p.tp > domain, 4 * layers * accum, False)
        add("pp.send_recv_activations", "send_recv", tokens * model.hidden_size * act_bytes / p.tp, p.pp,
            p.gpus > domain, 2 * accum, False)
    else:
        if isinstance(model, DLRMModel):
            pooled = cfg.micro_batch * len(model.tables) * model.embedding_dim * act_bytes
        else:
            pooled = cfg.micro_batch * cfg.seq_len * model.embedding_dim * act_bytes
        add("embedding.all_to_all", "all_to_all", pooled, p.dp, p.dp > domain, 2 * accum, False)
        add("ddp.all_reduce_dense_grads", "all_reduce", model.dense_params * 4, p.dp, p.dp > domain, 1, True)

    total_hidden = sum(item[-1] for item in hidden)
    left = max(0.0, total_hidden - c["comm_overlap"] * step_compute)
    shared = [CommPrediction(*item, exposed_s=left * item[-1] / total_hidden) for item in hidden]
    return shared + exposed


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
) -> Prediction:
    """Predict one training step. Pass a ``TrainingConfig``, or the keyword shortcuts (``gpus`` become FSDP ranks).

    ``allow_fallback`` lets a precision the GPU lacks run as its documented fallback (noted in ``notes``).
    ``execution``: predict what the reference job (``python -m workbench.train``) runs -- eager blocks unfused
    when not compiled, its loss, FSDP2 copies, fp8 quantization and sparse table update
    (``workbench.graph.execution``); None prices the fused step a compiled production stack runs.
    """
    model = get_model(model)
    gpu = get_gpu(gpu)
    if config is None:
        default_mb = getattr(model, "default_batch", 1) if not isinstance(model, TransformerModel) else 1
        config = TrainingConfig(
            micro_batch=default_mb if micro_batch is None else micro_batch,
            seq_len=seq_len,
            precision=precision,
            parallelism=Parallelism.data_parallel(gpus),
            activation_checkpointing=activation_checkpointing,
            global_batch=global_batch,
        )
    resolved = resolve_precision(gpu, config.precision, allow_fallback=allow_fallback)
    notes = [resolved.note] if resolved.note else []
    cfg = TrainingConfig(config.micro_batch, config.seq_len, resolved.effective.name, config.parallelism,
                         config.activation_checkpointing, config.global_batch).resolved(model)
    c = constants or constants_for(gpu, calibrated)
    if gpu.is_uncertain:
        notes.append(f"{gpu.display_name} is announced, not shipping: several of its figures are estimates")

    accum = cfg.grad_accumulation
    ops: list[OpPrediction] = []
    for op in _microbatch_ops(model, cfg, execution):
        t = op_time(op, gpu, c)
        ops.append(OpPrediction(op, t.time_s, t.roofline_s, t.bound, op.count * accum))
    mb_compute = sum(o.time_s * o.op.count for o in ops)
    for op in _step_ops(model, cfg, execution):  # once per step, counts already per step
        t = op_time(op, gpu, c)
        ops.append(OpPrediction(op, t.time_s, t.roofline_s, t.bound, op.count))
    optimizer = _optimizer_op(model, cfg)
    t = op_time(optimizer, gpu, c)
    ops.append(OpPrediction(optimizer, t.time_s, t.roofline_s, "memory", 1))

    comms = _communication(model, cfg, gpu, c, accum * mb_compute)

    p = cfg.parallelism
    optimizer_s = sum(o.total_s for o in ops if o.op.phase == "optimizer")
    compute_bound_s = sum(o.total_s for o in ops if o.bound == "compute" and o.op.phase != "optimizer")
    memory_bound_s = sum(o.total_s for o in ops if o.bound != "compute" and o.op.phase != "optimizer")
    bubble_s = (p.pp - 1) * mb_compute if p.pp > 1 else 0.0
    comm_s = sum(cm.exposed_s for cm in comms)
    step = compute_bound_s + memory_bound_s + optimizer_s + bubble_s + comm_s

    samples = cfg.samples_per_step
    if isinstance(model, TransformerModel):
        model_flops = model_flops_per_sample(model, cfg.seq_len) * samples
        tokens = samples * cfg.seq_len
    else:
        useful = sum(o.op.flops * o.executions for o in ops if not o.op.name.startswith("recompute."))
        model_flops = useful * p.gpus
        tokens = samples * (cfg.seq_len if model.kind == "hstu" else 1)
    peak = gpu.peak_tflops(resolved.effective.peak_key) * 1e12
    memory = memory_breakdown(model, cfg, gpu)
    if not memory.fits:
        notes.append(f"does not fit: needs {memory.total / 1e9:.1f} GB of {memory.usable / 1e9:.1f} GB usable HBM per GPU")
    summary = StepSummary(
        step_time_s=step,
        compute_bound_s=compute_bound_s,
        memory_bound_s=memory_bound_s,
        communication_s=comm_s,
        optimizer_s=optimizer_s,
        bubble_s=bubble_s,
        samples_per_s=samples / step,
        tokens_per_s=tokens / step,
        mfu=model_flops / (step * p.gpus * peak),
        model_flops_per_step=model_flops,
        memory=memory,
        max_micro_batch=max_micro_batch(model, cfg, gpu),
        gpus=p.gpus,
    )
    return Prediction(model, gpu, cfg, resolved, ops, comms, summary, calibrated=c.calibrated, notes=notes)
