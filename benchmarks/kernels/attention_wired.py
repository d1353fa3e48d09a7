"""What ``flash_attention``'s config=None forward runs on an H200, read off one measured run: per shape, the Gluon
kernel in its pinned config where ``attention_gluon.pinned_forward_config`` takes the shape, else the Triton
kernel (``ours`` of the run), each against the run's best SDPA backend (issue 20).

    python benchmarks/kernels/attention_wired.py benchmarks/results/h200/kernels/gluon_attention

Reads DIR/gluon_attention.csv (``attention_gluon_bench.py``'s rows: every impl timed side by side in one run) and
the fit/test split of ``attention_candidates_split.json``; writes DIR/WIRED.md. No GPU: the figures are the run's,
re-read under the rule, not a new measurement.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from workbench.kernels.attention_gluon import pinned_forward_config

SPLIT = Path(__file__).with_name("attention_candidates_split.json")


def wired_rows(rows: list[dict]) -> list[dict]:
    """Per shape id: (id, split-free fields, impl run, its ms, best SDPA ms, ratio)."""
    by_id: dict[str, list[dict]] = {}
    for row in rows:
        if not row["error"] and row["ms"]:
            by_id.setdefault(row["id"], []).append(row)
    out = []
    for shape_id, group in sorted(by_id.items()):
        first = group[0]
        d, causal, seq = int(first["head_dim"]), first["causal"] == "1", int(first["seq"])
        sdpa = min(float(r["ms"]) for r in group if r["impl"].startswith("sdpa_"))
        config = pinned_forward_config(d, causal, seq)
        if config is None:
            impl, chosen = "triton", [r for r in group if r["impl"] == "ours"]
        else:
            impl = "gluon"
            chosen = [r for r in group if r["impl"] == "gluon" and json.loads(r["config"] or "{}") == config]
        ms = float(chosen[0]["ms"]) if chosen else math.nan
        out.append(dict(id=shape_id, name=first["name"], head_dim=d, causal=causal, seq=seq, impl=impl, ms=ms,
                        sdpa_ms=sdpa, ratio=sdpa / ms))
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def report(rows: list[dict], split: dict) -> str:
    lines = ["# flash_attention's config=None forward as wired (H200, from one measured run)", "",
             "Gluon where `attention_gluon.pinned_forward_config` takes the shape (d=128 from 2,048, d=64 above "
             "4,096; rules set on the fit shapes), else the Triton kernel; ratio = best SDPA / that. Reproduce: "
             "`python benchmarks/kernels/attention_wired.py DIR`.", "",
             "| shapes | n | geomean | min | target |", "|---|---|---|---|---|"]
    for label, ids in (("test", set(split["test"])), ("fit", set(split["fit"])), ("all", None)):
        ratios = [r["ratio"] for r in rows if ids is None or r["id"] in ids]
        lines.append(f"| {label} | {len(ratios)} | {_geomean(ratios):.3f} | {min(ratios):.3f} | "
                     ">= 0.95 geomean, >= 0.75 min |")
    lines += ["", "| id | shape | d | causal | seq | runs | ms | best SDPA ms | ratio |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['id']} | {r['name']} | {r['head_dim']} | {int(r['causal'])} | {r['seq']} | {r['impl']} | "
              f"{r['ms']:.4f} | {r['sdpa_ms']:.4f} | {r['ratio']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder of attention_gluon_bench.py")
    args = parser.parse_args(argv)
    with open(args.run / "gluon_attention.csv", newline="") as f:
        rows = wired_rows(list(csv.DictReader(f)))
    text = report(rows, json.loads(SPLIT.read_text()))
    (args.run / "WIRED.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
