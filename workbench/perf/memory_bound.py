"""Memory-bound operators (elementwise, norms, softmax, reductions, optimizer, embedding): the bytes they must
move at an achievable fraction of HBM bandwidth (one constant per op class, optionally per op class and dtype:
``memory_fraction.softmax.bf16``), plus a fixed kernel cost. Kernels on broadcast or strided operands (``op.extra["unvectorized"]``, the
reference job's eager ops: ``workbench.graph.execution``) reach ``memory_unvectorized_efficiency`` of that; random row
gathers and scatters (``op.extra["gather"]``: the job's embedding lookups and table update) ``memory_gather_efficiency``.
"""

from __future__ import annotations

from workbench.graph.ops import Op
from workbench.hardware import GPU
from workbench.perf.efficiency import Constants, derived


def memory_bound_time(op: Op, gpu: GPU, constants: Constants) -> float:
    """Predicted seconds for one memory-bound op (an op marked ``host_idle``: the GPU idle its constant names)."""
    if op.extra.get("host_idle"):
        return constants[op.extra["host_idle"]] * 1e-6
    kind = op.extra.get("bandwidth_kind", op.kind)  # an unfused kernel of a reported class (graph/execution.py)
    rates = derived(_MemoryRates, gpu, constants)
    bandwidth = rates.bandwidth(kind, op.dtype)
    if op.extra.get("unvectorized"):  # TensorIterator's non-vectorized path (broadcast / strided operand)
        bandwidth *= constants["memory_unvectorized_efficiency"]
    elif op.extra.get("transpose"):  # a copy that transposes: one side walked with a stride
        bandwidth *= constants["memory_transpose_efficiency"]
    elif op.extra.get("gather"):  # rows at random positions (embedding lookups and their updates)
        bandwidth *= constants[f"memory_gather_efficiency.{op.extra['gather']}"]  # .torch / .triton kernels
    return op.bytes / bandwidth + rates.launch_s


class _MemoryRates:
    """``memory_bound_time``'s achievable bandwidth per (op class, dtype) and its launch cost under one GPU and
    constants, looked up once (``efficiency.derived``): a search prices thousands of memory-bound ops."""

    __slots__ = ("hbm", "constants", "launch_s", "bandwidths")

    def __init__(self, gpu: GPU, constants: Constants):
        self.hbm = gpu.hbm_bandwidth_tb_s.value * 1e12
        self.constants = constants
        self.launch_s = constants["memory_launch_us"] * 1e-6
        self.bandwidths: dict[tuple[str, str], float] = {}

    def bandwidth(self, kind: str, dtype: str) -> float:
        """Bytes/s a kernel of class ``kind`` on ``dtype`` moves (``memory_fraction.<kind>.<dtype>``, falling back)."""
        key = (kind, dtype)
        hit = self.bandwidths.get(key)
        if hit is None:
            hit = self.bandwidths[key] = self.hbm * self.constants[f"memory_fraction.{kind}.{dtype}"]
        return hit
