"""Catalog folders read one entry at a time (``workbench.catalog``), and what a fresh process reads (issue 16)."""

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.catalog import Catalog
from workbench.errors import SpecError
from workbench.fileio import load_yaml
from workbench.hardware import list_gpu_variants, list_gpus

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Entry:
    name: str
    size: int


def _load(path: Path) -> Entry:
    data = load_yaml(path)
    if not isinstance(data.get("size"), int):
        raise SpecError(str(path), "size", data.get("size"), "an integer")
    return Entry(data["name"], data["size"])


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "b.yaml").write_text("name: b\nsize: 2\n")
    (tmp_path / "a.yaml").write_text("name: a\nsize: 1\n")
    (tmp_path / "a-b.yaml").write_text("name: a-b\nsize: 3\n")
    (tmp_path / "broken.yaml").write_text("name: broken\nsize: big\n")
    (tmp_path / "renamed.yaml").write_text("name: other\nsize: 4\n")
    (tmp_path / "notes.txt").write_text("not an entry\n")
    return tmp_path


def test_get_reads_only_the_file_asked_for(folder):
    catalog = Catalog(lambda: folder, _load)
    assert catalog.get("a") == Entry("a", 1)  # the broken and misnamed files beside it are not read
    assert catalog.get("a") is catalog.get("a")  # read once
    assert catalog.get("notes") is None and catalog.get("missing") is None
    assert "b" in catalog and "notes" not in catalog


def test_a_name_is_a_file_stem_never_a_path(folder, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "x.yaml").write_text("name: x\nsize: 9\n")
    catalog = Catalog(lambda: folder, _load)
    assert catalog.get(f"../{outside.name}/x") is None and catalog.get("./a") is None


def test_errors_are_the_entrys_own(folder):
    catalog = Catalog(lambda: folder, _load)
    with pytest.raises(SpecError, match="broken.yaml: size = 'big': expected an integer"):
        catalog.get("broken")
    with pytest.raises(SpecError, match="renamed.yaml: name = 'other': expected the file's stem 'renamed'"):
        catalog.get("renamed")
    with pytest.raises(SpecError, match="broken.yaml"):
        catalog.entries()  # a listing validates every file


def test_entries_are_in_file_name_order(folder):
    (folder / "broken.yaml").unlink()
    (folder / "renamed.yaml").unlink()
    catalog = Catalog(lambda: folder, _load)
    assert list(catalog.entries()) == ["a-b", "a", "b"] == list(catalog.names)  # "a-b.yaml" < "a.yaml"


def test_a_missing_folder_is_an_empty_catalog(tmp_path):
    catalog = Catalog(lambda: tmp_path / "none", _load)
    assert catalog.names == () and catalog.entries() == {} and catalog.get("a") is None


def test_no_gpu_name_is_also_an_alias():
    """``get_gpu`` tries a name before the aliases: the same answer as aliases first only while no alias is a
    name, and no alias names two GPUs."""
    gpus = [*list_gpus(), *list_gpu_variants()]
    names = {gpu.name for gpu in gpus}
    aliases = [alias for gpu in gpus for alias in gpu.aliases]
    assert not names & set(aliases) and len(aliases) == len(set(aliases))



def test_the_alias_scan_reads_what_validation_reads():
    """``get_gpu("h200")`` reads each file's one-line aliases list instead of validating the whole catalog: on
    the shipped files it must give what the validated entries declare; other forms fall back to the loader."""
    from workbench import hardware
    gpus = [*list_gpus(), *list_gpu_variants()]
    assert hardware._aliases() == {alias: gpu.name for gpu in gpus for alias in gpu.aliases}
    assert hardware._FLOW_ALIASES.findall("name: x\naliases: [h9, h9-sxm]  # both\n") == ["h9, h9-sxm"]
    assert hardware._FLOW_ALIASES.findall("name: x\naliases:\n  - h9\n") == []  # a block list: loaded whole
    texts = [path.read_text() for path in sorted((REPO / "specs" / "gpus").rglob("*.yaml"))] + [
        "aliases: [a]\n", "x: 1\n  aliases: [b]\naliases: [c]\n", "note: aliases: [d]\naliases: [e, f]\naliases: [g]",
        "aliases: [h\n", "aliases:[i] # x\n", "xaliases: [j]\n", "aliases: [k]x\n"]
    for text in texts:  # the str.find scan finds what the regex finds
        assert hardware._flow_alias_lines(text) == hardware._FLOW_ALIASES.findall(text), text


AUDIT = textwrap.dedent("""
    import json, sys
    opened = {"import": [], "predict": []}
    phase = ["import"]
    def audit(event, args):
        if event == "open" and phase[0] in opened and str(args[0]).endswith((".yaml", ".yml", ".json")):
            opened[phase[0]].append(str(args[0]))
    sys.addaudithook(audit)
    import workbench
    phase[0] = "predict"
    workbench.predict("llama3-405b", sys.argv[1], micro_batch=1, seq_len=8192, gpus=64, stack=sys.argv[2])
    phase[0] = "done"
    print(json.dumps(opened))
""")


@pytest.mark.parametrize("gpu,stack", [("h200-sxm", "torchtitan"), ("h200-sxm", "ideal")])
def test_a_fresh_process_reads_only_what_its_first_predict_names(gpu, stack, tmp_path):
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", AUDIT, gpu, stack], capture_output=True, text=True, env=env,
                          cwd=REPO, check=True)
    opened = json.loads(done.stdout.strip().splitlines()[-1])
    assert opened["import"] == []  # importing parses no catalog
    assert sorted(Path(p).name for p in opened["predict"]) == sorted(
        {"efficiency.yaml", f"{gpu}.yaml", "llama3-405b.yaml", f"{stack}.yaml"})
