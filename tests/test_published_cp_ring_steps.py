"""The long-context tables' cost per added ring step (benchmarks/published/cp_ring_steps.py): the step's seconds
from a TPS/GPU figure, and each row's increment over the row before, published and predicted alike."""

import importlib.util
import sys
from pathlib import Path

import pytest

from workbench.fileio import load_yaml

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("published_cp_ring_steps",
                                               ROOT / "benchmarks" / "published" / "cp_ring_steps.py")
cp_ring_steps = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cp_ring_steps
_spec.loader.exec_module(cp_ring_steps)
evaluate = cp_ring_steps.evaluate


def test_step_seconds_are_the_steps_tokens_per_gpu_over_the_rate():
    spec = {"dp": 2, "tp": 8, "pp": 8, "cp": 4, "global_batch": 16, "seq_len": 131072}  # 405B CP-3's layout
    assert cp_ring_steps.step_s(31.0, spec) == pytest.approx(16 * 131072 / 512 / 31.0)


def test_each_increment_is_the_step_difference_per_added_ring_step():
    csv_path = ROOT.parent / "shared" / "reference" / "published" / "training_throughput.csv"
    if not csv_path.exists():
        pytest.skip(f"{csv_path} is not in this checkout")
    table = {row["id"]: row for row in evaluate.load_table(csv_path)}
    mapping = evaluate.validate_mapping(load_yaml(evaluate.MAPPING))
    ids = cp_ring_steps.SERIES["llama3-8b, 8 GPUs (Table 2)"]
    rows = cp_ring_steps.ring_steps(ids, table, mapping)
    assert [r.cp for r in rows] == [1, 2, 4, 8]
    assert rows[0].published_per_added_step_s is None and rows[0].predicted_per_added_step_s is None
    for before, row in zip(rows, rows[1:]):
        added = row.cp - before.cp
        assert row.published_per_added_step_s == pytest.approx((row.published_s - before.published_s) / added)
        assert row.predicted_per_added_step_s == pytest.approx((row.predicted_s - before.predicted_s) / added)
    # the published step is the row's TPS/GPU read back: 32,768 tokens per GPU per step at every cp
    assert rows[0].published_s == pytest.approx(32768 / float(table[ids[0]]["value"]))
