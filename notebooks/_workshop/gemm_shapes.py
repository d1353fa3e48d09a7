"""02: why GEMM shapes matter: tiles, waves, padding, wave quantization, alignment; model vs measured."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 2. GEMM shapes: tiles, waves, padding and alignment

The roofline says a large bf16 GEMM is compute-bound, so its time should be FLOPs / peak. Real GEMMs land below
that line, and *how far* below depends on the shape. A GEMM library cuts C[m, n] into output **tiles**
(e.g. 256 x 128), hands one tile to each SM (NVIDIA) or CU (AMD), and runs them in **waves**:

- **wave quantization**: 133 tiles on 132 SMs take two full waves, the second one almost empty;
- **padding**: a tile (and the matrix instruction under it) computes whole blocks, so m = 4097 pays for 4224;
- **alignment**: the fast kernels need every row to start on a 16-byte boundary (TMA on Hopper); an odd n or
  k falls back to slower kernels;
- and a large GEMM at full load is **power-limited**, below the datasheet peak.

`workbench/perf/gemm.py` models all four (read its docstring). This notebook draws the model's curves against
GEMMs measured on an H200 (committed in `benchmarks/results/h200/`), and on your own GPU if you have one.
'''),
        setup(),
        code('''
import math
from pathlib import Path

from workbench.graph.ops import gemm
from workbench.perf.efficiency import constants_for
from workbench.perf.gemm import alignment_bytes, gemm_time

H200 = workbench.get_gpu("h200-sxm")
CONSTANTS = constants_for(H200, calibrated=True)  # fitted to the H200 measurements (specs/calibration/)
REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "benchmarks" / "results").is_dir())
RESULTS = REPO / "benchmarks" / "results" / "h200"


def predict_gemm(m, n, k, dtype="bf16", gpu=H200, constants=CONSTANTS):
    """The model's estimate for C[m, n] = A[m, k] @ B[k, n] (time, tile, waves, efficiencies)."""
    return gemm_time(gemm("gemm", m, n, k, dtype).shape, dtype, gpu, constants)
'''),
        md('''
## 1. Size: small GEMMs cannot fill the GPU

Square bf16 GEMMs from 256 to 16384: the model's achieved TFLOP/s (line) and the H200 measurements
(`measured_ops.csv`, cuBLAS through `torch.matmul`, dots). Small GEMMs have too few tiles to occupy 132 SMs and
are dominated by launch and fixed costs; large ones approach, but stay under, the power-limited rate.
'''),
        code('''
measured = pd.read_csv(RESULTS / "measured_ops.csv")
square = measured[(measured.op == "gemm") & (measured.shape_set == "square") & (measured.dtype == "bf16")]
square = square.assign(n=square.n.astype(int), source="measured (H200)")
square["tflops"] = 2 * square.n.astype(float) ** 3 / (square.measured_ms * 1e-3) / 1e12
square = square[["n", "source", "measured_ms", "tflops"]]  # charts take only finite numbers (no NaN columns)

# quarter-octave steps, rounded to multiples of 64 (aligned rows: section 3 shows what odd sizes cost)
sizes = sorted({64 * round(2 ** (x / 4) / 64) for x in range(32, 57, 2 if SMALL else 1)} | set(square.n))
model = pd.DataFrame([{"n": n, "source": "model", "tflops": 2 * n**3 / predict_gemm(n, n, n).time_s / 1e12}
                      for n in sizes])

peak = alt.Chart(pd.DataFrame({"tflops": [H200.peak_tflops("bf16")]})).mark_rule(strokeDash=[4, 4]).encode(y="tflops:Q")
curve = alt.Chart(model).mark_line().encode(
    x=alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="m = n = k"),
    y=alt.Y("tflops:Q", title="bf16 TFLOP/s"), color="source:N")
dots = alt.Chart(square).mark_point(filled=True, size=70).encode(x="n:Q", y="tflops:Q", color="source:N",
                                                                   tooltip=["n", "measured_ms", "tflops"])
