"""``workbench recipe``: the best recipe for a model on N GPUs, or (``--source-gpu``) a port from another GPU with
the co-design advice, written as YAML, JSON or torchtitan config.

    workbench recipe --model llama3-8b --gpu h200 --gpus 8 --out llama3-8b-h200.yaml
    workbench recipe --model llama3-8b --set num_layers=4 --gpu h200 --source-gpu h100 --gpus 1 \\
        --out codesigned.yaml --port-out direct-port.yaml
    workbench recipe --model llama3-70b --gpu mi355x --gpus 64 --format torchtitan-toml --out llama3-70b.toml
"""

from __future__ import annotations

import argparse
import sys

from workbench.errors import SpecError, WorkbenchError
from workbench.recipe.io import FORMATS, dumps, save_recipe
from workbench.recipe.schema import Recipe


def add_parser(sub: argparse._SubParsersAction) -> None:
    from workbench.cli import int_flag
    from workbench.config import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LORA_RANK, MAX_SEQ_LEN

    p = sub.add_parser("recipe", help="the best training recipe for a model on N GPUs (or a co-designed port)")
    p.add_argument("--model", required=True, help="catalog model name (recipes name catalog models; see --set)")
    p.add_argument("--approximate-as", metavar="FAMILY",
                   help="a config.json --model of an architecture the model does not implement: read it as this "
                        "family (llama, ...); recipes still need a catalog model")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="overrides",
                   help="replace a model field, e.g. --set num_layers=4 (repeatable)")
    p.add_argument("--gpu", required=True, help="target GPU")
    p.add_argument("--gpus", type=int_flag(1, MAX_GPUS), default=1)
    p.add_argument("--precision", default="bf16", help="bf16, fp8 (rowwise), fp8_gw_hp (rowwise_with_gw_hp: wgrad in bf16), mxfp8, "
                   "... (comma-separated to compare several)")
    p.add_argument("--seq-len", type=int_flag(0, MAX_SEQ_LEN, "the model's default"), default=0,
                   help="0: the model's default")
    p.add_argument("--global-batch", type=int_flag(0, MAX_GLOBAL_BATCH, "the model's standard"), default=0,
                   help="samples per optimizer step, held fixed: the search varies micro-batch x accumulation, never "
                        "this; 0: the model's standard (a transformer 4M tokens / seq-len, a recommendation model its "
                        "catalog default_batch), as GPUs x the nearest power of two per GPU "
                        "(workbench.recipe.search.default_global_batch)")
    p.add_argument("--lora-rank", type=int_flag(0, MAX_LORA_RANK, "full training"), default=0,
                   help="LoRA fine-tuning: adapter rank on q, k, v, o with the base frozen (the recipe records it); "
                        "0: full training")
    p.add_argument("--source-gpu", help="port from this GPU: direct port vs co-designed, with the revisions")
    p.add_argument("--out", help="write the (co-designed) recipe here; default: print it")
    p.add_argument("--port-out", help="with --source-gpu: also write the direct-port recipe here")
    p.add_argument("--format", choices=FORMATS, default="yaml")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.add_argument("--top", type=int_flag(1, 1 << 31), default=5, help="candidates to list (without --source-gpu)")
    p.add_argument("--stack", default=None,
                   help="the stack that will run the recipe (workbench stacks lists them): every candidate is priced "
                        "as it runs it, eager and compiled where it follows the recipe's compile flag; default: the "
                        "model's (torchtitan for transformers; for DLRM and HSTU the ideal fused step, a bound); "
                        "ideal: the fused-step bound")
    p.add_argument("--calibrated", action="store_true", help="use the GPU's calibration profile")
    p.add_argument("--select-kernels", action="store_true",
                   help="record each GEMM/attention shape's kernel: a Triton config from workbench.select or the vendor")
    p.set_defaults(func=cmd_recipe)


def _overrides(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise SpecError("--set", key or item, value or item, "FIELD=INTEGER, e.g. num_layers=4")
        out[key.strip()] = int(value)
    return out


def _priced(stack: str) -> str:
    from workbench.stacks import get_stack

    if get_stack(stack).bound:
        return "predicted as the ideal fused step (a bound; --stack prices a real one)"
    return f"predicted for the {stack} stack"


def _write(recipe: Recipe, path: str | None, fmt: str, force: bool) -> None:
    if path is None:
        sys.stdout.write(dumps(recipe, fmt))  # type: ignore[arg-type]
        return
    written = save_recipe(recipe, path, format=fmt, overwrite=force)  # type: ignore[arg-type]
    print(f"wrote {written}", file=sys.stderr)


def cmd_recipe(args: argparse.Namespace) -> int:
    from workbench.fileio import check_output
    from workbench.recipe.advisor import advise
    from workbench.recipe.build import make_recipe, revised_model
    from workbench.recipe.search import search

    if not isinstance(args.model, str):
        raise SpecError("--model", "model", getattr(args.model, "name", args.model),
                        "a catalog model name (a recipe names a catalog model; change fields with --set)")
    overrides = _overrides(args.overrides)
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    if not precisions:
        raise SpecError("--precision", "precision", args.precision, "one or more precision names, e.g. bf16,fp8")
    report = sys.stderr if args.out is None else sys.stdout  # keep stdout clean when the recipe goes there
    for target in (args.out, args.port_out):
        if target is not None:
            check_output(target, overwrite=args.force)  # a bad target fails before the search, not after it
    if args.source_gpu:
        if args.port_out and args.port_out == args.out:
            raise SpecError("--port-out", "port_out", args.port_out, "a different file than --out")
        advice = advise(args.model, args.source_gpu, args.gpu, args.gpus, precisions[0], overrides=overrides,
                        seq_len=args.seq_len, global_batch=args.global_batch,
                        precisions=precisions if len(precisions) > 1 else None, calibrated=args.calibrated,
                        stack=args.stack, lora_rank=args.lora_rank)
        print(f"{advice.model} on {advice.gpus} x {advice.target_gpu}: direct port from {advice.source_gpu} vs "
              f"co-designed, {_priced(advice.stack)}", file=report)
        print(advice.as_frame().to_string(index=False), file=report)
        for note in advice.notes:
            print(f"note: {note}", file=report)
        if advice.gain is not None:
            print(f"predicted gain of co-designing: {advice.gain_text} (the model's step-time uncertainty; both at "
                  f"global batch {advice.co_designed.batch.global_batch})", file=report)
        frame = advice.revisions_frame()
        if len(frame):
            frame = frame[["kind", "name", "old", "new", "predicted_gain", "verdict", "applied", "requires_retraining",
                           "reason"]]
            print(frame.to_string(index=False, max_colwidth=70, float_format=lambda x: f"{x:.4f}"), file=report)
        if args.port_out:
            if advice.direct_port is None:
                raise WorkbenchError("no direct port to write: nothing fits the source GPU")
            _write(advice.direct_port, args.port_out, args.format, args.force)
        _write(advice.co_designed, args.out, args.format, args.force)
        return 0

    model = revised_model(args.model, overrides)
    result = search(model, args.gpu, args.gpus, precisions=precisions, seq_len=args.seq_len,
                    global_batch=args.global_batch, calibrated=args.calibrated, stack=args.stack,
                    lora_rank=args.lora_rank)
    best = result.best
    print(result.table(args.top, name=args.model), file=report)
    recipe = make_recipe(args.model, result.gpu, best.config, overrides=overrides, calibrated=args.calibrated,
                         select_kernels=args.select_kernels, compile=best.compile, stack=result.stack)
    _write(recipe, args.out, args.format, args.force)
    return 0
