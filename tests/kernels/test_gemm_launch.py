"""gemm.py and gemm_gluon.py launch through ``_launch.KernelLaunch`` (issue 20: host time): a plan's first launch goes
through ``kernel[grid]``, later ones call the compiled kernel's launcher directly while the pointers stay 16-byte
aligned. gemm.py runs on the interpreter behind conftest's ``direct_launches`` stand-ins (real results); the Gluon
kernel has no interpreter, so its wrapper runs on CPU tensors with the sm_90 checks answered and a recording
stand-in kernel (what the wrapper passes, not what the kernel computes)."""

import inspect
import types

import pytest
import torch

from workbench.kernels import _launch, dispatch, gemm, gemm_gluon
from workbench.kernels._common import PlanCache, interpreting
from workbench.kernels._launch import KernelLaunch
from workbench.kernels.reference import reference_matmul, reference_scaled_matmul

SMALL_TILES = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)
on_the_interpreter = pytest.mark.skipif(not interpreting(), reason="the stand-in launcher replays on the "
                                        "interpreter; on a GPU every GEMM test runs the real direct path")


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _error(ours, ref) -> float:
    return ((ours.double() - ref).norm() / ref.norm()).item()


@pytest.fixture
def gemm_launches(monkeypatch, direct_launches):
    """gemm.py's kernels behind ``direct_launches`` stand-ins, with the front door's plan caches fresh (gemm.py keeps
    none of its own: ``dispatch`` holds its plans)."""
    monkeypatch.setattr(gemm, "_PLANS", None, raising=False)  # what direct_launches replaces
    monkeypatch.setattr(dispatch, "_MATMUL_PLANS", PlanCache())
    monkeypatch.setattr(dispatch, "_SCALED_PLANS", PlanCache())
    return direct_launches(gemm, "_gemm_kernel", "_split_k_reduce_kernel")


@on_the_interpreter
def test_gemm_plans_launch_directly_after_the_first_call(gemm_launches):
    kernel = gemm._gemm_kernel.kernel  # the stand-in's kernel, as the log names it
    for seed in range(3):  # other tensors of the same shapes and strides: the same plan
        a, b = _randn(37, 29, seed=seed), _randn(29, 53, seed=seed + 5)
        assert _error(dispatch.triton_matmul(a, b, config=SMALL_TILES), reference_matmul(a, b)) < gemm.TOLERANCE["fp32"]
    assert gemm_launches == [("jit", kernel), ("direct", kernel), ("direct", kernel)]
    (plan,) = (p for _, p in dispatch._MATMUL_PLANS.values())
    assert isinstance(plan.launch, KernelLaunch) and plan.reduce_launch is None


@on_the_interpreter
def test_split_k_launches_both_kernels_directly(gemm_launches):
    a, b = _randn(8, 24), _randn(24, 160, seed=1)
    config = dict(SMALL_TILES, SPLIT_K=3)
    for _ in range(2):
        assert _error(dispatch.triton_matmul(a, b, config=config), reference_matmul(a, b)) < gemm.TOLERANCE["fp32"]
    kernels = (gemm._gemm_kernel.kernel, gemm._split_k_reduce_kernel.kernel)
    assert gemm_launches == [("jit", k) for k in kernels] + [("direct", k) for k in kernels]


@on_the_interpreter
def test_fp8_with_scales_and_bias_launches_directly(gemm_launches):
    a = _randn(40, 32).to(torch.float8_e4m3fn)
    b = _randn(48, 32, seed=1).to(torch.float8_e4m3fn).t()  # [K, N] column-major
    sa, sb, bias = torch.rand(40) + 0.5, torch.rand(48) + 0.5, _randn(48, dtype=torch.bfloat16, seed=2)
    for _ in range(2):
        out = dispatch.triton_scaled_matmul(a, b, sa, sb, bias=bias, config=SMALL_TILES)
        assert _error(out, reference_scaled_matmul(a, b, sa, sb, bias=bias)) < gemm.TOLERANCE["fp8"]
    assert [path for path, _ in gemm_launches] == ["jit", "direct"]


