"""Probe (session 4): TMA fp8 config variants on the kernel suite's 8 Llama fp8 cases, timed as the suite times
them (workbench.bench._do_bench_pair: ours and _scaled_mm in alternating rounds): is there a config outside the
selector's space that reaches 0.85?

    python benchmarks/archive/tma_fp8_probe.py OUT.json      # an sm_90 GPU, ~30 s
"""
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workbench.bench import _do_bench_pair  # noqa: E402
from workbench.kernels import gemm_tma  # noqa: E402
from workbench.kernels.cases import GEMM_TOKENS as TOKENS, _fp8_inputs, _torch_scaled_mm  # noqa: E402
from workbench.kernels.cases import llama_gemms as _llama_gemms  # noqa: E402
from workbench.kernels.reference import reference_scaled_matmul  # noqa: E402

def cfg(bm, bn, bk, w, s, sub, g=8):
    return dict(KERNEL="tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, EPILOGUE_SUBTILE=sub,
                WARP_SPECIALIZE=False, num_warps=w, num_stages=s)
variants = {"128x128x256 s3 (pick)": cfg(128, 128, 256, 8, 3, 1), "128x128x256 s3 g16": cfg(128, 128, 256, 8, 3, 1, 16),
            "128x128x256 s3 g4": cfg(128, 128, 256, 8, 3, 1, 4), "128x128x256 s3 sub2": cfg(128, 128, 256, 8, 3, 2),
            "256x128x128 s3 sub2": cfg(256, 128, 128, 8, 3, 2), "256x128x128 s4 sub2": cfg(256, 128, 128, 8, 4, 2),
            "128x256x128 s3 sub2": cfg(128, 256, 128, 8, 3, 2), "128x256x128 s4 sub2": cfg(128, 256, 128, 8, 4, 2),
            "128x128x128 s5": cfg(128, 128, 128, 8, 5, 1), "256x128x128 s4 sub2 g16": cfg(256, 128, 128, 8, 4, 2, 16)}
rows = []
started = time.time()
for model in ("llama3-8b", "llama3-70b"):
    for layer, n, k in _llama_gemms(model):
        a, b, sa, sb = _fp8_inputs(TOKENS, n, k)("cuda")
        ref = reference_scaled_matmul(a, b, sa, sb)
        for name, c in variants.items():
            row = dict(model=model, layer=layer, n=n, k=k, variant=name)
            try:
                fn = lambda: gemm_tma.scaled_matmul_tma(a, b, sa, sb, None, c)
                out = fn()
                row["rel_err"] = float((out.double() - ref.to(out.device)).norm() / ref.norm())
                ours, vendor = _do_bench_pair(fn, lambda: _torch_scaled_mm(a, b, sa, sb), rounds=2)
                row.update(ours_ms=ours, vendor_ms=vendor, ratio=vendor / ours)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            rows.append(row)
            print(row, flush=True)
        del a, b, ref
        torch.cuda.empty_cache()
print(f"{time.time() - started:.0f} s")
for name in variants:
    r = [x["ratio"] for x in rows if x["variant"] == name and "ratio" in x]
    print(f"{name}: geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f} over {len(r)}" if r else f"{name}: none")
json.dump(rows, open(sys.argv[1], "w"), indent=1)
