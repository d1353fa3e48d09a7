"""Direct launches of a cached plan's kernels through the compiled kernel's own launcher (issue 20: host time).

``kernel[grid](*args, **kwargs)`` goes through ``JITFunction.run`` on every call (Triton 3.6 and 3.7 alike): it
binds the arguments, builds the specialization key (integers equal to 1 or divisible by 16, pointers aligned to
16 bytes, dtypes), finds the compiled kernel in its cache, builds launch metadata for the profiler hooks and calls
``CompiledKernel.run(grid..., stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *every
argument)``. A launch plan repeats the same integers, floats and dtypes (they are in its key), so after the first
launch only what may change between calls is left to check: the pointers' 16-byte alignment, the current device,
and that no launch hook is set. ``KernelLaunch`` keeps the compiled kernel's launcher from that first launch and
calls it directly while those hold; anything else takes the JIT path, which specializes anew. Users: attention.py,
gemm.py, gemm_gluon.py, gemm_tma.py, norms.py and swiglu.py (each builds its launches once per plan; an argument
outside the plan's key, such as a dy row stride, gets a launch of its own with ``direct=False``).

A kernel taking host TMA descriptors (gemm_tma.py, gemm_gluon.py, attention_gluon.py, attention_gluon_bwd.py) pays
more: its compiled launcher encodes every descriptor into a CUtensorMap on every launch (``make_tensordesc_arg``
in triton/backends/nvidia/driver.py, 3.6 and 3.7: Python, then ``cuTensorMapEncodeTiled``), 29 us for the six of
the attention backward on the H200 host (``benchmarks/results/h200/kernels/attention_host/``). A plan's
descriptors differ from call to call only in their base address (its key fixes shapes, strides, dtypes, blocks
and layouts), so a direct launch encodes each (argument, base address) once and passes the encoded map after
that (``DescriptorMaps``).

Under the interpreter (its launches return no compiled kernel) every launch takes the JIT path.
"""

from __future__ import annotations

import copy
import inspect

import triton

POINTER_ALIGN_BYTES = 16
"""Triton specializes a pointer argument on whether its address is a multiple of this
(``BaseBackend.get_tensor_specialization`` in triton/backends/compiler.py, 3.6 and 3.7: ``data_ptr() % 16``); the
``aligned`` a launch is called with says whether every pointer is."""


def pointers_aligned(*tensors) -> bool:
    """Every one of these tensors starts on a POINTER_ALIGN_BYTES boundary (torch's own allocations always do)."""
    address = 0
    for t in tensors:
        address |= t.data_ptr()
    return not address % POINTER_ALIGN_BYTES


def launch_hooks_idle() -> bool:
    """No profiler hook is set on Triton's launches (``knobs.runtime.launch_enter_hook`` / ``launch_exit_hook``:
    empty HookChains in Triton 3.6 and 3.7, None or a function in others); a direct launch passes none. Unrolled:
    it runs on every direct launch."""
    runtime = triton.knobs.runtime
    enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
    return ((enter is None or getattr(enter, "calls", None) == [])
            and (exit_ is None or getattr(exit_, "calls", None) == []))


def device_getters() -> tuple:
    """(current device, current stream of a device): the functions ``JITFunction.run`` asks the active driver."""
    driver = triton.runtime.driver.active
    return driver.get_current_device, driver.get_current_stream


ENCODED_MAPS_PER_LAUNCH = 1024
"""How many encoded descriptors one direct launch keeps, one per (argument, base address); when full it starts
over. A training step cycles through one set per layer (q, k, v, dO, lse, delta of each): 1024 holds the six of
~170 layers. ~0.3 KB an entry. Sized by that count, not measured: calibrate on a deeper model if it thrashes."""


class DescriptorMaps:
    """The host TMA descriptors among a direct launch's arguments, encoded once per base address. ``slots``:
    (argument position, the compiled kernel's metadata for that descriptor), in argument order; ``encode``: the
    launcher's own ``make_tensordesc_arg``. ``expand`` turns the arguments into what the launcher's descriptor
    wrapper would pass on: each descriptor replaced by its encoded map, shape and strides."""

    __slots__ = ("slots", "encode", "maps")

    def __init__(self, slots: tuple, encode):
        self.slots, self.encode, self.maps = slots, encode, {}

    def expand(self, args: tuple) -> list:
        maps, expanded, start = self.maps, [], 0
        for position, metadata in self.slots:
            expanded.extend(args[start:position])
            descriptor = args[position]
            key = (position, descriptor.base.data_ptr())
            encoded = maps.get(key)
            if encoded is None:
                if len(maps) >= ENCODED_MAPS_PER_LAUNCH:
                    maps.clear()
                encoded = maps[key] = self.encode(descriptor, metadata)
            expanded.extend(encoded)
            start = position + 1
        expanded.extend(args[start:])
        return expanded


NVIDIA_DRIVER = "triton.backends.nvidia.driver"
"""The module whose descriptor wrapper ``descriptor_launcher`` knows (Triton 3.6 and 3.7)."""


