"""Fused cross-entropy kernel against torch's float64 cross-entropy (CPU, Triton interpreter)."""

import math

import pytest
import torch

from workbench.kernels import cases
from workbench.kernels import cross_entropy as ce
from workbench.kernels._common import KernelInputError

# BLOCK_V 1024 so that V = 3000 takes three chunks of the online log-sum-exp.
SMALL = {"BLOCK_V": 1024, "num_warps": 4}
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-3, 2e-2)}  # (loss, gradient) relative error


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def make(n: int, v: int, dtype: torch.dtype, seed: int = 0, ignored: tuple[int, ...] = ()):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, v, generator=g) * 3).to(dtype)
    targets = torch.randint(0, v, (n,), generator=g)
    targets[list(ignored)] = -100
    return logits, targets


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("v", [1, 5, 100, 3000])
@pytest.mark.parametrize("n", [1, 3, 16])
def test_loss_and_grad_match_reference(n, v, dtype):
    ignored = () if n == 1 else (1,) if n == 3 else (0, 7, 15)
    logits, targets = make(n, v, dtype, seed=n * 10_000 + v, ignored=ignored)
    loss_tol, grad_tol = TOLERANCE[dtype]
    for reduction in ("mean", "sum", "none"):
        x = logits.clone().requires_grad_(True)
        loss = ce.cross_entropy(x, targets, reduction=reduction, config=SMALL)
        assert loss.dtype == torch.float32
        want = ce.reference_cross_entropy(logits, targets, reduction=reduction)
        if v == 1:  # a single class: every loss and gradient is exactly 0
            assert torch.all(loss == 0)
        else:
            assert rel_err(loss, want) < loss_tol, reduction
        loss.sum().backward()
        assert x.grad.dtype == dtype
        want_grad = ce.reference_cross_entropy_grad(logits, targets, reduction=reduction)
        if v == 1:
            assert torch.all(x.grad == 0)
        else:
            assert rel_err(x.grad, want_grad) < grad_tol, reduction
        assert torch.all(x.grad[list(ignored)] == 0)
    if ignored:
        per_row = ce.cross_entropy(logits, targets, reduction="none", config=SMALL)
        assert torch.all(per_row[list(ignored)] == 0)


def test_default_config_and_other_ignore_index():
    logits, targets = make(5, 300, torch.float32, seed=1)
    targets[2] = 7
    x = logits.clone().requires_grad_(True)
    loss = ce.cross_entropy(x, targets, ignore_index=7)
    loss.backward()
    assert rel_err(loss, ce.reference_cross_entropy(logits, targets, ignore_index=7)) < 1e-5
    assert rel_err(x.grad, ce.reference_cross_entropy_grad(logits, targets, ignore_index=7)) < 1e-5
    assert torch.all(x.grad[2] == 0)


def test_all_ignored_batch_follows_torch():
    """Mean over no valid row is 0/0 = nan (torch's answer); sum is 0; gradients are zero."""
    logits, targets = make(4, 50, torch.float32, ignored=(0, 1, 2, 3))
    torch_mean = torch.nn.functional.cross_entropy(logits, targets)
    for reduction, check in (("mean", math.isnan), ("sum", lambda x: x == 0.0)):
        x = logits.clone().requires_grad_(True)
        loss = ce.cross_entropy(x, targets, reduction=reduction, config=SMALL)
        assert check(loss.item())
        loss.backward()
        assert torch.all(x.grad == 0)
    assert math.isnan(torch_mean.item())


def test_fp16_logits_int32_targets_and_strided_logits():
    wide, _ = make(6, 2 * 700, torch.float16, seed=3)
    wide.requires_grad_(True)
    logits = wide[:, ::2]  # column stride 2: the wrapper makes a contiguous copy
    assert logits.stride(1) == 2
    _, targets = make(6, 700, torch.float16, seed=3, ignored=(4,))
    loss = ce.cross_entropy(logits, targets.int(), config=SMALL)
    assert rel_err(loss, ce.reference_cross_entropy(logits, targets)) < 1e-3
    loss.backward()
    assert wide.grad.dtype == torch.float16
    assert torch.all(wide.grad[:, 1::2] == 0)
    assert rel_err(wide.grad[:, ::2], ce.reference_cross_entropy_grad(logits, targets)) < 2e-2


