"""Numeric formats: bytes per element, which peak rate they run at, and which GPUs run them natively."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workbench.errors import UnknownNameError, WorkbenchError

if TYPE_CHECKING:
    from workbench.hardware import GPU

PeakKey = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8"]


@dataclass(frozen=True)
class Precision:
    """A numeric format as the performance model sees it."""

    name: str
    bytes_per_element: float
    """Storage bytes per element, block scales included (mxfp4: 4 bits + one 8-bit scale per 32)."""
    peak_key: PeakKey
    """Which entry of a GPU's ``peak_dense_tflops`` its matrix operations run at."""
    format_requirement: str | None = None
    """A format the GPU must list in ``block_scaled_formats`` to run this natively (mxfp8, mxfp4, ...)."""
    description: str = ""


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in [
        Precision("fp64", 8, "fp64", description="IEEE double"),
        Precision("fp32", 4, "fp32", description="IEEE single on the vector units"),
        Precision("tf32", 4, "tf32", description="fp32 storage, 10-bit mantissa matrix math (AMD: XF32)"),
        Precision("bf16", 2, "bf16", description="bfloat16"),
        Precision("fp16", 2, "fp16", description="IEEE half"),
        Precision("fp8", 1, "fp8", description="8-bit float, e4m3/e5m2 (fnuz variants on MI300-class), per-tensor or per-row scales"),
        Precision("fp8_gw_hp", 1, "fp8", description="fp8 training with the weight-gradient GEMM in bf16 (torchao "
                  "rowwise_with_gw_hp): a training precision, priced per GEMM by linear_gemm_precisions"),
        Precision("int8", 1, "int8", description="8-bit integer"),
        Precision("mxfp8", 1 + 1 / 32, "fp8", "mxfp8", "OCP MX fp8: one e8m0 scale per 32 elements"),
        Precision("mxfp6", 0.75 + 1 / 32, "fp6", "mxfp6", "OCP MX fp6: one e8m0 scale per 32 elements"),
        Precision("mxfp4", 0.5 + 1 / 32, "fp4", "mxfp4", "OCP MX fp4 (e2m1): one e8m0 scale per 32 elements"),
        Precision("nvfp4", 0.5 + 1 / 16, "fp4", "nvfp4", "NVIDIA fp4 (e2m1): one e4m3 scale per 16 elements"),
    ]
}

# Where a GPU lacks a format, the documented fallback a user may opt into (never applied silently).
_FALLBACKS: dict[str, tuple[str, ...]] = {
    "tf32": ("fp32",),
    "fp8": ("bf16",),
    "fp8_gw_hp": ("bf16",),
    "int8": ("bf16",),
    "mxfp8": ("fp8", "bf16"),
    "mxfp6": ("fp8", "bf16"),
    "mxfp4": ("fp8", "bf16"),
    "nvfp4": ("mxfp4", "fp8", "bf16"),
    "fp16": ("bf16",),
    "bf16": ("fp16",),
    "fp64": ("fp32",),
}


@dataclass(frozen=True)
class LinearGemmPrecisions:
    """The precision each GEMM of a training linear y = x W^T runs in: forward (x W^T), dgrad (dy W) and wgrad
    (dy^T x, the reduction over tokens)."""

    forward: str
    dgrad: str
    wgrad: str


_LINEAR_GEMMS: dict[str, LinearGemmPrecisions] = {
    # torchao Float8LinearRecipeName.ROWWISE_WITH_GW_HP (pytorch/ao torchao/float8/config.py, from_recipe_name):
    # output and grad_input GEMMs in fp8, grad_weight's operands kept in high precision (ScalingType.DISABLED)
    "fp8_gw_hp": LinearGemmPrecisions("fp8", "fp8", "bf16"),
}


@functools.cache  # one (frozen) answer per name: the graph builders ask it for every linear they make
def linear_gemm_precisions(training_precision: str) -> LinearGemmPrecisions:
    """Per-GEMM precisions of a training precision's linears: all three in that precision, except recipes that
    keep a GEMM in high precision (``fp8_gw_hp``: wgrad in bf16)."""
    return _LINEAR_GEMMS.get(training_precision,
                             LinearGemmPrecisions(training_precision, training_precision, training_precision))


def is_8bit_training(training_precision: str) -> bool:
    """fp8-family training (fp8, fp8_gw_hp, mxfp8): the blocks' linears quantize, everything else stays bf16."""
    return linear_gemm_precisions(training_precision).forward in ("fp8", "mxfp8")


def get_precision(name: str) -> Precision:
    """The precision called ``name`` (exact, case-insensitive)."""
    key = str(name).lower()
    if key not in PRECISIONS:
        raise UnknownNameError("precision", name, PRECISIONS)
    return PRECISIONS[key]


def runs_natively(gpu: GPU, precision: Precision) -> bool:
    """True when the GPU has a hardware path for this format."""
    if precision.peak_key not in gpu.peak_dense_tflops:
        return False
    if precision.format_requirement is not None:
        return precision.format_requirement in gpu.block_scaled_formats
    return True


@dataclass(frozen=True)
class ResolvedPrecision:
    """The precision a prediction actually uses on one GPU, and why, when it differs from the request."""

    requested: Precision
    effective: Precision
    note: str = ""

    @property
    def is_fallback(self) -> bool:
        return self.requested is not self.effective


class UnsupportedPrecisionError(WorkbenchError):
    """The GPU has no hardware path for the requested format and no fallback was allowed."""


def resolve_precision(gpu: GPU, name: str, *, allow_fallback: bool = False) -> ResolvedPrecision:
    """Check that ``gpu`` runs ``name``; otherwise raise, or (``allow_fallback``) use the documented fallback.

    The fallback is always visible: ``ResolvedPrecision.note`` says what replaced what, and predictions carry it.
    """
    requested = get_precision(name)
    if runs_natively(gpu, requested):
        return ResolvedPrecision(requested, requested)
    native = [p for p in PRECISIONS.values() if runs_natively(gpu, p)]
    if not allow_fallback:
        raise UnsupportedPrecisionError(
            f"{gpu.display_name} has no hardware path for {requested.name}. "
            f"It runs: {', '.join(p.name for p in native)}. "
            f"Pick one of those, or allow the documented fallback "
            f"({' -> '.join((requested.name, *_FALLBACKS.get(requested.name, ())))})."
        )
    for candidate in _FALLBACKS.get(requested.name, ()):
        effective = PRECISIONS[candidate]
        if runs_natively(gpu, effective):
            note = f"{gpu.display_name} has no {requested.name} path: modelled as {effective.name}"
            return ResolvedPrecision(requested, effective, note)
    raise UnsupportedPrecisionError(
        f"{gpu.display_name} has no hardware path for {requested.name} and no fallback fits; it runs: "
        f"{', '.join(p.name for p in native)}"
    )
