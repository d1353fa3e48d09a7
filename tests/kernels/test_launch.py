"""workbench/kernels/_launch.py: a plan's kernel launch goes through ``kernel[grid](...)`` once, then calls the
compiled kernel's launcher directly while its pointers stay 16-byte aligned, the device is the same and no launch
hook is set (a stand-in kernel and compiled kernel: no GPU needed)."""

import inspect

import pytest
import torch

from workbench.kernels import _launch
from workbench.kernels._common import interpreting
from workbench.kernels._launch import KernelLaunch


class _Param:
    def __init__(self, name, constexpr, default=inspect.Parameter.empty):
        self.name, self.is_constexpr, self.default = name, constexpr, default


class _Compiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("direct", args))


class _Kernel:
    """Parameters X, Y (pointers), N (a scalar), BLOCK (a constexpr), MODE (a constexpr with a default)."""

    arg_names = ["X", "Y", "N", "BLOCK", "MODE"]
    params = [_Param("X", False), _Param("Y", False), _Param("N", False), _Param("BLOCK", True),
              _Param("MODE", True, "fast")]

    def __init__(self):
        self.log = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            return _Compiled(self.log)
        return launch


@pytest.fixture(autouse=True)
def one_device(monkeypatch):
    device = {"index": 0}
    monkeypatch.setattr(_launch, "device_getters", lambda: (lambda: device["index"], lambda index: f"stream{index}"))
    return device


def test_the_first_launch_compiles_later_ones_call_the_launcher():
    kernel = _Kernel()
    launch = KernelLaunch(kernel, (4, 2), (128,), {"BLOCK": 32, "num_warps": 4})
    launch(True, "x", "y")
    launch(True, "x2", "y2")
    assert kernel.log[0] == ("jit", (4, 2), ("x", "y", 128), {"BLOCK": 32, "num_warps": 4})
    # grid padded to 3-D, the current stream, no launch metadata or hooks, constexprs last (MODE at its default)
    assert kernel.log[1] == ("direct", (4, 2, 1, "stream0", "function", "metadata", None, None, None, "x2", "y2",
                                        128, 32, "fast"))


def test_unaligned_pointers_another_device_or_a_hook_take_the_jit_path(one_device, monkeypatch):
    kernel = _Kernel()
    launch = KernelLaunch(kernel, (1,), (7,), {"BLOCK": 16})
    launch(False, "x", "y")  # compiled for unaligned pointers: not kept
    assert launch.handle is None
    launch(True, "x", "y")
    launch(False, "x", "y")  # the kept launcher was specialized on aligned pointers
    one_device["index"] = 1
    launch(True, "x", "y")
    one_device["index"] = 0
    monkeypatch.setattr(_launch, "launch_hooks_idle", lambda: False)
    launch(True, "x", "y")
    assert [entry[0] for entry in kernel.log] == ["jit"] * 5


def test_a_kernel_whose_constexprs_do_not_close_its_parameters_keeps_the_jit_path():
    kernel = _Kernel()
    launch = KernelLaunch(kernel, (1,), (), {"N": 3, "BLOCK": 16})  # N passed by keyword: not a trailing constexpr
    launch(True, "x", "y")
    launch(True, "x", "y")
    assert launch.handle is None and [entry[0] for entry in kernel.log] == ["jit", "jit"]
    direct_off = KernelLaunch(_Kernel(), (1,), (3,), {"BLOCK": 16}, direct=False)
    direct_off(True, "x", "y")
    assert direct_off.handle is None


def test_pointers_aligned_says_whether_every_tensor_starts_on_a_16_byte_boundary():
    import torch

    a = torch.zeros(16)  # torch's allocation: aligned
    assert _launch.pointers_aligned(a, a[4:]) and not _launch.pointers_aligned(a, a[1:])  # a[1:]: 4 bytes off
    assert _launch.POINTER_ALIGN_BYTES == 16


@pytest.mark.skipif(not interpreting(), reason="needs Triton's CPU interpreter (tests/conftest.py sets it)")
def test_what_the_interpreter_leaves_patched_is_put_back():
    import triton.language as tl

    from workbench.kernels._common import undo_interpreter_patches
    from workbench.kernels.attention import flash_attention

    undo_interpreter_patches()
    original = tl.core.program_id
    q = torch.randn(1, 2, 64, 64)
    flash_attention(q, q, q, True)  # a CPU run: Triton 3.7.1's interpreter leaves program_id & co. patched
    patched = tl.core.program_id is not original
    assert undo_interpreter_patches() >= (1 if patched else 0)
    assert tl.core.program_id is original and undo_interpreter_patches() == 0


