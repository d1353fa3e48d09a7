"""A logged throughput that counts evaluation pauses (benchmarks/published/eval_pauses.py): HugeCTR's MLPerf
DLRM-DCNv2 intervals as train.py sets them, and the reading's arithmetic."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("published_eval_pauses", ROOT / "benchmarks" / "published" / "eval_pauses.py")
eval_pauses = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = eval_pauses
_spec.loader.exec_module(eval_pauses)

HUGECTR = {"every_epoch": 0.05, "train_samples": 4195197692, "eval_samples": 89137319, "source": "train.py"}


def test_hugectr_intervals_as_train_py_sets_them():
    pauses = eval_pauses.EvalPauses.from_mapping(HUGECTR, "test")
    assert pauses.interval_steps(55296) == 3793  # floor(0.05 * 4195197692 / 55296)
    assert pauses.eval_batches(1048576) == 86 and pauses.eval_batches(262144) == 341  # ceil(EVAL_NUM_SAMPLES / b)


def test_the_logged_interval_adds_the_forward_of_each_evaluation():
    pauses = eval_pauses.EvalPauses.from_mapping(HUGECTR, "test")
    op = lambda phase, t: SimpleNamespace(op=SimpleNamespace(phase=phase), total_s=t)
    comm = lambda position, t: SimpleNamespace(position=position, exposed_s=t)
    evaluation = SimpleNamespace(ops=[op("fwd", 6e-3), op("bwd", 12e-3), op("optimizer", 1e-3)],
                                 comms=[comm("critical", 2e-3), comm("backward_end", 1e-3)])
    assert eval_pauses.forward_s(evaluation) == pytest.approx(7e-3)  # forward ops + half the critical all-to-all
    logged = eval_pauses.logged_samples_per_s(pauses, 2e-3, 55296, 1048576, evaluation)
    assert logged == pytest.approx(3793 * 55296 / (3793 * 2e-3 + 86 * 7e-3))


@pytest.mark.parametrize("bad", [{**HUGECTR, "eval_batch": 1}, {k: v for k, v in HUGECTR.items() if k != "source"},
                                 {**HUGECTR, "every_epoch": 0}])
def test_a_malformed_reading_is_an_error(bad):
    with pytest.raises(SpecError):
        eval_pauses.EvalPauses.from_mapping(bad, "frameworks.x.eval_pauses")
