"""Kernel tests: on the CPU through Triton's interpreter (the root conftest sets TRITON_INTERPRET=1 unless it
is set already), or on a GPU with TRITON_INTERPRET=0, where every tensor the tests create defaults to the GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ["TRITON_INTERPRET"] in ("", "0"):
    import torch

    if torch.cuda.is_available():
        torch.set_default_device("cuda")

        # the tests draw inputs from explicit torch.Generator() objects: make those GPU generators too
        _cpu_generator = torch.Generator

        def _generator_on_default_device(device=None):
            return _cpu_generator(device=device or "cuda")

        torch.Generator = _generator_on_default_device
