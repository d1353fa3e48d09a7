"""Kernel tests: on the CPU through Triton's interpreter (the root conftest sets TRITON_INTERPRET=1 unless it
is set already), or on a GPU with TRITON_INTERPRET=0, where every tensor the tests create defaults to the GPU."""

import os

import pytest

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


class _GpuJit:
    """A kernel as the GPU's JIT presents it, also on the interpreter: ``kernel[grid](...)`` launches the kernel
    and returns a stand-in compiled kernel whose launcher ``run`` replays its arguments (every parameter in order,
    constexprs last) through ``kernel[grid]``. So ``_launch.KernelLaunch``'s direct path, which the interpreter
    never takes otherwise (its launches return no compiled kernel), runs with real results."""

    function = packed_metadata = "stand-in"

    def __init__(self, kernel, log: list):
        import inspect
        import types

        self.kernel, self.log = kernel, log
        self.arg_names = kernel.arg_names
        # what a JITFunction says of its parameters (the interpreter's function has no .params)
        signature = inspect.signature(kernel.fn).parameters.values()
        self.params = [types.SimpleNamespace(name=p.name, default=p.default,
                                             is_constexpr="constexpr" in str(p.annotation)) for p in signature]

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", self.kernel))
            self.kernel[grid](*args, **kwargs)
            return self
        return launch

    def run(self, g0, g1, g2, stream, function, metadata, launch_metadata, enter_hook, exit_hook, *args):
        self.log.append(("direct", self.kernel))
        constexprs = {p.name: a for p, a in zip(self.params, args) if p.is_constexpr}
        self.kernel[(g0, g1, g2)](*(a for p, a in zip(self.params, args) if not p.is_constexpr), **constexprs)


@pytest.fixture
def direct_launches(monkeypatch):
    """``direct_launches(module, *kernel_names)``: those kernels behind ``_GpuJit`` stand-ins, the module's plan
    cache (``_PLANS``) fresh and one device; returns the log of ("jit" | "direct", kernel) per launch."""
    from workbench.kernels import _launch
    from workbench.kernels._common import plan_cache

    log = []
    monkeypatch.setattr(_launch, "device_getters", lambda: (lambda: 0, lambda device: None))

    def install(module, *names):
        for name in names:
            monkeypatch.setattr(module, name, _GpuJit(getattr(module, name), log))
        monkeypatch.setattr(module, "_PLANS", plan_cache())  # plans built with the stand-ins
        return log
    return install
