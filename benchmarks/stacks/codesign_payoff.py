"""Does co-design pay off on the real consumer? torchtitan's own preset against the workbench's recipe, both run by
torchtitan 0.2.2 on the local GPU at the same global batch (issue 18, part 2).

Per model (Llama 3 8B cut to 4 layers, Llama 3 70B cut to 2: one H200 holds neither whole):

- **preset**: torchtitan's own job file for the model (`torchtitan_presets/llama3_8b.toml`, `llama3_70b.toml`,
  verbatim from torchtitan v0.2.2, BSD-3-Clause, `torchtitan_presets/LICENSE`);
- **workbench**: `workbench recipe --model M --set num_layers=L --gpu h200 --gpus 1 --seq-len S --global-batch B
  --stack torchtitan --format torchtitan-toml`, with the preset's sequence and global batch (local batch x one
  data-parallel rank): the search holds the global batch and varies micro-batch with accumulation,
  checkpointing and compile, priced as torchtitan runs them.

Both files get the same offline edits and nothing else (`OFFLINE_EDITS`, `cut`): the cut flavor (which
`torchtitan_entry.py` adds), the test tokenizer and the generated `c4_test` data, 20 steps logged every step, no
profiler, TensorBoard, checkpoint or validation, a 2-step lr warm-up, and one GPU (the 70B preset's TP 8 is for 64
GPUs). Measured: torchtitan's own tokens/s (median after the warm-up steps) and max reserved memory.

    python benchmarks/stacks/codesign_payoff.py --prepare                     # CPU: the recipes and predictions
    PYTHONPATH=/tmp/site python benchmarks/stacks/codesign_payoff.py --run --out DIR   # GPU, torchtitan offline
    python benchmarks/stacks/codesign_payoff.py --report DIR                  # CODESIGN.md from DIR's jsonl

The second check of issue 18: the recipe the workbench recommends for Llama 3.2 1B on one H200 at sequence 8192
(`codesign/llama3.2-1b-job.yaml`: `workbench recipe --model llama3.2-1b --gpu h200 --gpus 1 --seq-len 8192
--global-batch 8 --stack workbench-job`), run by the reference job (`python -m workbench.train --recipe ...
--metrics DIR/llama3.2-1b-job_metrics.json`), against the plain compiled loop at the same sequence
(`plain_pytorch.py --row '{"model": "1b", "micro_batch": 2, "seq_len": 8192, "compile": true}' >
DIR/llama3.2-1b-plain_loop.json`); `--report` adds it when both files are in DIR.

`--prepare` writes `codesign/<pair>.{yaml,toml}` and `codesign/predictions.json` (committed); `--run` needs only
torchtitan and the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torchtitan_runs  # noqa: E402  (the offline trainer launch, log parsing and data)

PREPARED = HERE / "codesign"
PRESETS = HERE / "torchtitan_presets"
TARGET = 1.10
"""Issue 18: the workbench's recipe >= 1.10x the preset's measured tokens/s."""


@dataclass(frozen=True)
class Pair:
    name: str
    model: str
    layers: int
    flavor: str  # torchtitan_entry.py's cut flavor
    preset: str  # file in torchtitan_presets/


PAIRS = [Pair("llama3-8b-4l", "llama3-8b", 4, "8B_4L", "llama3_8b.toml"),
         Pair("llama3-70b-2l", "llama3-70b", 2, "70B_2L", "llama3_70b.toml")]
STEPS, WARMUP = 20, 5


def prepare(folder: Path) -> None:
    """Search, export and predict both sides with the workbench (CPU)."""
    from workbench.config import Parallelism, TrainingConfig
    from workbench.predict import predict
    from workbench.recipe.build import make_recipe, revised_model
    from workbench.recipe.io import save_recipe
    from workbench.recipe.search import search

    folder.mkdir(parents=True, exist_ok=True)
    predictions = {}
    for pair in PAIRS:
        preset = tomllib.loads((PRESETS / pair.preset).read_text())
        train, ac = preset["training"], preset["activation_checkpoint"]
        seq, global_batch = train["seq_len"], train["local_batch_size"]  # one data-parallel rank
        model = revised_model(pair.model, {"num_layers": pair.layers})
        result = search(model, "h200", 1, seq_len=seq, global_batch=global_batch, stack="torchtitan")
        best = result.best
        recipe = make_recipe(pair.model, "h200", best.config, overrides={"num_layers": pair.layers},
                             compile=best.compile, stack="torchtitan")
        for fmt, ext in (("yaml", "yaml"), ("torchtitan-toml", "toml")):
            save_recipe(recipe, folder / f"{pair.name}.{ext}", format=fmt, overwrite=True)
        if ac.get("selective_ac_option", "op") != "op":
            raise SystemExit(f"{pair.preset}: selective_ac_option {ac['selective_ac_option']!r}: the torchtitan "
                             f"stack's selective is the op policy")
        preset_cfg = TrainingConfig(train["local_batch_size"], seq, "bf16", Parallelism(dp=1), ac["mode"], global_batch)
        preset_step = predict(model, "h200", preset_cfg, stack="torchtitan",
                              compile=preset["compile"]["enable"]).summary
        ours = recipe.predicted
        predictions[pair.name] = {
            "preset": {"micro_batch": train["local_batch_size"], "accumulation": 1, "ac": ac["mode"],
                       "compile": preset["compile"]["enable"], "tokens_per_s": preset_step.tokens_per_s,
                       "peak_memory_gb": preset_step.memory.total / 1e9},
            "workbench": {"micro_batch": recipe.batch.micro_batch, "accumulation": recipe.batch.grad_accumulation,
                          "ac": recipe.activation_checkpointing.mode, "compile": recipe.compile,
                          "tokens_per_s": ours.tokens_per_s, "peak_memory_gb": ours.peak_memory_gb},
            "global_batch": global_batch, "seq_len": seq,
            "predicted_gain": ours.tokens_per_s / preset_step.tokens_per_s,
        }
        print(f"{pair.name}: preset mb{train['local_batch_size']} {ac['mode']} compile={preset['compile']['enable']} "
              f"-> workbench mb{recipe.batch.micro_batch} x{recipe.batch.grad_accumulation} "
              f"{recipe.activation_checkpointing.mode} compile={recipe.compile}: predicted "
              f"{predictions[pair.name]['predicted_gain']:.3f}x")
    (folder / "predictions.json").write_text(json.dumps(predictions, indent=2) + "\n")


def cut(config: dict, pair: Pair, name: str) -> dict:
    """The offline edits both sides get: the cut flavor, local assets and data, a short logged run, one GPU."""
    edited = json.loads(json.dumps(config))
    edits = {
        "job": {"dump_folder": f"./outputs/{name}", "description": name},
        "profiling": {"enable_profiling": False},
        "metrics": {"log_freq": 1, "enable_tensorboard": False},
        "model": {"flavor": pair.flavor, "hf_assets_path": str(HERE / "torchtitan_assets" / "tokenizer")},
        "lr_scheduler": {"warmup_steps": 2},
        "training": {"steps": STEPS, "dataset": "c4_test"},
        "parallelism": {"tensor_parallel_degree": 1, "data_parallel_shard_degree": -1},
        "checkpoint": {"enable": False},
        "validation": {"enable": False},
    }
    for section, values in edits.items():
        edited.setdefault(section, {}).update(values)
    return edited


OFFLINE_EDITS = cut.__doc__


def to_toml(data: dict, prefix: str = "") -> str:
    """A job config's nested tables of scalars and lists as TOML (all torchtitan's job files hold)."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    lines = [f"[{prefix}]"] if prefix and scalars else []
    lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
    text = "\n".join(lines) + ("\n\n" if lines else "")
    for key, value in data.items():
        if isinstance(value, dict):
            text += to_toml(value, f"{prefix}.{key}" if prefix else key)
    return text


