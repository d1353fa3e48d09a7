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


def _fp8_linear_grads(x: torch.Tensor, dy: torch.Tensor, weight: torch.Tensor):
    """(y, dx, dw) of a rowwise Float8Linear and of a float64 reference."""
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    fp8 = swap_linear(linear, layers.Float8Linear, recipe="rowwise")
    xq = x.clone().requires_grad_()
    y = fp8(xq)
    y.backward(dy)
    xr, wr = x.double().requires_grad_(), weight.double().requires_grad_()
    yr = xr @ wr.t()
    yr.backward(dy.double())
    return (y, xq.grad, linear.weight.grad), (yr, xr.grad, wr.grad)


@pytest.mark.parametrize("gemm", ["forward", "dgrad", "wgrad"])
def test_fp8_linear_scales_each_gemm_along_its_own_reduction_dimension(gemm):
    """Rowwise fp8 gives each row of A and column of B its own scale along the GEMM's K (hidden in the forward,
    output features in dgrad, tokens in wgrad). An outlier 1e6 times larger than the rest along A's rows or B's
    columns is then harmless, but would flush the other values of a scale taken along the wrong axis to zero
    (e4m3 spans ~2e5): forward -- one token of x; dgrad -- one token of dy; wgrad -- one output feature of dy and
    one input feature of x."""
    torch.manual_seed(0)
    x, dy, weight = torch.randn(64, 32), torch.randn(64, 48), torch.randn(48, 32) * 0.1
    token, out_feature, in_feature = 7, 5, 3
    if gemm == "forward":
        x[token] *= 1e6
    elif gemm == "dgrad":
        dy[token] *= 1e6
    else:
        dy[:, out_feature] *= 1e6
        x[:, in_feature] *= 1e6
    (y, dx, dw), (yr, dxr, dwr) = _fp8_linear_grads(x, dy, weight)
    rows = [m for m in range(64) if m != token]
    if gemm == "forward":
        assert relative_error(y[rows], yr[rows]) < 0.06
    elif gemm == "dgrad":
        assert relative_error(dx[rows], dxr[rows]) < 0.06
    else:
        outs, ins = [n for n in range(48) if n != out_feature], [k for k in range(32) if k != in_feature]
        assert relative_error(dw[outs][:, ins], dwr[outs][:, ins]) < 0.06


def test_fp8_emulate_skips_the_triton_gemm_even_where_it_could_run(monkeypatch):
    from workbench.kernels import dispatch

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the Triton GEMM is usable on this CPU tensor now
    calls = []
    monkeypatch.setattr(dispatch, "triton_scaled_matmul", lambda *args, **kw: calls.append(1) or torch.zeros(
        args[0].shape[0], args[1].shape[1], dtype=torch.bfloat16))
    torch.manual_seed(0)
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    emulated = fp8_matmul(a, b, True, emulate=True)
    assert not calls and relative_error(emulated, a @ b) < 0.06
    fp8_matmul(a, b, True)
    assert len(calls) == 1
    linear = swap_linear(torch.nn.Linear(32, 8, bias=False), layers.Float8Linear, recipe="rowwise", emulate=True)
    linear(a.requires_grad_()).sum().backward()  # forward, dgrad and wgrad
    assert len(calls) == 1


def _gw_hp_grads(x: torch.Tensor, dy: torch.Tensor, weight: torch.Tensor, recipe: str = "rowwise_with_gw_hp",
                 kernels: KernelSet | None = None):
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    fp8 = swap_linear(linear, layers.Float8Linear, recipe=recipe, emulate=True, kernels=kernels)
    xq = x.clone().requires_grad_()
    fp8(xq).backward(dy)
    return xq.grad, linear.weight.grad


def test_rowwise_with_gw_hp_computes_wgrad_in_bf16_and_dgrad_in_fp8():
    """torchao's ROWWISE_WITH_GW_HP: wgrad is the bf16 product dy^T x (bit for bit), dgrad is fp8 with dy per row
    and the weight per tensor (bit for bit that fp8 product, so not the bf16 one)."""
    torch.manual_seed(0)
    x, dy, weight = torch.randn(64, 32), torch.randn(64, 48), torch.randn(48, 32) * 0.1
    dx, dw = _gw_hp_grads(x, dy, weight)
    xb, dyb, wb = x.bfloat16(), dy.bfloat16(), weight.bfloat16()
    assert torch.equal(dw, (dyb.t() @ xb).float())  # the weight's grad, in its fp32 dtype
    assert torch.equal(dx, fp8_matmul(dyb, wb, True, emulate=True, b_rowwise=False).float())
    bf16_dx = (dyb @ wb).float()
    assert not torch.equal(dx, bf16_dx) and relative_error(dx, bf16_dx) < 0.06
    _, dw_rowwise = _gw_hp_grads(x, dy, weight, recipe="rowwise")  # the all-fp8 recipe: wgrad quantized
    assert relative_error(dw_rowwise, dyb.t().float() @ xb.float()) > 10 * relative_error(dw, dyb.t().float() @ xb.float())


