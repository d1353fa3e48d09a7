"""Flash-attention time model: FLOPs at an achievable fraction of the matrix peak, with wave quantization of
the query-block tiles over the compute units, bounded below by the memory roof.

The kernel's grid is one program per (batch, query head, query block of ``ATTENTION_BLOCK``) for the forward
pass and per key block for the backward pass (FlashAttention-2, Dao 2023, Sec. 3.2); a tail wave leaves units
idle just as for GEMM tiles.

The fraction of the peak depends on the SDPA backend that runs the op: an op whose ``extra["sdpa_backend"]``
names one (``flash2``: FlashAttention-2, torch SDPA's flash backend) is priced at ``attention_fwd_fraction.<backend>``
/ ``attention_bwd_fraction.<backend>`` (``specs/efficiency.yaml``, sourced), an untagged op at the generic fractions.
"""

from __future__ import annotations

import math

from workbench.graph.ops import ATTENTION_BLOCK, AttentionShape, Op
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants
from workbench.precision import get_precision

SDPA_BACKENDS: tuple[str, ...] = ("flash2", "flash-attn", "hstu-triton")
"""Backends with their own fractions in ``specs/efficiency.yaml`` (``Op.extra["sdpa_backend"]``); ``flash-attn``:
Dao-AILab's flash-attn package for the GPU's architecture (flash-attn-3 on Hopper, flash-attn-4 on Blackwell: HF's
``attn_implementation`` ``flash_attention_3`` / ``_4``), fractions per architecture, the generic ones elsewhere;
``hstu-triton``: generative-recommenders' Triton HSTU attention (``workbench.graph.hstu_gr_kernels``), the generic
fractions until a GPU's kernel fit gives its own."""


def _wave_efficiency(shape: AttentionShape, units: int) -> float:
    programs = shape.batch * shape.heads_q * math.ceil(shape.seq / ATTENTION_BLOCK)
    return programs / (math.ceil(programs / units) * units)


def attention_fractions(op: Op, constants: Constants) -> tuple[float, float]:
    """(forward, backward) fraction of the matrix peak for the op's SDPA backend (the generic ones untagged)."""
    backend = op.extra.get("sdpa_backend", "") if op.extra else ""
    if backend and backend not in SDPA_BACKENDS:
        raise ValueError(f"op {op.name}: unknown sdpa_backend {backend!r}; expected one of {', '.join(SDPA_BACKENDS)}")
    suffix = f".{backend}" if backend else ""
    return constants[f"attention_fwd_fraction{suffix}"], constants[f"attention_bwd_fraction{suffix}"]


def attention_time(op: Op, gpu: GPU, constants: Constants) -> tuple[float, str]:
    """Predicted seconds for a flash-attention op (fwd, bwd or fwd_bwd) and its bound."""
    shape: AttentionShape = op.shape
    peak = gpu.peak_tflops(get_precision(op.dtype).peak_key) * 1e12
    waves = _wave_efficiency(shape, gpu.compute_units.value)
    fwd_fraction, bwd_fraction = attention_fractions(op, constants)
    fwd_rate = peak * fwd_fraction * waves
    bwd_rate = peak * bwd_fraction * waves
    if shape.pass_ == "fwd_bwd":
        fwd_flops = op.flops / 3.5  # fwd + 2.5x fwd
        compute_s = fwd_flops / fwd_rate + 2.5 * fwd_flops / bwd_rate
        launches = 2
    else:
        compute_s = op.flops / (fwd_rate if shape.pass_ == "fwd" else bwd_rate)  # a recomputed forward: fwd
        launches = 1
    memory_s = op.bytes / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["memory_fraction.default"])
    bound = "compute" if compute_s >= memory_s else "memory"
    return max(compute_s, memory_s) + launches * constants["attention_launch_us"] * 1e-6, bound
