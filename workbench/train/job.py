"""The training loop: warm up (compile), then time steps, track loss and peak memory, and report against the
recipe's predictions.

A step is one optimizer step: ``grad_accumulation`` micro-batches forward and backward, then the update --
what ``workbench.predict`` calls a step. Each step's batches are prepared before its timer starts; the timer
is host wall time between two ``torch.cuda.synchronize()`` calls, and the reported step time is the median of
the timed (post warm-up) steps. Peak memory is tracked over the timed steps only (warm-up compiles and creates
the optimizer states; both are there in steady state, so the peak includes them). The allocator's cache is
emptied after warm-up, so the reserved peak is what the timed steps needed, not what compilation left behind.

Held-out loss (``RunOptions.eval_every``): the mean next-byte loss on ``data.heldout_windows`` (text the job never
trains on), before the first step and after every ``eval_every``-th optimizer step (warm-up steps counted) and the
last; under ``torch.no_grad()`` and the run's autocast, with the model as it trains (fp8 linears included), in
micro-batches of the recipe's size, outside the step timer. On a multi-rank job every rank evaluates (FSDP needs
every rank in a forward) and rank 0's value is reported. It draws no random numbers, so it leaves the training
trajectory as it is. Its peak memory (a forward keeping no activations) is assumed below a training step's.

Deterministic mode (``RunOptions.deterministic``), for runs that must repeat bit for bit on the same GPU model,
software and settings:

- made deterministic: ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set before CUDA starts, unless already set) and
  ``torch.use_deterministic_algorithms(True)``: cuBLAS keeps a fixed reduction order, ops with a deterministic
  variant use it (the loss backward's ``scatter_add_``, SDPA's flash and memory-efficient backward; cuDNN
  attention is not chosen), and torch.compile's Inductor stops autotuning; cuDNN benchmarking off. Data order
  and initialisation are seeded anyway, and the project's Triton kernels take their configs without timing
  anything (``workbench.select``);
- refused: recipes using a project Triton kernel known to be nondeterministic
  (``determinism.NONDETERMINISTIC_TRITON_OPS``: embedding_bag's backward adds with ``tl.atomic_add``; and
  ``NONDETERMINISTIC_TRITON_VARIANTS``, config variants that add with atomics: none now);
- not covered: a torch op with no deterministic implementation raises torch's RuntimeError naming it; NCCL
  collectives of multi-rank runs (their order is fixed for one algorithm and topology, not promised); other
  libraries' kernels (torchao's beyond cuBLAS); another GPU model, driver, library version, world size or
  micro-batch split; step times and memory peaks.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist

from workbench.fileio import write_text
from workbench.recipe.schema import Recipe
from workbench.train.build import Built, build_dlrm, build_transformer
from workbench.train.data import RecsysBatches, TextBatches, heldout_windows
from workbench.train.determinism import check_deterministic, deterministic_mode
from workbench.train.dlrm import capped_rows
from workbench.train.parallel import World, init_world
from workbench.train.schedule import LrSchedule
from workbench.train.spec import JobError, JobSpec, check_supported

GB = 1e9
PEAK_MEMORY_MEASURE = "max_memory_reserved"
"""The measured peak compared with ``predicted.peak_memory_gb``: bytes the caching allocator holds from the
device at its peak. The prediction is what must fit in HBM, allocator slack included (the memory model's
FRAMEWORK_OVERHEAD_GB term), which is what reserved counts; max_memory_allocated (live tensors only) is
reported too. Neither counts the CUDA context (~0.5 GB outside the allocator)."""


@dataclass
class RunOptions:
    """How to run a recipe (what the recipe itself does not say)."""

    steps: int = 20
    """Timed steps, after the warm-up."""
    warmup: int = 3
    device: str = "auto"
    data: Literal["text", "synthetic"] = "text"
    """Transformers: the generated text corpus (a real loss curve) or uniform random tokens."""
    lr: float | None = None
    """Peak learning rate; None keeps the builder's default (AdamW 3e-4 transformer, 1e-3 DLRM dense)."""
    seed: int = 0
    max_table_rows: int | None = None
    """Cap every DLRM table at this many rows (a smoke run on small hardware; the prediction then does not
    describe the run, and the metrics say so)."""
    log_every: int = 1
    progress: bool = True
    fp8_emulate: bool = False
    """fp8 recipes: emulate the fp8 GEMMs in fp32 (same rounding) instead of running the fp8 kernel; separates the
    kernel from the numerics in a convergence check (slower, and the step time then is not the recipe's)."""
    eval_every: int | None = None
    """Held-out loss before the first step and after every ``eval_every``-th optimizer step (warm-up counted) and
    the last (transformers on the text corpus only); None: no evaluation."""
    eval_windows: int = 32
    """Held-out windows of seq_len + 1 bytes (``data.heldout_windows``)."""
    deterministic: bool = False
    """Deterministic algorithms (the module docstring says what that covers)."""
    lr_schedule: LrSchedule = field(default_factory=LrSchedule)
    """How the learning rate moves over the run's ``warmup + steps`` optimizer steps (``workbench.train.schedule``);
    constant by default."""


