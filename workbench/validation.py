"""How far to trust a prediction: measured training runs, predicted live with the current model.

The record is data (``specs/validation/*.yaml``, written by ``benchmarks/stacks/export_validation.py`` from the
committed H200 stack measurements): per run, the measured configuration, the measured step time and peak reserved
memory, and the file it came from -- never a prediction. This module predicts each run with today's model
(``predict_row``, the same mapping ``benchmarks/stacks/evaluate.py`` uses) and summarises the error per GPU and
stack (``validation_record``), which the widget shows as "± x%" beside step time, tokens/s and MFU:

    >>> record = validation_record("h200", "torchtitan")
    >>> record.count, f"{record.step_mape:.1%}"           # runs scored (test and held-out), mean |error|
    >>> uncertainty("b200", "torchtitan").relative        # None: no run on a B200; .reference has the H200's

Errors are predicted / measured - 1. A run's ``role`` says whether the stack's constants were fitted on it
(``fit``: left out of the scores, shown in the rows) or not (``test``, ``holdout``). Runs outside a stack's kernel
tables (priced as the fused-step bound) are shown and not scored. The ``ideal`` stack is a bound: its record is
every measured run on the GPU priced as the fused step, whose error says how far below real stacks the bound sits.
Pure functions and small dataclasses: no UI imports.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workbench._data import specs_dir
from workbench.config import CHECKPOINTING, Parallelism, TrainingConfig
from workbench.hardware import get_gpu
from workbench.models import Model, get_model
from workbench.predict import Prediction, predict
from workbench.recipe.schema import PARAM_DTYPES
from workbench.schema import Fields, load_yaml
from workbench.stacks import Stack, get_stack

SCHEMA_VERSION = 1
ROLES: tuple[str, ...] = ("fit", "test", "holdout")
"""``fit``: the stack's constants were fitted on this run; ``test``: the rest of those runs; ``holdout``: chosen and
committed after the stack tables and constants were written, then run."""
SCORED_ROLES: tuple[str, ...] = ("test", "holdout")
BENCHMARK_MODELS: dict[str, tuple[str, dict]] = {
    "1b": ("llama3.2-1b", {}), "1B": ("llama3.2-1b", {}),
    "8b-4l": ("llama3-8b", {"num_layers": 4}), "8B_4L": ("llama3-8b", {"num_layers": 4}),
}
"""The benchmark scripts' model names (plain_pytorch.py's ``--model``, torchtitan's flavor) -> catalog model and
the fields the run changed (8B_4L: Llama 3 8B cut to 4 layers to fit one GPU)."""


def validation_dir() -> Path:
    return specs_dir() / "validation"


# ---------------------------------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class MeasuredRun:
    """One measured training run: what ran and what it measured (no prediction)."""

    gpu: str
    """Catalog name of the GPU it ran on."""
    stack: str
    """The stack that ran it (``workbench.stacks``)."""
    label: str
    """The run's name in its benchmark (``benchmarks/results/.../EVALUATION.md`` lists it by this)."""
    role: Literal["fit", "test", "holdout"]
    model: str
    """Catalog model the run trained, changed by ``model_changes``."""
    model_changes: dict
    """Model fields the run changed, e.g. ``{"num_layers": 4}``; ``{}`` for the catalog model as it is."""
    precision: str
    checkpointing: str
    """The stack's own policy: none, selective, full, or selective-N (every N-th block fully checkpointed)."""
    compile: bool
    micro_batch: int
    seq_len: int
    param_dtype: str
    gpus: int
    """GPUs of the run (every run of the H200 record is one GPU: no communication is validated by it)."""
    measured_step_s: float
    measured_peak_reserved_gb: float
    """The peak the allocator reserved (``torch.cuda.max_memory_reserved``; torchtitan's ``max_reserved``)."""
    source: str
    """The committed measurement file, relative to the repository root."""

    def built_model(self) -> Model:
        return dataclasses.replace(get_model(self.model), **self.model_changes)

    def as_row(self) -> dict:
        """The row ``predict_row`` takes (``benchmarks/stacks/evaluate.py``'s form)."""
        return {"stack": self.stack, "model": self.built_model(), "precision": self.precision,
                "ac": self.checkpointing, "compile": self.compile, "micro_batch": self.micro_batch,
                "seq_len": self.seq_len, "param_dtype": self.param_dtype}


