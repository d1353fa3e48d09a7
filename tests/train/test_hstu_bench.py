"""The HSTU benchmark (benchmarks/train/hstu_h200.py) on the CPU: the fbgemm stand-ins, one training step of the
vendored STU layers, and the dry-run sweep end to end (rows.jsonl with measured and predicted times, REPORT.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")  # the vendored modules import triton at module level

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "train"


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_fbgemm_stand_ins_round_trip_and_grad():
    _load("hstu_step")  # registers the stand-ins
    values = torch.randn(7, 3, requires_grad=True)  # two histories of 2 and 5 rows
    offsets = torch.tensor([0, 2, 7])
    dense = torch.ops.fbgemm.jagged_to_padded_dense(values=values, offsets=[offsets], max_lengths=[4],
                                                    padding_value=0.0)
    assert dense.shape == (2, 4, 3)
    assert torch.equal(dense[0, :2], values[:2]) and torch.equal(dense[1], values[2:6])  # row 6 truncated
    assert not dense[0, 2:].any()
    back = torch.ops.fbgemm.dense_to_jagged(torch.ones(2, 5, 3), [offsets], 7)[0]
    assert back.shape == (7, 3)
    dense.sum().backward()
    assert values.grad[:6].eq(1).all() and values.grad[6].eq(0).all()


def test_one_step_trains_the_upstream_stu_layers():
    step = _load("hstu_step")
    from generative_recommenders.common import HammerKernel

    shape = step.HSTUShape(item_rows=500, dim=32, layers=2, heads=2, attention_dim=16, linear_dim=16)
    generator = torch.Generator().manual_seed(0)
    model, optimizers = step.build(shape, 16, torch.device("cpu"), HammerKernel.PYTORCH)
    batch = step.make_batch(shape, 3, 16, "uniform", 8, False, torch.device("cpu"), generator)
    before = model.stu._stu_layers[0]._uvqk_weight.detach().clone()
    loss = step.train_step(model, optimizers, batch, per_position=False)
    assert torch.isfinite(loss)
    assert not torch.equal(before, model.stu._stu_layers[0]._uvqk_weight)
    # upstream's output projection reads cat([u, attn, norm(attn) * u]): 3 x heads x linear_dim wide
    assert model.stu._stu_layers[0]._output_weight.shape == (3 * 2 * 16, 32)


def test_dry_run_writes_rows_and_report(tmp_path):
    bench = _load("hstu_h200")
    assert bench.main(["--dry-run", "--out", str(tmp_path), "--only", "dry-b4-s64", "--budget-s", "240"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == ["dry-b4-s64"]
    assert rows[0]["step_time_s"] > 0 and rows[0]["predicted_step_s"] > 0 and rows[0]["predicted_stack"] == "generative-recommenders"
    assert 0 < rows[0]["bound_step_s"] <= rows[0]["predicted_step_s"]  # the bound beside the stack that ran it
    assert rows[0]["tokens"] == 4 * 64
    text = (tmp_path / "REPORT.md").read_text()
    assert "Dry run" in text and "dry-b4-s64" in text and "Output projection is 3x wider" in text


def test_sweep_starts_with_the_catalog_default():
    bench = _load("hstu_h200")
    from workbench.models import get_model

    model = get_model("hstu-gr")
    first = bench.sweep()[0]
    assert (first.batch, first.seq_len) == (model.default_batch, model.default_seq_len)
    assert len({r.label for r in bench.sweep()}) == len(bench.sweep())


def test_kernel_split_is_disjoint_from_the_step_rows():
    kernels, bench = _load("hstu_kernels"), _load("hstu_h200")
    split = kernels.load_split()
    assert not set(split["fit"]) & {(r.batch, r.seq_len) for r in bench.sweep()}
    assert set(split["test"]) <= {(r.batch, r.seq_len) for r in bench.sweep()}


def test_kernel_fit_recovers_the_fraction_it_is_given():
    """Times made from known fractions through the workbench's own op model come back as those fractions."""
    from workbench.hardware import get_gpu
    from workbench.perf.attention import _wave_efficiency
    from workbench.perf.efficiency import constants_for
    from workbench.precision import get_precision

    kernels = _load("hstu_kernels")
    gpu, c = get_gpu("h200"), constants_for(get_gpu("h200"))
    rows = []
    for b, s in kernels.load_split()["fit"]:
        ops = kernels.workbench_ops(b, s)
        att = ops["hstu_attention.fwd"]
        peak = gpu.peak_tflops(get_precision("bf16").peak_key) * 1e12
        t = att.flops / (peak * 0.3 * _wave_efficiency(att.shape, gpu.compute_units.value))
        rows.append({"batch": b, "seq_len": s, "kernel": "attn_fwd", "ms": (t + c["attention_launch_us"] * 1e-6) * 1e3})
        ln = ops["ln_mul_dropout.bwd"]
        t = ln.bytes / (gpu.hbm_bandwidth_tb_s.value * 1e12 * 0.4) + c["memory_launch_us"] * 1e-6
        rows.append({"batch": b, "seq_len": s, "kernel": "ln_mul_dropout_bwd", "ms": t * 1e3})
    fitted = kernels.fitted_values(kernels.fit(rows))
    assert abs(fitted["attention_fwd_fraction.hstu-triton"] - 0.3) < 1e-3
    assert abs(fitted["memory_fraction.hstu_ln_mul_dropout_bwd"] - 0.4) < 1e-3
