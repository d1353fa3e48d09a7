"""Where the host time of ``flash_attention``'s forward + backward through autograd goes (issue 20), against the
SDPA backends, on the broad set's host-bound shapes (a02, a05) and two device-bound ones (a01, a04).

Per shape, host microseconds per call over bursts of back-to-back calls (no L2 flushes, no syncs inside a burst;
the median of ROUNDS alternating bursts) of:

- ``fwd_bwd``: ``o = f(q, k, v)`` then ``torch.autograd.grad(o, (q, k, v), do)``, for ours, cuDNN and flash
  SDPA; these are also timed as the broad report times them (do_bench medians with its L2 flush);
- ``fwd_grad``: the forward alone with inputs that need a gradient (the autograd node is recorded);
- ``null``: a Python ``autograd.Function`` that launches nothing (its forward and backward allocate their outputs
  only): what the autograd engine and a Python Function cost on this host, whatever the kernels;
- ``fwd_direct`` / ``bwd_direct``: our forward and backward with no autograd (``attention._forward`` /
  ``attention._backward`` on the plan);
- the pieces of ``bwd_direct``: its allocations, and each launch alone.

And, inside ours' fwd_bwd, where the time falls: timestamps at the start and end of our forward body and our
backward body (``_FlashAttention.forward`` / ``_gradients`` wrapped), so a call splits into before forward,
forward, forward to backward (the rest of apply, autograd.grad's set-up, the hand-off to the engine's device
thread), backward, and after backward (the engine's finish and the hand-back). Device time per call (the kernels'
sum under torch.profiler, each kernel's time kept) says whether the shape is host-bound at all.

    python3 benchmarks/kernels/attention_autograd_host_probe.py --out DIR [--tree PATH]   # on the H200, ~1-2 min
    python3 benchmarks/kernels/attention_autograd_host_probe.py --dry-run     # CPU: code paths, tiny shapes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import broad_shapes  # noqa: E402  (inputs, the fwd+bwd wrapper; it puts this checkout first on sys.path)

_TREE = next((sys.argv[i + 1] for i, arg in enumerate(sys.argv[:-1]) if arg == "--tree"), None)
if _TREE is not None:  # --tree: workbench from another checkout (before / after), ahead of this one; the
    sys.path.insert(0, str(Path(_TREE).resolve()))  # modules broad_shapes imported from this one are let go
    for _name in [name for name in sys.modules if name == "workbench" or name.startswith("workbench.")]:
        del sys.modules[_name]

from workbench import benchmarking  # noqa: E402

SHAPES = {"a02": (16, 16, 16, 512, 64, False), "a05": (16, 8, 1, 1024, 128, True),
          "a04": (8, 32, 32, 1024, 64, False), "a01": (16, 32, 32, 512, 128, True)}
"""id: (B, Hq, Hkv, S, D, causal), as in shapes.yaml."""
DRY_SHAPES = {"a02": (1, 2, 2, 32, 16, False), "a05": (1, 4, 1, 32, 16, True)}
CALLS, ROUNDS = 40, 5


def host_times(fns: dict, gpu: bool, calls: int = CALLS, rounds: int = ROUNDS) -> dict:
    """{name: median host us per call} over ``rounds`` alternating bursts of ``calls`` (``broad_shapes.Timer.burst``:
    back to back, no L2 flushes)."""
    timer = broad_shapes.Timer(gpu)
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timer.burst(fn, calls)[0])
    return {name: statistics.median(values) for name, values in samples.items()}


def kernels(fn, gpu: bool, calls: int = 10) -> list[dict]:
    """Each kernel's CUDA time per call under torch.profiler (``benchmarking.profile_kernels``); none on the CPU."""
    return benchmarking.profile_kernels(lambda i: fn(), calls) if gpu else []


class _Stamps:
    """Timestamps of our forward and backward bodies inside fwd_bwd calls (perf_counter_ns)."""

    def __init__(self):
        from workbench.kernels import attention

        self.attention, self.marks = attention, []
        fn_cls = attention._FlashAttention
        self.forward, self.gradients = fn_cls.forward, fn_cls._gradients

    def __enter__(self):
        fn_cls, marks = self.attention._FlashAttention, self.marks
        forward, gradients = self.forward, self.gradients

        def timed_forward(ctx, *args):
            marks.append(("fwd0", time.perf_counter_ns()))
            out = forward(ctx, *args)
            marks.append(("fwd1", time.perf_counter_ns()))
            return out

        def timed_gradients(ctx, do):
            marks.append(("bwd0", time.perf_counter_ns()))
            out = gradients(ctx, do)
            marks.append(("bwd1", time.perf_counter_ns()))
            return out

        fn_cls.forward, fn_cls._gradients = staticmethod(timed_forward), staticmethod(timed_gradients)
        return self

    def __exit__(self, *exc):
        fn_cls = self.attention._FlashAttention
        fn_cls.forward, fn_cls._gradients = staticmethod(self.forward), staticmethod(self.gradients)


def phases(fwd_bwd, args, gpu: bool, calls: int = CALLS) -> dict:
    """Median us per call of each phase of ours' fwd_bwd (see the module docstring)."""
    import torch

    fwd_bwd(*args)
    if gpu:
        torch.cuda.synchronize()
    with _Stamps() as stamps:
        rows = []
        for _ in range(calls):
            stamps.marks.clear()
            t0 = time.perf_counter_ns()
            fwd_bwd(*args)
            t1 = time.perf_counter_ns()
            m = dict(stamps.marks)
            rows.append(dict(before_forward=m["fwd0"] - t0, forward=m["fwd1"] - m["fwd0"],
                             forward_to_backward=m["bwd0"] - m["fwd1"], backward=m["bwd1"] - m["bwd0"],
                             after_backward=t1 - m["bwd1"], total=t1 - t0))
    if gpu:
        torch.cuda.synchronize()
    return {key: statistics.median(r[key] for r in rows) / 1e3 for key in rows[0]}


