"""The shipped copy of the published-tables evaluation (workbench.published): current with the committed
evaluation, read and checked, filtered per GPU and model family."""

import importlib.util
from pathlib import Path

import pytest
import yaml

from workbench.errors import SpecError
from workbench.published import (
    load_published, mape, model_family, published_path, published_rows, published_rows_for,
)

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    path = ROOT / "benchmarks" / "published" / "export_validation.py"
    spec = importlib.util.spec_from_file_location("published_export_validation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_file_is_what_the_generator_writes_from_the_committed_evaluation():
    assert published_path().read_text(encoding="utf-8") == _generator().text(), (
        "specs/validation/published/training_throughput.yaml is stale: run "
        "python benchmarks/published/export_validation.py")


def test_rows_match_the_evaluation_csv():
    import csv

    table = list(csv.DictReader((ROOT / "benchmarks" / "results" / "published" / "evaluation.csv").open()))
    rows = published_rows()
    assert [r.id for r in rows] == [t["id"] for t in table]
    for row, t in zip(rows, table):
        assert row.published == pytest.approx(float(t["published"]))
        if t["error"]:
            assert row.error == pytest.approx(float(t["error"]), abs=2e-5)  # the CSV's 6 significant figures
        else:
            assert row.predicted is None and row.reason


def test_filtered_per_gpu_with_its_variants_and_per_family():
    h100 = published_rows_for("h100-sxm", "llama3")
    assert h100 and {r.gpu for r in h100} <= {"h100-sxm", "h100-sxm-96gb-500w"}
    assert "h100-sxm-96gb-500w" in {r.gpu for r in h100}  # torchtitan's 500 W part counts as an H100
    assert all(r.family == "llama3" for r in h100)
    assert published_rows_for("h100", "llama3") == h100  # an alias
    assert published_rows_for("mi350x", "llama3") == ()
    assert model_family("llama3-70b") == "llama3" and model_family("mixtral-8x7b") == "mixtral"
    assert mape(h100) == pytest.approx(sum(abs(r.error) for r in h100 if r.error is not None)
                                       / sum(r.error is not None for r in h100))
    assert mape(()) is None


def test_a_bad_file_names_the_row_and_field(tmp_path):
    data = yaml.safe_load(published_path().read_text(encoding="utf-8"))
    data["rows"][3]["metric"] = "tokens_per_day"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"rows\[3\]\.metric.*tokens_per_day"):
        load_published(bad)
    data["rows"][3]["metric"] = "tokens_per_sec_per_gpu"
    data["rows"][3]["predicted"] = None
    data["rows"][3].pop("reason", None)
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"rows\[3\]\.reason"):
        load_published(bad)
