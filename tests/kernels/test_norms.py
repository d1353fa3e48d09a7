"""Triton RMSNorm / LayerNorm, forward and backward, against float64 torch (CPU, Triton interpreter)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.kernels import norms
from workbench.kernels._common import KernelInputError, interpreting
from workbench.kernels._launch import KernelLaunch

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative Frobenius error
IDS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def make(shape, dtype, layer_norm: bool, seed: int = 0):
    """x [*shape], weight and bias [cols], dy [*shape]; weights around 1 as trained norms have them."""
    g = torch.Generator().manual_seed(seed)
    cols = shape[-1]
    x = torch.randn(shape, generator=g).to(dtype)
    weight = (1 + 0.5 * torch.randn(cols, generator=g)).to(dtype)
    bias = torch.randn(cols, generator=g).to(dtype) if layer_norm else None
    dy = torch.randn(shape, generator=g).to(dtype)
    return x, weight, bias, dy


def run_ours(x, weight, bias, dy, config=None):
    """y and the gradients (dx, dweight[, dbias]) from the Triton kernels."""
    leaves = [t.clone().requires_grad_(True) for t in (x, weight) + ((bias,) if bias is not None else ())]
    if bias is None:
        y = norms.rms_norm(*leaves, config=config)
    else:
        y = norms.layer_norm(*leaves, config=config)
    return (y, *torch.autograd.grad(y, leaves, dy))


def run_reference(x, weight, bias, dy):
    """y, the gradients, and the scales below which an error counts as cancellation: float64 autograd."""
    leaves = [t.double().requires_grad_(True) for t in (x, weight) + ((bias,) if bias is not None else ())]
    if bias is None:
        y = norms.reference_rms_norm(*leaves)
    else:
        y = norms.reference_layer_norm(*leaves)
    grads = torch.autograd.grad(y, leaves, dy.double())
    # dx = rstd * (dy*w - projections of dy*w): when the projections cancel dy*w (one column, or x constant
    # along the row) dx is tiny and fp32 keeps only its error relative to rstd*dy*w. dweight sums dy*xhat,
    # whose size is that of dy (it is exactly 0 for LayerNorm on one column).
    xd = x.double()
    centred = xd - xd.mean(-1, keepdim=True) if bias is not None else xd
    rstd = (centred.pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    scales = [0.0, (dy.double() * weight.double() * rstd).norm().item(), dy.double().norm().item(), 0.0]
    return (y.detach(), *grads), scales


def rel_err(got, want, scale=0.0):
    denominator = max(want.norm().item(), scale)
    return (got.double() - want).norm().item() / denominator if denominator > 0 else got.double().norm().item()


def assert_matches(shape, dtype, layer_norm, config=None, seed=0):
    x, weight, bias, dy = make(shape, dtype, layer_norm, seed)
    ours = run_ours(x, weight, bias, dy, config)
    want, scales = run_reference(x, weight, bias, dy)
    names = ("y", "dx", "dweight", "dbias")
    for name, got, ref, scale, like in zip(names, ours, want, scales, (x, x, weight, bias)):
        assert got.shape == like.shape and got.dtype == like.dtype, name
        err = rel_err(got, ref, scale)
        assert err < TOLERANCE[dtype], f"{name}: relative error {err:.2e} for {shape} {dtype} {config}"


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("cols", [1, 3, 17, 100, 1000])
@pytest.mark.parametrize("rows", [1, 7, 33])
def test_fp32_matches_float64_reference(rows, cols, layer_norm):
    assert_matches((rows, cols), torch.float32, layer_norm, seed=rows * 10_000 + cols)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=IDS.get)
@pytest.mark.parametrize("shape", [(1, 3), (7, 100), (33, 1000)], ids=str)
def test_half_precisions_match_float64_reference(shape, dtype, layer_norm):
    assert_matches(shape, dtype, layer_norm)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
def test_leading_dimensions_are_flattened(layer_norm):
    assert_matches((2, 5, 48), torch.bfloat16, layer_norm)
    assert_matches((3, 1, 17), torch.float32, layer_norm)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("shape,block_n", [((7, 1000), 256), ((5, 17), 16), ((3, 33), 32)], ids=str)
def test_column_loop_matches_reference(shape, block_n, layer_norm):
    # BLOCK_N below the row width takes the looped path (several column tiles, a partial last one).
    assert_matches(shape, torch.float32, layer_norm, config={"num_warps": 4, "BLOCK_N": block_n})
    assert_matches(shape, torch.bfloat16, layer_norm, config={"num_warps": 4, "BLOCK_N": block_n})


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
def test_rows_wider_than_the_register_tile_loop(layer_norm):
    cols = norms.MAX_FWD_BLOCK_N + 27  # forward: two tiles; backward: three tiles of MAX_BWD_BLOCK_N
    assert cols > norms.MAX_BWD_BLOCK_N
    assert_matches((2, cols), torch.float32, layer_norm)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
@pytest.mark.parametrize("rows_per_program", [2, 4])
def test_several_rows_per_program(rows_per_program, layer_norm):
    config = {"num_warps": 1, "ROWS_PER_PROGRAM": rows_per_program}
    assert_matches((7, 100), torch.float32, layer_norm, config=config)  # 7 rows: a partial last tile of rows
    assert_matches((3, 17), torch.float16, layer_norm, config=config)


def test_strided_input_and_broadcast_gradient():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(9, 80, generator=g).requires_grad_(True)
    weight, bias = torch.randn(40, generator=g), torch.randn(40, generator=g)
    y = norms.layer_norm(base[:, 10:50], weight, bias)  # rows 80 elements apart, not 40
    y.sum().backward()  # dy arrives expanded from a scalar (stride 0)
    ref_x = base.detach()[:, 10:50].double().requires_grad_(True)
    ref = norms.reference_layer_norm(ref_x, weight, bias)
    ref.sum().backward()
    assert rel_err(y, ref.detach()) < 1e-5
    assert rel_err(base.grad[:, 10:50], ref_x.grad) < 1e-5
    assert torch.all(base.grad[:, :10] == 0) and torch.all(base.grad[:, 50:] == 0)


def test_mixed_weight_dtype_and_empty_input():
    x, _, _, dy = make((6, 24), torch.bfloat16, False)
    weight = torch.randn(24, dtype=torch.float32).requires_grad_(True)
    y = norms.rms_norm(x, weight)
    assert y.dtype == torch.bfloat16
    (dweight,) = torch.autograd.grad(y, weight, dy)
    assert dweight.dtype == torch.float32
    ref_w = weight.detach().double().requires_grad_(True)
    (want,) = torch.autograd.grad(norms.reference_rms_norm(x, ref_w), ref_w, dy.double())
    assert rel_err(dweight, want) < 1e-2
    empty = torch.randn(0, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    b = torch.zeros(8, requires_grad=True)
    out = norms.layer_norm(empty, w, b)
    assert out.shape == (0, 8)
    dx, dw, db = torch.autograd.grad(out, (empty, w, b), torch.randn(0, 8))
    assert dx.shape == (0, 8) and torch.all(dw == 0) and torch.all(db == 0)


def test_bad_inputs_name_the_argument():
    x, w = torch.randn(4, 8), torch.randn(8)
    b = torch.randn(8)
    cases = [
        (lambda: norms.rms_norm(x.to(torch.int32), w), "x"),
        (lambda: norms.rms_norm(x.double(), w), "x"),
        (lambda: norms.rms_norm(torch.randn(4, 0), torch.randn(0)), "x"),
        (lambda: norms.rms_norm([1.0], w), "x"),
        (lambda: norms.rms_norm(x, torch.randn(7)), "weight"),
        (lambda: norms.rms_norm(x, torch.randn(8, 1)), "weight"),
        (lambda: norms.rms_norm(x, w.to(torch.int64)), "weight"),
        (lambda: norms.rms_norm(x, w, eps=-1.0), "eps"),
        (lambda: norms.rms_norm(x, w, eps=None), "eps"),
        (lambda: norms.layer_norm(x, w, torch.randn(9)), "bias"),
        (lambda: norms.layer_norm(x, w, None), "bias"),
        (lambda: norms.layer_norm(x, torch.randn(8, device="meta"), b), "weight"),
        (lambda: norms.rms_norm(x, w, config={"num_warps": 3}), "num_warps"),
        (lambda: norms.rms_norm(x, w, config={"BLOCK": 64}), "config"),
        (lambda: norms.layer_norm(x, w, b, config={"ROWS_PER_PROGRAM": 0}), "ROWS_PER_PROGRAM"),
        (lambda: norms.config_space("tpu"), "backend"),
        (lambda: norms.bench_cases("huge"), "suite"),
    ]
    for call, argument in cases:
        with pytest.raises(KernelInputError, match=argument):
            call()


def test_config_space_per_backend():
    for backend in ("cuda", "hip", "interpreter"):
        space = norms.config_space(backend)
        assert space, backend
        assert {c["num_warps"] for c in space} == {1, 2, 4, 8, 16}
        assert {c["ROWS_PER_PROGRAM"] for c in space} == {1, 2, 4}
        assert all(("waves_per_eu" in c) == (backend == "hip") for c in space), backend
        for cols in (1, 100, 4096, 8192, 100_000):
            assert norms.default_config(cols, backend) in space
    assert {c["waves_per_eu"] for c in norms.config_space("hip")} == {0, 1, 2}
    # wider rows get more warps
    warps = [norms.default_config(cols, "cuda")["num_warps"] for cols in (64, 1024, 4096, 8192)]
    assert warps == sorted(warps) and warps[0] < warps[-1] == 16


def test_flop_and_byte_counts():
    rows, cols = 16384, 4096
    n = rows * cols
    assert norms.bytes_moved("rmsnorm", rows, cols, "bf16") == 2 * n * 2 + cols * 2 + rows * 4
    assert norms.bytes_moved("layernorm", rows, cols, "fp32") == 2 * n * 4 + 2 * cols * 4 + 2 * rows * 4
    for norm in ("rmsnorm", "layernorm"):
        for count in (lambda p: norms.flops(norm, rows, cols, p), lambda p: norms.bytes_moved(norm, rows, cols, "bf16", p)):
            assert count("fwd") > 0 and count("bwd") > count("fwd")
            assert count("fwd_bwd") == count("fwd") + count("bwd")
        assert norms.bytes_moved(norm, rows, cols, "bf16", "bwd") >= 3 * n * 2  # reads x, dy; writes dx


def test_bench_cases_describe_the_rows():
    quick, full = norms.bench_cases("quick"), norms.bench_cases("full")
    assert len(quick) == 4 and len(full) == 12
    assert {c.op for c in full} == {"rmsnorm", "layernorm", "rmsnorm_fwd_bwd", "layernorm_fwd_bwd"}
    assert {(c.row["rows"], c.row["cols"]) for c in full} == {(16384, 4096), (8192, 8192), (32768, 8192)}
    for case in full:
        assert case.row == {"op": case.op, "rows": case.row["rows"], "cols": case.row["cols"], "dtype": "bf16"}
        assert case.dtype == "bf16" and case.tolerance == 2e-2 and case.flops > 0 and case.bytes > 0


@pytest.mark.parametrize("fwd_bwd", [False, True], ids=["fwd", "fwd_bwd"])
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_bench_case_runs_small(norm, fwd_bwd):
    torch.manual_seed(0)
    case = norms.make_bench_case(norm, 6, 48, "bf16", fwd_bwd)
    inputs = case.make_inputs(str(torch.empty(0).device))  # the default device: CPU, or the GPU
    want = case.reference(*inputs)
    assert want.dtype == torch.float64
    for fn in (case.run, case.baseline):
        got = fn(*inputs)
        assert got.shape == want.shape == (6, 48)
        assert rel_err(got, want) < case.tolerance


def test_forward_only_path_matches_the_autograd_path():
    """Without a gradient to track the wrappers skip autograd (host time); the result must not change."""
    g = torch.Generator().manual_seed(7)
    x, w, b = torch.randn(5, 33, generator=g), torch.randn(33, generator=g), torch.randn(33, generator=g)
    for fn, params in ((norms.rms_norm, (w,)), (norms.layer_norm, (w, b))):
        direct = fn(x, *params)
        tracked = fn(x.clone().requires_grad_(True), *params)
        assert direct.grad_fn is None and tracked.grad_fn is not None
        assert torch.equal(direct, tracked.detach())


def test_partial_sums_reduce_many_programs_and_both_weights():
    """The backward's per-program sums [groups, programs, cols] -> dweight, dbias [cols]: more programs than one
    step of the reduction takes, columns not a multiple of its block, each cast to its own dtype."""
    g = torch.Generator().manual_seed(11)
    parts, cols = norms.PARTIAL_SUM_BLOCK[0] * 2 + 5, 70
    partials = torch.randn(2, parts, cols, generator=g)
    dweight, dbias = torch.empty(cols, dtype=torch.bfloat16), torch.empty(cols, dtype=torch.float32)
    block_p, block_c = norms.PARTIAL_SUM_BLOCK
    norms._partial_sum_kernel[(-(-cols // block_c), 2)](partials, dweight, dbias, parts, cols, BLOCK_P=block_p,
                                                        BLOCK_C=block_c)
    want = partials.double().sum(1)
    assert rel_err(dweight, want[0]) < 1e-2 and rel_err(dbias, want[1]) < 1e-6


def test_layer_norm_bias_gradient_in_its_own_dtype():
    """bf16 weight with an fp32 bias: dbias is summed in fp32 and written as fp32, not rounded to the weight's
    bf16 first."""
    x, weight, bias, dy = make((6, 40), torch.bfloat16, True, seed=14)
    leaves = [x.clone().requires_grad_(True), weight.clone().requires_grad_(True),
              bias.float().requires_grad_(True)]
    dweight, dbias = torch.autograd.grad(norms.layer_norm(*leaves), leaves[1:], dy)
    assert dweight.dtype == torch.bfloat16 and dbias.dtype == torch.float32
    assert rel_err(dbias, dy.double().sum(0)) < 1e-6  # dbias = sum of dy over rows, in fp32


@pytest.mark.parametrize("stages", [1, 4])
def test_pipeline_depth_is_a_config_choice(stages):
    assert_matches((9, 100), torch.float32, True, config={"num_warps": 2, "num_stages": stages})
    with pytest.raises(KernelInputError, match="num_stages"):
        norms.rms_norm(torch.randn(2, 8), torch.ones(8), config={"num_stages": 0})


def test_repeated_calls_reuse_the_plan_and_still_check():
    x, w, _, dy = make((4, 40), torch.float32, False)
    first = norms.rms_norm(x, w)
    assert torch.equal(norms.rms_norm(x, w), first)  # the cached plan gives the same result
    with pytest.raises(KernelInputError, match="weight"):
        norms.rms_norm(x, torch.ones(39))
    with pytest.raises(KernelInputError, match="eps"):
        norms.rms_norm(x, w, eps=-1.0)


def test_a_repeated_fwd_bwd_only_allocates_and_launches(monkeypatch):
    """What a training step repeats: the first call plans (the grids, from each pass's compiled kernel), later
    ones launch forward, backward and the partial sums with the same grids and nothing else, and give bitwise
    the same gradients (the weight-gradient sums run in a fixed order, without atomics)."""
    sized, launches = [], []
    real_resident_programs = norms._resident_programs

    def resident_programs(kernel, *args):
        sized.append(kernel)
        return real_resident_programs(kernel, *args)

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append((self, grid))
            return self.kernel[grid]

    monkeypatch.setattr(norms, "_resident_programs", resident_programs)
    for name in ("_norm_fwd_kernel", "_norm_bwd_kernel", "_partial_sum_kernel"):
        monkeypatch.setattr(norms, name, Recorder(getattr(norms, name)))
    x, weight, bias, dy = make((13, 40), torch.float32, True, seed=5)  # a shape no other test plans
    # the JIT launch path, so that every launch goes through kernel[grid] (on a GPU the default launches later calls
    # through the compiled kernels: test_norms_launch_through_the_shared_kernel_launch)
    first, *again = [run_ours(x, weight, bias, dy, config={"launch": "jit"}) for _ in range(3)]
    assert sized == [norms._norm_fwd_kernel, norms._norm_bwd_kernel]  # once per pass, at the first call
    assert len(launches) == 9
    kernels = [norms._norm_fwd_kernel, norms._norm_bwd_kernel, norms._partial_sum_kernel]
    assert [kernel for kernel, _ in launches[:3]] == kernels
    assert launches[:3] == launches[3:6] == launches[6:]
    assert launches[1][1] == (min(13, norms.INTERPRETER_PROGRAMS),)  # several programs: partial sums to reduce
    for results in again:
        assert all(torch.equal(a, b) for a, b in zip(first, results))


def test_two_dimensional_inputs_pass_through_and_dy_may_repeat_one_row():
    x, weight, _, _ = make((6, 24), torch.float32, False, seed=9)
    assert norms._as_rows(x, 24) is x  # no reshape or view on the common [rows, cols] call
    leaf, w = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    row = torch.randn(24, generator=torch.Generator().manual_seed(1))
    dy = row.expand(6, 24)  # strides (0, 1): every row of dy is the same memory
    got = torch.autograd.grad(norms.rms_norm(leaf, w), (leaf, w), dy)
    ref_x, ref_w = x.double().requires_grad_(True), weight.double().requires_grad_(True)
    want = torch.autograd.grad(norms.reference_rms_norm(ref_x, ref_w), (ref_x, ref_w), dy.double())
    for g, r in zip(got, want):
        assert rel_err(g, r) < 1e-5


@pytest.mark.skipif(not interpreting(), reason="the stand-in launcher replays without the launch options (num_warps): "
                    "on a GPU its reductions take another order; there every other test runs the real direct path")
def test_norms_launch_through_the_shared_kernel_launch(direct_launches):
    """The plans hold ``_launch.KernelLaunch`` objects (no copy of it in norms.py): the first fwd+bwd compiles
    through the JIT, later ones call the compiled launchers directly (stand-ins that replay them, conftest's
    ``direct_launches``), with bitwise the JIT path's results; a dy with another row stride (not in the plan's
    key) takes a launch of its own through the JIT."""
    names = ("_norm_fwd_kernel", "_norm_bwd_kernel", "_partial_sum_kernel")
    order = [getattr(norms, name) for name in names]
    log = direct_launches(norms, *names)
    x, weight, bias, dy = make((11, 72), torch.float32, True, seed=8)
    first, *again = [run_ours(x, weight, bias, dy) for _ in range(3)]
    assert log == [("jit", k) for k in order] + [("direct", k) for k in order] * 2
    for results in again:
        assert all(torch.equal(a, b) for a, b in zip(first, results))
    jit = run_ours(x, weight, bias, dy, config={"launch": "jit"})
    assert all(torch.equal(a, b) for a, b in zip(first, jit))
    plan = next(iter(norms._PLANS.values()))
    assert all(isinstance(launch, KernelLaunch) for launch in (plan.fwd, plan.bwd, plan.partial_sum))
    assert not hasattr(norms, "_KernelLaunch")

    log.clear()
    wide = torch.randn(11, 80, generator=torch.Generator().manual_seed(2))[:, :72]  # dy rows 80 apart
    strided = run_ours(x, weight, bias, wide)
    assert [path for path, _ in log] == ["direct", "jit", "direct"]  # fwd, bwd (its own launch), partial sums
    want, scales = run_reference(x, weight, bias, wide)
    for got, ref, scale in zip(strided, want, scales):
        assert rel_err(got, ref, scale) < TOLERANCE[torch.float32]


def test_backward_warps_and_launch_are_config_choices():
    assert norms._backward_warps({"num_warps": 4}) == 8
    assert norms._backward_warps({"num_warps": 32}) == 32
    assert norms._backward_warps({"num_warps": 4, "bwd_num_warps": 2}) == 2
    assert_matches((9, 100), torch.float32, False, config={"num_warps": 2, "bwd_num_warps": 1, "launch": "jit"})
    for config, argument in (({"launch": "fast"}, "launch"), ({"bwd_num_warps": 64}, "bwd_num_warps"),
                             ({"bwd_num_warps": 3}, "bwd_num_warps")):
        with pytest.raises(KernelInputError, match=argument):
            norms.rms_norm(torch.randn(2, 8), torch.ones(8), config=config)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rmsnorm", "layernorm"])
def test_any_rank_contiguous_input_reaches_the_kernels_without_views(layer_norm):
    """A contiguous x of rank 3 (a training step's [batch, seq, hidden]) goes to the kernels as it is: y and dx
    are allocated in x's shape rather than viewed from [rows, cols] (each view is host time), and the results
    match float64; a rank-3 x with padded rows is reshaped first and matches too."""
    x, weight, bias, dy = make((2, 5, 48), torch.float32, layer_norm, seed=12)
    y, dx, *_ = run_ours(x, weight, bias, dy)
    assert y.shape == dx.shape == x.shape and y._base is None and dx._base is None
    assert_matches((2, 5, 48), torch.float32, layer_norm, seed=12)

    base = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(4)).requires_grad_(True)
    padded = base[..., :48]  # rows 64 elements apart in rank 3: not one [rows, cols] stride
    params = [weight] + ([bias] if layer_norm else [])
    y = (norms.layer_norm if layer_norm else norms.rms_norm)(padded, *params)
    (dx,) = torch.autograd.grad(y, base, dy)
    ref_x = padded.detach().double().requires_grad_(True)
    ref_params = [t.double() for t in params]
    ref = (norms.reference_layer_norm if layer_norm else norms.reference_rms_norm)(ref_x, *ref_params)
    (ref_dx,) = torch.autograd.grad(ref, ref_x, dy.double())
    assert y.shape == padded.shape and rel_err(y, ref.detach()) < 1e-5
    assert rel_err(dx[..., :48], ref_dx) < 1e-5 and torch.all(dx[..., 48:] == 0)


def test_gradients_are_not_differentiable_again():
    """The backward is once_differentiable: with create_graph=True the same gradients as without, and
    differentiating them (here through a dy that requires a gradient) is an error."""
    x, weight, _, dy = make((4, 24), torch.float32, False, seed=13)
    leaf, w = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    plain = torch.autograd.grad(norms.rms_norm(leaf, w), (leaf, w), dy)
    tracked_dy = dy.clone().requires_grad_(True)
    graphed = torch.autograd.grad(norms.rms_norm(leaf, w), (leaf, w), tracked_dy, create_graph=True)
    assert all(torch.equal(a, b) for a, b in zip(plain, graphed))
    assert not plain[0].requires_grad and graphed[0].requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable"):
        graphed[0].sum().backward()


def test_cpu_host_mode_splits_the_host_cost_above_its_floor(tmp_path):
    """benchmarks/kernels/norms_bench.py --cpu-host: every case of the host-cost split measured (the fwd+bwd
    floor included: its no-op Function returns a gradient for every input), ours above the floor."""
    bench = Path(__file__).resolve().parents[2] / "benchmarks/kernels/norms_bench.py"
    result = subprocess.run([sys.executable, str(bench), "--cpu-host", "--out", str(tmp_path), "--rounds", "2",
                             "--calls", "20"], env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "norms_host_cpu.csv").open()))
    assert len(rows) == 12 and not any(row["error"] for row in rows)  # 2 norms x 2 passes x 3 cases
    for norm in ("rmsnorm", "layernorm"):
        us = {row["case"]: float(row["host_us"]) for row in rows if row["op"] == norm and row["pass"] == "fwd_bwd"}
        assert us["ours new"] > us["floor: no-op autograd.Function + autograd.grad"] > 0
    assert (tmp_path / "REPORT.md").exists()
