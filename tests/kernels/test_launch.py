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
