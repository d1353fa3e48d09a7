"""generative-recommenders' HSTU step memory (``workbench.stack_memory_hstu``): the H200 rows, and a CPU replay of
upstream's autograd Functions (Triton kernels replaced by torch ops allocating the same outputs) counting every live
tensor."""

from __future__ import annotations

import dataclasses
import sys
import weakref
from pathlib import Path

import pytest

from workbench import predict
from workbench.memory import FRAMEWORK_OVERHEAD_GB, GB
from workbench.models import get_model
from workbench.stack_memory_hstu import BOOL, FP32, hstu_gr_peak

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "train"

# benchmarks/results/h200/train/hstu_second/rows.jsonl (B64, B32) and hstu_first/rows.jsonl (B128 x S1024):
# torch.cuda.max_memory_allocated / max_memory_reserved of the step, table cut to 10M rows
H200_ROWS = {(64, 2048): (29_579_232_256, 31_555_846_144), (32, 2048): (25_300_146_688, 26_369_589_248),
             (128, 1024): (29_572_426_752, 31_534_874_624)}


def bench_model():
    return dataclasses.replace(get_model("hstu-gr"), name="hstu-gr-bench", item_table_rows=10_000_000)


@pytest.mark.parametrize("batch,seq_len", sorted(H200_ROWS))
def test_h200_rows_within_10_percent(batch, seq_len):
    allocated, reserved = H200_ROWS[(batch, seq_len)]
    memory = predict(bench_model(), "h200", stack="generative-recommenders", micro_batch=batch, seq_len=seq_len,
                     precision="bf16").summary.memory
    live = memory.total - memory.workspace
    assert abs(live / allocated - 1) < 0.10
    assert abs(memory.total / reserved - 1) < 0.10
    assert memory.workspace == FRAMEWORK_OVERHEAD_GB * GB


def test_peak_is_the_normalize_backward_at_the_run_shapes():
    peak = hstu_gr_peak(bench_model())
    assert peak.at == "normalize backward"
    assert peak.layer_saved == 2 * (512 + 2 * 512) + 16  # x, attn, silu(u); two norms' fp32 mean and rstd
    assert peak.per_token == 65_296  # the H200 slope between B32 and B64 at S 2048: 65,293 bytes per token


def test_ideal_stack_keeps_the_fused_step_model():
    ideal = predict(bench_model(), "h200", stack="ideal", micro_batch=64, seq_len=2048, precision="bf16")
    assert ideal.summary.memory.total / GB == pytest.approx(51.18, abs=0.01)


# --- the CPU replay -------------------------------------------------------------------------------------------

