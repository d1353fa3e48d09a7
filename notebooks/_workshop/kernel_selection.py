"""03: zero-warmup kernel selection (workbench.select) vs autotuning, scored on the committed H200 sweep."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 3. Kernel selection: autotuning vs zero warm-up

A Triton kernel is a family: the same code compiled with different **launch configs** (tile sizes
BLOCK_M x BLOCK_N x BLOCK_K, warps, pipeline stages; on AMD also waves per EU and the matrix instruction).
Which config is fastest depends on the shape, the dtype and the GPU.

- **Autotuning** (`triton.autotune`) compiles and times every config on the real GPU the first time it sees a
  shape. It finds the best, but costs a minute of warm-up per new shape and needs the GPU.
- **Zero-warmup selection** picks a config *without running anything*. The simplest is one fixed default;
  `workbench.select` instead ranks the whole config space per shape with a model of tiles, waves, K steps,
  alignment and occupancy, in milliseconds, on any machine.

This notebook scores both against an exhaustive H200 sweep committed in `benchmarks/results/h200/select/`:
every config of the project's Triton GEMM on GEMM shapes from the catalog's models plus skinny, odd and random
ones, each timed, with the vendor library (cuBLAS) beside it. Nothing here needs a GPU.
'''),
        setup(),
        code('''
import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from workbench.kernels.spaces import gemm_config_space
from workbench.select import gemm as gemm_select
from workbench.hardware import get_gpu
from workbench.select import rank_configs
from workbench.select.profile import sweep_layout, write_selection_profile
from workbench.select.sweeps import fit_frame, load_sweeps

REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "benchmarks" / "results").is_dir())
SELECT = REPO / "benchmarks" / "results" / "h200" / "select"
# Six sweep runs: later ones re-measured shapes after kernel changes (divisibility hints, padded copies of
# unaligned operands from run 4 on) or added the Hopper TMA kernel's fp8 configs (run 6); load_sweeps keeps one
# version of each kernel per shape and holds out every other shape.
runs = [SELECT / name for name in ("select_sweep.csv", "select_sweep_run2.csv", "select_sweep_run3.csv",
                                   "select_sweep_run4.csv", "select_sweep_run5.csv", "select_sweep_run6_tma.csv")]
sweep = load_sweeps(runs, padded_since=runs[3])
sweep = sweep[sweep.part.str.startswith("gemm") & sweep.error.isna()].copy()
sweep["family"] = sweep.source.str.split(" ").str[0]  # llama3-8b, gpt2-small, ..., skinny, odd, log-uniform
sweep["config_key"] = [gemm_select.config_key(json.loads(c)) if k == "triton" else "vendor"
                       for c, k in zip(sweep.config, sweep.kind)]
held_out = set(zip(sweep[sweep.held_out].part, sweep[sweep.held_out].shape_id))
# Score honestly: rank with a profile fitted on the other shapes only, written to a scratch calibration
# directory. (The shipped profile, specs/calibration/h200-sxm-select.yaml, was fitted on every measured shape.)
os.environ["WORKBENCH_CALIBRATION_DIR"] = tempfile.mkdtemp(prefix="notebook3-")
write_selection_profile("h200-sxm", fit_frame(sweep[~sweep.held_out], get_gpu("h200-sxm"), "the fit half"),
                        source="notebook 3: the fit half")
print(f"{len(sweep)} timed runs on {sweep.groupby(['part', 'shape_id']).ngroups} GEMM shapes "
      f"({', '.join(sorted(sweep.part.unique()))}); {len(held_out)} shapes held out from the selector's fit")
'''),
        md('''
## 1. The config space

`gemm_config_space("cuda", dtype_bytes=2)` lists the sm_90 configs the kernel accepts for 2-byte operands:
every tile that fits the shared memory with enough stages in flight and a sane accumulator per thread. The first
is the kernel's static **default**.
'''),
        code('''
space = gemm_config_space("cuda", dtype_bytes=2)
print(f"{len(space)} configs for bf16/fp16 on sm_90, {len(gemm_config_space('cuda', dtype_bytes=1))} for fp8")
pd.DataFrame(space).head(6)
'''),
        md('''
## 2. What is at stake

Per shape: the best and worst config, the static default and the vendor library. The chart shows, for every
shape, the share of the best config's speed that the **default** reaches (1.0 = it is the best). On the Llama
projections it was tuned for, the default is fine; on skinny, odd and random shapes it often reaches half.
'''),
        code('''
triton = sweep[sweep.kind == "triton"]
keys = ["part", "shape_id"]
shapes = triton.groupby(keys).agg(family=("family", "first"), dtype=("dtype", "first"), m=("m", "first"),
                                  n=("n", "first"), k=("k", "first"), layout=("layout", "first"),
                                  held_out=("held_out", "first"), best_ms=("ms", "min"), worst_ms=("ms", "max"))
shapes["default_ms"] = triton[(triton.is_default == 1) & (triton.kernel == "triton")].set_index(keys).ms  # gemm.py's
shapes["vendor_ms"] = sweep[sweep.kind == "vendor"].set_index(keys).ms
shapes = shapes.reset_index()
shapes["default_share"] = shapes.best_ms / shapes.default_ms
print(f"worst config / best: median {(shapes.worst_ms / shapes.best_ms).median():.1f}x, "
      f"up to {(shapes.worst_ms / shapes.best_ms).max():.0f}x; the default is within 5% of the best on "
      f"{(shapes.default_share >= 0.95).mean():.0%} of the shapes")
alt.Chart(shapes[["family", "part", "default_share", "m", "n", "k"]]).mark_circle(size=40, opacity=0.6).encode(
    x=alt.X("default_share:Q", title="best time / default time (1 = the default is the best)",
            scale=alt.Scale(domain=[0, 1])),
    y=alt.Y("family:N", title=None), color="part:N", tooltip=["family", "m", "n", "k", "default_share"],
).properties(width=460, height=260, title="The static default config, per shape (H200)")
'''),
        md('''
## 3. What autotuning costs

`triton.autotune` times each config with `triton.testing.do_bench`: about 25 ms of warm-up and 100 ms of timed
repetitions by default, after compiling it (on the order of a second per config; a guess that depends on the
compiler version and the host CPU, measure yours). A training step has many distinct GEMM shapes:
'''),
        code('''
DO_BENCH_S = 0.025 + 0.100  # triton.testing.do_bench defaults: warmup=25 ms, rep=100 ms
COMPILE_S = 1.0  # guess, per config: measure with your triton version on your host
step = workbench.predict("llama3-8b", "h200-sxm", micro_batch=1, seq_len=8192, gpus=8)
step_gemms = {(o.op.shape.m, o.op.shape.n, o.op.shape.k) for o in step.ops if o.op.kind == "gemm"}
per_shape_s = len(space) * (DO_BENCH_S + COMPILE_S)
print(f"Llama 3 8B step: {len(step_gemms)} distinct GEMM shapes x {len(space)} configs -> about "
      f"{len(step_gemms) * per_shape_s / 60:.0f} min of autotuning before the first fast step, on the GPU")
'''),
        md('''
## 4. Zero-warmup selection with `workbench.select`

`rank_configs("gemm", shape, dtype, gpu, layout=...)` predicts every config's time and sorts them. Each
`Candidate` says why: output tiles, waves per SM (`tiles_per_unit`), programs resident per SM (`occupancy`).
Here is one held-out shape with the measured time of each of the top five beside the prediction:
'''),
        code('''
example = shapes[shapes.held_out & (shapes.family == "odd") & (shapes.part == "gemm-bf16")].iloc[0]
measured = triton[(triton.part == example.part) & (triton.shape_id == example.shape_id)].set_index("config_key").ms
shape = {"m": int(example.m), "n": int(example.n), "k": int(example.k)}
top = rank_configs("gemm", shape, example["dtype"], "h200-sxm", layout=example.layout, top_k=5)
print(f"{shape}, layout {example.layout}: best measured {example.best_ms:.3f} ms, default {example.default_ms:.3f} ms")
pd.DataFrame([{"config": c.key, "predicted_ms": c.time_s * 1e3, "measured_ms": measured.get(c.key, np.nan),
               "tiles": c.tiles, "waves": c.tiles_per_unit, "occupancy": c.occupancy, "source": c.source}
              for c in top]).round(3)
'''),
        md('''
## 5. Scored on every held-out shape

For each held-out shape: the selector's top-1 config, and the best of its top *k* if you time just those
(model-guided autotuning: k benchmarks instead of the whole space). The score is best time / chosen time.
'''),
        code('''
K_MAX = 20
measured_ms = {key: group.set_index("config_key").ms for key, group in triton.groupby(keys)}
rows, started = [], time.perf_counter()
for s in shapes[shapes.held_out].itertuples():
    times = measured_ms[s.part, s.shape_id]  # config key -> measured ms
    ranked = [c.key for c in rank_configs("gemm", {"m": int(s.m), "n": int(s.n), "k": int(s.k)}, s.dtype,
                                          "h200-sxm", layout=sweep_layout(s._asdict())) if c.key in times.index]
    rows.append({"part": s.part, "family": s.family, "best_ms": s.best_ms, "default_ms": s.default_ms,
                 "vendor_ms": s.vendor_ms,
                 **{f"top{k}_ms": times[ranked[:k]].min() for k in range(1, K_MAX + 1)}})
select_s = time.perf_counter() - started
scores = pd.DataFrame(rows)


def geomean_share(column):
    """Geometric mean over the held-out shapes of best time / the column's time."""
    return float(np.exp(np.log(scores.best_ms / scores[column]).mean()))


