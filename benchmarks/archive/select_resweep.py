"""Re-time a few bf16 GEMM shapes over the whole gemm.py config space, three passes, the way
``select_sweep.py`` times them (its inputs, correctness check and CUDA-graph timer): the worst held-out shapes
of the zero-warmup selector, to tell a real ranking from noise, and new fit-half shapes of their kind
(all sizes odd; N = 8 mod 16, whose output rows are 16-byte aligned but stored element by element), which the
fit half had few of (issue #4).

    python3 benchmarks/archive/select_resweep.py OUT_DIR          # about 2 minutes on an H200 (cold Triton cache: 3)

Writes OUT_DIR/select_resweep.csv: ``select_sweep.py``'s columns, one row per shape x config with the median of
the passes (plus the vendor library's row), which ``select_eval.py`` merges after the other sweeps (a shape
re-timed there replaces its earlier rows; the new shapes' ids start with ``fit-``, so
``workbench.select.sweeps`` fits them and never holds them out, and the held-out split is unchanged); and
OUT_DIR/select_resweep_passes.csv: every pass's time per config, to read the noise from.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "select"))  # select_shapes, select_sweep

import select_shapes  # noqa: E402
import select_sweep as sweep  # noqa: E402

from workbench.select.sweeps import FIT_ONLY_PREFIX  # noqa: E402

HELD_OUT_IDS = ("g149", "g141", "g175")
"""The held-out shapes with the lowest selector top-1 before and after the scalar-store fix (1999x2999x3999 nn,
3000x5000x777 nn, 1411x9797x6433 nt). Re-timed only: held-out rows never enter the fit."""
FIT_SHAPES = (
    dict(id=f"{FIT_ONLY_PREFIX}odd1", source="resweep all-odd", m=2501, n=3499, k=3001, layout="nn"),
    dict(id=f"{FIT_ONLY_PREFIX}odd2", source="resweep all-odd", m=1777, n=4001, k=2999, layout="nn"),
    dict(id=f"{FIT_ONLY_PREFIX}n8a", source="resweep n=8 mod 16", m=2600, n=6008, k=901, layout="nn"),
    dict(id=f"{FIT_ONLY_PREFIX}n8b", source="resweep n=8 mod 16", m=3500, n=4200, k=1544, layout="nn"),
    dict(id=f"{FIT_ONLY_PREFIX}n8c", source="resweep n=8 mod 16", m=2000, n=3000, k=2048, layout="nt"),
)
"""New fit-half shapes like the held-out misses, none of them a held-out shape or its transpose."""
PASSES = 3
TOLERANCE = 2e-2  # bf16, as select_sweep.py


def shapes_to_time() -> list[dict]:
    by_id = {s["id"]: s for s in select_shapes.gemm_shapes()}
    missing = [i for i in HELD_OUT_IDS if i not in by_id]
    if missing:
        raise SystemExit(f"select_shapes.gemm_shapes() has no {', '.join(missing)}; expected the ids of issue #4's "
                         "sweeps (was the shape list changed?)")
    return [by_id[i] for i in HELD_OUT_IDS] + [dict(s) for s in FIT_SHAPES]


def check_configs(shape: dict, runners: list) -> dict[int, dict]:
    """Per runner index: its row fields after one checked launch (rel_error, error); failures are not timed."""
    sets = sweep.gemm_inputs(shape, "bf16", "cuda")
    reference = sweep.gemm_reference(sets[0], "bf16")
    checked = {}
    for index, (_, _, fn) in enumerate(runners):
        row = dict(rel_error="", error="")
        try:
            error = sweep.relative_error(fn(*sets[0]), reference)
            row["rel_error"] = f"{error:.2e}"
            if error > TOLERANCE:
                row["error"] = f"wrong result: relative error {error:.2e} > {TOLERANCE}"
        except Exception as exc:  # noqa: BLE001 - a config that does not compile or fit is a result too
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        checked[index] = row
    return checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory (created)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--budget-s", type=float, default=170.0, help="start no further pass after this long")
    args = parser.parse_args(argv)
    import torch
    from workbench.kernels import gemm

    started = time.perf_counter()
    shapes = shapes_to_time()
    configs = gemm.config_space("cuda", dtype_bytes=2)
    sweep.precompile(sweep._compile_gemm, sweep.gemm_compile_jobs(shapes, "bf16", configs), args.workers)
    plan = []  # (shape, runners, checked rows, input sets)
    for shape in shapes:
        runners = [("triton", c, sweep.gemm_runner("bf16", c)) for c in configs]
        runners.append(("vendor", None, sweep.gemm_vendor("bf16")))
        plan.append((shape, runners, check_configs(shape, runners)))
    times: dict[tuple[str, int], list[float]] = {}
    for number in range(PASSES):  # whole passes over every shape, so that drift shows between passes
        if number and time.perf_counter() - started > args.budget_s:
            print(f"budget reached: {number} passes", flush=True)
            break
        for shape, runners, checked in plan:
            sets = sweep.gemm_inputs(shape, "bf16", "cuda", sweep.gemm_sets(shape, "bf16"))
            for index, (_, _, fn) in enumerate(runners):
                if not checked[index]["error"]:
                    times.setdefault((shape["id"], index), []).append(sweep.time_graph(fn, sets))
            del sets
            torch.cuda.empty_cache()
        print(f"pass {number + 1} done at {time.perf_counter() - started:.0f} s", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "select_resweep.csv").open("w", newline="") as merged, \
            (args.out / "select_resweep_passes.csv").open("w", newline="") as passes:
        rows = csv.DictWriter(merged, fieldnames=sweep.FIELDS)
        rows.writeheader()
        raw = csv.writer(passes)
        raw.writerow(["shape_id", "kind", "config", *[f"pass{i + 1}_ms" for i in range(PASSES)]])
        for shape, runners, checked in plan:
            base = {key: shape.get(key, "") for key in sweep.FIELDS if key in shape}
            base.update(part="gemm-bf16", shape_id=shape["id"], dtype="bf16")
            for index, (kind, config, _) in enumerate(runners):
                timed = times.get((shape["id"], index), [])
                config_text = json.dumps(config, sort_keys=True) if config else ""
                rows.writerow(dict(base, kind=kind, config=config_text, is_default=int(index == 0),
                                   ms=f"{statistics.median(timed) * 1e3:.5f}" if timed else "", **checked[index]))
                raw.writerow([shape["id"], kind, config_text, *[f"{t * 1e3:.5f}" for t in timed]])
            summarise(shape, runners, times)
    print(f"wrote {args.out}/select_resweep.csv and select_resweep_passes.csv in "
          f"{time.perf_counter() - started:.0f} s on {torch.cuda.get_device_name()}")
    return 0


def summarise(shape: dict, runners: list, times: dict) -> None:
    """The three fastest configs by median, and how far the passes spread (max / min - 1 over configs)."""
    from workbench.select.gemm import config_key

    medians = {config_key(c): statistics.median(times[(shape["id"], i)]) for i, (kind, c, _) in enumerate(runners)
               if kind == "triton" and (shape["id"], i) in times}
    spread = [max(t) / min(t) - 1 for (sid, _), t in times.items() if sid == shape["id"] and len(t) > 1]
    best = sorted(medians, key=medians.get)[:3]
    print(f"{shape['id']} {shape['m']}x{shape['n']}x{shape['k']} {shape['layout']}: "
          + ", ".join(f"{key} {medians[key] * 1e3:.4f} ms" for key in best)
          + (f"; pass spread median {statistics.median(spread):.1%}, max {max(spread):.1%}" if spread else ""),
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
