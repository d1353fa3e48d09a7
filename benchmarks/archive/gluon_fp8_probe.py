"""Probe (issue #3): does the Gluon fp8 GEMM (workbench/kernels/gemm_gluon.py) reach 0.85 of torch._scaled_mm
with exact accumulation on an H200? Runs on one sm_90 GPU in about 2 minutes:

    python benchmarks/archive/gluon_fp8_probe.py OUT_DIR

Two phases, so that a config that hangs (an mbarrier phase bug deadlocks the GPU) or faults cannot take the
probe down with it:

1. smoke (a child process, restarted after a hang or crash, SMOKE_TIMEOUT_S per config): for each config,
   compile it for sm_90 and print the kernel's registers, spills, shared memory and ptxas's wgmma remarks
   (C7514/C7515 = the wgmmas were serialized, which defeats the overlapped promotion), then check it against the
   float64 reference on small edge shapes (K not a multiple of BLOCK_K, M/N edges, odd and even K-block counts,
   more tiles than SMs, row scales and bias). One line per config in OUT_DIR/smoke.jsonl.
2. llama (this process): for the configs that passed, the 8 Llama-3 8B/70B projection GEMMs at M = 8192
   (cases.llama_gemms / _fp8_inputs, per-tensor scales): relative error next to _scaled_mm's own on the same
   inputs (checked BEFORE timing; a wrong config is not timed), then ours vs _scaled_mm with the same
   use_fast_accum, alternating (workbench.bench._do_bench_pair, as benchmarks/archive/tma_fp8_probe.py). The current
   gemm_tma pick (128x128x256 w8 s3) is the reference row. OUT_DIR/llama.json holds every row; OUT_DIR/summary.txt
   the geomean ratio per config.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DEVICE = "cuda"
"""Where the probe's tensors live (a CPU dry run of the bookkeeping sets "cpu" with TRITON_INTERPRET=1)."""
SMOKE_TIMEOUT_S = 30
"""Seconds without progress in the smoke phase that mean a hang (a config compiles in ~1-5 s and runs its
edge shapes in < 1 s; the child's first config also pays for importing torch and starting CUDA)."""
TIME_BUDGET_S = 165
"""Stop timing Llama cases past this many seconds since start (the lead's limit is 3 minutes)."""
EDGE_SHAPES = [  # (M, N, K, scaling, bias); TMA needs K % 16 == 0 and N % 8 == 0 (two epilogues: fewer builds)
    (300, 136, 208, "row", True),      # K tail (208 = 128 + 80: TMA zero-fill), M/N edges, 2 K blocks (tail step)
    (257, 264, 384, "tensor", False),  # 3 K blocks: one unrolled pair, no tail step; M and N edges
    (1024, 1032, 128, "tensor", False),  # 1 K block per tile, N edge
    (2048, 4096, 640, "row", True),    # 512 tiles > 132 SMs: several tiles per program, 5 K blocks
]
TMA_PICK = dict(KERNEL="tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=256, GROUP_M=8, EPILOGUE_SUBTILE=1,
                WARP_SPECIALIZE=False, num_warps=8, num_stages=3)
"""gemm_tma's current fp8 pick (benchmarks/archive/tma_fp8_probe.py), the row to beat."""


def variants() -> dict[str, tuple[str, dict, bool]]:
    """name -> (kernel "gluon" or "tma", config, use_fast_accum)."""
    from workbench.kernels import gemm_gluon

    out = {}
    for fast in (False, True):
        for config in gemm_gluon.config_space("fast" if fast else "exact"):
            name = (f"gluon {'fast' if fast else 'exact'} {config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} "
                    f"s{config['NUM_STAGES']}{' ws' if config['WARP_SPECIALIZE'] else ''}")
            out[name] = ("gluon", config, fast)
        out[f"tma {'fast' if fast else 'exact'} 128x128x256 w8 s3 (pick)"] = ("tma", TMA_PICK, fast)
    return out


def run(kernel: str, config: dict, fast: bool, a, b, sa, sb, bias=None):
    from workbench.kernels import gemm_gluon, gemm_tma

    if kernel == "gluon":
        return gemm_gluon.scaled_matmul_gluon(a, b, sa, sb, bias, config, use_fast_accum=fast)
    return gemm_tma.scaled_matmul_tma(a, b, sa, sb, bias, config, use_fast_accum=fast)


def rel_err(out, ref) -> float:
    import torch

    out = out.double()
    if not torch.isfinite(out).all():
        return math.inf
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