def benchmark_model(name: str, untied: bool = False) -> Model:
    """The model a benchmark's name means (``BENCHMARK_MODELS``); ``untied``: torchtitan's llama3 flavors do not
    tie the embedding and the head."""
    if name not in BENCHMARK_MODELS:
        raise KeyError(name)
    catalog, changes = BENCHMARK_MODELS[name]
    model = dataclasses.replace(get_model(catalog), **changes)
    return dataclasses.replace(model, tied_embeddings=False) if untied and model.tied_embeddings else model


def model_changes(model: Model) -> dict:
    """The fields of ``model`` that differ from its catalog entry of the same name (what a run changed)."""
    catalog = get_model(model.name)
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
            if getattr(model, f.name) != getattr(catalog, f.name)}


def row_stack(stack: str, checkpointing: str) -> str | Stack:
    """The stack a run is predicted for: its own, except torchtitan's ``selective_ac_option = N`` (every N-th
    block fully checkpointed), which is the torchtitan stack with selective -> selective-N."""
    if stack == "torchtitan" and checkpointing.startswith("selective-") and checkpointing != "selective-op":
        return dataclasses.replace(get_stack("torchtitan"), checkpointing={
            "none": "none", "selective": checkpointing, "full": "full"})
    return stack


def predict_row(row: Mapping, *, gpu: str = "h200", stack: str | None = None, calibrated: bool = False) -> Prediction:
    """Predict one measured run (``MeasuredRun.as_row`` or ``evaluate.py``'s row: stack, model, precision, ac,
    compile, micro_batch, seq_len, param_dtype) on one GPU: ``stack`` None is the run's own stack at its parameter
    dtype; a named stack (``ideal``, ``workbench-job``) is predicted at that stack's default parameter dtype."""
    mode = "selective" if row["ac"].startswith("selective") else row["ac"]
    cfg = TrainingConfig(row["micro_batch"], row["seq_len"], row["precision"], Parallelism(), mode)
    if stack is None:
        return predict(row["model"], gpu, cfg, compile=row["compile"], param_dtype=row["param_dtype"],
                       calibrated=calibrated, stack=row_stack(row["stack"], row["ac"]))
    return predict(row["model"], gpu, cfg, compile=row["compile"], calibrated=calibrated, stack=stack)


def load_runs(path: str | Path) -> tuple[MeasuredRun, ...]:
    """The runs of one record file, checked: a bad field fails naming the file, the run and the field."""
    origin = str(path)
    top = Fields(load_yaml(path, what="validation record"), origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION}")
    gpu = get_gpu(top.string("gpu")).name
    top.string("generated_by")
    top.string("note", default="")
    raw = top.raw("runs")
    if not isinstance(raw, list) or not raw:
        raise top.error("runs", raw, "a non-empty list of measured runs")
    top.finish()
    runs = []
    for i, item in enumerate(raw):
        f = Fields(item, origin, f"runs[{i}]")
        changes = f.raw("model_changes", {})
        if not isinstance(changes, dict):
            raise f.error("model_changes", changes, "a mapping of model fields to values")
        run = MeasuredRun(
            gpu=gpu, stack=get_stack(f.string("stack")).name, label=f.string("label"),
            role=f.string("role", ROLES),  # type: ignore[arg-type]
            model=get_model(f.string("model")).name, model_changes=dict(changes), precision=f.string("precision"),
            checkpointing=f.string("checkpointing"), compile=f.boolean("compile"),
            micro_batch=int(f.number("micro_batch", minimum=1, integer=True)),
            seq_len=int(f.number("seq_len", minimum=1, integer=True)),
            param_dtype=f.string("param_dtype", PARAM_DTYPES), gpus=int(f.number("gpus", minimum=1, integer=True)),
            measured_step_s=float(f.number("measured_step_s", above=0)),
            measured_peak_reserved_gb=float(f.number("measured_peak_reserved_gb", above=0)),
            source=f.string("source"))
        f.finish()
        mode = run.checkpointing.split("-")[0] if run.checkpointing.startswith("selective") else run.checkpointing
        if mode not in CHECKPOINTING:
            raise f.error("checkpointing", run.checkpointing, "none, selective, selective-<policy> or full")
        try:
            run.built_model()
        except TypeError as exc:
            raise f.error("model_changes", changes, f"fields of {run.model} ({exc})") from None
        runs.append(run)
    return tuple(runs)


@functools.cache
def measured_runs() -> tuple[MeasuredRun, ...]:
    """Every run of every shipped record (``specs/validation/*.yaml``), in file order."""
    return tuple(run for path in sorted(validation_dir().glob("*.yaml")) for run in load_runs(path))


