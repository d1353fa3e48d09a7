"""Instructions per recipe search under callgrind (deterministic, unlike the CPU-time rates of search_speed.py on a
shared machine): a process runs one search to warm the module caches, then N more searches, either each with a
fresh evaluator (cold) or with the first's evaluator (warm); the count of a run with N minus the run with 0, over
N, is one search's. Needs valgrind. ``--mode first`` counts the first search of a model in a fresh process instead
(search_speed.py's ``first_per_cpu_s``, what a command-line search of a new model costs: the module caches of its
model data fill too): a process loads the catalogs and constants with a search of gpt2-small on the GPU, as
search_speed.py does outside its timing, then runs one search, less a process that stops after the gpt2-small
one; both leave through ``os._exit`` (interpreter shutdown would add ~25M instructions of noise), and
``--searches`` does not apply.

    python benchmarks/speed/search_instructions.py --case tt8b --mode cold --searches 2
    python benchmarks/speed/search_instructions.py --case tt8b --mode first
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

CASES = {  # name -> (model, precisions, stack), 8 x h200-sxm as search_speed.py's
    "8b": ("llama3-8b", ("bf16", "fp8"), "ideal"),
    "tt8b": ("llama3-8b", ("bf16", "fp8"), "torchtitan"),
    "tt1b": ("llama3.2-1b", ("bf16",), "torchtitan"),
}


def run_searches(case: str, mode: str, searches: int) -> None:
    from workbench.recipe.search import StepEvaluator, search

    model, precisions, stack = CASES[case]
    if mode == "first":  # searches is 0 (catalogs loaded only) or 1; no shutdown, whose cost grows with the caches
        search("gpt2-small", "h200-sxm", 1)
        if searches:
            search(model, "h200-sxm", 8, precisions=precisions, evaluator=StepEvaluator(model, "h200-sxm", stack))
        sys.stdout.flush()
        os._exit(0)
    first = StepEvaluator(model, "h200-sxm", stack)
    search(model, "h200-sxm", 8, precisions=precisions, evaluator=first)
    for _ in range(searches):
        evaluator = first if mode == "warm" else StepEvaluator(model, "h200-sxm", stack)
        search(model, "h200-sxm", 8, precisions=precisions, evaluator=evaluator)


def instructions(case: str, mode: str, searches: int) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          __file__, "--inner", "--case", case, "--mode", mode, "--searches", str(searches)],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    return int(re.search(r"refs:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), default="8b")
    parser.add_argument("--mode", choices=("cold", "warm", "first"), default="cold")
    parser.add_argument("--searches", type=int, default=2)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # the process callgrind runs
    args = parser.parse_args()
    if args.inner:
        run_searches(args.case, args.mode, args.searches)
        return 0
    if args.mode == "first":
        args.searches = 1
    base, more = (instructions(args.case, args.mode, n) for n in (0, args.searches))
    print(f"{args.case} {args.mode}: {(more - base) / args.searches / 1e6:.1f}M instructions a search "
          f"({args.searches} searches: {more:,}; none: {base:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
