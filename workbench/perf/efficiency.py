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
from workbench.errors import SpecError, WorkbenchError
from workbench.hardware import GPU
from workbench.paths import CALIBRATION_DIR_ENV, calibration_dirs, find_calibration_file, user_calibration_dir
from workbench.schema import Fields, check_number, load_yaml

# CALIBRATION_DIR_ENV: one folder read and written instead of the user's + shipped
__all__ = ["CALIBRATION_DIR_ENV", "Constants", "constants_for", "default_constants", "derived", "load_profile",
           "profile_path", "user_profile_path"]


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


def _read_constants(table: object, origin: str, path: str) -> tuple[dict[str, float], dict[str, str]]:
    f = Fields(table, origin, path)
    values, provenance = {}, {}
    for name in list(f.data):
        entry = f.sub(name)
        values[name] = check_number(entry.raw("value"), origin, f"{entry.path}.value", above=0)
        kind = entry.string("kind", ("sourced", "guess"))
        provenance[name] = f"{kind}: {entry.string('source')}" if kind == "sourced" else f"guess: {entry.string('note', default='calibrate me')}"
        entry.finish()
    f.finish()
    return values, provenance


@cache
def _defaults() -> tuple[dict, dict, dict]:
    path = _specs_dir() / "efficiency.yaml"
    top = Fields(load_yaml(path), str(path))
    top.number("schema_version", integer=True)
    values, provenance = _read_constants(top.raw("defaults"), str(path), "defaults")
    archs = top.sub("architectures")
    per_arch = {name: _read_constants(archs.raw(name), str(path), f"architectures.{name}") for name in list(archs.data)}
    archs.finish()
    top.finish()
    return values, provenance, per_arch


def default_constants(gpu: GPU) -> Constants:
    """Spec-only constants for ``gpu``: the defaults overridden by its architecture's section."""
    values, provenance, per_arch = _defaults()
    arch_values, arch_prov = per_arch.get(gpu.architecture, ({}, {}))
    return Constants({**values, **arch_values}, {**provenance, **arch_prov})


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
    families = {k.split(".")[0] for k in _defaults()[0]}
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
