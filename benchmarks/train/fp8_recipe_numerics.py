"""fp8 training recipes on a CPU, before any GPU time: how far each GEMM of an fp8 linear is from the exact product,
and a small convergence smoke. A pointer, not the proof (the proof is ``train_proof.py --only fp8`` on an H200).

    PYTHONPATH=. python benchmarks/train/fp8_recipe_numerics.py OUT_DIR              # ~5 min on 2 CPU cores
    PYTHONPATH=. python benchmarks/train/fp8_recipe_numerics.py OUT_DIR --quick      # ~1 min: smaller everything

1. **GEMM and gradient errors.** The fp8 proof's model (``train_proof.SMALL_LLAMA``: hidden 1024, FFN 2816, 4 blocks) is built
   by the job (``workbench.train.build``) in bf16 and run one step on the proof's corpus; hooks keep what each
   block linear sees: its bf16 input x [M, K], weight W [N, K] and output gradient dy [M, N] (what
   ``Float8Linear`` would get). For each recipe of ``layers.FP8_LINEAR_RECIPES`` and each GEMM -- forward x W^T,
   dgrad dy W, wgrad dy^T x (K = tokens) -- the product as the recipe computes it (fp8 with its scaling,
   emulated with the GPU kernel's rounding, ``fp8_matmul(..., emulate=True)``; or a bf16 GEMM) is compared with
   the exact product of the same bf16 operands (float64): relative error ||C - C_exact|| / ||C_exact||, median and
   largest over the 16 linears. Once at initialisation, once after ``--train-steps`` bf16 steps (lr 6e-4, the
   proof's). Then, end to end, each block linear's weight gradient under bf16 and under each recipe against the
   fp32 model's (what the per-GEMM table leaves out: the error dy brings from the layers above). Fewer tokens than
   the proof's 8192 (``--tokens``) keep it quick on a CPU; wgrad's K is the tokens.
2. **Convergence smoke.** A tiny Llama (2 blocks, hidden 128) trained ``--smoke-steps`` steps on the corpus at
   seeds 0 and 1 in bf16 and in each fp8 recipe (emulated: this is a CPU), judged by the proof's own report
   (``workbench.train.proof_fp8.fp8_result``: largest and mean window difference, step lags, the bf16 seed band). A
   model this small may not show what a 45M one does.

Writes ``fp8_recipe_numerics.json`` and ``fp8_recipe_numerics.md`` under OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from workbench.train.proof_fp8 import fp8_result  # noqa: E402

from workbench.config import Parallelism, TrainingConfig  # noqa: E402
from workbench.recipe.build import make_recipe  # noqa: E402
from workbench.recipe.schema import PrecisionPolicy  # noqa: E402
from workbench.train.build import BLOCK_LINEARS, _get, _set, build_transformer  # noqa: E402
from workbench.train.data import TextBatches  # noqa: E402
from workbench.train.job import RunOptions, train, train_step  # noqa: E402
from workbench.train import layers  # noqa: E402
from workbench.train.layers import FP8_LINEAR_RECIPES, Float8Linear, GemmScaling, fp8_matmul, swap_linear  # noqa: E402
from workbench.train.parallel import init_world  # noqa: E402
from workbench.train.spec import JobSpec  # noqa: E402

SMALL_LLAMA = {"hidden_size": 1024, "num_layers": 4, "num_heads": 16, "num_kv_heads": 4, "head_dim": 64,
               "ffn_hidden_size": 2816, "vocab_size": 256}
"""The fp8 proof's model (``train_proof.SMALL_LLAMA``)."""
SMOKE_LLAMA = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32,
               "ffn_hidden_size": 352, "vocab_size": 256}
"""The convergence smoke's model: small enough for a few hundred CPU steps a minute."""
GEMMS = ("forward", "dgrad", "wgrad")
SMOKE_RECIPES = ("rowwise", "rowwise_with_gw_hp")
"""Recipes in the smoke (tensorwise's GEMM errors are in part 1)."""
SMOKE_CURVES = {"none": "bf16", "rowwise": "fp8", "rowwise_with_gw_hp": "fp8-gw-hp"}
"""Run names as ``workbench.train.proof_fp8.FP8_RECIPE_STEMS`` reads them (``small-<name>``, ``-seed1``)."""


def _spec(overrides: dict, micro_batch: int, seq_len: int, fp8: str = "none") -> JobSpec:
    """A single-process (ddp, dp 1) job spec of the Llama ``overrides``, bf16 or an fp8 recipe."""
    policy = PrecisionPolicy(fp8=fp8) if fp8 != "none" else None
    precision = policy.workbench_precision if policy else "bf16"
    cfg = TrainingConfig(micro_batch, seq_len, precision, Parallelism(dp=1, sharding="ddp"))
    recipe = make_recipe("llama3-8b", "h200-sxm", cfg, overrides=overrides, compile=False, precision=policy)
    return JobSpec.from_dict(recipe.to_dict(), name=f"numerics-{fp8}")


