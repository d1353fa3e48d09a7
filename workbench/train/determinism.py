"""Deterministic mode of the training job (``RunOptions.deterministic``): what it sets, and the recipes it refuses.
``workbench.train.job``'s docstring says what is made deterministic and what is not."""

from __future__ import annotations

import contextlib
import os

import torch

from workbench.train.spec import JobError, JobSpec

CUBLAS_WORKSPACE_CONFIG = ":4096:8"
"""cuBLAS's deterministic workspace setting (CUDA docs, cuBLAS "Results reproducibility"; ``:16:8`` also works)."""
NONDETERMINISTIC_TRITON_OPS: dict[str, str] = {
    "embedding_bag": "its backward adds each lookup into dweight with tl.atomic_add (workbench/kernels/"
                     "embedding_bag.py), so the order of the fp32 additions changes from run to run",
}
"""Project Triton kernels (recipe op names) that deterministic mode refuses, and why: every kernel file of
``workbench/kernels`` with a ``tl.atomic`` operation in it on its default path (a test keeps the two in step)."""
ATOMIC_COUNTS_ONLY: dict[str, str] = {
    "gemm_tma": "its split-K configs count a tile's finished units with tl.atomic_add, and the last unit adds the "
                "fp32 partials in slice order: the sum is the same whichever unit arrives last (tests/"
                "test_gemm_tma.py runs it twice and compares the bits)",
}
"""Kernel files with a ``tl.atomic`` operation that stays deterministic: the atomics count, they do not add data."""
NONDETERMINISTIC_TRITON_VARIANTS: dict[str, tuple[str, frozenset[str], str]] = {}
"""Kernels deterministic only without a config variant: op -> (config key, the values that use atomics, why). None
now: attention's atomic-dQ backward (``DQ="atomic"``) was dropped in issue 20."""


def nondeterministic_ops(spec: JobSpec) -> list[str]:
    """The recipe's Triton kernels deterministic mode refuses: the ops of ``NONDETERMINISTIC_TRITON_OPS`` and the
    ops whose pinned config picks a variant of ``NONDETERMINISTIC_TRITON_VARIANTS``."""
    ops = spec.triton_ops()
    refused = set(ops) & set(NONDETERMINISTIC_TRITON_OPS)
    for op, (key, values, _) in NONDETERMINISTIC_TRITON_VARIANTS.items():
        if op in ops and any(config.get(key) in values for config in spec.kernel_configs(op).values()):
            refused.add(op)
    return sorted(refused)


def _why(op: str) -> str:
    return NONDETERMINISTIC_TRITON_OPS.get(op) or NONDETERMINISTIC_TRITON_VARIANTS[op][2]


def check_deterministic(spec: JobSpec) -> None:
    """Raise ``JobError`` when ``spec`` uses a project Triton kernel that is nondeterministic."""
    refused = nondeterministic_ops(spec)
    if refused:
        reasons = "; ".join(f"{op}: {_why(op)}" for op in refused)
        raise JobError(f"recipe {spec.name!r}: deterministic mode with the project's Triton "
                       f"{', '.join(refused)} kernel, which is nondeterministic ({reasons}); choose the vendor "
                       "kernel for it in the recipe, or run without deterministic mode")


@contextlib.contextmanager
def deterministic_mode(enabled: bool, notes: list[str]):
    """Deterministic algorithms inside the block (``workbench.train.job``'s docstring says what that covers), the
    previous torch settings back after it; ``CUBLAS_WORKSPACE_CONFIG`` is set (when unset) and left set; any
    warning goes to ``notes``. Nothing when not ``enabled``. Enter it before any CUDA work: cuBLAS reads the
    variable when it creates a handle."""
    if not enabled:
        yield
        return
    if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        if torch.cuda.is_initialized():
            notes.append("deterministic: CUBLAS_WORKSPACE_CONFIG set after CUDA started in this process; cuBLAS "
                         "handles created before may not follow it")
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
    cudnn = torch.backends.cudnn
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             cudnn.benchmark, cudnn.deterministic)
    torch.use_deterministic_algorithms(True)
    cudnn.benchmark, cudnn.deterministic = False, True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        cudnn.benchmark, cudnn.deterministic = saved[2], saved[3]
