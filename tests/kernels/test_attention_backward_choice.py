"""benchmarks/kernels/attention_backward_choice.py on the committed H200 candidates run: the one-launch backward
pins of ``spaces._ATTENTION_ONE_LAUNCH_BWD`` are what the fit shapes decide (so a pin cannot drift from its
evidence), the test shapes never enter the decision, and the report carries the honest test-shape figure."""

import importlib.util
import json
from pathlib import Path

from workbench.kernels import spaces

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels"


def _choice_script():
    spec = importlib.util.spec_from_file_location("benchmarks_attention_backward_choice",
                                                  BENCH / "attention_backward_choice.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pins_are_the_fit_shapes_decision():
    choice = _choice_script()
    rows, picks = choice.load_run(choice.RUN)
    split = json.loads(choice.SPLIT.read_text())
    shapes = choice.per_shape_times(rows, picks)
    decided = choice.choose(shapes, split["fit"])
    assert {sid for c in decided.values() for sid in c["fit"]} == set(split["fit"])  # no test shape decides
    pinned = spaces._ATTENTION_ONE_LAUNCH_BWD["sm_90"]
    assert {bucket for bucket, c in decided.items() if c["one_launch"]} == set(pinned)
    for (d, causal), entry in pinned.items():
        pick = picks[("fwd_bwd", d, causal)]
        assert entry == (pick["BLOCK_M1"], pick["BLOCK_N1"], pick["BLOCK_N2"], pick["BLK_SLICE_FACTOR"],
                         pick["num_warps"], pick["num_stages"]) and pick["BLOCK_M2"] == pick["BLOCK_N1"]
    text = choice.report(shapes, decided, split, picks, choice.RUN)
    assert "Test geomean: ours 0.765, after 0.759" in text
