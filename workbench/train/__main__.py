"""``python -m workbench.train --recipe FILE``: run a recipe with the reference training job (alone, or one rank
of ``torchrun --nproc_per_node N -m workbench.train ...``) and write its metrics JSON."""

from __future__ import annotations

import argparse
import sys

from workbench.errors import WorkbenchError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workbench.train", description=__doc__)
    p.add_argument("--recipe", required=True, help="recipe file (YAML or JSON, schema_version 1)")
    p.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps, compilation included (default 3)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--data", choices=("text", "synthetic"), default="text",
                   help="transformer data: the generated text corpus (default) or random tokens")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 3e-4 transformers, 1e-3 DLRM)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-table-rows", type=int, default=None,
                   help="cap DLRM tables at N rows (smoke runs; the prediction then does not apply)")
    p.add_argument("--metrics", default="train_metrics.json", help="where to write the metrics JSON")
    p.add_argument("--force", action="store_true", help="replace an existing metrics file")
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    p.add_argument("--fp8-emulate", action="store_true",
                   help="fp8 recipes: emulate the fp8 GEMMs in fp32 with the same rounding (a numerics check)")
    p.add_argument("--eval-every", type=int, default=None, metavar="N",
                   help="held-out loss before the first step and after every N-th optimizer step (warm-up counted) "
                        "and the last; transformers on the text corpus only (default: none)")
    p.add_argument("--eval-windows", type=int, default=32,
                   help="held-out windows of seq_len + 1 bytes from the corpus at grammar seed 1 (default 32)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms (cuBLAS workspace, torch.use_deterministic_algorithms, no cuDNN "
                        "benchmark); refuses nondeterministic project kernels")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                   help="constant (default), or cosine decay to --lr-min-ratio of the peak after the warm-up")
    p.add_argument("--lr-warmup-steps", type=int, default=0, help="linear learning-rate warm-up steps (default 0)")
    p.add_argument("--lr-min-ratio", type=float, default=0.1,
                   help="cosine: the last step's learning rate as a fraction of the peak (default 0.1)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("steps", "warmup", "log_every", "max_table_rows", "eval_every", "eval_windows"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            print(f"error: --{name.replace('_', '-')} = {value}: expected a positive number", file=sys.stderr)
            return 2
    try:
        from workbench.fileio import check_output
        from workbench.train.job import RunOptions, job_prediction, train

        check_output(args.metrics, overwrite=args.force)  # before the run, not after it
        from workbench.train.schedule import LrSchedule
        from workbench.train.spec import load_job_spec

        spec = load_job_spec(args.recipe)
        options = RunOptions(steps=args.steps, warmup=args.warmup, device=args.device, data=args.data, lr=args.lr,
                             seed=args.seed, max_table_rows=args.max_table_rows, log_every=args.log_every,
                             progress=not args.quiet, fp8_emulate=args.fp8_emulate, eval_every=args.eval_every,
                             eval_windows=args.eval_windows, deterministic=args.deterministic,
                             lr_schedule=LrSchedule(args.lr_schedule, args.lr_warmup_steps, args.lr_min_ratio))
        result = train(spec, options)
        result.predicted_job = job_prediction(spec.recipe)  # the recipe as read once, not the file again
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import os

    if int(os.environ.get("RANK", "0")) == 0:
        try:
            path = result.write(args.metrics, overwrite=args.force)
        except WorkbenchError as exc:  # the target changed during the run
            print(f"error: {exc}", file=sys.stderr)
            return 2
        metrics = result.metrics()
        m, errors, job_errors = metrics["measured"], metrics["relative_error"], metrics["relative_error_job"]
        summary = ", ".join(f"{k} {v:+.1%}" for k, v in errors.items()) or "no predictions in the recipe"
        if job_errors:
            summary += "; vs this job's predicted step: " + ", ".join(f"{k} {v:+.1%}" for k, v in job_errors.items())
        rate = f"{m['tokens_per_s']:,.0f} tokens/s" if spec.seq_len > 1 else f"{m['samples_per_s']:,.0f} samples/s"
        heldout = metrics["heldout_losses"]
        heldout_text = f", held-out {heldout[0][1]:.3f} -> {heldout[-1][1]:.3f}" if heldout else ""
        print(f"[train] {spec.name}: median step {m['step_time_s']:.4f} s, {rate}, "
              f"loss {m['loss_first']:.3f} -> {m['loss_last']:.3f}{heldout_text}; vs predicted: {summary}; "
              f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
