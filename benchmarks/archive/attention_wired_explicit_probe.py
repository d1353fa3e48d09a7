"""Does config=None's forward run faster than the same config passed explicitly (issue 20)? In the option sweeps
(``attention_option_bench.py``) the wired forward ran 5-10% faster than its own config given to
``gluon_attention_forward`` on the 1 ms shapes. This times a07 (B=8, S=2048, 64/8 heads, d=128, causal) and a01 both
ways, with the config copied and with the scale given, in do_bench rounds of rotated order (L2 flushed before each
call) and as 20 back-to-back calls between two CUDA events, and prints each plan's launch.

    python3 benchmarks/archive/attention_wired_explicit_probe.py      # H200: ~20 s

Result, 2026-12-04: ``results/h200/kernels/attention_carry/wired_explicit_probe.txt``.
"""

import json
import statistics

import torch
from triton.testing import do_bench

from workbench.kernels import attention
from workbench.kernels.attention_gluon import _PLANS, gluon_attention_forward, pinned_forward_config

SHAPES = [(8, 64, 8, 2048), (16, 32, 32, 512)]  # (batch, heads_q, heads_kv, seq): a07, a01
ROUNDS = 6


def main() -> None:
    for b, hq, hkv, s in SHAPES:
        q = torch.randn(b, hq, s, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, hkv, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        config = pinned_forward_config(128, True, s)
        fns = {"wired": lambda: attention.flash_attention_fwd(q, k, v, True)[0],
               "explicit": lambda: gluon_attention_forward(q, k, v, True, config=config)[0],
               "explicit_copy": lambda: gluon_attention_forward(q, k, v, True, config=dict(config))[0],
               "explicit_scale": lambda: gluon_attention_forward(q, k, v, True, scale=128 ** -0.5, config=config)[0]}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        print("shape", (b, hq, hkv, s), "plans", len(_PLANS))
        for plan in list(_PLANS.values())[-4:]:
            print("  plan", plan.launch.grid, plan.launch.scalars, sorted(plan.launch.kwargs.items()), plan.o_tma,
                  plan.launch.handle is not None)
        names, flushed = list(fns), {name: [] for name in fns}
        for round_ in range(ROUNDS):
            for i in range(len(names)):
                name = names[(i + round_) % len(names)]
                flushed[name].append(do_bench(fns[name], warmup=5, rep=25, return_mode="median"))
        back_to_back = {}
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn()
            torch.cuda.synchronize()
            start.record()
            for _ in range(20):
                fn()
            end.record()
            torch.cuda.synchronize()
            back_to_back[name] = start.elapsed_time(end) / 20
        print(json.dumps({name: {"do_bench_ms": round(statistics.median(flushed[name]), 4),
                                 "back_to_back_ms": round(back_to_back[name], 4)} for name in fns}))


if __name__ == "__main__":
    main()
