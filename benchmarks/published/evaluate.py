"""Predict every scorable row of the published training table and report the error per row and per group.

    .venv/bin/python benchmarks/published/evaluate.py            # writes benchmarks/results/published/
    .venv/bin/python benchmarks/published/evaluate.py --print     # the Markdown on stdout, nothing written

Scorable: confidence high or medium and a throughput or step-time metric (``SCORED_METRICS``). Time-to-train rows
are never scored themselves (they depend on convergence); the throughput or step-time rows of the same run (ids
``<id>-thr`` / ``<id>-step``) are. Each row becomes one ``workbench.predict.predict`` call from the data in
``benchmarks/published/rows.yaml`` (framework -> stack, model and GPU names, the step's shape per row); nothing here
branches on a row. Nothing is fitted: every prediction comes from the GPU, model and stack specs alone (spec-only
constants, ``calibrated=False``). Error = predicted / published - 1; MAPE = mean |error|.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from workbench.config import Parallelism, TrainingConfig  # noqa: E402
from workbench.errors import SpecError, UnknownNameError, WorkbenchError  # noqa: E402
from workbench.fileio import load_yaml, read_csv_text, read_text, write_text  # noqa: E402
from workbench.stacks import get_stack  # noqa: E402


def _sibling(name: str):
    """A module next to this script, under a name of its own (``kernels`` alone is too common a top-level name)."""
    import importlib.util

    qualified = f"published_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[qualified]


kernels = _sibling("kernels")
"""The per-kernel table (``kernel_throughput.csv``) through ``predict-ops``."""
eval_pauses = _sibling("eval_pauses")
"""A framework's logged throughput that counts its evaluation pauses (``frameworks.<name>.eval_pauses``)."""

MAPPING = Path(__file__).with_name("rows.yaml")
AUDIT = Path(__file__).with_name("audit.md")
"""The row-by-row audit of the mapping (prose, written by hand); copied into EVALUATION.md."""
OUT_DIR = ROOT / "benchmarks" / "results" / "published"
BASELINE = OUT_DIR / "evaluation_before_audit.csv"
"""The per-row results before the audit (evaluation.csv as it was), for the before/after tables."""
SCORED_METRICS: tuple[str, ...] = ("tokens_per_sec_per_gpu", "train_step_time", "train_throughput", "tflops_per_gpu")
SCORED_CONFIDENCE: tuple[str, ...] = ("high", "medium")
TIME_TO_TRAIN = "mlperf_time_to_train"
TARGET_EXPRESSED = 0.95
"""Issue 17's targets: >= 95% of scorable rows expressed, MAPE <= 12% overall, <= 15% per vendor and per stack
with at least ``TARGET_GROUP_ROWS`` rows."""
TARGET_MAPE = 0.12
TARGET_GROUP_MAPE = 0.15
TARGET_GROUP_ROWS = 5

# The step-shape fields a row may set beyond today's defaults, with the default that means "feature off", where
# each lives and how the report names the feature when the workbench lacks it.
FEATURES: tuple[tuple[str, object, type, str], ...] = (
    ("cp", 1, Parallelism, "context parallelism (cp)"),
    ("virtual_stages", 1, Parallelism, "interleaved pipeline schedules (virtual_stages)"),
    ("lora_rank", 0, TrainingConfig, "LoRA fine-tuning (lora_rank)"),
    ("offload", "none", TrainingConfig, "CPU offload (offload)"),
    ("power_limit_w", 0, TrainingConfig, "a power limit below the GPU's own (power_limit_w)"),
)
SHAPE_KEYS = {"dp", "tp", "pp", "cp", "ep", "sharding", "virtual_stages", "micro_batch", "global_batch", "seq_len",
              "precision", "checkpointing", "compile", "lora_rank", "offload", "power_limit_w", "assumptions",
              "not_expressible", "stack", "eval_batch"}
"""``stack`` (optional): a variant of the framework's stack that this row's run used (a recipe its source
names, e.g. NeMo 25.04's fp8 current scaling: ``megatron-fp8cs``), in place of the framework's. ``eval_batch``: the
run's evaluation batch (all GPUs), for a framework whose logged throughput counts its evaluations (``eval_pauses``)."""


class NotExpressible(Exception):
    """A row the workbench cannot predict yet; the message is the reason the report prints."""


