"""workbench.benchmarking, the benchmark scripts' shared harness: the timer, the environment record, run folders."""

import json

import pytest

from workbench.benchmarking import (
    Timing,
    append_jsonl,
    environment,
    gpu_folder,
    read_jsonl,
    run_folder,
    time_steps,
)
from workbench.fileio import InputFileError, OutputExistsError


def test_time_steps_warms_up_then_times_and_keeps_each_result():
    calls, synced, reset = [], [], []
    timing = time_steps(lambda i: calls.append(i) or i * 10, warmup=2, repeats=3,
                        synchronize=lambda: synced.append(len(calls)), after_warmup=lambda: reset.append(len(calls)))
    assert calls == [0, 1, 0, 1, 2] and timing.results == [0, 10, 20]
    assert reset == [2]  # between the warm-up and the first timed call
    assert synced == [2, 2, 3, 3, 4, 4, 5]  # after the warm-up, then before and after each timed call
    assert timing.times_s == sorted(timing.times_s) and len(timing.times_s) == 3 and timing.warmup_s >= 0


def test_the_median_is_the_middle_sorted_time_upper_of_an_even_count():
    assert Timing([1.0, 2.0, 3.0], 0.0).median_s == 2.0
    assert Timing([1.0, 2.0, 3.0, 4.0], 0.0).median_s == 3.0


@pytest.mark.parametrize("kwargs, message", [({"repeats": 0}, "repeats >= 1"), ({"clock": "gpu"}, "'wall' or 'cuda'")])
def test_time_steps_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        time_steps(lambda i: None, **{"warmup": 0, "repeats": 1, **kwargs})


def test_environment_has_the_versions_and_date_and_no_hostname():
    env = environment(packages=("yaml", "surely_not_a_package"))
    assert {"python", "torch", "cuda", "gpu", "date_utc", "yaml"} <= set(env)
    assert "surely_not_a_package" not in env and "host" not in env and "hostname" not in env


@pytest.mark.parametrize("release, recorded", [((13, 0), "13.0"), ((12, 8), "12.8"), (None, None)])
def test_environment_records_the_ptxas_triton_compiles_with(release, recorded, monkeypatch):
    from workbench.kernels import _common

    monkeypatch.setattr(_common, "ptxas_release", lambda: release)
    assert environment(packages=("triton",)).get("ptxas") == recorded
    assert "ptxas" not in environment(packages=("yaml",))  # only where triton kernels are what is measured


@pytest.mark.parametrize("name, count, folder", [("NVIDIA H200", 1, "h200"), ("NVIDIA H200", 2, "h200x2"),
                                                 ("AMD Instinct MI300X", 1, "mi300x"), (None, 1, "cpu"),
                                                 ("Some GPU (rev 2)", 1, "some-gpu-rev-2")])
def test_gpu_folder_names_the_results_folder(name, count, folder):
    assert gpu_folder(name, count) == folder


def test_run_folder_writes_the_environment_once(tmp_path):
    folder = run_folder("train", "proof", gpu="h200", root=tmp_path, env={"gpu": "NVIDIA H200"})
    assert folder == tmp_path / "h200" / "train" / "proof"
    env = json.loads((folder / "environment.json").read_text())
    assert env["gpu"] == "NVIDIA H200" and "command" in env
    with pytest.raises(OutputExistsError):
        run_folder("train", "proof", gpu="h200", root=tmp_path, env={})
    assert run_folder("train", "proof", gpu="h200", root=tmp_path, env={"gpu": "x"}, overwrite=True) == folder
    with pytest.raises(ValueError, match="one folder name"):
        run_folder("train/x", "proof", root=tmp_path, env={})


def test_jsonl_rows_append_and_read_back(tmp_path):
    path = tmp_path / "rows" / "sweep.jsonl"
    append_jsonl(path, {"row": 1, "ms": 0.5})
    append_jsonl(path, {"row": 2, "error": "out of memory"})
    assert read_jsonl(path) == [{"row": 1, "ms": 0.5}, {"row": 2, "error": "out of memory"}]
    path.write_text('{"row": 1}\n[1, 2]\n')
    with pytest.raises(InputFileError, match="line 2: a list: expected one JSON object per line"):
        read_jsonl(path)
    path.write_text('{"row": 1\n')
    with pytest.raises(InputFileError, match="line 1: .*expected one JSON object per line"):
        read_jsonl(path)
