"""Triton kernels, one per file, each with its launch wrapper, torch reference, per-backend config space and
FLOP/byte counts (see ``_common`` for the shared conventions). Importing this package needs torch and triton;
the core ``workbench`` never imports it.
"""
