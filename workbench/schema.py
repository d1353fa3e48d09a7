"""Reading typed values out of parsed YAML/JSON with errors that name origin, field, value and expectation.

``Fields`` wraps one mapping; each accessor checks one key and raises ``SpecError`` on a bad value, and
``finish()`` rejects keys nobody asked for, so a typo (``bandwith``) fails loudly instead of being ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.errors import MISSING, SpecError
from workbench.fileio import load_yaml, write_text

__all__ = ["Fields", "check_number", "load_yaml", "write_atomic"]  # load_yaml: the bounded loader of fileio


class Fields:
    """Typed access to one mapping of a spec; ``path`` is the dotted location used in error messages."""

    def __init__(self, data: object, origin: str, path: str = ""):
        if not isinstance(data, Mapping):
            raise SpecError(origin, path or "<top>", data, "a mapping of keys to values")
        self.data, self.origin, self.path = data, origin, path
        self._seen: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, value: object, expected: str) -> SpecError:
        return SpecError(self.origin, self._where(key), value, expected)

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = MISSING) -> Any:
        self._seen.add(key)
        if key in self.data:
            return self.data[key]
        if default is MISSING:
            raise self.error(key, MISSING, "a value (this field is required)")
        return default

    def sub(self, key: str, default: Any = MISSING) -> Fields:
        value = self.raw(key, {} if default is not MISSING else MISSING)
        return Fields(value, self.origin, self._where(key))

    def string(self, key: str, choices: Sequence[str] | None = None, default: Any = MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value:
            raise self.error(key, value, "a non-empty string")
        if choices is not None and value not in choices:
            raise self.error(key, value, f"one of {', '.join(choices)}")
        return value

    def number(self, key: str, *, minimum: float | None = None, above: float | None = None,
               integer: bool = False, default: Any = MISSING) -> float:
        value = self.raw(key, default)
        return check_number(value, self.origin, self._where(key), minimum=minimum, above=above, integer=integer)

    def boolean(self, key: str, default: Any = MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, value, "true or false")
        return value

    def string_list(self, key: str, choices: Sequence[str] | None = None, default: Any = MISSING) -> tuple[str, ...]:
        value = self.raw(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, value, "a list of strings")
        for item in value:
            if choices is not None and item not in choices:
                raise self.error(key, item, f"items from {', '.join(choices)}")
        return tuple(value)

    def finish(self) -> None:
        """Reject keys this mapping has that the schema does not know."""
        unknown = [k for k in self.data if k not in self._seen]
        if unknown:
            known = ", ".join(sorted(self._seen)) or "none"
            raise self.error(str(unknown[0]), self.data[unknown[0]], f"no such field here (known fields: {known})")


def check_number(value: object, origin: str, field: str, *, minimum: float | None = None,
                 above: float | None = None, integer: bool = False) -> float:
    """``value`` as a finite number within bounds, or a ``SpecError`` naming ``field``."""
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value):
        raise SpecError(origin, field, value, "an integer" if integer else "a finite number")
    if minimum is not None and value < minimum:
        raise SpecError(origin, field, value, f"a number >= {minimum:g}")
    if above is not None and value <= above:
        raise SpecError(origin, field, value, f"a number > {above:g}")
    return value


def write_atomic(path: str | Path, text: str, *, overwrite: bool = True) -> Path:
    """``workbench.fileio.write_text`` with the old default (replace); new code calls ``write_text`` directly."""
    return write_text(path, text, overwrite=overwrite)
