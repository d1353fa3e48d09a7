"""Flash-attention time model: FLOPs at an achievable fraction of the matrix peak, with wave quantization of
the query-block tiles over the compute units, bounded below by the memory roof.

The kernel's grid is one program per (batch, query head, query block of ``ATTENTION_BLOCK``) for the forward
pass and per key block for the backward pass (FlashAttention-2, Dao 2023, Sec. 3.2); a tail wave leaves units
idle just as for GEMM tiles.
"""

from __future__ import annotations

import math

from workbench.graph.ops import ATTENTION_BLOCK, AttentionShape, Op
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants
from workbench.precision import get_precision


def _wave_efficiency(shape: AttentionShape, units: int) -> float:
    programs = shape.batch * shape.heads_q * math.ceil(shape.seq / ATTENTION_BLOCK)
    return programs / (math.ceil(programs / units) * units)


def attention_time(op: Op, gpu: GPU, constants: Constants) -> tuple[float, str]:
    """Predicted seconds for a flash-attention op (fwd, bwd or fwd_bwd) and its bound."""
    shape: AttentionShape = op.shape
    peak = gpu.peak_tflops(get_precision(op.dtype).peak_key) * 1e12
    waves = _wave_efficiency(shape, gpu.compute_units.value)
    fwd_rate = peak * constants["attention_fwd_fraction"] * waves
    bwd_rate = peak * constants["attention_bwd_fraction"] * waves
    if shape.pass_ == "fwd_bwd":
        fwd_flops = op.flops / 3.5  # fwd + 2.5x fwd
        compute_s = fwd_flops / fwd_rate + 2.5 * fwd_flops / bwd_rate
        launches = 2
    else:
        compute_s = op.flops / (fwd_rate if op.phase == "fwd" else bwd_rate)
        launches = 1
    memory_s = op.bytes / (gpu.hbm_bandwidth_tb_s.value * 1e12 * constants["memory_fraction.default"])
    bound = "compute" if compute_s >= memory_s else "memory"
    return max(compute_s, memory_s) + launches * constants["attention_launch_us"] * 1e-6, bound