def test_rowwise_with_gw_hp_wgrad_runs_the_triton_gemm_where_the_kernel_set_says_so(monkeypatch):
    from workbench.kernels import dispatch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = []
    monkeypatch.setattr(dispatch, "triton_matmul", lambda a, b, **kw: calls.append(tuple(a.shape)) or a.float() @ b.float())
    torch.manual_seed(0)
    x, dy, weight = torch.randn(16, 32), torch.randn(16, 8), torch.randn(8, 32)
    _gw_hp_grads(x, dy, weight, kernels=KernelSet(triton=frozenset({"gemm"})))
    assert calls == [(8, 16)]  # wgrad dy^T [N, M] @ x [M, K] only; forward and dgrad stay fp8 (emulated)
    _gw_hp_grads(x, dy, weight, kernels=KernelSet())
    assert calls == [(8, 16)]  # no Triton GEMM chosen: torch's matmul


def test_mixed_scaling_is_per_row_of_a_and_per_tensor_of_b():
    torch.manual_seed(0)
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    b[:, 0] *= 1e6  # a per-tensor scale of b flushes the other columns to zero (e4m3 spans ~2e5)
    mixed = fp8_matmul(a, b, True, emulate=True, b_rowwise=False)
    rowwise = fp8_matmul(a, b, True, emulate=True)
    exact = a @ b
    assert relative_error(rowwise[:, 1:], exact[:, 1:]) < 0.06 < relative_error(mixed[:, 1:], exact[:, 1:])


def test_unknown_fp8_recipe_lists_the_accepted_ones():
    with pytest.raises(ValueError, match="tensorwise, rowwise, rowwise_with_gw_hp"):
        layers.fp8_linear_recipe("delayed")
    linear = swap_linear(torch.nn.Linear(8, 8, bias=False), layers.Float8Linear, recipe="rowwise_gw")
    with pytest.raises(ValueError, match="rowwise_gw"):
        linear(torch.randn(2, 8))


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_chunked_cross_entropy_matches_the_eager_one(monkeypatch, dtype):
    monkeypatch.setattr(layers, "CE_CHUNK_ELEMENTS", 1000)  # several full chunks and a shorter last one
    torch.manual_seed(0)
    logits = (3 * torch.randn(37, 300)).to(dtype).requires_grad_()
    targets = torch.randint(0, 300, (37,))
    results = []
    for compiled in (False, True):
        loss = ChunkedCrossEntropy.apply(logits, targets, compiled)
        (grad,) = torch.autograd.grad(3 * loss, logits)
        assert grad.dtype == dtype
        results.append((loss.item(), grad))
    (eager, eager_grad), (ours, grad) = results
    assert abs(ours - eager) < 1e-5
    assert relative_error(grad, eager_grad) < (1e-5 if dtype == torch.float32 else 1e-2)
    assert set(layers._COMPILED_CE) == {"lse", "grad"}  # the compiled path ran
    assert KernelSet(compile_loss=True).cross_entropy(logits, targets).item() == pytest.approx(ours, abs=1e-6)


def test_memory_model_counts_the_loss_chunk_this_loss_uses():
    from workbench.memory import LOSS_CHUNK_ELEMENTS

    assert LOSS_CHUNK_ELEMENTS == layers.CE_CHUNK_ELEMENTS


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
    from workbench.kernels import dispatch

    calls = []
    real = dispatch.triton_matmul
    monkeypatch.setattr(dispatch, "triton_matmul", lambda a, b, **kw: calls.append((a.shape[0], b.shape[1], a.shape[1]))
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


def test_triton_fp8_gemm_takes_a_row_scaled_a_with_a_tensor_scaled_b(monkeypatch):
    """rowwise_with_gw_hp's dgrad (dy per row, W per tensor) through the Triton GEMM (interpreted here) rounds like
    its emulation, as the all-rowwise and all-tensorwise products do."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    a, b = torch.randn(64, 32).bfloat16(), torch.randn(32, 48).bfloat16()
    for rowwise, b_rowwise in ((True, False), (True, True), (False, False)):
        triton = fp8_matmul(a, b, rowwise, b_rowwise=b_rowwise)
        emulated = fp8_matmul(a, b, rowwise, emulate=True, b_rowwise=b_rowwise)
        assert relative_error(triton, emulated) < 0.01, (rowwise, b_rowwise)
