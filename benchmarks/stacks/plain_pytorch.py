"""A plain PyTorch training loop, as a user writes it, timed on the local GPU: the `pytorch-eager` and
`pytorch-compile` stacks' ground truth (issue 16).

The model is a Llama-style decoder written the way Hugging Face and torchtitan write it (separate q/k/v/o and
gate/up/down projections, `F.rms_norm`, rotary embeddings in the activation dtype, `F.scaled_dot_product_attention`
with `is_causal`, an untied or tied output head, fp32 logits into `F.cross_entropy`), trained by fused AdamW:

    with torch.autocast("cuda", torch.bfloat16):      # param_dtype fp32; bf16 parameters skip autocast
        loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

`--compile` wraps each block in `torch.compile` (as torchtitan does); `--ac full` wraps each block in
`torch.utils.checkpoint` (non-reentrant). Each configuration runs in its own process (clean peak memory, an
out-of-memory row does not end the sweep) and writes one JSON line: median step time over the timed steps
(host clock around synchronized steps), peak allocated and reserved memory, and CUDA kernel time per kernel
name from a `torch.profiler` pass of two further steps. With `PLAIN_PYTORCH_TRACE_DIR` set, that pass's Kineto
chrome trace is also written there, one gzipped file per row (`workbench calibrate --trace` reads them).

    python benchmarks/stacks/plain_pytorch.py --sweep [main|holdout] --out DIR [--budget-s 540]
    python benchmarks/stacks/plain_pytorch.py --row '{"model": "1b", ...}'        # one row, to stdout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the shared harness, from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workbench.benchmarking import environment as shared_environment  # noqa: E402
from workbench.benchmarking import profile_kernels, time_steps  # noqa: E402

MODELS = {
    # Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): tied embeddings
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True),
    # Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json), 4 of its 32 layers
    "8b-4l": dict(hidden=4096, layers=4, heads=32, kv_heads=8, ffn=14336, vocab=128256, tied=False),
    # a CPU smoke test of this script (PLAIN_PYTORCH_DEVICE=cpu)
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256, tied=True),
}
DEVICE = os.environ.get("PLAIN_PYTORCH_DEVICE", "cuda")


@dataclass(frozen=True)
class Row:
    model: str
    micro_batch: int
    seq_len: int
    param_dtype: str = "fp32"  # fp32 (autocast bf16) or bf16
    compile: bool = False
    ac: str = "none"  # none or full
    steps: int = 10
    warmup: int = 3


def _sweep() -> list[Row]:
    """Eager rows first (cheap), then compiled ones (a compile per shape), most informative first."""
    eager = [Row("1b", mb, seq, "fp32", False, ac) for mb, seq in ((1, 2048), (4, 2048), (2, 4096), (1, 8192), (2, 8192))
             for ac in ("none", "full")]
    eager += [Row("1b", 2, 4096, "bf16", False, "none"), Row("1b", 1, 8192, "bf16", False, "full"),
              Row("8b-4l", 1, 4096, "fp32", False, "none"), Row("8b-4l", 2, 4096, "fp32", False, "full"),
              Row("8b-4l", 1, 8192, "fp32", False, "full"), Row("8b-4l", 1, 4096, "bf16", False, "none")]
    compiled = [Row("1b", 2, 4096, "fp32", True, "none"), Row("8b-4l", 1, 4096, "fp32", True, "none"),
                Row("1b", 2, 4096, "fp32", True, "full"), Row("1b", 1, 8192, "fp32", True, "none"),
                Row("1b", 2, 4096, "bf16", True, "none"), Row("8b-4l", 2, 4096, "fp32", True, "full"),
                Row("1b", 1, 2048, "fp32", True, "none"), Row("1b", 2, 8192, "fp32", True, "full")]
    return eager + compiled


def _holdout() -> list[Row]:
    """Configurations chosen after the stack tables were written, none of them in ``_sweep``: a held-out check."""
    return [Row("1b", 3, 2048, "fp32", False, "none"), Row("1b", 1, 4096, "bf16", False, "full"),
            Row("8b-4l", 2, 2048, "fp32", False, "none"), Row("8b-4l", 1, 2048, "fp32", False, "full"),
            Row("1b", 1, 16384, "fp32", False, "full"), Row("8b-4l", 1, 8192, "bf16", True, "none"),
            Row("1b", 4, 2048, "fp32", True, "full")]


SWEEPS = {"main": _sweep, "holdout": _holdout}


# ----------------------------------------------------------------------------------------------------------------
# the model and the loop (torch imported only in the row process)

def build(row: Row):
    import torch
    import torch.nn.functional as F
    from torch import nn

    spec = MODELS[row.model]
    head_dim = spec["hidden"] // spec["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h, kv = spec["hidden"], spec["kv_heads"] * head_dim
            self.attn_norm = nn.Parameter(torch.ones(h))
            self.wq, self.wk = nn.Linear(h, h, bias=False), nn.Linear(h, kv, bias=False)
            self.wv, self.wo = nn.Linear(h, kv, bias=False), nn.Linear(h, h, bias=False)
            self.ffn_norm = nn.Parameter(torch.ones(h))
            self.w1 = nn.Linear(h, spec["ffn"], bias=False)  # gate
            self.w3 = nn.Linear(h, spec["ffn"], bias=False)  # up
            self.w2 = nn.Linear(spec["ffn"], h, bias=False)  # down

        def forward(self, x, cos, sin):  # x: [B, S, h]
            b, s, h = x.shape
            y = F.rms_norm(x, (h,), self.attn_norm, 1e-5)
            q = self.wq(y).view(b, s, spec["heads"], head_dim).transpose(1, 2)  # [B, H, S, d]
            k = self.wk(y).view(b, s, spec["kv_heads"], head_dim).transpose(1, 2)
            v = self.wv(y).view(b, s, spec["kv_heads"], head_dim).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
            y = F.rms_norm(x, (h,), self.ffn_norm, 1e-5)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    def rope(x, cos, sin):  # x: [B, H, S, d]; cos, sin: [S, d/2]
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(spec["vocab"], spec["hidden"])
            self.blocks = nn.ModuleList(Block() for _ in range(spec["layers"]))
            self.norm = nn.Parameter(torch.ones(spec["hidden"]))
            self.head = nn.Linear(spec["hidden"], spec["vocab"], bias=False)
            if spec["tied"]:
                self.head.weight = self.embed.weight
            inv = 1.0 / 500000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            angles = torch.outer(torch.arange(row.seq_len, dtype=torch.float32), inv)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, tokens):  # tokens: [B, S]
            x = self.embed(tokens)
            for block in self.blocks:
                if row.ac == "full":
                    x = torch.utils.checkpoint.checkpoint(block, x, self.cos, self.sin, use_reentrant=False)
                else:
                    x = block(x, self.cos, self.sin)
            return self.head(F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5))  # [B, S, V]

    dtype = torch.float32 if row.param_dtype == "fp32" else torch.bfloat16
    model = Model().to(device=DEVICE, dtype=dtype)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    if row.compile:
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=DEVICE == "cuda")

    def step(x, y):
        with torch.autocast(DEVICE, torch.bfloat16, enabled=row.param_dtype == "fp32"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    params = sum(p.numel() for p in model.parameters())
    return step, params


def run_row(row: Row) -> dict:
    import torch

    cuda = DEVICE == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    step, params = build(row)
    vocab = MODELS[row.model]["vocab"]
    batches = [torch.randint(0, vocab, (row.micro_batch, row.seq_len + 1), device=DEVICE) for _ in range(4)]
    data = [(b[:, :-1].contiguous(), b[:, 1:].contiguous()) for b in batches]
    timing = time_steps(lambda i: step(*data[i % len(data)]), warmup=row.warmup, repeats=row.steps,
                        synchronize=sync, after_warmup=torch.cuda.reset_peak_memory_stats if cuda else None)
    times, warmup_s = timing.times_s, timing.warmup_s
    losses = [float(loss.detach()) for loss in timing.results]
    peak_alloc, peak_reserved = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()) if cuda else (0, 0)
    kernels = profile_kernels(lambda i: step(*data[i % len(data)]), 2, trace=_trace_path(row)) if cuda else []
    return {**asdict(row), "params": params, "step_time_s": timing.median_s, "step_times_s": times,
            "tokens_per_s": row.micro_batch * row.seq_len / timing.median_s, "warmup_s": warmup_s,
            "peak_allocated_gb": peak_alloc / 1e9, "peak_reserved_gb": peak_reserved / 1e9,
            "loss_first": losses[0], "loss_last": losses[-1], "kernels": kernels}


def _trace_path(row: Row) -> str | None:
    folder = os.environ.get("PLAIN_PYTORCH_TRACE_DIR")
    if not folder:
        return None
    os.makedirs(folder, exist_ok=True)
    name = f"{row.model}-mb{row.micro_batch}-s{row.seq_len}-{row.param_dtype}-{'compile' if row.compile else 'eager'}-{row.ac}"
    return os.path.join(folder, f"{name}.json")


def environment() -> dict:
    """The shared harness's record (``workbench.benchmarking.environment``), triton's version included."""
    return shared_environment(packages=("triton",))


def sweep(out: str, budget_s: float, only: str | None, name: str = "main") -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "environment.json"), "w") as handle:
        json.dump({**environment(), "command": " ".join(sys.argv)}, handle, indent=2)
    rows = [r for r in SWEEPS[name]() if only is None or only in json.dumps(asdict(r))]
    deadline = time.time() + budget_s
    results = os.path.join(out, "plain_pytorch.jsonl" if name == "main" else f"plain_pytorch_{name}.jsonl")
    for row in rows:
        left = deadline - time.time()
        if left < 20:
            record = {**asdict(row), "skipped": "time budget"}
        else:
            try:
                proc = subprocess.run([sys.executable, __file__, "--row", json.dumps(asdict(row))],
                                      capture_output=True, text=True, timeout=left)
                lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
                record = json.loads(lines[-1]) if proc.returncode == 0 and lines else \
                    {**asdict(row), "error": (proc.stderr or proc.stdout)[-600:]}
            except subprocess.TimeoutExpired:
                record = {**asdict(row), "error": "timeout"}
        with open(results, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        brief = (f"{record['step_time_s'] * 1e3:8.1f} ms {record['peak_reserved_gb']:6.1f} GB"
                 if "step_time_s" in record else record.get("skipped") or record["error"].splitlines()[-1][:80])
        print(f"{row.model:6} mb{row.micro_batch} s{row.seq_len:<5} {row.param_dtype} "
              f"{'compile' if row.compile else 'eager  '} ac={row.ac:4} {brief}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", nargs="?", const="main", choices=sorted(SWEEPS), help="run a sweep (default: main)")
    p.add_argument("--row", help="one row as JSON (the sweep's subprocess)")
    p.add_argument("--out", default="plain_pytorch_out")
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument("--only", help="run sweep rows whose JSON contains this text")
    p.add_argument("--list", action="store_true", help="print the sweep's rows")
    args = p.parse_args()
    if args.list:
        for r in SWEEPS[args.sweep or "main"]():
            print(json.dumps(asdict(r)))
    elif args.row:
        print(json.dumps(run_row(Row(**json.loads(args.row)))))
    elif args.sweep:
        sweep(args.out, args.budget_s, args.only, args.sweep)
    else:
        p.error("--sweep, --row or --list")


if __name__ == "__main__":
    main()