print(f"{len(scores)} held-out shapes ranked in {select_s:.2f} s on this CPU; geometric mean of best / chosen: "
      f"default {geomean_share('default_ms'):.3f}, selector top-1 {geomean_share('top1_ms'):.3f}, "
      f"best of its top-3 {geomean_share('top3_ms'):.3f}")
'''),
        code('''
curves = pd.concat([pd.DataFrame({"choice": label, "share": np.sort(scores.best_ms / scores[column])[::-1],
                                  "fraction": np.arange(1, len(scores) + 1) / len(scores)})
                    for label, column in [("static default", "default_ms"), ("selector top-1", "top1_ms"),
                                          ("best of selector top-3", "top3_ms")]])
alt.Chart(curves).mark_line().encode(
    x=alt.X("fraction:Q", title="fraction of held-out shapes", axis=alt.Axis(format="%")),
    y=alt.Y("share:Q", title="best time / chosen time", scale=alt.Scale(domain=[0, 1.02])),
    color=alt.Color("choice:N", sort=["static default", "selector top-1", "best of selector top-3"]),
).properties(width=460, height=280, title="Each curve: shapes sorted from best-served to worst-served")
'''),
        md('''
The selector closes most of the gap to exhaustive autotuning at zero warm-up, and timing only its top few
configs closes nearly all of it: a pruned autotuner (`workbench.select.autotune_pruner` plugs into
`triton.autotune`) needs a handful of benchmarks per shape instead of the whole space. The remaining misses
are listed in `benchmarks/results/h200/select/REPORT.md`; the vendor library is still faster on many of these
shapes, which is what `workbench.select.vendor_choice` decides per GEMM.

