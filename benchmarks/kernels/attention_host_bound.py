"""Is ``flash_attention`` host-bound on the broad set's smallest attention shapes (issue 20)? For a01 (MHA d128
causal 16 x 512) forward and fwd+bwd, and a05 (MQA d128 causal 16 x 1024) fwd+bwd, ours against cuDNN SDPA:

- the broad run's measure (do_bench median with its L2 flush, alternating rounds: ``broad_shapes.Timer``);
- host time per call over 30 calls enqueued back to back (``Timer.burst``: the host cost a training loop pays);
- device time per call: the sum of the kernels' CUDA time under torch.profiler (what the GPU itself needs).

A call is host-bound where its host time is above its device time: then no kernel change moves its figure. Also
which of the Gluon plans' launches call the compiled kernel directly (``KernelLaunch.handle``) and the scratch
each compiled kernel asks its launcher to allocate per launch.
H200: ``python3 benchmarks/kernels/attention_host_bound.py``."""

import sys
from pathlib import Path

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broad_shapes  # noqa: E402

from workbench.kernels import attention_gluon as fwd_mod  # noqa: E402
from workbench.kernels import attention_gluon_bwd as bwd  # noqa: E402
from workbench.kernels import attention  # noqa: E402
from workbench.kernels.attention import flash_attention  # noqa: E402

SHAPES = {"a01": (16, 32, 32, 512, 128), "a05": (16, 8, 1, 1024, 128)}  # B, Hq, Hkv, S, d; causal


def _device_us(fn, calls: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / calls


def _cases():
    for shape_id, (b, hq, hkv, s, d) in SHAPES.items():
        q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv, hq))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

        def cudnn(q_, k_, v_):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=True,
                                                                        enable_gqa=hq != hkv)

        ours = lambda q_, k_, v_: flash_attention(q_, k_, v_, causal=True)  # noqa: E731
        passes = (("fwd", (q, k, v)),) if shape_id == "a01" else ()
        for pass_, args in passes + (("fwd_bwd", (qg, kg, vg, do)),):
            fns = {name: (lambda f=(fn if pass_ == "fwd" else broad_shapes._fwd_bwd(fn)): f(*args))
                   for name, fn in (("ours", ours), ("cudnn", cudnn))}
            yield shape_id, pass_, fns


def main():
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    timer = broad_shapes.Timer(True)
    print("case: do_bench ms | host us per call (30 back to back) | device us per call (kernels' sum)")
    for shape_id, pass_, fns in _cases():
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        times = timer.rounds(fns)
        for name, fn in fns.items():
            host, burst_gpu = timer.burst(fn, 30)
            device = _device_us(fn)
            bound = "HOST-bound" if host > device else "device-bound"
            print(f"{shape_id} {pass_} {name}: {times[name]:.4f} ms | {host:.1f} us | {device:.1f} us "
                  f"(burst wall {burst_gpu:.1f} us; {bound})", flush=True)
    print("\nGluon launches called directly (handle kept) and per-launch scratch:")
    forward_plans, backward_plans = attention.gluon_plans()  # flash_attention's plans hold the Gluon ones
    for label, cache, fields in (("forward", forward_plans, ("launch",)),
                                 ("backward", backward_plans, ("preprocess", "kernel", "convert"))):
        for plan in cache:
            print(f"  {label}: " + ", ".join(f"{f} {'direct' if getattr(plan, f).handle else 'JIT'}"
                                               for f in fields))
    for name, kernel in (("forward persistent", fwd_mod._persistent_kernel()), ("forward", fwd_mod._attn_fwd_kernel),
                         ("backward", bwd._attn_bwd_kernel), ("preprocess", bwd._bwd_preprocess_kernel)):
        try:
            for cache in kernel.device_caches.values():
                for compiled in cache[0].values():
                    meta = compiled.metadata
                    print(f"  {name}: global_scratch {meta.global_scratch_size} B, profile_scratch "
                          f"{getattr(meta, 'profile_scratch_size', 'n/a')} B, tensordesc_meta "
                          f"{len(getattr(meta, 'tensordesc_meta', None) or [])}")
        except Exception as exc:  # noqa: BLE001 - another Triton's cache layout: say so
            print(f"  {name}: compiled metadata not read ({type(exc).__name__}: {exc})")


if __name__ == "__main__":
    main()