def test_inplace_backward_reuses_the_logits_buffer():
    logits, targets = make(8, 2500, torch.bfloat16, seed=4, ignored=(3,))
    leaf = logits.clone().requires_grad_(True)
    ce.cross_entropy(leaf, targets, config=SMALL).backward()
    expected = leaf.grad

    source = logits.clone().requires_grad_(True)
    x = source * 1  # a non-leaf activation, like the output of the LM head
    x.retain_grad()
    ce.cross_entropy(x, targets, config=SMALL, inplace_backward=True).backward()
    assert torch.equal(x.detach(), expected)  # the logits buffer now holds dlogits
    assert torch.equal(x.grad, expected)
    assert torch.equal(source.grad, expected)


def test_none_reduction_with_per_row_grad():
    logits, targets = make(5, 130, torch.float32, seed=5, ignored=(2,))
    weights = torch.tensor([0.5, 2.0, 3.0, -1.0, 0.25])
    x = logits.clone().requires_grad_(True)
    (ce.cross_entropy(x, targets, reduction="none", config=SMALL) * weights).sum().backward()
    r = logits.double().requires_grad_(True)
    (torch.nn.functional.cross_entropy(r, targets, reduction="none") * weights.double()).sum().backward()
    assert rel_err(x.grad, r.grad) < 1e-5


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradient_written_by_the_forward_is_scaled_by_the_upstream_gradient(reduction):
    """mean/sum: the forward writes dlogits for an upstream gradient of 1; the backward scales it (3.5 here) or
    leaves it (1, where the scaling kernel returns at once), and the logits are not kept for the backward."""
    logits, targets = make(6, 2100, torch.float32, seed=6, ignored=(4,))
    want = ce.reference_cross_entropy_grad(logits, targets, reduction=reduction)
    for upstream in (3.5, 1.0):
        x = logits.clone().requires_grad_(True)
        loss = ce.cross_entropy(x, targets, reduction=reduction, config=SMALL)
        assert loss.grad_fn.saved_tensors == ()  # nothing saved: the gradient is already there
        (loss * upstream).backward()
        assert rel_err(x.grad, upstream * want) < 1e-5
        assert torch.all(x.grad[4] == 0)
    with pytest.raises(RuntimeError, match="second backward"):
        loss = ce.cross_entropy(logits.clone().requires_grad_(True), targets, reduction=reduction, config=SMALL)
        loss.backward(retain_graph=True)
        loss.backward()


def test_pipeline_depth_is_a_config_choice():
    logits, targets = make(3, 3000, torch.float32, seed=7)
    want = ce.reference_cross_entropy_grad(logits, targets)
    for stages in (1, 4):
        x = logits.clone().requires_grad_(True)
        ce.cross_entropy(x, targets, config={**SMALL, "num_stages": stages}).backward()
        assert rel_err(x.grad, want) < 1e-5
    with pytest.raises(KernelInputError, match="num_stages"):
        ce.cross_entropy(logits, targets, config={**SMALL, "num_stages": 0})


@pytest.mark.parametrize("call, argument", [
    (lambda: ce.cross_entropy(torch.randn(10), torch.zeros(10, dtype=torch.long)), "logits"),
    (lambda: ce.cross_entropy(torch.randn(2, 3).double(), torch.zeros(2, dtype=torch.long)), "logits"),
    (lambda: ce.cross_entropy(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long)), "logits"),
    (lambda: ce.cross_entropy(torch.randn(2, 0), torch.zeros(2, dtype=torch.long)), "logits"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.zeros(3, dtype=torch.long)), "targets"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.zeros(2, 1, dtype=torch.long)), "targets"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.zeros(2)), "targets"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 3])), "targets"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([-1, 0])), "targets"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), reduction="avg"), "reduction"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), ignore_index=1.5), "ignore_index"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1], device="meta")), "device"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), config={"BLOCK_V": 1000}), "BLOCK_V"),
    (lambda: ce.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), config={"BLOCK_V": 64, "BLOCK": 1}),
     "config"),
    (lambda: ce.config_space("metal"), "backend"),
    (lambda: cases.cross_entropy_cases("huge"), "suite"),
])
def test_bad_inputs_name_the_argument(call, argument):
    with pytest.raises(KernelInputError, match=argument):
        call()