# ------------------------------------------------------------------------------------------- 1. GEMM errors
def _capture(built, batch, autocast, device) -> list[dict]:
    """One forward/backward of ``built`` (no update); per block linear, the bf16 x [M, K], W [N, K] and dy [M, N] it saw."""
    seen, handles = [], []
    for key, block in built.model.blocks.items():
        for path in BLOCK_LINEARS:
            linear = _get(block, path)
            entry = {"linear": f"blocks.{key}.{path}"}
            seen.append(entry)

            def forward_hook(module, inputs, output, entry=entry):
                x = inputs[0]
                entry["x"] = x.detach().reshape(-1, x.shape[-1]).to(torch.bfloat16).clone()
                entry["w"] = module.weight.detach().to(torch.bfloat16).clone()

            def backward_hook(module, grad_input, grad_output, entry=entry):
                dy = grad_output[0]
                entry["dy"] = dy.detach().reshape(-1, dy.shape[-1]).to(torch.bfloat16).clone()

            handles += [linear.register_forward_hook(forward_hook), linear.register_full_backward_hook(backward_hook)]
    with autocast:
        loss = built.model(*batch)
    loss.backward()  # no optimizer step: the model stays as it was
    built.model.zero_grad(set_to_none=True)
    for handle in handles:
        handle.remove()
    return seen


def gemm_operands(entry: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(A [M, K], B [K, N]) of the three GEMMs of y = x W^T: forward x W^T, dgrad dy W, wgrad dy^T x."""
    x, w, dy = entry["x"], entry["w"], entry["dy"]
    return {"forward": (x, w.t()), "dgrad": (dy, w), "wgrad": (dy.t(), x)}


def recipe_product(a: torch.Tensor, b: torch.Tensor, scaling: GemmScaling | None) -> torch.Tensor:
    """The product as a recipe computes it: fp8 (emulated, the kernel's rounding) or a bf16 GEMM (bf16 out)."""
    if scaling is None:
        return a.bfloat16() @ b.bfloat16()
    return fp8_matmul(a, b, scaling.a_rowwise, emulate=True, b_rowwise=scaling.b_rowwise)


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx.double() - exact).norm() / exact.norm())


def gemm_errors(captured: list[dict]) -> dict:
    """{recipe: {gemm: {median, max}}} over the linears, bf16 (every GEMM a bf16 GEMM) as the reference row."""
    recipes = {"bf16": (None, None, None)}
    recipes.update({name: (r.forward, r.dgrad, r.wgrad) for name, r in FP8_LINEAR_RECIPES.items()})
    out: dict = {name: {g: [] for g in GEMMS} for name in recipes}
    for entry in captured:
        for gemm, (a, b) in gemm_operands(entry).items():
            exact = a.double() @ b.double()
            for name, scalings in recipes.items():
                out[name][gemm].append(relative_error(recipe_product(a, b, scalings[GEMMS.index(gemm)]), exact))
    return {name: {g: {"median": statistics.median(v), "max": max(v)} for g, v in by_gemm.items()}
            for name, by_gemm in out.items()}


def _linear_grads(model, batch, autocast) -> dict[str, torch.Tensor]:
    """Weight gradients of every block linear for one forward/backward of ``batch`` (fp32 copies)."""
    model.zero_grad(set_to_none=True)
    with autocast:
        loss = model(*batch)
    loss.backward()
    grads = {f"blocks.{key}.{path}": _get(block, path).weight.grad.detach().float().clone()
             for key, block in model.blocks.items() for path in BLOCK_LINEARS}
    model.zero_grad(set_to_none=True)
    return grads


ATTRIBUTION = {"fp8 forward only": (GemmScaling(True, True), None, None),
               "fp8 dgrad only": (None, GemmScaling(True, False), None),
               "fp8 wgrad only": (None, None, GemmScaling(True, True))}
"""Diagnostic variants (not recipes): one GEMM of every linear in fp8 (rowwise, emulated), the others bf16 -- which
GEMM the end-to-end gradient error comes from."""


class _VariantFunction(torch.autograd.Function):
    """y = x W^T with each GEMM fp8 or bf16 as ``scalings`` (forward, dgrad, wgrad) say (``layers._gemm``)."""

    @staticmethod
    def forward(ctx, x, weight, scalings):
        ctx.save_for_backward(x, weight)
        ctx.scalings = scalings
        return layers._gemm(x, weight.t(), scalings[0], True, None)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        _, dgrad, wgrad = ctx.scalings
        return (layers._gemm(dy, weight, dgrad, True, None).to(x.dtype),
                layers._gemm(dy.t(), x, wgrad, True, None).to(weight.dtype), None)


