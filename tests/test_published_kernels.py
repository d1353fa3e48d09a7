"""The per-kernel table through predict-ops (benchmarks/published/kernels.py): every row maps (priced or with a
reason), and a known row prices to a finite, positive TFLOP/s in the source's FLOP convention."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("published_kernels", ROOT / "benchmarks" / "published" / "kernels.py")
kernels = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = kernels  # dataclasses look their module up while the class is built
    _spec.loader.exec_module(kernels)

pytestmark = pytest.mark.skipif(not kernels.TABLE.exists(), reason="../shared/reference/published is not checked out")


@pytest.fixture(scope="module")
def results():
    return kernels.evaluate()


def test_every_row_is_priced_or_has_a_reason(results):
    assert len(results) == len(kernels.load_table())
    for r in results:
        assert (r.predicted_tflops is None) == bool(r.reason), r.id
        if r.predicted_tflops is not None:
            assert math.isfinite(r.predicted_tflops) and r.predicted_tflops > 0, r.id
    assert sum(r.predicted_tflops is not None for r in results) >= 0.9 * len(results)


def test_a_known_gemm_row_prices_finite_and_positive(results):
    row = next(r for r in results if r.id == "HK-MI355X-bf16gemm-8192-hipblaslt")
    assert row.catalog_gpu == "mi355x"
    from workbench.hardware import get_gpu
    from workbench.precision import get_precision

    peak = get_gpu("mi355x").peak_tflops(get_precision("bf16").peak_key)
    assert math.isfinite(row.predicted_tflops) and 0 < row.predicted_tflops < peak
    assert row.predicted_ms == pytest.approx(2 * 8192**3 / row.predicted_tflops / 1e12 * 1e3)


def test_attention_rows_use_the_sources_flop_convention_and_backend():
    row = {"op": "attention fwd (FA2)", "batch": "1", "seq": "16384", "heads": "16", "head_dim": "128",
           "causal": "true (inferred)", "dtype": "bf16/fp16"}
    op_row, pass_, backend = kernels.operator_row(row)
    assert (op_row["heads_q"], op_row["causal"], op_row["dtype"], pass_, backend) == ("16", "true", "bf16", "fwd", "flash2")
    assert kernels.source_tflop(op_row, "fwd") == pytest.approx(4 * 16384**2 * 16 * 128 / 2 / 1e12)
    assert kernels.source_tflop(op_row, "bwd") == pytest.approx(2.5 * kernels.source_tflop(op_row, "fwd"))


def test_grouped_query_heads_and_unstated_causal():
    assert kernels._heads("64q/8kv") == ("64", "8")
    with pytest.raises(kernels.NotExpressible, match="causal"):
        kernels._causal("unknown")


def test_an_op_text_the_mapping_lacks_is_an_error_naming_it():
    from workbench.errors import WorkbenchError

    row = dict(kernels.load_table()[0], op="gemm (a new library)")
    with pytest.raises(WorkbenchError, match="a new library"):
        kernels.evaluate_row(row, 1)
