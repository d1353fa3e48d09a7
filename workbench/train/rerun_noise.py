"""How far apart are two runs of the *same* recipe at the *same* seed? A check of the fp8 convergence rule's premise.

The fp8 proof (``benchmarks/train/train_proof.py --only fp8``) compares each fp8 run with the bf16 run of its seed,
assuming that with the same initialisation and data only the precision differs, and sets its tolerance from bf16
runs at *different* seeds. The H200 proof folders of sessions 4 and 5 hold the same bf16 recipe at seeds 0 and 1
three times over (and rowwise_with_gw_hp at seeds 0 and 1 twice: the fp8 GEMM was the TMA kernel in one, the Gluon
kernel in the other), so their curves say how far a rerun alone moves the proof's metrics. The report is
``benchmarks/train/fp8_rerun_noise.py``'s (no GPU). Pure Python.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from workbench.benchmarking import RESULTS_DIR
from workbench.fileio import load_json
from workbench.train.proof_fp8 import FP8_SKIP, FP8_WINDOW, compare_curves

TRAIN = RESULTS_DIR / "h200" / "train"
"""The H200 training-proof folders."""
RUNS = {"fp8_seeds": "session 4", "fp8_gw_hp": "session 5, first", "fp8_4seeds": "session 5, second"}
"""Proof folders (their REPORT.md gives each command) and when they ran."""
SAME_CODE = ("fp8_gw_hp", "fp8_4seeds")
"""Folders whose bf16 runs ran the same code (this session, before and after the Gluon kernel, which bf16 does not
use); session 4's job differed in details of the fp8 path only, as far as the commit log says."""


def _summary(train: Path, folder: str) -> dict:
    return load_json(train / folder / "summary.json", what="proof summary")


def losses(folder: str, run: str, train: Path = TRAIN) -> list[float] | None:
    """The per-step losses of ``run`` in the proof folder ``train/folder``, None where it did not run."""
    path = train / folder / "metrics" / f"{run}.json"
    return load_json(path, what="run metrics file")["losses"] if path.exists() else None


def compare(a: list[float], b: list[float]) -> dict:
    """Two curves compared as the fp8 proof compares fp8 with bf16 (``proof_fp8.compare_curves``)."""
    return compare_curves(a, b, FP8_WINDOW, FP8_SKIP, min(len(a), len(b)))


def rows(train: Path = TRAIN) -> list[dict]:
    """Every pair of proof folders that ran the same recipe at the same seed, compared."""
    out = []
    for run in ("small-bf16", "small-bf16-seed1", "small-fp8-gw-hp", "small-fp8-gw-hp-seed1", "small-fp8",
                "small-fp8-seed1"):
        present = [f for f in RUNS if losses(f, run, train) is not None]
        for first, second in itertools.combinations(present, 2):
            a, b = losses(first, run, train), losses(second, run, train)
            c = compare(a, b)
            out.append({"run": run, "first": first, "second": second, "identical": a == b,
                        "largest": c["max_relative_difference"], "mean_signed": c["mean_signed_difference"],
                        "final": c["final_relative_difference"], "same_code": (first, second) == SAME_CODE})
    return out


def proof_figures(train: Path = TRAIN) -> tuple[float, list[float]]:
    """(the different-seed bf16 band of the 4-seed proof, rowwise_with_gw_hp's same-seed largest differences in
    every session-5 proof)."""
    band, differences = None, []
    for folder in SAME_CODE:
        fp8 = _summary(train, folder)["fp8"]
        band = fp8["seed_max_relative_difference"]  # the last folder's: the most seeds
        differences += fp8["recipes"]["rowwise_with_gw_hp"]["seed_max_relative_differences"]
    return band, differences


def gw_hp_mean_signed(train: Path = TRAIN) -> list[float]:
    """rowwise_with_gw_hp's mean signed difference from same-seed bf16, per seed, in every session-5 proof."""
    out = []
    for folder in SAME_CODE:
        comparisons = _summary(train, folder)["fp8"]["comparisons"]
        out += [c["mean_signed_difference"] for name, c in comparisons.items()
                if name.startswith("rowwise_with_gw_hp vs bf16")]
    return out


def rowwise_lags(folder: str, train: Path = TRAIN) -> list[float]:
    """rowwise (all e4m3): mean signed difference from same-seed bf16 at each seed of a proof folder (session 4
    named the comparisons "fp8 vs bf16 (seed k)", session 5 "rowwise vs bf16 (seed k)")."""
    comparisons = _summary(train, folder)["fp8"]["comparisons"]
    return [c["mean_signed_difference"] for name, c in comparisons.items()
            if name.startswith(("rowwise vs bf16", "fp8 vs bf16"))]


def markdown(table: list[dict], train: Path = TRAIN) -> str:
    """The report: the table of ``rows`` and what it says about the fp8 rule's premise."""
    same = [r for r in table if r["run"].startswith("small-bf16") and r["same_code"]]
    reruns = [r["largest"] for r in table if r["run"].startswith("small-bf16")]
    band, gw_hp = proof_figures(train)
    signed = gw_hp_mean_signed(train)
    rerun_signed = [r["mean_signed"] for r in table if r["run"].startswith("small-bf16")]
    rowwise = {folder: rowwise_lags(folder, train) for folder in (SAME_CODE[0], 'fp8_seeds')}
    lines = ["# The fp8 rule's premise: the same recipe at the same seed, run twice", "",
             "`python benchmarks/train/fp8_rerun_noise.py` (no GPU), from the H200 proof folders "
             + ", ".join(f"`{f}/` ({when})" for f, when in RUNS.items()) + ". Metrics as the proof computes them "
             f"({FP8_WINDOW}-step window means after step {FP8_SKIP}; > 0: the second run behind).", "",
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