class _VariantLinear(torch.nn.Linear):
    scalings: tuple = (None, None, None)

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        with torch.autocast("cpu", enabled=False):
            y = _VariantFunction.apply(x2, self.weight.to(torch.bfloat16), self.scalings)
        return y.reshape(*x.shape[:-1], self.out_features)


def gradient_errors(model, batch, autocast) -> dict:
    """End to end: each block linear's weight gradient under bf16 and each fp8 recipe (its linears swapped to
    ``Float8Linear``, emulated) against the fp32 model's (no autocast), relative error median / max over the
    linears. Unlike the per-GEMM table this includes the error dy carries from the layers above (dgrad). The
    ``ATTRIBUTION`` variants put one GEMM at a time in fp8."""
    original = {(key, path): _get(block, path) for key, block in model.blocks.items() for path in BLOCK_LINEARS}
    exact = _linear_grads(model, batch, torch.autocast("cpu", enabled=False))
    out = {}
    for name in ("bf16", *FP8_LINEAR_RECIPES, *ATTRIBUTION):
        for (key, path), linear in original.items():
            if name in FP8_LINEAR_RECIPES:
                _set(model.blocks[key], path, swap_linear(linear, Float8Linear, recipe=name, emulate=True))
            elif name in ATTRIBUTION:
                _set(model.blocks[key], path, swap_linear(linear, _VariantLinear, scalings=ATTRIBUTION[name]))
        grads = _linear_grads(model, batch, autocast)
        for (key, path), linear in original.items():
            _set(model.blocks[key], path, linear)
        errors = [float((grads[k] - g).norm() / g.norm()) for k, g in exact.items()]
        out[name] = {"median": statistics.median(errors), "max": max(errors)}
    return out


