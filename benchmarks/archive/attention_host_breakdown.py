"""Host time of the Gluon attention calls, piece by piece (issue 20). ``attention_group_split_host.py`` found a05's
(MQA 16 x 1024 causal, d 128) fwd+bwd through ``flash_attention``'s autograd taking ~600 us of host time per call,
~165 us of it in ``attention_gluon_bwd._run``, as much as the GPU time: the loop is host-bound. Here each
segment of the backward's ``_run`` (allocations, preprocessing launch, descriptors, kernel launch, conversions)
and of the forward's, medians over 200 calls (synchronised every 4, so the launch queue stays short), called
directly and through autograd (whose backward runs on the engine's device thread), with and without the group
split; and the launcher's pieces alone: a torch allocation, a TMA descriptor fill, a Triton launch of the
conversion kernel. H200: ``python3 benchmarks/archive/attention_host_breakdown.py`` at commit 2f61089 (its copy of
``_run``'s segments is that commit's: the split's memset and second conversion were folded in after it)."""

import statistics
import time

import torch
import triton

from workbench.kernels import attention as attn
from workbench.kernels import attention_gluon as fwd_mod
from workbench.kernels import attention_gluon_bwd as bwd
from workbench.kernels._common import reused_descriptors

CALLS, SYNC_EVERY = 200, 4
MARKS: dict[str, list] = {}
clock = time.perf_counter_ns


def _record(name: str, stamps: list) -> None:
    row = MARKS.setdefault(name, [])
    row.append([b - a for a, b in zip(stamps, stamps[1:])] + [stamps[-1] - stamps[0]])


BWD_SEGMENTS = ("allocate", "preprocess", "descriptors", "kernel", "convert", "convert kv", "total")


def _bwd_run(plan, do, q, k, v, o, lse, name="bwd"):
    """``attention_gluon_bwd._run`` (aligned contiguous inputs on the current device) with a clock between its
    segments."""
    t = [clock()]
    delta = torch.empty_like(lse)
    dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    if plan.convert_kv is None:
        dk, dv = torch.empty_like(k), torch.empty_like(v)
    else:
        dkv_acc = torch.zeros((2, *k.shape), device=k.device, dtype=torch.float32)
        dk, dv = dkv_acc[0], dkv_acc[1]
    dq = torch.empty_like(q)
    t.append(clock())
    plan.preprocess(True, o, do, delta, dq_acc)
    t.append(clock())
    q_desc, do_desc, k_desc = reused_descriptors(plan.tiles, bwd.GluonTensorDescriptor, q, do, k, plan.blocks[0],
                                                 plan.layouts[0])
    v_desc, lse_desc, delta_desc = reused_descriptors(plan.rows, bwd.GluonTensorDescriptor, v, lse, delta,
                                                      plan.blocks[1], plan.layouts[1])
    t.append(clock())
    plan.kernel(True, q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_acc, dk, dv)
    t.append(clock())
    plan.convert(True, dq_acc, dq)
    t.append(clock())
    if plan.convert_kv is not None:
        dkv = torch.empty((2, *k.shape), device=k.device, dtype=k.dtype)
        plan.convert_kv(True, dkv_acc, dkv)
        dk, dv = dkv[0], dkv[1]
    t.append(clock())
    _record(name, t)
    return dq, dk, dv


FWD_SEGMENTS = ("allocate", "descriptors", "launch", "total")


def _fwd_run(plan, q, k, v):
    """``attention_gluon._run`` (aligned contiguous inputs on the current device) with a clock between segments; the
    O descriptor of the persistent kernel (``O_TMA_STORE``) counts with the descriptors."""
    t = [clock()]
    o = torch.empty_like(q)
    lse = q.new_empty(plan.lse_shape, dtype=torch.float32)
    t.append(clock())
    descriptors = reused_descriptors(plan, fwd_mod.GluonTensorDescriptor, q, k, v, plan.blocks, plan.layouts)
    if plan.o_tma is not None:  # the persistent kernel takes O's descriptor too (q's when O_TMA is off)
        descriptors = (*descriptors, o, lse, *plan.order, fwd_mod._o_descriptor(plan, o) if plan.o_tma
                       else descriptors[0])
    else:
        descriptors = (*descriptors, o, lse)
    t.append(clock())
    plan.launch(True, *descriptors)
    t.append(clock())
    _record("fwd", t)
    return o, lse


