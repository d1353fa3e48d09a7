"""Selection profiles: per-config coefficients fitted from an exhaustive config sweep on one GPU.

A profile (``<gpu>-select.yaml``: the user's, see ``workbench.paths``, else the shipped ``specs/calibration``) holds, per kernel and operand size, one coefficient list per
config (in the order of the model's TERMS). ``fit`` computes them by non-negative least squares on relative
error (each measured time weighs as 1/time), config by config; ``write_selection_profile`` writes them.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from pathlib import Path

import yaml

from workbench.errors import SpecError, WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.fileio import check_output, load_yaml, read_csv_text, write_text
from workbench.paths import find_calibration_file, user_calibration_dir
from workbench.schema import Fields

SCHEMA_VERSION = 1


def profile_path(gpu: GPU) -> Path:
    """The selection profile ``gpu``'s calibrated choices read: the user's if there is one, else the shipped one."""
    return find_calibration_file(f"{gpu.name}-select.yaml")


def user_profile_path(gpu: GPU) -> Path:
    """Where ``workbench select --fit`` writes ``gpu``'s selection profile by default."""
    return user_calibration_dir() / f"{gpu.name}-select.yaml"


def section_name(op: str, operand_bytes: int, head_dim: int = 0) -> str:
    """gemm-2byte, gemm-1byte, attention-2byte-d128 (attention costs depend on the head dimension)."""
    return f"{op}-{operand_bytes}byte" + (f"-d{head_dim}" if op == "attention" else "")


@functools.lru_cache(maxsize=32)
def _load(path: Path, mtime: float) -> dict:
    top = Fields(load_yaml(path), str(path))
    top.number("schema_version", integer=True)
    top.string("gpu")
    top.string("source")
    sections = top.sub("kernels")
    tables = {}
    for name in list(sections.data):
        section = sections.sub(name)
        terms = section.string_list("terms")
        section.string("fitted_on")
        configs = section.sub("configs")
        table = {}
        for key in list(configs.data):
            values = configs.raw(key)
            if not isinstance(values, list) or len(values) != len(terms) or not all(
                    isinstance(v, (int, float)) and v >= 0 for v in values):
                raise SpecError(str(path), f"kernels.{name}.configs.{key}", values,
                                f"{len(terms)} non-negative numbers (one per term: {', '.join(terms)})")
            table[key] = tuple(float(v) for v in values)
        configs.finish()
        section.finish()
        tables[name] = (tuple(terms), table)
    sections.finish()
    top.finish()
    return tables


def load_selection_profile(gpu: GPU, op: str, operand_bytes: int, path: Path | None = None, *,
                           head_dim: int = 0) -> dict | None:
    """{config key: coefficients} for ``op`` at ``operand_bytes`` on ``gpu``, or None without a profile."""
    path = path or profile_path(gpu)
    if not path.exists():
        return None
    name = section_name(op, operand_bytes, head_dim)
    terms, table = _load(path, path.stat().st_mtime).get(name, ((), None))
    if table is not None and terms != _model_terms(op):
        raise SpecError(str(path), f"kernels.{name}.terms", list(terms),
                        f"the model's terms {list(_model_terms(op))} (the profile predates a model change: refit "
                        "it with `workbench select --fit SWEEP.csv`)")
    return table


def _model_terms(op: str) -> tuple[str, ...]:
    from workbench.select import attention as attention_model
    from workbench.select import gemm as gemm_model

    return gemm_model.TERMS if op == "gemm" else attention_model.TERMS


def nnls(rows: list[list[float]], targets: list[float], iterations: int = 200) -> list[float]:
    """min ||A x - b|| subject to x >= 0 (Lawson and Hanson's active-set method, "Solving Least Squares
    Problems", 1974, ch. 23)."""
    import numpy as np

    a, b = np.asarray(rows, float), np.asarray(targets, float)
    x = np.zeros(a.shape[1])
    passive = np.zeros(a.shape[1], bool)
    for _ in range(iterations):
        gradient = a.T @ (b - a @ x)
        if passive.all() or (gradient[~passive] <= 1e-12 * max(1e-300, abs(gradient).max())).all():
            break
        passive[int(np.argmax(np.where(passive, -np.inf, gradient)))] = True
        while True:
            z = np.zeros_like(x)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            negative = passive & (z <= 0)
            step = np.min(x[negative] / (x[negative] - z[negative]))
            x = x + step * (z - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
    return [float(v) for v in x]


def fit(samples: Iterable[tuple[str, tuple[float, ...], float]]) -> dict[str, list[float]]:
    """Per config key, the coefficients that best predict its measured seconds from its terms.

    samples: (config key, terms, measured seconds). Each row is scaled by 1/seconds, so the fit minimises
    relative error (a 10 us GEMM counts as much as a 10 ms one)."""
    by_config: dict[str, tuple[list, list]] = {}
    for key, terms, seconds in samples:
        if not (seconds > 0 and math.isfinite(seconds)):
            continue
        rows, targets = by_config.setdefault(key, ([], []))
        rows.append([t / seconds for t in terms])
        targets.append(1.0)
    return {key: nnls(rows, targets) for key, (rows, targets) in by_config.items()}


def write_selection_profile(gpu: str | GPU, sections: dict[str, dict], path: Path | None = None, *,
                            source: str, overwrite: bool = False) -> Path:
    """Write (atomically) a profile, by default the user's; an existing file is replaced only with ``overwrite``.
    sections: {section name: {"terms": [...], "fitted_on": str, "configs": {key: coefficients}}}; the other
    sections of the profile it replaces (or, for a first user profile, of the one read until now) are kept."""
    gpu = get_gpu(gpu)
    default = user_profile_path(gpu)
    path = Path(path) if path else default
    check_output(path, overwrite=overwrite)
    base = path if path.exists() else profile_path(gpu) if path == default else None
    existing = load_yaml(base) if base is not None and base.is_file() else {}
    existing = existing.get("kernels", {}) if isinstance(existing, dict) else {}
    for name, section in sections.items():
        if set(section) != {"terms", "fitted_on", "configs"}:
            raise WorkbenchError(f"section {name}: got keys {sorted(section)}, expected terms, fitted_on, configs")
    document = {"schema_version": SCHEMA_VERSION, "gpu": gpu.name, "source": source,
                "kernels": {**existing, **sections}}
    text = ("# Kernel-selection profile: per-config coefficients of workbench.select's time model, fitted by\n"
            "# non-negative least squares on an exhaustive config sweep. Regenerate, do not edit by hand.\n"
            + yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False, width=200))
    write_text(path, text, overwrite=overwrite)
    _load.cache_clear()
    return path


