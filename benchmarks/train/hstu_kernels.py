"""generative-recommenders' HSTU kernels timed alone on the fit shapes of ``hstu_kernel_split.json``, and the
``generative-recommenders`` stack's kernel fractions derived from them (issue 17, second round).

Timed per fit shape (batch B, full histories of S tokens, L = B x S, the ``hstu-gr`` widths): upstream's
``triton_hstu_attention_fwd`` / ``_bwd`` on q, k, v viewed out of one [L, uvqk] tensor (as the STU layer splits
them), ``triton_layer_norm_mul_dropout_fwd`` / ``_bwd`` as ``HSTUComputeOutputFunction`` calls them (concat of u and
x, dropout 0.3, ``compute_y`` in backward), and ``triton_addmm_fwd`` of the uvqk projection (reported, not fitted:
the GEMM model prices it). Each kernel: warm-up calls (Triton compilation and autotuning), then CUDA-event timings,
median.

The fractions: for each fit shape, the one that makes the workbench's own time model of that op
(``workbench.graph.hstu_gr_kernels.hstu_gr_layer_ops``: its FLOPs, bytes and wave quantization) equal the
measured time, then the median over the fit shapes. The step rows (``hstu_h200.py``) are the test.

    python benchmarks/train/hstu_kernels.py --out DIR [--budget-s 120]
    python benchmarks/train/hstu_kernels.py --dry-run --out DIR      # CPU: the fit arithmetic on made-up times

Writes under ``--out``: ``kernels_fit.jsonl`` (one line per shape and kernel), ``fitted_constants.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for path in (REPO, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
from workbench.fileio import read_text, write_text  # noqa: E402

SPLIT = HERE / "hstu_kernel_split.json"
DROPOUT = 0.3  # STULayerConfig.output_dropout_ratio default (modules/stu.py)
FITTED = {  # constant -> (workbench op name, what the fraction is of)
    "attention_fwd_fraction.hstu-triton": ("hstu_attention.fwd", "attention"),
    "attention_bwd_fraction.hstu-triton": ("hstu_attention.bwd", "attention"),
    "memory_fraction.hstu_ln_mul_dropout_fwd": ("ln_mul_dropout.fwd", "memory"),
    "memory_fraction.hstu_ln_mul_dropout_bwd": ("ln_mul_dropout.bwd", "memory"),
}
KERNELS = ("attn_fwd", "attn_bwd", "ln_mul_dropout_fwd", "ln_mul_dropout_bwd", "addmm_uvqk")
KERNEL_OP = {"attn_fwd": "hstu_attention.fwd", "attn_bwd": "hstu_attention.bwd",
             "ln_mul_dropout_fwd": "ln_mul_dropout.fwd", "ln_mul_dropout_bwd": "ln_mul_dropout.bwd",
             "addmm_uvqk": "uvqk.fwd"}


def load_split(path: Path = SPLIT) -> dict:
    """The fit and test shapes; a fit shape that is also a test row is an error."""
    split = json.loads(read_text(path))
    fit = [tuple(x) for x in split["fit"]]
    test = [tuple(x) for x in split["test"]]
    shared = set(fit) & set(test)
    if shared:
        raise ValueError(f"{path}: fit shapes {sorted(shared)} are also test rows; expected disjoint sets")
    return {"fit": fit, "test": test}


def hstu_model():
    from workbench.models import get_model

    return get_model("hstu-gr")


# --- timing (the GPU) -------------------------------------------------------------------------------------------

def _median_ms(fn, warmup: int, repeats: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_kernels(batch: int, seq_len: int, warmup: int = 3, repeats: int = 10) -> dict[str, float]:
    """Milliseconds per call of each of ``KERNELS`` at one shape (full histories)."""
    import torch

    import hstu_step  # noqa: F401  (puts hstu_vendor/ on the path, registers the fbgemm stand-ins)
    from generative_recommenders.ops.triton.triton_addmm import triton_addmm_fwd
    from generative_recommenders.ops.triton.triton_hstu_attention import (
        _should_enable_tma,
        triton_hstu_attention_bwd,
        triton_hstu_attention_fwd,
    )
    from generative_recommenders.ops.triton.triton_hstu_linear import (
        triton_layer_norm_mul_dropout_bwd,
        triton_layer_norm_mul_dropout_fwd,
    )

    m = hstu_model()
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    h, dq, dv, d = m.num_heads, m.attention_dim, m.linear_dim, m.embedding_dim
    tokens = batch * seq_len
    torch.manual_seed(0)
    offsets = torch.arange(0, tokens + 1, seq_len, device=dev, dtype=torch.int64)
    uvqk = torch.randn(tokens, m.uvqk_width, device=dev, dtype=bf16) * 0.1
    # uvqk.split([u, v, q, k]) as the STU layer does: q, k, v are strided views
    u, v, q, k = uvqk.split([h * dv, h * dv, h * dq, h * dq], dim=1)
    q, k, v = q.view(-1, h, dq), k.view(-1, h, dq), v.view(-1, h, dv)
    alpha = 1.0 / dq ** 0.5  # STULayer's default attn_alpha
    tma = _should_enable_tma()
    attn_args = dict(N=seq_len, alpha=alpha, seq_offsets=offsets, num_targets=None, max_attn_len=0,
                     contextual_seq_len=0, sort_by_length_indices=None, enable_tma=tma, num_softmax_heads=0)
    out = triton_hstu_attention_fwd(q=q, k=k, v=v, **attn_args)
    dout = torch.randn_like(out)
    duvqk = torch.empty_like(uvqk)
    _, dv_, dq_, dk_ = duvqk.split([h * dv, h * dv, h * dq, h * dq], dim=1)
    dq_, dk_, dv_ = dq_.view(-1, h, dq), dk_.view(-1, h, dq), dv_.view(-1, h, dv)
    bwd_args = {k_: v_ for k_, v_ in attn_args.items()}
    times = {
        "attn_fwd": _median_ms(lambda: triton_hstu_attention_fwd(q=q, k=k, v=v, **attn_args), warmup, repeats),
        "attn_bwd": _median_ms(lambda: triton_hstu_attention_bwd(dout=dout, q=q, k=k, v=v, dq=dq_, dk=dk_, dv=dv_,
                                                                 **bwd_args), warmup, repeats),
    }
    attn = out.reshape(tokens, h * dv)
    gate = u.contiguous()
    w = torch.ones(h * dv, device=dev, dtype=bf16)  # the STU layer casts its norm weights to x.dtype
    b = torch.zeros(h * dv, device=dev, dtype=bf16)
    norm = dict(weight=w, bias=b, eps=1e-6, dropout_ratio=DROPOUT, training=True, concat_u=True, concat_x=True)
    y, mean, rstd, block_d, warps, seed, mask = triton_layer_norm_mul_dropout_fwd(x=attn, u=gate, **norm)
    dy = torch.randn_like(y)
    times["ln_mul_dropout_fwd"] = _median_ms(
        lambda: triton_layer_norm_mul_dropout_fwd(x=attn, u=gate, seed=seed, **norm), warmup, repeats)
    times["ln_mul_dropout_bwd"] = _median_ms(
        lambda: triton_layer_norm_mul_dropout_bwd(dy=dy, x=attn, u=gate, mean=mean, rstd=rstd, BLOCK_D=block_d,
                                                  num_warps=warps, seed=seed, compute_y=True, random_mask=mask,
                                                  **norm), warmup, repeats)
    x = torch.randn(tokens, d, device=dev, dtype=bf16)
    weight = torch.randn(d, m.uvqk_width, device=dev, dtype=bf16) * 0.05
    bias = torch.zeros(m.uvqk_width, device=dev, dtype=bf16)
    times["addmm_uvqk"] = _median_ms(lambda: triton_addmm_fwd(x, weight, bias), warmup, repeats)
    return times


# --- the fit (pure arithmetic on the workbench's op models) -----------------------------------------------------

def workbench_ops(batch: int, seq_len: int) -> dict:
    """The generative-recommenders stack's layer ops at one shape, by name."""
    from workbench.graph.hstu_gr_kernels import hstu_gr_layer_ops

    return {op.name: op for op in hstu_gr_layer_ops(hstu_model(), batch * seq_len, batch, seq_len, "bf16")}


