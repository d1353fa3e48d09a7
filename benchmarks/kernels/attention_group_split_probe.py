"""Why a05 (MQA 16 x 1024 causal) ran slower through ``flash_attention`` with the Gluon backward's group split
(broad run of 2026-12-03) than in the variants bench: fwd+bwd through flash_attention's autograd at split 1 and at
split 4 and config=None, the direct backward at both, alternating rounds, and one profiled
iteration of each (device time per kernel). H200: ``python3 benchmarks/kernels/attention_group_split_probe.py``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broad_shapes  # noqa: E402

from workbench.kernels import attention_gluon_bwd as bwd  # noqa: E402
from workbench.kernels.attention import flash_attention, flash_attention_fwd  # noqa: E402


def main():
    torch.manual_seed(0)
    b, hq, hkv, s, d = 16, 8, 1, 1024, 128
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv, hq))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    base = bwd.default_config(d, True)

    def autograd(bwd_config):
        def run():
            o = flash_attention(qg, kg, vg, causal=True, bwd_config=bwd_config)
            return torch.autograd.grad(o, (qg, kg, vg), do)
        return run

    o, lse = flash_attention_fwd(q, k, v, True)

    def direct(split):
        config = base if split == 1 else {**base, "GROUP_SPLIT": split}
        return lambda: bwd.launch_backward(do, q, k, v, o, lse, True, d ** -0.5, config)

    fns = {"autograd config=None": autograd(None), "autograd split1": autograd({"backend": "gluon", **base}),
           "autograd split4": autograd({"backend": "gluon", **base, "GROUP_SPLIT": 4}),
           "direct split1": direct(1), "direct split4": direct(4)}
    for name, fn in fns.items():
        fn()
    torch.cuda.synchronize()
    times = broad_shapes.Timer(True).rounds(fns)
    for name, ms in times.items():
        print(f"{name}: {ms:.4f} ms", flush=True)
    for name, fn in fns.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"--- {name}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))


if __name__ == "__main__":
    main()