@dataclass(frozen=True)
class RowResult:
    """One scorable row: what was published, what the workbench predicts, or why it cannot."""

    id: str
    framework: str
    stack: str
    proxy: bool
    vendor: str
    gpu: str
    model: str
    family: str
    precision: str
    metric: str
    unit: str
    published: float
    predicted: float | None = None
    reason: str = ""
    """Why the row is not expressible (empty when predicted)."""
    bound: bool = False
    """Priced as the fused-step bound although a stack was named (outside its kernel tables)."""
    fits: bool = True
    notes: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.published - 1


def load_table(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_csv_text(path))))


def is_scorable(row: dict[str, str]) -> bool:
    return row["confidence"] in SCORED_CONFIDENCE and row["metric"] in SCORED_METRICS


MAPPING_SECTIONS = {"schema_version", "csv", "frameworks", "framework_assumptions", "models", "gpus",
                    "gpu_by_framework", "rows"}
FRAMEWORK_KEYS = {"stack", "proxy", "why", "eval_pauses"}


def validate_mapping(mapping: object, origin: str = str(MAPPING)) -> dict:
    """Check the row mapping before any row is priced: every model, GPU (variants included) and stack it names
    must be in the catalog, every row entry must use known keys. A typo is an error naming the section and key,
    never a row quietly reported as not expressible."""
    from workbench.hardware import get_gpu
    from workbench.models import get_model
    from workbench.stacks import get_stack

    if not isinstance(mapping, dict):
        raise SpecError(origin, "<top>", type(mapping).__name__, "a mapping with sections " + ", ".join(sorted(MAPPING_SECTIONS)))
    unknown = set(mapping) - MAPPING_SECTIONS
    if unknown:
        raise SpecError(origin, sorted(unknown)[0], "?", f"one of the sections {', '.join(sorted(MAPPING_SECTIONS))}")
    for section in ("frameworks", "models", "gpus", "rows"):
        if not isinstance(mapping.get(section), dict):
            raise SpecError(origin, section, mapping.get(section), "a mapping")
    for name, fw in mapping["frameworks"].items():
        if not isinstance(fw, dict) or "stack" not in fw or set(fw) - FRAMEWORK_KEYS:
            raise SpecError(origin, f"frameworks.{name}", fw, f"a mapping with 'stack' and optionally {', '.join(sorted(FRAMEWORK_KEYS - {'stack'}))}")
        try:
            get_stack(str(fw["stack"]))
        except UnknownNameError as e:
            raise SpecError(origin, f"frameworks.{name}.stack", fw["stack"], str(e)) from None
        if "eval_pauses" in fw:
            eval_pauses.EvalPauses.from_mapping(fw["eval_pauses"], f"frameworks.{name}.eval_pauses")
    for label, model in mapping["models"].items():
        try:
            get_model(str(model))
        except UnknownNameError as e:
            raise SpecError(origin, f"models.{label}", model, str(e)) from None
    gpu_entries = [(f"gpus.{k}", v) for k, v in mapping["gpus"].items()]
    by_framework = mapping.get("gpu_by_framework") or {}
    if not isinstance(by_framework, dict):
        raise SpecError(origin, "gpu_by_framework", by_framework, "a mapping framework -> {gpu column: catalog name}")
    for fw, table in by_framework.items():
        if fw not in mapping["frameworks"]:
            raise SpecError(origin, f"gpu_by_framework.{fw}", table, f"a framework of the frameworks section")
        if not isinstance(table, dict):
            raise SpecError(origin, f"gpu_by_framework.{fw}", table, "a mapping gpu column -> catalog name")
        gpu_entries += [(f"gpu_by_framework.{fw}.{k}", v) for k, v in table.items()]
    for where, gpu in gpu_entries:
        try:
            get_gpu(str(gpu))
        except UnknownNameError as e:
            raise SpecError(origin, where, gpu, str(e)) from None
    for rid, spec in mapping["rows"].items():
        if not isinstance(spec, dict):
            raise SpecError(origin, f"rows.{rid}", spec, "a mapping of step-shape fields")
        bad = set(spec) - SHAPE_KEYS
        if bad:
            raise SpecError(origin, f"rows.{rid}", sorted(bad)[0], f"one of {', '.join(sorted(SHAPE_KEYS))}")
        if "stack" in spec:
            try:
                get_stack(str(spec["stack"]))
            except UnknownNameError as e:
                raise SpecError(origin, f"rows.{rid}.stack", spec["stack"], str(e)) from None
    return mapping


