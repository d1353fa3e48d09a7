"""Efficiency constants of the time model: defaults from ``specs/efficiency.yaml``, per-GPU calibration profiles
from the user's folder (``workbench calibrate`` writes there, see ``workbench.paths``) or the shipped
``specs/calibration/<gpu>.yaml``.

A profile holds only fitted values; anything it lacks falls back to the defaults. ``Constants`` records where
each value came from so the UI and reports can show "sourced", "guess" or "calibrated".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TypeVar

from workbench._data import specs_dir
from workbench.errors import SpecError, UnknownNameError, WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.paths import CALIBRATION_DIR_ENV, calibration_dirs, find_calibration_file, user_calibration_dir
from workbench.schema import Fields, check_number, load_yaml

# CALIBRATION_DIR_ENV: one folder read and written instead of the user's + shipped
__all__ = ["CALIBRATION_DIR_ENV", "Constants", "constants_for", "default_constants", "derived", "load_profile",
           "measured_gemm_fractions", "profile_path", "user_profile_path"]


@dataclass(frozen=True)
class Constants:
    """Named model constants for one GPU, with each value's provenance (sourced, guess, calibrated)."""

    values: dict[str, float]
    provenance: dict[str, str] = field(default_factory=dict)
    calibrated: bool = False
    profile: str = ""  # the calibration profile file the calibrated values came from

    def __getitem__(self, name: str) -> float:
        key = name
        while True:  # memory_fraction.softmax.bf16 -> memory_fraction.softmax -> memory_fraction.default
            if key in self.values:
                return self.values[key]
            if "." not in key:
                break
            key = key.rsplit(".", 1)[0]
        default = f"{name.partition('.')[0]}.default"
        if default in self.values:
            return self.values[default]
        raise KeyError(f"no model constant {name!r} (known: {', '.join(sorted(self.values))})")

    def with_values(self, updates: dict[str, float], provenance: str = "calibrated") -> Constants:
        values = {**self.values, **updates}
        prov = {**self.provenance, **{k: provenance for k in updates}}
        return Constants(values, prov, calibrated=self.calibrated or provenance == "calibrated", profile=self.profile)


Derived = TypeVar("Derived")
_DERIVED: dict[tuple, tuple[GPU, Constants, object]] = {}
_DERIVED_LIMIT = 256
"""Entries kept before the memo starts over (a calibration fit makes a new ``Constants`` per trial)."""


def derived(build: Callable[..., Derived], gpu: GPU, constants: Constants, *key: object) -> Derived:
    """``build(gpu, constants, *key)``, computed once per GPU object, constants object and ``key``. The op timers
    read the same GPU figures and constants for every op a search prices (thousands per search), so what they
    derive from them -- rates, roofs, the tile menu -- is derived once, not per op. Both objects are frozen and are
    keyed by identity (neither hashes: they hold dicts); the entry holds them, so an id is not reused while its
    entry lives. A new ``Constants`` (each ``StepModel`` reads its own) derives afresh."""
    memo_key = (build, id(gpu), id(constants), *key)
    hit = _DERIVED.get(memo_key)
    if hit is None:
        if len(_DERIVED) >= _DERIVED_LIMIT:
            _DERIVED.clear()
        hit = _DERIVED[memo_key] = (gpu, constants, build(gpu, constants, *key))
    return hit[2]  # type: ignore[return-value]


def _specs_dir() -> Path:
    return specs_dir()


def calibration_dir() -> Path:
    """The folder calibration profiles are written to (the user's; never the shipped specs/)."""
    return user_calibration_dir()


def _read_constant(entry: Fields, at_most: float | None = None) -> tuple[float, str]:
    """One ``{value, kind, source or note}`` entry: (value, provenance)."""
    value = check_number(entry.raw("value"), entry.origin, f"{entry.path}.value", above=0)
    if at_most is not None and value > at_most:
        raise entry.error("value", value, f"a number above 0 and at most {at_most:g}")
    kind = entry.string("kind", ("sourced", "guess"))
    if kind == "sourced":
        provenance = f"sourced: {entry.string('source')}"
    else:
        provenance = f"guess: {entry.string('note', default='calibrate me')}"
    entry.finish()
    return value, provenance


