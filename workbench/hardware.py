"""The GPU catalog: a typed, sourced spec per accelerator, loaded from ``specs/gpus/*.yaml``.

Users add their own GPU as a YAML file or a dict with the same schema (``load_gpu``); the exemplar with
every field explained is ``specs/gpus/h200-sxm.yaml``.

A *variant* is a catalog part configured differently (another memory, a lower power limit): a file in
``specs/gpus/variants/`` naming the part it is ``derived_from`` and only the figures that differ, each with its
own source (``gpu_variant_from_dict``). It is validated like any GPU; ``get_gpu`` finds it by name,
``list_gpus`` lists the parts only and ``list_gpu_variants`` the variants.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from workbench import fileio
from workbench._data import specs_dir
from workbench.catalog import Catalog
from workbench.errors import SpecError, UnknownNameError
from workbench.schema import Fields, check_number, load_yaml

FigureKind = Literal["datasheet", "derived", "secondary", "measured", "estimate"]
FIGURE_KINDS: tuple[str, ...] = ("datasheet", "derived", "secondary", "measured", "estimate")
PEAK_KEYS: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")
BLOCK_SCALED_FORMATS: tuple[str, ...] = ("mxfp8", "mxfp6", "mxfp4", "nvfp4")
FP8_FORMATS: tuple[str, ...] = ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz")
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Figure:
    """One number with where it came from."""

    value: Any
    source: str
    """Citation text (resolved from the file's ``sources`` map)."""
    kind: FigureKind
    note: str = ""
    how: str = ""
    """For measured figures: who measured and how."""
    uncertain: bool = False


@dataclass(frozen=True)
class GPU:
    """An accelerator as the analytical model sees it. Rates are dense, decimal TFLOP/s and TB/s."""

    name: str
    display_name: str
    vendor: Literal["nvidia", "amd"]
    architecture: str
    status: Literal["shipping", "announced"]
    year: int
    peak_dense_tflops: dict[str, Figure]
    """Dense peak per precision key; a missing key means no hardware path."""
    fp8_formats: tuple[str, ...]
    block_scaled_formats: tuple[str, ...]
    hbm_capacity_gb: Figure
    hbm_bandwidth_tb_s: Figure
    l2_cache_mb: Figure
    last_level_cache_mb: Figure
    compute_unit_kind: Literal["sm", "cu"]
    compute_units: Figure
    boost_clock_mhz: Figure
    matrix_clock_mhz: Figure
    shared_memory_kb: Figure
    register_file_kb: Figure
    warp_size: Figure
    matrix_instruction_mnk: Figure
    """value: {precision: (M, N, K)} smallest matrix-instruction step."""
    scale_up_gb_s_per_direction: Figure
    scale_up_domain_gpus: Figure
    scale_out_gb_s_per_direction: Figure
    tdp_w: Figure
    """The board power the part runs at: its rating, or (a power-limited variant) the limit it runs under."""
    measured: dict[str, Figure] = field(default_factory=dict)
    """Public achievable ceilings: ``matmul_tflops.<precision>``, ``hbm_bandwidth_tb_s``."""
    matrix_k_major_only: Figure | None = None
    """value: the precisions whose matrix instruction reads A and B from shared memory only K-major (no
    transposed operand); None when no document says so for this GPU."""
    aliases: tuple[str, ...] = ()
    origin: str = "<dict>"
    derived_from: str = ""
    """For a variant: the catalog part it overrides (empty for a part)."""
    host_link_gb_s_per_direction: Figure | None = None
    """The GPU's link to its host CPU (PCIe Gen5 x16 on HGX boards), GB/s per direction; what CPU offload copies
    over (``workbench.offload``). None when no document gives it for this GPU."""
    rated_tdp_w: float | None = None
    """For a power-limited variant (one that lowers the base's ``tdp_w`` and keeps its tensor peaks): the base
    part's rated board power in W (its ``tdp_w``, sourced in the base's file), against which ``workbench.power``
    scales the sustained tensor clock. None otherwise (the part runs at its rating, or the variant's own peaks
    already say what the lower power gives). Not a resource figure: a higher rating at the same limit is slower."""

    # Derived, not stored (STYLE 3).
    def peak_tflops(self, peak_key: str) -> float:
        """Dense peak TFLOP/s for a precision key; ``KeyError`` when the GPU has no path for it."""
        return float(self.peak_dense_tflops[peak_key].value)

    def ridge_point(self, peak_key: str) -> float:
        """Arithmetic intensity (FLOP/byte) where the compute roof meets the HBM roof."""
        return self.peak_tflops(peak_key) / self.hbm_bandwidth_tb_s.value

    def reads_k_major_only(self, peak_key: str) -> bool:
        """True when the matrix instruction for ``peak_key`` cannot read a transposed (M/N-major) operand."""
        return self.matrix_k_major_only is not None and peak_key in self.matrix_k_major_only.value

    @property
    def is_uncertain(self) -> bool:
        return self.status == "announced"

    def figures(self) -> dict[str, Figure]:
        """Every sourced figure, keyed by its dotted field name (for tables and audits)."""
        out = {f"peak_dense_tflops.{k}": v for k, v in self.peak_dense_tflops.items()}
        for name in ("hbm_capacity_gb", "hbm_bandwidth_tb_s", "l2_cache_mb", "last_level_cache_mb",
                     "compute_units", "boost_clock_mhz", "matrix_clock_mhz", "shared_memory_kb",
                     "register_file_kb", "warp_size", "matrix_instruction_mnk", "scale_up_gb_s_per_direction",
                     "scale_up_domain_gpus", "scale_out_gb_s_per_direction", "tdp_w"):
            out[name] = getattr(self, name)
        if self.matrix_k_major_only is not None:
            out["matrix_k_major_only"] = self.matrix_k_major_only
        if self.host_link_gb_s_per_direction is not None:
            out["host_link_gb_s_per_direction"] = self.host_link_gb_s_per_direction
        out.update({f"measured.{k}": v for k, v in self.measured.items()})
        return out


@dataclass(frozen=True)
class Bound:
    """The plausible range of one GPU figure, in its key's unit: wide enough for any accelerator of the next
    several years, narrow enough that the same figure written in a unit 1000x off (GB/s for TB/s, bytes for GB)
    falls outside it."""

    low: float
    high: float
    unit: str
    reason: str
    other_units: tuple[tuple[float, str], ...] = ()
    """(factor, unit): a value ``factor`` times too large is probably in that unit (1e-3: too small)."""

    def check(self, value: float, origin: str, field: str) -> None:
        if self.low <= value <= self.high:
            return
        hint = next((f" (is this in {unit}?)" for factor, unit in self.other_units
                     if self.low <= value / factor <= self.high), "")
        raise SpecError(origin, field, value, f"{self.low:g}..{self.high:g} {self.unit}{hint}; {self.reason}")


_TFLOPS_UNITS = ((1e3, "GFLOP/s"), (1e12, "FLOP/s"), (1e-3, "PFLOP/s"))
_PEAK_BOUNDS: dict[str, Bound] = {
    "fp64": Bound(0.01, 1_000, "TFLOP/s", "fp64 peaks run from B300's 1.2 to MI325X's 163.4", _TFLOPS_UNITS),
    "fp32": Bound(0.01, 5_000, "TFLOP/s", "fp32 peaks run from A100's 19.5 to MI455X's 315", _TFLOPS_UNITS),
    "tf32": Bound(10, 20_000, "TFLOP/s", "dense tf32 peaks run from A100's 156 to GB200's 1250", _TFLOPS_UNITS),
    "bf16": Bound(10, 50_000, "TFLOP/s", "dense bf16 peaks run from MI250X's 191.5 to MI455X's 5000", _TFLOPS_UNITS),
    "fp16": Bound(10, 50_000, "TFLOP/s", "dense fp16 peaks run from MI250X's 191.5 to MI455X's 5000", _TFLOPS_UNITS),
    "int8": Bound(10, 50_000, "TFLOP/s", "dense int8 peaks run from B300's 150 to MI355X's 5033", _TFLOPS_UNITS),
    "fp8": Bound(100, 100_000, "TFLOP/s", "dense fp8 peaks run from H100's 1979 to MI455X's 20,000", _TFLOPS_UNITS),
    "fp6": Bound(100, 100_000, "TFLOP/s", "dense fp6 peaks run from B200's 4500 to MI355X's 10,066", _TFLOPS_UNITS),
    "fp4": Bound(100, 200_000, "TFLOP/s", "dense fp4 peaks run from B200's 9000 to MI455X's 40,000; a four-die Rubin "
                 "Ultra is about 100,000", _TFLOPS_UNITS),
}
"""Per precision: 10x or more above today's largest peak, below 1000x the smallest (a GFLOP/s figure), and (8-bit
and narrower, bf16, fp16, tf32) above 1/1000 of the largest (a PFLOP/s figure); fp64/fp32 peaks span too wide a
range for a PFLOP/s figure to stand out."""
GPU_BOUNDS: dict[str, Bound] = {
    **{f"peak_dense_tflops.{key}": bound for key, bound in _PEAK_BOUNDS.items()},
    **{f"measured.matmul_tflops.{key}": bound for key, bound in _PEAK_BOUNDS.items()},
    "memory.hbm_capacity_gb": Bound(1, 10_000, "GB", "HBM per GPU: 64 (MI250X) to 432 (MI455X); Rubin Ultra "
                                    "plans about 1 TB", ((1e3, "MB"), (1e9, "bytes"), (1e-3, "TB"))),
    "memory.hbm_bandwidth_tb_s": Bound(0.1, 100, "TB/s", "HBM bandwidth: 1.64 (MI250X) to 23.3 (MI455X); Rubin "
                                       "Ultra plans about 32", ((1e3, "GB/s"), (1e12, "bytes/s"))),
    "measured.hbm_bandwidth_tb_s": Bound(0.1, 100, "TB/s", "achieved HBM bandwidth is below the peak (at most "
                                         "~32 TB/s within five years)", ((1e3, "GB/s"), (1e12, "bytes/s"))),
    "memory.l2_cache_mb": Bound(1, 4_096, "MB", "on-die caches: 8 (MI250X) to 256 (MI455X)",
                                ((1e3, "KB"), (1e6, "bytes"), (1e-3, "GB"))),
    "memory.last_level_cache_mb": Bound(1, 4_096, "MB", "on-die caches: 8 (MI250X) to 256 (MI455X)",
                                        ((1e3, "KB"), (1e6, "bytes"), (1e-3, "GB"))),
    "compute_units.count": Bound(1, 4_096, "SMs or CUs", "108 (A100) to 304 (MI325X); a core count (CUDA cores, "
                                 "stream processors: thousands) is not a count of SMs/CUs"),
    "compute_units.boost_clock_mhz": Bound(100, 5_000, "MHz", "GPU clocks are 0.1-5 GHz (1410 on A100 to 2400 on "
                                           "MI455X)", ((1e3, "kHz"), (1e6, "Hz"), (1e-3, "GHz"))),
    "compute_units.matrix_clock_mhz": Bound(100, 5_000, "MHz", "GPU clocks are 0.1-5 GHz (1410 on A100 to 2400 on "
                                            "MI455X)", ((1e3, "kHz"), (1e6, "Hz"), (1e-3, "GHz"))),
    "compute_units.shared_memory_kb": Bound(8, 4_096, "KB per SM/CU", "64 (MI250X LDS) to 228 (Hopper)",
                                            ((1024, "bytes"), (1e-3, "MB"))),
    "compute_units.register_file_kb": Bound(16, 8_192, "KB per SM/CU", "256 (NVIDIA) to 512 (CDNA3/4)",
                                            ((1024, "bytes"), (1e-3, "MB"))),
    "compute_units.warp_size": Bound(8, 128, "threads", "a warp is 32 threads, a CDNA wavefront 64"),
    "compute_units.matrix_instruction_mnk": Bound(1, 1_024, "elements per dimension",
                                                  "matrix instruction tiles span 4 to 256 elements"),
    "interconnect.scale_up_gb_s_per_direction": Bound(10, 20_000, "GB/s", "NVLink/Infinity Fabric per direction: "
                                                      "200 (MI250X) to 1800 (MI455X), NVLink 7 about 3600; PCIe 3.0 "
                                                      "x16 is 16",
                                                      ((1e3, "MB/s"), (1e9, "bytes/s"), (1e-3, "TB/s"))),
    "interconnect.host_link_gb_s_per_direction": Bound(1, 2_000, "GB/s", "GPU-to-host links per direction: PCIe "
                                                       "4.0 x16 is 32, 5.0 x16 64, 6.0 x16 128; NVLink-C2C 450",
                                                       ((1e3, "MB/s"), (1e9, "bytes/s"), (1e-3, "TB/s"))),
    "interconnect.scale_up_domain_gpus": Bound(1, 4_096, "GPUs", "8 (HGX) to 72 (NVL72); NVL576 is the largest "
                                               "announced"),
    "interconnect.scale_out_gb_s_per_direction": Bound(1, 10_000, "GB/s", "NICs per GPU: 12.5 (100 Gb/s) to 300 "
                                                       "(MI455X); 1.6 Tb/s NICs are 200, 10 GbE is 1.25",
                                                       ((1e3, "MB/s"), (1e9, "bytes/s"), (1e-3, "TB/s"))),
    "tdp_w": Bound(10, 20_000, "W", "250 (MI250X) to 2300 (MI455X); Rubin Ultra packages about 3600",
                   ((1e3, "mW"), (1e-3, "kW"))),
}
"""Plausibility bounds of every numeric GPU figure, keyed by its dotted field (``GPU.figures()`` names, with the
section: ``memory.hbm_bandwidth_tb_s``). A figure outside is refused at load with the range, the unit and, when
the value fits 1000x off, the unit it was probably written in: 4800 TB/s, 141e9 GB or 989.4e12 TFLOP/s are unit
mistakes that would otherwise give MFU 0.0 or steps of 1e302 ms."""


def _figure(fields: Fields, key: str, sources: dict[str, str], *, check=None) -> Figure:
    spec = fields.sub(key)
    source_id = spec.string("source")
    if source_id not in sources:
        raise spec.error("source", source_id, f"an id from this file's sources ({', '.join(sources)})")
    kind = spec.string("kind", FIGURE_KINDS)
    value = spec.raw("value")
    if check is None:
        value = check_number(value, fields.origin, f"{spec.path}.value", above=0)
    else:
        value = check(spec, value)
    bound = GPU_BOUNDS.get(spec.path)
    if bound is not None and isinstance(value, (int, float)):
        bound.check(value, fields.origin, f"{spec.path}.value")
    if kind == "measured" and not spec.has("how"):
        raise spec.error("how", None, "a description of who measured this and how (kind: measured)")
    figure = Figure(
        value=value,
        source=sources[source_id],
        kind=kind,
        note=spec.string("note") if spec.has("note") else "",
        how=spec.string("how") if spec.has("how") else "",
        uncertain=spec.boolean("uncertain", default=False),
    )
    spec.finish()
    return figure


def _instruction_shapes(spec: Fields, value: object) -> dict[str, tuple[int, int, int]]:
    if not isinstance(value, dict) or not value:
        raise spec.error("value", value, "a mapping precision -> [M, N, K]")
    shapes = {}
    for precision, mnk in value.items():
        if precision not in PEAK_KEYS:
            raise spec.error(f"value.{precision}", mnk, f"a precision key from {', '.join(PEAK_KEYS)}")
        if not (isinstance(mnk, list) and len(mnk) == 3
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in mnk)):
            raise spec.error(f"value.{precision}", mnk, "[M, N, K] positive integers")
        for d in mnk:
            GPU_BOUNDS["compute_units.matrix_instruction_mnk"].check(d, spec.origin, f"{spec.path}.value.{precision}")
        shapes[precision] = tuple(mnk)
    return shapes