def test_out_of_range_target_message_says_where():
    with pytest.raises(KernelInputError, match=r"targets: got 9 at row 1.*\[0, 4\)"):
        ce.cross_entropy(torch.randn(3, 4), torch.tensor([0, 9, -100]))


def test_config_space_per_backend():
    cuda, hip = ce.config_space("cuda"), ce.config_space("hip")
    assert cuda and hip and ce.config_space("interpreter")
    assert all("waves_per_eu" not in c for c in cuda)
    assert all(c["waves_per_eu"] in (0, 1, 2) for c in hip)
    for space, size in ((cuda, 12), (hip, 36)):
        assert len(space) == size == len({tuple(sorted(c.items())) for c in space})
        assert {c["BLOCK_V"] for c in space} == {1024, 2048, 4096, 8192}
        assert {c["num_warps"] for c in space} == {4, 8, 16}


def test_counts():
    n, v = 4096, 128256
    fwd, bwd, both = (ce.bytes_moved(n, v, "bf16", p) for p in ("fwd", "bwd", "fwd_bwd"))
    assert fwd == pytest.approx(n * v * 2, rel=1e-3)  # logits read once
    assert bwd == pytest.approx(2 * n * v * 2, rel=1e-3)  # read once, dlogits written once
    assert both == fwd + bwd
    assert ce.flops(n, v, "fwd_bwd") == ce.flops(n, v, "fwd") + ce.flops(n, v, "bwd") > 0


def test_bench_cases():
    quick, full = cases.cross_entropy_cases("quick"), cases.cross_entropy_cases("full")
    assert 0 < len(quick) < len(full) == 6
    shapes = {(c.row["rows"], c.row["cols"]) for c in full}
    assert shapes == {(4096, 128256), (8192, 128256), (16384, 32000)}
    for case in full:
        assert case.row["op"] == case.op in ("cross_entropy", "cross_entropy_fwd_bwd")
        assert case.row["dtype"] == case.dtype == "bf16"
        assert case.tolerance == (1e-3 if case.op == "cross_entropy" else 2e-2)
        assert case.flops > 0 and case.bytes > 0


@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
def test_bench_case_callables_on_a_small_shape(pass_):
    case = cases._cross_entropy_case(6, 1500, "tiny", pass_)
    args = case.make_inputs(str(torch.empty(0).device))  # the default device: CPU, or the GPU
    assert args[0].dtype == torch.bfloat16 and args[0].requires_grad == (pass_ == "fwd_bwd")
    want = case.reference(*args)
    assert rel_err(case.run(*args), want) < case.tolerance
    # torch returns a bf16 loss for bf16 logits: its rounding alone (up to 2^-9) can exceed the 1e-3 tolerance.
    assert rel_err(case.baseline(*args), want) < 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_row_split_over_programs_matches_reference(dtype):
    # SPLIT_V 1024 over V = 3000: three programs a row (the last 952 columns), their partials combined
    logits, targets = make(6, 3000, dtype, seed=11, ignored=(2,))
    logits[4, 1024:2048] = -float("inf")  # a whole split of masked (e.g. padded) vocabulary
    targets[4] = 10
    split = {"BLOCK_V": 512, "num_warps": 4, "SPLIT_V": 1024}
    loss_tol, grad_tol = TOLERANCE[dtype]
    for reduction in ("mean", "sum", "none"):
        want = ce.reference_cross_entropy(logits, targets, reduction=reduction)
        assert rel_err(ce.cross_entropy(logits, targets, reduction=reduction, config=split), want) < loss_tol
    per_row = ce.cross_entropy(logits, targets, reduction="none", config=split)
    assert per_row[2] == 0 and torch.isfinite(per_row).all()
    x = logits.clone().requires_grad_(True)  # inplace_backward: the forward only reads, split; the backward writes
    ce.cross_entropy(x.clone(), targets, config=split, inplace_backward=True).backward()
    want_grad = ce.reference_cross_entropy_grad(logits, targets)
    assert rel_err(x.grad, want_grad) < grad_tol
    with pytest.raises(KernelInputError, match="SPLIT_V"):
        ce.cross_entropy(logits, targets, config={**split, "SPLIT_V": 0})
