"""06: search, export a recipe, and run it with the reference training job (tiny sizes on a CPU)."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 6. From prediction to a run: export a recipe and train it

A **recipe** is the hand-off between the workbench and a training job: what to train (a catalog model plus
overrides), on what (GPU type and count), how (precision, batch, activation checkpointing, parallelism,
compile, kernels, embedding placement) and what the model predicted for it. It is a versioned YAML file
(`schema_version: 1`, read with `yaml.safe_load` only; unknown fields are rejected with a clear message).

In this notebook: search every configuration of Llama 3 8B on 8 H200s, export the best as a recipe (and as a
torchtitan config), read it back, then shrink the model and **run** the recipe with
`python -m workbench.train --recipe FILE` on this machine. On a CPU that takes a few seconds.
'''),
        setup(),
        code('''
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.recipe import dumps, load_recipe, save_recipe
from workbench.recipe.build import make_recipe, predict_recipe
from workbench.recipe.search import search

OUT = Path(tempfile.gettempdir()) / "workbench-workshop"  # where this notebook writes its files
OUT.mkdir(exist_ok=True)
print(f"recipes and metrics go to {OUT}")
'''),
        md('''
## 1. Search

`workbench.recipe.search.search` enumerates micro-batch, activation checkpointing, FSDP vs DDP and the
dp x tp x pp splits of 8 GPUs, predicts each with the analytical model as the stack that will run it runs it
(torchtitan, the default, eager and compiled; `stack="ideal"` ranks the fused-step bound instead), and keeps those
that fit HBM. The chart shows throughput against peak memory; the Pareto front (nothing is both faster and
smaller) is highlighted.
'''),
        code('''
found = search("llama3-8b", "h200-sxm", 8, seq_len=2048 if SMALL else 8192)
ranked = found.as_frame()
print(f"{len(found.candidates)} configurations predicted, {len(ranked)} fit; the five fastest:")
ranked.head(5)[["micro_batch", "activation_checkpointing", "sharding", "dp", "tp", "pp", "tokens_per_s", "mfu",
                "peak_memory_gb"]].round(3)
'''),
        code('''
points = ranked[["tokens_per_s", "peak_memory_gb", "pareto", "micro_batch", "activation_checkpointing", "tp", "pp"]]
alt.Chart(points).mark_point(filled=True).encode(
    x=alt.X("peak_memory_gb:Q", title="peak GB per GPU"), y=alt.Y("tokens_per_s:Q", title="tokens/s (8 GPUs)"),
    color=alt.Color("pareto:N", title="Pareto front"), shape="activation_checkpointing:N",
    tooltip=list(points.columns),
).properties(width=460, height=280, title="Llama 3 8B on 8 x H200: every configuration that fits")
'''),
        md('''
## 2. Export

`make_recipe` turns a configuration and its compile flag into a `Recipe` (predicting it again for the same stack,
so the file carries the numbers and `predicted.stack` names the stack they are for);
`save_recipe` writes it atomically and refuses to overwrite unless asked. The first two lines of the file name
the target and the model version that made the predictions.
'''),
        code('''
best = found.best
recipe = make_recipe("llama3-8b", "h200-sxm", best.config, compile=best.compile)
path = save_recipe(recipe, OUT / "llama3-8b-h200x8.yaml", overwrite=True)
print(path.read_text())
'''),
        code('''
from workbench.recipe.torchtitan import to_torchtitan_toml

print(to_torchtitan_toml(recipe))
'''),
        code('''
again = load_recipe(path)
print("read back equal to what was written:", again == recipe)
print(f"predicted from the file again: {predict_recipe(again).summary.tokens_per_s:,.0f} tokens/s "
      f"(the file says {again.predicted.tokens_per_s:,.0f})")
'''),
        md('''
## 3. Run it

The full recipe needs eight H200s: `torchrun --nproc_per_node 8 -m workbench.train --recipe FILE`. To see the
whole loop here, we keep everything but the model's size: a two-layer Llama-style model (`model.overrides`),
fp32, no `torch.compile`, a short sequence. The training job builds the model from the recipe, trains it on
its generated text corpus, and writes a metrics JSON that puts the measurements next to the recipe's
predictions. (On a CPU the comparison is not meaningful: the prediction is for an H200, and the metrics say
`comparable: false`.)
'''),
        code('''
from workbench.config import Parallelism, TrainingConfig

TINY = {"num_layers": 2, "hidden_size": 128, "num_heads": 4, "num_kv_heads": 2, "ffn_hidden_size": 256,
        "vocab_size": 512}
tiny = make_recipe("llama3-8b", "h200-sxm", TrainingConfig(micro_batch=2, seq_len=64, precision="fp32",
                                                           parallelism=Parallelism(dp=1)),
                   overrides=TINY, compile=False)
tiny_path = save_recipe(tiny, OUT / "tiny.yaml", overwrite=True)
metrics_path = OUT / "tiny_metrics.json"
steps = 8 if SMALL else 40
command = [sys.executable, "-m", "workbench.train", "--recipe", str(tiny_path), "--steps", str(steps),
           "--warmup", "1", "--metrics", str(metrics_path), "--force", "--quiet"]
print("$ python", " ".join(command[1:]))
run = subprocess.run(command, capture_output=True, text=True, timeout=600)
print(run.stdout.strip() or run.stderr[-2000:])
run.check_returncode()
'''),
        code('''
metrics = json.loads(metrics_path.read_text())
losses = pd.DataFrame({"step": range(len(metrics["losses"])), "loss": metrics["losses"]})
print(f"ran on {metrics['device']} (comparable with the prediction: {metrics['comparable']}); "
      f"median step {metrics['measured']['step_time_s'] * 1e3:.1f} ms")
alt.Chart(losses).mark_line(point=True).encode(x="step:Q", y=alt.Y("loss:Q", scale=alt.Scale(zero=False))).properties(
    width=420, height=240, title="The tiny recipe's training loss")
'''),
        md('''
## Exercise

Write a recipe for **Llama 3 8B on 8 MI355X**: micro-batch 2, sequence 8192, `full` activation checkpointing,
FSDP over all 8 GPUs, a global batch of 64 samples (so 4 gradient-accumulation steps), bf16. Save it to
`my_recipe_path`.

Fill in the answer cell (build the recipe with `make_recipe`, save it with `save_recipe` and assign the path
it returns to `my_recipe_path`), then run the check under it. It reads your file with `load_recipe` (which
validates it), checks the fields asked for, and predicts the recipe again to see that the file's `predicted`
block is the model's. One solution is in `solutions/06_export_a_recipe.ipynb`.
'''),
        *exercise(
            {"my_recipe_path": "the path save_recipe returned"},
            solution='''
my_recipe = make_recipe("llama3-8b", "mi355x", TrainingConfig(
    micro_batch=2, seq_len=8192, precision="bf16", parallelism=Parallelism(dp=8),
    activation_checkpointing="full", global_batch=64))
my_recipe_path = save_recipe(my_recipe, OUT / "my_recipe.yaml", overwrite=True)
''', wrong_answer='''
my_recipe = make_recipe("llama3-8b", "mi355x", TrainingConfig(
    micro_batch=2, seq_len=8192, precision="bf16", parallelism=Parallelism(dp=8),
    activation_checkpointing="selective", global_batch=64))
my_recipe_path = save_recipe(my_recipe, OUT / "my_recipe.yaml", overwrite=True)
''', check='''
import math

mine = load_recipe(my_recipe_path)
asked = {"target.gpu": (mine.target.gpu, workbench.get_gpu("mi355x").name), "target.gpus": (mine.target.gpus, 8),
         "model.name": (mine.model.name, "llama3-8b"), "model.overrides": (dict(mine.model.overrides), {}),
         "batch.micro_batch": (mine.batch.micro_batch, 2), "batch.seq_len": (mine.batch.seq_len, 8192),
         "batch.global_batch": (mine.batch.global_batch, 64),
         "batch.grad_accumulation": (mine.batch.grad_accumulation, 4),
         "activation_checkpointing.mode": (mine.activation_checkpointing.mode, "full"),
         "parallelism": ((mine.parallelism.dp, mine.parallelism.sharding, mine.parallelism.tp), (8, "fsdp", 1)),
         "precision.compute_dtype": (mine.precision.compute_dtype, "bf16")}
wrong = [f"{field} is {got!r}, expected {want!r}" for field, (got, want) in asked.items() if got != want]
fresh = predict_recipe(mine).summary
if not wrong and mine.predicted and math.isclose(mine.predicted.tokens_per_s, fresh.tokens_per_s, rel_tol=1e-9):
    print(f"PASS: {my_recipe_path} is a valid recipe; predicted {fresh.tokens_per_s:,.0f} tokens/s, "
          f"{fresh.memory.total / 1e9:.0f} GB per GPU, MFU {fresh.mfu:.2f}")
elif wrong:
    print("NOT YET: " + "; ".join(wrong))
else:
    print("NOT YET: the file's predicted block does not match the model's prediction; let make_recipe fill it")
'''),
        md('''
## Take-aways

- A recipe is data with its provenance: schema version, target, the model version that predicted it.
- The same file drives `python -m workbench.train` (and exports to torchtitan), so a prediction can be checked
  against a measurement: run the recipe on its target GPUs and compare the metrics JSON with `predicted`.
- The command line does all of this too: `workbench recipe --model llama3-8b --gpu h200 --gpus 8 --out r.yaml`.
'''),
    ]