def descriptor_launcher(run, pointer_args: int) -> tuple:
    """(launcher, DescriptorMaps or None) for the compiled kernel launcher ``run`` whose first ``pointer_args``
    arguments a direct launch passes. A kernel with host TMA descriptors among them gets a copy of ``run`` whose
    ``launch`` is the one its descriptor wrapper (``wrap_handle_tensordesc``'s ``inner``, Triton 3.6 and 3.7) calls,
    with the wrapper's own positions, metadata and encoder; any other launcher, a wrapper of another make (AMD's),
    or descriptors without the compiled kernel's metadata (whose expansion holds the tensor) come back as they are:
    the launcher encodes its descriptors itself, as before."""
    wrapper = getattr(run, "launch", None)
    code = getattr(wrapper, "__code__", None)
    if code is None or code.co_name != "inner":  # no descriptor argument: the launch is the launcher itself
        return run, None
    cells = dict(zip(code.co_freevars, (cell.cell_contents for cell in wrapper.__closure__ or ())))
    encode = wrapper.__globals__.get("make_tensordesc_arg")
    if (wrapper.__module__ != NVIDIA_DRIVER or encode is None  # AMD's encoder takes the kernel's metadata too
            or not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= cells.keys()):
        return run, None
    positions = sorted(cells["tensordesc_indices"])
    metadata = cells["tensordesc_meta"]
    # without a descriptor's metadata the launcher passes the base tensor itself on: a kept entry would hold it
    if (not positions or positions[-1] >= pointer_args or not metadata or len(metadata) != len(positions)
            or any(m is None for m in metadata)):
        return run, None
    unwrapped = copy.copy(run)
    unwrapped.launch = cells["launcher"]
    return unwrapped, DescriptorMaps(tuple(zip(positions, metadata)), encode)


class KernelLaunch:
    """One kernel of a cached plan with its fixed launch: grid, scalar arguments (the integers and floats after
    the kernel's pointer arguments) and constexprs / launch options (``kwargs``). A call passes the pointer
    arguments, the tensors, which change from call to call; the owner guarantees that their dtypes do not (they
    are in its plan's key) and says whether every one of them starts on a 16-byte boundary (``aligned``: what
    Triton specializes pointers on; torch's allocations always do).

    The first aligned launch goes through ``JITFunction.run`` (it compiles, or finds, the kernel) and keeps the
    compiled kernel's launcher; later aligned launches on the same device, with no launch hook set, call it
    directly: ``run(grid..., stream, function, packed_metadata, None, None, None, *tensors, *scalars,
    *constexprs)``, host TMA descriptors among the tensors encoded once per base address (``DescriptorMaps``).
    Unaligned calls, another device, a hook, or ``direct=False`` take the JIT path."""

    __slots__ = ("kernel", "grid", "scalars", "kwargs", "direct", "handle", "constexprs")

    def __init__(self, kernel, grid: tuple, scalars: tuple, kwargs: dict, direct: bool = True):
        self.kernel, self.grid, self.scalars, self.kwargs, self.direct = kernel, grid, scalars, kwargs, direct
        self.handle = self.constexprs = None

    def __call__(self, aligned: bool, *tensors) -> None:
        handle = self.handle
        if handle is not None and aligned:
            run, g0, g1, g2, function, metadata, device, current_device, current_stream, maps = handle
            if current_device() == device and launch_hooks_idle():
                if maps is not None:
                    tensors = maps.expand(tensors)
                run(g0, g1, g2, current_stream(device), function, metadata, None, None, None, *tensors,
                    *self.scalars, *self.constexprs)
                return
        compiled = self.kernel[self.grid](*tensors, *self.scalars, **self.kwargs)
        if handle is None and aligned and self.direct and hasattr(compiled, "packed_metadata"):
            self._keep(compiled, len(tensors))

    def _keep(self, compiled, tensors: int) -> None:
        """The launcher of ``compiled`` (just launched with ``tensors`` pointer arguments), if the parameters after
        the scalars are the kernel's constexprs, each in ``kwargs`` or left at its default; else the JIT path
        stays."""
        names = getattr(self.kernel, "arg_names", None)  # None: a wrapper, not a JITFunction
        params = getattr(self.kernel, "params", None)
        if names is None or params is None or len(params) != len(names):
            return
        tail = params[tensors + len(self.scalars):]
        if not all(p.is_constexpr and (p.name in self.kwargs or p.default is not inspect.Parameter.empty)
                   for p in tail) or any(k in names and k not in {p.name for p in tail} for k in self.kwargs):
            return
        current_device, current_stream = device_getters()
        self.constexprs = tuple(self.kwargs.get(p.name, p.default) for p in tail)
        g0, g1, g2 = tuple(self.grid) + (1,) * (3 - len(self.grid))
        run, maps = descriptor_launcher(compiled.run, tensors)
        self.handle = (run, g0, g1, g2, compiled.function, compiled.packed_metadata, current_device(),
                       current_device, current_stream, maps)