def resolve_gpu(row: dict[str, str], mapping: dict) -> str:
    """The catalog name a row is priced on: the framework's variant for that GPU column when there is one
    (``gpu_by_framework``: a part the framework's tables ran on), else the plain ``gpus`` map."""
    variant = ((mapping.get("gpu_by_framework") or {}).get(row["framework"]) or {}).get(row["gpu"])
    return str(variant or _lookup(mapping, "gpus", row["gpu"], row["id"]))


def _lookup(mapping: dict, section: str, key: str, row_id: str) -> object:
    table = mapping.get(section) or {}
    if key not in table:
        raise SpecError(str(MAPPING), f"{section}", key, f"an entry for {key!r} (row {row_id})")
    return table[key]


def _family(model_name: str) -> str:
    return model_name.split("-")[0]


ABLATIONS: tuple[str, ...] = ("cp", "virtual_stages", "lora_rank", "zero1", "offload")
"""Features ``--without`` can switch off, to show what each adds (a row that needs one becomes not expressible)."""


def build_call(row: dict[str, str], mapping: dict, without: frozenset[str] = frozenset()
               ) -> tuple[str, str, TrainingConfig, str, bool | None]:
    """(model, gpu, config, stack, compile) for one row, or ``NotExpressible`` with the reason. ``without``: features
    (``ABLATIONS``) treated as absent from the workbench."""
    rid = row["id"]
    spec = (mapping.get("rows") or {}).get(rid)
    if spec is None:
        raise SpecError(str(MAPPING), "rows", rid, "an entry for every scorable row of the table")
    unknown = set(spec) - SHAPE_KEYS
    if unknown:
        raise SpecError(str(MAPPING), f"rows.{rid}", sorted(unknown)[0], f"one of {', '.join(sorted(SHAPE_KEYS))}")
    if "not_expressible" in spec:
        raise NotExpressible(str(spec["not_expressible"]))
    model = str(_lookup(mapping, "models", row["model"], rid))
    gpu = resolve_gpu(row, mapping)
    framework = _lookup(mapping, "frameworks", row["framework"], rid)
    par = {k: spec[k] for k in ("dp", "tp", "pp", "ep", "sharding")}
    cfg = {"micro_batch": spec["micro_batch"], "seq_len": spec["seq_len"], "precision": spec["precision"],
           "activation_checkpointing": spec["checkpointing"], "global_batch": spec["global_batch"]}
    for name, default, owner, label in FEATURES:
        value = spec.get(name, default)
        if value == default:
            continue
        if name in without or name not in {f.name for f in dataclasses.fields(owner)}:
            raise NotExpressible(f"needs {label}: {name}={value}")
        (par if owner is Parallelism else cfg)[name] = value
    if par["sharding"] == "zero1" and "zero1" in without:
        raise NotExpressible("needs zero1 sharding (Megatron's distributed optimizer)")
    parallelism = Parallelism(**par)
    gpus = 1
    for name in ("dp", "tp", "pp", "cp"):
        gpus *= int(spec.get(name, 1))
    if str(gpus) != row["gpus"]:
        raise SpecError(str(MAPPING), f"rows.{rid}", f"dp x tp x pp x cp = {gpus}", f"the row's gpus = {row['gpus']}")
    # the row's compile flag reaches the stacks that follow the run's (torchtitan and its variants, the job)
    stack = str(spec.get("stack", framework["stack"]))
    compile_ = spec.get("compile") if get_stack(stack).compile == "recipe" else None
    return model, gpu, TrainingConfig(parallelism=parallelism, **cfg), stack, compile_


def metric_value(prediction, metric: str) -> float:
    """The predicted figure in the row's metric (all four are per step, over the row's GPUs)."""
    s = prediction.summary
    if metric == "tokens_per_sec_per_gpu":
        return s.tokens_per_s / s.gpus
    if metric == "train_step_time":
        return s.step_time_s
    if metric == "train_throughput":
        return s.samples_per_s
    if metric == "tflops_per_gpu":
        return s.model_flops_per_step / s.step_time_s / s.gpus / 1e12
    raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(SCORED_METRICS)}")


