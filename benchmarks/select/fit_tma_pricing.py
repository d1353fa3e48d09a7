"""Price the TMA kernel's bf16 configs in the H200 selection profile from measurements (issue 20).

    python benchmarks/select/fit_tma_pricing.py [--write] [--out benchmarks/results/h200/select/tma_pricing]

Until now a bf16 TMA config was priced as its gemm.py twin (``workbench.select.gemm.tma_anchor``), so the two tied
and the space's order kept gemm.py, while on the DLRM short-K GEMMs the persistent TMA kernel ran at 0.88-1.00 of
cuBLAS against the pick's 0.54-0.84 (benchmarks/results/h200/kernels/skinny/REPORT.md). This script fits the TMA
family's two scales of ``gemm_model.tma_scaled`` (per-K-step terms, per-tile term) on the fit ids of
benchmarks/kernels/tma_pricing_split.json, only from those shapes' rows of the skinny sweep, and reports the test
ids apart: each shape's config=None pick before and after, its measured time where the sweep timed it, and the
ratio to cuBLAS; then the picks on the 72 broad bf16 shapes (measured where broad/gemm.csv or the sweep timed them).
With ``--write`` the per-config coefficients go into specs/calibration/h200-sxm-select.yaml (section gemm-2byte;
re-run this after ``select_eval.py --write-profile``, which refits that section without them).

The targets are in the model's currency: a sweep shape's TMA time is multiplied by that shape's model bias (the
geometric mean of predicted / measured over the gemm.py configs timed on it). The ranking compares TMA against
gemm.py's predictions, and on short-K shapes the profile predicts gemm.py 0.3-0.9 of its measured time; fitted to
raw times, a TMA config could be measured faster than every gemm.py config and still rank below them. Both
variants are scored on the fit half; the better one (by the geometric mean of the measured pick ratio) is kept
and only it is reported on the test half.

tf32 (fp32 operands multiplied as tf32): the selector does not rank fp32 at run time (config=None runs a static
default), so this script chooses a TMA tf32 default on the fit half (the config with the best geometric-mean ratio
to cuBLAS over the fit shapes) and reports it on the test half against gemm.py's default.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workbench.fileio import allow_specs_write, load_yaml, read_csv_text, read_text, write_text  # noqa: E402
from workbench.hardware import get_gpu  # noqa: E402
from workbench.kernels.spaces import tma_config_space, tma_eligible  # noqa: E402
from workbench.paths import shipped_calibration_dir  # noqa: E402
from workbench.perf.efficiency import default_constants, profile_path  # noqa: E402
from workbench.select import gemm as gemm_model  # noqa: E402
from workbench.select import rank_configs, select_config  # noqa: E402
from workbench.select.profile import load_selection_profile, nnls, write_selection_profile  # noqa: E402

GPU = "h200-sxm"
SPLIT = ROOT / "benchmarks/kernels/tma_pricing_split.json"
SWEEP = ROOT / "benchmarks/results/h200/kernels/skinny/sweep.csv"
SUMMARY = ROOT / "benchmarks/results/h200/kernels/skinny/summary.csv"
BROAD = ROOT / "benchmarks/results/h200/kernels/broad/gemm.csv"
SECTION = "gemm-2byte"
TMA_MIN_MACS = 2**32
"""``workbench.kernels.dispatch.TMA_MIN_MACS`` (config=None offers bf16 TMA configs from this many multiply-adds;
copied so that this script runs without torch: a test checks that the two agree)."""


def read_rows(path: Path) -> list[dict]:
    import io
    return list(csv.DictReader(io.StringIO(read_csv_text(path), newline="")))


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def tma_offered(shape: dict) -> bool:
    """Whether config=None ranks TMA configs for this bf16 call (``dispatch._tma_takes`` for contiguous operands)."""
    m, n, k, layout = shape["m"], shape["n"], shape["k"], shape["layout"]
    return m * n * k >= TMA_MIN_MACS and layout in ("nn", "nt") and tma_eligible(m, n, k, layout, 2)


def pick(shape: dict) -> str:
    """The config=None pick's key for a bf16 shape under the profile read now."""
    return select_config("gemm", {"m": shape["m"], "n": shape["n"], "k": shape["k"]}, "bf16", GPU,
                         layout=shape["layout"], tma=tma_offered(shape), gluon=False).key


def predicted_s(shape: dict, config: dict) -> float:
    return rank_configs("gemm", {"m": shape["m"], "n": shape["n"], "k": shape["k"]}, "bf16", GPU,
                        layout=shape["layout"], configs=[config])[0].time_s