def run(out: Path, budget_s: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    torchtitan_runs.write_dataset(work)
    deadline = time.time() + budget_s
    results = out / "codesign.jsonl"
    for pair in PAIRS:
        sides = {"preset": PRESETS / pair.preset, "workbench": PREPARED / f"{pair.name}.toml"}
        for side, source in sides.items():
            name = f"{pair.name}-{side}"
            config = cut(tomllib.loads(source.read_text()), pair, name)
            folder = out / name
            folder.mkdir(exist_ok=True)
            (folder / "run.toml").write_text(to_toml(config))
            train = config["training"]
            shape = torchtitan_runs.Run(name, pair.flavor, train["local_batch_size"], train["seq_len"],
                                        config.get("activation_checkpoint", {}).get("mode", "none"),
                                        steps=STEPS, warmup=WARMUP)
            record = {"pair": pair.name, "side": side, "source": str(source.relative_to(HERE)),
                      "local_batch_size": train["local_batch_size"],
                      "global_batch_size": train.get("global_batch_size", train["local_batch_size"]),
                      "seq_len": train["seq_len"], "ac": shape.ac_mode,
                      "compile": config.get("compile", {}).get("enable", False)}
            left = deadline - time.time()
            if left < 60:
                record["skipped"] = "time budget"
            else:
                log, outcome = torchtitan_runs.train(folder / "run.toml", work, left)
                (folder / "log.txt").write_text(log)
                parsed = torchtitan_runs.parse(log, shape)
                parsed.pop("per_step", None)
                parsed.pop("step_time_s", None)  # local batch / tps: not the step with accumulation
                record.update(parsed, **outcome)
            with results.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(f"{name:28} {record.get('tokens_per_s', record.get('skipped') or record.get('error', '')[-200:])}",
                  flush=True)


def _failure(measured: dict) -> str:
    if "out of memory" in measured.get("error", ""):
        return "out of memory"
    return measured.get("skipped") or measured.get("error", "not run").strip().splitlines()[-1][:80]


def report(folder: Path) -> str:
    predictions = json.loads((PREPARED / "predictions.json").read_text())
    rows = [json.loads(line) for line in (folder / "codesign.jsonl").read_text().splitlines() if line.strip()]
    measured = {(r["pair"], r["side"]): r for r in rows}
    lines = ["# Co-design on the real consumer: torchtitan's preset vs the workbench's recipe (one H200)", "",
             f"`python benchmarks/stacks/codesign_payoff.py --run --out DIR` (torchtitan 0.2.2, torch 2.11), then "
             f"`--report DIR`; recipes and predictions from `--prepare` (`benchmarks/stacks/codesign/`). Both sides "
             f"at the preset's global batch; tokens/s is torchtitan's own (median of steps {WARMUP + 1}-{STEPS}). "
             f"Target: workbench >= {TARGET:.2f}x the preset.", "",
             "| model | side | micro-batch x accumulation | checkpointing | compile | predicted tokens/s | measured "
             "tokens/s | error | reserved GB | predicted GB |", "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for pair, pred in predictions.items():
        for side in ("preset", "workbench"):
            p, m = pred[side], measured.get((pair, side), {})
            tps = m.get("tokens_per_s")
            err = f"{p['tokens_per_s'] / tps - 1:+.1%}" if tps else _failure(m)
            lines.append(f"| {pair} | {side} | {p['micro_batch']} x {p['accumulation']} | {p['ac']} | "
                         f"{'on' if p['compile'] else 'off'} | {p['tokens_per_s']:,.0f} | "
                         f"{f'{tps:,.0f}' if tps else 'n/a'} | {err} | {m.get('peak_reserved_gb', float('nan')):.1f} | "
                         f"{p['peak_memory_gb']:.1f} |")
        base, ours = measured.get((pair, "preset"), {}), measured.get((pair, "workbench"), {})
        if base.get("tokens_per_s") and ours.get("tokens_per_s"):
            gain = ours["tokens_per_s"] / base["tokens_per_s"]
            verdicts.append(f"- {pair}: measured gain **{gain:.3f}x** (predicted {pred['predicted_gain']:.3f}x); "
                            f"target {TARGET:.2f}x {'met' if gain >= TARGET else 'MISSED'}")
        elif "out of memory" in base.get("error", "") and ours.get("tokens_per_s"):
            verdicts.append(f"- {pair}: torchtitan's preset does not fit one H200 (out of memory; predicted "
                            f"{pred['preset']['peak_memory_gb']:.0f} GB); the workbench's recipe runs, at "
                            f"{ours['tokens_per_s']:,.0f} tokens/s: no ratio to report")
        else:
            verdicts.append(f"- {pair}: not measured")
    return "\n".join(lines + ["", *verdicts, "", *_plain_loop_section(folder)])


def _plain_loop_section(folder: Path) -> list[str]:
    job_file, plain_file = folder / "llama3.2-1b-job_metrics.json", folder / "llama3.2-1b-plain_loop.json"
    if not (job_file.exists() and plain_file.exists()):
        return []
    job = json.loads(job_file.read_text())
    plain = json.loads(plain_file.read_text())
    ours, base = job["measured"]["tokens_per_s"], plain["tokens_per_s"]
    return ["## The recommended recipe against the plain loop (Llama 3.2 1B, sequence 8192)", "",
            "| run | micro-batch | tokens/s | predicted |", "|---|---|---|---|",
            f"| reference job, the workbench's recipe (`codesign/llama3.2-1b-job.yaml`) | "
            f"{job['settings']['micro_batch']} (x {job['settings']['grad_accumulation']} accumulation) | {ours:,.0f} | "
            f"{job['predicted']['tokens_per_s']:,.0f} |",
            f"| plain compiled loop (fp32 parameters under autocast, AC none) | {plain['micro_batch']} | {base:,.0f} | |",
            "", f"- recipe / plain loop: **{ours / base:.3f}x** "
                f"({'never slower: met' if ours >= base else 'slower than the plain loop: MISSED'})",
            _job_predicted_now(job["measured"]), *_earlier(folder / "before_compiled_loss"), ""]


def _job_predicted_now(measured: dict) -> str:
    """The recipe re-predicted as the reference job runs it, with today's model (``predict_recipe(job=True)``,
    calibrated), against the measured run; the table's "predicted" is what the recipe recorded when it was made."""
    from workbench.recipe.build import predict_recipe
    from workbench.recipe.io import load_recipe

    s = predict_recipe(load_recipe(PREPARED / "llama3.2-1b-job.yaml"), calibrated=True, job=True).summary
    return (f"- the job's step predicted today (`predict_recipe(job=True)`, calibrated): {s.tokens_per_s:,.0f} "
            f"tokens/s, {s.memory.total / 1e9:.1f} GB; measured / predicted - 1: tokens/s "
            f"{measured['tokens_per_s'] / s.tokens_per_s - 1:+.1%}, peak allocated memory "
            f"{measured['peak_memory_allocated_gb'] * 1e9 / s.memory.total - 1:+.1%}, reserved "
            f"{measured['peak_memory_reserved_gb'] * 1e9 / s.memory.total - 1:+.1%}")


def _earlier(folder: Path) -> list[str]:
    """The same pair measured before the job compiled its loss (kept in ``before_compiled_loss/``)."""
    job_file, plain_file = folder / "llama3.2-1b-job_metrics.json", folder / "llama3.2-1b-plain_loop.json"
    if not (job_file.exists() and plain_file.exists()):
        return []
    ours = json.loads(job_file.read_text())["measured"]["tokens_per_s"]
    base = json.loads(plain_file.read_text())["tokens_per_s"]
    return [f"- before the reference job compiled its chunked loss (`{folder.name}/`): {ours:,.0f} against "
            f"{base:,.0f} tokens/s, {ours / base:.3f}x"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prepare", action="store_true", help="write the recipes and predictions (CPU)")
    p.add_argument("--run", action="store_true", help="run both sides of every pair with torchtitan (GPU)")
    p.add_argument("--report", type=Path, metavar="DIR", help="CODESIGN.md from DIR/codesign.jsonl (to stdout)")
    p.add_argument("--out", type=Path, default=Path("codesign_out"))
    p.add_argument("--budget-s", type=float, default=400)
    args = p.parse_args()
    if args.prepare:
        prepare(PREPARED)
    elif args.run:
        run(args.out, args.budget_s)
    elif args.report:
        print(report(args.report))
    else:
        p.error("--prepare, --run or --report DIR")


if __name__ == "__main__":
    main()
