"""How far apart are two runs of the *same* recipe at the *same* seed? A check of the fp8 convergence rule's premise.

The fp8 proof (``train_proof.py --only fp8``) compares each fp8 run with the bf16 run of its seed, assuming that
with the same initialisation and data only the precision differs, and sets its tolerance from bf16 runs at
*different* seeds. The H200 proof folders of sessions 4 and 5 hold the same bf16 recipe at seeds 0 and 1 three
times over (and rowwise_with_gw_hp at seeds 0 and 1 twice: the fp8 GEMM was the TMA kernel in one, the Gluon kernel
in the other), so their curves say how far a rerun alone moves the proof's metrics. No GPU needed:

    python benchmarks/fp8_rerun_noise.py            # writes benchmarks/results/h200/train/fp8_rerun_noise.md

The verdicts in those folders are not changed by this: it is a diagnostic of the rule, recorded after the runs.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_proof_report as report  # noqa: E402

TRAIN = Path(__file__).resolve().parent / "results" / "h200" / "train"
RUNS = {"fp8_seeds": "session 4", "fp8_gw_hp": "session 5, first", "fp8_4seeds": "session 5, second"}
"""Proof folders (their REPORT.md gives each command) and when they ran."""
SAME_CODE = ("fp8_gw_hp", "fp8_4seeds")
"""Folders whose bf16 runs ran the same code (this session, before and after the Gluon kernel, which bf16 does not
use); session 4's job differed in details of the fp8 path only, as far as the commit log says."""


def losses(folder: str, run: str) -> list[float] | None:
    path = TRAIN / folder / "metrics" / f"{run}.json"
    return json.loads(path.read_text())["losses"] if path.exists() else None


def compare(a: list[float], b: list[float]) -> dict:
    return report._compare(a, b, report.FP8_WINDOW, report.FP8_SKIP, min(len(a), len(b)))


def rows() -> list[dict]:
    out = []
    for run in ("small-bf16", "small-bf16-seed1", "small-fp8-gw-hp", "small-fp8-gw-hp-seed1", "small-fp8",
                "small-fp8-seed1"):
        present = [f for f in RUNS if losses(f, run) is not None]
        for first, second in itertools.combinations(present, 2):
            a, b = losses(first, run), losses(second, run)
            c = compare(a, b)
            out.append({"run": run, "first": first, "second": second, "identical": a == b,
                        "largest": c["max_relative_difference"], "mean_signed": c["mean_signed_difference"],
                        "final": c["final_relative_difference"], "same_code": (first, second) == SAME_CODE})
    return out


def proof_figures() -> tuple[float, list[float]]:
    """(the different-seed bf16 band of the 4-seed proof, rowwise_with_gw_hp's same-seed largest differences in
    every session-5 proof)."""
    band, differences = None, []
    for folder in SAME_CODE:
        fp8 = json.loads((TRAIN / folder / "summary.json").read_text())["fp8"]
        band = fp8["seed_max_relative_difference"]  # the last folder's: the most seeds
        differences += fp8["recipes"]["rowwise_with_gw_hp"]["seed_max_relative_differences"]
    return band, differences


def gw_hp_mean_signed() -> list[float]:
    """rowwise_with_gw_hp's mean signed difference from same-seed bf16, per seed, in every session-5 proof."""
    out = []
    for folder in SAME_CODE:
        comparisons = json.loads((TRAIN / folder / "summary.json").read_text())["fp8"]["comparisons"]
        out += [c["mean_signed_difference"] for name, c in comparisons.items()
                if name.startswith("rowwise_with_gw_hp vs bf16")]
    return out


def rowwise_lags(folder: str) -> list[float]:
    """rowwise (all e4m3): mean signed difference from same-seed bf16 at each seed of a proof folder (session 4
    named the comparisons "fp8 vs bf16 (seed k)", session 5 "rowwise vs bf16 (seed k)")."""
    comparisons = json.loads((TRAIN / folder / "summary.json").read_text())["fp8"]["comparisons"]
    return [c["mean_signed_difference"] for name, c in comparisons.items()
            if name.startswith(("rowwise vs bf16", "fp8 vs bf16"))]


def markdown(table: list[dict]) -> str:
    same = [r for r in table if r["run"].startswith("small-bf16") and r["same_code"]]
    reruns = [r["largest"] for r in table if r["run"].startswith("small-bf16")]
    band, gw_hp = proof_figures()
    signed = gw_hp_mean_signed()
    rerun_signed = [r["mean_signed"] for r in table if r["run"].startswith("small-bf16")]
    rowwise = {folder: rowwise_lags(folder) for folder in (SAME_CODE[0], 'fp8_seeds')}
    lines = ["# The fp8 rule's premise: the same recipe at the same seed, run twice", "",
             "`python benchmarks/fp8_rerun_noise.py` (no GPU), from the H200 proof folders "
             + ", ".join(f"`{f}/` ({when})" for f, when in RUNS.items()) + ". Metrics as the proof computes them "
             f"({report.FP8_WINDOW}-step window means after step {report.FP8_SKIP}; > 0: the second run behind).", "",
             "| recipe and seed | runs compared | curves identical | largest window difference | mean signed | final |",
             "|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['run']} | {r['first']} vs {r['second']} | {'yes' if r['identical'] else 'no'} | "
                     f"{r['largest']:.2%} | {r['mean_signed']:+.2%} | {r['final']:+.2%} |")
    if same:
        lines += ["", f"Identical bf16 recipes at the same seed, run twice with the same code: largest window "
                  f"difference {min(r['largest'] for r in same):.1%}-{max(r['largest'] for r in same):.1%}, "
                  f"mean signed {min(r['mean_signed'] for r in same):+.1%} to {max(r['mean_signed'] for r in same):+.1%}.",
                  "",
                  "The job is not bit-reproducible on the GPU (no curve pair above is identical; the cause is not "
                  "established here: reductions whose order changes between runs, such as atomics in backward "
                  "kernels, are the usual one), and the proof's 300-step curve amplifies that: a rerun alone moves "
                  f"one window mean by as much as bf16's different-seed band ({band:.1%} over six pairs in "
                  "`fp8_4seeds/`) or more. The rule's premise, that the same seed isolates the precision, does not "
                  "hold. The stated verdicts stand (rowwise_with_gw_hp: disagree), but its same-seed differences "
                  f"({min(gw_hp):.0%}-{max(gw_hp):.0%} over {len(gw_hp)} runs) are of the same order as a bf16 rerun's "
                  f"({min(reruns):.0%}-{max(reruns):.0%}), and its mean signed "
                  f"difference changes sign between seeds. On that steadier metric it still moves further than noise: "
                  f"{min(signed):+.1%} to {max(signed):+.1%} per seed against {min(rerun_signed):+.1%} to "
                  f"{max(rerun_signed):+.1%} between bf16 reruns, so rowwise_with_gw_hp changes how fast a given "
                  "seed learns, in either direction, without a lag on average. Rowwise (all e4m3) is the one "
                  "recipe with a lag of the "
                  "same sign and size at every seed ("
                  + "; ".join(f"{', '.join(f'{v:+.1%}' for v in lags)} in `{folder}/`" for folder, lags in rowwise.items())
                  + "). A next check should be stated before its runs, "
                  "with a band that includes same-seed reruns (or deterministic kernels), and judge the mean signed "
                  "difference over seeds."]
    return "\n".join(lines) + "\n"


def main() -> None:
    text = markdown(rows())
    out = TRAIN / "fp8_rerun_noise.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(text)


if __name__ == "__main__":
    main()