def model_bias(shape: dict, rows: list[dict]) -> float:
    """Predicted / measured over the gemm.py configs timed on this shape (geometric mean)."""
    return geomean(predicted_s(shape, json.loads(r["config_json"])) / (float(r["ms"]) * 1e-3)
                   for r in rows if r["family"] == "gemm")


def fit_scales(samples: list[tuple[dict, dict, float]], table: dict, gpu) -> tuple[float, float]:
    """(step_scale, tile_scale) minimising the relative error of s * step part + t * tile part + launch against
    the targets (seconds), the parts from each TMA config's twin (``tma_anchor``) and its terms on the shape."""
    constants = default_constants(gpu)
    units = gpu.compute_units.value
    rows, targets = [], []
    for shape, config, target in samples:
        m, n, k, layout = shape["m"], shape["n"], shape["k"], shape["layout"]
        terms = gemm_model.terms(config, m, n, k, layout, 2, units, gemm_model.occupancy(config, gpu, 2))
        twin = gemm_model.tma_anchor(config, table)
        target -= gemm_model.padding_s(m, n, k, layout, 2, gpu, constants)
        parts = {"step": 0.0, "tile": 0.0, "rest": 0.0}
        for term, c, x in zip(gemm_model.TERMS, twin, terms):
            part = "step" if term in gemm_model.STEP_TERMS else "tile" if term == "tiles_per_unit" else "rest"
            parts[part] += c * x
        rows.append([parts["step"] / target, parts["tile"] / target])
        targets.append(1.0 - parts["rest"] / target)
    step, tile = nnls(rows, targets)
    return step, tile


def tma_section(table: dict, step: float, tile: float, fitted_on: str) -> dict:
    configs = dict(table)
    for config in tma_config_space(2, warp_specialize=False):
        configs[gemm_model.config_key(config)] = [float(f"{v:.6g}") for v in
                                                  gemm_model.tma_scaled(config, table, step, tile)]
    return {"terms": list(gemm_model.TERMS), "fitted_on": fitted_on, "configs": configs}


def without_tma(table: dict) -> dict:
    return {key: value for key, value in table.items() if not key.startswith("tma ")}