def _read_constants(table: object, origin: str, path: str) -> tuple[dict[str, float], dict[str, str]]:
    f = Fields(table, origin, path)
    values, provenance = {}, {}
    for name in list(f.data):
        values[name], provenance[name] = _read_constant(f.sub(name))
    f.finish()
    return values, provenance


@dataclass(frozen=True)
class _Defaults:
    """specs/efficiency.yaml, parsed once."""

    values: dict[str, float]
    provenance: dict[str, str]
    per_arch: dict[str, tuple[dict[str, float], dict[str, str]]]
    sustained_share: float
    """``mamf_sustained_share``: a long run of GEMMs over a MAMF's best-shape mean (the file says why)."""


@cache
def _defaults() -> _Defaults:
    path = _specs_dir() / "efficiency.yaml"
    top = Fields(load_yaml(path), str(path))
    top.number("schema_version", integer=True)
    values, provenance = _read_constants(top.raw("defaults"), str(path), "defaults")
    share, _ = _read_constant(top.sub("mamf_sustained_share"), at_most=1.0)
    archs = top.sub("architectures")
    per_arch = {name: _read_constants(archs.raw(name), str(path), f"architectures.{name}") for name in list(archs.data)}
    archs.finish()
    top.finish()
    return _Defaults(values, provenance, per_arch, share)


MEASURED_MATMUL = "matmul_tflops."
"""Prefix of a GPU's own measured matmul ceilings in ``GPU.measured`` (``matmul_tflops.bf16``: a MAMF or MAF)."""
SAME_MATRIX_RATE = {"fp16": "bf16"}
"""A precision without a measurement of its own reads this one's where the two dense peaks are equal."""
FRACTION_DECIMALS = 3
"""Derived fractions are rounded as specs/efficiency.yaml states them (0.803, then 0.803 x 0.948 = 0.761): finer
than the sources (a MAMF re-run moves ~1%), and a part whose figure is its architecture's source (H100 bf16, H200
fp8, B200, B300, A100, MI355X bf16) gets exactly its architecture's constant."""


def _measured_part(gpu: GPU) -> GPU:
    """The GPU whose measured matmul ceilings ``gpu`` reads: ``gpu`` itself, or -- for a variant with none of its
    own (a variant's ``measured`` section starts empty) -- its base part: the same die and software reach the same
    share of their peaks; the variant's own peaks and ``workbench.power``'s scale for a power-limited one say what
    its clock and power change."""
    if not gpu.derived_from or any(key.startswith(MEASURED_MATMUL) for key in gpu.measured):
        return gpu
    try:
        return get_gpu(gpu.derived_from)
    except UnknownNameError:  # a variant built from a base outside the catalog
        return gpu


def measured_gemm_fractions(gpu: GPU) -> tuple[dict[str, float], dict[str, str]]:
    """``gemm_fraction_unthrottled.<p>`` = the GPU's own measured matmul ceiling / its dense peak, and
    ``gemm_fraction.<p>`` = that x ``mamf_sustained_share``, for every precision ``p`` its spec file measures
    (figures marked uncertain are skipped; a variant reads its base part's, ``_measured_part``): (values,
    provenance). A few dict reads per call (a prediction's constants are built once per ``StepModel``)."""
    share = _defaults().sustained_share
    part = _measured_part(gpu)
    own = {key.removeprefix(MEASURED_MATMUL): figure for key, figure in part.measured.items()
           if key.startswith(MEASURED_MATMUL) and not figure.uncertain}
    for precision, same_rate in SAME_MATRIX_RATE.items():
        if (precision not in own and same_rate in own and precision in part.peak_dense_tflops
                and part.peak_tflops(precision) == part.peak_tflops(same_rate)):
            own[precision] = own[same_rate]
    values, provenance = {}, {}
    for precision, figure in own.items():
        if precision not in part.peak_dense_tflops or precision not in gpu.peak_dense_tflops:
            continue  # a measured rate with no dense peak to divide by (no hardware path for it)
        peak = part.peak_tflops(precision)
        # at most the whole peak: a what-if GPU (workbench.hardware_scaling) may scale the measurement past it;
        # tests/perf/test_efficiency.py checks the catalog's figures are below their peaks
        best = round(min(float(figure.value) / peak, 1.0), FRACTION_DECIMALS)
        measured = (f"{part.name}'s own measured matmul ceiling, {precision} {figure.value:g} of {peak:g} TFLOP/s "
                    f"({figure.how or figure.source})")
        values[f"gemm_fraction_unthrottled.{precision}"] = best
        provenance[f"gemm_fraction_unthrottled.{precision}"] = f"sourced: {measured}"
        values[f"gemm_fraction.{precision}"] = round(best * share, FRACTION_DECIMALS)
        provenance[f"gemm_fraction.{precision}"] = (
            f"sourced: {measured} x mamf_sustained_share {share:g} (specs/efficiency.yaml)")
    return values, provenance


