"""Exhaustive config sweeps (``benchmarks/select/select_sweep.py`` CSVs) as one table, the way the selector is scored:
each (part, shape) measured with one kernel version, every other shape held out from the fit.

Needs pandas (the lab extra); ``workbench.select`` itself does not import this module.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from workbench.fileio import read_csv_text
from workbench.hardware import GPU
from workbench.kernels.spaces import is_gluon, is_tma
from workbench.select import gemm as gemm_model
from workbench.select.profile import fit_rows, sweep_layout


def load_sweeps(paths: list[Path], padded_since: Path | None = None) -> pd.DataFrame:
    """The sweeps' rows with ``seconds`` and ``held_out`` columns.

    A shape swept again in a later file (after a kernel change) replaces its earlier rows of the same kernel
    (``kernel_of``: gemm.py, the TMA kernel, the Gluon kernel, or the vendor library), so a sweep of one kernel's configs adds to the
    other's rows. ``padded_since``: the
    first sweep made since the GEMM wrapper pads unaligned operands (``workbench.kernels.gemm.pad_unaligned``);
    earlier files' rows of shapes it pads measured another kernel and are dropped (``attrs["dropped_shapes"]``
    counts them). Held out: every other shape in id order, a GEMM shape in every dtype or in none
(``_held_out_ids``), decided before anything is dropped.
    """
    paths = [Path(p) for p in paths]
    frames: list[pd.DataFrame] = []
    for path in paths:
        frame = pd.read_csv(io.StringIO(read_csv_text(path)))  # the bounded loader: size limit, UTF-8 (BOM or not)
        frame["kernel"] = [kernel_of(kind, config) for kind, config in zip(frame.kind, frame.config)]
        redone = set(zip(frame.part, frame.shape_id, frame.kernel))
        frames = [f[[key not in redone for key in zip(f.part, f.shape_id, f.kernel)]] for f in frames]
        frames.append(frame)
    everything = pd.concat(frames, ignore_index=True)
    held = set()
    for part, group in everything.groupby("part"):
        held |= {(part, shape_id) for shape_id in _held_out_ids(everything, part)}
    stale = paths.index(Path(padded_since)) if padded_since is not None else 0  # files before it: unpadded kernel
    frames = [f[[not padded(row) for row in f.itertuples()]] if i < stale else f for i, f in enumerate(frames)]
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["dropped_shapes"] = len(set(zip(everything.part, everything.shape_id))
                                         - set(zip(frame.part, frame.shape_id)))
    frame["seconds"] = frame.ms / 1e3
    frame["held_out"] = [(p, s) in held for p, s in zip(frame.part, frame.shape_id)]
    return frame


FIT_ONLY_PREFIX = "fit-"
"""Shape ids that ``benchmarks/archive/select_resweep.py`` adds to the fit half only (``fit-odd1``, ...): they never enter
the held-out alternation, so the split of the ``select_shapes`` ids stays as it was."""


def _held_out_ids(frame: pd.DataFrame, part: str) -> set[str]:
    """Every other shape id of ``part``. GEMM parts share shape ids (fp16 and fp8 sweep a subset of the bf16
    shapes) and bf16 and fp16 fit the same 2-byte coefficients, so a GEMM shape is held out in every part or in
    none: the shapes of the subset alternate among themselves, and so do the bf16-only ones. Ids that start with
    FIT_ONLY_PREFIX are always fitted."""
    frame = frame[~frame.shape_id.astype(str).str.startswith(FIT_ONLY_PREFIX)]
    ids = sorted(frame[frame.part == part].shape_id.unique())
    if part == "attention":
        return set(ids[1::2])
    subset = set(frame[frame.part.isin(["gemm-fp16", "gemm-fp8"])].shape_id)
    bf16 = set(frame[frame.part == "gemm-bf16"].shape_id)
    held = set(sorted(subset)[1::2]) | set(sorted(bf16 - subset)[1::2])
    return held & set(ids)


def kernel_of(kind: str, config) -> str:
    """"vendor", "tma" (``gemm_tma.py``), "gluon" (``gemm_gluon.py``) or "triton" (gemm.py, the attention kernel)
    for a sweep row."""
    if kind != "triton":
        return str(kind)
    parsed = json.loads(config) if isinstance(config, str) and config else None
    return "tma" if is_tma(parsed) else "gluon" if is_gluon(parsed) else "triton"


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
    return fit_rows(frame.drop(columns=["seconds", "held_out", "kernel"], errors="ignore").to_dict("records"), gpu,
                    source)
