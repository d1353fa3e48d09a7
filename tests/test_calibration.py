import csv
import io
from pathlib import Path

import pytest
import yaml

from workbench import predict
from workbench.calibration import MIN_ROWS_PER_CONSTANT, calibrate, fit_plan, measured_ops, write_profile
from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.perf.efficiency import CALIBRATION_DIR_ENV, constants_for, default_constants
from workbench.rows import merge_repeats, predict_rows

H200 = get_gpu("h200")
SHAPES = """op,m,n,k,batch,seq,heads_q,heads_kv,head_dim,causal,pass,rows,cols,dtype
gemm,4096,4096,4096,,,,,,,,,,bf16
gemm,8192,8192,8192,,,,,,,,,,bf16
gemm,2048,14336,4096,,,,,,,,,,bf16
gemm,16,8192,8192,,,,,,,,,,bf16
gemm,1024,1024,1024,,,,,,,,,,bf16
gemm,8192,1000,8192,,,,,,,,,,bf16
attention,,,,1,8192,32,8,128,true,fwd,,,bf16
attention,,,,4,2048,32,8,128,false,fwd,,,bf16
attention,,,,1,8192,32,8,128,true,fwd_bwd,,,bf16
copy,,,,,,,,,,,8192,8192,bf16
copy,,,,,,,,,,,1024,1024,bf16
copy,,,,,,,,,,,4096,4096,bf16
softmax,,,,,,,,,,,8192,8192,bf16
softmax,,,,,,,,,,,32768,8192,bf16
softmax,,,,,,,,,,,16384,8192,bf16
"""
REPO = Path(__file__).resolve().parents[1]


def _measured_by(constants) -> list[dict]:
    """Rows 'measured' on a GPU that behaves exactly like the model with other constants."""
    rows = list(csv.DictReader(io.StringIO(predict_rows(SHAPES, H200, constants))))
    for row in rows:
        row["measured_ms"] = row.pop("predicted_ms")
    return rows


def test_calibration_recovers_a_known_gpu():
    truth = default_constants(H200).with_values({"gemm_fraction.bf16": 0.62, "attention_fwd_fraction": 0.41,
                                                 "memory_fraction.softmax.bf16": 0.3, "gemm_launch_us": 9.0})
    result = calibrate(_measured_by(truth), H200)
    assert result.mape_before["all"] > 10
    assert result.mape_after["all"] < 2
    assert result.fitted["gemm_fraction.bf16"] == pytest.approx(0.62, rel=0.05)
    assert result.fitted["memory_fraction.softmax.bf16"] == pytest.approx(0.3, rel=0.05)


