"""Fused SwiGLU and tanh-GELU, forward and backward, against float64 torch (CPU, Triton interpreter)."""

import pytest
import torch

from workbench.kernels import swiglu as sw
from workbench.kernels._common import KernelInputError
from workbench.kernels._launch import KernelLaunch
from workbench.kernels.cases import make_swiglu_case, swiglu_cases

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative Frobenius error
IDS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
SMALL = {"BLOCK": 64, "num_warps": 4}  # several programs and a partial last block even on small tensors


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, where values below got's smallest normal number count at that size (fp16
    stores them with absolute precision only, e.g. gelu(-5) ~ -8e-7)."""
    floor = torch.finfo(got.dtype).tiny * want.numel() ** 0.5
    return ((got.double() - want).norm() / max(want.norm().item(), floor)).item()


def randn(shape, dtype, g, scale=1.0):
    return (scale * torch.randn(shape, generator=g)).to(dtype)


def check_against_reference(fn, ref_fn, inputs, dout, dtype):
    """Output and every input gradient of fn against float64 autograd through ref_fn."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, dout)
    ref_leaves = [t.double().requires_grad_(True) for t in inputs]
    ref = ref_fn(*ref_leaves)
    ref_grads = torch.autograd.grad(ref, ref_leaves, dout.double())
    assert out.shape == ref.shape and out.dtype == dtype
    assert rel_err(out, ref.detach()) < TOLERANCE[dtype], "out"
    for i, (got, want, leaf) in enumerate(zip(grads, ref_grads, inputs)):
        assert got.shape == leaf.shape and got.dtype == dtype
        assert rel_err(got, want) < TOLERANCE[dtype], f"gradient of input {i}"


SHAPES = [(1, 1), (7, 3), (33, 17), (7, 100), (1, 1000), (2, 3, 17)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=IDS.get)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_swiglu_two_tensors(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    gate, up, dout = (randn(shape, dtype, g, 2.0) for _ in range(3))
    check_against_reference(lambda a, b: sw.swiglu(a, b, config=SMALL), sw.reference_swiglu, (gate, up), dout, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=IDS.get)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_swiglu_concatenated_gate_up(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape) + 1)
    *lead, ffn = shape
    gate_up, dout = randn((*lead, 2 * ffn), dtype, g, 2.0), randn(shape, dtype, g)
    check_against_reference(lambda t: sw.swiglu(t, config=SMALL), sw.reference_swiglu, (gate_up,), dout, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=IDS.get)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gelu(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape) + 2)
    x, dout = randn(shape, dtype, g, 3.0), randn(shape, dtype, g)
    check_against_reference(lambda t: sw.gelu(t, config=SMALL), sw.reference_gelu, (x,), dout, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=IDS.get)
def test_wider_rows_with_the_default_config(dtype):
    g = torch.Generator().manual_seed(7)
    gate_up, dout = randn((33, 2000), dtype, g, 2.0), randn((33, 1000), dtype, g)
    check_against_reference(sw.swiglu, sw.reference_swiglu, (gate_up,), dout, dtype)
    check_against_reference(sw.swiglu, sw.reference_swiglu, tuple(gate_up.chunk(2, dim=-1)), dout, dtype)
    check_against_reference(sw.gelu, sw.reference_gelu, (gate_up[:, :1000],), dout, dtype)


# The interpreter evaluates exp with numpy, which warns where exp(-2u) overflows to inf (sigmoid -> 0, as on a GPU).
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_gelu_saturates():
    x = torch.tensor([-1e4, -50.0, -10.0, 0.0, 10.0, 50.0, 1e4])
    out = sw.gelu(x)
    assert torch.allclose(out, torch.tensor([0.0, 0.0, 0.0, 0.0, 10.0, 50.0, 1e4]), atol=1e-6)


def test_default_config_and_swiglu_forms_agree():
    g = torch.Generator().manual_seed(5)
    gate_up = randn((3, 5, 2 * 300), torch.bfloat16, g)  # 4500 outputs: two default (4096) blocks
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.equal(sw.swiglu(gate_up), sw.swiglu(gate, up))
    assert torch.equal(sw.swiglu(gate_up), sw.swiglu(gate.contiguous(), up.contiguous(), config={"BLOCK": 1024}))


