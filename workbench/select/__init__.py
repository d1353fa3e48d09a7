"""Zero-warmup kernel selection: rank a Triton kernel's whole config space for one shape, analytically.

    >>> from workbench.select import rank_configs
    >>> best = rank_configs("gemm", {"m": 4096, "n": 6144, "k": 4096}, "bf16", "h200", top_k=3)

Each config's time is ``coefficients . terms``: the terms count tiles, waves over the SMs/CUs and the tail wave,
K steps, layout, alignment and ragged edges exactly (``select.gemm``, ``select.attention``); the coefficients
price them. With a selection profile for the GPU (``specs/calibration/<gpu>-select.yaml``, fitted by
``workbench select --fit`` from an exhaustive sweep) they are measured per config; otherwise they come from the
GPU's catalog figures (``spec_coefficients``), which is what every AMD GPU gets here: AMD picks are predictions.
Configs that do not fit the unit's shared memory/LDS and registers are dropped. Pure Python: no torch, no GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.kernels.spaces import attention_config_space, gemm_config_space
from workbench.perf.efficiency import Constants, default_constants
from workbench.precision import get_precision
from workbench.select import attention as attention_model
from workbench.select import gemm as gemm_model
from workbench.select.profile import load_selection_profile

OPS = ("gemm", "attention")
GEMM_DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")
AMD_ARCH = {"cdna3": "gfx942", "cdna4": "gfx950"}
"""The Triton target of each AMD architecture with a config space (MI300X/MI325X, MI350X/MI355X)."""


@dataclass(frozen=True)
class Candidate:
    """One config of a kernel with its predicted time for one shape."""

    config: dict
    time_s: float
    tiles: int
    """Programs launched (output tiles, or query blocks x heads)."""
    tiles_per_unit: int
    """Programs each SM/CU runs one after another: the waves, tail included."""
    occupancy: int
    """Programs resident per SM/CU (shared memory/LDS and registers)."""
    source: str
    """"calibrated" (a fitted selection profile) or "spec" (catalog figures and guesses)."""

    @property
    def key(self) -> str:
        return gemm_model.config_key(self.config)


def _check_shape(op: str, shape: dict) -> dict:
    keys = ("m", "n", "k") if op == "gemm" else ("batch", "seq", "heads_q", "heads_kv", "head_dim")
    if not isinstance(shape, dict):
        raise WorkbenchError(f"shape: got {type(shape).__name__}, expected a dict with keys {', '.join(keys)}")
    missing = [key for key in keys if key not in shape]
    if missing:
        raise WorkbenchError(f"shape: missing {', '.join(missing)} (got {shape}); a {op} shape needs {', '.join(keys)}")
    for key in keys:
        value = shape[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkbenchError(f"shape[{key!r}]: got {value!r}, expected a positive integer")
    if op == "attention":
        if shape["heads_q"] % shape["heads_kv"]:
            raise WorkbenchError(f"shape: heads_q={shape['heads_q']} is not a multiple of heads_kv={shape['heads_kv']}")
        return {**shape, "causal": bool(shape.get("causal", True))}
    return shape


def backend_of(gpu: GPU) -> tuple[str, str]:
    """(Triton backend, AMD target) of a catalog GPU."""
    if gpu.vendor == "nvidia":
        return "cuda", ""
    if gpu.architecture not in AMD_ARCH:
        raise WorkbenchError(f"gpu: {gpu.name} ({gpu.architecture}) has no Triton config space here; "
                             f"expected an NVIDIA GPU or an AMD {' or '.join(AMD_ARCH)} GPU")
    return "hip", AMD_ARCH[gpu.architecture]


@functools.lru_cache(maxsize=64)
def _space(op: str, backend: str, arch: str, operand_bytes: int, head_dim: int) -> tuple[dict, ...]:
    if op == "gemm":
        return tuple(gemm_config_space(backend, arch=arch or "gfx942", dtype_bytes=operand_bytes))
    return tuple(attention_config_space(backend, "fwd", head_dim))


_CONSTANTS: dict[str, Constants] = {}


def _constants(gpu: GPU) -> Constants:
    """The GPU's spec constants, cached by name (a GPU holds dicts, so it cannot key an lru_cache)."""
    if gpu.name not in _CONSTANTS:
        _CONSTANTS[gpu.name] = default_constants(gpu)
    return _CONSTANTS[gpu.name]


