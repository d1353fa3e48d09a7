"""Embedding bag (sum) kernel against torch's float64 embedding_bag and its autograd (CPU, Triton interpreter)."""

import pytest
import torch

from workbench.kernels import cases
from workbench.kernels import embedding_bag as eb
from workbench.kernels._common import KernelInputError

# BLOCK_D 32 with D = 70: three D-blocks, the last one partly masked.
SMALL = {"BLOCK_D": 32, "num_warps": 1}
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # output rounding in the weight dtype


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def make_bags(num_rows: int = 50, dim: int = 70, dtype: torch.dtype = torch.float32, seed: int = 0):
    """Bags: empty first, a repeated row, empty middle, a 40-lookup bag (> BLOCK_N), a singleton, empty last."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(num_rows, dim, generator=g).to(dtype)
    bags = [[], [3, 3, 3, 7], [], [1, 1, 49, 0, 3], torch.randint(0, num_rows, (40,), generator=g).tolist(), [3],
            []]
    indices = torch.tensor([i for bag in bags for i in bag], dtype=torch.long)
    offsets = torch.tensor([0] + [len(bag) for bag in bags]).cumsum(0)
    sample_weights = torch.randn(len(indices), generator=g).to(dtype)
    return weight, indices, offsets, sample_weights


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_forward_and_backward_match_torch(dtype, weighted):
    weight, indices, offsets, psw = make_bags(dtype=dtype, seed=int(weighted))
    psw = psw if weighted else None
    w = weight.clone().requires_grad_(True)
    p = None if psw is None else psw.clone().requires_grad_(True)
    out = eb.embedding_bag(w, indices, offsets, p, config=SMALL)
    assert out.shape == (len(offsets) - 1, weight.shape[1]) and out.dtype == dtype
    assert rel_err(out, eb.reference_embedding_bag(weight, indices, offsets, psw)) < TOLERANCE[dtype]
    assert torch.all(out[[0, 2, 6]] == 0)  # empty bags

    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    out.backward(grad_out)
    # torch's own autograd in float64 (rows 3 and 1 repeat within and across bags: atomics must add them all).
    w64 = weight.double().requires_grad_(True)
    p64 = None if psw is None else psw.double().requires_grad_(True)
    torch.nn.functional.embedding_bag(indices, w64, offsets, mode="sum", include_last_offset=True,
                                      per_sample_weights=p64).backward(grad_out.double())
    assert w.grad.dtype == dtype
    assert rel_err(w.grad, w64.grad) < TOLERANCE[dtype]
    assert rel_err(w.grad, eb.reference_embedding_bag_grad(weight, indices, offsets, grad_out, psw)) < TOLERANCE[dtype]
    if weighted:
        assert p.grad.dtype == dtype
        assert rel_err(p.grad, p64.grad) < TOLERANCE[dtype]


def test_default_config_int32_indices_and_strided_weight():
    wide, indices, offsets, _ = make_bags(dim=2 * 70, seed=2)
    wide.requires_grad_(True)
    weight = wide[:, ::2]  # column stride 2: the wrapper makes a contiguous copy
    out = eb.embedding_bag(weight, indices.int(), offsets.int())
    assert rel_err(out, eb.reference_embedding_bag(weight, indices, offsets)) < 1e-5
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    assert torch.all(wide.grad[:, 1::2] == 0)
    assert rel_err(wide.grad[:, ::2], eb.reference_embedding_bag_grad(weight, indices, offsets, grad_out)) < 1e-5


def test_one_row_looked_up_many_times():
    """Every lookup hits row 2: the backward's atomics add 3 x 20 contributions to one row."""
    weight = torch.randn(4, 33).requires_grad_(True)
    indices = torch.full((60,), 2)
    offsets = torch.tensor([0, 20, 40, 60])
    out = eb.embedding_bag(weight, indices, offsets, config=SMALL)
    assert torch.allclose(out, 20 * weight[2].detach().expand(3, 33), rtol=1e-6)
    out.sum().backward()
    expected = torch.zeros(4, 33)
    expected[2] = 60
    assert torch.equal(weight.grad, expected)


