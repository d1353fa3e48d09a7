"""An FSDP recipe on 2 GPUs against its prediction (issue #6, the 2-GPU item; issue #7 at the size lent).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=. python3 benchmarks/multi_gpu_proof.py --out DIR [--gpus 2]

Runs the same Llama 3 8B (8 layers, 4k tokens, micro-batch 2, bf16, no checkpointing) recipe on one GPU and with
FSDP over ``--gpus`` GPUs (torchrun + FSDP2: ``python -m workbench.train``), and compares step time and peak
memory with the recipes' predictions. Communication is not timed inside the job; its exposed share is measured
as the FSDP step time minus the one-GPU step time (same per-GPU work), against the model's exposed
communication. Writes DIR/multi_gpu.json and DIR/MULTI_GPU.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workbench.config import Parallelism, TrainingConfig  # noqa: E402
from workbench.recipe import save_recipe  # noqa: E402
from workbench.recipe.build import make_recipe, predict_recipe  # noqa: E402

MODEL, OVERRIDES, SEQ, MICRO_BATCH = "llama3-8b", {"num_layers": 8}, 4096, 2


def _run(command: list[str], log: Path, timeout: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
    with log.open("w") as handle:
        try:
            return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout-s", type=int, default=150, help="per run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for gpus in (1, args.gpus):
        config = TrainingConfig(MICRO_BATCH, SEQ, parallelism=Parallelism(dp=gpus, sharding="fsdp"))
        recipe = make_recipe(MODEL, "h200-sxm", config, overrides=OVERRIDES, compile=False, calibrated=True)
        path = save_recipe(recipe, args.out / f"fsdp{gpus}.yaml", overwrite=True)
        metrics = args.out / f"fsdp{gpus}_metrics.json"
        job = ["-m", "workbench.train", "--recipe", str(path), "--steps", str(args.steps), "--warmup", "3",
               "--data", "synthetic", "--quiet", "--metrics", str(metrics)]
        command = [sys.executable, *job] if gpus == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", *job]
        rc = _run(command, args.out / f"fsdp{gpus}.log", args.timeout_s)
        summary = predict_recipe(recipe, calibrated=True).summary
        runs[gpus] = {"rc": rc, "metrics": json.loads(metrics.read_text()) if metrics.exists() else None,
                      "predicted_optimizer_s": summary.optimizer_s,
                      "predicted_exposed_communication_s": summary.communication_s}
        print(f"{gpus} GPU(s): rc={rc}", flush=True)
    one, many = runs[1]["metrics"], runs[args.gpus]["metrics"]
    rows = []
    for gpus, m in ((1, one), (args.gpus, many)):
        if not m:
            rows.append(f"| {gpus} | failed (see fsdp{gpus}.log) | | | | |")
            continue
        pm, mm = m["predicted"], m["measured"]
        rows.append(f"| {gpus} | {mm['step_time_s'] * 1e3:.1f} | {pm['step_time_s'] * 1e3:.1f} | "
                    f"{m['relative_error'].get('step_time_s', float('nan')):+.1%} | {mm['peak_memory_gb']:.1f} | "
                    f"{pm['peak_memory_gb']:.1f} ({m['relative_error'].get('peak_memory_gb', float('nan')):+.1%}) |")
    lines = ["# FSDP on 2 H200s: predicted vs measured", "",
             f"Recipe: {MODEL} with {OVERRIDES}, seq {SEQ}, micro-batch {MICRO_BATCH} per GPU, bf16, no checkpointing, "
             f"no compile, synthetic data, {args.steps} timed steps (median). Predictions: the H200-calibrated model.",
             "", "| GPUs | measured step ms | predicted step ms | error | measured peak GB (reserved) | "
                 "predicted peak GB (error) |", "|---|---|---|---|---|---|", *rows]
    if one and many:
        # FSDP also shards the optimizer step: add back the model's optimizer-time difference
        optimizer_saving = runs[1]["predicted_optimizer_s"] - runs[args.gpus]["predicted_optimizer_s"]
        exposed = many["measured"]["step_time_s"] - one["measured"]["step_time_s"] + optimizer_saving
        predicted = runs[args.gpus]["predicted_exposed_communication_s"]
        lines += ["", f"Exposed communication = FSDP step - one-GPU step (same per-GPU work) + the predicted "
                      f"optimizer saving of sharding ({optimizer_saving * 1e3:.1f} ms): measured {exposed * 1e3:.1f} ms, "
                      f"predicted {predicted * 1e3:.1f} ms (the rest of the all-gather/reduce-scatter traffic is "
                      f"predicted hidden behind compute)."]
    (args.out / "MULTI_GPU.md").write_text("\n".join(lines) + "\n")
    (args.out / "multi_gpu.json").write_text(json.dumps(runs, indent=2, default=str) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