def evaluate_row(row: dict[str, str], mapping: dict, without: frozenset[str] = frozenset()) -> RowResult:
    from workbench.hardware import get_gpu
    from workbench.predict import predict

    framework = (mapping.get("frameworks") or {}).get(row["framework"], {})
    model_name = str((mapping.get("models") or {}).get(row["model"], row["model"]))
    try:
        gpu_name = resolve_gpu(row, mapping)
    except SpecError:
        gpu_name = row["gpu"]
    try:
        vendor = get_gpu(gpu_name).vendor
    except WorkbenchError:
        vendor = "?"
    spec = (mapping.get("rows") or {}).get(row["id"]) or {}
    base = dict(id=row["id"], framework=row["framework"], stack=str(spec.get("stack", framework.get("stack", "?"))),
                proxy=bool(framework.get("proxy", False)), vendor=vendor, gpu=gpu_name, model=model_name,
                family=_family(model_name), precision=str(spec.get("precision", row["precision"])),
                metric=row["metric"], unit=row["unit"], published=float(row["value"]))
    try:
        model, gpu, cfg, stack, compile_ = build_call(row, mapping, without)
        p = predict(model, gpu, cfg, stack=stack, compile=compile_)
    except NotExpressible as e:
        return RowResult(**base, reason=str(e))
    except UnknownNameError:  # validate_mapping checked every name: this is a bug, not a row to skip
        raise
    except WorkbenchError as e:  # a configuration the model refuses (SpecError) or an implausible prediction
        return RowResult(**base, reason=str(e).splitlines()[0])
    bound = p.summary.priced_as_bound and stack != "ideal"
    predicted, notes = metric_value(p, row["metric"]), list(p.notes)
    if row["metric"] == "train_throughput" and "eval_pauses" in framework:
        # the logged interval counts the evaluations: each priced as the forward of a step at the eval batch
        pauses = eval_pauses.EvalPauses.from_mapping(framework["eval_pauses"], f"frameworks.{row['framework']}")
        if "eval_batch" not in spec:
            raise SpecError(str(MAPPING), f"rows.{row['id']}", "eval_batch", "the run's evaluation batch (eval_pauses)")
        eval_batch = int(spec["eval_batch"])
        evaluation = predict(model, gpu, eval_pauses.eval_config(cfg, eval_batch), stack=stack, compile=compile_)
        predicted = eval_pauses.logged_samples_per_s(pauses, p.summary.step_time_s, cfg.samples_per_step, eval_batch,
                                                     evaluation)
        notes.append(f"logged interval counts evaluation pauses: training alone {metric_value(p, row['metric']):.4g}")
    return RowResult(**base, predicted=predicted, bound=bound, fits=p.summary.memory.fits, notes="; ".join(notes))


def evaluate(table: Path, mapping_path: Path = MAPPING, without: frozenset[str] = frozenset()
             ) -> tuple[list[RowResult], list[tuple[str, list[str]]]]:
    """(scorable rows' results, time-to-train rows with the ids of their scored twins)."""
    mapping = validate_mapping(load_yaml(mapping_path, what="row mapping"), str(mapping_path))
    rows = load_table(table)
    missing = sorted(r["id"] for r in rows if is_scorable(r) and r["id"] not in mapping["rows"])
    if missing:
        raise SpecError(str(mapping_path), "rows", missing[0], f"an entry for every scorable row ({len(missing)} missing)")
    stray = sorted(set(mapping["rows"]) - {r["id"] for r in rows if is_scorable(r)})
    if stray:
        raise SpecError(str(mapping_path), f"rows.{stray[0]}", "?", "the id of a scorable row of the table")
    results = [evaluate_row(r, mapping, without) for r in rows if is_scorable(r)]
    scored = {r.id for r in results}
    twins = [(r["id"], sorted(i for i in scored if i.startswith(r["id"] + "-")))
             for r in rows if r["metric"] == TIME_TO_TRAIN and r["confidence"] in SCORED_CONFIDENCE]
    return results, twins


@dataclass(frozen=True)
class GroupScore:
    name: str
    rows: int
    expressed: int
    mape: float | None
    median_ape: float | None
    mean_error: float | None


def score(name: str, results: list[RowResult]) -> GroupScore:
    errors = [r.error for r in results if r.error is not None]
    if not errors:
        return GroupScore(name, len(results), 0, None, None, None)
    ape = [abs(e) for e in errors]
    return GroupScore(name, len(results), len(errors), statistics.fmean(ape), statistics.median(ape),
                      statistics.fmean(errors))


def grouped(results: list[RowResult], key: str) -> list[GroupScore]:
    names = sorted({getattr(r, key) for r in results})
    return [score(n, [r for r in results if getattr(r, key) == n]) for n in names]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}" if x < 0 else f"{x:.1%}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"


