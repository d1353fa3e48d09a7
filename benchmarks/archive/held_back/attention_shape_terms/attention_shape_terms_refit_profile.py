"""Refit the shipped H200 profile as benchmarks/model/eval_model.py --write-profile does (same rows, same call),
without writing model_eval.{csv,md} into benchmarks/results. --dry: print the fitted constants only."""
import csv, sys, time
from pathlib import Path
from workbench.calibration import calibrate, write_profile
from workbench.fileio import allow_specs_write
from workbench.hardware import get_gpu
from workbench.paths import shipped_calibration_dir
from workbench.rows import merge_repeats

REPO = Path("/work/main")
results = REPO / "benchmarks/results/h200"
csv_path = results / "measured_ops.csv"
repeats = [results / "repeats" / f"fp8_{i}.csv" for i in (1, 2, 3)] + [results / "remeasure" / f"gemm_repeat_{i}.csv" for i in (1, 2, 3)]
rows = [r for r in csv.DictReader(csv_path.open()) if (r.get("measured_ms") or "").strip()]
rows = merge_repeats(rows, [list(csv.DictReader(p.open())) for p in repeats])
gpu = get_gpu("h200")
t = time.time()
full = calibrate(rows, gpu)
print(f"fit {time.time()-t:.0f} s, rows {full.rows}")
for k, v in full.fitted.items():
    if k.startswith("attention"):
        print(k, v)
print("before", {k: round(v, 2) for k, v in full.mape_before.items() if k.startswith(("all", "attention"))})
print("after", {k: round(v, 2) for k, v in full.mape_after.items() if k.startswith(("all", "attention"))})
if "--dry" not in sys.argv:
    source = " + ".join(str(p.relative_to(REPO)) for p in (csv_path, *repeats)) + " (median per row)"
    with allow_specs_write():
        print(write_profile(full, shipped_calibration_dir() / f"{gpu.name}.yaml", source=source, overwrite=True))
