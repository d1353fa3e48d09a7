"""How the achievable SDPA attention rate depends on head_dim, fitted on our own H200 measurements (issue 17).

Source: the 20 attention shapes of ``benchmarks/kernels/shapes.yaml`` (d64 and d128, MHA and GQA, seq 512-32k,
causal or not, batch 1-16) timed on one H200 with torch SDPA's backends: ``results/h200/kernels/broad/attention.csv``
(forward, and forward + backward, per backend) and ``results/h200/kernels/gluon_attention/gluon_attention.csv`` (a
second forward timing of the same calls). Backends: cuDNN (``sdpa_cudnn``; what an untagged op runs on Hopper,
torch >= 2.9) and FlashAttention-2 (``sdpa_flash``; ``sdpa_backend`` ``flash2``).

Per (shape, backend, pass) the *implied fraction* is the fraction of the dense peak that makes the workbench's time
of the op (``workbench.perf.attention``, spec constants: wave efficiency, launch) equal the measured time; forward:
the mean of the two forward timings; backward: forward + backward minus forward of the broad run. The model
``fraction = F x head_dim_factor(d, 128, d_half)`` (``workbench.perf.attention.head_dim_factor``) is fitted on the
fit ids of ``attention_head_dim_split.json`` only (least squares on log fractions: F closed form, d_half on a grid);
the test ids' errors are reported. A variant with a short-sequence ramp ``n / (n + c)`` (n: key blocks a query
tile visits) is fitted alongside, to show whether the ramp is needed.

    python benchmarks/kernels/attention_head_dim_fit.py --out /tmp/attn_head_dim
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROAD = ROOT / "benchmarks/results/h200/kernels/broad/attention.csv"
GLUON = ROOT / "benchmarks/results/h200/kernels/gluon_attention/gluon_attention.csv"
SPLIT = ROOT / "benchmarks/kernels/attention_head_dim_split.json"
BACKENDS = {"cudnn": "sdpa_cudnn", "flash2": "sdpa_flash"}
"""The workbench's name of a backend -> the measurement's column / impl prefix."""
D_HALF_GRID = [x * 0.5 for x in range(0, 1201)]  # 0 .. 600
RAMP_GRID = [x * 0.05 for x in range(0, 101)]  # 0 .. 5 key blocks


def _rows(path: Path) -> list[dict[str, str]]:
    from workbench.fileio import read_csv_text

    return list(csv.DictReader(io.StringIO(read_csv_text(path))))


def _shape(row: dict[str, str]):
    from workbench.graph.ops import AttentionShape

    return AttentionShape(int(row["batch"]), int(row["seq"]), int(row["heads_q"]), int(row["heads_kv"]),
                          int(row["head_dim"]), causal=row["causal"] in ("1", "true", "True"))


def key_blocks(shape) -> float:
    """Mean number of key blocks (``ATTENTION_BLOCK``) a query tile visits: all of them, or half + 1 causal."""
    from workbench.graph.ops import ATTENTION_BLOCK

    blocks = math.ceil(shape.seq / ATTENTION_BLOCK)
    return (blocks + 1) / 2 if shape.causal else blocks


def implied_fraction(shape, pass_: str, measured_s: float, gpu, constants) -> float:
    """The fraction that makes the workbench's time of one ``pass_`` kernel equal ``measured_s``: FLOPs over peak x
    fraction x wave efficiency, plus one launch (compute bound on every shape here)."""
    import dataclasses

    from workbench.graph.ops import attention
    from workbench.perf.attention import _wave_efficiency
    from workbench.precision import get_precision

    op = attention(f"attention.{pass_}", dataclasses.replace(shape, pass_=pass_), "bf16", phase=pass_)
    peak = gpu.peak_tflops(get_precision("bf16").peak_key) * 1e12
    busy = measured_s - constants["attention_launch_us"] * 1e-6
    return op.flops / (peak * _wave_efficiency(op.shape, gpu.compute_units.value) * busy)


def measurements(gpu, constants) -> list[dict]:
    """One record per (id, backend, pass): shape facts and the implied fraction."""
    gluon = {(r["id"], r["impl"]): float(r["ms"]) for r in _rows(GLUON) if r["impl"].startswith("sdpa_") and r["ms"]}
    broad: dict[str, dict[str, dict[str, str]]] = {}
    for r in _rows(BROAD):
        broad.setdefault(r["id"], {})[r["pass_"]] = r
    records = []
    for shape_id, passes in sorted(broad.items()):
        fwd, fwd_bwd = passes["fwd"], passes["fwd_bwd"]
        shape = _shape(fwd)
        for backend, column in BACKENDS.items():
            fwd_ms = [float(fwd[f"{column}_ms"])] + ([gluon[(shape_id, column)]] if (shape_id, column) in gluon else [])
            times = {"fwd": statistics.fmean(fwd_ms) * 1e-3,
                     "bwd": (float(fwd_bwd[f"{column}_ms"]) - float(fwd[f"{column}_ms"])) * 1e-3}
            for pass_, seconds in times.items():
                records.append({"id": shape_id, "name": fwd["name"], "backend": backend, "pass": pass_,
                                "head_dim": shape.head_dim, "seq": shape.seq, "causal": shape.causal,
                                "key_blocks": key_blocks(shape), "measured_ms": seconds * 1e3,
                                "fraction": implied_fraction(shape, pass_, seconds, gpu, constants)})
    return records


def model(record: dict, scale: float, d_half: float, ramp_blocks: float) -> float:
    from workbench.perf.attention import head_dim_factor

    n = record["key_blocks"]
    return scale * head_dim_factor(record["head_dim"], 128, d_half) * n / (n + ramp_blocks)


def fit(records: list[dict], ramp: bool) -> dict:
    """(F, d_half, c) minimising the squared log error over ``records``; c = 0 without the ramp."""
    best = None
    for c in (RAMP_GRID if ramp else [0.0]):
        for d_half in D_HALF_GRID:
            logs = [math.log(r["fraction"] / model(r, 1.0, d_half, c)) for r in records]
            scale = math.exp(statistics.fmean(logs))
            sse = sum((x - math.log(scale)) ** 2 for x in logs)
            if best is None or sse < best[0]:
                best = (sse, scale, d_half, c)
    _, scale, d_half, c = best
    return {"fraction_at_d128": round(scale, 4), "head_dim_half": d_half, "ramp_blocks": round(c, 3)}


def errors(records: list[dict], params: dict) -> list[float]:
    """Predicted over implied fraction - 1 per record (the time error, with its sign flipped, is about the same)."""
    return [model(r, params["fraction_at_d128"], params["head_dim_half"], params["ramp_blocks"]) / r["fraction"] - 1
            for r in records]


def _mape(xs: list[float]) -> float:
    return statistics.fmean(abs(x) for x in xs)


def run(out: Path) -> dict:
    from workbench.fileio import read_text, write_text
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for

    gpu = get_gpu("h200-sxm")
    constants = constants_for(gpu, calibrated=False)
    split = json.loads(read_text(SPLIT))
    records = measurements(gpu, constants)
    result: dict = {"source": [str(BROAD.relative_to(ROOT)), str(GLUON.relative_to(ROOT))],
                    "split": str(SPLIT.relative_to(ROOT)), "fit_ids": split["fit"], "test_ids": split["test"],
                    "launch_us": constants["attention_launch_us"], "fits": {}}
    lines = ["# SDPA attention rate vs head_dim on the H200", "",
             f"Source: `{result['source'][0]}`, `{result['source'][1]}`; split `{result['split']}` "
             f"(fit {', '.join(split['fit'])}; test {', '.join(split['test'])}). Implied fraction of the 989.4 "
             f"TFLOP/s dense bf16 peak after the spec model's wave efficiency and {result['launch_us']:g} us launch.",
             "", "| backend | pass | variant | F (d128) | d_half | ramp c (blocks) | fit MAPE | test MAPE | test max "
             "| test d64 MAPE | test s<=2k MAPE | d64/d128 factor |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        for pass_ in ("fwd", "bwd"):
            group = [r for r in records if r["backend"] == backend and r["pass"] == pass_]
            fit_rows = [r for r in group if r["id"] in split["fit"]]
            test_rows = [r for r in group if r["id"] in split["test"]]
            for variant in ("head_dim", "head_dim+ramp", "none"):
                if variant == "none":
                    scale = math.exp(statistics.fmean(math.log(r["fraction"]) for r in fit_rows))
                    params = {"fraction_at_d128": round(scale, 4), "head_dim_half": 0.0, "ramp_blocks": 0.0}
                else:
                    params = fit(fit_rows, ramp=variant.endswith("ramp"))
                test_err = errors(test_rows, params)
                d64 = [e for e, r in zip(test_err, test_rows) if r["head_dim"] == 64]
                short = [e for e, r in zip(test_err, test_rows) if r["seq"] <= 2048]
                from workbench.perf.attention import head_dim_factor

                factor = head_dim_factor(64, 128, params["head_dim_half"])
                entry = {**params, "fit_mape": _mape(errors(fit_rows, params)), "test_mape": _mape(test_err),
                         "test_max": max(abs(e) for e in test_err), "test_d64_mape": _mape(d64),
                         "test_short_mape": _mape(short) if short else None, "d64_factor": factor,
                         "test_errors": {r["id"]: round(e, 4) for r, e in zip(test_rows, test_err)}}
                result["fits"][f"{backend}.{pass_}.{variant}"] = entry
                lines.append(f"| {backend} | {pass_} | {variant} | {params['fraction_at_d128']:.3f} | "
                             f"{params['head_dim_half']:g} | {params['ramp_blocks']:g} | {entry['fit_mape']:.1%} | "
                             f"{entry['test_mape']:.1%} | {entry['test_max']:.1%} | {entry['test_d64_mape']:.1%} | "
                             f"{entry['test_short_mape']:.1%} | {factor:.3f} |")
    lines += ["", "## Implied fractions", "", "| id | name | backend | pass | d | seq | causal | key blocks | ms | "
              "fraction | split |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['id']} | {r['name']} | {r['backend']} | {r['pass']} | {r['head_dim']} | {r['seq']} | "
              f"{int(r['causal'])} | {r['key_blocks']:g} | {r['measured_ms']:.4g} | {r['fraction']:.3f} | "
              f"{'fit' if r['id'] in split['fit'] else 'test'} |" for r in records]
    result["records"] = records
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "fit.json", json.dumps(result, indent=1, default=float) + "\n")
    write_text(out / "REPORT.md", "\n".join(lines) + "\n")
    print("\n".join(lines[:4 + 1 + 2 + 12]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for fit.json and REPORT.md")
    run(parser.parse_args().out)


if __name__ == "__main__":
    main()
