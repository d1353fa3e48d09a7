"""The job's layers against torch references: fp8 GEMM, chunked cross-entropy, Triton linear, row-wise Adagrad."""

import pytest
import torch
import torch.nn.functional as F

from workbench.train import layers
from workbench.train.dlrm import RowWiseAdagrad
from workbench.train.layers import ChunkedCrossEntropy, KernelSet, TritonLinear, fp8_matmul, quantize_fp8, swap_linear


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("rowwise", [False, True])
def test_fp8_matmul_is_close_to_bf16(rowwise):
    torch.manual_seed(0)
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    b[:, 0] *= 100  # one large column: per-column scales keep the others precise
    out = fp8_matmul(a, b, rowwise)
    assert out.dtype == torch.bfloat16 and out.shape == (64, 48)
    assert relative_error(out, a @ b) < 0.06  # e4m3 has a 3-bit mantissa: ~2-4% per product, averaged


def test_fp8_scales_map_amax_to_the_e4m3_maximum():
    t = torch.tensor([[1.0, -2.0], [0.5, 0.25]])
    q, inverse = quantize_fp8(t, dim=1)  # per row
    assert inverse.shape == (2, 1)
    assert q.float().abs().amax(dim=1).tolist() == [layers.E4M3_MAX, layers.E4M3_MAX]
    assert torch.allclose(q.float() * inverse, t, rtol=0.07)


def test_chunked_cross_entropy_matches_torch(monkeypatch):
    monkeypatch.setattr(layers, "CE_CHUNK_ELEMENTS", 1000)  # several chunks
    torch.manual_seed(0)
    logits = torch.randn(37, 300, requires_grad=True)
    targets = torch.randint(0, 300, (37,))
    ours = ChunkedCrossEntropy.apply(logits, targets)
    (grad,) = torch.autograd.grad(3 * ours, logits)
    reference = F.cross_entropy(logits.double(), targets)
    (ref_grad,) = torch.autograd.grad(3 * reference, logits)
    assert abs(ours.item() - reference.item()) < 1e-5
    assert relative_error(grad, ref_grad) < 1e-5


def test_triton_linear_matches_torch_in_the_interpreter():
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 48, bias=True)
    ours = swap_linear(linear, TritonLinear, kernels=KernelSet(triton=frozenset({"gemm"})))
    assert ours.weight is linear.weight
    x = torch.randn(2, 8, 32, requires_grad=True)
    y = ours(x)
    grads = torch.autograd.grad(y.square().sum(), (x, linear.weight, linear.bias))
    y_ref = linear(x)
    ref = torch.autograd.grad(y_ref.square().sum(), (x, linear.weight, linear.bias))
    assert relative_error(y, y_ref) < 1e-5
    for g, r in zip(grads, ref):
        assert relative_error(g, r) < 1e-5


def test_triton_linear_gives_vendor_shapes_to_torch(monkeypatch):
    """The recipe's per-shape shim: a GEMM shape marked vendor runs torch's matmul, the others Triton's."""
    import workbench.kernels.gemm as gemm

    calls = []
    real = gemm.matmul
    monkeypatch.setattr(gemm, "matmul", lambda a, b, **kw: calls.append((a.shape[0], b.shape[1], a.shape[1]))
                        or real(a, b, **kw))
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 48, bias=False)
    # x: [16, 32]: forward 16x48x32 (vendor), dgrad 16x32x48 (Triton), wgrad 48x32x16 listed as 32x48x16 (vendor)
    vendor = frozenset({(("k", 32), ("m", 16), ("n", 48)), (("k", 16), ("m", 32), ("n", 48))})
    ours = swap_linear(linear, TritonLinear, kernels=KernelSet(triton=frozenset({"gemm"}), gemm_vendor=vendor))
    x = torch.randn(16, 32, requires_grad=True)
    y = ours(x)
    grads = torch.autograd.grad(y.square().sum(), (x, linear.weight))
    assert calls == [(16, 32, 48)]  # only the dgrad GEMM ran on Triton
    ref = torch.autograd.grad(linear(x).square().sum(), (x, linear.weight))
    assert relative_error(y, linear(x)) < 1e-5
    for g, r in zip(grads, ref):
        assert relative_error(g, r) < 1e-5


def test_rowwise_adagrad_sparse_and_dense_agree():
    torch.manual_seed(0)
    initial = torch.randn(10, 4)
    indices, offsets = torch.tensor([1, 3, 3, 7]), torch.tensor([0, 2, 4])  # row 3 twice: gradients add up
    updated = []
    for sparse in (True, False):
        table = torch.nn.Parameter(initial.clone())
        out = F.embedding_bag(indices, table, offsets, mode="sum", sparse=sparse, include_last_offset=True)
        out.square().sum().backward()
        assert table.grad.is_sparse == sparse
        optimizer = RowWiseAdagrad([table], lr=0.1)
        optimizer.step()
        assert optimizer.state[table]["sum"].shape == (10,)
        updated.append(table.detach())
    assert torch.allclose(updated[0], updated[1], atol=1e-6)
    touched = torch.zeros(10, dtype=torch.bool)
    touched[indices] = True
    assert torch.equal(updated[0][~touched], initial[~touched])
    assert not torch.allclose(updated[0][touched], initial[touched])


def test_rms_norm_and_swiglu_functions_match_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 32, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(32, dtype=torch.float64, requires_grad=True)
    ours = layers.RMSNormFunction.apply(x, weight, 1e-5)
    ref = F.rms_norm(x, (32,), weight, 1e-5)
    dy = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(ours, (x, weight), dy), torch.autograd.grad(ref, (x, weight), dy)):
        assert relative_error(a, b) < 1e-6
    assert relative_error(ours, ref) < 1e-6
    gate_up = torch.randn(4, 2, 64, dtype=torch.float64, requires_grad=True)
    ours = layers.SwiGLUFunction.apply(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    ref = F.silu(gate) * up
    dout = torch.randn_like(ref)
    assert relative_error(ours, ref) < 1e-12
    assert relative_error(torch.autograd.grad(ours, gate_up, dout)[0], torch.autograd.grad(ref, gate_up, dout)[0]) < 1e-6
