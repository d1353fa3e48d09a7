"""Zero-warmup kernel selection: rank a Triton kernel's whole config space for one shape, analytically.

    >>> from workbench.select import rank_configs
    >>> best = rank_configs("gemm", {"m": 4096, "n": 6144, "k": 4096}, "bf16", "h200", top_k=3)

Each config's time is ``coefficients . terms``: the terms count tiles, waves over the SMs/CUs and the tail wave,
K steps, layout, alignment and ragged edges exactly (``select.gemm``, ``select.attention``); the coefficients
price them. With a selection profile for the GPU (``specs/calibration/<gpu>-select.yaml``, fitted by
``workbench select --fit`` from an exhaustive sweep) they are measured per config; otherwise they come from the
GPU's catalog figures (``spec_coefficients``), which is what every AMD GPU gets here: AMD picks are predictions.
Configs that do not fit the unit's shared memory/LDS and registers are dropped. Pure Python: no torch, no GPU.

The model prices GPU time. A runtime pick (``config_for_device``: config=None; ``vendor_choice(host_bound=True)``:
the per-vendor shim) prices a call as max(GPU time, the host time of its path) (``select.host``), so a small GEMM
goes to the path that is cheapest to launch rather than to one whose Python costs more than its kernel.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.hardware import GPU, get_gpu
from workbench.kernels.spaces import (ACCUMULATIONS, SKINNY_MAX_M, attention_config_space, gemm_config_space,
                                      gluon_config_space, gluon_eligible, is_gluon, is_split_k, is_swap_ab, is_tma,
                                      split_k_config_space, split_k_fits, tma_config_space, tma_eligible,
                                      tma_split_config_space, tma_split_fills)
from workbench.perf.efficiency import Constants, default_constants
from workbench.precision import get_precision
from workbench.select import attention as attention_model
from workbench.select import gemm as gemm_model
from workbench.select import host as host_model
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
    """"calibrated" (a fitted selection profile), "calibrated+anchored" (fitted, with Gluon configs the profile lacks
    priced from its TMA configs) or "spec" (catalog figures and guesses)."""
    host_s: float = 0.0
    """Host seconds per call of the config's path (``select.host``); 0 unless ranked with ``host_bound``."""

    @property
    def key(self) -> str:
        return gemm_model.config_key(self.config)

    @property
    def call_s(self) -> float:
        """Per-call time of back-to-back calls: max(GPU time, host time) (``select.host``)."""
        return host_model.per_call_s(self.time_s, self.host_s)


