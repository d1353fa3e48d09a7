"""Errors that tell the user what was wrong, where, and what was expected."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable


class WorkbenchError(ValueError):
    """Base class: every error the workbench raises on bad input is one of these."""


class SpecError(WorkbenchError):
    """A value in a spec (file, dict or argument) is missing or invalid.

    The message names the origin (a file path or "<dict>"), the dotted field path, the value found and
    what was expected, e.g. ``specs/gpus/x.yaml: memory.hbm_bandwidth_tb_s = -1: expected a number > 0``.
    """

    def __init__(self, origin: str, field: str, value: object, expected: str):
        self.origin, self.field, self.value, self.expected = origin, field, value, expected
        shown = "<missing>" if value is _MISSING else excerpt(value)
        super().__init__(f"{origin}: {field} = {shown}: expected {expected}")


_EXCERPT = reprlib.Repr()  # bounded at every level: a value of 10^9 nested nodes is never walked
_EXCERPT.maxlevel, _EXCERPT.maxlist, _EXCERPT.maxtuple, _EXCERPT.maxdict = 3, 6, 6, 6
_EXCERPT.maxset = _EXCERPT.maxfrozenset = _EXCERPT.maxdeque = _EXCERPT.maxarray = 6
_EXCERPT.maxstring, _EXCERPT.maxother, _EXCERPT.maxlong = 100, 100, 60


def excerpt(value: object, limit: int = 120) -> str:
    """``repr(value)`` cut to about ``limit`` characters, without walking a huge nested value."""
    text = _EXCERPT.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class UnknownNameError(WorkbenchError, KeyError):
    """A registry lookup (GPU, model, precision, op) got a name it does not know."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        close = difflib.get_close_matches(str(name)[:200].lower(), self.valid, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        super().__init__(f"unknown {kind} {excerpt(name)}.{hint} Valid {kind}s: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would otherwise quote the whole message
        return self.args[0]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
MISSING = _MISSING