# ------------------------------------------------------------------------------------------------ smoke phase
def compile_info(config: dict, fast: bool) -> dict:
    """The sm_90 build of this config (tensor scales, no bias: the Llama cases): ptxas's report
    (gemm_gluon.inspect_build) and the registers/spills the driver reports when it loads the cubin."""
    from workbench.kernels import gemm_gluon

    info = gemm_gluon.inspect_build(config, exact=not fast).as_dict()
    kernel = gemm_gluon.crosscompile(config, exact=not fast)
    info["setmaxnreg"] = re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", kernel.asm["ptx"])
    try:
        kernel._init_handles()  # loads the cubin on this GPU: fills n_regs / n_spills
        info.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills)
    except Exception as exc:  # noqa: BLE001
        info["load_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return info


def smoke(name: str, kernel: str, config: dict, fast: bool) -> dict:
    import torch

    from workbench.kernels.gemm import TOLERANCE, reference_scaled_matmul

    row: dict = {"variant": name}
    if kernel == "gluon":  # the ahead-of-time build's report; whether the config works is the edge shapes' call
        try:
            row.update(compile_info(config, fast))
        except Exception as exc:  # noqa: BLE001
            row["inspect_error"] = f"{type(exc).__name__}: {str(exc)[-400:]}"
    torch.manual_seed(0)
    edges = []
    for m, n, k, scaling, with_bias in EDGE_SHAPES:
        edge = {"shape": [m, n, k], "scaling": scaling, "bias": with_bias}
        edges.append(edge)
        try:
            a = torch.randn(m, k, device=DEVICE).to(torch.float8_e4m3fn)  # a: [M, K] row-major
            b = torch.randn(n, k, device=DEVICE).to(torch.float8_e4m3fn).t()  # b: [K, N] column-major
            if scaling == "row":
                sa, sb = torch.rand(m, 1, device=DEVICE) + 0.5, torch.rand(1, n, device=DEVICE) + 0.5
            else:
                sa, sb = torch.rand((), device=DEVICE) + 0.5, torch.rand((), device=DEVICE) + 0.5
            bias = torch.randn(n, device=DEVICE, dtype=torch.bfloat16) if with_bias else None
            ref = reference_scaled_matmul(a, b, sa, sb, bias=bias)
            edge["rel_err"] = rel_err(run(kernel, config, fast, a, b, sa, sb, bias), ref)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            edge["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
            continue
        try:
            edge["vendor_rel_err"] = rel_err(torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                                              use_fast_accum=fast), ref)
        except Exception as exc:  # noqa: BLE001
            edge["vendor_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    row["edges"] = edges
    row["ok"] = all(e.get("rel_err", math.inf) <= TOLERANCE["fp8"] for e in edges)
    return row


def smoke_child(out_dir: Path, names: list[str]) -> None:
    """Child process: smoke-test the named variants in order, one JSON line each (a 'started' line first, so
    the parent knows which config hung)."""
    table = variants()
    with open(out_dir / "smoke.jsonl", "a") as log:
        for name in names:
            log.write(json.dumps({"started": name}) + "\n")
            log.flush()
            started = time.time()
            try:
                row = smoke(name, *table[name])
            except Exception:  # noqa: BLE001
                row = {"variant": name, "ok": False, "error": traceback.format_exc()[-800:]}
            row["seconds"] = round(time.time() - started, 1)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
            if "CUDA error" in json.dumps(row):  # a fault poisons this process's CUDA context: the parent restarts
                os._exit(4)  # the child for the configs still to go


def read_log(log: Path) -> list[dict]:
    """The smoke log's complete lines (the child may be writing the last one)."""
    lines = []
    for text in log.read_text().splitlines() if log.exists() else []:
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            pass
    return lines


def smoke_all(out_dir: Path, names: list[str]) -> dict[str, dict]:
    """Run the smoke child until every variant has a result; a config that hangs or kills the child is
    recorded as such and the child restarted after it."""
    results: dict[str, dict] = {}
    table = variants()
    log = out_dir / "smoke.jsonl"
    for _attempt in range(len(names)):
        todo = [n for n in names if n not in results]
        if not todo:
            break
        child = subprocess.Popen([sys.executable, __file__, str(out_dir), "--smoke", json.dumps(todo)])
        deadline = time.time() + SMOKE_TIMEOUT_S * len(todo)
        last_progress, seen = time.time(), 0
        while child.poll() is None:
            time.sleep(1)
            lines = read_log(log)
            if len(lines) != seen:
                seen, last_progress = len(lines), time.time()
            if time.time() - last_progress > SMOKE_TIMEOUT_S or time.time() > deadline:
                child.kill()
                child.wait()
                break
        lines = read_log(log)
        for line in lines:
            if "variant" in line:
                results[line["variant"]] = line
        started = [x["started"] for x in lines if "started" in x]
        if not any(name in started for name in todo):  # the child died before its first config
            for name in todo:
                results[name] = {"variant": name, "ok": False, "error": f"smoke child exit {child.returncode}"}
            break
        for name in started:
            if name not in results:  # started, never finished: hung or crashed the child
                how = "hang" if child.returncode in (-9, None) else f"child exit {child.returncode}"
                failed = [{"variant": name, "ok": False, "error": f"{how} in the smoke test"}]
                for other in todo:  # its family (same kernel, accumulation, loader) would most likely do the same
                    if other not in results and other != name and family(table[other]) == family(table[name]):
                        failed.append({"variant": other, "ok": False, "error": f"skipped: {name} had a {how}"})
                with open(log, "a") as f:
                    for line in failed:
                        results[line["variant"]] = line
                        f.write(json.dumps(line) + "\n")
    return results


def family(variant: tuple[str, dict, bool]) -> tuple:
    kernel, config, fast = variant
    return kernel, fast, bool(config.get("WARP_SPECIALIZE"))


# ------------------------------------------------------------------------------------------------ llama phase
def llama(table: dict, passed: list[str], started: float) -> list[dict]:
    import torch

    from workbench.bench import _do_bench_pair
    from workbench.kernels.gemm import TOLERANCE, reference_scaled_matmul
    from workbench.kernels.cases import (
        GEMM_TOKENS as TOKENS,
        _fp8_inputs,
        _torch_scaled_mm,
        llama_gemms as _llama_gemms,
    )

    rows = []
    for model in ("llama3-8b", "llama3-70b"):
        for layer, n, k in _llama_gemms(model):
            a, b, sa, sb = _fp8_inputs(TOKENS, n, k)(DEVICE)
            ref = reference_scaled_matmul(a, b, sa, sb)
            vendor_err = {fast: rel_err(_torch_scaled_mm(a, b, sa, sb, use_fast_accum=fast), ref)
                          for fast in (False, True)}
            for name in passed:
                kernel, config, fast = table[name]
                row = dict(model=model, layer=layer, m=TOKENS, n=n, k=k, variant=name,
                           vendor_rel_err=vendor_err[fast])
                try:
                    row["rel_err"] = rel_err(run(kernel, config, fast, a, b, sa, sb), ref)
                    if not row["rel_err"] <= TOLERANCE["fp8"]:
                        row["error"] = "wrong result: not timed"
                    elif time.time() - started > TIME_BUDGET_S:
                        row["error"] = "time budget spent: not timed"
                    else:
                        ours, vendor = _do_bench_pair(partial(run, kernel, config, fast, a, b, sa, sb),
                                                      partial(_torch_scaled_mm, a, b, sa, sb, use_fast_accum=fast),
                                                      rounds=2)
                        flop = 2.0 * TOKENS * n * k
                        row.update(ours_ms=ours, vendor_ms=vendor, ratio=vendor / ours,
                                   ours_tflops=flop / ours / 1e9, vendor_tflops=flop / vendor / 1e9)
                except Exception as exc:  # noqa: BLE001
                    row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
                rows.append(row)
                print(json.dumps(row), flush=True)
            del a, b, ref
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return rows


def summary(table: dict, smoke_rows: dict, rows: list[dict]) -> str:
    head = f"{'variant':<44} {'geomean':>8} {'min':>6} {'max':>6} {'cases':>5} {'err/vendor':>10}  compile / smoke"
    lines = [head]
    for name in table:
        ratios = [r["ratio"] for r in rows if r["variant"] == name and "ratio" in r]
        errs = [r["rel_err"] / r["vendor_rel_err"] for r in rows
                if r["variant"] == name and "rel_err" in r and r.get("vendor_rel_err")]
        err = f"{max(errs):>10.2f}" if errs else f"{'-':>10}"  # worst Llama case: our rel. error / _scaled_mm's
        s = smoke_rows.get(name, {})
        info = (f"regs {s.get('registers')} spill-bytes {s.get('spill_bytes')} shared {s.get('shared_bytes')} "
                f"waits {s.get('wait_groups')}{' SERIALIZED' if s.get('serialized') else ''}"
                if "registers" in s else s.get("inspect_error", ""))
        worst = max((e.get("rel_err", math.inf) for e in s.get("edges", [])), default=None)
        failure = (s.get("error") or "edge shapes (rel_err > tolerance or an exception)").strip().splitlines()[-1]
        state = "ok" if s.get("ok") else "not run" if not s else f"FAILED {failure}"
        detail = f"{state}; worst edge rel_err {worst:.2e}" if worst is not None else state
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            lines.append(f"{name:<44} {geo:>8.3f} {min(ratios):>6.3f} {max(ratios):>6.3f} {len(ratios):>5} {err}  "
                         f"{info} | {detail}")
        else:
            lines.append(f"{name:<44} {'-':>8} {'-':>6} {'-':>6} {0:>5} {err}  {info} | {detail}")
    return "\n".join(lines)


def main() -> None:
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    if "--smoke" in sys.argv:
        smoke_child(out_dir, json.loads(sys.argv[sys.argv.index("--smoke") + 1]))
        return
    started = time.time()
    import torch
    import triton

    table = variants()
    header = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(),
              "capability": list(torch.cuda.get_device_capability())}
    print(header, flush=True)
    (out_dir / "smoke.jsonl").unlink(missing_ok=True)
    smoke_rows = smoke_all(out_dir, list(table))
    print(f"smoke phase done at {time.time() - started:.0f} s", flush=True)
    passed = [name for name in table if smoke_rows.get(name, {}).get("ok")]
    rows = llama(table, passed, started)
    text = summary(table, smoke_rows, rows)
    text += f"\n{header}\ntotal {time.time() - started:.0f} s"
    print(text, flush=True)
    (out_dir / "summary.txt").write_text(text + "\n")
    (out_dir / "llama.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