PART_SECTIONS = {"gemm-bf16": ("gemm", 2), "gemm-fp16": ("gemm", 2), "gemm-fp8": ("gemm", 1),
                 "attention": ("attention", 2)}
"""Which profile section a sweep part's timings fit (bf16 and fp16 share the 2-byte GEMM coefficients)."""


def sweep_layout(row: dict) -> str:
    """The operand layout a sweep row really ran: select_sweep.py feeds fp8 GEMMs as torch._scaled_mm takes them
    (A row-major, B column-major: ``nt``) whatever layout the shape's phase names."""
    return "nt" if row["part"] == "gemm-fp8" else row["layout"]


def fit_sweeps(paths: Iterable[Path], gpu: GPU, keep=None) -> dict[str, dict]:
    """Profile sections fitted from ``select_sweep.py`` CSVs (``keep(row) -> bool`` picks the rows to fit)."""
    import csv
    import io

    rows, names = [], []
    for path in paths:
        names.append(Path(path).name)
        handle = io.StringIO(read_csv_text(path), newline="")
        rows += [row for row in csv.DictReader(handle) if keep is None or keep(row)]
    return fit_rows(rows, gpu, ", ".join(names))


def fit_rows(rows: Iterable[dict], gpu: GPU, source: str) -> dict[str, dict]:
    """Profile sections fitted from sweep rows (dicts with select_sweep.py's fields; ``source`` names them)."""
    from workbench.perf.efficiency import default_constants
    from workbench.select import attention as attention_model
    from workbench.select import gemm as gemm_model

    units = gpu.compute_units.value
    constants = default_constants(gpu)
    samples: dict[str, list] = {}
    shapes: dict[str, set] = {}
    for row in rows:
        if row.get("kind") != "triton" or row.get("part") not in PART_SECTIONS or not _timed(row.get("ms")):
            continue
        op, operand_bytes = PART_SECTIONS[row["part"]]
        config = json.loads(row["config"])
        head = int(float(row["head_dim"])) if op == "attention" else 0
        seconds = float(row["ms"]) * 1e-3
        if op == "gemm":
            m, n, k = (int(float(row[key])) for key in ("m", "n", "k"))
            layout = sweep_layout(row)
            terms = gemm_model.terms(config, m, n, k, layout, operand_bytes, units,
                                     gemm_model.occupancy(config, gpu, operand_bytes))
            # the kernel's own time: the padding copies the wrapper makes are not the config's
            seconds -= gemm_model.padding_s(m, n, k, layout, operand_bytes, gpu, constants)
        else:
            shape = {key: int(float(row[key])) for key in ("batch", "seq", "heads_q", "heads_kv", "head_dim")}
            shape["causal"] = str(row["causal"]) in ("True", "true", "1")
            terms = attention_model.terms(config, shape, units)
        name = section_name(op, operand_bytes, head)
        samples.setdefault(name, []).append((gemm_model.config_key(config), terms, seconds))
        shapes.setdefault(name, set()).add((row["part"], row["shape_id"]))
    if not samples:
        raise WorkbenchError(f"no triton timings to fit in {source} (expected select_sweep.py rows)")
    sections = {}
    for name, timed in samples.items():
        terms = gemm_model.TERMS if name.startswith("gemm") else attention_model.TERMS
        sections[name] = {
            "terms": list(terms),
            "fitted_on": f"{len(shapes[name])} shapes, {len(timed)} timings from {source}",
            "configs": {key: [float(f"{v:.6g}") for v in values] for key, values in fit(timed).items()},
        }
    return sections


def _timed(ms) -> bool:
    try:
        return math.isfinite(float(ms)) and float(ms) > 0
    except (TypeError, ValueError):
        return False
