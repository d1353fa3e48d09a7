"""NCCL collective sweep on the GPUs of one host vs the alpha-beta model (issue #7; 2 GPUs where that is all
that is lent).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        torchrun --nproc_per_node 2 benchmarks/comm/comm_sweep.py --out DIR [--gpu h200]

all_reduce, all_gather, reduce_scatter and all_to_all of bf16 buffers from 1 MiB to 4 GiB, each timed with CUDA
events as the median of 10 after 3 warm-ups (a barrier before each), on random data. ``size_bytes`` follows
``workbench.perf.comm``: the whole buffer for all-reduce, the gathered tensor for all-gather, the input of
reduce-scatter, each rank's send buffer for all-to-all. Rank 0 writes DIR/comm_sweep.csv with the model's
spec-only prediction beside each measurement; ``--fit`` (on any machine) then fits the link efficiency and
latency to the CSV.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.hardware import get_gpu  # noqa: E402
from workbench.perf.comm import Link, collective_time, group_link  # noqa: E402
from workbench.perf.efficiency import default_constants  # noqa: E402

SIZES = [1 << p for p in range(20, 33, 2)]  # 1 MiB, 4 MiB, ... 4 GiB
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
FIELDS = ("collective", "size_bytes", "group", "measured_s", "predicted_s", "bus_gb_s", "error")


def predicted(kind: str, size: int, group: int, gpu_name: str) -> float:
    gpu = get_gpu(gpu_name)
    return collective_time(kind, size, group, group_link(gpu, default_constants(gpu), spans_nodes=False))


def run(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    rows = []
    for kind in COLLECTIVES:
        for size in SIZES:
            elements = size // 2
            if kind == "all_gather":
                src = torch.randn(elements // world, device="cuda", dtype=torch.bfloat16)
                dst = torch.empty(elements, device="cuda", dtype=torch.bfloat16)
                op = lambda: dist.all_gather_into_tensor(dst, src)  # noqa: E731
            elif kind == "reduce_scatter":
                src = torch.randn(elements, device="cuda", dtype=torch.bfloat16)
                dst = torch.empty(elements // world, device="cuda", dtype=torch.bfloat16)
                op = lambda: dist.reduce_scatter_tensor(dst, src)  # noqa: E731
            elif kind == "all_to_all":
                src = torch.randn(elements, device="cuda", dtype=torch.bfloat16)
                dst = torch.empty_like(src)
                op = lambda: dist.all_to_all_single(dst, src)  # noqa: E731
            else:
                src = torch.randn(elements, device="cuda", dtype=torch.bfloat16)
                op = lambda: dist.all_reduce(src)  # noqa: E731
            times = []
            for i in range(13):
                dist.barrier()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                op()
                end.record()
                end.synchronize()
                if i >= 3:
                    times.append(start.elapsed_time(end) * 1e-3)
            measured = torch.tensor([statistics.median(times)], device="cuda")
            dist.all_reduce(measured, op=dist.ReduceOp.MAX)  # the slowest rank's median
            seconds = measured.item()
            model = predicted(kind, size, world, args.gpu)
            factor = 2 * (world - 1) / world if kind == "all_reduce" else (world - 1) / world
            rows.append(dict(collective=kind, size_bytes=size, group=world, measured_s=f"{seconds:.6e}",
                             predicted_s=f"{model:.6e}", bus_gb_s=f"{factor * size / seconds / 1e9:.1f}",
                             error=f"{(model - seconds) / seconds:+.3f}"))
            del src
            if rank == 0:
                print(f"{kind:15s} {size / 2**20:8.0f} MiB  {seconds * 1e3:9.3f} ms  model {model * 1e3:9.3f} ms  "
                      f"bus {rows[-1]['bus_gb_s']} GB/s", flush=True)
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "comm_sweep.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    dist.destroy_process_group()


def fit(path: Path, gpu_name: str) -> None:
    """Least squares for time = steps * latency + traffic / bandwidth on the measured rows; prints the link
    efficiency (fitted bandwidth / catalog scale-up bandwidth) and the latency, and the error before and after."""
    import numpy as np

    gpu = get_gpu(gpu_name)
    rows = list(csv.DictReader(path.open()))
    steps, traffic, seconds = [], [], []
    for row in rows:
        n, size = int(row["group"]), int(row["size_bytes"])
        s, t = (2 * (n - 1), 2 * (n - 1) / n * size) if row["collective"] == "all_reduce" else (n - 1, (n - 1) / n * size)
        steps.append(s)
        traffic.append(t)
        seconds.append(float(row["measured_s"]))
    a = np.array([steps, traffic]).T / np.array(seconds)[:, None]  # relative error weighting
    latency, inverse_bandwidth = np.linalg.lstsq(a, np.ones(len(rows)), rcond=None)[0]
    link = Link(1 / inverse_bandwidth, latency, "fitted")
    fitted = [collective_time(r["collective"], int(r["size_bytes"]), int(r["group"]), link) for r in rows]
    spec = [float(r["predicted_s"]) for r in rows]
    mape = lambda p: statistics.mean(abs(x - y) / y for x, y in zip(p, seconds))  # noqa: E731
    print(f"fitted: bandwidth {link.bandwidth_bytes_s / 1e9:.0f} GB/s per direction "
          f"(link_efficiency {link.bandwidth_bytes_s / (gpu.scale_up_gb_s_per_direction.value * 1e9):.3f} of "
          f"{gpu.scale_up_gb_s_per_direction.value:.0f} GB/s), latency {latency * 1e6:.1f} us per step; "
          f"MAPE spec {mape(spec):.1%} -> fitted {mape(fitted):.1%} over {len(rows)} rows")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--gpu", default="h200-sxm")
    parser.add_argument("--fit", type=Path, help="fit the link constants to this comm_sweep.csv (no GPU needed)")
    args = parser.parse_args()
    if args.fit:
        fit(args.fit, args.gpu)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
