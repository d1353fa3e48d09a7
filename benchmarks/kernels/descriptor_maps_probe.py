"""What encoding each host TMA descriptor once per base address (``_launch.DescriptorMaps``) saves (issue 20).

Every kernel with host descriptors, called through its wrapper with a fixed config, with the maps off (the
compiled launcher encodes each descriptor on every launch, as before) and on, in alternating phases (off, on,
off, on: this host's times drift by tens of microseconds between runs, so each phase is measured twice):

- host us per call over 30 calls back to back (``broad_shapes.Timer.burst``), and the GPU wall time of that burst;
- the broad run's measure (do_bench median with its L2 flush), for attention fwd+bwd against cuDNN SDPA.

A phase switch clears the plan caches, so every launch keeps its launcher anew. Shapes: the broad set's a05 (MQA
d128 causal 16 x 1024) and a01 (MHA d128 causal 16 x 512), a 512-cube GEMM (host-bound on every backend).
H200: ``python3 benchmarks/kernels/descriptor_maps_probe.py``."""

import statistics
import sys
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broad_shapes  # noqa: E402

from workbench.kernels import _launch, dispatch, gemm_gluon, gemm_tma  # noqa: E402
from workbench.kernels import attention  # noqa: E402
from workbench.kernels import attention_gluon_bwd as bwd  # noqa: E402
from workbench.kernels._common import clear_plan_caches  # noqa: E402
from workbench.kernels.attention import flash_attention, flash_attention_bwd, flash_attention_fwd  # noqa: E402

ATTENTION = {"a05": (16, 8, 1, 1024, 128), "a01": (16, 32, 32, 512, 128)}  # B, Hq, Hkv, S, d; causal
ENCODING_LAUNCHER = _launch.descriptor_launcher


def _attention_cases(shape_id, b, hq, hkv, s, d):
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv, hq))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o, lse = flash_attention_fwd(q, k, v, causal=True)

    def cudnn(q_, k_, v_):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=True, enable_gqa=hq != hkv)

    ours = broad_shapes._fwd_bwd(lambda q_, k_, v_: flash_attention(q_, k_, v_, causal=True))
    vendor = broad_shapes._fwd_bwd(cudnn)
    cases = {f"{shape_id} fwd (no grad)": lambda: _no_grad(flash_attention, q, k, v),
             f"{shape_id} fwd_bwd autograd": lambda: ours(qg, kg, vg, do),
             f"{shape_id} fwd_bwd cuDNN": lambda: vendor(qg, kg, vg, do),
             f"{shape_id} bwd direct": lambda: flash_attention_bwd(do, q, k, v, o, lse, causal=True)}
    return cases


def _no_grad(fn, *args):
    with torch.no_grad():
        return fn(*args, causal=True)


def _gemm_cases(n=512):
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(n, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    tma_bf16 = next(c for c in gemm_tma.config_space("bf16") if not c["WARP_SPECIALIZE"])
    gluon_fp8 = gemm_gluon.config_space("exact")[0]
    return {f"gemm_tma bf16 {n}^3": lambda: dispatch.triton_matmul(a, b, config=tma_bf16),
            f"gemm_gluon fp8 {n}^3": lambda: dispatch.triton_scaled_matmul(a8, b8, sa, sb, config=gluon_fp8)}


def _way(handle) -> str:
    """How a KernelLaunch calls its kernel: the JIT path, directly, or directly with its maps kept."""
    return "JIT" if handle is None else "direct, maps" if handle[-1] is not None else "direct"


def _phase(maps_on: bool):
    _launch.descriptor_launcher = ENCODING_LAUNCHER if maps_on else (lambda run, pointer_args: (run, None))
    clear_plan_caches()


def main():
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    timer = broad_shapes.Timer(True)
    cases = {}
    for shape_id, shape in ATTENTION.items():
        cases.update(_attention_cases(shape_id, *shape))
    cases.update(_gemm_cases())
    host = {(name, on): [] for name in cases for on in (False, True)}
    bench = {(name, on): [] for name in cases if "fwd_bwd" in name for on in (False, True)}
    for on in (False, True, False, True):
        _phase(on)
        for name, fn in cases.items():
            fn()
            torch.cuda.synchronize()
            host[name, on].append(timer.burst(fn, 30))
            if (name, on) in bench:
                bench[name, on].append(timer.rounds({name: fn})[name])
    print("launches with their descriptors encoded once (DescriptorMaps kept):")
    forward_plans, backward_plans = attention.gluon_plans()  # flash_attention's plans hold the Gluon ones
    for label, cache, fields in (("gemm_tma", list(gemm_tma._MATMUL_PLANS.values()), ("launch",)),
                                 ("gemm_gluon", list(gemm_gluon._PLANS.values()), ("launch",)),
                                 ("attention forward", forward_plans, ("launch",)),
                                 ("attention backward", backward_plans + list(bwd._PLANS.values()),  # direct: bwd's
                                  ("preprocess", "kernel", "convert"))):
        for plan in cache:
            ways = {field: _way(getattr(plan, field).handle) for field in fields}
            print(f"  {label}: " + ", ".join(f"{field} {way}" for field, way in ways.items()))
    print("\ncase | host us per call, maps off (two phases) | on | GPU wall us of the burst off | on"
          " | do_bench ms off | on")
    for name in cases:
        off, on = host[name, False], host[name, True]
        line = (f"{name} | {' '.join(f'{h:.1f}' for h, _ in off)} | {' '.join(f'{h:.1f}' for h, _ in on)} | "
                f"{statistics.median(g for _, g in off):.1f} | {statistics.median(g for _, g in on):.1f}")
        if (name, False) in bench:
            line += (f" | {statistics.median(bench[name, False]):.4f} | {statistics.median(bench[name, True]):.4f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
