"""Correctness and speed of the Triton fp8 GEMM per operand layout on the local GPU (why the training job's fp8
linear makes both operands K-major).

    PYTHONPATH=. python3 benchmarks/archive/fp8_layouts.py        # prints one line per layout

Layouts as in select_shapes.py: nn (B row-major), nt (B column-major: both operands K-major, the layout of
torch._scaled_mm), tn (A column-major). Rowwise scales, random e4m3 inputs, error against an fp32 matmul of the
dequantized operands; time: triton.testing.do_bench median, the kernel's default (selector) config.
"""

import torch
import triton

from workbench.kernels.dispatch import triton_scaled_matmul as scaled_matmul

torch.manual_seed(0)
m = n = k = 4096
for layout in ("nt", "nn", "tn"):
    a = (torch.randn(k, m, device="cuda").t() if layout[0] == "t" else torch.randn(m, k, device="cuda"))
    b = (torch.randn(n, k, device="cuda").t() if layout[1] == "t" else torch.randn(k, n, device="cuda"))
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    out = scaled_matmul(a8, b8, sa, sb).float()
    ref = (a8.float() * sa) @ (b8.float() * sb)
    error = float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))
    ms = triton.testing.do_bench(lambda: scaled_matmul(a8, b8, sa, sb), return_mode="median")
    print(f"fp8 {layout} {m}x{n}x{k}: relative error {error:.2e}, {ms:.3f} ms, {2 * m * n * k / ms / 1e9:.0f} TFLOP/s",
          flush=True)