def _median_row(name: str, segments: tuple) -> str:
    rows = MARKS.pop(name, [])
    if not rows:
        return f"{name}: no calls"
    cells = [f"{seg} {statistics.median(col) / 1e3:.1f}" for seg, col in zip(segments, zip(*rows))]
    return f"{name} ({len(rows)} calls, us): " + ", ".join(cells)


def _loop(fn):
    for i in range(CALLS):
        fn()
        if i % SYNC_EVERY == SYNC_EVERY - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


def _micro(label: str, fn, calls: int = 400) -> None:
    fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        start = clock()
        fn()
        times.append(clock() - start)
        if i % 16 == 15:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(f"  {label}: median {statistics.median(times) / 1e3:.2f} us", flush=True)


def main():
    torch.manual_seed(0)
    b, hq, hkv, s, d = 16, 8, 1, 1024, 128
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv, hq))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    base = bwd.default_config(d, True)
    o, lse = attn.flash_attention_fwd(q, k, v, True)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")

    committed_bwd, committed_fwd = bwd._run, fwd_mod._run
    for split in (1, 4):
        config = {**base, **({"GROUP_SPLIT": split} if split > 1 else {})}
        bwd.launch_backward(do, q, k, v, o, lse, True, d ** -0.5, config)  # plans, compiles, builds descriptors
        autograd_config = {"backend": "gluon", **config}
        out = attn.flash_attention(qg, kg, vg, causal=True, bwd_config=autograd_config)
        torch.autograd.grad(out, (qg, kg, vg), do)
        torch.cuda.synchronize()
        bwd._run = lambda *args: _bwd_run(*args, name=f"direct split{split}")
        _loop(lambda: bwd.launch_backward(do, q, k, v, o, lse, True, d ** -0.5, config))
        print(_median_row(f"direct split{split}", BWD_SEGMENTS), flush=True)
        bwd._run = lambda *args: _bwd_run(*args, name=f"autograd split{split}")
        fwd_mod._run = _fwd_run

        def step():
            start = clock()
            out = attn.flash_attention(qg, kg, vg, causal=True, bwd_config=autograd_config)
            mid = clock()
            torch.autograd.grad(out, (qg, kg, vg), do)
            _record("step", [start, mid, clock()])
        _loop(step)
        print(_median_row(f"autograd split{split}", BWD_SEGMENTS), flush=True)
        print(_median_row("fwd", FWD_SEGMENTS), flush=True)
        print(_median_row("step", ("flash_attention (fwd)", "autograd.grad (bwd)", "total")), flush=True)
        bwd._run, fwd_mod._run = committed_bwd, committed_fwd

    print("pieces:")
    _micro("torch.empty_like(q)", lambda: torch.empty_like(q))
    _micro("torch.empty(q.shape, fp32)", lambda: torch.empty(q.shape, device=q.device, dtype=torch.float32))
    _micro("torch.zeros((2, *k.shape), fp32)", lambda: torch.zeros((2, *k.shape), device=k.device,
                                                                     dtype=torch.float32))
    _micro("dkv_acc[0]", lambda acc=torch.zeros((2, *k.shape), device=k.device): acc[0])
    plan = next((p for p in bwd._PLANS.values() if p.convert_kv is None and p.tiles.descriptors is not None), None)
    if plan is not None:
        delta = torch.empty_like(lse)
        _micro("3 reused descriptors", lambda: reused_descriptors(plan.tiles, bwd.GluonTensorDescriptor, q, do, k,
                                                                 plan.blocks[0], plan.layouts[0]))
        dq_acc, dq = torch.empty(q.shape, device=q.device), torch.empty_like(q)
        _micro("conversion launch (KernelLaunch, direct)", lambda: plan.convert(True, dq_acc, dq))
        _micro("conversion launch (JIT path)", lambda: plan.convert(False, dq_acc, dq))
        _micro("preprocess launch (KernelLaunch, direct)", lambda: plan.preprocess(True, o, do, delta, dq_acc))
        descs = reused_descriptors(plan.tiles, bwd.GluonTensorDescriptor, q, do, k, plan.blocks[0], plan.layouts[0])
        descs2 = reused_descriptors(plan.rows, bwd.GluonTensorDescriptor, v, lse, delta, plan.blocks[1],
                                    plan.layouts[1])
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        args = (descs[0], descs[2], descs2[0], descs[1], descs2[1], descs2[2], dq_acc, dk, dv)
        _micro("backward kernel launch (KernelLaunch, direct; GPU-bound queue)", lambda: plan.kernel(True, *args),
               calls=64)
    else:
        print("  (no split-1 plan with descriptors: launcher pieces skipped)")


if __name__ == "__main__":
    main()
