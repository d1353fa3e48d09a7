"""Monotonicity sweep: more of any GPU resource never makes a training step slower, and more HBM never makes a
configuration stop fitting.

Every configuration of a grid (catalog models x catalog GPUs x micro-batch x sequence length x GPU count x
sharding x precision) is predicted on the catalog GPU and on copies with one numeric figure of its GPU file
(``workbench.hardware.GPU``: every peak TFLOP/s per precision, HBM bandwidth and capacity, caches, clocks, compute
units, shared memory, registers, scale-up and scale-out bandwidth, scale-up domain, TDP, measured ceilings) scaled
up by each factor of ``FACTORS``. A violation is a scaled-up step slower than the base by more than ``TOLERANCE``
(relative), a configuration that fits but no longer does with more HBM, or a smaller largest micro-batch.
``tests/perf/test_properties.py`` runs the same check on a small hypothesis budget; this is the big one-off run.

    python benchmarks/model/monotonicity_sweep.py --jobs 16   # ~1.5 min on 16 cores (~15 min on one); writes
                                                        # benchmarks/results/monotonicity_sweep.md
    python benchmarks/model/monotonicity_sweep.py --calibrated --jobs 16 --out benchmarks/results/monotonicity_sweep_calibrated.md
    python benchmarks/model/monotonicity_sweep.py --quick     # a few seconds: one GPU count, one factor

``compute_units`` is scaled together with the peaks (more units of the same kind); alone, at a fixed peak, more
units means the same FLOP/s split over more, slower units, and the tail wave of a GEMM or attention grid can only
get worse (``GRANULES``): the sweep reports that case too (``compute_units_alone``), as expected behaviour, not as a
violation. ``warp_size`` and ``matrix_instruction_mnk`` are granules, not amounts: larger is coarser padding.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

from workbench.config import Parallelism, TrainingConfig
from workbench.errors import WorkbenchError
from workbench.graph.execution import Execution
from workbench.hardware import list_gpus
from workbench.hardware_scaling import GRANULES, resource_fields, scaled
from workbench.models import list_models
from workbench.recipe.schema import SHARDINGS as RECIPE_SHARDINGS

FACTORS = (1.1, 2.0, 10.0)
TOLERANCE = 1e-9
"""Relative: a scaled-up step may be slower than the base by float rounding only."""
OUT = Path(__file__).resolve().parents[1] / "results" / "monotonicity_sweep.md"

CAPACITY = "hbm_capacity_gb"


def grid(quick: bool = False):
    """(model, GPU, TrainingConfig, Execution or None) of the sweep; precisions a GPU lacks are left out. A
    transformer on several GPUs is also swept with gradient accumulation (4 micro-batches: the forward edge repeats)
    and as the reference job runs it (``Execution(compile=False)``: eager ops, FSDP2 copies)."""
    counts = (8,) if quick else (1, 8, 64)
    for model, gpu in itertools.product(list_models(), list_gpus()):
        if model.kind == "transformer":
            batches, seqs, shardings = (1, 4), (128, 2048), RECIPE_SHARDINGS
        elif model.kind == "dlrm":
            batches, seqs, shardings = (1024, 65536), (0,), ("ddp",)
        else:
            batches, seqs, shardings = (8, 64), (128, 2048), ("ddp",)
        precisions = [p for p in ("bf16", "fp8") if p != "fp8" or "fp8" in gpu.peak_dense_tflops]
        for mb, seq, n, sharding, precision in itertools.product(batches, seqs, counts, shardings, precisions):
            if quick and (mb, seq) != (batches[0], seqs[0]):
                continue
            cfg = TrainingConfig(mb, seq, precision, Parallelism.data_parallel(n, sharding))
            yield model, gpu, cfg, None
            if model.kind == "transformer" and n > 1 and not quick:
                yield model, gpu, dataclasses.replace(cfg, global_batch=4 * mb * n), None
                yield model, gpu, cfg, Execution(compile=False)


def check(base, model, gpu, cfg, fields, factors, predict) -> tuple[dict, list[dict]]:
    """Predict every scaled copy against the ``base`` prediction; (per-field counts, violations)."""
    checked: dict[str, int] = defaultdict(int)
    violations = []
    for field, factor in itertools.product(fields, factors):
        try:
            more = predict(model, scaled(gpu, field, factor), cfg)
        except WorkbenchError as exc:  # a scaled copy that cannot be predicted is a finding too
            violations.append({"field": field, "factor": factor, "kind": "error", "detail": str(exc)[:200]})
            continue
        checked[field] += 1
        slower = more.summary.step_time_s / base.summary.step_time_s - 1
        if slower > TOLERANCE:
            violations.append({"field": field, "factor": factor, "kind": "slower", "relative": slower})
        if field == CAPACITY and (base.summary.memory.fits and not more.summary.memory.fits
                                  or more.summary.max_micro_batch < base.summary.max_micro_batch):
            violations.append({"field": field, "factor": factor, "kind": "fit lost", "relative": 0.0})
    return checked, violations


def describe(model, gpu, cfg, execution) -> str:
    p = cfg.parallelism
    return (f"{model.name}, {gpu.name}, micro-batch {cfg.micro_batch}, seq {cfg.seq_len or 'default'}, "
            f"{p.gpus} GPUs {p.sharding}, {cfg.precision}"
            f"{f', global batch {cfg.global_batch}' if cfg.global_batch else ''}{', as the job runs it' if execution else ''}")


def _sweep_point(point, calibrated: bool = False, factors: tuple[float, ...] = FACTORS) -> dict:
    """One grid point: its per-field counts, violations and compute_units_alone slowdowns, or why it was skipped."""
    from workbench.predict import predict

    model, gpu, cfg, execution = point
    at = partial(predict, calibrated=calibrated, execution=execution)
    try:
        base = at(model, gpu, cfg)
    except WorkbenchError as exc:  # a configuration the model cannot honour
        return {"skipped": type(exc).__name__}
    counts, found = check(base, model, gpu, cfg, resource_fields(gpu), factors, at)
    _, alone = check(base, model, gpu, cfg, ["compute_units_alone"], factors, at)
    label = describe(model, gpu, cfg, execution)
    return {"counts": dict(counts), "violations": [{**v, "config": label} for v in found],
            "alone_slower": sum(1 for v in alone if v["kind"] == "slower")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one GPU count, one factor (a smoke run)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the report (default {OUT})")
    parser.add_argument("--label", default="", help="a line for the report's header (e.g. which code ran)")
    parser.add_argument("--calibrated", action="store_true",
                        help="only the GPUs with a calibration profile, predicted with it (the fitted constants)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    args = parser.parse_args(argv)
    from workbench.perf.efficiency import profile_path

    factors = (2.0,) if args.quick else FACTORS
    points = [p for p in grid(args.quick) if not args.calibrated or profile_path(p[1]).exists()]
    work = partial(_sweep_point, calibrated=args.calibrated, factors=factors)
    start = time.perf_counter()
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(work, points, chunksize=16)
    else:
        results = [work(p) for p in points]
    seconds = time.perf_counter() - start

    configs = evaluations = alone_slower = 0
    checked: dict[str, int] = defaultdict(int)
    violations: dict[str, list] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    for r in results:  # in grid order
        if "skipped" in r:
            skipped[r["skipped"]] += 1
            continue
        configs += 1
        for field, n in r["counts"].items():
            checked[field] += n
            evaluations += n
        for v in r["violations"]:
            violations[v["field"]].append(v)
        alone_slower += r["alone_slower"]

    families = sorted({f.split(".")[0] if f.startswith(("peak_dense_tflops", "measured")) else f for f in checked})
    lines = [
        "# Monotonicity sweep: more of a GPU resource is never slower", "",
        f"Command: `python benchmarks/model/monotonicity_sweep.py{' --quick' if args.quick else ''}"
        f"{' --calibrated' if args.calibrated else ''}`"
        f"{f' ({args.label})' if args.label else ''}. {configs} configurations (catalog models x GPUs x micro-batch x "
        f"sequence x GPU count x sharding x precision; transformers on several GPUs also with 4-way gradient "
        f"accumulation and as the reference job runs them), each figure scaled by {', '.join(f'x{f:g}' for f in factors)}: "
        f"{evaluations} scaled predictions in {seconds:.0f} s ({args.jobs} process(es)). A violation: a step slower than the base by more than "
        f"{TOLERANCE:g} (relative), or (HBM capacity) a configuration that stops fitting or a smaller largest "
        "micro-batch.", "",
        "| field | scaled predictions | violations | worst slowdown | first example (grid order) |", "|---|---|---|---|---|",
    ]
    for family in families:
        fields = [f for f in checked if f == family or f.startswith(family + ".")]
        found = [v for f in fields for v in violations.get(f, [])]
        worst = max((v.get("relative", 0.0) for v in found), default=0.0)
        example = found[0]["config"] + f" ({found[0]['field']} x{found[0]['factor']:g})" if found else ""
        lines.append(f"| {family}{'.*' if len(fields) > 1 or fields != [family] else ''} | "
                     f"{sum(checked[f] for f in fields)} | {len(found)} | {worst:+.3%} | {example} |")
    lines += ["", f"Not amounts, so not violations: `compute_units` alone (peaks fixed) made "
              f"{alone_slower} of {configs * len(factors)} steps slower "
              f"({GRANULES['compute_units_alone']}); " + "; ".join(
                  f"`{k}`: {v}" for k, v in GRANULES.items() if k != "compute_units_alone") + ".", ""]
    if skipped:
        lines += [f"Grid points the model refuses (not counted): "
                  f"{', '.join(f'{n} ({k})' for k, n in sorted(skipped.items()))}.", ""]
    total = sum(len(v) for v in violations.values())
    lines.append(f"Total violations: {total}.")
    if total:
        every = [v for field in sorted(violations) for v in violations[field]]
        lines += ["", f"## Violations (the {min(total, 40)} largest)", "", "| field | factor | kind | change | configuration |",
                  "|---|---|---|---|---|"]
        for v in sorted(every, key=lambda v: -v.get("relative", 0.0))[:40]:
            lines.append(f"| {v['field']} | x{v['factor']:g} | {v['kind']} | {v.get('relative', 0.0):+.4%} | "
                         f"{v['config']}{': ' + v['detail'] if 'detail' in v else ''} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