def _check_shape(op: str, shape: dict) -> dict:
    keys = ("m", "n", "k") if op == "gemm" else ("batch", "seq", "heads_q", "heads_kv", "head_dim")
    if not isinstance(shape, dict):
        raise WorkbenchError(f"shape: got {type(shape).__name__}, expected a dict with keys {', '.join(keys)}")
    missing = [key for key in keys if key not in shape]
    if missing:
        raise WorkbenchError(f"shape: missing {', '.join(missing)} (got {shape}); a {op} shape needs {', '.join(keys)}")
    for key in keys:
        value = shape[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 40:  # rows.MAX_DIM
            raise WorkbenchError(f"shape[{key!r}]: got {repr(value)[:40]}, expected a positive integer up to 2^40")
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


TMA_ARCHITECTURES = ("hopper",)
"""Where the fp8 GEMM space also holds ``gemm_tma.py``'s persistent TMA configs (sm_90; Blackwell's sm_100 builds
were never run here)."""


GLUON_ARCHITECTURES = ("hopper",)
"""Where the fp8 GEMM space also holds ``gemm_gluon.py``'s configs (sm_90 only: the kernel is written for
Hopper's wgmma). At run time ``dispatch.triton_scaled_matmul`` offers them only where the kernel runs (``gluon=``)."""


@functools.lru_cache(maxsize=64)
def _space(op: str, backend: str, arch: str, operand_bytes: int, head_dim: int, tma: bool = False,
           gluon: str = "", split_k: bool = False, tf32: bool = False) -> tuple[dict, ...]:
    """The configs to rank. ``tma``: add the TMA kernel's fp8 and bf16/fp16 configs, leaving out the
    warp-specialized ones (triton 3.6 fails to compile the larger ones; measured only without them); gemm.py's
    fp8 reaches 0.78 of torch._scaled_mm on the H200, the TMA kernel 0.86, and in bf16 (B row-major) the TMA
    kernel's best single config 0.989 of torch.matmul against gemm.py's 0.973
    (benchmarks/results/h200/kernels/tma/SUMMARY.md). bf16 TMA configs matter most for B column-major ("nt", the
    dgrad GEMMs): gemm.py runs them at 0.75-0.81 of torch.matmul where its "nn" forward GEMMs of the same sizes
    run at 0.94-0.99 (benchmarks/results/h200/kernels/broad/REPORT.md), while TMA reads either layout as one box.
    ``gluon``: "exact" or "fast" adds the Gluon kernel's fp8 configs of that accumulation mode ("" none).
    ``split_k``: add gemm.py's split-K family on NVIDIA (``spaces.split_k_config_space``; 16-bit and fp8), for
    GEMMs whose output tiles cannot fill the GPU (issue 20: skinny M <= 256 at 0.4-0.9 of cuBLAS, DLRM's small N),
    and with ``tma`` the TMA kernel's fp8 split-K configs (``spaces.tma_split_config_space``: one launch; ranked
    where a tile's units fill one wave, ``spaces.tma_split_fills``).
    gemm.py's swap-AB family (``spaces.skinny_config_space``) is not in this space: on the H200 the model's pick
    among them ran at 0.59 of cuBLAS on 16 x 4096 x 14336 where the family's best reached 0.83, and at 0.84 on
    64 x 4096 x 14336 (benchmarks/results/h200/kernels/skinny/REPORT.md): their pricing, anchored on gemm.py's
    configs, cannot rank them yet. Pass them as ``configs=`` (``rank_configs`` counts them on the swapped problem,
    for M <= SKINNY_MAX_M). ``tf32`` (fp32 operands multiplied as tf32): the TMA kernel's tf32 configs join with
    ``tma``."""
    if op == "gemm":
        space = gemm_config_space(backend, arch=arch or "gfx942", dtype_bytes=operand_bytes)
        if tma and (operand_bytes in (1, 2) or (operand_bytes == 4 and tf32)):
            space += tma_config_space(operand_bytes, warp_specialize=False)
        if gluon and operand_bytes == 1:
            space += gluon_config_space(gluon)
        if split_k and backend == "cuda" and operand_bytes in (1, 2):
            space += split_k_config_space(operand_bytes)
            if tma:
                space += tma_split_config_space(operand_bytes)
        return tuple(space)
    return tuple(attention_config_space(backend, "fwd", head_dim))


_CONSTANTS: dict[str, Constants] = {}


def _constants(gpu: GPU) -> Constants:
    """The GPU's spec constants, cached by name (a GPU holds dicts, so it cannot key an lru_cache)."""
    if gpu.name not in _CONSTANTS:
        _CONSTANTS[gpu.name] = default_constants(gpu)
    return _CONSTANTS[gpu.name]


def _coefficients(op: str, gpu: GPU, dtype: str, space: list[dict], calibrated: bool, shape: dict):
    """(coefficients per config, source): the profile's when it covers every config that fits, else the
    spec's for all (a ranking never mixes fitted and spec coefficients). One exception: a profile that covers
    every other config but not all of the Gluon kernel's (not swept yet, or a fast-only config) prices each
    uncovered Gluon config from the fitted coefficients of its nearest TMA config (``gemm_model.gluon_anchor``),
    each uncovered TMA config (bf16: not swept yet) from gemm.py's config of the same tile and warps
    (``gemm_model.tma_anchor``), each swap-AB config from gemm.py's nearest config (``gemm_model.skinny_anchor``)
    and each split-K config (gemm.py's or the TMA kernel's) from its unsplit twin (``gemm_model.split_k_anchor``),
    source "calibrated+anchored"."""
    operand_bytes = int(get_precision(dtype).bytes_per_element) or 1
    if calibrated:
        table = load_selection_profile(gpu, op, operand_bytes, head_dim=shape.get("head_dim", 0))
        if table and all(gemm_model.config_key(c) in table for c in space):
            return [table[gemm_model.config_key(c)] for c in space], "calibrated"
        anchored = lambda c: is_gluon(c) or is_tma(c) or is_split_k(c) or is_swap_ab(c)  # noqa: E731
        anchor = lambda c: (gemm_model.gluon_anchor(c, table) if is_gluon(c)  # noqa: E731
                            else gemm_model.tma_anchor(c, table) if is_tma(c) and not is_split_k(c)
                            else gemm_model.skinny_anchor(c, table) if is_swap_ab(c)
                            else gemm_model.split_k_anchor(c, table))
        if table and all(gemm_model.config_key(c) in table for c in space if not anchored(c)):
            priced = [table.get(gemm_model.config_key(c)) or anchor(c) for c in space]
            if all(p is not None for p in priced):
                return priced, "calibrated+anchored"
    constants = _constants(gpu)
    if op == "gemm":
        return [gemm_model.spec_coefficients(c, gpu, dtype, constants) for c in space], "spec"
    return [attention_model.spec_coefficients(c, shape, gpu, dtype, constants) for c in space], "spec"


def _resident(op: str, config: dict, gpu: GPU, operand_bytes: int, shape: dict, compiled: dict) -> int:
    """Programs resident per SM/CU; 0 when the config does not fit (analytically, or per the AMD cache)."""
    if not compiled.get(gemm_model.config_key(config), {}).get("fits", True):
        return 0
    if op == "gemm":
        return gemm_model.occupancy(config, gpu, operand_bytes)
    return attention_model.occupancy(config, shape["head_dim"], gpu, operand_bytes)


@functools.lru_cache(maxsize=1)
def _resource_table() -> dict:
    """specs/kernel_resources.yaml: AMD configs cross-compiled on a CPU (benchmarks/select/kernel_resources.py)."""
    from workbench._data import specs_dir
    from workbench.schema import load_yaml

    path = specs_dir() / "kernel_resources.yaml"
    return load_yaml(path).get("kernels", {}) if path.exists() else {}


def compiled_resources(op: str, arch: str, operand_bytes: int, head_dim: int = 0) -> dict:
    """{config key: {lds_bytes, vgprs, spills, occupancy, fits}} for an AMD target, from the cached
    cross-compilation ({} when the cache lacks it: configs then pass on the analytical shared-memory check)."""
    section = f"gemm-{arch}-{operand_bytes}byte" if op == "gemm" else f"attention-{arch}-bf16-d{head_dim}"
    return _resource_table().get(section, {})


def rank_configs(op: str, shape: dict, dtype: str, gpu: str | GPU, *, layout: str = "nn", top_k: int | None = None,
                 calibrated: bool = True, configs: list[dict] | None = None, accumulation: str = "exact",
                 gluon: bool = True, tma: bool = True, split_k: bool = True,
                 host_bound: bool = False) -> list[Candidate]:
    """The kernel's configs for ``shape`` on ``gpu``, fastest predicted first (``top_k`` of them, or all).

    op "gemm": shape {m, n, k}, C[m, n] = A[m, k] @ B[k, n] in ``layout`` nn, nt or tn; dtype bf16, fp16, fp8,
    tf32 or fp32. op "attention" (forward): shape {batch, seq, heads_q, heads_kv, head_dim, causal}, dtype bf16
    or fp16. ``configs`` ranks a given list (e.g. an autotuner's) instead of the whole space; with a profile that
    lacks one of them, the ranking uses spec coefficients throughout. fp8 on Hopper also ranks the Gluon kernel's
    configs of ``accumulation`` ("exact": use_fast_accum=False, or "fast"), unless ``gluon=False`` (a runtime
    where Gluon does not run); an exact request never gets a fast-only config. ``tma=False`` leaves out the TMA
    kernel's configs (a call it cannot serve: a bias, an activation, another output dtype, a runtime without it);
    ``split_k=False`` the split-K configs (a call with an activation: partial sums cannot take it).
    ``host_bound`` (GEMMs): rank by the per-call time of back-to-back calls, max(GPU time, the host time of the
    config's path: gemm.py, split-K, TMA or Gluon; ``select.host``), GPU time breaking ties; each candidate's
    ``host_s`` says its host time, ``time_s`` stays the GPU time.
    """
    if op not in OPS:
        raise WorkbenchError(f"op: got {op!r}, expected one of {OPS}")
    shape = _check_shape(op, shape)
    gpu = get_gpu(gpu)
    precision = get_precision(dtype)  # raises on an unknown dtype, listing the valid ones
    if op == "gemm" and dtype not in GEMM_DTYPES:
        raise WorkbenchError(f"dtype: got {dtype!r}, expected one of {GEMM_DTYPES} for the GEMM kernel")
    if op == "gemm" and precision.peak_key not in gpu.peak_dense_tflops:
        raise WorkbenchError(f"dtype: {gpu.name} has no {dtype} matrix path (its catalog lists "
                             f"{', '.join(gpu.peak_dense_tflops)}); expected one of those")
    if op == "attention" and dtype not in ("bf16", "fp16"):
        raise WorkbenchError(f"dtype: got {dtype!r}, expected 'bf16' or 'fp16' for the attention kernel")
    if layout not in gemm_model.LAYOUTS:
        raise WorkbenchError(f"layout: got {layout!r}, expected one of {gemm_model.LAYOUTS}")
    if accumulation not in ACCUMULATIONS:
        raise WorkbenchError(f"accumulation: got {accumulation!r}, expected one of {ACCUMULATIONS}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise WorkbenchError(f"top_k: got {top_k!r}, expected a positive integer or None (all)")
    backend, arch = backend_of(gpu)
    operand_bytes = max(1, int(precision.bytes_per_element))
    # on AMD, the cross-compiled cache says which configs spill registers or overflow LDS
    compiled = compiled_resources(op, arch, operand_bytes, shape.get("head_dim", 0)) if arch else {}
    with_gluon = accumulation if gluon and gpu.architecture in GLUON_ARCHITECTURES else ""
    space = configs if configs is not None else _space(op, backend, arch, operand_bytes, shape.get("head_dim", 0),
                                                       tma and gpu.architecture in TMA_ARCHITECTURES, with_gluon,
                                                       split_k, dtype == "tf32")
    if op == "gemm":  # the TMA and Gluon kernels only take 16-byte aligned rows in their layouts
        m, n, k = shape["m"], shape["n"], shape["k"]
        space = [c for c in space if (not is_tma(c) or tma_eligible(m, n, k, layout, operand_bytes))
                 and (not is_gluon(c) or (gluon_eligible(m, n, k, layout, operand_bytes)
                                          and c.get("ACCUMULATION", accumulation) == accumulation))
                 and split_k_fits(c, k) and tma_split_fills(c, m, n, gpu.compute_units.value)
                 and (not is_swap_ab(c) or m <= SKINNY_MAX_M)]
    resident = [_resident(op, c, gpu, operand_bytes, shape, compiled) for c in space]
    fitting = [c for c, r in zip(space, resident) if r]
    if not fitting:
        raise WorkbenchError(f"no config of the {op} kernel fits {gpu.name}'s shared memory and registers")
    coefficients, source = _coefficients(op, gpu, dtype, fitting, calibrated, shape)
    units = gpu.compute_units.value
    candidates = []
    if op == "gemm":
        m, n, k = shape["m"], shape["n"], shape["k"]
        floor = gemm_model.memory_floor_s(m, n, k, dtype, gpu, _constants(gpu))
        copies = gemm_model.padding_s(m, n, k, layout, operand_bytes, gpu, _constants(gpu))
        for config, coef, occupancy in zip(fitting, coefficients, [r for r in resident if r]):
            t = gemm_model.terms(config, m, n, k, layout, operand_bytes, units, occupancy)
            reduce = (gemm_model.tma_split_k_reduce_s(config, m, n, gpu, _constants(gpu)) if is_tma(config) else
                      gemm_model.split_k_reduce_s(m, n, config.get("SPLIT_K", 1), 2 if operand_bytes <= 2 else 4,
                                                  gpu, _constants(gpu)))
            time_s = copies + reduce + max(floor, sum(c * x for c, x in zip(coef, t)))
            rows, cols = (n, m) if is_swap_ab(config) else (m, n)  # a swap-AB kernel tiles C^T
            tiles = -(-rows // config["BLOCK_M"]) * -(-cols // config["BLOCK_N"])
            candidates.append(Candidate(config, time_s, tiles, int(t[2]), occupancy, source))
    else:
        for config, coef, occupancy in zip(fitting, coefficients, [r for r in resident if r]):
            t = attention_model.terms(config, shape, units)
            programs = -(-shape["seq"] // config["BLOCK_M"]) * shape["batch"] * shape["heads_q"]
            candidates.append(Candidate(config, sum(c * x for c, x in zip(coef, t)), programs, int(t[2]), occupancy,
                                        source))
    if op == "gemm" and host_bound:
        host = host_model.host_constants(gpu, calibrated)
        candidates = [dataclasses.replace(c, host_s=host_model.host_call_s(host_model.host_path(c.config), dtype, host))
                      for c in candidates]
        candidates.sort(key=lambda c: (c.call_s, c.time_s))
    else:
        candidates.sort(key=lambda c: c.time_s)
    if op == "gemm" and configs is None and any(is_split_k(c.config) for c in candidates):
        unsplit = min((c.time_s for c in candidates if not is_split_k(c.config)), default=None)
        if unsplit is not None and unsplit < SPLIT_K_MIN_GEMM_S:  # host-bound: no second launch
            candidates = [c for c in candidates if not is_split_k(c.config)]
    return candidates[:top_k] if top_k else candidates


SPLIT_K_MIN_GEMM_S = 20e-6
"""Split-K configs are offered only for GEMMs whose best unsplit config is predicted to take at least this long.
Shorter GEMMs are host-bound when called back to back (benchmarks/results/h200/kernels/broad/REPORT.md lists them),
and split-K's reduction is a second launch, 10-30 us of host time on the H200 (host_overhead.md); issue 20 judges
GEMM speed where the vendor call takes >= 20 us. A guess."""


SHORTLIST_DISTINCT = ("KERNEL", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")
"""What makes shortlisted configs different enough: configs that differ only in stages or grouping tend to run
alike, so the model's errors hit them together; another tile, warp count (one or two warpgroups sharing the tile's
MMAs) or kernel does not. Chosen on the fit half of the H200 sweeps (bf16 top-3 0.9942 with warps, 0.9936 with
the tile alone)."""


def shortlist(candidates: list[Candidate], k: int) -> list[Candidate]:
    """The ``k`` candidates to benchmark: best predicted first, then the next best that differ in
    ``SHORTLIST_DISTINCT`` from those listed, then the rest in predicted order."""
    tile = lambda c: tuple(c.config.get(key) for key in SHORTLIST_DISTINCT)  # noqa: E731
    picked, tiles = [], set()
    for candidate in candidates:
        if len(picked) < k and tile(candidate) not in tiles:
            picked.append(candidate)
            tiles.add(tile(candidate))
    picked += [c for c in candidates if c not in picked][: k - len(picked)]
    return picked


def select_config(op: str, shape: dict, dtype: str, gpu: str | GPU, **kwargs) -> Candidate:
    """The predicted-fastest config (top-1 of ``rank_configs``)."""
    return rank_configs(op, shape, dtype, gpu, top_k=1, **kwargs)[0]


def config_for_device(op: str, shape: dict, dtype: str, device_name: str, *, layout: str = "nn",
                      accumulation: str = "exact", gluon: bool = False, tma: bool = True,
                      split_k: bool = True) -> dict | None:
    """The pick for a kernel launched without a config on the local GPU named ``device_name`` (as
    ``torch.cuda.get_device_name`` says it), cached per shape; None when that GPU is not in the catalog or has
    no config space here (the kernel then keeps its static default). ``accumulation``: fp8's mode;
    ``gluon``: whether the Gluon kernel runs here (the caller knows the runtime; this module does not import
    torch or triton); ``tma`` / ``split_k``: whether the TMA kernel / a split-K config may serve the call. Do not
    mutate the returned dict. GEMM picks are priced per call, max(GPU time, host time of the path)
    (``rank_configs(host_bound=True)``)."""
    return _config_for_device(op, tuple(sorted(shape.items())), dtype, layout, device_name, accumulation, gluon, tma,
                              split_k)


@functools.lru_cache(maxsize=4096)
def _config_for_device(op: str, shape: tuple, dtype: str, layout: str, device_name: str, accumulation: str = "exact",
                       gluon: bool = False, tma: bool = True, split_k: bool = True) -> dict | None:
    from workbench.bench import match_catalog

    gpu = match_catalog(device_name)
    if gpu is None:
        return None
    try:
        return select_config(op, dict(shape), dtype, gpu, layout=layout, accumulation=accumulation,
                             gluon=gluon, tma=tma, split_k=split_k, host_bound=op == "gemm").config
    except WorkbenchError:
        return None


VENDOR_MARGIN = 0.10
"""Triton displaces the vendor library only when predicted at least this much faster: about the selector's
held-out time error (11% mean on the H200). A guess; chosen after seeing the held-out shim figure, which is
therefore optimistic (benchmarks/results/h200/select/REPORT.md says so)."""


@dataclass(frozen=True)
class ShimChoice:
    """Triton or the vendor library for one GEMM: the per-vendor shim's decision (a recipe records it as a
    ``workbench.recipe.schema.KernelChoice``)."""

    choice: str
    """"triton" or "vendor" (cuBLAS/hipBLASLt)."""
    config: dict | None
    triton_s: float
    vendor_s: float
    source: str

    @property
    def time_s(self) -> float:
        """Predicted time of the kernel chosen."""
        return self.triton_s if self.choice == "triton" else self.vendor_s


def vendor_choice(shape: dict, dtype: str, gpu: str | GPU, *, layout: str = "nn",
                  calibrated: bool = True, accumulation: str = "exact", gluon: bool = True,
                  host_bound: bool = False) -> ShimChoice:
    """Compare the best Triton config with the vendor library's predicted time (``workbench.perf.gemm``, the
    model validated against cuBLAS in ``benchmarks/results/h200/model_eval.md``): Triton when it is predicted
    faster by VENDOR_MARGIN, else the vendor library. ``accumulation`` and ``gluon`` as in ``rank_configs``.
    ``host_bound`` (the shim at run time): both sides priced per call, max(GPU time, host time of the path)
    (``select.host``; the vendor's ``host_call_us.vendor``), and ``triton_s`` / ``vendor_s`` are those prices."""
    from workbench.graph.ops import GemmShape
    from workbench.perf.efficiency import constants_for, profile_path
    from workbench.perf.gemm import gemm_time

    gpu = get_gpu(gpu)
    best = select_config("gemm", shape, dtype, gpu, layout=layout, calibrated=calibrated, accumulation=accumulation,
                         gluon=gluon, host_bound=host_bound)
    vendor_profile = calibrated and profile_path(gpu).exists()  # the vendor model's own profile (workbench calibrate)
    vendor = gemm_time(GemmShape(shape["m"], shape["n"], shape["k"]), dtype, gpu,
                       constants_for(gpu, vendor_profile)).time_s
    triton = best.time_s
    if host_bound:
        triton = best.call_s
        host = host_model.host_constants(gpu, calibrated)
        vendor = host_model.per_call_s(vendor, host_model.host_call_s("vendor", dtype, host))
    if triton >= vendor * (1 - VENDOR_MARGIN):
        return ShimChoice("vendor", None, triton, vendor, best.source)
    return ShimChoice("triton", best.config, triton, vendor, best.source)


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
        order = {c.key: i for i, c in enumerate(ranked)}
        keyed = [(order[gemm_model.config_key(d)], c) for c, d in zip(configs, as_dicts)
                 if gemm_model.config_key(d) in order]
        return [c for _, c in sorted(keyed, key=lambda pair: pair[0])][:top_k] or list(configs[:1])
    return prune


LAYOUT_OF_PHASE = {"fwd": "nn", "dgrad": "nt", "wgrad": "tn"}
"""The training step's GEMM layouts: activations @ weight, grad @ weight^T, activations^T @ grad."""


def kernel_choices(prediction, *, calibrated: bool = True) -> list[dict]:
    """Per distinct GEMM and attention shape of a predicted training step, the kernel to run: the selector's
    Triton config or the vendor library (``vendor_choice``; for attention the step model's flash-attention
    time), as recipe ``kernels`` entries (op, shape, dtype,
    choice, config, predicted_ms). A GEMM shape that occurs in several layouts keeps its first (forward) one."""
    from workbench.graph.ops import AttentionShape, GemmShape
    from workbench.kernels.spaces import HEAD_DIMS

    gpu = prediction.gpu
    try:
        backend_of(gpu)
    except WorkbenchError:
        return []  # no Triton config space for this GPU: every op stays on the vendor library
    entries, seen = [], set()
    for op_prediction in prediction.ops:
        op = op_prediction.op
        if isinstance(op.shape, GemmShape) and op.dtype in GEMM_DTYPES and min(op.shape.m, op.shape.n, op.shape.k) >= 16:
            shape = {"m": op.shape.m, "n": op.shape.n, "k": op.shape.k}
            key = ("gemm", op.dtype, tuple(shape.values()))
            if key in seen:
                continue
            seen.add(key)
            layout = LAYOUT_OF_PHASE.get(op.name.rsplit(".", 1)[-1], "nn")
            choice = vendor_choice(shape, op.dtype, gpu, layout=layout, calibrated=calibrated)
            entries.append(dict(op="gemm", shape=shape, dtype=op.dtype, choice=choice.choice, config=choice.config,
                                predicted_ms=round(choice.time_s * 1e3, 6)))
        elif isinstance(op.shape, AttentionShape) and op.dtype in ("bf16", "fp16") and op.shape.head_dim in HEAD_DIMS:
            s = op.shape
            shape = {"batch": s.batch, "seq": s.seq, "heads_q": s.heads_q, "heads_kv": s.heads_kv,
                     "head_dim": s.head_dim, "causal": int(s.causal)}
            key = ("attention", op.dtype, tuple(shape.values()))
            if key in seen or op.phase != "fwd":
                continue
            seen.add(key)
            best = select_config("attention", shape, op.dtype, gpu, calibrated=calibrated)
            vendor_s = op_prediction.time_s  # the step model's flash-attention (vendor library) time
            triton = best.time_s < vendor_s * (1 - VENDOR_MARGIN)
            entries.append(dict(op="attention", shape=shape, dtype=op.dtype, choice="triton" if triton else "vendor",
                                config=best.config if triton else None,
                                predicted_ms=round((best.time_s if triton else vendor_s) * 1e3, 6)))
    return entries
