"""Fused embedding-bag backward + row-wise Adagrad against the straightforward float64 torch reference (sparse
gradient, coalesce, update): the Triton kernel (CPU interpreter, or a GPU) and the torch fallback."""

import pytest
import torch

from workbench.kernels import rowwise_adagrad as ra


def make_case(num_rows=40, dim=70, bags=9, seed=0):
    """Bags with a row repeated inside one bag and across bags, a hot row (> BLOCK_N lookups), empty bags."""
    with torch.device("cpu"):  # the case and its reference on the CPU; the kernel runs on device()
        g = torch.Generator(device="cpu").manual_seed(seed)  # Generator() follows the default device, not the context
        lists = [[], [3, 3, 3, 7], [1, 1, 39, 0, 3], [5] * 37, torch.randint(0, num_rows, (25,), generator=g).tolist(),
                 [3], [], [5, 2], torch.randint(0, num_rows, (12,), generator=g).tolist()][:bags]
        indices = torch.tensor([i for bag in lists for i in bag], dtype=torch.long)
        offsets = torch.tensor([0] + [len(bag) for bag in lists]).cumsum(0)
        weight = torch.randn(num_rows, dim, generator=g)
        acc = torch.rand(num_rows, generator=g)  # a state from earlier steps
        grad_out = torch.randn(len(lists), dim, generator=g)
    return weight, acc, grad_out, indices, offsets


def device():
    return torch.get_default_device()  # the GPU when the conftest runs the tests there


@pytest.mark.parametrize("use_triton", [True, False], ids=["triton", "torch"])
@pytest.mark.parametrize("config", [None, {"BLOCK_R": 4, "SHORT": 2, "BLOCK_N": 4, "num_warps": 1}], ids=["default", "small"])
def test_fused_update_matches_the_sparse_reference(use_triton, config):
    weight, acc, grad_out, indices, offsets = make_case()
    with torch.device("cpu"):  # the reference on the CPU whatever the default device
        want_w, want_acc = ra.reference_rowwise_adagrad(weight, acc, grad_out, indices, offsets, lr=0.05, eps=1e-8)
    w, a = weight.clone().to(device()), acc.clone().to(device())
    ra.rowwise_adagrad_update(w, a, grad_out.to(device()), indices.to(device()), offsets.to(device()), 0.05, 1e-8,
                              config, use_triton=use_triton)
    torch.testing.assert_close(a.cpu().double(), want_acc, rtol=1e-6, atol=0)
    torch.testing.assert_close(w.cpu().double(), want_w, rtol=1e-6, atol=1e-7)
    touched = torch.zeros(len(weight), dtype=torch.bool, device="cpu")
    touched[indices] = True
    assert torch.equal(w.cpu()[~touched], weight[~touched]) and torch.equal(a.cpu()[~touched], acc[~touched])
    assert not torch.allclose(w.cpu()[touched], weight[touched])


def test_a_wrong_update_is_caught():
    """The tolerance above rejects the classic mistakes: per-lookup (not per-row) accumulation, and the row's
    update from the accumulator before this step's increment."""
    weight, acc, grad_out, indices, offsets = make_case()
    with torch.device("cpu"):  # the case's tensors are the CPU's whatever the default device
        want_w, want_acc = ra.reference_rowwise_adagrad(weight, acc, grad_out, indices, offsets, lr=0.05)
        per_lookup = grad_out.double()[torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets.diff())]
        wrong_acc = acc.double().clone().index_add_(0, indices, per_lookup.square().mean(1))  # sum of squares
        assert not torch.allclose(wrong_acc, want_acc, rtol=1e-6)
        g = torch.zeros_like(want_w).index_add_(0, indices, per_lookup)
        stale = weight.double() - 0.05 * g / (acc.double().sqrt() + 1e-8).unsqueeze(1)
        assert not torch.allclose(stale, want_w, rtol=1e-6)


def test_segments_group_lookups_by_row():
    _, _, _, indices, offsets = make_case()
    with torch.device("cpu"):  # the case's tensors are the CPU's whatever the default device
        rows, segments, bags = ra.segment_by_row(indices, offsets, 40)
        bag_of_lookup = torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets.diff())
    assert torch.equal(rows, torch.unique(indices).to(rows.dtype))
    assert int(segments[-1]) == len(indices) and torch.all(segments.diff() > 0)
    for u, row in enumerate(rows.tolist()):  # the bags of row u's lookups, as a multiset
        got = sorted(bags[segments[u]:segments[u + 1]].tolist())
        assert got == sorted(bag_of_lookup[indices == row].tolist())


def test_bytes_moved_counts_rows_once():
    assert ra.bytes_moved(lookups=10, rows=4, dim=128) == 10 * (8 + 512) + 4 * (20 + 1024)