def test_strided_gate_up_rows_and_broadcast_gradient():
    # gate_up as a column slice of a wider projection output: rows 3F + 5 elements apart.
    g = torch.Generator().manual_seed(6)
    ffn = 40
    wide = randn((9, 3 * ffn + 5), torch.float32, g).requires_grad_(True)
    out = sw.swiglu(wide[:, ffn : 3 * ffn], config=SMALL)
    out.sum().backward()  # dout expanded from a scalar (stride 0)
    ref_in = wide.detach()[:, ffn : 3 * ffn].double().requires_grad_(True)
    ref = sw.reference_swiglu(ref_in)
    ref.sum().backward()
    assert rel_err(out, ref.detach()) < 1e-5
    assert rel_err(wide.grad[:, ffn : 3 * ffn], ref_in.grad) < 1e-5
    assert torch.all(wide.grad[:, :ffn] == 0) and torch.all(wide.grad[:, 3 * ffn :] == 0)


def test_empty_inputs():
    gate_up = torch.randn(0, 8, requires_grad=True)
    out = sw.swiglu(gate_up)
    assert out.shape == (0, 4)
    (grad,) = torch.autograd.grad(out, gate_up, torch.randn(0, 4))
    assert grad.shape == (0, 8)
    assert sw.gelu(torch.randn(0)).shape == (0,)


def test_bad_inputs_name_the_argument():
    a = torch.randn(4, 6)
    cases = [
        (lambda: sw.swiglu(torch.randn(4, 7)), "gate_up"),
        (lambda: sw.swiglu(a.to(torch.int32)), "gate_up"),
        (lambda: sw.swiglu("gate"), "gate_up"),
        (lambda: sw.swiglu(a.double(), a), "gate"),
        (lambda: sw.swiglu(a, torch.randn(4, 5)), "up"),
        (lambda: sw.swiglu(a, a.half()), "up"),
        (lambda: sw.swiglu(a, torch.randn(4, 6, device="meta")), "up on meta"),
        (lambda: sw.gelu(torch.tensor(1.0)), "x"),
        (lambda: sw.gelu(a.to(torch.int64)), "x"),
        (lambda: sw.gelu(a, config={"BLOCK": 1000}), "BLOCK"),
        (lambda: sw.gelu(a, config={"BLOCK_N": 1024}), "config"),
        (lambda: sw.swiglu(a, config={"num_warps": 0}), "num_warps"),
        (lambda: sw.config_space("tpu"), "backend"),
        (lambda: swiglu_cases("huge"), "suite"),
    ]
    for call, argument in cases:
        with pytest.raises(KernelInputError, match=argument):
            call()


def test_config_space_per_backend():
    for backend in ("cuda", "hip", "interpreter"):
        space = sw.config_space(backend)
        assert space, backend
        assert {c["BLOCK"] for c in space} == {1024, 2048, 4096, 8192}
        assert {c["num_warps"] for c in space} == {4, 8}
        assert all(("waves_per_eu" in c) == (backend == "hip") for c in space), backend
    assert {c["waves_per_eu"] for c in sw.config_space("hip")} == {0, 1, 2}


def test_flop_and_byte_counts():
    tokens, ffn = 8192, 14336
    n = tokens * ffn
    assert sw.bytes_moved("swiglu", tokens, ffn, "bf16") == 3 * n * 2  # gate, up in; out
    assert sw.bytes_moved("swiglu", tokens, ffn, "bf16", "bwd") == 5 * n * 2  # gate, up, dout in; dgate, dup
    assert sw.bytes_moved("gelu", tokens, ffn, "fp32", "fwd_bwd") == (2 + 3) * n * 4
    for op in ("swiglu", "gelu"):
        assert 0 < sw.flops(op, tokens, ffn) < sw.flops(op, tokens, ffn, "bwd")
        assert sw.flops(op, tokens, ffn, "fwd_bwd") == sw.flops(op, tokens, ffn) + sw.flops(op, tokens, ffn, "bwd")


def test_bench_cases_describe_the_rows():
    quick, full = swiglu_cases("quick"), swiglu_cases("full")
    assert len(quick) == 4 and len(full) == 12
    assert {c.op for c in full} == {"swiglu", "gelu", "swiglu_fwd_bwd", "gelu_fwd_bwd"}
    assert {(c.row["rows"], c.row["cols"]) for c in full} == {(8192, 14336), (8192, 28672)}
    for case in full:
        assert case.row == {"op": case.op, "rows": 8192, "cols": case.row["cols"], "dtype": "bf16"}
        assert case.dtype == "bf16" and case.tolerance == 2e-2 and case.flops > 0 and case.bytes > 0