def targets(results: list[RowResult]) -> list[tuple[str, bool, str]]:
    overall = score("all", results)
    share = overall.expressed / overall.rows if overall.rows else 0.0
    out = [(f"expressed >= {TARGET_EXPRESSED:.0%}", share >= TARGET_EXPRESSED, f"{overall.expressed}/{overall.rows} = {share:.0%}"),
           (f"MAPE <= {TARGET_MAPE:.0%}", overall.mape is not None and overall.mape <= TARGET_MAPE, _pct(overall.mape))]
    for key in ("vendor", "stack"):
        for g in grouped(results, key):
            if g.expressed >= TARGET_GROUP_ROWS:
                out.append((f"{key} {g.name}: MAPE <= {TARGET_GROUP_MAPE:.0%}", g.mape <= TARGET_GROUP_MAPE,
                            f"{_pct(g.mape)} over {g.expressed} rows"))
    return out


def load_baseline(path: Path) -> dict[str, tuple[dict[str, str], float | None]]:
    """id -> (the row's fields, its error) from an earlier ``evaluation.csv``."""
    out = {}
    for row in load_table(path):
        out[row["id"]] = (row, float(row["error"]) if row.get("error") else None)
    return out


def render_comparison(results: list[RowResult], baseline: dict[str, tuple[dict[str, str], float | None]]) -> list[str]:
    """MAPE before (the baseline file) and after (these results) per vendor, stack, model family and precision.
    Groups are keyed by the row's group now; a row expressed before and not now counts in 'before' only."""
    lines = ["", "## Before and after the audit", "",
             f"Before: `{BASELINE.relative_to(ROOT)}` (the evaluation as it stood); after: this run. Rows no longer "
             "expressed leave the 'after' column (see Not expressible).", ""]
    for key, title in (("vendor", "vendor"), ("stack", "stack"), ("family", "model family"), ("precision", "precision")):
        lines += [f"| {title} | rows before | MAPE before | rows after | MAPE after |", "|---|---|---|---|---|"]
        for name in sorted({getattr(r, key) for r in results}):
            group = [r for r in results if getattr(r, key) == name]
            before = [abs(baseline[r.id][1]) for r in group if r.id in baseline and baseline[r.id][1] is not None]
            after = [abs(r.error) for r in group if r.error is not None]
            fmt = lambda xs: _pct(statistics.fmean(xs)) if xs else "-"  # noqa: E731
            lines.append(f"| {name} | {len(before)} | {fmt(before)} | {len(after)} | {fmt(after)} |")
        lines.append("")
    before_all = [abs(e) for _, e in baseline.values() if e is not None]
    after_all = [abs(r.error) for r in results if r.error is not None]
    lines.append(f"All rows: {len(before_all)} at MAPE {_pct(statistics.fmean(before_all)) if before_all else '-'} "
                 f"before, {len(after_all)} at {_pct(statistics.fmean(after_all)) if after_all else '-'} after.")
    both = [r for r in results if r.error is not None and r.id in baseline and baseline[r.id][1] is not None]
    if both:
        lines.append(f"The {len(both)} rows expressed both times: MAPE "
                     f"{_pct(statistics.fmean(abs(baseline[r.id][1]) for r in both))} before, "
                     f"{_pct(statistics.fmean(abs(r.error) for r in both))} after (what the mapping fixes changed, "
                     "apart from the rows taken out).")
    return lines


