"""The Gluon attention backward's GQA group split with its accumulators folded into the backward's own launches
(issue 20). Until this commit a split backward zeroed its fp32 dK/dV accumulator with a memset and converted it
with a second kernel: 5 launches against the unsplit 3, and a05's split took 0.468, 0.468 and 0.578 ms over three
broad runs (cuDNN 0.399), as the host kept ahead or not. Now the preprocessing zeroes it with dQ's and the
conversion converts it with dQ's: 3 launches either way.

For each d128 GQA shape of the broad set (the Gluon backward's), fit ids and test ids of
``attention_candidates_split.json`` marked: fwd+bwd through ``flash_attention``'s autograd with the backward at
every GQA split from 1 to 8 that divides the group, and cuDNN's SDPA, in the same alternating do_bench rounds; the
gradients of each split against split 1; the host and GPU time per call of 20 calls back to back (no L2 flush);
config=None's split (``group_split``). Writes ``split_fold.csv`` and prints it.

    PYTHONPATH=$PWD TRITON_INTERPRET=0 python3 benchmarks/kernels/attention_split_fold.py --out DIR
"""

import argparse
import csv
import json
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import broad_shapes  # noqa: E402

from workbench.kernels import attention as attn  # noqa: E402
from workbench.kernels import attention_gluon_bwd as bwd  # noqa: E402
from workbench.kernels._common import sm_count  # noqa: E402

SPLITS = (1, 2, 4, 8)
FIELDS = ("id", "set", "batch", "seq", "heads_q", "heads_kv", "causal", "programs", "pick", "split", "ms",
          "cudnn_ms", "cudnn_over_ours", "host_us", "gpu_us", "max_grad_diff_vs_split1")


def _shapes() -> list[tuple[dict, str]]:
    split = json.loads((HERE / "attention_candidates_split.json").read_text())
    sets = {**{i: "fit" for i in split["fit"]}, **{i: "test" for i in split["test"]}}
    return [(shape, sets[shape["id"]]) for shape in broad_shapes.load_shapes()["attention"]
            if shape["head_dim"] == 128 and shape["heads_q"] > shape["heads_kv"]]


def _ours(q, k, v, do, causal, config):
    def run():
        o = attn.flash_attention(q, k, v, causal=causal, bwd_config=config)
        return torch.autograd.grad(o, (q, k, v), do)
    return run


def _cudnn(q, k, v, do, causal):
    """cuDNN's SDPA fwd+bwd, with GQA where it takes it, else keys and values repeated per query head (as
    ``broad_shapes.attention_cases``)."""
    for expand in (1, q.shape[1] // k.shape[1]):
        fn = broad_shapes._under(SDPBackend.CUDNN_ATTENTION,
                                 broad_shapes._fwd_bwd(broad_shapes._sdpa(causal, True, expand)), sdpa_kernel)
        try:
            fn(q, k, v, do)
            return lambda: fn(q, k, v, do)[1:]
        except RuntimeError:
            torch.cuda.synchronize()
    raise RuntimeError("cuDNN's SDPA refused the shape")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    timer = broad_shapes.Timer(True, rounds=args.rounds)
    rows = []
    for shape, set_ in _shapes():
        b, s, hq, hkv, causal = (shape[key] for key in ("batch", "seq", "heads_q", "heads_kv", "causal"))
        q, k, v, do = broad_shapes.attention_inputs(shape, "cuda")
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        base = bwd.default_config(128, causal)
        programs = -(-s // base["BLOCK_N"]) * b * hkv
        pick = bwd.group_split(programs, hq // hkv, sm_count(0))
        fns = {f"split{n}": _ours(q, k, v, do, causal, {"backend": "gluon", **base,
                                                         **({"GROUP_SPLIT": n} if n > 1 else {})})
               for n in SPLITS if (hq // hkv) % n == 0}
        fns["cudnn"] = _cudnn(q, k, v, do, causal)
        reference = [g.float() for g in fns["split1"]()]
        diffs = {name: max(float((g.float() - r).abs().max()) for g, r in zip(fn(), reference))
                 for name, fn in fns.items()}
        torch.cuda.synchronize()
        times = timer.rounds(fns)
        for name in fns:
            if name == "cudnn":
                continue
            host, gpu = timer.burst(fns[name])
            rows.append(dict(id=shape["id"], set=set_, batch=b, seq=s, heads_q=hq, heads_kv=hkv, causal=int(causal),
                             programs=programs, pick=pick, split=int(name[5:]), ms=f"{times[name]:.4f}",
                             cudnn_ms=f"{times['cudnn']:.4f}", cudnn_over_ours=f"{times['cudnn'] / times[name]:.3f}",
                             host_us=f"{host:.1f}", gpu_us=f"{gpu:.1f}",
                             max_grad_diff_vs_split1=f"{diffs[name]:.4f}"))
            print(" ".join(f"{key}={rows[-1][key]}" for key in FIELDS), flush=True)
        del q, k, v, do, fns
        torch.cuda.empty_cache()
    with (args.out / "split_fold.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