def shape_rows(sweep: list[dict], dtype: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in sweep:
        if row["dtype"] == dtype and row["family"] != "pick" and not row["error"] and float(row["ms"] or 0) > 0:
            out.setdefault(row["id"], []).append(row)
    return out


def measured(shape_id: str, key: str, timed: dict, broad_pick: dict) -> tuple[float, float] | None:
    """(ms, ratio to the vendor) of ``key`` on ``shape_id`` from the sweep, else from the broad run's pick."""
    for row in timed.get(shape_id, []):
        if row["config"] == key:
            return float(row["ms"]), float(row["ratio"])
    row = broad_pick.get(shape_id)
    if row is not None and row["ours_config"] == key and float(row["ours_ms"] or 0) > 0:
        return float(row["ours_ms"]), float(row["vendor_ms"]) / float(row["ours_ms"])
    return None


def evaluate(ids: list[str], shapes: dict, timed: dict, broad_pick: dict) -> dict[str, dict]:
    out = {}
    for shape_id in ids:
        key = pick(shapes[shape_id])
        out[shape_id] = {"pick": key, "measured": measured(shape_id, key, timed, broad_pick)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the fitted configs into the shipped profile")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/h200/select/tma_pricing")
    args = parser.parse_args(argv)
    gpu = get_gpu(GPU)
    split = json.loads(read_text(SPLIT))
    fit_ids, test_ids = set(split["fit"]), set(split["test"])
    sweep = read_rows(SWEEP)
    timed = shape_rows(sweep, "bf16")
    broad = [r for r in read_rows(BROAD) if r["dtype"] == "bf16"]
    broad_pick = {r["id"]: r for r in broad}
    shapes = {r["id"]: dict(id=r["id"], name=r["name"], m=int(r["m"]), n=int(r["n"]), k=int(r["k"]),
                            layout=r["layout"]) for r in broad}
    sweep_ids = sorted(timed, key=lambda i: int(i[1:]))

    # Every variant is scored under a scratch calibration directory holding the profile being tried (and the
    # GPU's vendor-model profile beside it).
    shipped = shipped_calibration_dir() / f"{gpu.name}-select.yaml"
    scratch = Path(tempfile.mkdtemp(prefix="tma-pricing-"))
    shutil.copy(profile_path(gpu), scratch / profile_path(gpu).name)
    shutil.copy(shipped, scratch / shipped.name)
    os.environ["WORKBENCH_CALIBRATION_DIR"] = str(scratch)
    base = without_tma(load_selection_profile(gpu, "gemm", 2, shipped))
    base_fitted_on = load_yaml(shipped)["kernels"][SECTION]["fitted_on"].split(" + TMA bf16:")[0]

    def use(section: dict | None) -> None:
        """Score with ``section`` as the profile's gemm-2byte (None: without TMA configs, as before)."""
        section = section or {"terms": list(gemm_model.TERMS), "fitted_on": base_fitted_on, "configs": base}
        write_selection_profile(gpu, {SECTION: section}, scratch / shipped.name, source="fit_tma_pricing.py scratch",
                                overwrite=True)

    use(None)
    before = evaluate(sorted(shapes, key=lambda i: int(i[1:])), shapes, timed, broad_pick)
    bias = {i: model_bias(shapes[i], timed[i]) for i in sweep_ids if i in fit_ids}
    variants = {}
    for name, scaled in (("model currency", True), ("raw times", False)):
        samples = [(shapes[i], json.loads(r["config_json"]), float(r["ms"]) * 1e-3 * (bias[i] if scaled else 1.0))
                   for i in sweep_ids if i in fit_ids for r in timed[i] if r["family"] == "tma"]
        step, tile = fit_scales(samples, base, gpu)
        use(tma_section(base, step, tile, "scratch"))
        picks = evaluate([i for i in sweep_ids if i in fit_ids], shapes, timed, broad_pick)
        score = geomean(p["measured"][1] for p in picks.values() if p["measured"])
        variants[name] = dict(step=step, tile=tile, samples=len(samples), fit_geomean=score, picks=picks,
                              untimed=sum(p["measured"] is None for p in picks.values()))
        print(f"{name}: step x{step:.4f} tile x{tile:.4f} on {len(samples)} timings; fit-half pick geomean "
              f"{score:.3f} ({variants[name]['untimed']} untimed)", flush=True)
    chosen = max(variants, key=lambda v: (variants[v]["fit_geomean"], -variants[v]["untimed"]))
    step, tile = variants[chosen]["step"], variants[chosen]["tile"]
    fitted_on = (f"{base_fitted_on} + TMA bf16: gemm_model.tma_scaled x{step:.4g} per K step, x{tile:.4g} per tile, "
                 f"fitted by benchmarks/select/fit_tma_pricing.py ({chosen}) on {variants[chosen]['samples']} timings "
                 f"of the fit ids of benchmarks/kernels/tma_pricing_split.json in kernels/skinny/sweep.csv")
    section = tma_section(base, step, tile, fitted_on)
    use(section)
    after = evaluate(sorted(shapes, key=lambda i: int(i[1:])), shapes, timed, broad_pick)
    del os.environ["WORKBENCH_CALIBRATION_DIR"]
    if args.write:
        with allow_specs_write():
            write_selection_profile(gpu, {SECTION: section}, shipped_calibration_dir() / shipped.name,
                                    source=load_yaml(shipped)["source"], overwrite=True)
        print("wrote", shipped_calibration_dir() / shipped.name)
    tf32 = tf32_default(sweep, split)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "REPORT.md", report(variants, chosen, before, after, shapes, split, sweep_ids, tf32, argv),
               overwrite=True)
    write_text(args.out / "picks.csv", picks_csv(before, after, shapes, split), overwrite=True)
    print("wrote", args.out / "REPORT.md")
    return 0


def tf32_default(sweep: list[dict], split: dict) -> dict:
    """The TMA tf32 config with the best geometric-mean ratio over the fit shapes, and per test shape its ratio
    against gemm.py's static default (the sweep's pick row)."""
    rows = shape_rows(sweep, "tf32")
    picks = {r["id"]: r for r in sweep if r["dtype"] == "tf32" and r["family"] == "pick"}
    fit = [i for i in rows if i in split["fit"]]
    keys = sorted({r["config"] for i in fit for r in rows[i] if r["family"] == "tma"})
    ratio = lambda i, key: next((float(r["ratio"]) for r in rows[i] if r["config"] == key), float("nan"))  # noqa: E731
    by_key = {key: geomean(ratio(i, key) for i in fit) for key in keys}
    chosen = max(by_key, key=by_key.get)
    config = next(json.loads(r["config_json"]) for i in fit for r in rows[i] if r["config"] == chosen)
    per_shape = {i: {"default": float(picks[i]["ratio"]), "tma": ratio(i, chosen), "fit": i in split["fit"]}
                 for i in rows}
    return dict(chosen=chosen, config=config, fit_geomeans=by_key, per_shape=per_shape)


def _ratio(entry) -> str:
    return f"{entry['measured'][1]:.2f}" if entry["measured"] else "not timed"


def _ms(entry) -> str:
    return f"{entry['measured'][0]:.4f}" if entry["measured"] else "not timed"


