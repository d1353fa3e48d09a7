"""04: fitting Llama 3 70B: memory per checkpointing mode, FSDP and TP degrees, and MI350X vs B200 HBM capacity."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 4. Memory and parallelism: fitting Llama 3 70B

Training a 70B-parameter model in bf16 with AdamW keeps, per parameter, an fp32 master copy, an fp32 gradient
and two fp32 optimizer moments: 16 bytes, over a terabyte before a single activation is stored (printed below). No GPU holds that,
so the recipe has to answer three questions, and the answers depend on how much HBM each GPU has:

1. **Activation checkpointing**: keep every activation (`none`), recompute the cheap ones (`selective`), or
   keep only each block's input and recompute the whole block in the backward pass (`full`, about a third
   more compute).
2. **FSDP degree** (ZeRO-3): shard parameters, gradients and optimizer states over *dp* GPUs.
3. **Tensor parallelism** (TP): split each layer's matrices *tp* ways inside a node; it also splits the
   activations, at the price of collectives on the critical path.

We compare two GPUs with similar bandwidth and peaks but different HBM capacity: **MI350X** and **B200** (the
table under the next cell, from the catalog in `specs/gpus/`). All other numbers come from `workbench.memory`
and `workbench.predict`.
'''),
        setup(),
        code('''
from workbench.config import Parallelism, TrainingConfig
from workbench.memory import memory_breakdown

MODEL = workbench.get_model("llama3-70b")
GPUS = {name: workbench.get_gpu(name) for name in ("mi350x", "b200")}
SEQ_LEN = 8192
MODES = ("none", "selective", "full")


def breakdown(gpu, mode, dp=8, tp=1, micro_batch=1):
    """Peak bytes per GPU (a MemoryBreakdown) for Llama 3 70B under FSDP over dp x TP over tp."""
    cfg = TrainingConfig(micro_batch, SEQ_LEN, "bf16", Parallelism(dp=dp, tp=tp), mode).resolved(MODEL)
    return memory_breakdown(MODEL, cfg, gpu)


print(f"{MODEL.display_name}: {MODEL.num_params / 1e9:.1f}B parameters, "
      f"{16 * MODEL.num_params / 1e12:.2f} TB of weights, gradients and AdamW states in mixed precision")
capacity = pd.DataFrame([{
    "gpu": gpu.display_name,
    "hbm_gb": gpu.hbm_capacity_gb.value,
    "usable_gb": breakdown(gpu, "none").usable / 1e9,
    "hbm_tb_s": gpu.hbm_bandwidth_tb_s.value,
    "bf16_tflops": gpu.peak_tflops("bf16"),
} for gpu in GPUS.values()])
capacity.round(1)
'''),
        md('''
## 1. What fills HBM, per checkpointing mode

FSDP over the 8 GPUs of one node, one sequence of 8192 tokens per GPU. The dashed lines are what each GPU can
use (capacity less 5% headroom for fragmentation, a guess in `workbench/memory.py`).
'''),
        code('''
PARTS = ["params", "grads", "optimizer", "activations", "workspace"]
gpu0 = next(iter(GPUS.values()))  # the bytes do not depend on the GPU, only the capacity does
stacks = pd.DataFrame([{"mode": mode, "part": part, "gb": breakdown(gpu0, mode).as_gb()[part]}
                       for mode in MODES for part in PARTS])
bars = alt.Chart(stacks).mark_bar().encode(
    x=alt.X("mode:N", sort=list(MODES), title="activation checkpointing", axis=alt.Axis(labelAngle=0)),
    y=alt.Y("gb:Q", title="GB per GPU"), color=alt.Color("part:N", sort=PARTS),
    tooltip=["mode", "part", alt.Tooltip("gb:Q", format=".1f")])
rules = alt.Chart(capacity).mark_rule(strokeDash=[6, 3]).encode(y="usable_gb:Q", color=alt.value("black"))
labels = rules.mark_text(align="left", dx=4, dy=-6).encode(x=alt.value(0), text="gpu:N")
(bars + rules + labels).properties(width=360, height=320, title="Llama 3 70B, FSDP x 8, seq 8192, micro-batch 1")
'''),
        code('''
gb = stacks.pivot(index="mode", columns="part", values="gb")
states = gb[["params", "grads", "optimizer"]].sum(axis=1)
for mode in MODES:
    print(f"{mode:>9}: activations {gb.activations[mode]:5.0f} GB, sharded states (params + grads + optimizer) "
          f"{states[mode]:.0f} GB per GPU")
'''),
        md('''
Activations dominate without checkpointing, and only `full` shrinks them to a small share of HBM. The sharded
states are the same in every mode.

## 2. More FSDP ranks shrink the states, not the activations

Each GPU holds 1/dp of the states, but its own micro-batch's activations whatever dp is. Beyond one node
(dp > 8) the shards keep shrinking while the gathers and reduce-scatters cross the slower scale-out network.
'''),
        code('''
degrees = [8, 16, 32] if SMALL else [8, 16, 32, 64, 128]
sweep = pd.DataFrame([{"dp": dp, "mode": mode, "gb": breakdown(gpu0, mode, dp=dp).total / 1e9}
                      for dp in degrees for mode in MODES])
lines = alt.Chart(sweep).mark_line(point=True).encode(
    x=alt.X("dp:Q", scale=alt.Scale(type="log", base=2), title="FSDP degree (GPUs)"),
    y=alt.Y("gb:Q", title="peak GB per GPU"), color=alt.Color("mode:N", sort=list(MODES)))
(lines + rules + labels).properties(width=420, height=300, title="Per-GPU memory vs FSDP degree")
'''),
        md('''
## 3. The best recipe on one node: capacity changes the answer

Eight GPUs as dp x tp (FSDP x tensor parallel) in every checkpointing mode. For each combination that fits,
`workbench.predict` gives the step time (as torchtitan runs it, the default stack); we keep the largest micro-batch that fits (more tokens per step
amortise the FSDP collectives) up to 4, and compare tokens/s.
'''),
        code('''
from workbench.memory import max_micro_batch

rows = []
for name, gpu in GPUS.items():
    for dp, tp in [(8, 1), (4, 2), (2, 4)] if SMALL else [(8, 1), (4, 2), (2, 4), (1, 8)]:
        for mode in MODES:
            cfg = TrainingConfig(1, SEQ_LEN, "bf16", Parallelism(dp=dp, tp=tp), mode).resolved(MODEL)
            micro_batch = min(4, max_micro_batch(MODEL, cfg, gpu))
            row = {"gpu": gpu.display_name, "name": name, "dp x tp": f"{dp} x {tp}", "mode": mode,
                   "micro_batch": micro_batch, "fits": micro_batch > 0, "tokens_per_s": 0.0, "mfu": 0.0}
            if micro_batch:
                s = workbench.predict(MODEL, gpu, TrainingConfig(micro_batch, SEQ_LEN, "bf16",
                                                                 Parallelism(dp=dp, tp=tp), mode)).summary
                row.update(tokens_per_s=s.tokens_per_s, mfu=s.mfu, memory_gb=s.memory.total / 1e9)
            rows.append(row)
recipes = pd.DataFrame(rows)

alt.Chart(recipes).mark_rect().encode(
    x=alt.X("mode:N", sort=list(MODES), axis=alt.Axis(labelAngle=0)), y="dp x tp:N",
    color=alt.Color("tokens_per_s:Q", title="tokens/s", scale=alt.Scale(scheme="viridis")),
    tooltip=["gpu", "dp x tp", "mode", "micro_batch", alt.Tooltip("tokens_per_s:Q", format=",.0f"),
             alt.Tooltip("mfu:Q", format=".2f")],
).properties(width=200, height=160).facet(column="gpu:N", title="8 GPUs: tokens/s (0 = does not fit)")
'''),
        code('''
for name, group in recipes[recipes.fits].groupby("name"):
    best = group.sort_values("tokens_per_s").iloc[-1]
    print(f"best 8-GPU recipe on {best.gpu}: dp x tp = {best['dp x tp']}, checkpointing {best['mode']}, "
          f"micro-batch {best.micro_batch}: {best.tokens_per_s:,.0f} tokens/s, MFU {best.mfu:.2f}, "
          f"{best.memory_gb:.0f} GB per GPU")
'''),
        md('''
With its larger HBM the MI350X fits recipes that recompute less; the B200 has to pay for full recomputation or more
tensor parallelism to fit. Peak FLOP/s alone would have
ranked the two the other way round: capacity is a performance feature once it decides the recipe.

## Exercise

Training on B200s with FSDP only (tp = 1), `selective` checkpointing, micro-batch 1, sequence 8192: what is the
**smallest power-of-two number of GPUs** (dp) that holds Llama 3 70B?

Fill in the answer cell (replace the `...`) and run the check under it, which asks `workbench.memory`. One
solution is in `solutions/04_memory_and_parallelism.ipynb`.
'''),
        *exercise(
            {"smallest_b200_dp": "a power of two: the number of B200s"},
            solution='''
smallest_b200_dp = next(dp for dp in (8, 16, 32, 64, 128) if breakdown(GPUS["b200"], "selective", dp=dp).fits)
''', wrong_answer='''
smallest_b200_dp = 16
''', check='''
b200 = GPUS["b200"]
dp = int(smallest_b200_dp)
is_power_of_two = dp > 0 and dp & (dp - 1) == 0
fits = is_power_of_two and breakdown(b200, "selective", dp=dp).fits
half_fits = is_power_of_two and dp > 1 and breakdown(b200, "selective", dp=dp // 2).fits
if fits and not half_fits:
    print(f"PASS: {dp} B200s hold it ({breakdown(b200, 'selective', dp=dp).total / 1e9:.0f} GB per GPU); "
          f"{dp // 2} would need {breakdown(b200, 'selective', dp=dp // 2).total / 1e9:.0f} GB of "
          f"{b200.hbm_capacity_gb.value:.0f}")
elif not is_power_of_two:
    print(f"NOT YET: {smallest_b200_dp} is not a power of two")
elif not fits:
    print(f"NOT YET: at dp = {dp} a B200 would need {breakdown(b200, 'selective', dp=dp).total / 1e9:.0f} GB; "
          "try more GPUs")
else:
    print(f"NOT YET: dp = {dp // 2} already fits; look for a smaller degree")
'''),
        md('''
## Take-aways

- States shard with FSDP; activations shrink with checkpointing, tensor parallelism or shorter micro-batches.
- Going beyond one node to fit a model costs communication on the scale-out network; more HBM per GPU can
  keep the job inside a node and with less recomputation.
- `workbench predict ... --checkpointing selective --tp 2` does the same from the command line, and
  `workbench recipe --model llama3-70b --gpu b200 --gpus 8 --seq-len 8192` searches every layout (notebook 6).
'''),
    ]