@dataclass
class RunResult:
    spec: JobSpec
    options: RunOptions
    device: str
    world_size: int
    losses: list[float]
    """One per step, warm-up included."""
    step_times_s: list[float]
    """Timed steps only."""
    peak_allocated_gb: float | None
    peak_reserved_gb: float | None
    fp8_backend: str
    notes: list[str] = field(default_factory=list)
    predicted_job: dict = field(default_factory=dict)
    """The step as this job runs it, predicted at run time (``job_prediction``); ``{"unavailable": why}`` when it
    could not be made, {} before it is made."""
    heldout_losses: list[tuple[int, float]] = field(default_factory=list)
    """(optimizer steps done, held-out loss) per evaluation; empty without ``eval_every``."""

    @property
    def step_time_s(self) -> float:
        return statistics.median(self.step_times_s)

    @property
    def comparable(self) -> bool:
        """Whether the recipe's predictions describe this run (a GPU, the full model)."""
        return self.device != "cpu" and not self.options.max_table_rows

    def measured(self) -> dict:
        step = self.step_time_s
        return {
            "step_time_s": step,
            "step_time_s_mean": statistics.fmean(self.step_times_s),
            "step_time_s_min": min(self.step_times_s),
            "tokens_per_s": self.spec.tokens_per_step / step,
            "samples_per_s": self.spec.global_batch / step,
            "peak_memory_gb": self.peak_reserved_gb,
            "peak_memory_allocated_gb": self.peak_allocated_gb,
            "peak_memory_reserved_gb": self.peak_reserved_gb,
            "loss_first": self.losses[0],
            "loss_last": self.losses[-1],
        }

    def metrics(self) -> dict:
        """The metrics JSON: settings, measured vs predicted with relative errors (measured / predicted - 1)."""
        s, measured = self.spec, self.measured()
        errors = _relative_errors(measured, s.predicted)
        return {
            "recipe": s.name, "model": s.model_name, "overrides": s.overrides,
            "target": {"gpu": s.target_gpu, "gpus": s.target_gpus},
            "device": self.device, "world_size": self.world_size, "torch": torch.__version__,
            "settings": {
                "micro_batch": s.micro_batch, "global_batch": s.global_batch, "grad_accumulation": s.grad_accumulation,
                "seq_len": s.seq_len, "precision": {"param": s.param_dtype, "compute": s.compute_dtype,
                                                    "reduce": s.reduce_dtype, "fp8": s.fp8},
                "fp8_backend": self.fp8_backend, "activation_checkpointing": s.checkpointing,
                "parallelism": {"dp": s.dp, "tp": s.tp, "sharding": s.sharding}, "compile": s.compile,
                "triton_ops": sorted(s.triton_ops()), "data": self.options.data, "seed": self.options.seed,
                "lr": self.options.lr,
                "max_table_rows": self.options.max_table_rows,
                "eval_every": self.options.eval_every, "eval_windows": self.options.eval_windows,
                "lr_schedule": asdict(self.options.lr_schedule),
                "deterministic": self.options.deterministic,
            },
            "steps": len(self.step_times_s), "warmup": self.options.warmup,
            "peak_memory_measure": PEAK_MEMORY_MEASURE,
            "comparable": self.comparable,
            "measured": measured,
            "predicted": s.predicted,
            "relative_error": errors,
            "predicted_job": self.predicted_job,
            "relative_error_job": _relative_errors(measured, self.predicted_job),
            "losses": self.losses,
            "heldout_losses": [[step, loss] for step, loss in self.heldout_losses],
            "step_times_s": self.step_times_s,
            "notes": self.notes,
        }

    def write(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """The metrics JSON, written atomically; an existing file is replaced only with ``overwrite``."""
        return write_text(path, json.dumps(self.metrics(), indent=2) + "\n", overwrite=overwrite)


def _batches(spec: JobSpec, options: RunOptions, world: World):
    """A function returning one micro-batch (a tuple of loss arguments) per call."""
    seed = options.seed * 1000 + world.rank // spec.tp  # tp ranks of one dp group read the same data
    if spec.family == "dlrm":
        m = spec.model
        source = RecsysBatches(spec.micro_batch, m.num_dense_features, capped_rows(m, options.max_table_rows),
                               tuple(t.pooling for t in m.tables), world.device, seed)
    else:
        source = TextBatches(spec.micro_batch, spec.seq_len, world.device, seed, synthetic=options.data == "synthetic",
                             vocab_size=min(256, spec.model.vocab_size))
    return source.next


def check_options(spec: JobSpec, options: RunOptions) -> None:
    """Raise ``JobError`` for options this recipe cannot run with: a bad evaluation setting, evaluation where
    there is no held-out text (DLRM, ``data="synthetic"``), deterministic mode with a nondeterministic kernel."""
    if options.eval_every is not None and (isinstance(options.eval_every, bool) or options.eval_every < 1):
        raise JobError(f"eval_every = {options.eval_every!r}: expected a positive number of steps, or None")
    if isinstance(options.eval_windows, bool) or options.eval_windows < 1:
        raise JobError(f"eval_windows = {options.eval_windows!r}: expected a positive number of windows")
    if options.eval_every is not None:
        if spec.family != "transformer":
            raise JobError(f"recipe {spec.name!r}: held-out evaluation (eval_every) is for transformers on the "
                           f"text corpus; {spec.model_name} is a {spec.family.upper()} model with synthetic batches")
        if options.data != "text":
            raise JobError(f"held-out evaluation (eval_every) with data = {options.data!r}: the held-out set is "
                           "corpus text, which a model trained on random tokens has not learnt; use data text")
    if options.deterministic:
        check_deterministic(spec)


def evaluation_steps(total_steps: int, every: int | None) -> list[int]:
    """Optimizer steps done at each held-out evaluation: 0 (before the first step), every ``every``-th step and
    the last; [] without evaluation. ``evaluation_steps(300, 10)`` = [0, 10, ..., 300]."""
    if every is None:
        return []
    return sorted({*range(0, total_steps + 1, every), total_steps})


def heldout_loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, micro_batch: int,
                 autocast) -> float:
    """Mean next-token loss of ``model`` over inputs / targets [windows, S] (on the model's device), a
    micro-batch at a time under ``autocast`` (a reusable context manager), without gradients. Windows are of
    one length, so the micro-batches' means weighted by their windows give the mean over every token."""
    total = torch.zeros((), dtype=torch.float64, device=inputs.device)
    with torch.no_grad():
        for start in range(0, inputs.shape[0], micro_batch):
            x, y = inputs[start:start + micro_batch], targets[start:start + micro_batch]  # [b, S]
            with autocast:
                loss = model(x, y)
            total += loss.double() * x.shape[0]
    return float(total) / inputs.shape[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(spec: JobSpec, options: RunOptions | None = None) -> RunResult:
    """Run ``spec`` for ``warmup + steps`` optimizer steps in this process (one rank of a torchrun job, or alone)."""
    options = options or RunOptions()
    check_options(spec, options)
    notes: list[str] = []
    with deterministic_mode(options.deterministic, notes):  # before init_world: that starts CUDA
        is_dlrm = spec.family == "dlrm"
        world = init_world(options.device, need_group=not is_dlrm and (spec.sharding == "fsdp" or spec.tp > 1))
        try:
            check_supported(spec, world.world_size)
            torch.manual_seed(options.seed)
            built = (build_dlrm(spec, world, options.max_table_rows) if is_dlrm
                     else build_transformer(spec, world, options.fp8_emulate))
            built.notes[:0] = notes
            if options.lr is not None:
                for group in built.optimizers[0].param_groups:
                    group["lr"] = options.lr
            result = _loop(spec, options, world, built)
            # free the model (DDP/FSDP/DTensor state holds the process group) before the group goes; then line up
            del built
            gc.collect()
            if world.world_size > 1:
                dist.barrier()
            return result
        finally:
            if world.initialized_here:
                dist.destroy_process_group()


def _loop(spec: JobSpec, options: RunOptions, world: World, built: Built) -> RunResult:
    next_batch = _batches(spec, options, world)
    accum = spec.grad_accumulation
    autocast = (torch.autocast(world.device.type, dtype=built.autocast_dtype) if built.autocast_dtype
                else contextlib.nullcontext())
    losses, times = [], []
    total = options.warmup + options.steps
    cuda = world.device.type == "cuda"
    due = set(evaluation_steps(total, options.eval_every))
    heldout: list[tuple[int, float]] = []
    if due:
        inputs, targets = (t.to(world.device) for t in heldout_windows(options.eval_windows, spec.seq_len))

        def evaluate(done: int) -> None:
            heldout.append((done, heldout_loss(built.model, inputs, targets, spec.micro_batch, autocast)))
            if options.progress and world.is_main:
                print(f"[train] held-out loss after {done} steps: {heldout[-1][1]:.4f}", file=sys.stderr, flush=True)

    if 0 in due:
        evaluate(0)
    peak_lrs = [[group["lr"] for group in optimizer.param_groups] for optimizer in built.optimizers]
    for step in range(total):
        factor = options.lr_schedule.lr_factor(step, total)
        for optimizer, peak in zip(built.optimizers, peak_lrs, strict=True):
            for group, lr in zip(optimizer.param_groups, peak, strict=True):
                group["lr"] = lr * factor
        if step == options.warmup and cuda:
            _sync(world.device)
            torch.cuda.empty_cache()  # drop what warm-up (compilation, autotuning) reserved beyond steady state
            torch.cuda.reset_peak_memory_stats(world.device)
        batches = [next_batch() for _ in range(accum)]
        _sync(world.device)
        start = time.perf_counter()
        step_loss = train_step(built, batches, autocast, world.device)
        _sync(world.device)
        elapsed = time.perf_counter() - start
        if world.world_size > 1:
            dist.all_reduce(step_loss, op=dist.ReduceOp.SUM)
            step_loss /= world.world_size
        losses.append(float(step_loss))
        if step >= options.warmup:
            times.append(elapsed)
        if options.progress and world.is_main and (step % options.log_every == 0 or step == total - 1):
            _progress(spec, step, total, options.warmup, losses[-1], elapsed, world)
        if step + 1 in due:
            evaluate(step + 1)
    allocated = reserved = None
    if cuda:
        peaks = torch.tensor([torch.cuda.max_memory_allocated(world.device), torch.cuda.max_memory_reserved(world.device)],
                             dtype=torch.float64, device=world.device)
        if world.world_size > 1:
            dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
        allocated, reserved = (float(v) / GB for v in peaks.tolist())
    device = torch.cuda.get_device_name(world.device) if cuda else "cpu"
    return RunResult(spec, options, device, world.world_size, losses, times, allocated, reserved, built.fp8_backend,
                     built.notes, heldout_losses=heldout)


def train_step(built: Built, batches: list, autocast, device: torch.device) -> torch.Tensor:
    """One optimizer step over ``batches`` (its micro-batches): forward under ``autocast`` (a reusable context
    manager), backward, FSDP / DDP gradient sync on the last micro-batch only, every optimizer stepped and
    zeroed. Returns the mean loss (on the device, not synchronised). The phases are named for torch.profiler
    (``train.forward``, ``train.backward``, ``train.optimizer``; ``benchmarks/train/train_profile.py`` reads them)."""
    from torch.profiler import record_function

    model, accum = built.model, len(batches)
    step_loss = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        last = i == accum - 1
        if built.fsdp:
            model.set_requires_gradient_sync(last)
        sync = model.no_sync() if built.ddp and not last else contextlib.nullcontext()
        with sync:
            with record_function("train.forward"), autocast:
                loss = model(*batch)  # the loss: models compute it in forward given targets
            with record_function("train.backward"):
                (loss / accum).backward()
        step_loss += loss.detach() / accum
    with record_function("train.optimizer"):
        for optimizer in built.optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return step_loss


def _progress(spec: JobSpec, step: int, total: int, warmup: int, loss: float, elapsed: float, world: World) -> None:
    phase = " (warm-up)" if step < warmup else ""
    memory = ""
    if world.device.type == "cuda":
        memory = f"  mem {torch.cuda.max_memory_reserved(world.device) / GB:6.2f} GB"
    rate = spec.tokens_per_step / elapsed
    unit = "samples/s" if spec.seq_len == 1 else "tok/s"
    print(f"[train] step {step + 1:>4}/{total}{phase:<10}  loss {loss:8.4f}  {elapsed:8.4f} s  {rate:12,.0f} {unit}"
          f"{memory}", file=sys.stderr, flush=True)


def _relative_errors(measured: dict, predicted: dict) -> dict:
    """measured / predicted - 1 for step time, tokens/s and peak memory, where both are known."""
    return {key: measured[key] / predicted[key] - 1 for key in ("step_time_s", "tokens_per_s", "peak_memory_gb")
            if predicted.get(key) and measured.get(key) is not None}


def job_prediction(recipe: Recipe | str | Path) -> dict:
    """The step as this job runs the recipe (eager or compiled, its loss, FSDP2 copies, fp8 quantization:
    ``predict_recipe(recipe, calibrated=True, job=True)``), made now; a recipe records the step of the stack search
    ranked it for (``predicted.stack``: torchtitan by default), which this job is not. ``recipe``: the validated recipe (``JobSpec.recipe``: the file is not read
    again), or a recipe file's path. When it cannot be made, ``{"unavailable": why}`` (and a warning on stderr):
    never an empty block that reads as "no prediction" without a reason."""
    from workbench.errors import WorkbenchError
    from workbench.recipe.build import predict_recipe, predicted_from
    from workbench.recipe.io import load_recipe

    what = (f"{recipe.model.name} on {recipe.target.gpus} x {recipe.target.gpu}" if isinstance(recipe, Recipe)
            else recipe)
    try:
        prediction = predict_recipe(recipe if isinstance(recipe, Recipe) else load_recipe(recipe), calibrated=True,
                                    job=True)
    except WorkbenchError as exc:
        print(f"[train] warning: no job-level prediction for {what}: {exc}", file=sys.stderr, flush=True)
        return {"unavailable": str(exc)}
    return {**asdict(predicted_from(prediction)), "calibrated": prediction.calibrated}
