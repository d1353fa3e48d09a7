"""One training step on one GPU type: every op's predicted time, the exposed communication, the optimizer,
the pipeline bubble, and what they add up to (step time, tokens/s or samples/s, MFU, peak memory).

    >>> from workbench import predict
    >>> p = predict("llama3-8b", "h200", micro_batch=1, seq_len=8192)
    >>> p.summary.tokens_per_s, p.summary.mfu
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.config import Parallelism, TrainingConfig, activation_dtype
from workbench.errors import WorkbenchError
from workbench.graph import stacked
from workbench.graph.execution import Execution
from workbench.graph.ops import FlatShape, Op, memory_op
from workbench.graph.recsys import (
    dlrm_job_embedding_ops,
    dlrm_microbatch_ops,
    hstu_microbatch_ops,
)
from workbench.graph.transformer import (
    local_tokens,
    model_flops_per_sample,
    transformer_microbatch_ops,
    transformer_step_ops,
)
from workbench.hardware import GPU, get_gpu
from workbench.memory import MemoryBreakdown, max_micro_batch, memory_breakdown
from workbench.models import DLRMModel, Model, TransformerModel, get_model
from workbench.perf import op_time
from workbench.perf.comm import collective_time, group_link
from workbench.perf.efficiency import Constants, constants_for
from workbench.perf.overlap import (
    ScheduledCollective,
    ddp_last_bucket_bytes,
    ddp_schedule,
    megatron_bucket_params,
    ring_exchange_exposed_s,
    zero1_schedule,
    exposed_seconds,
    fsdp_schedule,
)
from workbench.precision import ResolvedPrecision, get_precision, resolve_precision
from workbench.stacks import Stack, get_stack

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
    position: str = "hidden"
    """Where it sits in the step: hidden (issued while compute runs, hidden jointly with the other such traffic),
    forward_start / backward_end (an edge of the data-parallel schedule: ``workbench.perf.overlap``) or critical
    (tensor-, expert-, pipeline-parallel traffic on the critical path, all exposed)."""


@dataclass(frozen=True)
class StepSummary:
    step_time_s: float
    compute_bound_s: float
    memory_bound_s: float
    communication_s: float
    """Exposed communication: what compute does not hide (a part of ``step_time_s``)."""
    communication_total_s: float
    """All collectives of the step, hidden and exposed (``communication_s`` is the exposed part)."""
    optimizer_s: float
    bubble_s: float
    samples_per_s: float
    tokens_per_s: float
    mfu: float
    model_flops_per_step: float
    memory: MemoryBreakdown
    max_micro_batch: int
    gpus: int
    host_s: float = 0.0
    """CPU seconds to launch the step's kernels (stacks that launch from eager Python); the step is the longer of
    this and the device time."""
    stack: str = "ideal"
    """The stack the step was predicted for (``workbench.stacks``); ``ideal`` is a bound, not a stack."""
    priced_as_bound: bool = True
    """Whether the step is the fused-step bound: the ``ideal`` stack, or a configuration outside the named stack's
    kernel tables (its notes say which part)."""

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
    if isinstance(model, TransformerModel) and cfg.lora:  # only the adapters train (zero1: this rank's shard)
        params = (math.ceil(model.num_layers / p.pp) * model.lora_params_per_layer(cfg.lora_rank, cfg.lora_targets)
                  / p.tp / (p.weight_replicas if p.sharding == "zero1" else 1))
    elif isinstance(model, TransformerModel):
        params = model.params_per_gpu(p.tp, p.pp, p.weight_replicas, p.ep, sharded=p.shards_optimizer)
    else:
        params = model.dense_params  # tables update inside their backward kernel
    return memory_op("optimizer.adamw", "optimizer", FlatShape(max(1, int(params))), "fp32", reads=4, writes=3.5,
                     phase="optimizer", layer="optimizer")


DataParallelPlan = list[tuple[ScheduledCollective, int, str, float]]
"""The data-parallel collectives of one step: (collective, group size, link name, seconds per occurrence)."""


def data_parallel_plan(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants) -> DataParallelPlan:
    """The step's data-parallel collectives (FSDP2 gathers and reduce-scatters, DDP all-reduces) on the schedule of
    ``workbench.perf.overlap``, each timed once. Depends on the parallelism, gradient accumulation and activation
    dtype only -- not on the micro-batch -- so search caches it (``FastEvaluator``)."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    dp_spans = p.weight_replicas * p.tp > gpu.scale_up_domain_gpus.value
    planned: list[tuple[ScheduledCollective, int]] = []

    def plan(schedule: list[ScheduledCollective], group: int) -> None:
        if group > 1:
            planned.extend((s, group) for s in schedule)

    if isinstance(model, TransformerModel):
        act_bytes = get_precision(activation_dtype(cfg.precision)).bytes_per_element
        layers = math.ceil(model.num_layers / p.pp)
        # dense weights are gathered / reduced over the whole dp group; each rank's ep-th share of the experts
        # only over the dp / ep ranks that hold the same experts
        experts = layers * model.expert_params_per_layer() / p.tp
        dense = model.params_per_gpu(p.tp, p.pp, 1, 1, sharded=False) - experts
        root = model.embedding_params() / p.tp  # embedding and head (the final norm's h weights are negligible)
        block = (dense - root) / layers
        expert_group = p.weight_replicas // p.ep
        replicas = p.weight_replicas  # dp x cp: the ranks holding the same weights
        if cfg.lora:  # frozen base: only the adapters' gradients reduce (fsdp: one rank only, config.py)
            adapters = layers * model.lora_params_per_layer(cfg.lora_rank, cfg.lora_targets) / p.tp * 4
            if p.sharding == "zero1":
                plan(zero1_schedule("zero1.lora", adapters, ddp_last_bucket_bytes(adapters, 0.0), adapters / 2,
                                    ddp_last_bucket_bytes(adapters, 0.0) / 2), replicas)
            else:
                plan(ddp_schedule("ddp.lora", adapters, ddp_last_bucket_bytes(adapters, 0.0)), replicas)
        elif p.sharding == "zero1":  # Megatron's distributed optimizer: RS gradients (fp32), AG bf16 parameters
            cap = megatron_bucket_params(replicas)
            last = ddp_last_bucket_bytes(dense * 4, model.vocab_size * model.hidden_size / p.tp * 4, cap * 4)
            plan(zero1_schedule("zero1", dense * 4, last, dense * act_bytes, last / 4 * act_bytes), replicas)
            if experts:
                plan(zero1_schedule("zero1.experts", experts / p.ep * 4, 0.0, experts / p.ep * act_bytes, 0.0),
                     expert_group)
        elif p.sharding == "fsdp":
            plan(fsdp_schedule("fsdp", root, block, layers, gather_bytes=act_bytes, reduce_bytes=4,
                               grad_accumulation=accum), replicas)
            plan(fsdp_schedule("fsdp.experts", 0.0, experts / p.ep / layers, layers, gather_bytes=act_bytes,
                               reduce_bytes=4, grad_accumulation=accum), expert_group)
        else:  # the token embedding's gradient comes last: DDP's last bucket
            last = ddp_last_bucket_bytes(dense * 4, model.vocab_size * model.hidden_size / p.tp * 4)
            plan(ddp_schedule("ddp", dense * 4, last), replicas)
            if experts:
                plan([ScheduledCollective("ddp.all_reduce_expert_grads", "all_reduce", experts / p.ep * 4, 1,
                                          "hidden")], expert_group)
    else:
        grads = model.dense_params * 4  # the first dense layers' gradients come last: DDP's last bucket
        plan(ddp_schedule("ddp.dense", grads, ddp_last_bucket_bytes(grads, 0.0)), p.dp)
    link = group_link(gpu, c, dp_spans)  # every data-parallel group spans the same ranks' links
    return [(s, group, link.name, collective_time(s.collective, s.size_bytes, group, link)) for s, group in planned]