@pytest.mark.parametrize("fwd_bwd", [False, True], ids=["fwd", "fwd_bwd"])
@pytest.mark.parametrize("op,concat", [("swiglu", False), ("swiglu", True), ("gelu", False)],
                         ids=["swiglu", "swiglu-gate_up", "gelu"])
def test_bench_case_runs_small(op, concat, fwd_bwd):
    torch.manual_seed(0)
    case = make_swiglu_case(op, 6, 40, "bf16", fwd_bwd, concat=concat)
    inputs = case.make_inputs(str(torch.empty(0).device))  # the default device: CPU, or the GPU
    want = case.reference(*inputs)
    assert want.dtype == torch.float64
    for fn in (case.run, case.baseline):
        got = fn(*inputs)
        assert got.shape == want.shape
        assert rel_err(got, want) < case.tolerance


def test_forward_without_autograd_matches_the_recorded_one():
    # no input needs a gradient: the wrappers launch without autograd.Function; same values, no graph
    g = torch.Generator().manual_seed(5)
    gate_up = randn((7, 2 * 150), torch.float32, g)  # F = 150: three column blocks of 64 a row, the last partial
    recorded = sw.swiglu(gate_up.clone().requires_grad_(True), config=SMALL)
    direct = sw.swiglu(gate_up, config=SMALL)
    assert direct.grad_fn is None and recorded.grad_fn is not None
    assert torch.equal(direct, recorded.detach())
    assert torch.equal(direct, sw.swiglu(gate_up[:, :150], gate_up[:, 150:], config=SMALL))
    ref = sw.reference_swiglu(gate_up[:, :150].double(), gate_up[:, 150:].double())
    assert torch.allclose(direct.double(), ref, rtol=1e-5, atol=1e-6)


def _fwd_bwd(fn, inputs, dout):
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    return (out.detach(), *torch.autograd.grad(out, leaves, dout))


def test_repeated_calls_launch_through_the_compiled_kernels(direct_launches):
    """Each form's launches are planned once per distinct call (``_launch.KernelLaunch``): the first fwd+bwd
    compiles through the JIT, repeats call the compiled launchers directly (conftest's stand-ins replay them), with
    bitwise the same results; a gate_up whose up half starts off a 16-byte boundary keeps the JIT path."""
    g = torch.Generator().manual_seed(6)
    gate_up, dout = randn((5, 2 * 64), torch.float32, g), randn((5, 64), torch.float32, g)  # up: 256 bytes in
    odd, odd_dout = randn((5, 2 * 150), torch.float32, g), randn((5, 150), torch.float32, g)  # up: 600 bytes in
    x, x_dout = randn((3, 40), torch.float32, g), randn((3, 40), torch.float32, g)
    calls = {"concat": (lambda t: sw.swiglu(t, config=SMALL), (gate_up,), dout),
             "pair": (lambda a, b: sw.swiglu(a, b, config=SMALL), (gate_up[:, :64].contiguous(),
                                                                    gate_up[:, 64:].contiguous()), dout),
             "gelu": (lambda t: sw.gelu(t, config=SMALL), (x,), x_dout),
             "unaligned": (lambda t: sw.swiglu(t, config=SMALL), (odd,), odd_dout)}
    jit = {name: _fwd_bwd(*call) for name, call in calls.items()}  # the real kernels, through the JIT
    log = direct_launches(sw, "_swiglu_fwd_kernel", "_swiglu_bwd_kernel", "_gelu_fwd_kernel", "_gelu_bwd_kernel")
    for name, call in calls.items():
        log.clear()
        results = [_fwd_bwd(*call) for _ in range(3)]
        paths = [path for path, _ in log]
        assert paths == ["jit"] * 6 if name == "unaligned" else ["jit", "jit"] + ["direct"] * 4, name
        for got in results:
            assert all(torch.equal(a, b) for a, b in zip(got, jit[name])), name
    assert all(isinstance(launch, KernelLaunch) for plan in sw._PLANS.values() for launch in (plan.fwd, plan.bwd))