def _precision_keys(spec: Fields, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(key, str) for key in value):
        raise spec.error("value", value, "a list of precision keys")
    for key in value:
        if key not in PEAK_KEYS:
            raise spec.error("value", value, f"precision keys from {', '.join(PEAK_KEYS)} (got {key!r})")
    return tuple(value)


def gpu_from_dict(data: object, origin: str = "<dict>") -> GPU:
    """Validate a GPU spec (parsed YAML or a hand-written dict) and build a ``GPU``."""
    top = Fields(data, origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION} (the only schema this version reads)")
    raw_sources = top.raw("sources")
    if not isinstance(raw_sources, dict) or not raw_sources or not all(isinstance(v, str) for v in raw_sources.values()):
        raise top.error("sources", raw_sources, "a mapping of source id -> citation text")
    sources = {str(k): v for k, v in raw_sources.items()}

    peaks_spec = top.sub("peak_dense_tflops")
    peaks = {key: _figure(peaks_spec, key, sources) for key in PEAK_KEYS if peaks_spec.has(key)}
    peaks_spec.finish()
    if "bf16" not in peaks and "fp16" not in peaks:
        raise top.error("peak_dense_tflops", sorted(peaks), "at least a bf16 or fp16 entry")

    memory = top.sub("memory")
    units = top.sub("compute_units")
    link = top.sub("interconnect")

    def integer(spec: Fields, value: object) -> int:
        return int(check_number(value, origin, f"{spec.path}.value", minimum=1, integer=True))

    gpu = GPU(
        name=top.string("name").lower(),
        display_name=top.string("display_name"),
        vendor=top.string("vendor", ("nvidia", "amd")),
        architecture=top.string("architecture"),
        status=top.string("status", ("shipping", "announced")),
        year=_year(top),
        peak_dense_tflops=peaks,
        fp8_formats=top.string_list("fp8_formats", FP8_FORMATS),
        block_scaled_formats=top.string_list("block_scaled_formats", BLOCK_SCALED_FORMATS),
        hbm_capacity_gb=_figure(memory, "hbm_capacity_gb", sources),
        hbm_bandwidth_tb_s=_figure(memory, "hbm_bandwidth_tb_s", sources),
        l2_cache_mb=_figure(memory, "l2_cache_mb", sources),
        last_level_cache_mb=_figure(memory, "last_level_cache_mb", sources),
        compute_unit_kind=units.string("kind", ("sm", "cu")),
        compute_units=_figure(units, "count", sources, check=integer),
        boost_clock_mhz=_figure(units, "boost_clock_mhz", sources),
        matrix_clock_mhz=_figure(units, "matrix_clock_mhz", sources),
        shared_memory_kb=_figure(units, "shared_memory_kb", sources),
        register_file_kb=_figure(units, "register_file_kb", sources),
        warp_size=_figure(units, "warp_size", sources, check=integer),
        matrix_instruction_mnk=_figure(units, "matrix_instruction_mnk", sources, check=_instruction_shapes),
        matrix_k_major_only=(_figure(units, "matrix_k_major_only", sources, check=_precision_keys)
                             if units.has("matrix_k_major_only") else None),
        scale_up_gb_s_per_direction=_figure(link, "scale_up_gb_s_per_direction", sources),
        scale_up_domain_gpus=_figure(link, "scale_up_domain_gpus", sources, check=integer),
        scale_out_gb_s_per_direction=_figure(link, "scale_out_gb_s_per_direction", sources),
        host_link_gb_s_per_direction=(_figure(link, "host_link_gb_s_per_direction", sources)
                                      if link.has("host_link_gb_s_per_direction") else None),
        tdp_w=_figure(top, "tdp_w", sources),
        measured=_measured(top, sources),
        aliases=tuple(a.lower() for a in top.string_list("aliases", default=[])),
        origin=origin,
    )
    for spec in (memory, units, link):
        spec.finish()
    top.finish()
    if "fp8" in peaks and not gpu.fp8_formats:
        raise top.error("fp8_formats", [], "the fp8 formats the GPU runs (it has an fp8 peak)")
    return gpu