def report(variants, chosen, before, after, shapes, split, sweep_ids, tf32, argv) -> str:
    lines = ["# Pricing the TMA kernel's bf16 configs from measurements (issue 20)", "",
             f"`python benchmarks/select/{Path(__file__).name} {' '.join(argv or sys.argv[1:])}` (CPU only: the "
             "times are those of benchmarks/results/h200/kernels/skinny/sweep.csv and broad/gemm.csv, H200).", "",
             f"Split: benchmarks/kernels/tma_pricing_split.json ({split['rule']})", "",
             "## The fit (fit ids only)", "",
             "| targets | step scale | tile scale | timings | fit-half pick geomean | fit-half picks not timed |",
             "|---|---|---|---|---|---|"]
    for name, v in variants.items():
        lines.append(f"| {name}{' (kept)' if name == chosen else ''} | {v['step']:.4f} | {v['tile']:.4f} | "
                     f"{v['samples']} | {v['fit_geomean']:.3f} | {v['untimed']} |")
    for half in ("fit", "test"):
        ids = [i for i in sweep_ids if i in split[half]]
        lines += ["", f"## Sweep shapes, {half} half: config=None pick before / after", "",
                  "| id | name | m x n x k | layout | pick before | ms | ratio | pick after | ms | ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for i in ids:
            s, b, a = shapes[i], before[i], after[i]
            lines.append(f"| {i} | {s['name']} | {s['m']}x{s['n']}x{s['k']} | {s['layout']} | {b['pick']} | "
                         f"{_ms(b)} | {_ratio(b)} | {a['pick']} | {_ms(a)} | {_ratio(a)} |")
        both = [i for i in ids if before[i]["measured"] and after[i]["measured"]]
        lines += ["", f"Geometric mean over the {len(both)} of {len(ids)} shapes timed before and after: "
                  f"{geomean(before[i]['measured'][1] for i in both):.3f} -> "
                  f"{geomean(after[i]['measured'][1] for i in both):.3f}; min "
                  f"{min((before[i]['measured'][1] for i in both), default=float('nan')):.3f} -> "
                  f"{min((after[i]['measured'][1] for i in both), default=float('nan')):.3f}."]
    moved = [i for i in before if before[i]["pick"] != after[i]["pick"]]
    with_time = [i for i in moved if after[i]["measured"]]
    lines += ["", "## The 72 broad bf16 shapes", "",
              f"{len(moved)} picks change; {len(with_time)} of the new picks have a measurement (broad/gemm.csv's "
              "pick or a sweep row), the rest are predictions only.", "",
              "| id | half | name | m x n x k | layout | before | ratio | after | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for i in moved:
        s = shapes[i]
        half = "fit" if i in split["fit"] else "test"
        lines.append(f"| {i} | {half} | {s['name']} | {s['m']}x{s['n']}x{s['k']} | {s['layout']} | {before[i]['pick']} | "
                     f"{_ratio(before[i])} | {after[i]['pick']} | {_ratio(after[i])} |")
    lines += ["", "## tf32 (config=None's static default)", "",
              f"Chosen on the fit half: `{tf32['chosen']}` (fit-half geometric mean of ratio to cuBLAS per TMA config: "
              + ", ".join(f"{k} {v:.3f}" for k, v in tf32["fit_geomeans"].items()) + ").", "",
              "| shape | half | gemm.py default ratio | TMA default ratio |", "|---|---|---|---|"]
    for i, v in tf32["per_shape"].items():
        lines.append(f"| {i} | {'fit' if v['fit'] else 'test'} | {v['default']:.3f} | {v['tma']:.3f} |")
    test = [v for v in tf32["per_shape"].values() if not v["fit"]]
    lines += ["", f"Test half geometric mean: gemm.py default {geomean(v['default'] for v in test):.3f}, TMA "
              f"{geomean(v['tma'] for v in test):.3f}; TMA wins on {sum(v['tma'] > v['default'] for v in test)} of "
              f"{len(test)} test shapes."]
    return "\n".join(lines) + "\n"


def picks_csv(before, after, shapes, split) -> str:
    lines = ["id,half,name,m,n,k,layout,pick_before,ms_before,ratio_before,pick_after,ms_after,ratio_after"]
    for i in before:
        s, b, a = shapes[i], before[i], after[i]
        cells = lambda e: (f"{e['measured'][0]:.6g},{e['measured'][1]:.6g}" if e["measured"] else ",")  # noqa: E731
        lines.append(f"{i},{'fit' if i in split['fit'] else 'test'},{s['name']},{s['m']},{s['n']},{s['k']},"
                     f"{s['layout']},{b['pick']},{cells(b)},{a['pick']},{cells(a)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
