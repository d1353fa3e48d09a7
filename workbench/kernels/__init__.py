"""Triton kernels, one per file, in layers (``_common`` describes them): shared helpers at the bottom (``_common``,
``spaces``, ``_tiling``, ``checks``, ``reference``), the kernels above them, and on top the GEMM front door
(``dispatch``: our three Triton GEMMs, or the vendor library, per shape, dtype and GPU), the cross-compilation
service (``crosscompile``) and the benchmark cases (``cases``). The kernel modules need torch and triton; ``spaces``
(the GEMM and attention config spaces) and ``_common`` are pure Python, so the kernel selector can rank configs on a
machine without either.
"""
