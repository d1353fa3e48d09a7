"""The torchtitan long-context tables step by step: what one more ring step costs, published against predicted.

    .venv/bin/python benchmarks/published/cp_ring_steps.py        # prints a table, writes nothing

Every row of a CP series (torchtitan's Dec-2024 Table 2, 8B on 8 GPUs, and Table 6, 405B on 512) keeps 32,768
tokens per cp rank (seq_len / cp), so each ring step has the same shape at every cp: step 0 one causal s x s SDPA
call, each later step one non-causal s x s/2 call under load balancing (PyTorch's ``_templated_ring_attention`` of
that era). Going from cp_a to cp_b adds cp_b - cp_a such steps per attention call and nothing else that grows, so
(step(cp_b) - step(cp_a)) / (cp_b - cp_a) is the cost of one ring step per step, a figure the published table gives
without any model. The script prints it beside the model's (``evaluate.py``'s predictions of the same rows).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from workbench.fileio import load_yaml  # noqa: E402


def _load_evaluate():
    """``evaluate.py`` beside this script, loaded by path (as it loads its own siblings)."""
    name = "published_evaluate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("evaluate.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


evaluate = _load_evaluate()

SERIES: dict[str, tuple[str, ...]] = {
    "llama3-8b, 8 GPUs (Table 2)": tuple(f"TT-H100-8B-CP-{i}" for i in range(1, 5)),
    "llama3-405b, 512 GPUs (Table 6)": tuple(f"TT-H100-405B-CP-{i}" for i in range(1, 5)),
}
"""The CP series, in rising cp, by row id (benchmarks/published/rows.yaml)."""


def step_s(tokens_per_s_per_gpu: float, spec: dict) -> float:
    """One step's seconds from a TPS/GPU figure: the step's tokens per GPU over the rate."""
    gpus = spec["dp"] * spec["tp"] * spec["pp"] * spec["cp"]
    return spec["global_batch"] * spec["seq_len"] / gpus / tokens_per_s_per_gpu


@dataclass(frozen=True)
class RingStepRow:
    """One row of a CP series: its step, published and predicted, and the cost of each ring step it adds over
    the row before (None for the first)."""

    row_id: str
    cp: int
    published_s: float
    predicted_s: float
    published_per_added_step_s: float | None
    predicted_per_added_step_s: float | None

    @property
    def error(self) -> float:
        """The row's throughput error, predicted / published - 1 (evaluate.py's)."""
        return self.published_s / self.predicted_s - 1


def ring_steps(ids: tuple[str, ...], table: dict[str, dict[str, str]], mapping: dict) -> list[RingStepRow]:
    """The rows ``ids`` (rising cp) priced as ``evaluate.py`` prices them, with each one's added ring steps."""
    out: list[RingStepRow] = []
    for rid in ids:
        spec = mapping["rows"][rid]
        result = evaluate.evaluate_row(table[rid], mapping)
        if result.predicted is None:
            raise SystemExit(f"{rid}: not expressed ({result.reason})")
        published, predicted = step_s(result.published, spec), step_s(result.predicted, spec)
        added = spec["cp"] - out[-1].cp if out else 0
        if out and added <= 0:
            raise ValueError(f"{rid}: cp {spec['cp']} does not rise over {out[-1].row_id}'s {out[-1].cp}")
        out.append(RingStepRow(rid, spec["cp"], published, predicted,
                               (published - out[-1].published_s) / added if out else None,
                               (predicted - out[-1].predicted_s) / added if out else None))
    return out


def render(title: str, rows: list[RingStepRow]) -> str:
    lines = [f"\n{title}", "| row | cp | published step s | predicted step s | error | per added ring step, "
             "published s | predicted s | published / predicted |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        added = "- | - | -"
        if r.published_per_added_step_s is not None:
            added = (f"{r.published_per_added_step_s:.3f} | {r.predicted_per_added_step_s:.3f} | "
                     f"{r.published_per_added_step_s / r.predicted_per_added_step_s:.2f}")
        lines.append(f"| {r.row_id} | {r.cp} | {r.published_s:.3f} | {r.predicted_s:.3f} | {r.error:+.1%} | {added} |")
    return "\n".join(lines)


def main() -> int:
    table = {row["id"]: row for row in evaluate.load_table(
        ROOT.parent / "shared" / "reference" / "published" / "training_throughput.csv")}
    mapping = evaluate.validate_mapping(load_yaml(evaluate.MAPPING, what="row mapping"))
    for title, ids in SERIES.items():
        print(render(title, ring_steps(ids, table, mapping)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