def render_markdown(results: list[RowResult], twins: list[tuple[str, list[str]]],
                    baseline: dict[str, tuple[dict[str, str], float | None]] | None = None, audit: str = "") -> str:
    overall = score("all", results)
    lines = [
        "# Published training results: predicted vs published",
        "",
        "Written by `benchmarks/published/evaluate.py` from `../shared/reference/published/training_throughput.csv` and "
        "the row mapping `benchmarks/published/rows.yaml`; from spec and stack data, no calibration profile. One stack "
        "constant is fitted: the megatron stacks' Blackwell fp8 GEMM factor (`gemm_fraction_scale.fp8.blackwell`, "
        "fitted on the fit rows of `benchmarks/published/te_fp8_blackwell_split.json`; its test rows are those of "
        "that file's `test_ids`). "
        "Error = predicted / published - 1. Stacks marked *proxy* stand in for a framework that has no stack yet "
        "(rows.yaml says which and why); *bound* = the named stack fell back to the fused-step bound.",
        "",
        f"**{overall.expressed} of {overall.rows} scorable rows expressed; MAPE {_pct(overall.mape)} "
        f"(median {_pct(overall.median_ape)}, mean signed error {_pct(overall.mean_error)}).**",
        "",
        "## Targets (issue 17)",
        "",
        "| target | met | value |",
        "|---|---|---|",
    ]
    lines += [f"| {t} | {'yes' if ok else 'no'} | {v} |" for t, ok, v in targets(results)]
    for key, title in (("vendor", "vendor"), ("stack", "stack"), ("framework", "framework"), ("family", "model family"),
                       ("precision", "precision"), ("gpu", "GPU")):
        lines += ["", f"## By {title}", "", f"| {title} | rows | expressed | MAPE | median APE | mean error |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {g.name} | {g.rows} | {g.expressed} | {_pct(g.mape)} | {_pct(g.median_ape)} | {_pct(g.mean_error)} |"
                  for g in grouped(results, key)]
    if baseline:
        lines += render_comparison(results, baseline)
    if audit:
        lines += ["", audit.strip()]
    lines += ["", "## Rows", "", "| id | stack | model | GPU | precision | metric | published | predicted | error | flags |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.predicted is None:
            continue
        flags = ", ".join(f for f, on in (("proxy", r.proxy), ("bound", r.bound), ("does not fit", not r.fits)) if on)
        lines.append(f"| {r.id} | {r.stack} | {r.model} | {r.gpu} | {r.precision} | {r.metric} | {_num(r.published)} "
                     f"| {_num(r.predicted)} | {_pct(r.error)} | {flags} |")
    missing = [r for r in results if r.predicted is None]
    lines += ["", f"## Not expressible ({len(missing)} rows)", "", "| id | model | GPU | reason |", "|---|---|---|---|"]
    lines += [f"| {r.id} | {r.model} | {r.gpu} | {r.reason.replace('|', '/')} |" for r in missing]
    lines += ["", "## Time-to-train rows (scored through their twins only)", "", "| id | scored twins |", "|---|---|"]
    lines += [f"| {rid} | {', '.join(ids) or 'none'} |" for rid, ids in twins]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("id", "framework", "stack", "proxy", "bound", "vendor", "gpu", "model", "family", "precision", "metric",
               "unit", "published", "predicted", "error", "fits", "reason", "notes")


def render_csv(results: list[RowResult]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in results:
        values = {**dataclasses.asdict(r), "error": r.error}
        writer.writerow(["" if values[c] is None else (f"{values[c]:.6g}" if isinstance(values[c], float) else values[c])
                         for c in CSV_COLUMNS])
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=ROOT.parent / "shared" / "reference" / "published" / "training_throughput.csv")
    parser.add_argument("--mapping", type=Path, default=MAPPING)
    parser.add_argument("--kernel-table", type=Path, default=kernels.TABLE,
                        help="the per-kernel table, priced through predict-ops (benchmarks/published/kernels.py)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--print", action="store_true", help="print the Markdown; write nothing")
    parser.add_argument("--baseline", type=Path, default=BASELINE,
                        help="an earlier evaluation.csv to compare against (before/after tables; skipped if absent)")
    parser.add_argument("--without", default="", help=f"comma-separated features to treat as absent (an ablation; "
                        f"implies --print unless --out is given): {', '.join(ABLATIONS)}")
    args = parser.parse_args(argv)
    without = frozenset(x for x in args.without.split(",") if x)
    if without - set(ABLATIONS):
        parser.error(f"--without {args.without!r}: expected names from {', '.join(ABLATIONS)}")
    results, twins = evaluate(args.table, args.mapping, without)
    baseline = load_baseline(args.baseline) if args.baseline and args.baseline.exists() else None
    audit = read_text(AUDIT) if AUDIT.exists() else ""
    kernel_results = kernels.evaluate(args.kernel_table)
    markdown = render_markdown(results, twins, baseline, audit) + "\n" + kernels.render_markdown(kernel_results)
    if args.print or (without and args.out == OUT_DIR):
        sys.stdout.write(markdown)
        return 0
    write_text(args.out / "EVALUATION.md", markdown, overwrite=True)
    write_text(args.out / "evaluation.csv", render_csv(results), overwrite=True)
    write_text(args.out / "kernels.csv", kernels.render_csv(kernel_results), overwrite=True)
    overall = score("all", results)
    print(f"{overall.expressed}/{overall.rows} expressed, MAPE {_pct(overall.mape)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
