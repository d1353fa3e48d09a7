"""Memory-bound operators (elementwise, norms, softmax, reductions, optimizer, embedding): the bytes they must
move at an achievable fraction of HBM bandwidth (one constant per op class, optionally per op class and dtype:
``memory_fraction.softmax.bf16``), plus a fixed kernel cost.
"""

from __future__ import annotations

from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants


def memory_bound_time(op: Op, gpu: GPU, constants: Constants) -> float:
    """Predicted seconds for one memory-bound op."""
    bandwidth = gpu.hbm_bandwidth_tb_s.value * 1e12 * constants[f"memory_fraction.{op.kind}.{op.dtype}"]
    return op.bytes / bandwidth + constants["memory_launch_us"] * 1e-6
