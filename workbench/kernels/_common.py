"""Conventions shared by the kernel package, and the small helpers every layer of it uses.

The package reads in layers (bottom up; a module imports only from the layers below it):

- ``_common`` (this file, pure Python), ``spaces`` (the GEMM and attention config spaces, pure Python), ``_tiling``
  (grouped tile order, block-size checks, TMA alignment and scratch), ``checks`` (input validation) and
  ``reference`` (torch references);
- the kernels, one per file: ``gemm.py``, ``gemm_tma.py``, ``gemm_gluon.py`` (three GEMM backends that do not
  import one another), ``attention.py``, ``swiglu.py``, ``cross_entropy.py``, ``embedding_bag.py``,
  ``rowwise_adagrad.py``, ``norms.py``;
- ``dispatch``: the GEMM front door, the only module that imports all three GEMM backends (the Triton route
  among them and the per-vendor shim); ``crosscompile``: a service the kernels register their compile
  signatures with (it imports none of them); ``cases``: the benchmark cases of ``workbench bench``.

Every kernel module ``workbench/kernels/<op>.py`` reads top to bottom as:

1. the ``@triton.jit`` kernel(s), block shapes in the docstring, shapes in comments;
2. the launch wrapper ``<op>(...)``: checks inputs (``checks``), allocates, launches; ``config=None`` takes the
   first entry of ``config_space(backend())``;
3. ``config_space(backend) -> list[dict]``: meta-parameters plus ``num_warps``/``num_stages`` (NVIDIA), and on
   AMD also ``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack`` where they apply;
4. ``flops(...)`` / ``bytes_moved(...)``: the counts the benchmark turns into TFLOP/s and GB/s.

Its torch reference ``reference_<op>(...)`` lives in ``reference`` (re-exported by the kernel module), its
benchmark cases in ``cases`` (``norms.py`` still keeps its own).

Under ``TRITON_INTERPRET=1`` (set before importing a kernel module) the kernels run on CPU tensors.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.errors import WorkbenchError

Backend = Literal["cuda", "hip", "interpreter"]


class KernelInputError(WorkbenchError):
    """A kernel was called with inputs it does not accept; the message names the argument and what was expected."""


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def backend() -> Backend:
    """The backend kernels compile for: the interpreter, CUDA (NVIDIA) or HIP (AMD ROCm builds of torch)."""
    if interpreting():
        return "interpreter"
    import torch

    return "hip" if torch.version.hip else "cuda"


@functools.lru_cache(maxsize=16)
def device_name(index: int) -> str:
    """``torch.cuda.get_device_name`` (asked once per device: kernels look it up on every config=None launch)."""
    import torch

    return torch.cuda.get_device_name(index)


@functools.lru_cache(maxsize=16)
def sm_count(index: int) -> int:
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) of GPU ``index`` (asked once per device)."""
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=16)
def capability(index: int) -> tuple[int, int]:
    """``torch.cuda.get_device_capability`` of GPU ``index`` (asked once per device)."""
    import torch

    return tuple(torch.cuda.get_device_capability(index))


def amd_arch(device) -> str:
    """'gfx942' (MI300X/MI325X) or 'gfx950' (MI350X/MI355X) from the device's gcnArchName."""
    import torch

    return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]


def fp8_dtype(device):
    """The fp8 e4m3 dtype of ``device``: e4m3fn, except e4m3fnuz on MI300-class GPUs (gfx942), whose hardware and
    _scaled_mm take only that."""
    import torch

    if torch.version.hip and amd_arch(torch.device(device)) == "gfx942":
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


class PlanCache(dict):
    """Launch plans of one wrapper, keyed on everything a plan depends on (shapes, strides, dtypes, devices,
    options, the config): what the wrapper works out and checks once per distinct call instead of per call (the
    config the selector picks, padding, grid, constexprs, descriptor layouts). A key holds no tensor and no
    data pointer, so plans never keep memory alive or go stale with new allocations. Bounded: cleared when it
    reaches LIMIT entries (a cheap bound; real workloads repeat a few hundred shapes)."""

    LIMIT = 4096

    def put(self, key, plan):
        if len(self) >= self.LIMIT:
            self.clear()
        self[key] = plan
        return plan


