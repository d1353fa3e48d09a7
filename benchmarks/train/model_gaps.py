"""What the analytical step model leaves out of the H200 training proof's recipes, in ms per step, priced with
the model's own H200 figures (HBM 4.8 TB/s x the calibrated memory fraction, the calibrated per-kernel cost).

    python benchmarks/train/model_gaps.py          # prints the table behind benchmarks/results/h200/train/MODEL_GAPS.md

Byte counts per element are read off the job's code (workbench/train/layers.py, llama.py, dlrm.py, torch's
eager kernels for each op there), as (bytes the eager code moves) - (bytes the model's op charges). They are
estimates to check against ``benchmarks/train/train_profile.py``; each says where it comes from.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from workbench.hardware import get_gpu  # noqa: E402
from workbench.perf.efficiency import constants_for  # noqa: E402
from workbench.recipe import load_recipe  # noqa: E402
from workbench.recipe.build import predict_recipe, recipe_model  # noqa: E402

RECIPES = REPO / "benchmarks" / "results" / "h200" / "train" / "recipes"
MEASURED_S = {"port-h100-recipe": 0.4207, "codesigned-h200": 0.9740, "llama1b-mb2-none-compiled": 0.1623,
              "dlrm-mb32k-compiled": 0.0345, "llama1b-mb4-fp8-eager": 0.7358,
              "llama8b-4l-mb2-selective-eager": 0.3982, "llama1b-mb8-full-eager": 1.0309}
"""Median measured step (s) from benchmarks/results/h200/train/REPORT.md."""

# Extra bytes per element, eager code minus the model's op (fwd, bwd); the model charges 4 / 6 B (norm),
# 4 / 4 (rope), 6 / 10 (swiglu, per [T, f] output element), 2 / 4 (cross-entropy, per logit).
NORM_EXTRA = (46 - 4, 100 - 6)
"""RMSNormFunction: fwd x.float, square, mean, x.float, *rstd, *w, .to(bf16) = 46 B; bwd 13 fp32 passes = 100 B."""
ROPE_EXTRA = (18 - 4, 20 - 4)
"""apply_rope: 4 half-size products, a sub, an add and a cat = 18 B; bwd neg, 4 products, 2 adds, cat = 20 B."""
SWIGLU_EXTRA = (10 - 6, 148 - 10)
"""SwiGLUFunction: fwd silu then * up = 10 B; bwd gate_up.float, sigmoid, 2x dout.float, 8 fp32 products/sums,
cat, .to(bf16) = 148 B."""
CE_EXTRA = 30 + 40 - 6
"""ChunkedCrossEntropy: fwd .float + logsumexp (amax, sub, exp, sum) = 30 B; bwd .float, -lse, exp, *scale,
.to, copy into dlogits = 40 B; the model charges 2 + 4."""
FSDP_BYTES_PER_PARAM = 30
"""FSDP2 on one rank, per parameter per step: 2 all-gathers (fp32 -> bf16 copy-in 6 B, copy-out 4 B) and one
reduce-scatter (bf16 -> fp32 chunk-cat 6 B, out-of-place 1-rank NCCL copy 8 B) = 34 B, less the 2 B bf16 copy
the model's optimizer already writes; a guess until the profile's ``fsdp`` class is read."""
FP8_QUANT_BYTES = 33
"""quantize_fp8 per bf16 element: abs, amax, .float, *scale, clamp, .to(e4m3) = 4 + 2 + 6 + 8 + 8 + 5 B."""
EXTRA_KERNELS_PER_LAYER = {"norm": 2 * 18, "rope": 2 * 15, "swiglu": 12}
"""Kernels the eager ops launch beyond the model's one per op and pass (counted from the code above)."""


def bandwidth(c) -> float:
    return get_gpu("h200-sxm").hbm_bandwidth_tb_s.value * 1e12 * c["memory_fraction.default"]


