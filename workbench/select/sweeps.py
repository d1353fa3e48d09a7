"""Exhaustive config sweeps (``benchmarks/select_sweep.py`` CSVs) as one table, the way the selector is scored:
each (part, shape) measured with one kernel version, every other shape held out from the fit.

Needs pandas (the lab extra); ``workbench.select`` itself does not import this module.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbench.hardware import GPU
from workbench.select import gemm as gemm_model
from workbench.select.profile import fit_rows, sweep_layout


def load_sweeps(paths: list[Path], padded_since: Path | None = None) -> pd.DataFrame:
    """The sweeps' rows with ``seconds`` and ``held_out`` columns.

    A shape swept again in a later file (after a kernel change) replaces its earlier rows. ``padded_since``: the
    first sweep made since the GEMM wrapper pads unaligned operands (``workbench.kernels.gemm.pad_unaligned``);
    earlier files' rows of shapes it pads measured another kernel and are dropped (``attrs["dropped_shapes"]``
    counts them). Held out: every other shape of each part in id order, decided before anything is dropped.
    """
    paths = [Path(p) for p in paths]
    frames: list[pd.DataFrame] = []
    for path in paths:
        frame = pd.read_csv(path)
        redone = set(zip(frame.part, frame.shape_id))
        frames = [f[[pair not in redone for pair in zip(f.part, f.shape_id)]] for f in frames]
        frames.append(frame)
    everything = pd.concat(frames, ignore_index=True)
    held = set()
    for part, group in everything.groupby("part"):
        held |= {(part, shape_id) for shape_id in sorted(group.shape_id.unique())[1::2]}
    stale = paths.index(Path(padded_since)) if padded_since is not None else 0  # files before it: unpadded kernel
    frames = [f[[not padded(row) for row in f.itertuples()]] if i < stale else f for i, f in enumerate(frames)]
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["dropped_shapes"] = len(set(zip(everything.part, everything.shape_id))
                                         - set(zip(frame.part, frame.shape_id)))
    frame["seconds"] = frame.ms / 1e3
    frame["held_out"] = [(p, s) in held for p, s in zip(frame.part, frame.shape_id)]
    return frame


def padded(row) -> bool:
    """Whether the GEMM wrapper pads this sweep row's operands (``workbench.select.gemm.padding``)."""
    if row.part == "attention":
        return False
    size = 1 if row.part == "gemm-fp8" else 2
    layout = sweep_layout({"part": row.part, "layout": row.layout})
    m, n, k = int(row.m), int(row.n), int(row.k)
    return gemm_model.padding(m, n, k, layout, size) != (m, n, k)


def fit_frame(frame: pd.DataFrame, gpu: GPU, source: str) -> dict[str, dict]:
    """Selection-profile sections fitted on ``frame``'s rows (``load_sweeps`` rows, or a subset)."""
    return fit_rows(frame.drop(columns=["seconds", "held_out"], errors="ignore").to_dict("records"), gpu, source)
