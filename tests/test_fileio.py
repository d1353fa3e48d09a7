"""The bounded loader and the safe writer (``workbench.fileio``), under hostile input and racing processes."""

import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workbench import fileio
from workbench.errors import SpecError, WorkbenchError
from workbench.fileio import OutputError, OutputExistsError, load_yaml, parse_json, parse_yaml, read_text, write_text

REPO = Path(__file__).resolve().parents[1]
LAUGHS = REPO / "tests" / "data" / "bad" / "loader" / "billion_laughs.yaml"


def _temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if fileio._TEMP_MARK in p.name)


# --- reading ----------------------------------------------------------------------------------------------------

def test_billion_laughs_is_refused_fast_through_every_yaml_reader():
    from workbench.hardware import load_gpu
    from workbench.recipe import load_recipe, loads

    start = time.perf_counter()
    for read in (load_yaml, load_gpu, load_recipe, lambda p: loads(Path(p).read_text())):
        with pytest.raises(SpecError, match="aliases"):
            read(LAUGHS)
    assert time.perf_counter() - start < 2


def test_an_anchor_alone_and_merge_keys_are_refused_with_the_line():
    with pytest.raises(SpecError, match="line 2, column 4: YAML anchors and aliases"):
        parse_yaml("a: 1\nb: &x 2\n", "spec.yaml")
    with pytest.raises(SpecError, match="aliases"):
        parse_yaml("base: {k: 1}\nother:\n  <<: *base\n", "spec.yaml")


def test_a_50_mb_file_is_refused_by_its_size_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(50 * fileio.MiB)  # sparse: the test writes nothing
    start = time.perf_counter()
    with pytest.raises(SpecError, match="over the 8 MiB limit"):
        load_yaml(big)
    assert time.perf_counter() - start < 0.5
    assert len(read_text(big, max_bytes=64 * fileio.MiB)) == 50 * fileio.MiB  # a larger limit where asked


def test_a_pipe_is_read_bounded():
    read, write = os.pipe()
    with os.fdopen(write, "wb") as handle:
        handle.write(b"x" * 2048)
    with pytest.raises(SpecError, match="more than 1024 bytes"):
        read_text(f"/proc/self/fd/{read}", max_bytes=1024)
    os.close(read)


def test_utf8_with_a_byte_order_mark_is_accepted(tmp_path):
    csv = tmp_path / "rows.csv"
    csv.write_bytes("\ufeffop,m,n,k,dtype\ngemm,64,64,64,bf16\n".encode())
    assert fileio.read_csv_text(csv).startswith("op,m")
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"\xef\xbb\xbfname: x\n")
    assert load_yaml(spec) == {"name": "x"}
    assert parse_json("\ufeff{}", "x") == {}


