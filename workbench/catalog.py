"""A catalog folder (``specs/gpus``, ``specs/models``, ``specs/stacks``) read one entry at a time.

``get(name)`` reads and validates only ``NAME.yaml``; ``entries()`` reads every file, for the listings
(``workbench gpus``, ``list_models``). Each file is parsed and validated once per process, and the folder is
listed once per process, as the whole-catalog caches before it did. A fresh process's first ``predict`` so reads
the GPU, model and stack it names, not the 40 files of the shipped catalogs (issue 16: < 20 ms cold).

    >>> from workbench._data import specs_dir
    >>> from workbench.models import load_model
    >>> models = Catalog(lambda: specs_dir() / "models", load_model)
    >>> models.get("llama3-8b").num_layers, models.get("no-such-model")
    (32, None)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Generic, TypeVar

from workbench.errors import SpecError

Entry = TypeVar("Entry")


class Catalog(Generic[Entry]):
    """The ``*.yaml`` files of one folder, by file stem, each loaded through ``load`` when first asked for."""

    def __init__(self, folder: Callable[[], Path], load: Callable[[Path], Entry]):
        self._folder = folder
        self._load = load
        self._entries: dict[str, Entry] = {}

    @cached_property
    def folder(self) -> Path:
        return self._folder()

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Every entry's name (its file's stem), in file-name order; none for a missing folder."""
        try:
            files = os.listdir(self.folder)  # a tenth of a pathlib glob's time; names sort as their paths did
        except (FileNotFoundError, NotADirectoryError):
            return ()
        return tuple(file[:-len(".yaml")] for file in sorted(files) if file.endswith(".yaml") and file != ".yaml")

    def __contains__(self, name: object) -> bool:
        return name in self._name_set

    @cached_property
    def _name_set(self) -> frozenset[str]:
        return frozenset(self.names)

    def get(self, name: str) -> Entry | None:
        """The entry ``name`` (validated; its ``name`` must be its file's stem), None when no file has that stem.
        Only the listed stems are read: a name with a path in it (``../models/x``) is no entry."""
        if name not in self._name_set:
            return None
        entry = self._entries.get(name)
        if entry is None:
            path = self.folder / f"{name}.yaml"
            entry = self._load(path)
            if entry.name != name:
                raise SpecError(str(path), "name", entry.name, f"the file's stem {name!r}")
            self._entries[name] = entry
        return entry

    def entries(self) -> dict[str, Entry]:
        """Every entry by name, in file-name order (each file read and validated, once per process)."""
        return {name: self.get(name) for name in self.names}
