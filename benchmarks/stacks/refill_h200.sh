#!/usr/bin/env bash
# Re-run the rows of the DeepSpeed and Megatron-Core sweeps that ran out of budget or timed out in session 9
# (deepspeed_runs.py / megatron_runs.py --only-missing: the measured rows are skipped, the others appended to the
# committed results files), on the H200 machine with the wheels carried (.whl-ds, .whl-mcore; the device README).
# The row roles (fit / test / holdout) are deepspeed_split.json and megatron_split.json, committed before any row ran.
#   bash benchmarks/stacks/refill_h200.sh OUT [DS_BUDGET_S] [MG_BUDGET_S]
set -u
out=${1:?OUT folder}; ds_budget=${2:-230}; mg_budget=${3:-200}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
results=benchmarks/results/h200/stacks
mkdir -p "$out/deepspeed" "$out/megatron"
cp $results/deepspeed/deepspeed*.jsonl "$out/deepspeed/"
cp $results/megatron/megatron_local*.jsonl "$out/megatron/"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ds .whl-ds/*.whl 2>&1 | tail -2
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mcore .whl-mcore/*.whl 2>&1 | tail -2
# torch's fused AdamW, as every committed DeepSpeed row ran (the fit's optimizer; FusedAdam's build is not retried)
for sweep in main holdout; do
  PYTHONPATH=/tmp/ds python3 benchmarks/stacks/deepspeed_runs.py --sweep $sweep --out "$out/deepspeed" \
    --optimizer torch --only-missing --row-cap-s 75 --budget-s $((ds_budget / 2)) 2>&1 | tail -8
done
for sweep in main holdout; do
  PYTHONPATH=/tmp/mcore python3 benchmarks/stacks/megatron_runs.py --sweep $sweep --out "$out/megatron" \
    --only-missing --row-cap-s 75 --budget-s $((mg_budget / 2)) 2>&1 | tail -8
done
