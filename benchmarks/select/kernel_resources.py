"""Cross-compile the GEMM and attention config spaces for AMD targets on this CPU and record each config's
resources in ``specs/kernel_resources.yaml``: the cache the kernel selector reads (LDS, VGPRs, spills,
occupancy), so that it never picks a config that spills or does not fit, without compiling at selection time.

    TRITON_INTERPRET=0 python benchmarks/select/kernel_resources.py [--targets gfx942,gfx950] [--jobs 2]

NVIDIA (sm_90) configs are not listed: every config of the sm_90 space compiled and ran in the H200 sweep.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ["TRITON_INTERPRET"] = "0"

import yaml  # noqa: E402

from workbench.fileio import allow_specs_write  # noqa: E402
from workbench.kernels.spaces import attention_config_space, gemm_config_space  # noqa: E402
from workbench.schema import write_atomic  # noqa: E402
from workbench.select.gemm import config_key  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "specs" / "kernel_resources.yaml"


def _jobs(targets: list[str]) -> list[tuple]:
    jobs = []
    for target in targets:
        for dtype, size in (("bf16", 2), ("fp8", 1)):
            for config in gemm_config_space("hip", arch=target, dtype_bytes=size):
                jobs.append(("gemm", config, target, dtype, size))
        for head_dim in (64, 128):
            for config in attention_config_space("hip", "fwd", head_dim):
                jobs.append(("attention", config, target, f"bf16-d{head_dim}", 2))
    return jobs


def _inspect(job: tuple) -> tuple:
    from workbench.kernels.crosscompile import inspect_config

    kernel, config, target, dtype, size = job
    dtype_name, _, head = dtype.partition("-d")
    if kernel == "attention":  # the attention source takes the head dim from the config's HEAD_DIM entry
        config = {**config, "HEAD_DIM": int(head)}
    result = inspect_config(kernel, config, target, dtype_name)
    return job, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="gfx942,gfx950")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    table: dict = {}
    jobs = _jobs(args.targets.split(","))
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for i, (job, r) in enumerate(pool.map(_inspect, jobs, chunksize=4)):
            kernel, config, target, dtype, size = job
            section = table.setdefault(f"{kernel}-{target}-{dtype if kernel == 'attention' else f'{size}byte'}", {})
            section[config_key(config)] = {"lds_bytes": r.shared_bytes, "vgprs": r.registers, "spills": r.spills,
                                           "occupancy": r.occupancy, "fits": bool(r.fits),
                                           **({"error": r.error} if r.error else {})}
            if i % 50 == 0:
                print(f"{i}/{len(jobs)}", flush=True)
    header = ("# Resources of every AMD config of the GEMM and attention kernels, cross-compiled with Triton on a CPU\n"
              "# (benchmarks/select/kernel_resources.py; workbench.kernels.crosscompile). The kernel selector drops configs\n"
              "# that spill or do not fit. Regenerate after changing a kernel or its config space.\n")
    with allow_specs_write():  # shipped data: only the maintainers' regeneration writes it
        write_atomic(OUT, header + yaml.safe_dump({"schema_version": 1, "kernels": table}, sort_keys=True, width=200))
    print(f"wrote {OUT}: {sum(len(v) for v in table.values())} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