def _year(top: Fields) -> int:
    year = int(top.number("year", integer=True, minimum=2000))
    if year > 2100:
        raise top.error("year", year, "a year from 2000 to 2100 (the year the GPU ships or shipped)")
    return year


def _measured(top: Fields, sources: dict[str, str]) -> dict[str, Figure]:
    spec = top.sub("measured", default={})
    out: dict[str, Figure] = {}
    if spec.has("matmul_tflops"):
        matmul = spec.sub("matmul_tflops")
        for key in PEAK_KEYS:
            if matmul.has(key):
                out[f"matmul_tflops.{key}"] = _figure(matmul, key, sources)
        matmul.finish()
    if spec.has("hbm_bandwidth_tb_s"):
        out["hbm_bandwidth_tb_s"] = _figure(spec, "hbm_bandwidth_tb_s", sources)
    spec.finish()
    return out


def load_gpu(spec: str | Path | dict) -> GPU:
    """A GPU from a YAML file path or a dict, validated by the catalog's schema."""
    if isinstance(spec, dict):
        return gpu_from_dict(spec)
    return gpu_from_dict(load_yaml(spec), str(spec))


def _catalog_dir() -> Path:
    return specs_dir() / "gpus"


def _variants_dir() -> Path:
    return _catalog_dir() / "variants"