class LiveBytes:
    """A dispatch mode counting the bytes of every live CPU storage an op made (weakrefs on the storages)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker.add(out)
                return out

        self.mode, self.live, self.now, self.peak = Mode(), {}, 0, 0

    def add(self, out):
        import torch
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            for part in ((t._values(), t._indices()) if t.is_sparse else (t,)):
                storage = part.untyped_storage()
                ptr, size = storage.data_ptr(), storage.nbytes()
                if ptr and size and ptr not in self.live:
                    self.live[ptr] = size
                    self.now += size
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self.free, ptr)

    def free(self, ptr):
        self.now -= self.live.pop(ptr, 0)


def stub_triton_kernels(monkeypatch):
    """Upstream's Triton kernels as torch ops allocating the same outputs (values unused)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if str(BENCH) not in sys.path:
        monkeypatch.syspath_prepend(str(BENCH))
    import hstu_step  # noqa: F401  (puts hstu_vendor/ on the path)
    from generative_recommenders.ops.triton import triton_hstu_linear as linear
    from generative_recommenders.ops.triton import triton_hstu_preprocess_and_attention as fused

    def norm_fwd(x, weight, bias, eps, mean=None, rstd=None):
        return torch.empty_like(x), torch.empty(x.shape[0]), torch.empty(x.shape[0])

    def norm_bwd(dy, x, weight, bias, mean, rstd, learnable, eps, BLOCK_D):
        return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias)

    def addmm(x, w, y):
        return torch.empty(x.shape[0], w.shape[1], dtype=x.dtype)

    def ln_mul_dropout_fwd(x, u, weight, bias, eps, dropout_ratio, training, silu_u=False, concat_u=False,
                           concat_x=False, seed=None, **_):
        n, width = x.shape  # y = cat(u, attn, norm(attn) * u); no mask below sm100
        return (torch.empty(n, 3 * width, dtype=x.dtype), torch.empty(n), torch.empty(n), 64, 4, 0,
                torch.empty(0, dtype=x.dtype))

    def ln_mul_dropout_bwd(dy, x, u, weight, bias, mean, rstd, *_, compute_y=False, **__):
        y = torch.empty(x.shape[0], 3 * x.shape[1], dtype=x.dtype) if compute_y else None
        return torch.empty_like(x), torch.empty_like(u), torch.empty_like(weight), torch.empty_like(bias), y

    for name, fn in [("triton_weighted_layer_norm_fwd", norm_fwd), ("triton_weighted_layer_norm_bwd", norm_bwd),
                     ("maybe_triton_addmm_fwd", addmm), ("compute_BLOCK_D", lambda x: 64),
                     ("triton_hstu_attention_fwd", lambda N, alpha, q, k, v, **_: torch.empty_like(v)),
                     ("triton_hstu_attention_bwd", lambda **_: None), ("_should_enable_tma", lambda: False)]:
        monkeypatch.setattr(fused, name, fn)
    for name, fn in [("triton_layer_norm_mul_dropout_fwd", ln_mul_dropout_fwd),
                     ("triton_layer_norm_mul_dropout_bwd", ln_mul_dropout_bwd), ("maybe_triton_addmm_fwd", addmm)]:
        monkeypatch.setattr(linear, name, fn)
    return hstu_step


REPLAYS = [  # (sizes, negatives, the moment the model finds the peak at)
    (dict(embedding_dim=64, num_layers=3, num_heads=2, attention_dim=32, linear_dim=32), 512, "cross-entropy backward"),
    (dict(embedding_dim=256, num_layers=2, num_heads=2, attention_dim=32, linear_dim=32), 64, "normalize backward"),
]


@pytest.mark.parametrize("sizes,negatives,moment", REPLAYS)
def test_cpu_replay_matches_the_peak_model(monkeypatch, sizes, negatives, moment):
    """One fwd + bwd of the benchmark's step at tiny widths: the live bytes at the peak, per token, as modelled
    (the model's bf16 weight copies aside; CPU's F.dropout keeps an fp32 noise tensor where CUDA's native_dropout
    keeps a bool mask)."""
    import torch

    hstu_step = stub_triton_kernels(monkeypatch)
    from generative_recommenders.common import HammerKernel
    model = dataclasses.replace(get_model("hstu-gr"), name="tiny", item_table_rows=2000, **sizes)
    assert hstu_gr_peak(model, negatives).at == moment
    shape = hstu_step.HSTUShape.from_workbench(model)
    torch.manual_seed(0)
    peaks = {}
    for batch in (4, 8):
        net, _ = hstu_step.build(shape, 256, torch.device("cpu"), HammerKernel.TRITON)
        b = hstu_step.make_batch(shape, batch, 256, "full", negatives, False, torch.device("cpu"),
                                 torch.Generator().manual_seed(0))
        live = LiveBytes()
        with live.mode:
            net.loss(b, False).backward()
        peaks[batch * 256] = live.peak
    (l1, p1), (l2, p2) = sorted(peaks.items())
    slope = (p2 - p1) / (l2 - l1)  # bytes per token: the fixed weight copies and gradients cancel
    modelled = hstu_gr_peak(model, negatives).per_token + (FP32 - BOOL) * model.embedding_dim
    assert slope == pytest.approx(modelled, rel=0.02)
