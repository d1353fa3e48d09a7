"""The graph's fast constructors (workbench.graph.ops): each makes what its dataclass or ``dataclasses.replace``
makes -- equal, equally hashed, the same repr and the same field order -- without the frozen ``__init__``."""

import dataclasses

import pytest

from workbench.graph.ops import AttentionShape, GemmShape, gemm, gemm_shape, kernel_pass


def _same(fast, slow) -> None:
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert list(fast.__dict__) == list(slow.__dict__)


@pytest.mark.parametrize("m, n, k, groups", [(1, 1, 1, 1), (8192, 4096, 14336, 1), (37, 5, 1024, 8)])
def test_gemm_shape_is_the_dataclass(m, n, k, groups):
    _same(gemm_shape(m, n, k, groups), GemmShape(m, n, k, groups))
    _same(gemm_shape(m, n, k), GemmShape(m, n, k))
    assert gemm("x", m, n, k, "bf16", groups=groups).shape == GemmShape(m, n, k, groups)


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwd_bwd"])
@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_kernel_pass_is_dataclasses_replace(pass_, phase):
    shape = AttentionShape(2, 8192, 32, 8, 128, causal=True, pass_=pass_)
    expected = shape if pass_ == "fwd_bwd" else dataclasses.replace(shape, pass_="fwd" if phase == "fwd" else "bwd")
    _same(kernel_pass(shape, phase), expected)