def implied_fraction(op, measured_s: float, what: str, gpu, constants) -> float:
    """The fraction that makes the workbench's time of ``op`` equal ``measured_s`` (``perf.attention``: FLOPs over
    peak x fraction x wave efficiency + launch; ``perf.memory_bound``: bytes over HBM x fraction + launch)."""
    from workbench.perf.attention import _wave_efficiency
    from workbench.precision import get_precision

    if what == "attention":
        peak = gpu.peak_tflops(get_precision(op.dtype).peak_key) * 1e12
        waves = _wave_efficiency(op.shape, gpu.compute_units.value)
        busy = measured_s - constants["attention_launch_us"] * 1e-6
        return op.flops / (peak * waves * busy)
    busy = measured_s - constants["memory_launch_us"] * 1e-6
    return op.bytes / (gpu.hbm_bandwidth_tb_s.value * 1e12 * busy)


def fit(rows: list[dict], gpu_name: str = "h200") -> dict:
    """``FITTED``'s constants from the timed fit rows: the median over shapes of each op's implied fraction; and,
    reported, the uvqk addmm's measured over predicted time."""
    from workbench.hardware import get_gpu
    from workbench.perf import op_time
    from workbench.perf.efficiency import constants_for

    gpu = get_gpu(gpu_name)
    constants = constants_for(gpu)
    per_shape: dict[str, list[float]] = {name: [] for name in FITTED}
    addmm_ratio = []
    for r in rows:
        if "ms" not in r:
            continue
        op = workbench_ops(r["batch"], r["seq_len"])[KERNEL_OP[r["kernel"]]]
        for name, (op_name, what) in FITTED.items():
            if op_name == op.name:
                per_shape[name].append(implied_fraction(op, r["ms"] * 1e-3, what, gpu, constants))
        if r["kernel"] == "addmm_uvqk":
            addmm_ratio.append(r["ms"] * 1e-3 / op_time(op, gpu, constants).time_s)
    shapes = sorted({(r["batch"], r["seq_len"]) for r in rows if "ms" in r})
    source = (f"benchmarks/train/hstu_kernels.py on {gpu_name}: median over the fit shapes "
              f"{', '.join(f'b{b}-s{s}' for b, s in shapes)} (hstu_kernel_split.json) of the fraction that makes "
              "the workbench's time of the op equal the measured one")
    constants_out = {name: {"value": round(statistics.median(v), 4), "kind": "sourced", "per_shape":
                            [round(x, 4) for x in v], "source": source} for name, v in per_shape.items() if v}
    return {"constants": constants_out,
            "addmm_uvqk_measured_over_predicted": round(statistics.median(addmm_ratio), 3) if addmm_ratio else None}


