"""config=None's picks and the shim's choices on the broad shape set, priced on GPU time alone and per call
(max(GPU time, host time of the path): ``workbench.select.host``), and which of them the host time changes.

    python3 benchmarks/select/host_pricing_picks.py --out DIR [--host-us gluon=73.7 ...]

CPU only (the selector is pure Python). For each GEMM of ``benchmarks/kernels/shapes.yaml`` in bf16 (its layout) and
fp8 (A row-major, B column-major, exact accumulation, as ``broad_shapes.py`` runs them) on the H200: the config the
front door's config=None takes (``dispatch``: bf16 ranks the TMA kernel only where ``dispatch._tma_takes`` would,
fp8 ranks TMA and Gluon) and the shim's route (``dispatch.gemm_choice``), each under both pricings. ``--host-us
PATH=US`` replaces a path's host time (``select.host.HOST_PATHS``), e.g. the Gluon call's pre-direct-launch 73.7 us.
Writes DIR/picks.csv (every case) and DIR/REPORT.md (the changed ones).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "kernels"))

from broad_shapes import load_shapes  # noqa: E402

from workbench.fileio import write_text  # noqa: E402
from workbench.graph.ops import GemmShape  # noqa: E402
from workbench.hardware import get_gpu  # noqa: E402
from workbench.kernels import dispatch  # noqa: E402
from workbench.kernels.spaces import tma_eligible  # noqa: E402
from workbench.perf.gemm import is_aligned  # noqa: E402
from workbench.select import host as host_model  # noqa: E402
from workbench.select import select_config, vendor_choice  # noqa: E402
from workbench.select.gemm import config_key  # noqa: E402

GPU = "h200-sxm"
FIELDS = ("id", "family", "name", "dtype", "m", "n", "k", "layout", "pick_gpu", "pick_call", "pick_gpu_ms",
          "pick_call_gpu_ms", "pick_call_host_us", "shim_gpu", "shim_call", "changed")


def front_door_kwargs(m: int, n: int, k: int, layout: str, dtype: str) -> dict:
    """What ``dispatch`` passes the selector for config=None on an H200 (``_plan_matmul`` / ``_default_config``)."""
    if dtype == "fp8":
        return dict(layout="nt", tma=True, gluon=True, accumulation="exact")
    tma = (m * n * k >= dispatch.TMA_MIN_MACS and layout in ("nn", "nt")
           and tma_eligible(m, n, k, layout, 2))  # _tma_takes: A row-major, 16-byte rows, enough work
    return dict(layout=layout, tma=tma, gluon=False)


def shim(m: int, n: int, k: int, dtype: str, layout: str, host_bound: bool) -> str:
    """``dispatch.gemm_choice``'s route under one pricing (its rule, with ``host_bound`` chosen here)."""
    if not dispatch.vendor_takes(m, n, k, dtype):
        return "triton"
    choice = vendor_choice({"m": m, "n": n, "k": k}, dtype, GPU, layout=layout, gluon=dtype == "fp8",
                           host_bound=host_bound)
    if choice.choice == "triton" and min(m, n, k) < dispatch.TRITON_MIN_DIM and is_aligned(GemmShape(m, n, k), dtype):
        return "vendor"
    return choice.choice


def rows() -> list[dict]:
    out = []
    for shape in load_shapes()["gemm"]:
        m, n, k = shape["m"], shape["n"], shape["k"]
        for dtype in ("bf16", "fp8"):
            kwargs = front_door_kwargs(m, n, k, shape["layout"], dtype)
            layout = kwargs["layout"]
            gpu_only = select_config("gemm", {"m": m, "n": n, "k": k}, dtype, GPU, **kwargs)
            per_call = select_config("gemm", {"m": m, "n": n, "k": k}, dtype, GPU, host_bound=True, **kwargs)
            row = dict(id=shape["id"], family=shape["family"], name=shape["name"], dtype=dtype, m=m, n=n, k=k,
                       layout=layout, pick_gpu=config_key(gpu_only.config), pick_call=config_key(per_call.config),
                       pick_gpu_ms=f"{gpu_only.time_s * 1e3:.4f}", pick_call_gpu_ms=f"{per_call.time_s * 1e3:.4f}",
                       pick_call_host_us=f"{per_call.host_s * 1e6:.1f}",
                       shim_gpu=shim(m, n, k, dtype, layout, False), shim_call=shim(m, n, k, dtype, layout, True))
            row["changed"] = int(row["pick_gpu"] != row["pick_call"] or row["shim_gpu"] != row["shim_call"])
            out.append(row)
    return out


def report(table: list[dict], overrides: dict, command: str) -> str:
    changed = [r for r in table if r["changed"]]
    host = host_model.host_constants(get_gpu(GPU))
    prices = ", ".join(f"{p} {host[f'host_call_us.{p}']:.1f}" + (f" (fp8 {host[f'host_call_us.{p}.fp8']:.1f})"
                                                              if f"host_call_us.{p}.fp8" in host.values else "")
                       for p in host_model.HOST_PATHS)
    lines = [f"# config=None and shim picks, GPU-time pricing vs per-call pricing ({GPU})", "",
             f"`{command}`", "",
             f"Host us per call: {prices}" + (f"; overridden: {overrides}" if overrides else "") + ".", "",
             f"{len(changed)} of {len(table)} cases change (config=None pick or shim route).", "",
             "| id | name | dtype | m x n x k | layout | pick, GPU time | its GPU ms | pick, per call "
             "| its GPU ms / host us | shim before -> after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in changed:
        lines.append(f"| {r['id']} | {r['family']} {r['name']} | {r['dtype']} | {r['m']}x{r['n']}x{r['k']} | "
                     f"{r['layout']} | {r['pick_gpu']} | {r['pick_gpu_ms']} | {r['pick_call']} | "
                     f"{r['pick_call_gpu_ms']} / {r['pick_call_host_us']} | {r['shim_gpu']} -> {r['shim_call']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--host-us", action="append", default=[], metavar="PATH=US",
                        help="replace a path's host time per call (e.g. gluon=73.7)")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.host_us:
        path, _, value = item.partition("=")
        if path not in host_model.HOST_PATHS or not value:
            parser.error(f"--host-us: got {item!r}, expected PATH=US with PATH one of {host_model.HOST_PATHS}")
        overrides[f"host_call_us.{path}"] = float(value)
        overrides[f"host_call_us.{path}.fp8"] = float(value)
    if overrides:
        measured = host_model.host_constants
        host_model.host_constants = lambda gpu, calibrated=True: measured(gpu, calibrated).with_values(
            overrides, "override")
    table = rows()
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "picks.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(table)
    command = "python3 benchmarks/select/host_pricing_picks.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_text(args.out / "REPORT.md", report(table, overrides, command), overwrite=True)
    print(report(table, overrides, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
