"""REPORT.md of a ``broad_shapes.py`` run, from its CSVs alone (pure Python: runs on a CPU without torch).

    python3 benchmarks/kernels/broad_report.py DIR     # or: python3 benchmarks/kernels/broad_shapes.py --report DIR

The report itself is ``workbench.kernels.broad_report``; this script gives it the shim's fit/test split beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workbench.kernels.broad_report import write_report  # noqa: E402

SHIM_SPLIT = HERE / "shim_fit_split.json"
"""The fit/test split of the GEMM shape ids for choosing the shim's rule (read by ``broad_report.load_split``)."""

if __name__ == "__main__":
    print(write_report(Path(sys.argv[1]), SHIM_SPLIT))