class _DescriptorLauncher:
    """Triton's CudaLauncher in small: ``launch`` is what ``wrap_handle_tensordesc`` made of the raw launcher; the
    call passes it the grid, stream and function, then the kernel arguments as the installed Triton does (3.6: flat,
    after _BASE_ARGS_FORMAT_LEN base arguments; 3.7: as one tuple)."""

    def __init__(self, launch):
        self.launch = launch

    def __call__(self, g0, g1, g2, stream, function, metadata, launch_metadata, enter, exit_, *args):
        _launch_as_installed(self.launch, (g0, g1, g2, stream, function), args)


def _launch_as_installed(launch, base: tuple, args: tuple):
    from triton.backends.nvidia import driver

    flat = getattr(driver, "_BASE_ARGS_FORMAT_LEN", None)
    if flat is None:
        return launch(*base, args)
    return launch(*base, *[None] * (flat - len(base)), *args)


def _descriptor(base, shape=(64, 32)):
    from types import SimpleNamespace

    return SimpleNamespace(base=base, shape=list(shape), strides=[shape[1], 1], padding="zero",
                           round_f32_to_tf32=False)


SIGNATURE = {"a_desc": "tensordesc<bf16[64, 32]>", "X": "*fp32", "b_desc": "tensordesc<bf16[64, 32]>", "N": "i32",
             "BLOCK": "constexpr"}


def _descriptor_kernel(launcher):
    """A stand-in kernel whose launches return a compiled kernel with ``launcher`` as its run."""
    compiled = type("Compiled", (), {"function": "function", "packed_metadata": "metadata", "run": launcher})()
    return type("Kernel", (), {"arg_names": list(SIGNATURE),
                               "params": [_Param(name, name == "BLOCK") for name in SIGNATURE],
                               "__getitem__": lambda self, grid: lambda *args, **kwargs: compiled})()


def test_a_launch_with_host_descriptors_encodes_each_base_address_once(monkeypatch):
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    encoded = []

    def encode(arg, metadata):  # the driver's make_tensordesc_arg without the CUDA driver: map, shape, strides
        encoded.append(arg.base.data_ptr())
        return [("map", arg.base.data_ptr(), metadata["block_size"]), *arg.shape, *arg.strides]

    monkeypatch.setattr(driver, "make_tensordesc_arg", encode)  # what the wrapper and the maps both call
    raw_calls = []
    metadata = [{"block_size": [64, 32]}, {"block_size": [64, 32]}]
    wrapped = driver.wrap_handle_tensordesc(lambda *args: raw_calls.append(list(args)), SIGNATURE, metadata)
    launcher = _DescriptorLauncher(wrapped)
    launch = KernelLaunch(_descriptor_kernel(launcher), (2,), (128,), {"BLOCK": 32})
    a, b, a2 = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    launch(True, _descriptor(a), "x", _descriptor(b))  # the JIT path: keeps the launcher
    run, *_, maps = launch.handle
    assert run is not launcher and run.launch is wrapped.__closure__[  # the raw launcher, not the wrapper
        wrapped.__code__.co_freevars.index("launcher")].cell_contents
    for base in (a, a, a2):
        launch(True, _descriptor(base), "x", _descriptor(b))
        _launch_as_installed(wrapped, (2, 1, 1, "stream0", "function"),  # the reference: through the wrapper
                             (_descriptor(base), "x", _descriptor(b), 128, 32))
        ours, reference = (call[:-1] + list(call[-1]) if isinstance(call[-1], (list, tuple)) else call
                           for call in raw_calls[-2:])
        assert ours == reference  # what the wrapper would pass on
    assert sorted(maps.maps) == sorted([(0, a.data_ptr()), (0, a2.data_ptr()), (2, b.data_ptr())])
    assert encoded.count(b.data_ptr()) == 3 + 1  # the wrapper's three reference calls, the maps' one
    monkeypatch.setattr(_launch, "ENCODED_MAPS_PER_LAUNCH", 3)
    launch(True, _descriptor(b), "x", _descriptor(b))  # (0, b) finds it full: starts over, then (2, b) again
    assert sorted(position for position, _ in maps.maps) == [0, 2]


def test_descriptors_without_the_kernels_metadata_are_left_to_the_launcher():
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    wrapped = driver.wrap_handle_tensordesc(lambda *args: None, SIGNATURE, None)  # the expansion holds the tensor
    launcher = _DescriptorLauncher(wrapped)
    assert _launch.descriptor_launcher(launcher, 3) == (launcher, None)


def test_a_launcher_without_descriptors_or_of_another_make_is_called_as_it_is():
    def inner(*args):  # named like the wrapper, but of another module, closing over nothing it knows
        return args

    plain = _DescriptorLauncher(print)
    assert _launch.descriptor_launcher(plain, 3) == (plain, None)
    other = _DescriptorLauncher(inner)
    assert _launch.descriptor_launcher(other, 3) == (other, None)
