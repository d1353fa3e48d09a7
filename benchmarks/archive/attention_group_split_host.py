"""Where the Gluon attention backward's group split loses its gain through ``flash_attention``'s autograd (issue 20;
session 18's probe, ``attention_group_split_probe.py``: a05 split 4 took 0.747 ms fwd+bwd against 0.552 unsplit
through autograd although its kernel fell 392 -> 295 us). For a05 (MQA 16 x 1024 causal, d 128), per way of
running the backward:

- fwd+bwd through autograd timed by do_bench (alternating rounds);
- host time: 20 calls enqueued back to back, no synchronisation (the queue holds them), perf_counter per call;
- host time inside ``_FlashAttention.backward`` and inside ``attention_gluon_bwd._run`` (wrapped timers);
- the caching allocator's cudaMalloc count and retries over 50 calls (``torch.cuda.memory_stats``);
- one profile sorted by self CPU time.

Ways: split 1 (the default), split 4 as committed (one zeroed [2, ...] fp32 accumulator, one conversion, dK and dV
views of one [2, ...] result), and two rewrites of ``_run``'s split branch patched in here: ``own`` (dK and dV each
their own accumulator and their own result: no views), ``memset`` (the committed layout, zeroed by ``zero_()`` on
an empty buffer). H200: ``python3 benchmarks/archive/attention_group_split_host.py`` at commit 2f61089 (the split
backward's memset and second conversion, which this probes, were folded into its other launches after it).
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))  # broad_shapes
import broad_shapes  # noqa: E402

from workbench.kernels import attention as attn  # noqa: E402
from workbench.kernels import attention_gluon_bwd as bwd  # noqa: E402
from workbench.kernels._launch import KernelLaunch  # noqa: E402

COMMITTED_RUN = bwd._run
TIMES = {"backward": [], "run": []}


def _timed(fn, bucket):
    def wrapper(*args):
        start = time.perf_counter_ns()
        out = fn(*args)
        TIMES[bucket].append(time.perf_counter_ns() - start)
        return out
    return wrapper


_OWN_CONVERTS = {}


def _run_own(plan, do, q, k, v, o, lse):
    """The split branch with dK and dV in their own fp32 accumulators and their own results (no views)."""
    if plan.convert_kv is None:
        return COMMITTED_RUN(plan, do, q, k, v, o, lse)
    delta = torch.empty_like(lse)
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    dk_acc = torch.zeros(k.shape, device=k.device, dtype=torch.float32)
    dv_acc = torch.zeros(v.shape, device=v.device, dtype=torch.float32)
    dq = torch.empty_like(q)
    plan.preprocess(True, o, do, delta, dq_acc)
    # the committed run of this plan built the descriptors (it runs first); later ones take the bases only
    assert plan.tiles.descriptors is not None and plan.rows.descriptors is not None
    q_desc, do_desc, k_desc = bwd.reused_descriptors(plan.tiles, bwd.GluonTensorDescriptor, q, do, k,
                                                     plan.blocks[0], plan.layouts[0])
    v_desc, lse_desc, delta_desc = bwd.reused_descriptors(plan.rows, bwd.GluonTensorDescriptor, v, lse, delta,
                                                          plan.blocks[1], plan.layouts[1])
    plan.kernel(True, q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_acc, dk_acc, dv_acc)
    plan.convert(True, dq_acc, dq)
    n = k.numel()
    convert = _OWN_CONVERTS.get(n)
    if convert is None:
        convert = _OWN_CONVERTS[n] = KernelLaunch(bwd._dq_convert_kernel, ((n + bwd._POST_BLOCK - 1)
                                                                          // bwd._POST_BLOCK,), (n, 1.0),
                                                  dict(BLOCK=bwd._POST_BLOCK))
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    convert(True, dk_acc, dk)
    convert(True, dv_acc, dv)
    return dq, dk, dv


def _run_memset(plan, do, q, k, v, o, lse):
    """The committed split branch with the accumulator zeroed by zero_() on an empty buffer."""
    if plan.convert_kv is None:
        return COMMITTED_RUN(plan, do, q, k, v, o, lse)
    real_zeros = torch.zeros
    torch.zeros = lambda shape, **kw: torch.empty(shape, **kw).zero_()
    try:
        return COMMITTED_RUN(plan, do, q, k, v, o, lse)
    finally:
        torch.zeros = real_zeros


RUNS = {"committed": COMMITTED_RUN, "own": _run_own, "memset": _run_memset}


def main():
    torch.manual_seed(0)
    b, hq, hkv, s, d = 16, 8, 1, 1024, 128
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv, hq))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    base = bwd.default_config(d, True)
    committed_backward = attn._FlashAttention.backward
    attn._FlashAttention.backward = staticmethod(_timed(committed_backward, "backward"))

    def autograd(split, run):
        config = {"backend": "gluon", **base, **({"GROUP_SPLIT": split} if split > 1 else {})}

        def fn():
            bwd._run = _timed(RUNS[run], "run")
            o = attn.flash_attention(qg, kg, vg, causal=True, bwd_config=config)
            return torch.autograd.grad(o, (qg, kg, vg), do)
        return fn

    ways = {"split1": autograd(1, "committed"), "split4 committed": autograd(4, "committed"),
            "split4 own": autograd(4, "own"), "split4 memset": autograd(4, "memset")}
    reference = None
    for name, fn in ways.items():
        grads = fn()
        torch.cuda.synchronize()
        if reference is None:
            reference = grads
        worst = max(float((g.float() - r.float()).abs().max()) for g, r in zip(grads, reference))
        print(f"{name}: max |grad - split1| {worst:.4f}", flush=True)
    times = broad_shapes.Timer(True).rounds(ways)
    print("\nfwd+bwd through autograd, do_bench median of alternating rounds:")
    for name, ms in times.items():
        print(f"  {name}: {ms:.4f} ms", flush=True)
    print("\nhost us per call (20 calls enqueued, no sync) | in backward | in _run | cudaMallocs, retries / 50 calls")
    for name, fn in ways.items():
        for bucket in TIMES.values():
            bucket.clear()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            fn()
        host = (time.perf_counter() - start) / 20 * 1e6
        torch.cuda.synchronize()
        backward, run = (sorted(TIMES[key])[len(TIMES[key]) // 2] / 1e3 for key in ("backward", "run"))
        before = torch.cuda.memory_stats()
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        after = torch.cuda.memory_stats()
        mallocs = after["segment.all.allocated"] - before["segment.all.allocated"]
        retries = after["num_alloc_retries"] - before["num_alloc_retries"]
        print(f"  {name}: {host:.1f} | {backward:.1f} | {run:.1f} | {mallocs}, {retries}", flush=True)
    for name, fn in ways.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"\n--- {name} (5 calls)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50))


if __name__ == "__main__":
    main()
