"""The step's running sums over a micro-batch's priced parts, made once per prefix of parts
(``workbench.step.StepModel``).

``workbench.step`` sums each field of the priced ops (compute-bound seconds, memory-bound seconds, FLOPs, ...) left
to right over the micro-batch's parts, each term seconds x executions, so that every path gives the same bits. A
part's additions depend on the sums before it, so they cannot be made once per part; but the graphs of one recipe
search begin alike (the checkpointing modes differ only in their recomputed blocks, the shardings not at all), so
the sums after each prefix of parts are kept and a prefix two graphs share is added once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

PREFIX_LIMIT = 50_000
"""Prefixes kept before the memo starts over (a long-lived step model: the widget's)."""


def part_sums(sums: tuple, part, fields: Sequence[str], k: int) -> tuple:
    """``sums`` (one per name in ``fields``) carried on over the (value, count) pairs of ``part``'s field of that
    name, each term value x (count x ``k``): the additions of a left-to-right sum, in its order."""
    out = []
    for s, field in zip(sums, fields, strict=True):
        for t, n in getattr(part, field):
            s += t * (n * k)
        out.append(s)
    return tuple(out)


class PrefixSums:
    """The running sums of ``fields`` over a micro-batch's (priced part, copies) pairs, each term x its part's
    copies; the sums after each prefix of parts cached by the prefix's number, the part and its copies (the part
    rides in the cached value, so its id stays its own while the entry lives)."""

    def __init__(self, fields: Sequence[str]):
        self.fields = tuple(fields)
        self._zero = (0,) * len(self.fields)  # an empty field sums to the int 0, as a plain left-to-right sum
        self._prefixes: dict[tuple, tuple] = {}
        self._numbers = itertools.count(1)  # 0 is the empty prefix; numbers are never reused, even after a clear

    def __call__(self, micro: Sequence[tuple[object, int]]) -> tuple:
        prefixes = self._prefixes
        if len(prefixes) > PREFIX_LIMIT:
            prefixes.clear()
        prefix, sums = 0, self._zero
        for part, copies in micro:
            key = (prefix, id(part), copies)
            hit = prefixes.get(key)
            if hit is None:
                hit = prefixes[key] = (next(self._numbers), part_sums(sums, part, self.fields, copies), part)
            prefix, sums = hit[0], hit[1]
        return sums
