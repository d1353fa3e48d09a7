"""The ``workbench`` command: catalogs, predictions, batch predictions, calibration, and the notebook app."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.errors import WorkbenchError


def int_flag(minimum: int, maximum: int, zero: str = ""):
    """An argparse ``type=`` for an integer flag in [minimum, maximum]; ``zero`` says what 0 means where it is
    allowed. A bad value is argparse's usage error (exit 2): ``workbench predict: error: argument --tp: expected a
    positive integer up to 1,048,576, got '0'``."""
    if zero and minimum == 0:
        expected = f"0 ({zero}) or a positive integer up to {maximum:,}"
    elif minimum == 1:
        expected = f"a positive integer up to {maximum:,}"
    else:
        expected = f"an integer from {minimum:,} to {maximum:,}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:40]!r}")
        return value

    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def _table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def cmd_gpus(args: argparse.Namespace) -> int:
    from workbench.hardware import list_gpus

    rows = []
    for g in list_gpus():
        peaks = g.peak_dense_tflops
        rows.append({
            "name": g.name, "gpu": g.display_name, "status": g.status,
            "bf16_tflops": f"{peaks['bf16'].value:g}" if "bf16" in peaks else "-",
            "fp8_tflops": f"{peaks['fp8'].value:g}" if "fp8" in peaks else "-",
            "hbm_gb": f"{g.hbm_capacity_gb.value:g}", "hbm_tb_s": f"{g.hbm_bandwidth_tb_s.value:g}",
            "ridge_bf16": f"{g.ridge_point('bf16'):.0f}" if "bf16" in peaks else "-",
        })
    print(_table(rows, list(rows[0])))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from workbench.models import list_models

    rows = [{"name": m.name, "model": m.display_name, "kind": m.kind, "params_b": f"{m.num_params / 1e9:.2f}"}
            for m in list_models()]
    print(_table(rows, list(rows[0])))
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    from workbench.families import list_families
    from workbench.stacks import list_stacks

    defaults: dict[str, list[str]] = {}  # stack -> the model families it is the default of
    for family in list_families():
        defaults.setdefault(family.default_stack, []).append(family.name)
    rows = [{"name": st.name + (f" (default: {', '.join(defaults[st.name])})" if st.name in defaults else ""),
             "stack": st.display_name, "compile": st.compile, "params": "/".join(st.param_dtypes),
             "selective AC": st.checkpointing["selective"], "assumes": st.summary,
             "validated": st.validation or "-"} for st in list_stacks()]
    print(_table(rows, list(rows[0])))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from workbench.config import Parallelism, TrainingConfig
    from workbench.predict import predict

    split = args.tp * args.pp * args.cp
    parallelism = Parallelism(dp=args.gpus // split, tp=args.tp, pp=args.pp, ep=args.ep, sharding=args.sharding,
                              cp=args.cp, virtual_stages=args.virtual_stages)
    if parallelism.gpus != args.gpus:
        raise WorkbenchError(f"--gpus {args.gpus} is not a multiple of --tp x --pp x --cp = {split}")
    cfg = TrainingConfig(args.micro_batch, args.seq_len, args.precision, parallelism, args.checkpointing, args.global_batch,
                         lora_rank=args.lora_rank)
    p = predict(args.model, args.gpu, cfg, calibrated=args.calibrated, allow_fallback=args.allow_fallback,
                stack=args.stack, compile=args.compile, param_dtype=args.param_dtype)
    s = p.summary
    from workbench.stacks import get_stack

    stack = get_stack(s.stack)
    if args.json:
        c, par = p.config, p.config.parallelism
        print(json.dumps({"model": p.model.name, "gpu": p.gpu.name, "precision": p.precision.effective.name,
                          "stack": s.stack, "stack_is_bound": stack.bound,
                          "config": {"micro_batch": c.micro_batch, "seq_len": c.seq_len, "gpus": s.gpus,
                                     "dp": par.dp, "tp": par.tp, "pp": par.pp, "ep": par.ep, "cp": par.cp,
                                     "virtual_stages": par.virtual_stages, "lora_rank": c.lora_rank,
                                     "sharding": par.sharding, "global_batch": c.samples_per_step,
                                     "grad_accumulation": c.grad_accumulation,
                                     "activation_checkpointing": c.activation_checkpointing,
                                     "compile": args.compile, "param_dtype": stack.param_dtype(args.param_dtype)},
                          "calibrated": p.calibrated, "model_version": p.model_version, "notes": p.notes,
                          "summary": s.as_dict()}, indent=2))
        return 0
    frame = p.ops_frame().sort_values("total_ms", ascending=False)
    print(f"{p.model.display_name} on {s.gpus} x {p.gpu.display_name}, {p.precision.effective.name}, "
          f"micro-batch {p.config.micro_batch} x seq {p.config.seq_len}, AC {p.config.activation_checkpointing}"
          f"{' (calibrated)' if p.calibrated else ' (spec only)'}")
    print(f"stack: {stack.display_name}" + (" -- a bound: no stack runs this fast; --stack NAME for one that "
                                           "does (workbench stacks)" if stack.bound else ""))
    for note in p.notes:
        print(f"note: {note}")
    if p.calibrated:
        from workbench.perf.efficiency import profile_path

        print(f"note: calibration profile {profile_path(p.gpu)}")
    m = s.memory.as_gb()
    print(f"step {s.step_time_s * 1e3:.1f} ms | {s.tokens_per_s:,.0f} tokens/s (all GPUs) | "
          f"{s.samples_per_s:,.2f} samples/s | MFU {s.mfu:.1%} (of the {p.precision.effective.peak_key} peak)"
          + (f" | host {s.host_s * 1e3:.1f} ms" if s.host_s else ""))
    print(f"  compute-bound {s.compute_bound_s * 1e3:.1f} ms, memory-bound {s.memory_bound_s * 1e3:.1f} ms, "
          f"optimizer {s.optimizer_s * 1e3:.1f} ms, exposed comm {s.communication_s * 1e3:.1f} ms, "
          f"bubble {s.bubble_s * 1e3:.1f} ms")
    print(f"  memory/GPU {m['total']:.1f} of {m['capacity']:.0f} GB (params {m['params']:.1f}, grads {m['grads']:.1f}, "
          f"optimizer {m['optimizer']:.1f}, activations {m['activations']:.1f}); "
          f"largest micro-batch that fits: {s.max_micro_batch}")
    top = frame.head(args.top)[["name", "kind", "shape", "count", "bound", "time_ms", "total_ms", "share"]]
    print(top.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


def cmd_predict_ops(args: argparse.Namespace) -> int:
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for
    from workbench.rows import predict_rows

    gpu = get_gpu(args.gpu)
    text = _read(args.csv)
    sys.stdout.write(predict_rows(text, gpu, constants_for(gpu, args.calibrated)))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from workbench.calibration import calibrate, write_profile
    from workbench.fileio import check_output
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import user_profile_path
    from workbench.rows import read_rows

    if args.trace:
        return cmd_calibrate_trace(args)
    if not args.csv or not args.gpu:
        raise WorkbenchError("calibrate needs a CSV of measured rows and --gpu (or --trace TRACE with the "
                             "configuration it ran: see workbench calibrate --help)")
    gpu = get_gpu(args.gpu)
    out = args.out or user_profile_path(gpu)  # the user's folder: the shipped profiles are read-only data
    check_output(out, overwrite=args.force)  # before the fit, not after it
    _, rows = read_rows(_read(args.csv))
    result = calibrate(rows, gpu)
    path = write_profile(result, out, source=str(args.csv), overwrite=args.force)
    print(f"fitted {len(result.fitted)} constants on {result.rows} rows -> {path}")
    for name, why in result.skipped.items():  # too few rows of their class: they keep their defaults
        print(f"  not fitted {name}: {why}")
    for key in result.mape_before:
        print(f"  MAPE {key:<22} {result.mape_before[key]:6.1f}% -> {result.mape_after[key]:6.1f}%")
    return 0


def _trace_gpu(args: argparse.Namespace, device: str):
    """--gpu, else the GPU the trace names (deviceProperties: "NVIDIA H200" -> h200)."""
    from workbench.hardware import get_gpu

    if args.gpu:
        return get_gpu(args.gpu)
    words = [w for w in device.lower().replace("-", " ").split() if w not in ("nvidia", "amd", "instinct", "tesla")]
    for n in range(len(words), 0, -1):
        try:
            return get_gpu("-".join(words[:n]))
        except WorkbenchError:
            continue
    raise WorkbenchError(f"the trace does not name a catalog GPU (device {device or 'not recorded'!r}): pass --gpu")


def cmd_calibrate_trace(args: argparse.Namespace) -> int:
    """``workbench calibrate --trace``: a stack's profile on one GPU from a trace of one configuration."""
    from workbench.config import Parallelism, TrainingConfig
    from workbench.fileio import check_output
    from workbench.stack_calibration import describe, fit_trace, user_stack_profile_path, write_stack_profile
    from workbench.trace import load_trace

    if args.csv:
        raise WorkbenchError(f"give either a CSV of measured rows or --trace, not both (got {args.csv!r} and --trace)")
    compile, param_dtype, stack = args.compile, args.param_dtype, args.stack
    if args.recipe:
        from workbench.recipe.build import recipe_model, training_config
        from workbench.recipe.io import load_recipe
        from workbench.stacks import get_stack

        given = [f for f in ("model", "micro_batch", "seq_len") if getattr(args, f) is not None]
        if given:
            raise WorkbenchError(f"--recipe gives the configuration: leave out --{given[0].replace('_', '-')}")
        recipe = load_recipe(args.recipe)
        model, cfg, compile = recipe_model(recipe), training_config(recipe), recipe.compile
        if args.gpu is None:
            args.gpu = recipe.target.gpu
        if stack is None and not get_stack(recipe.predicted.stack).bound:
            stack = recipe.predicted.stack
            print(f"note: the trace is taken as {stack}'s, the stack the recipe was predicted for (--stack NAME if "
                  "the job ran another: workbench-job for python -m workbench.train)", file=sys.stderr)
    else:
        missing = [f"--{f.replace('_', '-')}" for f in ("model", "micro_batch", "seq_len") if getattr(args, f) is None]
        if missing:
            raise WorkbenchError(f"--trace needs the configuration the trace ran: {', '.join(missing)} (or --recipe)")
        model = args.model
        cfg = TrainingConfig(args.micro_batch, args.seq_len, args.precision, Parallelism(), args.ac)
    if stack is None:
        raise WorkbenchError("--trace needs --stack: the stack the job ran on (workbench stacks lists them)")
    trace = load_trace(args.trace, steps=args.steps)
    gpu = _trace_gpu(args, trace.device)
    out = args.out or user_stack_profile_path(stack, gpu)
    check_output(out, overwrite=args.force)  # before the fit, not after it
    fit = fit_trace(trace, model, gpu, cfg, stack=stack, compile=compile, param_dtype=param_dtype)
    print(f"{trace.origin}: {trace.steps} step(s) ({trace.steps_from}), {len(trace.kernels)} kernels; "
          f"{stack} on {gpu.name}, ms per step")
    print("\n".join(describe(fit)))
    for name, why in fit.profile.skipped.items():
        print(f"  not fitted {name}: {why}")
    path = write_stack_profile(fit.profile, out, overwrite=args.force)
    print(f"wrote {path} (predict --stack {stack} --calibrated uses it)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workbench.bench import NoGPUError, run_suite

    try:
        frame = run_suite(args.suite, args.ops.split(",") if args.ops else None, use_cache=not args.no_cache,
                          out=args.out, overwrite=args.force)
    except NoGPUError as exc:
        print(f"workbench: {exc}", file=sys.stderr)
        return 3
    columns = [c for c in ("module", "name", "dtype", "correct", "triton_ms", "baseline_ms", "speedup_vs_baseline",
                           "achieved_tflops", "achieved_gb_s", "measured_over_predicted", "error") if c in frame]
    print(frame[columns].to_string(index=False, max_colwidth=48, float_format=lambda x: f"{x:.3f}"))
    return 0


def cmd_kernels_inspect(args: argparse.Namespace) -> int:
    import importlib

    from workbench.kernels.crosscompile import inspect_space

    module = importlib.import_module(f"workbench.kernels.{args.kernel}")
    targets = tuple(args.targets.split(","))
    rows, flagged_all = [], []
    for target in targets:
        backend = "hip" if target.startswith("gfx") else "cuda"
        kwargs = {"arch": target} if args.kernel == "gemm" and backend == "hip" else {}
        if args.kernel == "gemm":
            kwargs["dtype_bytes"] = {"fp8": 1, "tf32": 4, "fp32": 4}.get(args.dtype, 2)
        space = module.config_space(backend, **kwargs)
        configs = space if args.all else space[:1]
        results, flagged = inspect_space(args.kernel, configs, (target,), args.dtype)
        rows += results
        flagged_all += flagged
    if args.all and {"gfx942", "gfx950"} <= set(targets):  # configs that fit MI350X's LDS but not MI300X's
        hip = [c for c in module.config_space("hip", **({"arch": "gfx950"} if args.kernel == "gemm" else {}))]
        _, flagged_all = inspect_space(args.kernel, hip, ("gfx942", "gfx950"), args.dtype)
    print(_table([{**{k: v for k, v in r.as_dict().items() if k not in ("kernel", "dtype")},
                   "config": _short_config(r.config)} for r in rows],
                 ["target", "shared_bytes", "registers", "sgprs", "spills", "occupancy", "fits", "config", "error"]))
    for key in flagged_all:
        print(f"fits gfx950 (160 KiB LDS) but not gfx942 (64 KiB): {key}")
    return 0 if all(r.fits for r in rows) or args.all else 1


def cmd_kernels_check(args: argparse.Namespace) -> int:
    """Every kernel against its torch reference on the CPU, through the Triton interpreter (no GPU needed)."""
    import os
    import subprocess

    tests = Path(__file__).resolve().parents[1] / "tests" / "kernels"
    if not tests.is_dir():
        raise WorkbenchError("the kernel tests ship with the source checkout (tests/kernels); clone the repository "
                             "to run them")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.call([sys.executable, "-m", "pytest", str(tests), "-q", *(["-k", args.k] if args.k else [])],
                           env=env)


def _short_config(config: dict) -> str:
    names = {"BLOCK_M": "M", "BLOCK_N": "N", "BLOCK_K": "K", "num_warps": "w", "num_stages": "s", "waves_per_eu": "wpe",
             "matrix_instr_nonkdim": "nk", "kpack": "kp", "GROUP_M": "g"}
    return " ".join(f"{names.get(k, k)}{v}" for k, v in config.items())


def cmd_lab(args: argparse.Namespace) -> int:
    from workbench.lab import launch

    return launch(args.notebook, port=args.port, open_browser=not args.no_browser, jupyter_args=args.jupyter_args)


def _read(path: str) -> str:
    """A CSV argument's text (``-``: standard input) through the bounded loader: a size limit, UTF-8 with or
    without a byte-order mark."""
    from workbench.fileio import read_csv_text, read_stream_text

    return read_stream_text(getattr(sys.stdin, "buffer", sys.stdin)) if path == "-" else read_csv_text(path)


def build_parser() -> argparse.ArgumentParser:
    from workbench.config import (
        CHECKPOINTING, MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LORA_RANK, MAX_MICRO_BATCH, MAX_SEQ_LEN, SHARDINGS,
    )
    from workbench.recipe.schema import KERNEL_DTYPES, PARAM_DTYPES

    parser = argparse.ArgumentParser(prog="workbench", description="Hardware/model co-design workbench for AI training.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("gpus", help="list the GPU catalog").set_defaults(func=cmd_gpus)
    sub.add_parser("models", help="list the model catalog").set_defaults(func=cmd_models)

    p = sub.add_parser("predict", help="predict one training step")
    p.add_argument("--model", required=True, help="catalog name, or a YAML / Hugging Face config.json path")
    p.add_argument("--approximate-as", metavar="FAMILY",
                   help="a config.json --model of an architecture the model does not implement: read it as this "
                        "family anyway (llama, ...); the notes say what is left out")
    p.add_argument("--gpu", required=True, help="catalog name or alias, or a GPU spec YAML path")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--micro-batch", type=int_flag(0, MAX_MICRO_BATCH, "the model's default"), default=0,
                   help="samples per GPU per micro-batch; 0: the model's default (DLRM 65536, HSTU 64, transformers 1)")
    p.add_argument("--seq-len", type=int_flag(0, MAX_SEQ_LEN, "the model's default"), default=0,
                   help="0: the model's default")
    p.add_argument("--global-batch", type=int_flag(0, MAX_GLOBAL_BATCH, "micro-batch x data-parallel ranks"),
                   default=0, help="samples per step; 0: micro-batch x data-parallel ranks")
    p.add_argument("--gpus", type=int_flag(1, MAX_GPUS), default=1)
    p.add_argument("--tp", type=int_flag(1, MAX_GPUS), default=1, help="tensor-parallel degree (divides --gpus)")
    p.add_argument("--pp", type=int_flag(1, MAX_GPUS), default=1, help="pipeline stages (divides --gpus)")
    p.add_argument("--ep", type=int_flag(1, MAX_GPUS), default=1, help="expert-parallel degree (divides dp)")
    p.add_argument("--cp", type=int_flag(1, MAX_GPUS), default=1,
                   help="context-parallel degree: each sequence split over this many ranks (divides --gpus)")
    p.add_argument("--virtual-stages", type=int_flag(1, MAX_GPUS), default=1,
                   help="model chunks per pipeline rank (interleaved 1F1B; needs --pp > 1); 1: plain 1F1B")
    p.add_argument("--lora-rank", type=int_flag(0, MAX_LORA_RANK, "full training"), default=0,
                   help="LoRA fine-tuning: adapter rank on q, k, v, o with the base frozen; 0: full training")
    p.add_argument("--sharding", choices=list(SHARDINGS), default="fsdp",
                   help="ddp replicates; fsdp shards parameters, gradients and optimizer states; zero1 shards the "
                        "optimizer states only (Megatron's distributed optimizer)")
    p.add_argument("--checkpointing", choices=list(CHECKPOINTING), default="none")
    p.add_argument("--calibrated", action="store_true", help="use the GPU's calibration profile")
    p.add_argument("--allow-fallback", action="store_true", help="model an unsupported precision as its documented fallback")
    p.add_argument("--stack", default=None,
                   help="the training stack that runs the step (workbench stacks lists them; or a stack YAML path); "
                        "default: the model's (torchtitan for transformers; for DLRM and HSTU ideal, the fused-step "
                        "bound); ideal: the fused-step bound")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile on, for stacks that follow the run's setting (torchtitan, workbench-job); "
                        "default off")
    p.add_argument("--param-dtype", choices=list(PARAM_DTYPES), default=None,
                   help="fp32 parameters under autocast, or bf16 parameters (where the stack trains with either; "
                        "default: the stack's)")
    p.add_argument("--top", type=int_flag(1, 1 << 31), default=12, help="ops to list")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    sub.add_parser("stacks", help="list the training stacks and what each assumes").set_defaults(func=cmd_stacks)

    p = sub.add_parser("predict-ops", help="add a predicted_ms column to an operator CSV")
    p.add_argument("csv", help="CSV path, or - for standard input")
    p.add_argument("--gpu", required=True)
    p.add_argument("--calibrated", action="store_true")
    p.set_defaults(func=cmd_predict_ops)

    p = sub.add_parser("calibrate", help="fit the GPU's model constants to measured rows, or a stack's to a "
                                          "profiler trace of your job (--trace)")
    p.add_argument("csv", nargs="?", help="rows in the predict-ops format with a measured_ms column")
    p.add_argument("--gpu", help="catalog name (a trace names its GPU: the default with --trace)")
    p.add_argument("--out", help="profile path (default: <gpu>.yaml, with --trace <gpu>-stack-<stack>.yaml, in the "
                                 "user's profile folder, $WORKBENCH_HOME/calibration or ~/.config/workbench/calibration)")
    p.add_argument("--force", action="store_true", help="replace an existing profile")
    p.add_argument("--trace", help="a torch.profiler chrome trace (.json or .json.gz) of one configuration of your job")
    p.add_argument("--stack", help="with --trace: the stack the job ran on (workbench stacks lists them)")
    p.add_argument("--recipe", help="with --trace: the recipe the job ran (instead of --model ... --ac)")
    p.add_argument("--model", help="with --trace: catalog name or model YAML / config.json")
    p.add_argument("--micro-batch", type=int_flag(1, MAX_MICRO_BATCH), default=None)
    p.add_argument("--seq-len", type=int_flag(1, MAX_SEQ_LEN), default=None)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--ac", choices=list(CHECKPOINTING), default="none", help="activation checkpointing")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="the job ran torch.compile (stacks that follow the run's setting)")
    p.add_argument("--param-dtype", choices=list(PARAM_DTYPES), default=None)
    p.add_argument("--steps", type=int_flag(1, 1 << 20), default=None,
                   help="profiled steps in the trace (needed when it has no ProfilerStep# annotations)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("bench", help="benchmark the Triton kernels on the local GPU against the vendor baselines")
    p.add_argument("--suite", choices=["quick", "full"], default="quick")
    p.add_argument("--ops", help="comma-separated kernels (gemm, attention, norms, swiglu, cross_entropy, embedding_bag)")
    p.add_argument("--no-cache", action="store_true", help="measure again even if results are cached")
    p.add_argument("--out", help="also write the results CSV here")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_bench)

    kernels = sub.add_parser("kernels", help="kernel tools that need no GPU").add_subparsers(dest="kernels_command",
                                                                                            required=True)
    p = kernels.add_parser("inspect", help="cross-compile kernel configs for AMD and NVIDIA targets on this CPU")
    p.add_argument("--kernel", choices=["gemm", "attention"], default="gemm")
    p.add_argument("--targets", default="gfx942,gfx950,sm_90", help="from gfx942, gfx950, sm_90, sm_100")
    p.add_argument("--dtype", default="bf16", choices=list(KERNEL_DTYPES))
    p.add_argument("--all", action="store_true", help="every config of the space, not only the default")
    p.set_defaults(func=cmd_kernels_inspect)
    p = kernels.add_parser("check", help="check every kernel against its reference on the CPU (Triton interpreter)")
    p.add_argument("-k", help="pytest -k expression to select kernels, e.g. 'gemm or attention'")
    p.set_defaults(func=cmd_kernels_check)

    from workbench.recipe.cli import add_parser as add_recipe_parser
    from workbench.select.cli import add_parsers as add_select_parsers

    add_select_parsers(sub)

    add_recipe_parser(sub)

    p = sub.add_parser("lab", help="open the workbench notebook in JupyterLab (other options go to jupyter lab)")
    p.add_argument("--notebook", default=None, help="default: notebooks/workbench.ipynb")
    p.add_argument("--port", type=int_flag(0, 65535, "let Jupyter pick"), default=0, help="0: let Jupyter pick")
    p.add_argument("--no-browser", action="store_true")
    p.set_defaults(func=cmd_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "lab":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse's usage errors (2, message printed) and --help (0): a code, not a raise
        return exc.code if isinstance(exc.code, int) else 2
    args.jupyter_args = extra
    try:
        approximate_as = getattr(args, "approximate_as", None)
        if getattr(args, "model", None) and Path(args.model).suffix in (".yaml", ".yml", ".json"):
            from workbench.models import load_model

            args.model = load_model(args.model, approximate_as=approximate_as)
        elif approximate_as:
            raise WorkbenchError("--approximate-as applies to a Hugging Face config.json given as --model")
        if args.command == "predict" and Path(args.gpu).suffix in (".yaml", ".yml"):
            from workbench.hardware import load_gpu

            args.gpu = load_gpu(args.gpu)
        return args.func(args)
    except WorkbenchError as exc:
        print(f"workbench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