def _communication(model: Model, cfg: TrainingConfig, gpu: GPU, c: Constants, step_compute: float, *,
                   embedding_fwd_s: float = 0.0, embedding_bwd_s: float = 0.0,
                   plan: DataParallelPlan | None = None, attention_s: float = 0.0) -> list[CommPrediction]:
    """Collectives of one step. Data-parallel traffic (FSDP gathers, gradient reductions: ``plan``, else
    ``data_parallel_plan``) follows the FSDP2 / DDP schedule of ``workbench.perf.overlap``: what is issued while
    compute runs shares one window of compute to hide behind (exposed = max(0, sum - comm_overlap x step compute),
    split in proportion); the schedule's edges (the root's and first block's all-gathers before the first compute,
    their reduce-scatters or DDP's last bucket after the last) are exposed, less the embedding compute
    (``embedding_fwd_s`` / ``embedding_bwd_s`` per micro-batch) that runs beside the first block's. Tensor-, expert-
    and pipeline-parallel traffic sits on the critical path and stays exposed; an interleaved pipeline sends
    virtual_stages times as often (Narayanan et al. 2021, Sec. 2.2). Context parallelism's ring K/V exchange hides
    behind the step's attention compute (``attention_s``, per micro-batch): ``overlap.ring_exchange_exposed_s``."""
    p = cfg.parallelism
    accum = cfg.grad_accumulation
    domain = gpu.scale_up_domain_gpus.value
    act_bytes = get_precision(activation_dtype(cfg.precision)).bytes_per_element
    exposed: list[CommPrediction] = []

    def add(name, kind, size, group, spans, times):
        if group <= 1:
            return
        link = group_link(gpu, c, spans)
        total = collective_time(kind, size, group, link) * times
        exposed.append(CommPrediction(name, kind, size, group, link.name, total, total, "critical"))

    if isinstance(model, TransformerModel):
        tokens = local_tokens(cfg)
        layers = math.ceil(model.num_layers / p.pp)
        recompute_tp = 2 if cfg.activation_checkpointing == "full" else 0
        add("tp.all_reduce_activations", "all_reduce", tokens * model.hidden_size * act_bytes, p.tp, p.tp > domain,
            (4 + recompute_tp) * layers * accum)
        if model.is_moe:
            routed = tokens * model.experts_per_token * model.hidden_size * act_bytes
            add("ep.all_to_all_tokens", "all_to_all", routed, p.ep, p.ep * p.tp > domain, 4 * layers * accum)
        add("pp.send_recv_activations", "send_recv", tokens * model.hidden_size * act_bytes / p.tp, p.pp,
            p.gpus > domain, 2 * accum * p.virtual_stages)
        if p.cp > 1:  # each ring step passes one K/V chunk: fwd cp-1 steps, bwd K/V and dK/dV (full AC: fwd again)
            chunk = tokens * 2 * max(model.kv_size // p.tp, model.head_dim) * act_bytes
            steps = (p.cp - 1) * (4 if cfg.activation_checkpointing == "full" else 3) * layers * accum
            link = group_link(gpu, c, p.cp * p.tp > domain)
            total = collective_time("send_recv", chunk, p.cp, link) * steps
            exposed.append(CommPrediction("cp.ring_send_recv_kv", "send_recv", chunk, p.cp, link.name, total,
                                          ring_exchange_exposed_s(total, attention_s * accum), "critical"))
    else:
        if isinstance(model, DLRMModel):
            pooled = cfg.micro_batch * len(model.tables) * model.embedding_dim * act_bytes
        else:
            pooled = cfg.micro_batch * cfg.seq_len * model.embedding_dim * act_bytes
        add("embedding.all_to_all", "all_to_all", pooled, p.dp, p.dp > domain, 2 * accum)

    planned = data_parallel_plan(model, cfg, gpu, c) if plan is None else plan
    schedule = [s for s, _, _, _ in planned]
    times = [t for _, _, _, t in planned]
    exposed_s = exposed_seconds(schedule, times, comm_overlap=c["comm_overlap"], step_compute_s=step_compute,
                                embedding_fwd_s=embedding_fwd_s, embedding_bwd_s=embedding_bwd_s)
    data_parallel = [CommPrediction(s.name, s.collective, s.size_bytes, group, link, t * s.occurrences, e, s.edge)
                     for (s, group, link, t), e in zip(planned, exposed_s, strict=True)]
    return data_parallel + exposed


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
    (``workbench.graph.execution``); None prices the fused step a compiled production stack runs.
    ``stack``: the training stack that runs the step (``workbench.stacks``: ``workbench stacks`` lists them; the
    default is ``ideal``, the fused-step bound); ``compile`` the configuration's compile flag for stacks that
    follow it (None: off, torch's default; the reference job's recipes say); ``param_dtype`` fp32 (fp32 parameters
    under autocast) or bf16, where the stack trains with either (None: the stack's default).
    """
    if execution is not None and stack is None:
        stack = "workbench-job"
    stack = get_stack(stack)
    model = get_model(model)
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
    resolved = resolve_precision(gpu, config.precision, allow_fallback=allow_fallback)
    notes = [resolved.note] if resolved.note else []
    cfg = dataclasses.replace(config, precision=resolved.effective.name).resolved(model)
    c = constants or constants_for(gpu, calibrated)
    if gpu.is_uncertain:
        notes.append(f"{gpu.display_name} is announced, not shipping: several of its figures are estimates")
    if getattr(model, "approximation", None):  # a Hugging Face config read as a family it is not (from_hf_config)
        notes.append(model.approximation)

    accum = cfg.grad_accumulation
    dtype = stack.param_dtype(param_dtype)
    if compile is None:  # the reference job's execution carries its recipe's flag; else torch's default, off
        compile = execution.compile if execution is not None else False
    compiled = stack.compiled(compile)
    if stack.kernels == "reference-job" and execution is None:
        execution = Execution(compile=compiled)
    tables = None
    if stack.kernels in ("pytorch", "torchtitan"):
        gap = cfg.beyond_stack_tables() or stacked.scope_gap(model, cfg)
        if gap is None:
            tables = stacked.stack_step(model, cfg, stack, compiled=compiled, param_dtype=dtype)
        else:
            notes.append(f"{stack.display_name}: {gap} are outside this stack's kernel tables; priced as the ideal "
                         "fused step (a bound)")
    # the stack's profile from a trace of the user's job (workbench calibrate --trace), where one exists
    fit = stacked.trace_fit(stack, gpu, compiled, notes, calibrated=calibrated and constants is None, tables=tables)
    microbatch_ops = tables.microbatch_ops if tables else _microbatch_ops(model, cfg, execution)
    ops: list[OpPrediction] = []
    for op in microbatch_ops:
        t = fit.op_time(op, op_time(op, gpu, c))
        ops.append(OpPrediction(op, t.time_s, t.roofline_s, t.bound, op.count * accum))
    mb_compute = sum(o.time_s * o.op.count for o in ops)
    for op in tables.step_ops if tables else _step_ops(model, cfg, execution):  # once per step
        t = fit.op_time(op, op_time(op, gpu, c))
        ops.append(OpPrediction(op, t.time_s, t.roofline_s, t.bound, op.count))
    if tables is None:
        optimizer = _optimizer_op(model, cfg)
        t = fit.op_time(optimizer, op_time(optimizer, gpu, c))
        ops.append(OpPrediction(optimizer, t.time_s, t.roofline_s, "memory", 1))

    embedding = {phase: sum(o.time_s * o.op.count for o in ops if o.op.layer == "embedding" and o.op.phase == phase)
                 for phase in ("fwd", "bwd")}  # per micro-batch: the compute beside the first block's collectives
    # per micro-batch (attention runs in the micro-batch ops only): what ring attention's K/V exchange hides behind
    attention_s = sum(o.time_s * o.op.count for o in ops if o.op.kind == "attention")
    comms = _communication(model, cfg, gpu, c, accum * mb_compute, embedding_fwd_s=embedding["fwd"],
                           embedding_bwd_s=embedding["bwd"], attention_s=attention_s)

    p = cfg.parallelism
    optimizer_s = sum(o.total_s for o in ops if o.op.phase == "optimizer")
    compute_bound_s = sum(o.total_s for o in ops if o.bound == "compute" and o.op.phase != "optimizer")
    memory_bound_s = sum(o.total_s for o in ops if o.bound != "compute" and o.op.phase != "optimizer")
    # 1F1B's bubble, 1/virtual_stages of it interleaved (Narayanan et al. 2021, Sec. 2.2: (p - 1) / (v m))
    bubble_s = (p.pp - 1) * mb_compute / p.virtual_stages if p.pp > 1 else 0.0
    comm_s = sum(cm.exposed_s for cm in comms)
    step = compute_bound_s + memory_bound_s + optimizer_s + bubble_s + comm_s
    host_s = fit.host_s(tables.host_s(stack, accum)) if tables else 0.0
    step = max(step + fit.idle_gap_s, host_s)  # the CPU enqueues ahead of the GPU; the step ends when the later does

    samples = cfg.samples_per_step
    if isinstance(model, TransformerModel):
        model_flops = model_flops_per_sample(model, cfg.seq_len, lora=cfg.lora) * samples
        tokens = samples * cfg.seq_len
    else:
        useful = sum(o.op.flops * o.executions for o in ops if not o.op.name.startswith("recompute."))
        model_flops = useful * p.gpus
        tokens = samples * (cfg.seq_len if model.kind == "hstu" else 1)
    peak = gpu.peak_tflops(resolved.effective.peak_key) * 1e12
    if tables is not None and p.gpus == 1:
        memory = tables.memory(stack, gpu.hbm_capacity_gb.value * 1e9)
    else:
        memory = memory_breakdown(model, cfg, gpu)
        if tables is not None:
            notes.append(f"{stack.display_name}: memory on {p.gpus} GPUs is the sharded model of the reference job "
                         "(workbench.memory); the stack's own memory terms cover one GPU")
    if not memory.fits:
        notes.append(f"does not fit: needs {memory.total / 1e9:.1f} GB of {memory.usable / 1e9:.1f} GB usable HBM per GPU")
    summary = StepSummary(
        step_time_s=step,
        compute_bound_s=compute_bound_s,
        memory_bound_s=memory_bound_s,
        communication_s=comm_s,
        communication_total_s=sum(cm.time_s for cm in comms),
        optimizer_s=optimizer_s,
        bubble_s=bubble_s,
        samples_per_s=samples / step,
        tokens_per_s=tokens / step,
        mfu=model_flops / (step * p.gpus * peak),
        model_flops_per_step=model_flops,
        memory=memory,
        max_micro_batch=max_micro_batch(model, cfg, gpu),
        gpus=p.gpus,
        host_s=host_s,
        stack=stack.name,
        priced_as_bound=stack.kernels == "fused" or (stack.kernels in ("pytorch", "torchtitan") and tables is None),
    )
    _check_plausible(summary, model, gpu)
    notes += _implausible_notes(summary)
    return Prediction(model, gpu, cfg, resolved, ops, comms, summary, calibrated=c.calibrated or fit.applied,
                      notes=notes)


class ImplausiblePredictionError(WorkbenchError):
    """A prediction came out non-finite, zero or past what the hardware allows: some input figure is far out of
    range (a unit mistake in a GPU file, an extreme model field). Raised instead of returning the number."""


MFU_CEILING = 1.0 + 1e-9
"""Model FLOPs can never run faster than the peak they are counted against (float rounding allowed)."""
PLAUSIBLE_STEP_S = 1e6
"""A policy: a predicted step over ~11.6 days is noted as implausible (some input is probably out of range)."""
PLAUSIBLE_MFU = 1e-6
"""A policy: an MFU under one millionth of peak is noted as implausible (launch-bound toy models sit near 1e-4)."""


def _implausible_notes(s: StepSummary) -> list[str]:
    """Notes for finite numbers no real training step has: an input (a GPU figure in the wrong unit, an extreme
    batch or model field) is probably out of range. Noted rather than raised: the arithmetic holds."""
    notes = []
    if s.step_time_s > PLAUSIBLE_STEP_S:
        notes.append(f"implausible: the step takes {s.step_time_s:.3g} s ({s.step_time_s / 86400:.3g} days); check the "
                     "inputs (GPU figures' units, batch, sequence length)")
    if s.mfu < PLAUSIBLE_MFU:
        notes.append(f"implausible: MFU {s.mfu:.3g}, under one millionth of the GPU's peak; check the GPU's peak "
                     "TFLOP/s (dense, in TFLOP/s, not FLOP/s) and the model's sizes")
    return notes


def _check_plausible(s: StepSummary, model: Model, gpu: GPU) -> None:
    """Raise ``ImplausiblePredictionError`` naming the first summary figure that is not finite and positive, or an
    MFU that is zero or above 1."""
    figures = {"step_time_s": s.step_time_s, "tokens_per_s": s.tokens_per_s, "samples_per_s": s.samples_per_s,
               "mfu": s.mfu, "model_flops_per_step": s.model_flops_per_step, "memory.total": s.memory.total}
    parts = {"compute_bound_s": s.compute_bound_s, "memory_bound_s": s.memory_bound_s, "optimizer_s": s.optimizer_s,
             "communication_s": s.communication_s, "bubble_s": s.bubble_s}
    where = f"{getattr(model, 'name', model)} on {gpu.name} ({gpu.origin})"
    for name, value in {**figures, **parts}.items():
        if not math.isfinite(value) or value < 0 or (name in figures and value == 0):
            raise ImplausiblePredictionError(
                f"{where}: the predicted {name} is {value!r}, not a finite positive number; a figure of the GPU or "
                "model is far out of range (check units: TB/s, GB, dense TFLOP/s)")
    if s.mfu > MFU_CEILING:
        raise ImplausiblePredictionError(f"{where}: the predicted MFU is {s.mfu:.3g}, above 1 (faster than the GPU's "
                                         "peak); a figure of the GPU or model is inconsistent")