(peak + curve + dots).properties(width=520, height=300, title="Square bf16 GEMMs on H200 (dashed: datasheet peak)")
'''),
        md('''
## 2. Wave quantization

Fix the tile at 256 x 128 and count: tiles = ceil(m / 256) x ceil(n / 128), waves = ceil(tiles / 132), and the
**wave efficiency** tiles / (waves x 132) is the share of SM slots doing useful work. It saws up and down as n
grows. The model (and a real library) picks among several tiles and split-K factors to dodge the worst teeth,
so its predicted TFLOP/s dips less, but the dips are still there.
'''),
        code('''
m, k, units = 2048, 8192, H200.compute_units.value
rows = []
for n in range(512, 8193, 256 if SMALL else 64):
    tiles = math.ceil(m / 256) * math.ceil(n / 128)
    waves = math.ceil(tiles / units)
    estimate = predict_gemm(m, n, k)
    rows.append({"n": n, "fixed 256x128 tile: wave efficiency": tiles / (waves * units),
                 "model (best tile): TFLOP/s / peak":
                     2 * m * n * k / estimate.time_s / 1e12 / H200.peak_tflops("bf16")})
waves = pd.DataFrame(rows).melt("n", var_name="series", value_name="fraction")
alt.Chart(waves).mark_line(point=True).encode(
    x=alt.X("n:Q", title=f"n (m = {m}, k = {k})"), y=alt.Y("fraction:Q", scale=alt.Scale(domain=[0, 1.05])),
    color=alt.Color("series:N", legend=alt.Legend(orient="bottom")),
).properties(width=520, height=280, title="Wave quantization on 132 SMs")
'''),
        md('''
## 3. Alignment and odd shapes

The H200 run measured some deliberately awkward shapes (`shape_set == "odd"`). Compare each one with its
nearest aligned neighbour (every dimension rounded up to a multiple of 64): the odd shape does *fewer* FLOPs
and still takes longer, by up to several times. `alignment_bytes` says why: the rows are only 2-byte aligned.
'''),
        code('''
