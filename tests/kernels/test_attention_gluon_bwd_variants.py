"""benchmarks/kernels/attention_gluon_bwd_variants.py without a GPU: its variants, where each runs, and the report
it writes from rows (the GPU run is the lead's, on the H200)."""

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks/kernels/attention_gluon_bwd_variants.py"


def _bench():
    spec = importlib.util.spec_from_file_location("benchmarks_attention_gluon_bwd_variants", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH.parent))  # it imports the ring bench and broad_shapes from there
    spec.loader.exec_module(module)
    return module


def test_every_variant_differs_from_the_default_and_runs_somewhere():
    from workbench.kernels.attention_gluon_bwd import VARIANT_KEYS, config_space

    bench = _bench()
    assert bench.DEFAULT == config_space(128, False)[0] == config_space(64, True)[0]  # the kernel's default
    for name, config in bench.VARIANTS.items():
        assert config != bench.DEFAULT and set(config) - set(bench.DEFAULT) <= set(VARIANT_KEYS), name
        assert bench.fits(config, 64) or bench.fits(config, 128), name
    assert not bench.fits(dict(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=2, DS_BUFFERS=1), 128)  # 128 KiB of Q/dO tiles


def test_a_group_split_runs_only_where_it_splits_the_gqa_group_evenly():
    bench = _bench()
    shape = dict(head_dim=128, heads_q=8, heads_kv=1)  # a05's MQA: a group of 8
    assert bench.applies(bench.VARIANTS["split8"], shape) and bench.applies(bench.VARIANTS["split2"], shape)
    assert not bench.applies(bench.VARIANTS["split8"], dict(shape, heads_q=4, heads_kv=2))  # GQA 2 (the probe's)
    assert not bench.applies(bench.VARIANTS["split2"], dict(shape, heads_kv=8))  # MHA: nothing to split
    assert bench.applies(bench.DEFAULT, dict(shape, heads_kv=8))


def _row(bench, sid, impl, phase, **fields):
    head_dim, causal = (128, 0) if sid == "a12" else (64, 1)
    return dict(id=sid, name=sid, batch=1, seq=4096, heads_q=16, heads_kv=16, head_dim=head_dim, causal=causal,
                impl=impl, phase=phase, **fields)


def test_the_report_puts_each_variant_against_the_default_and_cudnn():
    bench = _bench()
    default = bench.DEFAULT_LABEL
    rows = [_row(bench, "a12", default, "timed", status="timed", ms=4.0),
            _row(bench, "a12", "sdpa_cudnn", "timed", status="timed", ms=3.2),
            _row(bench, "a12", default, "reference", status="right", sdpa_err_dq=2e-3, sdpa_err_dk=1e-3,
                 sdpa_err_dv=1e-3),
            _row(bench, "a11", default, "timed", status="timed", ms=2.0),
            _row(bench, "a11", "sdpa_cudnn", "timed", status="timed", ms=2.0),
            _row(bench, "a12", "split2", "check", status="right", rel_err_dq=1e-5),
            _row(bench, "a11", "split2", "check", status="right", rel_err_dq=1e-5),
            _row(bench, "probe", "split4", "check", status="wrong", rel_err_dq=0.7),
            _row(bench, "a12", "split2", "timed", status="right", rel_err_dq=1e-5, sdpa_err_dq=2e-3,
                 sdpa_err_dk=1e-3, sdpa_err_dv=1e-3, ms=3.2, default_ms=4.0),
            _row(bench, "a11", "split2", "timed", status="wrong", rel_err_dq=1e-5, sdpa_err_dq=0.5)]
    text = bench.report(rows, [dict(worker="baseline", status="ok", seconds=1.0, tail=["done"])], {})
    assert "right against SDPA fp32 on 1 of 1 shapes" in text
    assert "geomean cuDNN ms / default ms 0.894 over 2 shapes" in text  # sqrt(3.2 / 4.0 * 2.0 / 2.0)
    config = json.dumps({"GROUP_SPLIT": 2})
    # 2 right checks; 1 of its 2 SDPA-checked shapes right (worst 0.5); timed on a12: 4.0 / 3.2 = 1.25, cuDNN 1.0
    cells = "2 / 0 / 0 | 1 of 2 (0.5000) | 1 | 1.250 |  |  | 1.250 |  | 1.000 (0.800) |"
    assert f"| split2 | `{config}` | {cells}" in text
    assert "| split4 | - | wrong 7.0e-01 | - | - |" in text  # the probe's d64 causal cell
    assert "| a12 |" in text and "| 4.0000 |  | 3.2000 | 3.2000 / 4.0000 |" in text and "| probe |" not in text