def _null_function():
    import torch

    class Null(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return torch.empty_like(q)

        @staticmethod
        def backward(ctx, do):
            q, k, v = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    return lambda q, k, v: Null.apply(q, k, v)


def shape_report(shape_id: str, dims: tuple, device: str, gpu: bool) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from workbench.kernels import attention

    b, hq, hkv, s, d, causal = dims
    shape = dict(batch=b, heads_q=hq, heads_kv=hkv, seq=s, head_dim=d)
    q, k, v, do = broad_shapes.attention_inputs(shape, device)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))

    def sdpa(backend):
        def run(q_, k_, v_):
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=causal,
                                                                        enable_gqa=hq != hkv)
        return run

    ours = lambda q_, k_, v_: attention.flash_attention(q_, k_, v_, causal=causal)  # noqa: E731
    impls = {"ours": ours, "null": _null_function()}
    if gpu:
        impls.update(cudnn=sdpa(SDPBackend.CUDNN_ATTENTION), flash=sdpa(SDPBackend.FLASH_ATTENTION))
    fns = {}
    for name, impl in impls.items():
        fns[f"{name} fwd_bwd"] = (lambda f=broad_shapes._fwd_bwd(impl): f(qg, kg, vg, do))
        fns[f"{name} fwd_grad"] = (lambda f=impl: f(qg, kg, vg))
    plan = attention._plan(q, k, v, causal, None, None, None)
    kq, kk, kv = attention._kernel_inputs(plan, q, k, v)
    o, lse = attention._forward(plan, kq, kk, kv)
    fns["ours fwd_direct"] = lambda: attention._forward(plan, kq, kk, kv)
    fns["ours bwd_direct"] = lambda: attention._backward(plan, do, kq, kk, kv, o, lse)
    fns["4 x empty_like"] = lambda: (torch.empty_like(lse), torch.empty_like(q), torch.empty_like(k),
                                     torch.empty_like(v))
    backward = "gluon" if plan.gluon_bwd is not None else "triton"
    if backward == "triton":
        delta, dq, dk, dv = torch.empty_like(lse), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        fns["dq launch"] = lambda: plan.dq(True, kq, kk, kv, o, do, lse, delta, dq)
        fns["dkdv launch"] = lambda: plan.dkdv(True, kq, kk, kv, do, lse, delta, dk, dv)
    errors = {}
    for name, fn in list(fns.items()):  # a backend this torch or this GPU does not run is left out, named
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - recorded, not hidden
            errors[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
            del fns[name]
    host = host_times(fns, gpu, calls=CALLS if gpu else 2, rounds=ROUNDS if gpu else 1)
    timed = {name: fn for name, fn in fns.items() if name.endswith("fwd_bwd") and not name.startswith("null")}
    bench_ms = broad_shapes.Timer(gpu).rounds(timed)  # the broad report's measure: do_bench with its L2 flush
    profiled = {name: kernels(fns[name], gpu) for name in fns if name.endswith("fwd_bwd") or "direct" in name}
    device = {name: sum(k["us"] for k in found) for name, found in profiled.items() if found}
    split = phases(broad_shapes._fwd_bwd(ours), (qg, kg, vg, do), gpu, calls=CALLS if gpu else 2)
    return dict(id=shape_id, dims=dict(batch=b, heads_q=hq, heads_kv=hkv, seq=s, head_dim=d, causal=causal),
                backward=backward, do_bench_ms=bench_ms, host_us=host, device_us=device, kernels=profiled,
                ours_phases_us=split, errors=errors)


def table(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        lines.append(f"\n{r['id']} {r['dims']} backward={r['backward']}")
        for name, us in r["host_us"].items():
            dev = r["device_us"].get(name)
            dev_text = f" | device {dev:8.1f}" if dev is not None else ""
            bound = (" HOST-bound" if us > dev else " device-bound") if dev is not None else ""
            ms = r["do_bench_ms"].get(name)
            bench = f" | do_bench {ms * 1e3:8.1f} us" if ms is not None else ""
            lines.append(f"  {name:18s} host {us:8.1f} us{dev_text}{bound}{bench}")
        lines.append("  ours fwd_bwd phases (us): " + ", ".join(f"{k} {v:.1f}" for k, v in r["ours_phases_us"].items()))
        for name, err in r["errors"].items():
            lines.append(f"  {name}: not run ({err})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for probe.json and probe.txt")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: the code paths only")
    parser.add_argument("--ids", default=",".join(SHAPES), help="comma-separated shape ids")
    parser.add_argument("--tree", type=Path, help="import workbench from this checkout (read before the imports)")
    args = parser.parse_args(argv)
    import torch

    gpu = not args.dry_run and torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    shapes = DRY_SHAPES if args.dry_run else SHAPES
    reports = [shape_report(i, shapes[i], device, gpu) for i in args.ids.split(",") if i in shapes]
    env = {**benchmarking.environment(), "tree": str(Path(benchmarking.__file__).resolve().parents[1]),
           "command": " ".join(sys.argv)}
    text = f"torch {env['torch']}, triton {env.get('triton')}, {env['gpu'] or device}\n" + table(reports)
    print(text, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "probe.json").write_text(json.dumps(dict(environment=env, shapes=reports), indent=1))
        (args.out / "probe.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
