"""The a01 forward (B=16, S=512, 32 heads, d=128, causal) as Nsight Compute profiles it (issue 20): the wired
persistent Gluon config and SDPA's cuDNN backend, each launched WARMUP times and then once more; ncu's kernel filter
picks the last launch of each.

    ncu --clock-control none --kernel-name regex:"attn_fwd_persistent|cudnn|fmha|sdpa" --launch-skip 0 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \\
        --section MemoryWorkloadAnalysis python3 benchmarks/kernels/attention_ncu_target.py > DIR/ncu.txt

(``--clock-control none``: ncu leaves the GPU's clocks as they are.) Results: ``results/h200/kernels/attention_ncu/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

WARMUP = 2


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from workbench.kernels.attention_gluon import PERSISTENT_FORWARD, gluon_attention_forward

    config = PERSISTENT_FORWARD[(128, True)][0][2]
    q, k, v = (torch.randn(16, 32, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(WARMUP + 1):
        gluon_attention_forward(q, k, v, True, config=config)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for _ in range(WARMUP + 1):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