## Exercise

Model-guided autotuning times only the selector's top *k* configs. What is the **smallest k** for which the
geometric mean of best / chosen over the held-out shapes reaches **0.99**? (Use `scores` and
`geomean_share`; `top{k}_ms` holds the best measured time among the top k.)

Fill in the answer cell (replace the `...`) and run the check under it, which recomputes the scores from the
selector's ranking and the H200 measurements. One solution is in `solutions/03_kernel_selection.ipynb`.
'''),
        *exercise(
            {"smallest_k": "an integer k between 1 and K_MAX"},
            solution='''
smallest_k = next((k for k in range(1, K_MAX + 1) if geomean_share(f"top{k}_ms") >= 0.99), K_MAX)
''', wrong_answer='''
smallest_k = K_MAX
''', check='''
k = int(smallest_k)
reaches = 1 <= k <= K_MAX and geomean_share(f"top{k}_ms") >= 0.99
smaller_reaches = 1 < k <= K_MAX and geomean_share(f"top{k - 1}_ms") >= 0.99
if reaches and not smaller_reaches:
    print(f"PASS: timing the selector's top {k} reaches {geomean_share(f'top{k}_ms'):.3f} of the exhaustive best "
          f"with {k} benchmarks per shape instead of {len(space)}")
elif not reaches:
    print(f"NOT YET: with k = {smallest_k} the geometric mean is below 0.99; try a larger k")
else:
    print(f"NOT YET: k = {k - 1} already reaches 0.99; look for the smallest k")
'''),
        md('''
## Take-aways

- The launch config is worth up to several-fold on the same shape, and a fixed default only serves the
  shapes it was tuned on.
- Autotuning finds the best at the price of warm-up on the target GPU for every new shape; a zero-warmup
  selector moves that work to a model that runs anywhere (`workbench select` on the command line), and a
  few guided benchmarks recover the rest.
'''),
    ]