VARIANT_SECTIONS: tuple[str, ...] = ("peak_dense_tflops", "memory", "compute_units", "interconnect", "tdp_w")
"""Where an override may point: a figure of these sections of the base file (``memory.hbm_capacity_gb``,
``peak_dense_tflops.bf16``, ``tdp_w``), or a new ``measured.*`` figure of the variant's own."""


def gpu_variant_from_dict(data: object, origin: str = "<dict>", base_data: dict | None = None) -> GPU:
    """A variant of a catalog part: the base's file with ``overrides`` applied, validated as a GPU.

    Keys: ``schema_version``, ``name``, ``display_name``, ``derived_from`` (a catalog part's exact name),
    ``sources`` (ids must not repeat the base's), ``overrides`` (dotted figure path -> a figure with its source),
    optional ``aliases`` and ``note``. The base's ``measured`` figures are not carried over (they were measured on
    the base part); the variant may state its own as ``measured.*`` overrides. ``base_data``: the base's parsed file
    (read from the catalog folder when None). A variant that lowers ``tdp_w`` and overrides no tensor peak runs
    power-limited: ``rated_tdp_w`` keeps the base's rating (``workbench.power`` derives the sustained clock)."""
    top = Fields(data, origin)
    version = top.number("schema_version", integer=True)
    if version != SCHEMA_VERSION:
        raise top.error("schema_version", version, f"{SCHEMA_VERSION} (the only schema this version reads)")
    base_name = top.string("derived_from")
    if base_data is None:
        parts = sorted(p.stem for p in _catalog_dir().glob("*.yaml"))
        if base_name not in parts:
            raise UnknownNameError("GPU", base_name, parts)
        base_data = load_yaml(_catalog_dir() / f"{base_name}.yaml")
    merged = copy.deepcopy(base_data)
    if merged.get("name") != base_name:
        raise top.error("derived_from", base_name, f"the base file's name ({merged.get('name')!r})")
    raw_sources = top.raw("sources")
    if not isinstance(raw_sources, dict) or not raw_sources:
        raise top.error("sources", raw_sources, "a mapping of source id -> citation text")
    clash = sorted(set(raw_sources) & set(merged.get("sources") or {}))
    if clash:
        raise top.error(f"sources.{clash[0]}", raw_sources[clash[0]], f"an id the base {base_name!r} does not use")
    merged["sources"] = {**merged["sources"], **raw_sources}
    merged.pop("measured", None)
    overrides = top.raw("overrides")
    if not isinstance(overrides, dict) or not overrides:
        raise top.error("overrides", overrides, "a mapping of dotted figure path -> figure (what differs from the base)")
    for key, figure in overrides.items():
        head, *rest = str(key).split(".")
        if head not in (*VARIANT_SECTIONS, "measured"):
            raise top.error(f"overrides.{key}", figure, f"a path under {', '.join(VARIANT_SECTIONS)} or measured")
        node = merged
        for part in [head, *rest][:-1]:
            if head == "measured":  # the variant's own measurements: new keys are fine
                node = node.setdefault(part, {}) if isinstance(node, dict) else None
            else:
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise top.error(f"overrides.{key}", figure, f"a figure of the base {base_name!r}")
        leaf = [head, *rest][-1]
        if head != "measured" and not isinstance(node.get(leaf), dict):
            raise top.error(f"overrides.{key}", figure, f"a figure of the base {base_name!r}")
        node[leaf] = figure
    merged.update(name=top.string("name"), display_name=top.string("display_name"),
                  aliases=list(top.string_list("aliases", default=[])))
    if top.has("note"):
        top.string("note")
    top.finish()
    gpu = gpu_from_dict(merged, origin)
    base_tdp = float(_figure(Fields(base_data, origin), "tdp_w", merged["sources"]).value)
    power_limited = gpu.tdp_w.value < base_tdp and not any(str(k).startswith("peak_dense_tflops.") for k in overrides)
    return dataclasses.replace(gpu, derived_from=base_name, rated_tdp_w=base_tdp if power_limited else None)


