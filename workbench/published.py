"""The published-tables evaluation, shipped: vendor, framework and MLPerf training results beside what the model
predicted for each, per GPU and model family.

The rows are data (``specs/validation/published/training_throughput.yaml``, written by
``benchmarks/published/export_validation.py`` from the committed ``benchmarks/results/published/evaluation.csv``,
which ``benchmarks/published/evaluate.py`` writes). Unlike the H200 record (``workbench.validation``, predicted
live), a published row keeps the prediction made when the table was evaluated: the step shape of each row lives in
``benchmarks/published/rows.yaml``, outside the package. Rerun both scripts after a model change; the test
``tests/test_published_rows.py`` fails while the shipped copy differs from the evaluation.

    >>> rows = published_rows_for("h100-sxm", "llama3")      # the H100 and its variants, Llama 3 rows
    >>> rows[0].published, rows[0].predicted, f"{rows[0].error:+.1%}"

Errors are predicted / published - 1, in the row's own metric (tokens/s per GPU, step time, samples/s or model
TFLOP/s per GPU). Pure functions and small dataclasses: no UI imports.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from workbench._data import specs_dir
from workbench.hardware import get_gpu
from workbench.models import Model
from workbench.schema import Fields, load_yaml

SCHEMA_VERSION = 1
METRICS: tuple[str, ...] = ("tokens_per_sec_per_gpu", "train_step_time", "train_throughput", "tflops_per_gpu")
"""The metrics the evaluation scores (``benchmarks/published/evaluate.py``'s ``SCORED_METRICS``)."""


def published_path() -> Path:
    return specs_dir() / "validation" / "published" / "training_throughput.yaml"


@dataclass(frozen=True)
class PublishedRow:
    """One scorable row of the published training table and what the model predicted for it."""

    id: str
    """The row's id in the published table and in ``benchmarks/results/published/EVALUATION.md``."""
    framework: str
    stack: str
    """The workbench stack the row was priced for (``rows.yaml`` maps the framework to it)."""
    proxy: bool
    """The stack stands in for a framework that has none of its own."""
    bound: bool
    """Priced as the fused-step bound although a stack was named (outside its kernel tables)."""
    gpu: str
    """Catalog name of the GPU (or variant) the row was priced on."""
    model: str
    family: str
    """The model's family (its catalog name before the first "-": ``llama3``, ``mixtral``)."""
    precision: str
    metric: str
    unit: str
    published: float
    predicted: float | None
    """None: the workbench cannot express the row (``reason``)."""
    fits: bool
    reason: str = ""

    @property
    def error(self) -> float | None:
        """predicted / published - 1; None when not expressed."""
        return None if self.predicted is None else self.predicted / self.published - 1


def load_published(path: str | Path) -> tuple[PublishedRow, ...]:
    """The rows of one shipped evaluation file, checked: a bad field fails naming the file, the row and the field."""
    origin = str(path)
    top = Fields(load_yaml(path, what="published evaluation"), origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION}")
    for key in ("generated_by", "evaluated_by", "source", "note"):
        top.string(key)
    raw = top.raw("rows")
    if not isinstance(raw, list) or not raw:
        raise top.error("rows", raw, "a non-empty list of evaluated rows")
    top.finish()
    rows = []
    for i, item in enumerate(raw):
        f = Fields(item, origin, f"rows[{i}]")
        predicted = f.raw("predicted")
        row = PublishedRow(
            id=f.string("id"), framework=f.string("framework"), stack=f.string("stack"), proxy=f.boolean("proxy"),
            bound=f.boolean("bound"), gpu=get_gpu(f.string("gpu")).name, model=f.string("model"),
            family=f.string("family"), precision=f.string("precision"), metric=f.string("metric", METRICS),
            unit=f.string("unit"), published=float(f.number("published", above=0)),
            predicted=None if predicted is None else float(f.number("predicted", above=0)), fits=f.boolean("fits"),
            reason=f.string("reason", default="") if f.has("reason") else "")
        if row.predicted is None and not row.reason:
            raise f.error("reason", "", "why the row is not expressed (its predicted is null)")
        f.finish()
        rows.append(row)
    return tuple(rows)


@functools.cache
def published_rows() -> tuple[PublishedRow, ...]:
    """Every row of the shipped evaluation, in the table's order."""
    return load_published(published_path())


def model_family(model: Model | str) -> str:
    """The family a model's rows are filed under: its name before the first "-" (``llama3-70b`` -> ``llama3``)."""
    return (model if isinstance(model, str) else model.name).split("-")[0]


def published_rows_for(gpu: str, family: str) -> tuple[PublishedRow, ...]:
    """The rows of ``family`` priced on ``gpu`` (catalog name or alias) or on one of its variants (``h100-sxm``
    includes ``h100-sxm-96gb-500w``)."""
    part = get_gpu(gpu).name
    return tuple(r for r in published_rows()
                 if r.family == family and part in (r.gpu, get_gpu(r.gpu).derived_from))


def mape(rows: tuple[PublishedRow, ...] | list[PublishedRow]) -> float | None:
    """Mean |error| of the expressed rows; None when none is expressed."""
    errors = [abs(r.error) for r in rows if r.error is not None]
    return statistics.fmean(errors) if errors else None