def test_a_spreadsheet_csv_with_a_bom_runs_through_the_cli(tmp_path, capsys):
    from workbench.cli import main

    csv = tmp_path / "rows.csv"
    csv.write_bytes(b"\xef\xbb\xbfop,m,n,k,dtype\r\ngemm,4096,4096,4096,bf16\r\n")
    assert main(["predict-ops", str(csv), "--gpu", "h200"]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()
    assert header.startswith("op,") and float(row.split(",")[-1]) > 0


def test_latin1_is_refused_with_the_byte_offset(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_yaml(path)
    message = str(info.value)
    assert str(path) in message and "offset 9" in message and "0xe9" in message and "expected UTF-8 text" in message


def test_missing_folder_and_unparseable_files_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_text(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a folder"):
        read_text(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecError, match="a folder on this path is a file"):
        read_text(tmp_path / "file" / "below.yaml")
    with pytest.raises(SpecError, match=r"bad\.json: line 1, column 2: expected valid JSON"):
        parse_json("{,}", "bad.json")
    with pytest.raises(SpecError, match="nested too deeply"):
        parse_json("[" * 100_000, "deep.json")
    with pytest.raises(SpecError, match="nested too deeply"):
        parse_yaml("[" * 100_000, "deep.yaml")


def _pure_python(text: str):
    return fileio.yaml.load(text, Loader=fileio.NoAliasSafeLoader)


@pytest.mark.skipif(fileio._LibyamlParser is None, reason="PyYAML without libyaml: one loader only")
def test_every_shipped_spec_parses_the_same_through_libyaml_and_pure_python():
    files = sorted((REPO / "specs").rglob("*.yaml")) + sorted((REPO / "tests" / "data").rglob("*.yaml"))
    fast = readable = 0
    for path in files:
        try:
            text = read_text(path)
        except SpecError:  # tests/data/bad: dangling links, Latin-1
            continue
        readable += 1
        parsed = fileio._parse_fast(text)
        if parsed is fileio._NOT_FAST:
            continue
        fast += 1
        assert repr(parsed) == repr(_pure_python(text)), path  # repr: int vs float, key order, nested types
    assert fast >= readable - 2  # the billion-laughs file (aliases) is the pure-Python loader's


@pytest.mark.skipif(fileio._LibyamlParser is None, reason="PyYAML without libyaml: one loader only")
@pytest.mark.parametrize("text", ["a: &x 1\n", "a: [*x]\n", "- &x [1]\n- *x\n", "k: 'x & y * z'\n" + "[" * 70])
def test_anchors_aliases_and_errors_go_to_the_pure_python_loader(text):
    assert fileio._parse_fast(text) is fileio._NOT_FAST


@pytest.mark.skipif(fileio._LibyamlParser is None, reason="PyYAML without libyaml: one loader only")
@pytest.mark.parametrize("text", [
    "a: 2024-01-02\nb: 1_000\nc: .inf\nd: yes\ne: ~\nf: 0x1F\ng: '1'\nh: 1:30\ni: -1.5e3\nj: \"\"\nk:\n",
    "1: a\n1.0: b\ntrue: c\n~: d\n", "a: 1\nb: 2\na: 3\n", "[a, {b: c}, [d, []], {}]", "x\n", "", "# only a comment\n",
    "--- !!map\na: !!str 1\nb: !!float 2\nc: !!binary aGk=\nd: ! 3\ne: !!seq [1]\n", "? a\n: b\n",
    "s: |\n  two\n  lines\nf: >\n  folded\n  text\n"])
def test_libyaml_builds_the_values_pyyaml_builds(text):
    assert repr(fileio._parse_fast(text)) == repr(_pure_python(text))


@pytest.mark.skipif(fileio._LibyamlParser is None, reason="PyYAML without libyaml: one loader only")
@pytest.mark.parametrize("text", ["<<: {a: 1}\nb: 2\n", "a: =\n", "? [1]\n: 2\n", "? {a: 1}\n: 2\n", "a: !custom 1\n",
                                  "a: !!omap [b: 1]\n", "a: 1\n---\nb: 2\n", "a: [1\n"])
def test_what_is_not_plain_goes_to_the_pure_python_loader(text):
    assert fileio._parse_fast(text) is fileio._NOT_FAST


@pytest.mark.skipif(fileio._LibyamlParser is None, reason="PyYAML without libyaml: one loader only")
def test_libyaml_takes_nesting_up_to_its_depth_limit_only():
    too_deep = "[" * (fileio.FAST_MAX_DEPTH + 1) + "]" * (fileio.FAST_MAX_DEPTH + 1)
    assert fileio._parse_fast(too_deep) is fileio._NOT_FAST and parse_yaml(too_deep, "x.yaml") == _pure_python(too_deep)
    deepest = "[" * (fileio.FAST_MAX_DEPTH - 1) + "1" + "]" * (fileio.FAST_MAX_DEPTH - 1)  # FAST_MAX_DEPTH nodes
    assert fileio._parse_fast(deepest) == _pure_python(deepest)


def test_without_libyaml_every_document_takes_the_pure_python_loader(monkeypatch):
    monkeypatch.setattr(fileio, "_LibyamlParser", None)
    assert parse_yaml("a: [1, 2.5, x, true, null]\n", "spec.yaml") == {"a": [1, 2.5, "x", True, None]}
    with pytest.raises(SpecError, match="line 2, column 4: YAML anchors and aliases"):
        parse_yaml("a: 1\nb: &x 2\n", "spec.yaml")


def test_error_messages_excerpt_huge_values():
    value = ["lol"] * 9
    for _ in range(30):  # 9^30 nodes if walked: the excerpt must not walk them
        value = [value] * 9
    start = time.perf_counter()
    message = str(SpecError("x.yaml", "a", value, "a number"))
    assert time.perf_counter() - start < 0.1 and len(message) < 250
    assert len(str(SpecError("x.yaml", "a", "y" * 10_000_000, "a number"))) < 250
    assert str(SpecError("x.yaml", "a", -1, "a number > 0")) == "x.yaml: a = -1: expected a number > 0"


# --- writing ----------------------------------------------------------------------------------------------------

def test_write_refuses_to_overwrite_without_asking_and_keeps_the_mode(tmp_path):
    path = write_text(tmp_path / "out.yaml", "a\n")
    assert path.read_text() == "a\n" and path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    with pytest.raises(OutputExistsError, match="pass --force to replace it") as info:
        write_text(path, "b\n")
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, WorkbenchError)
    path.chmod(0o600)
    write_text(path, "b\n", overwrite=True)
    assert path.read_text() == "b\n" and path.stat().st_mode & 0o777 == 0o600
    assert not _temp_files(tmp_path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("target,expected", [("{tmp}", "is a folder"), (".", "is a folder"),
                                             ("{tmp}/", "is a folder"), ("{tmp}/file/below.yaml", "is a file, not a folder"),
                                             ("{tmp}/file/deeper/below.yaml", "is a file, not a folder"),
                                             ("/dev/null", "character device")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_bad_targets_are_refused_with_clear_errors(tmp_path, monkeypatch, target, expected, overwrite):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("mine")
    with pytest.raises(OutputError, match=expected) as info:
        write_text(target.replace("{tmp}", str(tmp_path)), "x", overwrite=overwrite)
    assert "pass --force" not in str(info.value)
    assert (tmp_path / "file").read_text() == "mine"


def test_special_files_are_never_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for overwrite in (False, True):
        with pytest.raises(OutputError, match="FIFO") as info:
            write_text(fifo, "x", overwrite=overwrite)
        assert "pass --force" not in str(info.value)
    assert fifo.is_fifo()
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)
    with pytest.raises(OutputError, match=r"\(a symlink\) is a FIFO"):
        write_text(link, "x", overwrite=True)


def test_a_dangling_symlink_counts_as_an_existing_file(tmp_path):
    link = tmp_path / "out.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(OutputExistsError, match="dangling symlink.*pass --force"):
        write_text(link, "x")
    assert link.is_symlink() and not (tmp_path / "gone.yaml").exists()
    write_text(link, "x", overwrite=True)  # replaces the link itself, never writes through it
    assert not link.is_symlink() and link.read_text() == "x" and not (tmp_path / "gone.yaml").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders (the path-under-a-file case "
                                              "in test_bad_targets covers what root cannot bypass)")
def test_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    try:
        for overwrite in (False, True):
            with pytest.raises(OutputError, match="read-only or not writable") as info:
                write_text(folder / "out.yaml", "x", overwrite=overwrite)
            assert "--force" not in str(info.value)
    finally:
        folder.chmod(0o755)


def test_an_unwritable_folder_is_refused_before_writing(tmp_path, monkeypatch):
    """What root cannot see for real (it writes anyway): the check os.access makes, simulated."""
    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setattr(fileio.os, "access", lambda path, mode: Path(path) != folder)
    with pytest.raises(OutputError, match="read-only or not writable") as info:
        write_text(folder / "sub" / "out.yaml", "x", overwrite=True)
    assert "--force" not in str(info.value) and not (folder / "sub").exists()


def test_nothing_is_written_inside_the_shipped_specs_without_the_escape_hatch(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    (specs / "calibration").mkdir(parents=True)
    monkeypatch.setattr("workbench._data.specs_dir", lambda: specs)
    monkeypatch.delenv(fileio.SPECS_WRITE_ENV, raising=False)
    target = specs / "calibration" / "h200-sxm.yaml"
    with pytest.raises(OutputError, match="shipped data") as info:
        write_text(target, "x", overwrite=True)
    assert fileio.SPECS_WRITE_ENV in str(info.value) and not target.exists()
    with pytest.raises(OutputError, match="shipped data"):  # through a symlinked folder too
        (tmp_path / "alias").symlink_to(specs)
        write_text(tmp_path / "alias" / "new.yaml", "x")
    with fileio.allow_specs_write():
        write_text(target, "x")
    assert target.read_text() == "x" and fileio.SPECS_WRITE_ENV not in os.environ


def _race(args) -> str:
    path, barrier = args
    barrier.wait()
    try:
        write_text(path, f"{os.getpid()}\n" * 1000)
    except OutputExistsError as exc:
        return str(exc)
    return "ok"


def test_of_ten_racing_writers_exactly_one_wins(tmp_path):
    path = tmp_path / "recipe.yaml"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(10)
    with ctx.Pool(10) as pool:
        results = pool.map(_race, [(path, barrier)] * 10)
    assert results.count("ok") == 1, results
    assert all("exists: pass --force" in r for r in results if r != "ok")
    lines = path.read_text().splitlines()
    assert len(lines) == 1000 and len(set(lines)) == 1  # one writer's whole text
    assert not _temp_files(tmp_path)


def _replace(args) -> None:
    path, barrier, n = args
    barrier.wait()
    for _ in range(5):
        write_text(path, "".join(f"{os.getpid()},{i}\n" for i in range(n)), overwrite=True)


def test_racing_replacing_writers_never_mix_their_rows(tmp_path):
    """The bench cache's case: every writer replaces, readers see one writer's whole file."""
    path = tmp_path / "cache.csv"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(8)
    with ctx.Pool(8) as pool:
        pool.map(_replace, [(path, barrier, 20_000)] * 8)
    rows = path.read_text().splitlines()
    assert len(rows) == 20_000 and len({row.split(",")[0] for row in rows}) == 1
    assert not _temp_files(tmp_path)


SLOW_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from workbench import fileio

    def slow_fsync(fd):  # the write is in the temp file: say so, then hang there
        Path(sys.argv[2]).write_text("writing")
        time.sleep(60)

    os.fsync = slow_fsync
    fileio.write_text(sys.argv[1], "x" * 1_000_000)
""")


def _start_slow_writer(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    flag = tmp_path / "flag"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(tmp_path / "out" / "metrics.json"), str(flag)],
                             env=env)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.05)
    return child, tmp_path / "out"


def test_kill_9_mid_write_leaves_a_temp_file_the_next_write_sweeps(tmp_path):
    child, out = _start_slow_writer(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    left = _temp_files(out)
    assert len(left) == 1 and not (out / "metrics.json").exists()
    write_text(out / "metrics.json", "{}\n")
    assert not _temp_files(out) and (out / "metrics.json").read_text() == "{}\n"


def test_sigterm_mid_write_removes_the_temp_file(tmp_path):
    child, out = _start_slow_writer(tmp_path)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM  # still dies by the signal
    assert not _temp_files(out) and not (out / "metrics.json").exists()


def test_sweep_removes_dead_and_old_temp_files_only(tmp_path):
    target = tmp_path / "out.yaml"
    dead = tmp_path / f".out.yaml{fileio._TEMP_MARK}999999999-abcd1234"
    old = tmp_path / f".out.yaml{fileio._TEMP_MARK}{os.getpid()}-00000000"
    live = tmp_path / f".out.yaml{fileio._TEMP_MARK}{os.getpid()}-11111111"
    other = tmp_path / f".other.yaml{fileio._TEMP_MARK}999999999-abcd1234"
    mine = tmp_path / ".out.yaml.backup"
    for path in (dead, old, live, other, mine):
        path.write_text("x")
    os.utime(old, (time.time() - 2 * fileio.STALE_TEMP_S,) * 2)
    assert sorted(fileio.sweep_temp_files(target)) == sorted([dead, old])
    assert live.exists() and other.exists() and mine.exists()


# --- calibration profiles: the user's folder, never the package ---------------------------------------------------

MEASURED = ("op,m,n,k,dtype,measured_ms\n"
            "gemm,4096,4096,4096,bf16,0.25\n"
            "gemm,8192,8192,8192,bf16,1.9\n"
            "gemm,1024,1024,1024,bf16,0.02\n")


def test_calibrate_writes_the_user_profile_and_never_the_shipped_one(tmp_path, monkeypatch, capsys):
    from workbench.cli import main
    from workbench.hardware import get_gpu
    from workbench.paths import shipped_calibration_dir
    from workbench.perf.efficiency import constants_for

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKBENCH_CALIBRATION_DIR", raising=False)
    monkeypatch.delenv(fileio.SPECS_WRITE_ENV, raising=False)
    shipped = shipped_calibration_dir() / "h200-sxm.yaml"
    before = hashlib.sha256(shipped.read_bytes()).hexdigest()
    rows = tmp_path / "measured.csv"
    rows.write_text(MEASURED)
    h200 = get_gpu("h200")
    assert constants_for(h200, calibrated=True).profile == str(shipped)

    assert main(["calibrate", str(rows), "--gpu", "h200"]) == 0
    user = tmp_path / "home" / "calibration" / "h200-sxm.yaml"
    assert str(user) in capsys.readouterr().out and user.is_file()
    assert constants_for(h200, calibrated=True).profile == str(user)  # the user's profile comes first
    assert "link_efficiency" in load_yaml(user)["kept_from_previous"]  # the shipped fit's other constants kept

    assert main(["calibrate", str(rows), "--gpu", "h200"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["calibrate", str(rows), "--gpu", "h200", "--force"]) == 0
    assert main(["calibrate", str(rows), "--gpu", "h200", "--out", str(shipped), "--force"]) == 2
    assert "shipped data" in capsys.readouterr().err
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == before


def test_the_user_folder_honours_xdg_config_home(tmp_path, monkeypatch):
    from workbench import paths

    monkeypatch.delenv("WORKBENCH_HOME", raising=False)
    monkeypatch.delenv("WORKBENCH_CALIBRATION_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert paths.user_calibration_dir() == tmp_path / "workbench" / "calibration"
    assert paths.calibration_dirs() == [tmp_path / "workbench" / "calibration", paths.shipped_calibration_dir()]
    monkeypatch.setenv("WORKBENCH_CALIBRATION_DIR", str(tmp_path / "one"))
    assert paths.calibration_dirs() == [tmp_path / "one"]


def test_train_metrics_are_not_replaced_without_force(tmp_path, capsys):
    from workbench.train.__main__ import main

    metrics = tmp_path / "metrics.json"
    metrics.write_text("mine")
    assert main(["--recipe", str(tmp_path / "no-such-recipe.yaml"), "--metrics", str(metrics)]) == 2
    assert "pass --force" in capsys.readouterr().err and metrics.read_text() == "mine"  # refused before the run