def load_gpu_variant(spec: str | Path | dict) -> GPU:
    """A variant from a YAML file path or a dict (``gpu_variant_from_dict``)."""
    if isinstance(spec, dict):
        return gpu_variant_from_dict(spec)
    return gpu_variant_from_dict(load_yaml(spec), str(spec))


_PARTS: Catalog[GPU] = Catalog(_catalog_dir, load_gpu)
_VARIANTS: Catalog[GPU] = Catalog(_variants_dir, load_gpu_variant)


def _catalog() -> dict[str, GPU]:
    return _PARTS.entries()


@cache
def _variants() -> dict[str, GPU]:
    variants = _VARIANTS.entries()
    for gpu in variants.values():
        _check_variant_name(gpu)
    return variants


def _check_variant_name(variant: GPU) -> None:
    if variant.name in _PARTS:
        raise SpecError(variant.origin, "name", variant.name, "a name no catalog part has")


_FLOW_ALIASES = re.compile(r"^aliases:[ \t]*\[([^\]\n]*)\][ \t]*(?:#[^\n]*)?$", re.MULTILINE)
"""A top-level ``aliases: [a, b]`` line, the form every shipped GPU file writes its aliases in."""
_PLAIN_ALIAS = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _flow_alias_lines(text: str) -> list[str]:
    """The lists of ``text``'s top-level ``aliases: [...]`` lines: ``_FLOW_ALIASES.findall``, matched only where
    ``str.find`` meets a line starting ``aliases:`` (a tenth of the time: the multi-line ``^`` is tried at every
    character)."""
    lists, at = [], text.find("aliases:")
    while at >= 0:
        line = _FLOW_ALIASES.match(text, at) if at == 0 or text[at - 1] == "\n" else None
        if line is not None:
            lists.append(line.group(1))
        at = text.find("aliases:", at + 1)
    return lists