# ---------------------------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class ValidatedRun:
    """A measured run beside what the model predicts for it now."""

    run: MeasuredRun
    predicted_step_s: float
    predicted_peak_gb: float
    covered: bool
    """False when the configuration is outside the stack's kernel tables (priced as the fused-step bound)."""
    scored: bool
    """Counted in the record's errors: a test or held-out run the stack's tables cover (for the bound, every run:
    it has no fitted constants)."""

    @property
    def step_error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_step_s / self.run.measured_step_s - 1

    @property
    def memory_error(self) -> float:
        return self.predicted_peak_gb / self.run.measured_peak_reserved_gb - 1


@dataclass(frozen=True)
class ValidationRecord:
    """One (GPU, stack) pair's measured runs, predicted with the current model, and the errors they score."""

    gpu: str
    stack: str
    calibrated: bool
    """Predicted with the GPU's calibration profile."""
    runs: tuple[ValidatedRun, ...]
    bound: bool
    """The ``ideal`` stack: every measured run priced as the fused step (a bound, so the errors are one-sided)."""

    @property
    def scored(self) -> tuple[ValidatedRun, ...]:
        return tuple(r for r in self.runs if r.scored)

    @property
    def count(self) -> int:
        return len(self.scored)

    @property
    def step_mape(self) -> float | None:
        """Mean absolute step-time error over the scored runs; None when none is scored."""
        return statistics.mean(abs(r.step_error) for r in self.scored) if self.scored else None

    @property
    def worst_step_error(self) -> float | None:
        """The scored run's step error furthest from zero, signed."""
        return max((r.step_error for r in self.scored), key=abs) if self.scored else None

    @property
    def memory_mape(self) -> float | None:
        return statistics.mean(abs(r.memory_error) for r in self.scored) if self.scored else None

    @property
    def gpus_measured(self) -> tuple[int, ...]:
        return tuple(sorted({r.run.gpus for r in self.runs}))


@functools.cache
def validation_record(gpu: str, stack: str, calibrated: bool = False) -> ValidationRecord | None:
    """The record of ``stack`` on ``gpu`` (catalog or alias names), or None when no run was measured there. For
    a bound stack (``ideal``), every run measured on the GPU priced as that stack."""
    gpu_name, the_stack = get_gpu(gpu).name, get_stack(stack)
    on_gpu = [r for r in measured_runs() if r.gpu == gpu_name]
    runs = on_gpu if the_stack.bound else [r for r in on_gpu if r.stack == the_stack.name]
    if not runs:
        return None
    validated = []
    for run in runs:
        p = predict_row(run.as_row(), gpu=gpu_name, stack=the_stack.name if the_stack.bound else None,
                        calibrated=calibrated)
        covered = the_stack.bound or not p.summary.priced_as_bound
        validated.append(ValidatedRun(run, p.summary.step_time_s, p.summary.memory.total / 1e9, covered,
                                      scored=covered and (the_stack.bound or run.role in SCORED_ROLES)))
    return ValidationRecord(gpu_name, the_stack.name, calibrated, tuple(validated), the_stack.bound)


@dataclass(frozen=True)
class Uncertainty:
    """How far to trust a prediction of ``stack`` on ``gpu``: the relative step-time error of its validation
    (tokens/s and MFU scale with the step, so they share it), or why there is none."""

    gpu: str
    stack: str
    record: ValidationRecord | None
    """This GPU's record for the stack; None when it has none."""
    reference: ValidationRecord | None = None
    """Without a record here: the same stack's record on a GPU that has one (not a number for this GPU)."""

    @property
    def relative(self) -> float | None:
        """The "± x%" figure (the record's step MAPE), or None: no scored run on this GPU, or a bound (whose error
        is one-sided: ``record.step_mape`` says how far below measured stacks it sits)."""
        if self.record is None or self.record.bound:
            return None
        return self.record.step_mape

    @property
    def validated(self) -> bool:
        return self.record is not None and self.record.count > 0


def validated_gpus() -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.gpu for r in measured_runs()))


def uncertainty(gpu: str, stack: str, calibrated: bool = False) -> Uncertainty:
    """``Uncertainty`` of ``stack`` on ``gpu``; for a GPU without runs, ``reference`` is the stack's record on the
    first GPU that has one."""
    record = validation_record(gpu, stack, calibrated)
    reference = None
    if record is None:
        for other in validated_gpus():
            if (reference := validation_record(other, stack, calibrated)) is not None:
                break
    return Uncertainty(get_gpu(gpu).name, get_stack(stack).name, record, reference)