def gemm_study(tokens: int, seq_len: int, train_steps: int, seed: int = 0) -> dict:
    micro_batch = max(1, tokens // seq_len)
    spec = _spec(SMALL_LLAMA, micro_batch, seq_len)
    world = init_world("cpu")
    torch.manual_seed(seed)
    built = build_transformer(spec, world)
    for group in built.optimizers[0].param_groups:
        group["lr"] = 6e-4
    autocast = torch.autocast("cpu", dtype=built.autocast_dtype) if built.autocast_dtype else torch.autocast("cpu", enabled=False)
    data = TextBatches(micro_batch, seq_len, world.device, seed)
    phases, losses = {}, []
    start = time.monotonic()
    gradients = {}
    for phase, steps in (("initialisation", 0), (f"after {train_steps} bf16 steps", train_steps)):
        for _ in range(steps):
            losses.append(float(train_step(built, [data.next()], autocast, world.device)))
        batch = data.next()
        gradients[phase] = gradient_errors(built.model, batch, autocast)
        phases[phase] = gemm_errors(_capture(built, batch, autocast, world.device))
    return {"gradients": gradients, "model": SMALL_LLAMA, "tokens": micro_batch * seq_len, "seq_len": seq_len, "train_steps": train_steps,
            "lr": 6e-4, "loss_first_last": [losses[0], losses[-1]] if losses else [], "phases": phases,
            "wall_s": time.monotonic() - start}


# --------------------------------------------------------------------------------------- 2. convergence smoke
def smoke(steps: int, micro_batch: int, seq_len: int, lr: float) -> dict:
    """bf16 and each SMOKE_RECIPES recipe at seeds 0 and 1, judged by ``workbench.train.proof_fp8.fp8_result``."""
    rows, start = [], time.monotonic()
    for fp8, stem in SMOKE_CURVES.items():
        spec = _spec(SMOKE_LLAMA, micro_batch, seq_len, fp8)
        for seed in (0, 1):
            result = train(spec, RunOptions(steps=steps, warmup=0, device="cpu", lr=lr, seed=seed, progress=False))
            times = result.step_times_s
            rows.append({"experiment": "fp8", "name": f"small-{stem}" + ("-seed1" if seed else ""),
                         "metrics": {"losses": result.losses, "settings": {"fp8_backend": result.fp8_backend},
                                     "measured": {"step_time_s": statistics.median(times)}}})
    verdict = fp8_result(rows)
    verdict.pop("curves", None)
    return {"model": SMOKE_LLAMA, "steps": steps, "micro_batch": micro_batch, "seq_len": seq_len, "lr": lr,
            "result": verdict, "wall_s": time.monotonic() - start}


# ----------------------------------------------------------------------------------------------- report
def markdown(report: dict) -> str:
    g = report["gemms"]
    lines = ["# fp8 recipes on a CPU: GEMM errors and a convergence smoke (`benchmarks/train/fp8_recipe_numerics.py`)", "",
             "## GEMM relative error against the exact product of the same bf16 operands", "",
             f"fp8 proof's model (hidden 1024, FFN 2816, 4 blocks), {g['tokens']} tokens (seq {g['seq_len']}; the "
             f"proof has 8192), 16 block linears; median (largest) over them. fp8 emulated with the GPU kernel's "
             f"rounding. bf16: every GEMM a bf16 GEMM (the output's rounding).", ""]
    for phase, table in g["phases"].items():
        lines += [f"**{phase}**", "", "| recipe | forward | dgrad | wgrad |", "|---|---|---|---|"]
        for recipe, by_gemm in table.items():
            cells = [f"{by_gemm[x]['median']:.2%} ({by_gemm[x]['max']:.2%})" for x in GEMMS]
            lines.append(f"| {recipe} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Weight gradients end to end against the fp32 model's", "",
              "Each block linear's weight gradient for one batch under bf16 (autocast) and each fp8 recipe (its "
              "linears swapped to Float8Linear, emulated), against the same model in fp32: median (largest) relative "
              "error over the 16 linears. Includes what dy inherits from the layers above (their dgrad). The last "
              "rows are diagnostics, not recipes: one GEMM of every linear in fp8 (rowwise), the other two in bf16.",
              "",
              "| recipe | " + " | ".join(g["gradients"]) + " |", "|---|" + "---|" * len(g["gradients"])]
    for recipe in next(iter(g["gradients"].values())):
        cells = [f"{g['gradients'][phase][recipe]['median']:.2%} ({g['gradients'][phase][recipe]['max']:.2%})"
                 for phase in g["gradients"]]
        lines.append(f"| {recipe} | " + " | ".join(cells) + " |")
    lines.append("")
    if g.get("loss_first_last"):
        lines.append(f"bf16 loss over the {g['train_steps']} steps: {g['loss_first_last'][0]:.3f} -> "
                     f"{g['loss_first_last'][1]:.3f}.")
    s = report.get("smoke")
    if s:
        r = s["result"]
        lines += ["", "## Convergence smoke (a pointer; the H200 run is the proof)", "",
                  f"Tiny Llama (hidden {s['model']['hidden_size']}, {s['model']['num_layers']} blocks), "
                  f"{s['steps']} steps of {s['micro_batch']} x {s['seq_len']} tokens, lr {s['lr']:g}, seeds 0 and 1, "
                  f"fp8 emulated; the proof report's metrics ({r.get('window')}-step means after step {r.get('skip')}). "
                  f"bf16 seed band: {_pct(r.get('seed_max_relative_difference'))}; recipes within it at both seeds: "
                  f"**{', '.join(r.get('agreeing') or []) or 'none'}**.", "",
                  "| comparison | largest abs. difference | mean signed difference | final | step lag 25/50/75/90% |",
                  "|---|---|---|---|---|"]
        for label, c in r.get("comparisons", {}).items():
            lags = " / ".join(_pct(v, signed=True) for v in c["step_lags"])
            lines.append(f"| {label} | {_pct(c['max_relative_difference'])} | "
                         f"{_pct(c['mean_signed_difference'], signed=True)} | "
                         f"{_pct(c['final_relative_difference'], signed=True)} | {lags} |")
    lines += ["", f"Command: `{report['command']}`; {report['wall_s']:.0f} s, torch {report['torch']}."]
    return "\n".join(lines) + "\n"


def _pct(value, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.2%}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output directory")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per step of the GEMM study (the proof: 8192)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--train-steps", type=int, default=20, help="bf16 steps before the second GEMM measurement")
    p.add_argument("--smoke-steps", type=int, default=200, help="steps per smoke run; 0 skips the smoke")
    p.add_argument("--quick", action="store_true", help="512 tokens, 5 bf16 steps, 60 smoke steps")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.seq_len, args.train_steps, args.smoke_steps = 512, 256, 5, min(args.smoke_steps, 60)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"command": "python benchmarks/train/fp8_recipe_numerics.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "torch": torch.__version__}
    report["gemms"] = gemm_study(args.tokens, args.seq_len, args.train_steps)
    print(f"[numerics] GEMM study: {report['gemms']['wall_s']:.0f} s", flush=True)
    if args.smoke_steps:
        report["smoke"] = smoke(args.smoke_steps, micro_batch=8, seq_len=128, lr=3e-3)
        print(f"[numerics] smoke: {report['smoke']['wall_s']:.0f} s", flush=True)
    report["wall_s"] = time.monotonic() - start
    (out / "fp8_recipe_numerics.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    text = markdown(report)
    (out / "fp8_recipe_numerics.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
