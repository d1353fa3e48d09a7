"""05: co-designing a recommendation model: embedding placement on MI350X vs B200 HBM capacity."""

from _workshop.cells import code, exercise, md, setup


def cells():
    return [
        md('''
# 5. Recommendation models: where do the embeddings live?

A language model is mostly dense matrices; a recommendation model is mostly **embedding tables**: one row per
user, item or feature value, looked up a few times per sample and updated sparsely. Their bytes, not their
FLOPs, decide the hardware. Two models from the catalog:

- **DLRM-DCNv2** (MLPerf Training): 26 tables, small dense MLPs.
- **HSTU** (a generative recommender, Zhai et al. 2024; representative sizes): one 100M-item table at
  dimension 512, then 16 attention-like blocks.

Their sizes in fp32 are in the first table below.

Each table row also carries a row-wise Adagrad state. The question for co-design: does a table fit in one
GPU's HBM, or must it be sharded across GPUs or spilled to host memory, and what does each choice cost? We
compare **MI350X** and **B200**, whose HBM capacities (from the catalog, printed below) fall on either side of
HSTU's table.
'''),
        setup(),
        code('''
import dataclasses

from workbench.memory import ROWWISE_ADAGRAD_BYTES_PER_ROW, memory_breakdown
from workbench.recipe.build import embedding_placements

GPUS = {name: workbench.get_gpu(name) for name in ("mi350x", "b200")}
DLRM, HSTU = workbench.get_model("dlrm-dcnv2"), workbench.get_model("hstu-gr")


def table_bytes(rows, dim):
    """fp32 rows plus one row-wise Adagrad state per row (as workbench.memory counts them)."""
    return rows * (dim * 4 + ROWWISE_ADAGRAD_BYTES_PER_ROW)


summary = pd.DataFrame([{
    "model": model.display_name,
    "tables": len(embedding_placements(model, dp=1)),
    "table_gb": sum(table_bytes(t.rows, t.dim) for t in embedding_placements(model, dp=1)) / 1e9,
    "dense_params_m": model.dense_params / 1e6,
} for model in (DLRM, HSTU)])
print(", ".join(f"{gpu.display_name}: {gpu.hbm_capacity_gb.value:.0f} GB of HBM" for gpu in GPUS.values()))
summary.round(1)
'''),
        md('''
## 1. The tables are few and lopsided

DLRM-DCNv2's 26 tables span eight orders of magnitude; five 40M-row tables hold almost all the bytes. Each
bar's colour is the table's **pooling** (lookups per sample): the big tables are not always the hot ones.
'''),
        code('''
tables = pd.DataFrame([{"table": f"t{i}", "rows": t.rows, "gb": table_bytes(t.rows, t.dim) / 1e9,
                        "lookups_per_sample": t.pooling} for i, t in enumerate(DLRM.tables)])
alt.Chart(tables).mark_bar().encode(
    x=alt.X("table:N", sort="-y", title="DLRM-DCNv2 table"),
    y=alt.Y("rows:Q", scale=alt.Scale(type="log"), title="rows"),
    color=alt.Color("lookups_per_sample:Q", scale=alt.Scale(type="log", scheme="oranges")),
    tooltip=["table", "rows", alt.Tooltip("gb:Q", format=".2f"), "lookups_per_sample"],
).properties(width=520, height=260, title="DLRM-DCNv2: rows per table (log scale), colour = lookups per sample")
'''),
        md('''
## 2. One GPU: what fits?

`workbench.predict` on a single GPU puts every table in HBM (TorchRec-style: tables whole on one GPU, or
row-sharded over the data-parallel GPUs). The memory breakdown says whether that fits: DLRM-DCNv2 fits on both
GPUs; HSTU's table fits the MI350X and not the B200.
'''),
        code('''
rows = []
for model in (DLRM, HSTU):
    for name, gpu in GPUS.items():
        s = workbench.predict(model, gpu, gpus=1).summary
        rows.append({"model": model.name, "gpu": gpu.display_name, "need_gb": s.memory.total / 1e9,
                     "usable_gb": s.memory.usable / 1e9, "fits": s.memory.fits,
                     "step_ms": s.step_time_s * 1e3, "samples_per_s": s.samples_per_s})
one_gpu = pd.DataFrame(rows)
bars = alt.Chart(one_gpu).mark_bar().encode(x=alt.X("gpu:N", title=None, axis=alt.Axis(labels=False)),
                                           y=alt.Y("need_gb:Q", title="GB per GPU"), color="gpu:N")
limit = alt.Chart(one_gpu).mark_tick(color="black", thickness=2, size=40).encode(x="gpu:N", y="usable_gb:Q")
(bars + limit).properties(width=160, height=260).facet(column="model:N",
                                                       title="One GPU, every table in HBM (tick: usable HBM)")
'''),
        md('''
## 3. Three ways to train HSTU when the table does not fit

1. **A bigger GPU**: the MI350X holds the whole table; one GPU per replica.
2. **Row-shard over more GPUs**: two B200s each hold half of the rows (the model adds the all-to-all that
   routes lookups to the shard that owns them).
3. **Spill cold rows to host memory** on one B200: the lookups that land on host rows cross PCIe.

Options 1 and 2 come straight from `workbench.predict`. Option 3 is **not in the library's model yet**
(`workbench.predict` keeps every table in HBM), so the next cell estimates it on top of the prediction: the
embedding ops' bytes for the host share of lookups move at the host link's rate instead of HBM's. Its two
inputs are labelled: the link rate is the PCIe 5.0 x16 datasheet figure (both GPUs' host interface), the
achievable share of it for random 2 KB row gathers is a guess.
'''),
        code('''
PCIE5_X16_GB_S = 64.0  # per direction; PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b encoding
HOST_GATHER_EFFICIENCY = 0.7  # guess: share of the link random row gathers achieve; calibrate on your host


def step_with_host_rows(prediction, host_lookup_share):
    """Step seconds when host_lookup_share of the embedding traffic goes over PCIe instead of HBM (estimate)."""
    embedding = [o for o in prediction.ops if o.op.kind == "embedding"]
    hbm_s = sum(o.total_s for o in embedding)
    host_s = sum(o.op.bytes * o.executions for o in embedding) / (PCIE5_X16_GB_S * 1e9 * HOST_GATHER_EFFICIENCY)
    return prediction.summary.step_time_s + host_lookup_share * (host_s - hbm_s)


b200_one = workbench.predict(HSTU, GPUS["b200"], gpus=1)
need = b200_one.summary.memory
host_rows_share = (need.total - need.usable) / table_bytes(HSTU.item_table_rows, HSTU.embedding_dim)
print(f"one B200: {need.total / 1e9:.0f} GB needed, {need.usable / 1e9:.0f} GB usable -> at least "
      f"{host_rows_share:.0%} of the item rows must live on the host")
'''),
        code('''
placements = []
for label, gpu, gpus in [("MI350X x1, table in HBM", "mi350x", 1), ("B200 x2, rows sharded", "b200", 2)]:
    s = workbench.predict(HSTU, gpu, gpus=gpus).summary
    placements.append({"option": label, "samples_per_s_per_gpu": s.samples_per_s / gpus})
placements = pd.DataFrame(placements)
batch = b200_one.config.samples_per_step
shares = (0.0, 0.2, 0.4) if SMALL else (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
host_curve = pd.DataFrame([{"host_lookup_share": share,
                            "samples_per_s_per_gpu": batch / step_with_host_rows(b200_one, share)}
                           for share in sorted({*shares, host_rows_share})])

host = alt.Chart(host_curve).mark_line(point=True).encode(
    x=alt.X("host_lookup_share:Q", title="share of lookups served from host memory", axis=alt.Axis(format="%")),
    y=alt.Y("samples_per_s_per_gpu:Q", title="samples/s per GPU", scale=alt.Scale(zero=False)))
flat = alt.Chart(placements).mark_rule(strokeDash=[6, 3]).encode(
    y="samples_per_s_per_gpu:Q", color=alt.Color("option:N", legend=alt.Legend(orient="bottom")))
minimum = alt.Chart(pd.DataFrame({"x": [host_rows_share]})).mark_rule(color="red").encode(x="x:Q")
(host + flat + minimum).properties(width=460, height=280,
                                   title="HSTU: per-GPU throughput of three placements (line: B200 x1, rows on host)")
'''),
        code('''
others = ", ".join(f"{r.option}: {r.samples_per_s_per_gpu:,.0f}"
                   for r in placements.itertuples())
print(f"red line: one B200 must put {host_rows_share:.0%} of the rows on the host; with uniform lookups (the worst "
      f"case) as many lookups go there: about {batch / step_with_host_rows(b200_one, host_rows_share):,.0f} "
      f"samples/s per GPU, vs {others}")
print("real traffic is skewed (a few items get most lookups): keeping the hot rows in HBM lowers the host share")
'''),
        md('''
Reading the picture: on the B200 the choice is between paying PCIe for every cold lookup on one GPU, or
doubling the GPUs per table replica and paying the all-to-all. On the MI350X the whole table sits in one GPU's
HBM and neither cost appears. At the recommendation scale, HBM capacity buys a simpler, faster placement.

## Exercise

What is the **smallest share of HSTU's item-table rows** that must move to host memory so that the rest of
the training state fits one **B200**? Give a fraction between 0 and 1 (within one percentage point).

Fill in the answer cell (replace the `...`) and run the check under it: it shrinks the table in the library's
model to the rows you keep in HBM and asks `workbench.memory` whether that fits, and whether one percentage point
less on the host would still fit. One solution is in `solutions/05_recsys_codesign.ipynb`.
'''),
        *exercise(
            {"host_share_answer": "a fraction between 0 and 1"},
            solution='''
table = table_bytes(HSTU.item_table_rows, HSTU.embedding_dim)
host_share_answer = (need.total - need.usable) / table
''', wrong_answer='''
host_share_answer = 0.1
''', check='''
b200 = GPUS["b200"]
config = b200_one.config


def fits_with_host_share(share):
    kept = dataclasses.replace(HSTU, item_table_rows=int(HSTU.item_table_rows * (1 - share)))
    return memory_breakdown(kept, config, b200).fits


share = float(host_share_answer)
if 0 <= share <= 1 and fits_with_host_share(share) and not fits_with_host_share(max(0.0, share - 0.01)):
    print(f"PASS: with {share:.1%} of the rows on the host the rest fits one B200 "
          f"({HSTU.item_table_rows * (1 - share) / 1e6:.0f}M of {HSTU.item_table_rows / 1e6:.0f}M rows in HBM)")
elif not 0 <= share <= 1:
    print(f"NOT YET: {host_share_answer} is not a fraction between 0 and 1")
elif not fits_with_host_share(share):
    print(f"NOT YET: with {share:.1%} on the host it still does not fit; move more rows")
else:
    print(f"NOT YET: {share:.1%} fits, but so does one point less; find the smallest share")
'''),
        md('''
## Take-aways

- Recommendation models are sized by their tables; the first co-design question is where each table lives.
- Placement options trade HBM capacity against PCIe traffic (host) or all-to-all traffic (row sharding).
- The recipe format records the choice (`embeddings: [{table, rows, dim, placement: hbm|host|row_sharded}]`);
  the host-placement cost above is an estimate outside the core model, with its guessed constant labelled.
'''),
    ]
