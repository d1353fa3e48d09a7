"""Kernel tests run on the CPU through the Triton interpreter unless the environment says otherwise."""

import os; os.environ.setdefault("TRITON_INTERPRET", "1")
