"""perf.attention: the SDPA backend an op names picks its fractions; untagged ops keep the generic ones."""

import dataclasses

import pytest

from workbench.graph.ops import AttentionShape, attention
from workbench.hardware import get_gpu
from workbench.perf.attention import attention_time
from workbench.perf.efficiency import default_constants

H100 = get_gpu("h100-sxm")
SHAPE = AttentionShape(1, 32768, 32, 8, 128, causal=True)


def _tagged(op, backend):
    return dataclasses.replace(op, extra={**op.extra, "sdpa_backend": backend})


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_flash2_runs_at_its_sourced_fraction(phase):
    c = default_constants(H100)
    op = attention(f"attention.{phase}", SHAPE, "bf16", phase=phase)
    generic, _ = attention_time(op, H100, c)
    flash2, _ = attention_time(_tagged(op, "flash2"), H100, c)
    launch = c["attention_launch_us"] * 1e-6
    ratio = c[f"attention_{phase}_fraction"] / c[f"attention_{phase}_fraction.flash2"]
    assert (flash2 - launch) == pytest.approx((generic - launch) * ratio, rel=1e-9)
    # FA2 at 16k on an H100 SXM5 (FlashAttention-3 paper): 335 TFLOP/s forward causal, 322 backward
    achieved = op.flops / (flash2 - launch) / 1e12
    assert achieved == pytest.approx(335 if phase == "fwd" else 322, rel=0.02)


def test_an_unknown_backend_is_an_error_naming_the_known_ones():
    op = _tagged(attention("attention.fwd", SHAPE, "bf16", phase="fwd"), "flash9")
    with pytest.raises(ValueError, match="flash2"):
        attention_time(op, H100, default_constants(H100))


@pytest.mark.parametrize("window", [0, 4096])  # the plain kernel (ops.attention) and the windowed one
def test_a_recomputed_forward_keeps_the_forwards_rate_and_the_backward_its_own(window):
    """The rate follows the kernel's pass (``graph.ops.kernel_pass``), not the phase it runs in: a forward copied
    into the backward (activation checkpointing) is priced as the forward, every backward op at the backward's."""
    from workbench.graph.ops import replace_op
    from workbench.graph.transformer import attention_op

    c = default_constants(H100)
    fwd, bwd = (attention_op(f"attention.{p}", SHAPE, "bf16", phase=p, v_dim=SHAPE.head_dim, window=window,
                             window_kind="sliding", count=1, layer="attention") for p in ("fwd", "bwd"))
    recomputed = replace_op(fwd, name="recompute.attention.fwd", phase="bwd")
    assert attention_time(recomputed, H100, c) == attention_time(fwd, H100, c)
    launch = c["attention_launch_us"] * 1e-6
    ratio = (attention_time(bwd, H100, c)[0] - launch) / (attention_time(fwd, H100, c)[0] - launch)
    assert ratio == pytest.approx(bwd.flops / fwd.flops * c["attention_fwd_fraction"] / c["attention_bwd_fraction"],
                                  rel=1e-9)
