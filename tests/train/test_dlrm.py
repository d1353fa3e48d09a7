"""The DLRM job's fused table update (embedding-bag backward + row-wise Adagrad in one pass) against torch's way
(sparse gradient with one row per lookup, coalesce, update): same tables, accumulators and dense weights after
training steps, with gradient accumulation."""

import pytest
import torch

from workbench.models import get_model
from workbench.train.data import RecsysBatches
from workbench.train.dlrm import DLRM, RowWiseAdagrad
from workbench.train.layers import KernelSet


def train_steps(fused: bool, steps: int = 2, accum: int = 2, rows: int = 60):
    torch.manual_seed(0)
    m = get_model("dlrm-dcnv2")
    model = DLRM(m, KernelSet(), max_table_rows=rows, fused_update=fused)
    model.init_weights()
    dense = [p for name, p in model.named_parameters() if name != "weight"]
    optimizers = [torch.optim.SGD(dense, lr=0.01), RowWiseAdagrad([model.weight], lr=0.05)]
    data = RecsysBatches(16, m.num_dense_features, model.table_rows, tuple(t.pooling for t in m.tables),
                         torch.device("cpu"), seed=3)
    for _ in range(steps):
        for _ in range(accum):
            (model(*data.next()) / accum).backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
    return model, optimizers[1].state[model.weight].get("sum")


def test_fused_table_update_matches_torch_sparse_path():
    fused, fused_acc = train_steps(fused=True)
    ref, ref_acc = train_steps(fused=False)
    assert fused.weight.grad is None and fused.weight.pooled_grads == []  # consumed by the step, no gradient
    torch.testing.assert_close(fused_acc, ref_acc, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(fused.weight.detach(), ref.weight.detach(), rtol=1e-5, atol=1e-7)
    for (name, a), b in zip(fused.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6, msg=name)
    initial, _ = train_steps(fused=True, steps=0)
    changed = (fused.weight != initial.weight).any(1)
    assert 0 < int(changed.sum()) < len(changed)  # some rows looked up and moved, the others untouched


def test_fused_update_would_catch_a_dropped_micro_batch():
    """Gradient accumulation matters: updating from the last micro-batch only gives other tables."""
    fused, _ = train_steps(fused=True, steps=1, accum=2)
    single, _ = train_steps(fused=True, steps=1, accum=1)
    assert not torch.allclose(fused.weight, single.weight, rtol=1e-5)


@pytest.mark.parametrize("accum", [1, 3])
def test_merge_pooled_grads_concatenates_bags(accum):
    from workbench.train.dlrm import merge_pooled_grads

    parts = [(torch.tensor([1, 2, 2][: k + 1]), torch.tensor([0, k + 1]), torch.full((1, 4), float(k)))
             for k in range(accum)]
    indices, offsets, grad = merge_pooled_grads(parts)
    assert indices.tolist() == [i for p in parts for i in p[0].tolist()]
    assert offsets.tolist() == [0, *torch.tensor([len(p[0]) for p in parts]).cumsum(0).tolist()]
    assert grad.shape == (accum, 4)
