"""Learning-rate schedules of the training job (``workbench.train.schedule``) and their use in a CPU run."""

import math

import pytest

from workbench.train.schedule import LrSchedule
from workbench.train.spec import JobError


def test_constant_is_flat_after_its_warmup():
    assert [LrSchedule().lr_factor(s, 5) for s in range(5)] == [1.0] * 5
    assert [LrSchedule("constant", 4).lr_factor(s, 6) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_warms_up_then_falls_to_its_floor_at_the_last_step():
    schedule = LrSchedule("cosine", warmup_steps=30, min_ratio=0.1)
    factors = [schedule.lr_factor(s, 300) for s in range(300)]
    assert factors[0] == pytest.approx(1 / 30) and factors[29] == 1.0 and factors[30] == 1.0
    assert factors[-1] == pytest.approx(0.1)
    assert factors[165] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 135 / 269)))
    assert all(a >= b for a, b in zip(factors[30:], factors[31:]))  # never rises after warm-up


def test_bad_schedules_are_refused_with_what_was_expected():
    with pytest.raises(JobError, match="expected one of constant, cosine"):
        LrSchedule("linear")
    with pytest.raises(JobError, match="warm-up steps"):
        LrSchedule("cosine", -1)
    with pytest.raises(JobError, match="min_ratio"):
        LrSchedule("cosine", 0, 1.5)
    with pytest.raises(ValueError, match="0 <= step < total"):
        LrSchedule().lr_factor(5, 5)


def test_the_job_follows_its_schedule_and_records_it(tiny_recipe, tmp_path):
    import json

    from workbench.train.__main__ import main
    from workbench.train.job import RunOptions, train
    from workbench.train.spec import load_job_spec

    recipe = tiny_recipe()
    spec = load_job_spec(recipe)
    flat = train(spec, RunOptions(steps=4, warmup=0, progress=False, lr=3e-3)).losses
    # the loss of step 1 comes before any update; step 2 follows an update at a quarter of the peak
    ramp = train(spec, RunOptions(steps=4, warmup=0, progress=False, lr=3e-3,
                                  lr_schedule=LrSchedule("cosine", warmup_steps=4))).losses
    assert ramp[0] == pytest.approx(flat[0]) and ramp[1] != pytest.approx(flat[1], abs=1e-6)
    metrics = tmp_path / "m.json"
    assert main(["--recipe", str(recipe), "--metrics", str(metrics), "--quiet", "--steps", "3", "--warmup", "0",
                 "--lr-schedule", "cosine", "--lr-warmup-steps", "1", "--lr-min-ratio", "0.2"]) == 0
    assert json.loads(metrics.read_text())["settings"]["lr_schedule"] == {"kind": "cosine", "warmup_steps": 1,
                                                                         "min_ratio": 0.2}
    assert main(["--recipe", str(recipe), "--metrics", str(metrics), "--quiet", "--lr-warmup-steps", "-2"]) == 2