def test_profile_round_trip_feeds_calibrated_predictions(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    truth = default_constants(H200).with_values({"gemm_fraction.bf16": 0.5})
    path = write_profile(calibrate(_measured_by(truth), H200))
    assert path.startswith(str(tmp_path)) and yaml.safe_load(open(path))["gpu"] == "h200-sxm"
    assert constants_for(H200, calibrated=True)["gemm_fraction.bf16"] == pytest.approx(0.5, rel=0.05)
    spec = predict("llama3-8b", H200, micro_batch=1, seq_len=2048)
    slow = predict("llama3-8b", H200, micro_batch=1, seq_len=2048, calibrated=True)
    assert slow.calibrated and slow.summary.step_time_s > spec.summary.step_time_s
    assert not list(tmp_path.glob(".*"))  # the atomic write left no temporary file


def test_a_refit_keeps_the_constants_it_does_not_fit(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    (tmp_path / "h200-sxm.yaml").write_text(yaml.safe_dump(
        {"gpu": "h200-sxm", "constants": {"link_efficiency": 0.66, "gemm_fraction.bf16": 0.9},
         "notes": {"link_efficiency": "comm_sweep.py on 2 GPUs", "gemm_fraction.bf16": "an older fit"}}))
    truth = default_constants(H200).with_values({"gemm_fraction.bf16": 0.5})
    with pytest.raises(FileExistsError, match="--force"):  # an existing profile is replaced only when asked
        write_profile(calibrate(_measured_by(truth), H200))
    path = write_profile(calibrate(_measured_by(truth), H200), overwrite=True)
    document = yaml.safe_load(open(path))
    assert document["kept_from_previous"] == ["link_efficiency"]  # a communication constant comm_sweep.py fitted
    assert document["notes"] == {"link_efficiency": "comm_sweep.py on 2 GPUs"}  # the refit key's note goes
    assert constants_for(H200, calibrated=True)["link_efficiency"] == 0.66
    assert constants_for(H200, calibrated=True)["gemm_fraction.bf16"] == pytest.approx(0.5, rel=0.05)  # refit


def test_missing_profile_says_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    with pytest.raises(WorkbenchError, match="workbench calibrate"):
        constants_for(get_gpu("mi355x"), calibrated=True)


def test_profile_for_another_gpu_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    (tmp_path / "mi300x.yaml").write_text(yaml.safe_dump({"gpu": "h200-sxm", "constants": {"gemm_launch_us": 3}}))
    with pytest.raises(WorkbenchError, match="another GPU"):
        constants_for(get_gpu("mi300x"), calibrated=True)


def test_shipped_h200_profile_loads():
    c = constants_for(H200, calibrated=True)
    assert c.calibrated and 0.5 < c["gemm_fraction.bf16"] < 0.9


@pytest.mark.parametrize("value,expected", [("", "no row has a measured_ms"), ("-1", "positive"), ("fast", "number")])
def test_bad_measurements(value, expected):
    rows = [{"op": "gemm", "m": "64", "n": "64", "k": "64", "dtype": "bf16", "measured_ms": value}]
    with pytest.raises(WorkbenchError, match=expected):
        calibrate(rows, H200)


def test_bench_results_csv_is_read_as_its_vendor_baselines():
    from workbench.rows import read_rows

    text = ("module,name,row_op,row_m,row_n,row_k,row_dtype,row_rows,row_cols,baseline_ms,triton_ms\n"
            "gemm,qkv,gemm,8192.0,6144.0,4096.0,bf16,,,0.58,0.61\n"
            "swiglu,fused,swiglu,,,,bf16,8192.0,14336.0,0.28,0.17\n"  # not a predict-ops op: left out
            "norms,rms,rmsnorm,,,,bf16,32768.0,8192.0,0.40,0.26\n")
    _, rows = read_rows(text)
    assert [r["op"] for r in rows] == ["gemm", "rmsnorm"]
    assert rows[0]["m"] == "8192" and rows[0]["measured_ms"] == "0.58"
    assert len(measured_ops(rows, H200)) == 2
    with pytest.raises(WorkbenchError, match="too few to fit any constant"):  # one row per class
        calibrate(rows, H200)


def test_each_constant_needs_rows_of_its_own_and_the_rest_are_skipped_with_why():
    truth = default_constants(H200).with_values({"gemm_fraction.bf16": 0.62})
    result = calibrate(_measured_by(truth), H200)
    # the 6 GEMMs are all bf16: the 9 GEMM constants share their rows and only the first 2 are fitted; 3 attention
    # rows fit 1 of its 3 constants; 3 copies and 3 softmaxes fit one constant each
    assert set(result.fitted) == {"gemm_fraction.bf16", "gemm_launch_us", "attention_fwd_fraction",
                                  "memory_fraction.copy.bf16", "memory_fraction.softmax.bf16", "memory_launch_us"}
    assert {"gemm_fraction_unthrottled.bf16", "gemm_overlap_exponent", "attention_bwd_fraction",
            "attention_launch_us"} <= set(result.skipped)
    assert not set(result.fitted) & set(result.skipped)
    assert "fitting 3 constant(s) on them needs 9" in result.skipped["attention_launch_us"]


def test_one_row_fits_nothing():
    """Issue 15: nine constants were fitted from one row."""
    rows = [{"op": "gemm", "m": "4096", "n": "4096", "k": "4096", "dtype": "bf16", "measured_ms": "0.25"}]
    with pytest.raises(WorkbenchError, match=f"too few to fit any constant .{MIN_ROWS_PER_CONSTANT} distinct"):
        calibrate(rows, H200)
    with pytest.raises(WorkbenchError, match="too few"):  # the same row three times is still one op
        calibrate(rows * 3, H200)


def test_a_row_faster_than_the_roofline_is_refused_by_name():
    rows = _measured_by(default_constants(H200))
    rows[1]["measured_ms"] = str(float(rows[1]["measured_ms"]) / 100)  # 8192^3 bf16 GEMM in 1/100 of its time
    with pytest.raises(WorkbenchError, match=r"1 row\(s\) measured faster than the roofline .*row 2 \(gemm 8192x8192x8192"):
        calibrate(rows, H200)


def _shipped_rows() -> list[dict]:
    """The 544 rows the shipped H200 profile was fitted on (its ``fitted_on``), repeats merged by median."""
    results = REPO / "benchmarks" / "results" / "h200"
    rows = [r for r in csv.DictReader((results / "measured_ops.csv").open()) if (r.get("measured_ms") or "").strip()]
    repeats = [results / "repeats" / f"fp8_{i}.csv" for i in (1, 2, 3)] + \
        [results / "remeasure" / f"gemm_repeat_{i}.csv" for i in (1, 2, 3)]
    return merge_repeats(rows, [list(csv.DictReader(p.open())) for p in repeats])


def test_the_shipped_profiles_rows_pass_the_rules_and_fit_every_constant_it_lists():
    profile = yaml.safe_load((REPO / "specs" / "calibration" / "h200-sxm.yaml").read_text())
    ops = measured_ops(_shipped_rows(), H200)  # none faster than its roofline
    params, skipped = fit_plan(ops, H200)
    assert len(ops) == profile["rows"] == 544 and skipped == {}
    assert [name for name, _ in params] == [k for k in profile["constants"] if k not in profile["kept_from_previous"]]


@pytest.mark.slow
def test_the_shipped_profile_is_reproduced_by_a_refit():
    profile = yaml.safe_load((REPO / "specs" / "calibration" / "h200-sxm.yaml").read_text())
    result = calibrate(_shipped_rows(), H200)
    assert result.skipped == {}
    assert result.fitted == {k: v for k, v in profile["constants"].items() if k not in profile["kept_from_previous"]}
