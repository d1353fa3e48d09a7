"""The fp8 training GEMM (``workbench.train.layers.fp8_matmul``) through the Triton path vs its fp32 emulation, on
activation-like inputs (rows scaled by a log-normal factor), per GEMM of Float8Linear (forward, dgrad, wgrad),
rowwise and per tensor: does the kernel round like the emulation the convergence check compares it with?

    python benchmarks/archive/fp8_path_check.py OUT.json      # needs an NVIDIA GPU (sm_89+)
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workbench.kernels import dispatch  # noqa: E402
from workbench.train.layers import fp8_matmul  # noqa: E402

torch.manual_seed(0)
out = []
T, D, F = 8192, 1024, 4096  # tokens, hidden, ffn of the proof's small model scale
for name, (m, k, n) in {"fwd": (T, D, F), "dgrad": (T, F, D), "wgrad": (F, T, D)}.items():
    a = (torch.randn(m, k, device="cuda") * torch.exp(torch.randn(m, 1, device="cuda"))).to(torch.bfloat16)
    b = (torch.randn(k, n, device="cuda") * 0.02).to(torch.bfloat16)
    exact = a.double() @ b.double()
    for rowwise in (True, False):
        t = fp8_matmul(a, b, rowwise).double()
        e = fp8_matmul(a, b, rowwise, emulate=True).double()
        rel = lambda x, y: float((x - y).norm() / y.norm())
        out.append(dict(gemm=name, rowwise=rowwise, triton_vs_emulated=rel(t, e), triton_vs_exact=rel(t, exact),
                        emulated_vs_exact=rel(e, exact)))
        print(out[-1], flush=True)
pick = dispatch._default_config(*(lambda a8, b8: (a8, b8))(torch.empty(T, D, device="cuda", dtype=torch.float8_e4m3fn),
                            torch.empty(F, D, device="cuda", dtype=torch.float8_e4m3fn).t()), "cuda")
print("selector pick for fwd:", pick)
json.dump(out, open(sys.argv[1], "w"), indent=1)