_MEASURED: dict[int, tuple[GPU, tuple[dict[str, float], dict[str, str]]]] = {}
"""``measured_gemm_fractions`` per GPU object (keyed by identity, the entry holding the GPU so the id is not
reused; what-if GPUs are new objects); emptied at ``_DERIVED_LIMIT`` entries."""


def default_constants(gpu: GPU) -> Constants:
    """Spec-only constants for ``gpu``: the defaults, overridden by its architecture's section, overridden by the
    GEMM fractions of the GPU's own measured matmul ceilings (``measured_gemm_fractions``, once per GPU object)."""
    defaults = _defaults()
    arch_values, arch_prov = defaults.per_arch.get(gpu.architecture, ({}, {}))
    hit = _MEASURED.get(id(gpu))
    if hit is None:
        if len(_MEASURED) >= _DERIVED_LIMIT:
            _MEASURED.clear()
        hit = _MEASURED[id(gpu)] = (gpu, measured_gemm_fractions(gpu))
    own_values, own_prov = hit[1]
    return Constants({**defaults.values, **arch_values, **own_values},
                     {**defaults.provenance, **arch_prov, **own_prov})


def profile_path(gpu: GPU) -> Path:
    """The profile calibrated predictions of ``gpu`` read: the user's if there is one, else the shipped one."""
    return find_calibration_file(f"{gpu.name}.yaml")


def user_profile_path(gpu: GPU) -> Path:
    """Where ``workbench calibrate`` writes ``gpu``'s profile by default."""
    return calibration_dir() / f"{gpu.name}.yaml"


def load_profile(gpu: GPU, path: str | Path | None = None) -> dict[str, float]:
    """Fitted constants of a calibration profile (``workbench calibrate`` writes them)."""
    path = Path(path) if path else profile_path(gpu)
    if not path.exists():
        searched = " or ".join(str(folder) for folder in calibration_dirs())
        raise WorkbenchError(
            f"no calibration profile for {gpu.name} at {path} (profiles are read from {searched}); run "
            f"`workbench calibrate RESULTS.csv --gpu {gpu.name}` first, or predict with calibrated=False"
        )
    stat = path.stat()
    return dict(_read_profile(gpu.name, str(path), stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=64)
def _read_profile(gpu_name_expected: str, path: str, mtime_ns: int, size: int) -> tuple[tuple[str, float], ...]:
    """A profile's constants, parsed once per file version (path, modification time and size: a rewritten profile
    is read again). A validated calibrated prediction reads it for every row; parsing it each time cost ~15 ms."""
    del mtime_ns, size  # part of the cache key only
    top = Fields(load_yaml(path), path)
    gpu_name = top.string("gpu")
    if gpu_name != gpu_name_expected:
        raise SpecError(path, "gpu", gpu_name, f"{gpu_name_expected!r} (the profile is for another GPU)")
    constants = top.sub("constants")
    families = {k.split(".")[0] for k in _defaults().values}
    values = {}
    for name in list(constants.data):
        if name.split(".")[0] not in families:
            raise constants.error(name, constants.data[name], f"a constant of specs/efficiency.yaml ({', '.join(sorted(families))})")
        values[name] = constants.number(name, above=0)
    return tuple(values.items())


def constants_for(gpu: GPU, calibrated: bool = False) -> Constants:
    """The constants a prediction uses: spec defaults, or the GPU's calibration profile over them."""
    base = default_constants(gpu)
    if not calibrated:
        return base
    path = profile_path(gpu)
    calibrated_constants = base.with_values(load_profile(gpu, path), "calibrated")
    return Constants(calibrated_constants.values, calibrated_constants.provenance, True, profile=str(path))
