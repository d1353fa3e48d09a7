"""What-if fit of one constant for the megatron stacks on Blackwell (issue 17, NeMo B200/GB200 lean); writes nothing.

    .venv/bin/python benchmarks/published/te_fp8_blackwell_fit.py

The constant: a factor on the sustained fp8 GEMM fraction (``gemm_fraction.fp8``) of B200 and GB200 under the
TransformerEngine stacks (``megatron``, ``megatron-fp8cs``). The split (``te_fp8_blackwell_split.json``) was
written before the fit: every row the constant touches, sorted by id, even positions fit, odd positions test. The
factor is chosen on the fit rows only (grid 0.50-1.05, step 0.01, least MAPE); the test rows' errors are printed
apart. The stacks now carry the fitted factor (``gemm_fraction_scale.fp8.blackwell`` in specs/stacks/megatron.yaml,
``Stack.gemm_constants``); here each trial factor reaches predictions through ``predict(..., constants=...)``, and
given constants are used as they are (the stack's own factor is not applied over them): factor 1.0 is the model
without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import evaluate as ev  # noqa: E402
from workbench.fileio import load_yaml, read_text  # noqa: E402
from workbench.hardware import get_gpu  # noqa: E402
from workbench.perf.efficiency import constants_for  # noqa: E402
from workbench.predict import predict  # noqa: E402

SPLIT = HERE / "te_fp8_blackwell_split.json"
GRID = [round(0.50 + 0.01 * k, 2) for k in range(56)]
TE_1747_FACTOR = 0.901
"""Derived, not fitted: TransformerEngine issue #1747 (HGX B200, 2025-05-03), 'FP8 TE.Linear (autocast,
bias=False)' 8192^3: 2377.1 TFLOP/s = 0.4625 ms; less the two casts as the model prices them (2 x 201 MB at
0.87 x 7.7 TB/s + 4 us each = 68 us) the GEMM runs 0.3945 ms against the model's 0.3554 ms: 0.901."""


def errors(calls: dict, rows: dict, factor: float, ids: list[str]) -> dict[str, float]:
    out = {}
    for rid in ids:
        model, gpu, cfg, stack, compile_ = calls[rid]
        base = constants_for(get_gpu(gpu))
        constants = base.with_values({"gemm_fraction.fp8": base["gemm_fraction.fp8"] * factor}, "fitted")
        p = predict(model, gpu, cfg, stack=stack, compile=compile_, constants=constants)
        out[rid] = ev.metric_value(p, rows[rid]["metric"]) / float(rows[rid]["value"]) - 1
    return out


def mape(errs: dict[str, float]) -> float:
    return sum(abs(e) for e in errs.values()) / len(errs)


def main() -> int:
    split = json.loads(read_text(SPLIT))
    mapping = ev.validate_mapping(load_yaml(ev.MAPPING, what="row mapping"))
    table = ev.ROOT.parent / "shared" / "reference" / "published" / "training_throughput.csv"
    rows = {r["id"]: r for r in ev.load_table(table)}
    calls = {rid: ev.build_call(rows[rid], mapping) for rid in split["fit_ids"] + split["test_ids"]}
    best = min(GRID, key=lambda f: mape(errors(calls, rows, f, split["fit_ids"])))
    for name in ("fit", "test"):
        ids = split[f"{name}_ids"]
        before, after = errors(calls, rows, 1.0, ids), errors(calls, rows, best, ids)
        derived = errors(calls, rows, TE_1747_FACTOR, ids)
        print(f"{name} rows: MAPE {mape(before):.1%} -> {mape(after):.1%} at the fitted factor {best} "
              f"({mape(derived):.1%} at TE #1747's {TE_1747_FACTOR})")
        for rid in ids:
            print(f"  {rid:28s} {before[rid]:+7.1%} -> {after[rid]:+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