def _declared_aliases(catalog: Catalog[GPU], name: str) -> tuple[str, ...]:
    """The aliases file ``name`` declares, read off its one ``aliases: [...]`` line when it has exactly one of
    plain names; any other file (a block list, quoted names, none) is loaded and validated whole."""
    text = fileio.read_text(catalog.folder / f"{name}.yaml", what="GPU spec file")
    lines = _flow_alias_lines(text)
    if len(lines) == 1:
        aliases = tuple(a.strip().lower() for a in lines[0].split(",") if a.strip())
        if all(_PLAIN_ALIAS.fullmatch(a) for a in aliases):
            return aliases
    return catalog.get(name).aliases


@cache
def _aliases() -> dict[str, str]:
    """Every alias of the parts and variants -> the name it stands for; reads each file's aliases line, validating
    only the files whose aliases are not a plain one-line list (the target is validated when it is looked up)."""
    return {alias: name for catalog in (_PARTS, _VARIANTS) for name in catalog.names
            for alias in _declared_aliases(catalog, name)}


def list_gpus() -> list[GPU]:
    """Every catalog GPU (the parts, not their variants), in file-name order."""
    return list(_catalog().values())


def list_gpu_variants() -> list[GPU]:
    """Every catalog variant (``specs/gpus/variants/``), in file-name order."""
    return list(_variants().values())


def _by_name(key: str) -> GPU | None:
    """The part or variant whose file is ``key``.yaml, reading that file alone; None when none is."""
    variant = _VARIANTS.get(key)
    if variant is not None:
        _check_variant_name(variant)
        return variant
    return _PARTS.get(key)


def get_gpu(name: str | GPU) -> GPU:
    """A catalog GPU by exact name or alias (case-insensitive), e.g. ``get_gpu("mi355x")``.

    A name reads its own file only; an alias (``h200``) reads every file's ``aliases`` once per process, the
    whole catalog (a name is never also an alias: tests/test_catalog.py checks the shipped catalog)."""
    if isinstance(name, GPU):
        return name
    key = str(name).lower()
    gpu = _by_name(key)
    if gpu is None and key in _aliases():
        gpu = _by_name(_aliases()[key])
    if gpu is None:
        raise UnknownNameError("GPU", name, [*_catalog(), *_variants(), *_aliases()])
    return gpu
