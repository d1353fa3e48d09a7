"""The Gluon attention backward's host time per call (issue 20), on the CPU: ``gluon_attention_backward`` and
``launch_backward`` (attention.py's path) on CPU tensors with their three kernels stubbed and an H200 simulated
(``host_overhead._fake_h200``; ``Tensor.is_cuda`` patched true in this process), thread CPU time per call, least of
ROUNDS rounds of CALLS calls: the cached call, and one that re-plans (checks, descriptors from scratch) each time.
``--tree`` imports ``workbench`` from another checkout (the tree before the plan cache) for before/after.

    python3 benchmarks/kernels/attention_gluon_bwd_host_bench.py --out DIR [--tree PATH]     # no GPU: ~10 s

Writes DIR/host_cpu.md and DIR/host_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ROUNDS, CALLS = 7, 1000


def host_times(args) -> int:
    """Thread CPU time per call of the backward wrapper, kernels stubbed, an H200 simulated (module doc)."""
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, str(args.tree or ROOT))
    sys.path.insert(0, str(HERE))
    import host_overhead
    import torch

    from workbench.kernels import _common, _launch, attention_gluon, attention_gluon_bwd, checks

    host_overhead._fake_h200({"_common": _common, "checks": checks, "attention_gluon": attention_gluon,
                              "attention_gluon_bwd": attention_gluon_bwd, "_launch": _launch})
    torch.Tensor.is_cuda = property(lambda self: True)  # the wrapper's device check, on CPU tensors
    torch.cuda.current_device = lambda: None  # a CPU tensor's device index
    attention_gluon.capability = lambda index: (9, 0)  # check_gluon_device's, imported by the backward
    for name in ("_bwd_preprocess_kernel", "_attn_bwd_kernel", "_convert_kernel"):
        setattr(attention_gluon_bwd, name, host_overhead._Launches(getattr(attention_gluon_bwd, name), [], stub=True))
    shape = dict(batch=2, seq=1024, heads_q=8, heads_kv=2, head_dim=128)  # GQA 4, d128: CPU-sized data
    q = torch.randn(shape["batch"], shape["heads_q"], shape["seq"], shape["head_dim"], dtype=torch.bfloat16)
    k = torch.randn(shape["batch"], shape["heads_kv"], shape["seq"], shape["head_dim"], dtype=torch.bfloat16)
    v, do, o = torch.randn_like(k), torch.randn_like(q), torch.randn_like(q)
    lse = torch.randn(q.shape[:3], dtype=torch.float32)
    config = attention_gluon_bwd.default_config(128, True)
    bwd = attention_gluon_bwd.gluon_attention_backward
    cases = {"checked call (gluon_attention_backward)": lambda: bwd(do, q, k, v, o, lse, True, None, config),
             "after attention.py's checks (launch_backward)": lambda: attention_gluon_bwd.launch_backward(
                 do, q, k, v, o, lse, True, 128 ** -0.5, config)}
    if hasattr(attention_gluon_bwd, "_plan"):
        cases["re-planned each call (_run(_plan(...)))"] = lambda: attention_gluon_bwd._run(
            attention_gluon_bwd._plan(q, k, v, do, o, True, 128 ** -0.5, config), do, q, k, v, o, lse)
    results = {}
    for name, fn in cases.items():
        fn()
        best = float("inf")
        for _ in range(args.rounds):
            start = time.thread_time_ns()
            for _ in range(args.calls):
                fn()
            best = min(best, (time.thread_time_ns() - start) / args.calls / 1e3)
        results[name] = round(best, 2)
        print(f"{name}: {best:.2f} us", flush=True)
    env = dict(tree=str(Path(attention_gluon_bwd.__file__).resolve().parents[2]), torch=torch.__version__,
               cpu_count=os.cpu_count(), date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               command=" ".join(sys.argv), rounds=args.rounds, calls=args.calls, shape=shape, config=config)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_cpu.json").write_text(json.dumps(dict(env=env, us_per_call=results), indent=1) + "\n")
    lines = ["# Gluon attention backward: host CPU time per call (stubbed launches, simulated H200)", "",
             f"`{env['command']}` ({env['date_utc']}, tree {env['tree']}); thread CPU time, least of {args.rounds} "
             f"rounds of {args.calls} calls; the three launches are no-op stubs (Triton's launcher and the JIT's "
             "argument binding and specialization are not in these figures: they add to the JIT path, which the "
             "plan cache's direct launches skip).", "", "| case | us per call |", "|---|---|"]
    lines += [f"| {n} | {t} |" for n, t in results.items()]
    (args.out / "host_cpu.md").write_text("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--tree", type=Path, default=None, help="import workbench from this checkout")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds (the least is kept)")
    parser.add_argument("--calls", type=int, default=CALLS, help="calls a round")
    return host_times(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
