"""01: arithmetic intensity and ridge points across H100, H200, B200, MI300X and MI355X."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 1. Roofline basics: arithmetic intensity and ridge points

An operator's time on a GPU is at least the larger of two numbers: its FLOPs at the peak matrix rate, and its
bytes at the peak HBM bandwidth (Williams, Waterman and Patterson, 2009):

$$t \\ge \\max\\left(\\frac{\\text{FLOPs}}{\\text{peak}},\\ \\frac{\\text{bytes}}{\\text{bandwidth}}\\right)$$

Which one wins depends on the op's **arithmetic intensity** (FLOPs per byte moved) compared with the GPU's
**ridge point** (peak / bandwidth, in FLOP/byte): below the ridge an op is memory-bound, above it compute-bound.

In this notebook: the ridge points of five accelerators from the catalog, the roofline picture, where the ops
of a real training step land on it, and an exercise. Every number comes from `workbench`; nothing needs a GPU.
'''),
        setup(),
        md('''
## The five GPUs in the catalog

`workbench.get_gpu(name)` returns a typed, sourced spec. The ridge point is derived, not stored:
`gpu.ridge_point("bf16")` is the dense bf16 peak divided by the HBM bandwidth.
'''),
        code('''
GPUS = ["h100-sxm", "h200-sxm", "b200", "mi300x", "mi355x"]

specs = pd.DataFrame([{
    "gpu": gpu.display_name,
    "name": gpu.name,
    "bf16_tflops": gpu.peak_tflops("bf16"),
    "fp8_tflops": gpu.peak_tflops("fp8"),
    "hbm_tb_s": gpu.hbm_bandwidth_tb_s.value,
    "ridge_bf16": gpu.ridge_point("bf16"),
    "ridge_fp8": gpu.ridge_point("fp8"),
} for gpu in map(workbench.get_gpu, GPUS)])
specs.round(2)
'''),
        md('''
Notice the spread: H200 has the compute of H100 but more bandwidth (`hbm_tb_s`), so its ridge point is *lower*
(memory-bound ops speed up, compute-bound ones do not). fp8 doubles the peak over the same bandwidth, so it
doubles the intensity an op needs to use it.

## The roofline picture

Attainable TFLOP/s = min(peak, intensity x bandwidth), on log-log axes. The kink is the ridge point.
'''),
        code('''
import numpy as np

intensity = np.logspace(0, 4, 60 if SMALL else 200)  # FLOP/byte
roofs = pd.concat([pd.DataFrame({
    "gpu": row.gpu,
    "intensity": intensity,
    "tflops": np.minimum(row.bf16_tflops, intensity * row.hbm_tb_s),
}) for row in specs.itertuples()])

lines = alt.Chart(roofs).mark_line().encode(
    x=alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)"),
    y=alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="attainable bf16 TFLOP/s"),
    color="gpu:N",
)
ridges = alt.Chart(specs).mark_point(filled=True, size=80).encode(
    x="ridge_bf16:Q", y="bf16_tflops:Q", color="gpu:N",
    tooltip=["gpu", alt.Tooltip("ridge_bf16:Q", format=".0f"), "bf16_tflops"],
)
(lines + ridges).properties(width=520, height=320, title="bf16 rooflines; dots mark the ridge points")
'''),
        md('''
## Where a training step's ops land

`workbench.predict` builds the operator graph of one training step (forward, backward, optimizer) and prices
every op, as the training stack runs it (torchtitan when none is named). Below: Llama 3 8B on 8 H200s, each op at its arithmetic intensity and the TFLOP/s the model predicts
it achieves. GEMMs sit to the right of the ridge; norms, activations, the optimizer and most elementwise work
sit far to the left, where only bandwidth matters. Attention is compute-bound at long sequences.
'''),
        code('''
step = workbench.predict("llama3-8b", "h200-sxm", micro_batch=1, seq_len=2048 if SMALL else 8192, gpus=8,
                         activation_checkpointing="selective")
ops = step.ops_frame()
ops = ops[ops.flops > 0]  # communication rows have no FLOPs

h200 = specs[specs.name == "h200-sxm"].iloc[0]
low = np.logspace(-3, 4, 80)  # elementwise ops sit far below 1 FLOP/byte
h200_roof = pd.DataFrame({"intensity": low, "tflops": np.minimum(h200.bf16_tflops, low * h200.hbm_tb_s)})
roof = alt.Chart(h200_roof).mark_line(color="gray").encode(
    x=alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)"),
    y=alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="TFLOP/s"),
)
points = alt.Chart(ops).mark_circle(size=60).encode(
    x="arithmetic_intensity:Q", y="achieved_tflops:Q", color="kind:N",
    tooltip=["name", "shape", "bound", alt.Tooltip("time_ms:Q", format=".3f")],
)
(roof + points).properties(width=520, height=320, title=f"{step.model.display_name} on {h200.gpu}: every op")
'''),
        code('''
s = step.summary
print(f"step {s.step_time_s * 1e3:.0f} ms: compute-bound ops {s.compute_bound_s / s.step_time_s:.0%}, "
      f"memory-bound ops {s.memory_bound_s / s.step_time_s:.0%}, optimizer {s.optimizer_s / s.step_time_s:.0%}, "
      f"exposed communication {s.communication_s / s.step_time_s:.0%}")
'''),
        md('''
## GEMM intensity in one line

A bf16 GEMM C[m, n] = A[m, k] @ B[k, n] does 2mnk FLOPs and moves at least 2(mk + kn + mn) bytes. For a square
GEMM (m = n = k) that is 2n³ / 6n² = **n / 3 FLOP/byte**: it grows with size, so small GEMMs are memory-bound
and large ones compute-bound. The library computes the same thing for any op:
'''),
        code('''
from workbench.graph.ops import gemm
from workbench.perf.roofline import roofline_bound

for n in (256, 1024, 4096):
    op = gemm("square", n, n, n, "bf16")
    print(f"n={n:5d}: intensity {op.arithmetic_intensity:7.1f} FLOP/byte, "
          f"{roofline_bound(op, workbench.get_gpu('mi355x'))}-bound on MI355X")
'''),
        md('''
## Exercise

1. Which of the five GPUs needs the **highest** arithmetic intensity to reach its bf16 peak? (its catalog
   name, e.g. `"h100-sxm"`)
2. What is the **smallest** n for which a square bf16 GEMM n x n x n is compute-bound on the MI355X roofline?

Fill in the answer cell below (each `...` is yours to replace) and run the check cell under it: it
recomputes both with the library and tells you PASS or NOT YET. One solution is in
`solutions/01_roofline_basics.ipynb`.
'''),
        *exercise(
            {"highest_ridge_gpu": 'a catalog name, e.g. "h100-sxm"',
             "smallest_compute_bound_n": "an integer n"},
            solution='''
import math

highest_ridge_gpu = specs.sort_values("ridge_bf16").name.iloc[-1]
smallest_compute_bound_n = math.ceil(3 * workbench.get_gpu("mi355x").ridge_point("bf16"))  # n / 3 >= ridge
''', wrong_answer='''
highest_ridge_gpu = "h200-sxm"
smallest_compute_bound_n = 1024
''', check='''
mi355x = workbench.get_gpu("mi355x")
expected_gpu = max(GPUS, key=lambda name: workbench.get_gpu(name).ridge_point("bf16"))
n = int(smallest_compute_bound_n)
is_smallest = (roofline_bound(gemm("sq", n, n, n, "bf16"), mi355x) == "compute"
               and roofline_bound(gemm("sq", n - 1, n - 1, n - 1, "bf16"), mi355x) == "memory")
if highest_ridge_gpu == expected_gpu and is_smallest:
    print(f"PASS: {expected_gpu} has the highest bf16 ridge point; n = {n} is the first compute-bound square GEMM "
          f"on MI355X (intensity {n / 3:.1f} >= ridge {mi355x.ridge_point('bf16'):.1f})")
else:
    if highest_ridge_gpu != expected_gpu:
        print(f"NOT YET (1): {highest_ridge_gpu!r} is not the GPU with the highest bf16 ridge point; compare "
              "specs.ridge_bf16")
    if not is_smallest:
        print(f"NOT YET (2): n = {n} is not the smallest compute-bound square GEMM on MI355X; the intensity of a "
              "square bf16 GEMM is n / 3 FLOP/byte")
'''),
        md('''
## Take-aways

- Ridge point = peak / bandwidth; an op is memory-bound below it. Newer GPUs raise the peak faster than the
  bandwidth, so the ridge moves right and more ops become memory-bound (fusion matters more every generation).
- The roofline is a bound, not a prediction: the next notebook looks at why real GEMMs stay below it.
'''),
    ]
