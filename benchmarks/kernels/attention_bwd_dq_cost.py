"""What dQ's fp32 atomics cost the Gluon attention backward (issue 20: its d128 backward ran at ~420 TFLOP/s on
the H200, against FlashAttention-3's published 542 on the H100, whose dQ leaves through TMA's bulk reduce-add, not
per-element atomics from the MMA warpgroups). Timing only: in a process of its own per way,

- ``coalesced``: as shipped (``DQ_COALESCED``: the dQ tile converted, through shared memory, to
  ``attention_gluon_bwd.DQ_ROW_LAYOUT``, 4 adjacent fp32 a thread, 16 threads a row: ``atom.add.v4.f32``, a warp's
  instruction covering 2 whole 256-byte rows);
- ``wgmma``: the atomics from wgmma's accumulator layout, as before (2 adjacent fp32 a thread,
  ``atom.add.v2.f32``, a warp's instruction touching 8 rows, 32 bytes of each): ``dq_coalesced`` patched to False;
- ``store``: a plain ``gl.store`` of the coalesced tile instead of the atomics (racy, wrong dQ: what a write that
  is not read back costs), ``_add_dq`` replaced before anything compiles.

The first run (``benchmarks/results/h200/kernels/dq_coalesced/dq_cost.csv``) was this probe at commit b58c1b7,
before the coalesced layout shipped: its ways were the atomics as then shipped (wgmma's layout), the store, and
``v4`` (the coalesced layout patched in). Each way times ``gluon_attention_backward`` alone (do_bench, alternating
rounds within the process) on the d128 shapes of the broad set, config=None's config (``pinned_backward_config``:
the GQA split included), and checks dQ, dK, dV against SDPA's fp32 backward. Writes ``dq_cost.csv`` and prints it.

    PYTHONPATH=$PWD TRITON_INTERPRET=0 python3 benchmarks/kernels/attention_bwd_dq_cost.py --out DIR
"""

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

HERE = Path(__file__).resolve().parent
WAYS = ("coalesced", "wgmma", "store")
SHAPES = ("a01", "a05", "a07", "a09", "a12", "a13", "a14", "a17")


def _patch(way: str) -> None:
    """Patch ``attention_gluon_bwd`` for ``way`` before anything compiles."""
    from workbench.kernels import attention_gluon_bwd as bwd

    if way == "store":
        bwd._add_dq = _store_dq
    elif way == "wgmma":
        bwd.dq_coalesced = lambda config, head_dim: False


@gluon.jit
def _store_dq(ptrs, dq, rows, seq_len, MASKED: gl.constexpr, DQ_COALESCED: gl.constexpr):
    if DQ_COALESCED:
        dq = gl.convert_layout(dq, ptrs.type.layout)
    if MASKED:
        gl.store(ptrs, dq, mask=gl.expand_dims(rows < seq_len, 1))
    else:
        gl.store(ptrs, dq)


def _check(way: str) -> float:
    """Relative error of dQ, dK, dV against SDPA's math backward in fp32, on a causal GQA shape (2 x 8/2 x 1024)."""
    import torch

    from workbench.kernels import attention_gluon_bwd as bwd
    from workbench.kernels.attention import flash_attention_fwd

    q = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = flash_attention_fwd(q, k, v, causal=True)
    grads = bwd.gluon_attention_backward(do, q, k, v, o, lse, True, None, bwd.pinned_backward_config(q, k, v, True))
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True, enable_gqa=True)
    refs = torch.autograd.grad(out, (qf, kf, vf), do.float())
    return max(float((g.float() - r).norm() / r.norm()) for g, r in zip(grads, refs))


def _inner(way: str, rounds: int) -> None:
    """One way in this process: a JSON line {id: ms} on stdout."""
    import torch

    sys.path.insert(0, str(HERE))
    import broad_shapes

    _patch(way)
    from workbench.kernels import attention_gluon_bwd as bwd
    from workbench.kernels.attention import flash_attention_fwd

    shapes = {s["id"]: s for s in broad_shapes.load_shapes()["attention"]}
    fns, torch_ = {}, torch
    torch_.manual_seed(0)
    for shape_id in SHAPES:
        shape = shapes[shape_id]
        q, k, v, do = broad_shapes.attention_inputs(shape, "cuda")
        o, lse = flash_attention_fwd(q, k, v, causal=shape["causal"])
        config = bwd.pinned_backward_config(q, k, v, shape["causal"])
        fns[shape_id] = (lambda q=q, k=k, v=v, do=do, o=o, lse=lse, causal=shape["causal"], config=config:
                         bwd.gluon_attention_backward(do, q, k, v, o, lse, causal, None, config))
        fns[shape_id]()
    torch.cuda.synchronize()
    times = broad_shapes.Timer(True, rounds=rounds).rounds(fns)
    print(json.dumps({**times, "rel_err": _check(way)}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", choices=WAYS)
    args = parser.parse_args()
    if args.inner:
        _inner(args.inner, args.rounds)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    times = {}
    for way in WAYS:
        result = subprocess.run([sys.executable, __file__, "--inner", way, "--rounds", str(args.rounds)],
                                capture_output=True, text=True, check=False)
        if result.returncode:
            print(f"{way}: failed\n{result.stderr[-3000:]}", flush=True)
            continue
        times[way] = json.loads(result.stdout.strip().splitlines()[-1])
    for way in times:
        print(f"{way}: dQ, dK, dV relative error against SDPA fp32 (2 x 8/2 x 1024 causal) "
              f"{times[way]['rel_err']:.2e}", flush=True)
    rows = [{"id": shape_id, **{f"{way}_ms": f"{times[way][shape_id]:.4f}" for way in times},
             **{f"{way}_over_coalesced": f"{times[way][shape_id] / times['coalesced'][shape_id]:.3f}"
                for way in times if way != "coalesced" and "coalesced" in times}}
            for shape_id in SHAPES]
    with (args.out / "dq_cost.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
