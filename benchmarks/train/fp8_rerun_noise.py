"""How far apart are two runs of the *same* recipe at the *same* seed? A check of the fp8 convergence rule's premise
(the analysis is ``workbench.train.rerun_noise``: which proof folders, which runs, what the table says). No GPU:

    python benchmarks/train/fp8_rerun_noise.py      # writes benchmarks/results/h200/train/fp8_rerun_noise.md

The verdicts in those folders are not changed by this: it is a diagnostic of the rule, recorded after the runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from workbench.fileio import write_text  # noqa: E402
from workbench.train.rerun_noise import TRAIN, markdown, rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=TRAIN / "fp8_rerun_noise.md", help="the report (replaced)")
    args = parser.parse_args(argv)
    text = markdown(rows())
    write_text(args.out, text, overwrite=True)
    print(text)


if __name__ == "__main__":
    main()