def tensor_key(t) -> tuple | None:
    """What a launch plan depends on of one tensor (shape, strides, dtype, device); None for an absent one. A
    non-tensor raises AttributeError, which the wrappers take as "no key": they plan it and the plan's checks
    name what is wrong."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def reused_descriptors(plan: Any, descriptor_class: type, a: Any, b: Any, c: Any, *per_tensor: tuple) -> tuple:
    """Host tensor descriptors (Triton's or Gluon's ``TensorDescriptor``) over the GEMM operands ``a``, ``b``, ``c``
    for one launch of a cached ``plan``. The first launch builds them (``descriptor_class.from_tensor(t, *args)``,
    ``args`` the i-th entry of each of ``per_tensor``, e.g. block shapes and layouts: the constructor and its
    checks) and keeps their fields, without the base tensor, in ``plan.descriptors``; later launches copy those
    fields onto the new tensors without re-running the checks (the plan's key guarantees the shape, strides and
    dtype they were checked with): 0.3 us a descriptor instead of 1.5 us. The launcher reads base.data_ptr(),
    shape, strides and padding, and encodes the TMA map at each launch. Unrolled: it runs on every call."""
    fields = plan.descriptors
    if fields is None:
        built = tuple(descriptor_class.from_tensor(t, *(args[i] for args in per_tensor))
                      for i, t in enumerate((a, b, c)))
        plan.descriptors = tuple({**vars(d), "base": None} for d in built)
        return built
    new = object.__new__
    da, db, dc = new(descriptor_class), new(descriptor_class), new(descriptor_class)
    da.__dict__.update(fields[0])
    db.__dict__.update(fields[1])
    dc.__dict__.update(fields[2])
    da.base, db.base, dc.base = a, b, c
    return da, db, dc


def launch_operands(plan: Any, c: Any, bias: Any, scale_a: Any, scale_b: Any) -> tuple:
    """(bias, scale_a, scale_b) as a GEMM launch of a cached ``plan`` passes them: the output ``c`` stands in for an
    absent one (the kernel's constexprs say it is absent, so it is never read); a strided bias or scale view is
    copied (``plan.bias_copy``, ``plan.scale_copy``: the kernels read element i at offset i, a scalar at 0)."""
    if bias is None:
        bias = c
    elif plan.bias_copy:
        bias = bias.contiguous()
    if scale_a is None:
        scale_a = scale_b = c
    elif plan.scale_copy:
        scale_a, scale_b = scale_a.reshape(-1).contiguous(), scale_b.reshape(-1).contiguous()
    return bias, scale_a, scale_b


def without_launch(plan: Any, c: Any, bias: Any) -> Any:
    """C of a persistent GEMM plan that launches nothing: ``plan.route`` "empty" (M or N is 0) or "zero_k" (K = 0:
    TMA descriptors need every dimension >= 1; the product is the epilogue of a zero accumulator, the bias)."""
    if plan.route == "zero_k":
        c.zero_()
        if bias is not None:
            c.add_(bias.to(c.dtype))
    return c


_PLAN_CACHES: list[PlanCache] = []


def plan_cache() -> PlanCache:
    """A new registered PlanCache (``clear_plan_caches`` empties them all)."""
    cache = PlanCache()
    _PLAN_CACHES.append(cache)
    return cache


def clear_plan_caches() -> None:
    """Forget every cached launch plan, e.g. after replacing a selection profile (``workbench.select`` caches
    its picks separately: ``workbench.select._config_for_device.cache_clear()``)."""
    for cache in _PLAN_CACHES:
        cache.clear()


def frozen(config: dict | None):
    """A config as part of a plan key: None, or its items. A config with an unhashable value makes the key's
    lookup raise TypeError: the wrappers then take their checking path, uncached, which names the bad value."""
    return None if config is None else tuple(config.items())


def check(condition: bool, argument: str, got: Any, expected: str) -> None:
    if not condition:
        raise KernelInputError(f"{argument}: got {got}, expected {expected}")


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd would record an op on these inputs: grad mode on and one of them requires a gradient.
    Wrappers launch directly otherwise, skipping ``autograd.Function.apply``'s host time."""
    import torch

    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def check_device(*tensors, names: tuple[str, ...]) -> None:
    """All tensors on one device: a GPU, or the CPU under the interpreter."""
    devices = {t.device for t in tensors}
    if len(devices) != 1:  # the message is built only on failure: this runs on every launch
        check(False, "device", ", ".join(f"{n} on {t.device}" for n, t in zip(names, tensors)),
              "every tensor on the same device")
    device = devices.pop()
    if interpreting():
        check(device.type == "cpu", names[0], f"a tensor on {device}", "CPU tensors under TRITON_INTERPRET=1")
    else:
        check(device.type == "cuda", names[0], f"a tensor on {device}", "GPU tensors (or set TRITON_INTERPRET=1 for the CPU)")


@dataclass
class BenchCase:
    """One benchmark point: our kernel next to the vendor baseline on fresh random inputs."""

    op: str
    """The predict-ops op name this point maps to (gemm, attention, rmsnorm, ...), or the kernel's own name."""
    name: str
    """Human-readable shape label, e.g. 'llama3-8b qkv 8192x6144x4096'."""
    dtype: str
    row: dict
    """The point in predict-ops row form (m/n/k, batch/seq/heads..., rows/cols), so the model can predict it."""
    make_inputs: Callable[[str], tuple]
    """device -> positional arguments (fresh random tensors, never zeros)."""
    run: Callable[..., Any]
    """Our Triton kernel on those arguments."""
    baseline: Callable[..., Any]
    """The vendor / torch baseline on the same arguments (torch.matmul, SDPA, F.rms_norm, ...)."""
    reference: Callable[..., Any]
    """High-precision reference for the correctness check."""
    flops: float
    bytes: float
    tolerance: float
    """Max relative error ||out - ref|| / ||ref|| accepted."""
    extra: dict = field(default_factory=dict)


def ptxas_release() -> tuple[int, int] | None:
    """(major, minor) of the ptxas Triton compiles NVIDIA kernels with (``TRITON_PTXAS_PATH``, else the one it
    bundles: 12.8 in Triton 3.6 and 3.7); None where there is none to run (no triton, no NVIDIA backend). A
    measured kernel time depends on it (``attention_gluon_bwd.PTXAS_RING_FIX``)."""
    try:
        import triton

        path = triton.knobs.nvidia.ptxas.path
    except (ImportError, AttributeError, RuntimeError, OSError):
        return None
    return _ptxas_release(path)


@functools.lru_cache(maxsize=8)
def _ptxas_release(path: str) -> tuple[int, int] | None:
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def undo_interpreter_patches() -> int:
    """Put back the triton.language builtins Triton's CPU interpreter left patched; returns how many.

    Triton 3.7.1's interpreter swaps ``tl.core.program_id``, ``arange``, ``full`` and more for interpreter versions
    during a launch and leaves some swapped after it (seen after one CPU ``flash_attention``); a ``triton.compile``
    in the same process then gets interpreter values back (``'ir.value' object has no attribute 'dtype'`` at
    ``gl.program_id(0) * ...``). Every cross-compilation calls this first. A patch is a lambda of
    ``triton.runtime.interpreter`` holding the original as its keyword default ``member`` (``_patch_attr``);
    nothing else is touched."""
    try:
        import triton.language as tl
    except ImportError:
        return 0
    undone = 0
    for space in (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base):
        for name, value in list(vars(space).items()):
            original = value
            while (getattr(original, "__module__", "") == "triton.runtime.interpreter"
                   and "member" in (getattr(original, "__kwdefaults__", None) or {})):
                original = original.__kwdefaults__["member"]
            if original is not value:
                setattr(space, name, original)
                undone += 1
    return undone
