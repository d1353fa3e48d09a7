"""The published-table evaluation (benchmarks/published/evaluate.py): its mapping validates, and a handful of rows
price end to end on the CPU."""

import copy
import importlib.util
import io
import csv
import sys
from pathlib import Path

import pytest
import yaml

from workbench.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT.parent / "shared" / "reference" / "published" / "training_throughput.csv"
_spec = importlib.util.spec_from_file_location("published_evaluate", ROOT / "benchmarks" / "published" / "evaluate.py")
evaluate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = evaluate  # dataclasses look their module up while the class is built
_spec.loader.exec_module(evaluate)


@pytest.fixture
def mapping() -> dict:
    return copy.deepcopy(yaml.safe_load(evaluate.MAPPING.read_text()))


def test_the_committed_mapping_validates(mapping):
    assert evaluate.validate_mapping(mapping) is mapping


@pytest.mark.parametrize("section, key, bad", [("models", "Llama 3.1 8B", "llama3-8bb"),
                                                ("gpus", "H100", "h100-sxm5"),
                                                ("frameworks", "torchtitan", {"stack": "torchtitn", "proxy": False})])
def test_unknown_names_in_the_mapping_are_errors(mapping, section, key, bad):
    mapping[section][key] = bad
    with pytest.raises(SpecError) as err:
        evaluate.validate_mapping(mapping)
    assert f"{section}.{key}" in str(err.value)


def test_unknown_variant_and_row_keys_are_errors(mapping):
    bad = copy.deepcopy(mapping)
    bad["gpu_by_framework"]["torchtitan"]["H100"] = "h100-at-400w"
    with pytest.raises(SpecError, match="gpu_by_framework.torchtitan.H100"):
        evaluate.validate_mapping(bad)
    mapping["rows"]["TT-H100-8B-8G-1"]["microbatch"] = 2
    with pytest.raises(SpecError, match="microbatch"):
        evaluate.validate_mapping(mapping)


def test_the_torchtitan_h100_rows_price_on_the_grand_teton_variant(mapping):
    row = {"id": "TT-H100-8B-8G-1", "framework": "torchtitan", "gpu": "H100"}
    assert evaluate.resolve_gpu(row, mapping) == "h100-sxm-96gb-500w"
    assert evaluate.resolve_gpu({**row, "framework": "NeMo (Megatron-Core)"}, mapping) == "h100-sxm"


@pytest.mark.skipif(not TABLE.exists(), reason=f"the published table is not at {TABLE}")
def test_a_handful_of_rows_evaluate(tmp_path, mapping):
    ids = ["TT-H100-8B-8G-1", "N2407-H100-L2-7B", "MLP50-MI300X-LORA-thr", "STAS-H200-8B-z3-8k", "AO-B200-8B-1"]
    rows = list(csv.DictReader(io.StringIO(TABLE.read_text())))
    subset = tmp_path / "table.csv"
    with subset.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if r["id"] in ids)
    mapping["rows"] = {i: mapping["rows"][i] for i in ids}
    mapping_path = tmp_path / "rows.yaml"
    mapping_path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    results, _ = evaluate.evaluate(subset, mapping_path)
    by_id = {r.id: r for r in results}
    assert sorted(by_id) == sorted(ids)
    for rid in ("TT-H100-8B-8G-1", "N2407-H100-L2-7B", "MLP50-MI300X-LORA-thr"):
        r = by_id[rid]
        assert r.predicted is not None and r.predicted > 0 and r.reason == "", rid
        assert -0.9 < r.error < 9, (rid, r.error)  # a sane prediction, not a score
    assert by_id["TT-H100-8B-8G-1"].gpu == "h100-sxm-96gb-500w" and by_id["TT-H100-8B-8G-1"].fits
    offloaded = by_id["STAS-H200-8B-z3-8k"]  # CPU offload (workbench.offload): the host step is in the notes
    assert offloaded.predicted is not None and offloaded.reason == "" and "CPU offload (optimizer)" in offloaded.notes
    assert "power limited" in by_id["AO-B200-8B-1"].reason
    markdown = evaluate.render_markdown(results, [])
    assert "TT-H100-8B-8G-1" in markdown and "Not expressible (1 rows)" in markdown


@pytest.mark.skipif(not TABLE.exists(), reason=f"the published table is not at {TABLE}")
def test_a_scorable_row_without_a_mapping_entry_is_an_error(tmp_path, mapping):
    del mapping["rows"]["TT-H100-8B-8G-1"]
    mapping_path = tmp_path / "rows.yaml"
    mapping_path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    with pytest.raises(SpecError, match="TT-H100-8B-8G-1"):
        evaluate.evaluate(TABLE, mapping_path)