@on_the_interpreter
def test_an_operand_off_a_16_byte_boundary_takes_the_jit_path(gemm_launches):
    a, b = _randn(37, 32), _randn(32, 53, seed=1)  # rows of 128 bytes: no padded copy of A
    dispatch.triton_matmul(a, b, config=SMALL_TILES)
    buffer = _randn(37 * 32 + 1, seed=2)
    shifted = buffer[1:].view(37, 32)  # the same shape and strides (the same plan), 4 bytes off
    assert _error(dispatch.triton_matmul(shifted, b, config=SMALL_TILES), reference_matmul(shifted, b)) < 1e-5
    dispatch.triton_matmul(a, b, config=SMALL_TILES)
    assert [path for path, _ in gemm_launches] == ["jit", "jit", "direct"]


# ------------------------------------------------------------------------------------------------- the Gluon wrapper
class _RecordingGluonKernel:
    """Stands in for ``_gemm_fp8_kernel``: ``kernel[grid](...)`` records the call and returns a compiled kernel
    whose launcher records the direct calls."""

    def __init__(self, real):
        self.arg_names = real.arg_names
        self.params = [types.SimpleNamespace(name=p.name, default=p.default, is_constexpr=p.is_constexpr)
                       for p in real.params]
        self.log = []
        kernel = self

        class Compiled:
            function, packed_metadata = "function", "metadata"

            @staticmethod
            def run(g0, g1, g2, stream, function, metadata, launch_metadata, enter, exit_, *args):
                kernel.log.append(("direct", (g0, g1, g2), args))

        self.compiled = Compiled

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            return self.compiled
        return launch


@pytest.fixture
def gluon_on_a_fake_hopper(monkeypatch):
    """gemm_gluon's sm_90 path on CPU tensors: its interpreter and capability checks answered as on an H200."""
    if not gemm_gluon.HAS_GLUON:
        pytest.skip(f"triton {__import__('triton').__version__} has no Gluon")
    kernel = _RecordingGluonKernel(gemm_gluon._gemm_fp8_kernel)
    monkeypatch.setattr(gemm_gluon, "_gemm_fp8_kernel", kernel)
    monkeypatch.setattr(gemm_gluon, "interpreting", lambda: False)
    monkeypatch.setattr(gemm_gluon, "capability", lambda index: (9, 0))
    monkeypatch.setattr(gemm_gluon, "sm_count", lambda index: 132)
    monkeypatch.setattr(gemm_gluon, "_PLANS", PlanCache())
    monkeypatch.setattr(dispatch, "_SCALED_PLANS", PlanCache())
    monkeypatch.setattr(_launch, "device_getters", lambda: (lambda: 0, lambda device: "stream"))
    return kernel


def _fp8_operands(seed: int, m=200, n=96, k=256):
    a = _randn(m, k, seed=seed).to(torch.float8_e4m3fn)  # a: [M, K] row-major
    b = _randn(n, k, seed=seed + 1).to(torch.float8_e4m3fn).t()  # b: [K, N] column-major
    return a, b, torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5


