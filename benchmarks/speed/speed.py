"""Speed targets of the core (issue: core model): import < 0.5 s, a full Llama 3 405B step prediction < 20 ms,
predict-ops on 1,000 rows < 1 s. Medians of repeated runs on this machine (2 CPU cores, no GPU).

    python benchmarks/speed/speed.py        # writes benchmarks/results/speed.csv and prints the table
"""

from __future__ import annotations

import csv
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "speed.csv"


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rows_csv(count: int) -> str:
    rng = random.Random(0)
    lines = ["op,m,n,k,batch,seq,heads_q,heads_kv,head_dim,causal,pass,rows,cols,dtype"]
    for i in range(count):
        kind = i % 3
        if kind == 0:
            m, n, k = (2 ** rng.randint(4, 14) for _ in range(3))
            lines.append(f"gemm,{m},{n},{k},,,,,,,,,,{rng.choice(['bf16', 'fp16', 'fp8', 'tf32'])}")
        elif kind == 1:
            lines.append(f"attention,,,,{rng.randint(1, 8)},{2 ** rng.randint(9, 14)},32,8,128,true,fwd_bwd,,,bf16")
        else:
            lines.append(f"{rng.choice(['copy', 'add', 'rmsnorm', 'softmax'])},,,,,,,,,,,{2 ** rng.randint(8, 15)},4096,bf16")
    return "\n".join(lines) + "\n"


def main() -> None:
    import_s = median_seconds(lambda: subprocess.run([sys.executable, "-c", "import workbench"], check=True), 7)
    bare_s = median_seconds(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 7)

    import workbench
    from workbench.hardware import get_gpu
    from workbench.perf.efficiency import constants_for
    from workbench.rows import predict_rows

    workbench.predict("llama3-405b", "h200", micro_batch=1, seq_len=8192)  # load the catalogs once
    predict_s = median_seconds(lambda: workbench.predict("llama3-405b", "h200", micro_batch=1, seq_len=8192), 50)
    predict_8gpu_s = median_seconds(
        lambda: workbench.predict("llama3-405b", "mi355x", micro_batch=1, seq_len=8192, gpus=64), 50)

    text = rows_csv(1000)
    gpu = get_gpu("h200")
    constants = constants_for(gpu)
    rows_s = median_seconds(lambda: predict_rows(text, gpu, constants), 5)
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        handle.write(text)
    cli = [sys.executable, "-m", "workbench.cli", "predict-ops", handle.name, "--gpu", "h200"]
    cli_s = median_seconds(lambda: subprocess.run(cli, check=True, capture_output=True), 5)

    from workbench.select import rank_configs

    rank_configs("gemm", {"m": 64, "n": 64, "k": 64}, "bf16", "h200")  # loads the selection profile once
    shapes = iter([(m, 4096 + m % 7, 1000 + 3 * m) for m in range(1, 100000)])
    select_s = median_seconds(lambda: rank_configs("gemm", dict(zip("mnk", next(shapes))), "bf16", "h200"), 1000)
    select_amd_s = median_seconds(lambda: rank_configs("gemm", dict(zip("mnk", next(shapes))), "bf16", "mi355x"), 1000)

    results = [
        ("import workbench (fresh interpreter, minus bare interpreter start)", import_s - bare_s, 0.5),
        ("predict llama3-405b step, 1 x H200", predict_s, 0.020),
        ("predict llama3-405b step, 64 x MI355X (FSDP)", predict_8gpu_s, 0.020),
        ("predict-ops 1,000 rows, in process", rows_s, 1.0),
        ("workbench predict-ops 1,000 rows, whole CLI process", cli_s, 1.0),
        ("rank the whole GEMM config space of one new shape, H200 (calibrated)", select_s, 0.001),
        ("rank the whole GEMM config space of one new shape, MI355X (spec)", select_amd_s, 0.001),
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["measure", "median_s", "target_s", "met"])
        for name, seconds, target in results:
            writer.writerow([name, f"{seconds:.4f}", target, seconds <= target])
    for name, seconds, target in results:
        print(f"{name:<66} {seconds * 1e3:9.1f} ms  (target {target * 1e3:.0f} ms: {'met' if seconds <= target else 'MISSED'})")


if __name__ == "__main__":
    main()
