"""03: zero-warmup kernel selection vs autotuning, on the committed H200 config sweep."""

from _workshop.cells import check, code, exercise, md, setup


def cells():
    return [
        md('''
# 3. Kernel selection: autotuning vs zero warm-up

A Triton kernel is a family: the same code compiled with different **launch configs** (tile sizes
BLOCK_M x BLOCK_N x BLOCK_K, warps, pipeline stages; on AMD also waves per EU and the matrix instruction).
Which config is fastest depends on the shape, the dtype and the GPU.

- **Autotuning** (`triton.autotune`) compiles and times every config on the real GPU the first time a shape is
  seen. It finds the best, but costs seconds to minutes of warm-up per new shape, needs the GPU, and is noisy.
- **Zero-warmup selection** picks a config *without running anything*: a fixed default, or a model that ranks
  the configs from the shape and the GPU's spec.

How much is at stake? This notebook reads the committed H200 sweep: every config of the project's Triton GEMM
on eight Llama 3 projections, bf16 and fp8 (`benchmarks/results/h200/kernels/gemm_sweep.csv`, 816 timed runs).
'''),
        setup(),
        code('''
import json
from pathlib import Path

from workbench.kernels.gemm import config_space

REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "benchmarks" / "results").is_dir())
sweep = pd.read_csv(REPO / "benchmarks" / "results" / "h200" / "kernels" / "gemm_sweep.csv")
sweep = sweep[sweep.error.isna()].copy()
sweep["shape"] = sweep.m.astype(str) + "x" + sweep.n.astype(str) + "x" + sweep.k.astype(str)
sweep["config"] = sweep.config.map(lambda text: json.dumps(json.loads(text), sort_keys=True))
print(f"{len(sweep)} measured runs: {sweep.groupby(['dtype', 'shape']).ngroups} (dtype, shape) pairs, "
      f"{sweep.groupby('dtype').config.nunique().to_dict()} configs per dtype")
'''),
        md('''
## 1. The config space

`config_space("cuda", dtype_bytes=2)` lists the sm_90 configs the kernel accepts for 2-byte operands: every
tile that fits the shared memory with enough stages in flight and a sane accumulator per thread. The first one
is the **default** (`config=None`), itself picked from this sweep.
'''),
        code('''
SPACE = {"bf16": config_space("cuda", dtype_bytes=2), "fp8": config_space("cuda", dtype_bytes=1)}
DEFAULT = {dtype: json.dumps(space[0], sort_keys=True) for dtype, space in SPACE.items()}
pd.DataFrame(SPACE["bf16"]).head(8)
'''),
        md('''
## 2. The spread: how much the config matters

Each dot is one config on one shape, in TFLOP/s; the black tick is the vendor library (cuBLAS), the red
diamond the default config. The slowest config of a shape is 1.7-4x slower than the fastest.
'''),
        code('''
sweep["is_default"] = sweep.config == sweep.dtype.map(DEFAULT)
runs = sweep[["dtype", "shape", "config", "tflops", "ms", "is_default"]]
vendor = sweep.groupby(["dtype", "shape"], as_index=False).agg(baseline_ms=("baseline_ms", "first"), m=("m", "first"),
                                                                n=("n", "first"), k=("k", "first"))
vendor["tflops"] = 2 * vendor.m * vendor.n * vendor.k / (vendor.baseline_ms * 1e-3) / 1e12
vendor = vendor[["dtype", "shape", "tflops"]]

def spread(dtype):
    dots = alt.Chart(runs[runs.dtype == dtype]).mark_circle(size=30, opacity=0.5).encode(
        x=alt.X("tflops:Q", title=f"{dtype} TFLOP/s"), y=alt.Y("shape:N", title=None), tooltip=["config", "ms"])
    default = alt.Chart(runs[(runs.dtype == dtype) & runs.is_default]).mark_point(
        shape="diamond", size=120, color="red", filled=True).encode(x="tflops:Q", y="shape:N")
    library = alt.Chart(vendor[vendor.dtype == dtype]).mark_tick(color="black", thickness=3, size=18).encode(
        x="tflops:Q", y="shape:N")
    return (dots + default + library).properties(width=420, height=220, title=f"{dtype}: every config, H200")

spread("bf16") & spread("fp8")
'''),
        code('''
per_shape = sweep.groupby(["dtype", "shape"]).agg(best_ms=("ms", "min"), worst_ms=("ms", "max"),
                                                  median_ms=("ms", "median"), vendor_ms=("baseline_ms", "first"))
per_shape["default_ms"] = sweep[sweep.is_default].set_index(["dtype", "shape"]).ms
per_shape["worst_over_best"] = per_shape.worst_ms / per_shape.best_ms
per_shape["default_over_best"] = per_shape.default_ms / per_shape.best_ms
print(f"worst config / best config: {per_shape.worst_over_best.min():.2f}x to {per_shape.worst_over_best.max():.2f}x; "
      f"default / best: at most {per_shape.default_over_best.max():.3f}x")
per_shape.round(3)
'''),
        md('''
## 3. What autotuning costs

To find the best config, an autotuner compiles every config and times it. `triton.testing.do_bench` (the
timer `triton.autotune` uses) runs about 25 ms of warm-up and 100 ms of timed repetitions per config by
default; compiling one GEMM config takes on the order of a second (a guess: it depends on the compiler
version and the host CPU; measure yours). For the whole space of one shape:
'''),
        code('''
DO_BENCH_S = 0.025 + 0.100  # triton.testing.do_bench defaults: warmup=25 ms, rep=100 ms
COMPILE_S = 1.0  # guess, per config: measure with your triton version on your host
for dtype, space in SPACE.items():
    print(f"{dtype}: {len(space)} configs -> about {len(space) * (DO_BENCH_S + COMPILE_S):.0f} s of warm-up per new "
          f"shape, vs a single best-config run of about {per_shape.loc[dtype].best_ms.median():.1f} ms")
'''),
        md('''
A training step has dozens of distinct GEMM shapes (forward, dgrad, wgrad of every projection), and a change
of micro-batch, sequence length or parallel degree makes new ones: a minute of autotuning per shape adds up,
every time the job starts. A zero-warmup choice costs nothing at run time; the question is how close it gets.

Here the fixed default lands within a few percent of the best on all sixteen pairs, but that is *in sample*:
it was picked on exactly these shapes. Shapes unlike them (skinny, odd, small) are where a fixed default
fails and where a selector that reasons about tiles, waves and memory traffic per shape has to earn its keep.
The project's selector (`workbench.select`, issue #4) is scored against a full sweep of such shapes.

## Exercise

For the fp8 GEMM **8192 x 57344 x 8192** (Llama 3 70B's gate/up projection), choose a config from
`SPACE["fp8"]` that runs within **5%** of the best measured config, without looking at the measurements:
reason about the shape (large, compute-bound, many tiles) and the config's tile sizes and warps.

The answer cell ships with a reference solution (so CI runs clean); replace it and run the check, which looks
your config up in the H200 sweep.
'''),
        exercise('''
my_config = max(SPACE["fp8"], key=lambda c: (c["BLOCK_M"] * c["BLOCK_N"], c["BLOCK_K"], c["num_warps"]))
''', wrong_answer='''
my_config = min(SPACE["fp8"], key=lambda c: (c["BLOCK_M"] * c["BLOCK_N"], c["BLOCK_K"], c["num_warps"]))
'''),
        check('''
shape_runs = sweep[(sweep.dtype == "fp8") & (sweep["shape"] == "8192x57344x8192")]
best_ms = shape_runs.ms.min()
mine = shape_runs[shape_runs.config == json.dumps(my_config, sort_keys=True)]
if my_config not in SPACE["fp8"]:
    print(f"NOT YET: {my_config} is not in the fp8 config space; pick one of SPACE['fp8']")
elif mine.empty:
    print(f"NOT YET: {my_config} was not measured on this shape; pick another")
elif mine.ms.iloc[0] <= 1.05 * best_ms:
    print(f"PASS: {mine.ms.iloc[0]:.3f} ms, {mine.ms.iloc[0] / best_ms:.3f}x the best of {len(shape_runs)} configs "
          f"({best_ms:.3f} ms); the worst takes {shape_runs.ms.max():.3f} ms")
else:
    print(f"NOT YET: {mine.ms.iloc[0]:.3f} ms is {mine.ms.iloc[0] / best_ms:.2f}x the best ({best_ms:.3f} ms); "
          "larger tiles reuse each loaded byte more")
'''),
        md('''
## Take-aways

- The config of a kernel is worth up to several-fold on the same shape; the vendor library's own heuristic is
  the bar to meet.
- Autotuning finds the best config at the price of warm-up time on the target GPU for every new shape;
  zero-warmup selection moves that work to a model that runs anywhere, including on a laptop before the job.
'''),
    ]
