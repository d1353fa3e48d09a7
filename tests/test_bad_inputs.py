"""The catalogue of malformed inputs (tests/data/bad/*/cases.yaml): each must end in a clear error, in time.

The format is described in tests/data/bad/README.md. A case that raises anything but a ``WorkbenchError``
(a traceback for the user), exits with another code, runs past its time limit, or words its error without
the expected text fails here.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import signal
from pathlib import Path

import pytest
import yaml

from workbench.errors import WorkbenchError

BAD = Path(__file__).parent / "data" / "bad"
ENTRY_POINTS = ("cli", "train", "api")


def _cases() -> list:
    params = []
    for manifest in sorted(BAD.glob("*/cases.yaml")):
        for case in yaml.safe_load(manifest.read_text(encoding="utf-8")) or []:
            params.append(pytest.param(manifest.parent, case, id=f"{manifest.parent.name}/{case['name']}"))
    return params


def _fill(value, here: Path, tmp: Path):
    if isinstance(value, str):
        return value.replace("{here}", str(here)).replace("{tmp}", str(tmp))
    if isinstance(value, list):
        return [_fill(v, here, tmp) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, here, tmp) for k, v in value.items()}
    return value


def _make(spec: dict) -> None:
    path = Path(spec["file"])
    path.parent.mkdir(parents=True, exist_ok=True)
    if "bytes_hex" in spec:
        data = bytes.fromhex(spec["bytes_hex"])
    else:
        data = spec["text"].encode("utf-8")
    path.write_bytes(data * int(spec.get("repeat", 1)))


@contextlib.contextmanager
def _time_limit(seconds: float, name: str):
    def expired(signum, frame):
        raise TimeoutError(f"{name} ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(case: dict, capsys) -> str:
    """The error text the entry point gave (asserting the exit code), or a failure."""
    if "cli" in case or "train" in case:
        if "cli" in case:
            from workbench.cli import main

            argv, prefix = case["cli"], "workbench: error: "
        else:
            from workbench.train.__main__ import main

            argv, prefix = case["train"], "error: "
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert code == 2, f"exit code {code}, stderr: {err}"
        usage = "cli" in case and re.search(r"^workbench [\w-]+: error: argument ", err, re.M)  # argparse's form
        assert prefix in err or usage, f"no {prefix!r} line on stderr: {err}"
        return err
    module, _, function = case["api"].partition(":")
    call = getattr(importlib.import_module(module), function)
    with pytest.raises(WorkbenchError) as info:
        call(*case.get("args", []), **case.get("kwargs", {}))
    return str(info.value)


def test_catalogue_is_well_formed():
    names = set()
    for here, case in (p.values for p in _cases()):
        key = (here.name, case.get("name"))
        assert case.get("name") and key not in names, f"duplicate or missing name {key}"
        names.add(key)
        entries = [e for e in ENTRY_POINTS if e in case]
        assert len(entries) == 1, f"{key}: exactly one of {ENTRY_POINTS}, got {entries}"
        assert case.get("expect"), f"{key}: no expected error text"


@pytest.mark.parametrize(("here", "case"), _cases())
def test_bad_input_gives_clear_error(here: Path, case: dict, tmp_path: Path, capsys):
    case = _fill(case, here, tmp_path)
    for spec in ([case["make"]] if isinstance(case.get("make"), dict) else case.get("make", [])):
        _make(spec)
    with _time_limit(float(case.get("timeout_s", 10)), case["name"]):
        message = _run(case, capsys)
    assert "Traceback" not in message
    assert str(case["expect"]).lower() in message.lower(), f"expected {case['expect']!r} in: {message}"
    assert len(message) < 2000, f"error message of {len(message)} characters: excerpt long values"
