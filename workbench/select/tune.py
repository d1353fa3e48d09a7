"""Model-guided tuning: benchmark the selector's candidates best-first, learn from each timing, stop early.

The automated, microarchitecture-aware tuning of the seed study without a language model: rank the whole
config space with the analytical model, benchmark the predicted-fastest config, then correct the predictions of
the configs not yet measured by what the measured ones taught (measured / predicted, averaged over the measured
configs that share tile shape, K depth, warps and stages with it, weighted by how much they share), re-rank and
go on, until ``patience`` benchmarks in a row have not improved the best by more than ``min_gain``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.select import Candidate, rank_configs
from workbench.select.gemm import config_key

SIMILARITY_WEIGHTS = {("BLOCK_M", "BLOCK_N"): 4.0, ("BLOCK_K",): 1.0, ("num_warps",): 1.0, ("num_stages",): 1.0}
"""How much a measured config's error tells about another: sharing the tile shape counts most. A guess."""


@dataclass
class TuneResult:
    best: dict
    best_s: float
    history: list[tuple[dict, float, float]] = field(default_factory=list)
    """(config, measured seconds, best so far) per benchmark, in order."""
    predicted_first: Candidate | None = None

    @property
    def benchmarks(self) -> int:
        return len(self.history)

    def benchmarks_to_reach(self, target_s: float) -> int | None:
        """How many benchmarks it took until the best so far was at most ``target_s`` (None: never)."""
        for i, (_, _, best) in enumerate(self.history, 1):
            if best <= target_s:
                return i
        return None


def _similarity(a: dict, b: dict) -> float:
    return sum(w for keys, w in SIMILARITY_WEIGHTS.items() if all(a.get(k) == b.get(k) for k in keys))


def tune(op: str, shape: dict, dtype: str, gpu, measure: Callable[[dict], float], *, layout: str = "nn",
         patience: int = 3, min_gain: float = 0.005, max_benchmarks: int | None = None,
         calibrated: bool = True, gluon: bool = True, tma: bool = True, split_k: bool = True) -> TuneResult:
    """Benchmark configs best-predicted first; ``measure(config)`` returns seconds (math.inf if it fails).
    ``gluon=False`` / ``tma=False`` / ``split_k=False`` leave the Gluon fp8 / TMA / split-K configs out (as
    ``rank_configs``)."""
    if patience < 1:
        raise WorkbenchError(f"patience: got {patience!r}, expected a positive integer")
    ranked = rank_configs(op, shape, dtype, gpu, layout=layout, calibrated=calibrated, gluon=gluon, tma=tma,
                          split_k=split_k)
    predicted = {config_key(c.config): c.time_s for c in ranked}
    pending = {config_key(c.config): c.config for c in ranked}
    result = TuneResult(best=ranked[0].config, best_s=math.inf, predicted_first=ranked[0])
    ratios: list[tuple[dict, float]] = []  # (measured config, log(measured / predicted))
    stale = 0
    limit = max_benchmarks or len(ranked)
    while pending and len(result.history) < limit and stale < patience:
        def corrected(key: str) -> float:
            config = pending[key]
            weights = [(_similarity(config, c), r) for c, r in ratios]
            total = sum(w for w, _ in weights) + 1.0  # the model itself counts as one unit of evidence (ratio 1)
            return predicted[key] * math.exp(sum(w * r for w, r in weights) / total)
        key = min(pending, key=corrected)
        config = pending.pop(key)
        seconds = measure(config)
        if math.isfinite(seconds) and seconds > 0:
            ratios.append((config, math.log(seconds / predicted[key])))
        improved = seconds < result.best_s * (1 - min_gain)
        if seconds < result.best_s:
            result.best, result.best_s = config, seconds
        stale = 0 if improved else stale + 1
        result.history.append((config, seconds, result.best_s))
    return result