odd = measured[(measured.op == "gemm") & (measured.shape_set == "odd") & (measured.dtype == "bf16")]
table = []
for row in odd.itertuples():
    m, n, k = int(row.m), int(row.n), int(row.k)
    up = [-(-d // 64) * 64 for d in (m, n, k)]
    table.append({"shape": f"{m}x{n}x{k}", "alignment_bytes": alignment_bytes(gemm("g", m, n, k, "bf16").shape, "bf16"),
                  "measured_ms": row.measured_ms, "model_ms": predict_gemm(m, n, k).time_s * 1e3,
                  "aligned_shape": "x".join(map(str, up)), "aligned_model_ms": predict_gemm(*up).time_s * 1e3})
table = pd.DataFrame(table)
table["slowdown_vs_aligned"] = table.model_ms / table.aligned_model_ms
print(f"{len(table)} odd shapes measured on H200; model vs measured, and the model's aligned neighbour:")
table.round(3)
'''),
        md('''
## 4. Measured on your GPU, or the committed H200 run

With a GPU, the next cell runs the quick GEMM suite of `workbench.bench` (our Triton GEMM and the vendor
library, each checked against a reference first) and puts the model's prediction for the vendor kernel next to
it. Without one it says so and shows the committed H200 run (`benchmarks/results/h200/kernels/`).
'''),
        code('''
from workbench.bench import NoGPUError, detect_gpu, run_suite

try:
    local = detect_gpu()
    runs = run_suite("quick", ["gemm"], progress=False)
    where = f"measured here on {local.device_name}"
    print(f"GEMM suite {where}")
except NoGPUError as exc:
    print(f"No GPU here ({exc.args[0].split(':')[0]}); skipping the live run, showing the committed H200 run.")
    runs = pd.read_csv(RESULTS / "kernels" / "kernels_full.csv")
    where = "committed H200 run"
runs = runs[(runs.module == "gemm") & runs.baseline_ms.notna()]
runs = runs.assign(model_over_vendor=runs.predicted_baseline_ms / runs.baseline_ms)
runs = runs[["name", "dtype", "triton_ms", "baseline_ms", "predicted_baseline_ms", "model_over_vendor"]]
runs.round(3)
'''),
        code('''
times = runs[["baseline_ms", "predicted_baseline_ms"]]
span = [times.min().min(), times.max().max()]
diagonal = alt.Chart(pd.DataFrame({"ms": span})).mark_line(color="gray", strokeDash=[4, 4]).encode(x="ms:Q", y="ms:Q")
dots = alt.Chart(runs).mark_point(filled=True, size=70).encode(
    x=alt.X("baseline_ms:Q", scale=alt.Scale(type="log"), title="vendor library, measured ms"),
    y=alt.Y("predicted_baseline_ms:Q", scale=alt.Scale(type="log"), title="model, predicted ms"),
    color="dtype:N", tooltip=["name", "dtype", "baseline_ms", "predicted_baseline_ms", "triton_ms"])
(diagonal + dots).properties(width=400, height=300, title=f"Model vs vendor GEMMs ({where}); on the diagonal = exact")
'''),
        md('''
## Exercise

1. How many **waves** does an 8192 x 8192 x 8192 bf16 GEMM take on the H200 with the 256 x 128 tile the model
   picks? (Count by hand: tiles, then waves over 132 SMs.)
2. GPT-2's vocabulary has 50257 tokens. The logits GEMM is m = 8192 tokens, k = 768, n = vocabulary. Pick a
   padded vocabulary size between 50257 and 50385 that the model predicts to be (one of) the fastest.

Fill in the answer cell (replace each `...`) and run the check under it, which asks the library. One solution
is in `solutions/02_gemm_shapes.ipynb`.
'''),
        *exercise(
            {"waves_8192": "an integer: waves of 256 x 128 tiles over the H200's SMs",
             "padded_vocab": "an integer between 50257 and 50385"},
            solution='''
waves_8192 = math.ceil((8192 // 256) * (8192 // 128) / H200.compute_units.value)
padded_vocab = 50304  # the next multiple of 64, as nanoGPT does: rows become 16-byte aligned
''', wrong_answer='''
waves_8192 = 15
padded_vocab = 50257
''', check='''
estimate = predict_gemm(8192, 8192, 8192)
times = {n: predict_gemm(8192, n, 768).time_s for n in range(50257, 50386)}
fastest = min(times.values())
ok_waves = waves_8192 == estimate.waves
ok_vocab = padded_vocab in times and times[padded_vocab] <= 1.01 * fastest
if ok_waves and ok_vocab:
    print(f"PASS: {estimate.waves} waves of {estimate.tiles} tiles ({estimate.tile[0]}x{estimate.tile[1]}); "
          f"vocabulary {padded_vocab} runs the logits GEMM in {times[padded_vocab] * 1e3:.2f} ms "
          f"vs {times[50257] * 1e3:.2f} ms unpadded ({times[50257] / times[padded_vocab]:.1f}x faster)")
else:
    if not ok_waves:
        print(f"NOT YET (1): {waves_8192} waves; count the 256x128 tiles of an 8192x8192 output, divide by 132 "
              "SMs and round up")
    if not ok_vocab:
        print(f"NOT YET (2): vocabulary {padded_vocab} is not among the fastest between 50257 and 50385; "
              "think about alignment_bytes")
'''),
        md('''
## Take-aways

- Shapes matter as much as FLOPs: tile counts vs SM counts (waves), padding to tiles and instructions, and
  16-byte alignment can each cost more than a GPU generation gains.
- Pad model dimensions (vocabulary, hidden sizes, micro-batch x sequence) to multiples of 64 or 128 when
  you can; the model in `workbench.perf.gemm` tells you what a given padding is worth before you train.
'''),
    ]