def test_all_bags_empty_and_no_bags():
    weight = torch.randn(5, 8).requires_grad_(True)
    out = eb.embedding_bag(weight, torch.zeros(0, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    assert out.shape == (3, 8) and torch.all(out == 0)
    out.sum().backward()
    assert torch.all(weight.grad == 0)
    none = eb.embedding_bag(weight, torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long))
    assert none.shape == (0, 8)


LONG = dict(dtype=torch.long)


@pytest.mark.parametrize("args, argument", [
    ((torch.randn(10), torch.tensor([0]), torch.tensor([0, 1])), "weight"),
    ((torch.randn(5, 4).double(), torch.tensor([0]), torch.tensor([0, 1])), "weight"),
    ((torch.randn(5, 4), torch.tensor([[0]]), torch.tensor([0, 1])), "indices"),
    ((torch.randn(5, 4), torch.tensor([0.0]), torch.tensor([0, 1])), "indices"),
    ((torch.randn(5, 4), torch.tensor([0]), torch.tensor([0.0, 1.0])), "offsets"),
    ((torch.randn(5, 4), torch.tensor([0]), torch.zeros(0, **LONG)), "offsets"),
    ((torch.randn(5, 4), torch.tensor([0, 1]), torch.tensor([1, 2])), r"offsets\[0\] = 1"),
    ((torch.randn(5, 4), torch.tensor([0, 1]), torch.tensor([0, 1])), r"offsets\[-1\] = 1.*len\(indices\) = 2"),
    ((torch.randn(5, 4), torch.tensor([0, 1, 2]), torch.tensor([0, 2, 1, 3])), "offsets.*non-decreasing"),
    ((torch.randn(5, 4), torch.tensor([0, 5]), torch.tensor([0, 2])), "indices: got 5 at position 1"),
    ((torch.randn(5, 4), torch.tensor([-1, 0]), torch.tensor([0, 2])), "indices: got -1 at position 0"),
    ((torch.randn(5, 4), torch.tensor([0, 1]), torch.tensor([0, 2]), torch.randn(3)), "per_sample_weights"),
    ((torch.randn(5, 4), torch.tensor([0, 1]), torch.tensor([0, 2]), torch.ones(2, **LONG)), "per_sample_weights"),
    ((torch.randn(5, 4), torch.tensor([0, 1], device="meta"), torch.tensor([0, 2])), "device"),
])
def test_bad_inputs_name_the_argument(args, argument):
    with pytest.raises(KernelInputError, match=argument):
        eb.embedding_bag(*args)


@pytest.mark.parametrize("config, argument", [
    ({"BLOCK_D": 48}, "BLOCK_D"), ({"BLOCK_D": 32, "BLOCK_N": 3}, "BLOCK_N"), ({"BLOCK_D": 32, "BLOCK_M": 4}, "config"),
])
def test_bad_config(config, argument):
    weight, indices, offsets, _ = make_bags()
    with pytest.raises(KernelInputError, match=argument):
        eb.embedding_bag(weight, indices, offsets, config=config)


def test_config_space_per_backend():
    cuda, hip = eb.config_space("cuda"), eb.config_space("hip")
    assert cuda and hip and eb.config_space("interpreter")
    assert all("waves_per_eu" not in c for c in cuda)
    assert all(c["waves_per_eu"] in (0, 1, 2) for c in hip)
    for space, size in ((cuda, 16), (hip, 48)):
        assert len(space) == size == len({tuple(sorted(c.items())) for c in space})
        assert {c["BLOCK_D"] for c in space} == {32, 64, 128, 256}
        assert {c["num_warps"] for c in space} == {1, 2, 4, 8}
    with pytest.raises(KernelInputError, match="backend"):
        eb.config_space("tpu")


def test_counts():
    lookups, bags, dim = 65536 * 8, 65536, 128
    gathered, written = lookups * dim * 4, bags * dim * 4
    fwd = eb.bytes_moved(lookups, bags, dim, "fp32", "fwd")
    assert gathered + written < fwd < 1.1 * (gathered + written)  # + indices and offsets
    bwd = eb.bytes_moved(lookups, bags, dim, "fp32", "bwd", num_rows=4 << 20)
    assert bwd > 2 * gathered + (4 << 20) * dim * 4  # atomic read-modify-write + dense zero-fill
    assert eb.flops(lookups, dim) == lookups * dim
    assert eb.flops(lookups, dim, "fwd_bwd", weighted=True) == 4 * lookups * dim


def test_bench_cases():
    quick, full = cases.embedding_bag_cases("quick"), cases.embedding_bag_cases("full")
    assert len(quick) == 2 and len(full) == 6
    assert {c.row["pooling"] for c in full} == {1, 8, 100}
    for case in full:
        assert case.row["op"] == case.op in ("embedding_bag", "embedding_bag_fwd_bwd")
        assert case.row["rows"] == 65536 * case.row["pooling"] and case.row["cols"] == 128
        assert case.row["dtype"] == case.dtype == "fp32" and case.tolerance == 1e-5
        assert case.flops > 0 and case.bytes > 0
    with pytest.raises(KernelInputError, match="suite"):
        cases.embedding_bag_cases("everything")


@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
def test_bench_case_callables_on_a_small_table(monkeypatch, pass_):
    monkeypatch.setattr(cases, "DLRM_ROWS", 26 * 8)
    monkeypatch.setattr(cases, "DLRM_DIM", 40)
    monkeypatch.setattr(cases, "DLRM_BATCH", 30)
    case = cases._embedding_bag_case(5, pass_)
    args = case.make_inputs(str(torch.empty(0).device))  # the default device: CPU, or the GPU
    weight, indices, offsets = args[:3]
    assert indices.shape == (150,) and offsets[-1] == 150
    assert torch.all(indices // 8 == (torch.arange(30) % 26).repeat_interleave(5))  # bag b reads table b % 26
    want = case.reference(*args)
    assert rel_err(case.run(*args), want) < case.tolerance
    assert rel_err(case.baseline(*args), want) < case.tolerance


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_no_grad_path_matches_the_autograd_path(weighted):
    """Without a gradient to track the wrapper skips autograd (host time); the result must not change."""
    weight, indices, offsets, psw = make_bags(seed=3)
    psw = psw if weighted else None
    direct = eb.embedding_bag(weight, indices, offsets, psw, config=SMALL)
    tracked = eb.embedding_bag(weight.clone().requires_grad_(True), indices, offsets, psw, config=SMALL)
    with torch.no_grad():
        under_no_grad = eb.embedding_bag(weight.clone().requires_grad_(True), indices, offsets, psw, config=SMALL)
    assert direct.grad_fn is None and under_no_grad.grad_fn is None and tracked.grad_fn is not None
    assert torch.equal(direct, tracked.detach()) and torch.equal(direct, under_no_grad)