@pytest.mark.parametrize("front_door", [False, True])
def test_the_gluon_plan_keeps_its_launch_and_rebuilds_only_the_descriptor_bases(gluon_on_a_fake_hopper, front_door):
    kernel = gluon_on_a_fake_hopper
    config = gemm_gluon.config_space("exact")[0]
    calls = [_fp8_operands(seed) for seed in range(3)]
    outs = [dispatch.triton_scaled_matmul(*ops, config=config) if front_door
            else gemm_gluon.scaled_matmul_gluon(*ops, config=config) for ops in calls]
    assert [entry[0] for entry in kernel.log] == ["jit", "direct", "direct"]
    _, grid, first, kwargs = kernel.log[0]
    assert grid == (min(132, 2 * 1),) and kwargs["num_warps"] == config["num_warps"]  # 200 x 96: 2 x 1 tiles
    names = [p.name for p in kernel.params]
    for (a, b, sa, sb), out, entry in zip(calls, outs, kernel.log):
        args = entry[2]
        a_desc, b_desc, c_desc = args[:3]
        assert a_desc.base is a and b_desc.base.data_ptr() == b.data_ptr() and c_desc.base is out
        assert [list(d.shape) for d in (a_desc, b_desc, c_desc)] == [[200, 256], [96, 256], [200, 96]]
        assert (a_desc.block_shape, b_desc.block_shape) == ([128, 128], [128, 128])
        assert a_desc.layout is first[0].layout  # the plan's layouts, not new ones
        assert args[4] is sa and args[5] is sb and tuple(args[6:9]) == (200, 96, 256)
    direct = kernel.log[1][2]
    constexprs = dict(zip(names[9:], direct[9:]))
    assert constexprs == {name: kwargs[name] for name in names[9:]}  # every constexpr, in parameter order
    plans = (p for _, p in dispatch._SCALED_PLANS.values()) if front_door else gemm_gluon._PLANS.values()
    assert all(isinstance(plan.launch, KernelLaunch) and plan.descriptors[0]["base"] is None for plan in plans)


def test_a_hook_or_an_unaligned_scale_takes_the_jit_path(gluon_on_a_fake_hopper, monkeypatch):
    kernel = gluon_on_a_fake_hopper
    config = gemm_gluon.config_space("exact")[0]
    a, b, sa, sb = _fp8_operands(0)
    gemm_gluon.scaled_matmul_gluon(a, b, sa, sb, config=config)
    shifted = torch.rand(201)[1:].view(200, 1)  # the same shape and strides, 4 bytes off a 16-byte boundary
    gemm_gluon.scaled_matmul_gluon(a, b, shifted, sb, config=config)
    monkeypatch.setattr(_launch, "launch_hooks_idle", lambda: False)
    gemm_gluon.scaled_matmul_gluon(a, b, sa, sb, config=config)
    assert [entry[0] for entry in kernel.log] == ["jit", "jit", "jit"]


def test_the_stand_in_mirrors_the_kernels_parameters():
    if not gemm_gluon.HAS_GLUON:
        pytest.skip("no Gluon")
    real = gemm_gluon._gemm_fp8_kernel
    assert [p.name for p in _RecordingGluonKernel(real).params] == list(inspect.signature(real.fn).parameters)


@pytest.mark.skipif(interpreting() or not gemm_gluon.supported(), reason="runs the Gluon kernel: needs an sm_90 GPU "
                    "with TRITON_INTERPRET=0 (the lead runs it on the H200)")
@pytest.mark.parametrize("front_door", [False, True])
def test_direct_gluon_launches_match_the_reference_on_the_gpu(front_door):
    """The first call compiles through the JIT, the next ones take the direct launch, over new tensors each time."""
    config = gemm_gluon.config_space("exact")[0]
    for seed in range(3):
        a, b, sa, sb = (t.cuda() for t in _fp8_operands(seed, m=300, n=256, k=384))
        bias = _randn(256, dtype=torch.bfloat16, seed=seed + 9).cuda()
        out = (dispatch.triton_scaled_matmul(a, b, sa, sb, bias=bias, config=config) if front_door
               else gemm_gluon.scaled_matmul_gluon(a, b, sa, sb, bias, config))
        ref = reference_scaled_matmul(a, b, sa, sb, bias=bias)
        assert _error(out, ref.to(out.device)) < gemm.TOLERANCE["fp8"]
    plans = [p for _, p in dispatch._SCALED_PLANS.values()] if front_door else list(gemm_gluon._PLANS.values())
    assert any(getattr(p, "launch", None) is not None and p.launch.handle is not None for p in plans)
