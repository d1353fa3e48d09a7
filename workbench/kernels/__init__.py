"""Triton kernels, one per file, each with its launch wrapper, torch reference, per-backend config space and
FLOP/byte counts (see ``_common`` for the shared conventions). The kernel modules need torch and triton;
``spaces`` (the GEMM and attention config spaces) and ``_common`` are pure Python, so the kernel selector can rank
configs on a machine without either. ``dispatch`` is the per-vendor GEMM front door: our Triton kernels or the vendor
library (cuBLAS / hipBLASLt through torch), per shape, dtype and GPU.
"""
