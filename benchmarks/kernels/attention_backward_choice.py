"""Which backward each (head_dim, causal) bucket of the attention kernel takes on sm_90 (issue 20), decided from a
committed ``attention_candidates.py`` run, on its FIT shapes only.

    python3 benchmarks/kernels/attention_backward_choice.py [--run DIR] [--out FILE]

Per fit shape the backward's time is estimated as fwd_bwd minus fwd: ours = ours(config=None) fwd_bwd - ours fwd;
one launch = the tutorial backward's fit pick (picks.json, group ('fwd_bwd', d, causal)) fwd_bwd - the tutorial
forward that row ran before it (the shape's fastest tutorial forward). A bucket takes the one-launch backward where
the geometric mean of ours / one launch over its fit shapes is above 1. The test shapes are then scored as shipped
after the choice: fwd_bwd = ours fwd_bwd where the bucket keeps ours, ours fwd + the one-launch backward estimate
where it switches; ratio = SDPA's best fwd_bwd / that. Writes a Markdown table (stdout, and FILE with --out); the
decision was pinned, measured on the H200 and not kept (BACKWARD_CHOICE.md, "Measured, and not kept").
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from workbench import fileio  # noqa: E402

RUN = ROOT / "benchmarks" / "results" / "h200" / "kernels" / "attention_candidates"
SPLIT = HERE / "attention_candidates_split.json"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in values) / len(values))


def load_run(run: Path) -> tuple[list[dict], dict]:
    """The run's candidates.csv rows (with a float ``ms`` where timed) and its picks keyed (pass, head_dim, causal)."""
    rows = list(csv.DictReader(io.StringIO(fileio.read_csv_text(run / "candidates.csv"))))
    for r in rows:
        r["ms"] = float(r["ms"]) if r["ms"] else None
    picks = {tuple(p["group"]): p["config"] for p in fileio.load_json(run / "picks.json", what="picks.json")}
    return rows, picks


def per_shape_times(rows: list[dict], picks: dict) -> dict[str, dict]:
    """{id: {head_dim, causal, sdpa, ours_fwd, ours_fwd_bwd, ours_bwd, one_launch_bwd}} in ms."""
    shapes: dict[str, dict] = {}
    for r in rows:
        s = shapes.setdefault(r["id"], dict(head_dim=int(r["head_dim"]), causal=r["causal"] == "1", sdpa={},
                                            tutorial_fwd={}, tutorial_fwd_bwd={}))
        if r["ms"] is None:
            continue
        if r["impl"].startswith("sdpa_"):
            s["sdpa"][r["pass_"]] = min(r["ms"], s["sdpa"].get(r["pass_"], math.inf))
        elif r["impl"] == "ours" and not r["config"]:
            s["ours_" + r["pass_"]] = r["ms"]
        elif r["impl"] == "tutorial":
            s["tutorial_" + r["pass_"]][r["config"]] = r["ms"]
    for s in shapes.values():
        pick = picks[("fwd_bwd", s["head_dim"], s["causal"])]
        row = next(((json.loads(c), ms) for c, ms in s["tutorial_fwd_bwd"].items() if json.loads(c)["bwd"] == pick),
                   None)
        s["ours_bwd"] = s["ours_fwd_bwd"] - s["ours_fwd"]
        if row is not None:
            config, ms = row
            s["one_launch_bwd"] = ms - s["tutorial_fwd"][json.dumps(config["fwd"], sort_keys=True)]
    return shapes


def choose(shapes: dict[str, dict], fit: list[str]) -> dict[tuple, dict]:
    """{(head_dim, causal): {speedup, fit, one_launch}}: speedup = geomean over the fit shapes of ours / one launch."""
    buckets: dict[tuple, list[str]] = {}
    for sid in fit:
        buckets.setdefault((shapes[sid]["head_dim"], shapes[sid]["causal"]), []).append(sid)
    out = {}
    for bucket, ids in sorted(buckets.items()):
        speedup = _geomean([shapes[i]["ours_bwd"] / shapes[i]["one_launch_bwd"] for i in ids])
        out[bucket] = dict(speedup=speedup, fit=ids, one_launch=speedup > 1.0)
    return out


def shipped_ratio(s: dict, one_launch: bool) -> float:
    """SDPA's best fwd_bwd over the fwd_bwd as shipped after the choice (estimated where the bucket switches)."""
    ms = s["ours_fwd"] + s["one_launch_bwd"] if one_launch else s["ours_fwd_bwd"]
    return s["sdpa"]["fwd_bwd"] / ms


def report(shapes: dict, choice: dict, split: dict, picks: dict, run: Path) -> str:
    lines = [f"# Attention backward per bucket, from `{run.relative_to(ROOT)}` (fit shapes only)", "",
             "| head_dim | causal | fit shapes | geomean ours bwd / one-launch bwd | backward | one-launch config |",
             "|---|---|---|---|---|---|"]
    for (d, causal), c in choice.items():
        config = json.dumps(picks[("fwd_bwd", d, causal)], sort_keys=True) if c["one_launch"] else ""
        lines.append(f"| {d} | {causal} | {', '.join(c['fit'])} | {c['speedup']:.3f} | "
                     f"{'one launch' if c['one_launch'] else 'two passes (ours)'} | `{config}` |")
    lines += ["", "## fwd_bwd ratio to SDPA's best, test shapes (as shipped after the choice; switched rows are "
              "ours fwd + the one-launch bwd estimate)", "", "| id | bucket | ours | after |", "|---|---|---|---|"]
    before, after = [], []
    for sid in split["test"]:
        s = shapes[sid]
        one = choice.get((s["head_dim"], s["causal"]), {}).get("one_launch", False)
        before.append(shipped_ratio(s, False))
        after.append(shipped_ratio(s, one))
        lines.append(f"| {sid} | d{s['head_dim']} {'causal' if s['causal'] else 'full'} | {before[-1]:.3f} | "
                     f"{after[-1]:.3f} |")
    lines += ["", f"Test geomean: ours {_geomean(before):.3f}, after {_geomean(after):.3f}; min {min(before):.3f} -> "
              f"{min(after):.3f} (issue-20 target: geomean >= 0.85, no shape below 0.75)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=RUN, help="a committed attention_candidates.py output folder")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    rows, picks = load_run(args.run)
    split = fileio.load_json(SPLIT, what="attention_candidates_split.json")
    shapes = per_shape_times(rows, picks)
    text = report(shapes, choose(shapes, split["fit"]), split, picks, args.run.resolve())
    print(text, end="")
    if args.out:
        fileio.write_text(args.out, text, overwrite=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