def _coefficients(op: str, gpu: GPU, dtype: str, space: tuple[dict, ...], calibrated: bool, shape: dict):
    """(coefficients per config, source): the profile's when it covers the whole space, else the spec's."""
    operand_bytes = int(get_precision(dtype).bytes_per_element) or 1
    if calibrated:
        table = load_selection_profile(gpu, op, operand_bytes)
        if table and all(gemm_model.config_key(c) in table for c in space):
            return [table[gemm_model.config_key(c)] for c in space], "calibrated"
    constants = _constants(gpu)
    if op == "gemm":
        return [gemm_model.spec_coefficients(c, gpu, dtype, constants) for c in space], "spec"
    return [attention_model.spec_coefficients(c, shape, gpu, dtype, constants) for c in space], "spec"


def rank_configs(op: str, shape: dict, dtype: str, gpu: str | GPU, *, layout: str = "nn", top_k: int | None = None,
                 calibrated: bool = True, configs: list[dict] | None = None) -> list[Candidate]:
    """The kernel's configs for ``shape`` on ``gpu``, fastest predicted first (``top_k`` of them, or all).

    op "gemm": shape {m, n, k}, C[m, n] = A[m, k] @ B[k, n] in ``layout`` nn, nt or tn; dtype bf16, fp16, fp8,
    tf32 or fp32. op "attention" (forward): shape {batch, seq, heads_q, heads_kv, head_dim, causal}, dtype bf16
    or fp16. ``configs`` ranks a given list (e.g. an autotuner's) instead of the whole space.
    """
    if op not in OPS:
        raise WorkbenchError(f"op: got {op!r}, expected one of {OPS}")
    shape = _check_shape(op, shape)
    gpu = get_gpu(gpu)
    precision = get_precision(dtype)  # raises on an unknown dtype, listing the valid ones
    if op == "gemm" and dtype not in GEMM_DTYPES:
        raise WorkbenchError(f"dtype: got {dtype!r}, expected one of {GEMM_DTYPES} for the GEMM kernel")
    if op == "attention" and dtype not in ("bf16", "fp16"):
        raise WorkbenchError(f"dtype: got {dtype!r}, expected 'bf16' or 'fp16' for the attention kernel")
    if layout not in gemm_model.LAYOUTS:
        raise WorkbenchError(f"layout: got {layout!r}, expected one of {gemm_model.LAYOUTS}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise WorkbenchError(f"top_k: got {top_k!r}, expected a positive integer or None (all)")
    backend, arch = backend_of(gpu)
    operand_bytes = max(1, int(precision.bytes_per_element))
    space = _space(op, backend, arch, operand_bytes, shape.get("head_dim", 0))
    coefficients, source = _coefficients(op, gpu, dtype, space, calibrated, shape)
    if configs is not None:
        known = {gemm_model.config_key(c): i for i, c in enumerate(space)}
        if op == "gemm":  # a config outside the space gets spec coefficients
            picked = [(c, coefficients[known[gemm_model.config_key(c)]] if gemm_model.config_key(c) in known
                       else gemm_model.spec_coefficients(c, gpu, dtype, _constants(gpu))) for c in configs]
        else:
            picked = [(c, attention_model.spec_coefficients(c, shape, gpu, dtype, _constants(gpu))) for c in configs]
    else:
        picked = list(zip(space, coefficients))
    units = gpu.compute_units.value
    candidates = []
    if op == "gemm":
        m, n, k = shape["m"], shape["n"], shape["k"]
        floor = gemm_model.memory_floor_s(m, n, k, dtype, gpu, _constants(gpu))
        for config, coef in picked:
            resident = gemm_model.occupancy(config, gpu, operand_bytes)
            if not resident:
                continue
            t = gemm_model.terms(config, m, n, k, layout, operand_bytes, units)
            time_s = max(floor, sum(c * x for c, x in zip(coef, t)))
            tiles = -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"])
            candidates.append(Candidate(config, time_s, tiles, int(t[2]), resident, source))
    else:
        for config, coef in picked:
            t = attention_model.terms(config, shape, units)
            programs = -(-shape["seq"] // config["BLOCK_M"]) * shape["batch"] * shape["heads_q"]
            candidates.append(Candidate(config, sum(c * x for c, x in zip(coef, t)), programs, int(t[2]), 1, source))
    if not candidates:
        raise WorkbenchError(f"no config of the {op} kernel fits {gpu.name}'s shared memory and registers")
    candidates.sort(key=lambda c: c.time_s)
    return candidates[:top_k] if top_k else candidates


def select_config(op: str, shape: dict, dtype: str, gpu: str | GPU, **kwargs) -> Candidate:
    """The predicted-fastest config (top-1 of ``rank_configs``)."""
    return rank_configs(op, shape, dtype, gpu, top_k=1, **kwargs)[0]


@dataclass(frozen=True)
class KernelChoice:
    """Triton or the vendor library for one GEMM: the per-vendor shim's decision."""

    choice: str
    """"triton" or "vendor" (cuBLAS/hipBLASLt)."""
    config: dict | None
    triton_s: float
    vendor_s: float
    source: str


def vendor_choice(shape: dict, dtype: str, gpu: str | GPU, *, layout: str = "nn",
                  calibrated: bool = True) -> KernelChoice:
    """Compare the best Triton config with the vendor library's predicted time (``workbench.perf.gemm``, the
    model validated against cuBLAS in ``benchmarks/results/h200/model_eval.md``) and keep the faster."""
    from workbench.graph.ops import GemmShape
    from workbench.perf.efficiency import constants_for, profile_path
    from workbench.perf.gemm import gemm_time

    gpu = get_gpu(gpu)
    calibrated = calibrated and profile_path(gpu).exists()  # the vendor model's profile (workbench calibrate)
    best = select_config("gemm", shape, dtype, gpu, layout=layout, calibrated=calibrated)
    vendor = gemm_time(GemmShape(shape["m"], shape["n"], shape["k"]), dtype, gpu,
                       constants_for(gpu, calibrated)).time_s
    if vendor < best.time_s:
        return KernelChoice("vendor", None, best.time_s, vendor, best.source)
    return KernelChoice("triton", best.config, best.time_s, vendor, best.source)


def autotune_pruner(dtype: str, gpu: str | GPU, top_k: int = 3, calibrated: bool = True):
    """A ``prune_configs_by={"early_config_prune": ...}`` hook for ``triton.autotune`` over a GEMM kernel whose
    arguments are named M, N, K and stride_am, stride_bk (as ``workbench.kernels.gemm``): keeps the ``top_k``
    configs this model ranks fastest, so the autotuner benchmarks 3 instead of the whole space."""
    gpu = get_gpu(gpu)

    def prune(configs, named_args, **kwargs):
        args = {**named_args, **kwargs}
        layout = ("t" if args.get("stride_am") == 1 else "n") + ("t" if args.get("stride_bk") == 1 else "n")
        as_dicts = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in configs]
        ranked = rank_configs("gemm", {"m": int(args["M"]), "n": int(args["N"]), "k": int(args["K"])}, dtype, gpu,
                              layout=layout, calibrated=calibrated, configs=as_dicts)
        order = {gemm_model.config_key(c.config): i for i, c in enumerate(ranked)}
        kept = sorted((c for c, d in zip(configs, as_dicts) if gemm_model.config_key(d) in order),
                      key=lambda c: order[gemm_model.config_key({**c.kwargs, "num_warps": c.num_warps,
                                                                 "num_stages": c.num_stages})])
        return kept[:top_k] or list(configs[:1])
    return prune
