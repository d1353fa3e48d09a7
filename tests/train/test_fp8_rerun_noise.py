"""workbench.train.rerun_noise (benchmarks/train/fp8_rerun_noise.py's analysis): same-recipe, same-seed reruns
compared with the fp8 proof's own metrics."""

from workbench.train import rerun_noise as noise


def test_a_curve_against_itself_differs_by_nothing():
    curve = [5.0 - 0.01 * i for i in range(300)]
    c = noise.compare(curve, curve)
    assert c["max_relative_difference"] == 0 and c["mean_signed_difference"] == 0


def test_the_committed_reruns_are_compared_pairwise_and_rendered():
    table = noise.rows()
    bf16 = [r for r in table if r["run"] == "small-bf16"]
    assert len(bf16) == 3  # three proof folders hold bf16 at seed 0: three pairs
    assert all(r["largest"] >= abs(r["mean_signed"]) for r in table)
    text = noise.markdown(table)
    assert "same seed, run twice" in text and text.count("| small-bf16 |") == 3
