"""CPU seconds of a model's first recipe search in a fresh process (search_speed.py's ``first_per_cpu_s``), as the
median over many fresh processes: one search is one sample, too noisy on a shared machine for a 5% change. Each
process loads the catalogs and constants with a search of gpt2-small (as search_speed.py does outside its timing),
then times one search of the case with ``time.process_time``. With several ``--tree`` folders (source trees:
``PYTHONPATH`` is pointed at each in turn) the processes alternate between them, so that a slower spell of the
machine falls on every tree alike.

    python benchmarks/speed/search_first_cpu.py --case tt8b --runs 12
    python benchmarks/speed/search_first_cpu.py --case tt8b --tree /tmp/before --tree .
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_instructions import CASES  # noqa: E402  (the cases callgrind counts, by the same names)


def first_search_cpu_s(case: str) -> tuple[float, int]:
    """(CPU seconds, candidates) of ``case``'s search after the catalogs are loaded, in this process."""
    from workbench.recipe.search import StepEvaluator, search

    model, precisions, stack = CASES[case]
    search("gpt2-small", "h200-sxm", 1)
    start = time.process_time()
    result = search(model, "h200-sxm", 8, precisions=precisions, evaluator=StepEvaluator(model, "h200-sxm", stack))
    return time.process_time() - start, len(result.candidates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), default="tt8b")
    parser.add_argument("--runs", type=int, default=12, help="fresh processes per tree")
    parser.add_argument("--tree", action="append", help="a source tree to import workbench from (default: this one)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # one fresh process's sample
    args = parser.parse_args()
    if args.inner:
        seconds, candidates = first_search_cpu_s(args.case)
        print(seconds, candidates)
        return 0
    trees = [str(Path(t).resolve()) for t in args.tree or [Path(__file__).resolve().parents[2]]]
    samples: dict[str, list[float]] = {tree: [] for tree in trees}
    candidates = 0
    for _ in range(args.runs):
        for tree in trees:
            out = subprocess.run([sys.executable, __file__, "--inner", "--case", args.case], capture_output=True,
                                 text=True, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree})
            seconds, candidates = out.stdout.split()
            samples[tree].append(float(seconds))
    for tree, seconds in samples.items():
        median = statistics.median(seconds)
        print(f"{tree}: {args.case} first search, median of {len(seconds)} fresh processes: {median:.4f} s CPU, "
              f"{int(candidates) / median:,.0f} candidates per CPU second (min {min(seconds):.4f}, max "
              f"{max(seconds):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