def llama_gaps(name: str) -> dict[str, float]:
    recipe = load_recipe(RECIPES / f"{name}.yaml")
    m, c = recipe_model(recipe), constants_for(get_gpu("h200-sxm"), calibrated=True)
    bw, launch = bandwidth(c), c["memory_launch_us"] * 1e-6
    t = recipe.batch.micro_batch * recipe.batch.seq_len
    h, f, q, kv, layers, v = m.hidden_size, m.ffn_hidden_size, m.q_size, m.kv_size, m.num_layers, m.vocab_size
    ac = recipe.activation_checkpointing.mode
    recompute = ac in ("selective", "full")
    gaps = {}
    if not recipe.compile:  # blocks run eagerly (compiled blocks are fused by inductor)
        norm = t * h * (NORM_EXTRA[0] * (2 if recompute else 1) + NORM_EXTRA[1]) * 2 * layers
        rope = t * (q + kv) * (ROPE_EXTRA[0] * (2 if recompute else 1) + ROPE_EXTRA[1]) * layers
        swiglu = t * f * (SWIGLU_EXTRA[0] * (2 if recompute else 1) + SWIGLU_EXTRA[1]) * layers
        copies = (t * kv * 4 * (2 if recompute else 1) + t * (q + 2 * kv) * 4) * layers  # v.contiguous, dqkv cat
        gaps |= {"eager RMSNorm": norm / bw, "eager RoPE": rope / bw, "eager SwiGLU": swiglu / bw,
                 "eager v copy + dqkv cat": copies / bw,
                 "eager extra kernels (fixed cost)": sum(EXTRA_KERNELS_PER_LAYER.values()) * layers
                 * (2 if recompute else 1) * launch}
    gaps["final RMSNorm (eager in every run)"] = t * h * sum(NORM_EXTRA) / bw
    gaps["cross-entropy in fp32 chunks (eager in every run)"] = t * v * CE_EXTRA / bw
    gaps["FSDP2 copy-in/out and casts on 1 GPU"] = m.num_params * FSDP_BYTES_PER_PARAM / bw
    if recipe.precision.fp8 != "none":
        per_linear = []
        for k, n in ((h, q + 2 * kv), (q, h), (h, 2 * f), (f, h)):
            mk, nk, mn = t * k, n * k, t * n
            quant = FP8_QUANT_BYTES * 2 * (mk + nk + mn)  # fwd (x, W), dgrad (dy, W), wgrad (dy^T, x)
            copies = 2 * (nk + mn + mk)  # K-major copies of W (dgrad), dy^T and x (wgrad)
            modelled = 3 * (mk + 2 * nk + mn)  # _fp8_casts: fwd and dgrad inputs, 3 B each
            per_linear.append(quant + copies - modelled)
        gaps["fp8 quantize ops + K-major copies"] = sum(per_linear) * layers / bw
        gaps["fp8 extra kernels (fixed cost)"] = 4 * 3 * 14 * layers * launch
    return gaps


def dlrm_gaps(name: str) -> dict[str, float]:
    recipe = load_recipe(RECIPES / f"{name}.yaml")
    m, c = recipe_model(recipe), constants_for(get_gpu("h200-sxm"), calibrated=True)
    bw = bandwidth(c)
    b, d = recipe.batch.micro_batch, m.embedding_dim
    lookups = b * sum(t.pooling for t in m.tables)
    unique = sum(t.rows * (1 - (1 - 1 / t.rows) ** (b * t.pooling)) for t in m.tables)  # uniform random ids
    rows_b = d * 4
    # sparse grad values (index_select of the pooled grad: R+W per lookup), coalesce (sort, gather R+W,
    # segment sum R lookups W unique), row-wise Adagrad (norm R, mul_ R+W, index_add_ R values + R/W rows)
    actual = (2 * lookups + 3 * lookups + unique + 3 * unique + 3 * unique) * rows_b
    modelled = (lookups * (2 + b * len(m.tables) / lookups)) * rows_b
    interaction = 2 * (b * len(m.tables) * d) * (8 + 6)  # pooled transpose copy + .to(bf16), fwd and bwd
    return {"sparse embedding grad + coalesce + separate row-wise Adagrad": (actual - modelled) / bw,
            "sort of the lookups in coalesce (~4 passes of 16 B keys+values)": lookups * 16 * 4 / bw,
            "pooled transpose/cast around the interaction": interaction / bw}


def main() -> None:
    for name, measured in MEASURED_S.items():
        predicted = predict_recipe(load_recipe(RECIPES / f"{name}.yaml"), calibrated=True).summary.step_time_s
        gaps = dlrm_gaps(name) if name.startswith("dlrm") else llama_gaps(name)
        total = sum(gaps.values())
        print(f"\n{name}: measured {measured * 1e3:.1f} ms, predicted {predicted * 1e3:.1f} ms, gap "
              f"{(measured - predicted) * 1e3:+.1f} ms; estimated missing {total * 1e3:.1f} ms "
              f"-> {(predicted + total) * 1e3:.1f} ms ({(measured / (predicted + total) - 1) * 100:+.0f}%)")
        for gap, s in gaps.items():
            print(f"  {gap:<60} {s * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
