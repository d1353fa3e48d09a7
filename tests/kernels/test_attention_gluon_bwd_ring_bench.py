"""benchmarks/kernels/attention_gluon_bwd_ring_bench.py without a GPU: its variants, the worker names it parses
back, and the report it writes from rows (the GPU run is the lead's, on the H200)."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks/kernels/attention_gluon_bwd_ring_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("benchmarks_attention_gluon_bwd_ring_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.insert(0, str(BENCH.parent))  # its workers import broad_shapes from there
    return module


def test_every_variant_has_a_unique_label_and_fits_a_head_dim():
    bench = _bench()
    labels = [bench.label(tiles, strict) for tiles, strict in bench.RING_CONFIGS]
    assert len(set(labels)) == len(labels) and bench.label((64, 128, 3)) not in labels  # the default is the yardstick
    for tiles, strict in bench.RING_CONFIGS:
        assert bench.fits(tiles, 64)
        name, _, flag = bench.worker_name(tiles, strict).partition("-")
        assert tuple(int(x) for x in name.split("x")) == tiles and (flag == "strict") == strict
    assert not bench.fits((128, 128, 2), 128)  # 256 KiB of shared memory at d = 128


def test_the_report_separates_checks_timings_and_sanitizer_runs():
    bench = _bench()
    base = dict(name="n", batch=1, seq=256, heads_q=2, heads_kv=1, head_dim=64, causal=1)
    s2, strict = bench.label((64, 128, 2)), bench.label((64, 128, 2), True)
    rows = [dict(base, id="probe", impl=s2, phase="check", status="wrong", rel_err_dq=0.9),
            dict(base, id="a11", impl=s2, phase="check", status="wrong", rel_err_dq=0.7, rel_err_dk=0.6),
            dict(base, id="a11", impl=strict, phase="check", status="right", rel_err_dq=1e-3),
            dict(base, id="a11", impl=strict, phase="timed", status="right", rel_err_dq=1e-3, ms=2.0),
            dict(base, id="a11", impl=bench.label((64, 128, 3)), phase="timed", status="timed", ms=3.0),
            dict(base, id="a11", impl="sdpa_cudnn", phase="timed", status="timed", ms=2.4),
            dict(id="sanitize", name="sanitize-racecheck-64x128x2", impl=s2, phase="sanitize", status="ran",
                 error="NaN in a gradient")]
    text = bench.report(rows, [dict(worker="baseline", status="ok", seconds=1.0, tail=["done"])], {})
    assert f"| {s2} | - | wrong 9.0e-01 | - | - |" in text  # the probe's d64 causal cell
    assert f"| {strict} | 1 | 0 | 0 | 1.500 | 1.200 |" in text  # default 3.0 / 2.0 ms, cuDNN 2.4 / 2.0 ms
    assert f"| {s2} | 0 | 1 | 0 |  |  |" in text
    assert "sanitize-racecheck-64x128x2: " in text and "NaN in a gradient" in text
    assert "| a11 |" in text and "| sanitize |" not in text and "| probe |" not in text