def fitted_values(fitted: dict) -> dict[str, float]:
    return {name: c["value"] for name, c in fitted.get("constants", {}).items()}


def efficiency_yaml(fitted: dict) -> str:
    """The ``specs/efficiency.yaml`` lines (H200 architecture section) the lead pastes in after the run."""
    lines = []
    for name, c in fitted.get("constants", {}).items():
        lines.append(f'  {name}: {{value: {c["value"]}, kind: sourced, source: "{c["source"]}; per shape '
                     f'{c["per_shape"]}"}}')
    return "\n".join(lines)


def run(out: Path, budget_s: float, dry_run: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    split = load_split()
    began = time.perf_counter()
    rows = []
    for batch, seq_len in split["fit"]:
        left = budget_s - (time.perf_counter() - began)
        if left < 10:
            rows.append({"batch": batch, "seq_len": seq_len, "error": f"skipped: {left:.0f} s of the budget left"})
            continue
        try:
            if dry_run:  # made-up times: tests the arithmetic, claims nothing
                times = {k: 1.0 + i for i, k in enumerate(KERNELS)}
            else:
                times = time_kernels(batch, seq_len)
            for kernel, ms in times.items():
                rows.append({"batch": batch, "seq_len": seq_len, "kernel": kernel, "ms": ms})
            print(f"[hstu-kernels] b{batch}-s{seq_len}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()),
                  file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 -- one failed shape is recorded, the others go on
            rows.append({"batch": batch, "seq_len": seq_len, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            print(f"[hstu-kernels] b{batch}-s{seq_len}: FAILED {exc}", file=sys.stderr, flush=True)
    write_text(out / "kernels_fit.jsonl", "".join(json.dumps(r) + "\n" for r in rows), overwrite=True)
    fitted = fit(rows)
    fitted["dry_run"] = dry_run
    fitted["elapsed_s"] = round(time.perf_counter() - began, 1)
    write_text(out / "fitted_constants.json", json.dumps(fitted, indent=2) + "\n", overwrite=True)
    return fitted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=120.0, help="wall-clock cap of the fit")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: made-up times through the fit arithmetic")
    args = parser.parse_args(argv)
    fitted = run(args.out, args.budget_s, args.dry_run)
    print(json.dumps(fitted))
    return 0 if fitted["constants"] else 1


if __name__ == "__main__":
    sys.exit(main())
