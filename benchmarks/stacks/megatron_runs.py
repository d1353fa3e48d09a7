"""Megatron-Core's own training step, timed on the local GPU: the `megatron-local` stack's ground truth (issue 16).

TransformerEngine's torch extension ships as an sdist only and cannot be built for the lent H200 (torch 2.11, no
package index), so this measures Megatron-Core 0.19 with its **local layer spec** (`get_gpt_layer_local_spec`:
modules in Megatron-Core itself, no TE, no Apex), stated as such in every row (`"spec": "local"`):

- `GPTModel` (RMSNorm = `torch.nn.RMSNorm` through `WrappedTorchNorm`, RoPE base 500000 unfused, GQA, SwiGLU as
  `glu` = chunk + `F.silu` * up, no biases, dropout 0), sequence-first `[s, b, h]`, one fused QKV
  `ColumnParallelLinear` and one fused gate+up `linear_fc1`;
- core attention = `megatron.core.transformer.dot_product_attention.DotProductAttention`: **unfused** (GQA
  `repeat_interleave`, `baddbmm` QK^T into the global memory buffer, fp32 masked `torch.softmax`, bf16 probs, `bmm`
  with V), `masked_softmax_fusion` False (its CUDA kernels come from Apex/TE);
- loss = `tensor_parallel.vocab_parallel_cross_entropy` (fp32 logits, in-place max/sub/exp/sum/div);
- bf16 parameters (`model.bfloat16()`, as `Float16Module` does), `megatron.core.distributed.DistributedDataParallel`
  with its contiguous grad buffer (`grad_reduce_in_fp32`, Megatron-LM's default under `--bf16`), and Megatron's
  distributed optimizer (`get_megatron_optimizer`, `use_distributed_optimizer=True`; fp32 main parameters; without
  TE or Apex its Adam is `torch.optim.AdamW`, foreach) -- if that fails at dp = 1 the row records the fallback;
- recompute: `none`, `selective` (Megatron's: `recompute_modules=["core_attn"]`, core attention only), `full`
  (`recompute_method="uniform"`, `recompute_num_layers=1`).

Single GPU: `torch.distributed` with world size 1 from environment variables, `initialize_model_parallel(1, 1)`,
`model_parallel_cuda_manual_seed`. Random tokens. Each row runs in its own process (clean peak memory; an
out-of-memory row is recorded and the sweep goes on) and writes one JSON line: median step time (synchronized
steps after warmup), `max_memory_allocated` / `max_memory_reserved`, versions, GPU and driver. With `--trace-row
LABEL` (default: the first main row) that row also writes a gzipped Kineto trace of two profiled steps.

    python benchmarks/stacks/megatron_runs.py --sweep main --out DIR --budget-s 170
    python benchmarks/stacks/megatron_runs.py --sweep holdout --out DIR --budget-s 90
    python benchmarks/stacks/megatron_runs.py --row '{"model": "1b", "micro_batch": 1, "seq_len": 2048}'
    MEGATRON_RUNS_DEVICE=cpu python benchmarks/stacks/megatron_runs.py --check     # builds on CPU (no step)

The split between fit and test rows is `benchmarks/stacks/megatron_split.json`, written before any run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the shared harness, from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workbench.benchmarking import environment as shared_environment  # noqa: E402
from workbench.benchmarking import measured_labels  # noqa: E402
from workbench.benchmarking import profile_kernels, time_steps  # noqa: E402

MODELS = {
    # Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): tied embeddings
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True),
    # Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json), 4 of its 32 layers
    "8b-4l": dict(hidden=4096, layers=4, heads=32, kv_heads=8, ffn=14336, vocab=128256, tied=False),
    # a CPU check of this script's model building (--check)
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256, tied=True),
}
DEVICE = os.environ.get("MEGATRON_RUNS_DEVICE", "cuda")
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Row:
    model: str
    micro_batch: int
    seq_len: int
    ac: str = "none"  # none, selective (Megatron's: core attention), full (uniform, 1 layer)
    steps: int = 6
    warmup: int = 2

    @property
    def label(self) -> str:
        return f"megatron-local {self.model} mb{self.micro_batch} s{self.seq_len} ac={self.ac}"


def _main() -> list[Row]:
    """1B at three sequence lengths and micro-batches, every recompute mode; 8B cut to 4 layers. The unfused
    attention saves 6 B per score (fp32 softmax output, bf16 probs): 1B at 8k runs only with recompute."""
    return [Row("1b", 1, 2048, "none"), Row("1b", 1, 2048, "selective"), Row("1b", 1, 2048, "full"),
            Row("1b", 2, 2048, "none"), Row("1b", 1, 4096, "none"), Row("1b", 1, 4096, "selective"),
            Row("1b", 1, 8192, "selective"), Row("1b", 1, 8192, "full"),
            Row("8b-4l", 1, 4096, "none"), Row("8b-4l", 1, 4096, "full")]


def _holdout() -> list[Row]:
    """Configurations not in the main sweep, chosen before any run: a held-out check, never fitted."""
    return [Row("1b", 4, 2048, "full"), Row("1b", 2, 4096, "selective"), Row("8b-4l", 2, 2048, "selective"),
            Row("8b-4l", 1, 8192, "full")]


SWEEPS = {"main": _main, "holdout": _holdout}


# ----------------------------------------------------------------------------------------------------------------
# the model, the optimizer and the step (torch and megatron imported only in the row process)

def init_single_process() -> None:
    """torch.distributed with world size 1 and Megatron's model-parallel state (tp = pp = 1)."""
    import torch
    from megatron.core import parallel_state, tensor_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    if DEVICE == "cuda":
        torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if DEVICE == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(1234)


def transformer_config(row: Row):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    spec = MODELS[row.model]
    recompute = {"none": {},
                 "selective": dict(recompute_granularity="selective", recompute_modules=["core_attn"]),
                 "full": dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)}
    return TransformerConfig(
        num_layers=spec["layers"], hidden_size=spec["hidden"], num_attention_heads=spec["heads"],
        num_query_groups=spec["kv_heads"], ffn_hidden_size=spec["ffn"], kv_channels=spec["hidden"] // spec["heads"],
        normalization="RMSNorm", layernorm_epsilon=1e-5, gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, add_qkv_bias=False, hidden_dropout=0.0, attention_dropout=0.0,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
        use_cpu_initialization=DEVICE != "cuda", init_method_std=0.02, **recompute[row.ac])


def build_model(row: Row):
    """GPTModel with the local spec in bf16 (``model.bfloat16()``, as Float16Module does)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = MODELS[row.model]
    config = transformer_config(row)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                     vocab_size=spec["vocab"], max_sequence_length=row.seq_len, pre_process=True,
                     post_process=True, share_embeddings_and_output_weights=spec["tied"],
                     position_embedding_type="rope", rotary_base=500000)
    if DEVICE == "cuda":
        model = model.cuda()
    return config, model.bfloat16()


def build_training(row: Row):
    """(config, DDP-wrapped model, optimizer, how the optimizer was built)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config, model = build_model(row)
    notes = {}
    for distributed in (True, False):
        try:
            ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                       use_distributed_optimizer=distributed)
            ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
            opt_config = OptimizerConfig(optimizer="adam", lr=3e-4, weight_decay=0.1, adam_beta1=0.9,
                                         adam_beta2=0.95, bf16=True, use_distributed_optimizer=distributed,
                                         clip_grad=1.0)
            optimizer = get_megatron_optimizer(opt_config, [ddp])
            notes["distributed_optimizer"] = distributed
            notes["optimizer_class"] = type(optimizer).__name__
            inner = getattr(optimizer, "optimizer", None)
            notes["adam_class"] = f"{type(inner).__module__}.{type(inner).__name__}" if inner is not None else None
            return config, ddp, optimizer, notes
        except Exception as error:  # the fallback is recorded, not hidden
            if not distributed:
                raise
            notes["distributed_optimizer_error"] = f"{type(error).__name__}: {error}"[:400]
            config, model = build_model(row)
    raise AssertionError("unreachable")


def make_step(row: Row, model, optimizer):
    """One training step: zero the grad buffer, forward + loss, backward, finish the grad sync, optimizer step."""
    import torch

    spec = MODELS[row.model]
    position_ids = torch.arange(row.seq_len, device=DEVICE).unsqueeze(0).expand(row.micro_batch, -1)

    def step(tokens, labels):  # tokens, labels: [b, s]
        model.zero_grad_buffer()
        optimizer.zero_grad()
        loss = model(tokens, position_ids, None, labels=labels)  # [b, s] per-token loss, fp32
        loss = loss.float().mean()
        loss.backward()
        model.finish_grad_sync()
        optimizer.step()
        return loss

    batches = [torch.randint(0, spec["vocab"], (row.micro_batch, row.seq_len + 1), device=DEVICE) for _ in range(3)]
    return step, [(b[:, :-1].contiguous(), b[:, 1:].contiguous()) for b in batches]


def run_row(row: Row, trace: str | None = None) -> dict:
    import torch

    init_single_process()
    torch.manual_seed(0)
    config, model, optimizer, notes = build_training(row)
    params = sum(p.numel() for p in model.parameters())
    step, data = make_step(row, model, optimizer)
    timing = time_steps(lambda i: step(*data[i % len(data)]), warmup=row.warmup, repeats=row.steps,
                        synchronize=torch.cuda.synchronize, after_warmup=torch.cuda.reset_peak_memory_stats)
    times, warmup_s = timing.times_s, timing.warmup_s
    losses = [float(loss.detach()) for loss in timing.results]
    peak_alloc, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    kernels = profile_kernels(lambda i: step(*data[i % len(data)]), 2, trace=trace, cpu=bool(trace))
    median = timing.median_s
    return {**asdict(row), "label": row.label, "stack": "megatron-local", "spec": "local", "params": params,
            **notes, "step_time_s": median, "step_times_s": times,
            "tokens_per_s": row.micro_batch * row.seq_len / median, "warmup_s": warmup_s,
            "peak_allocated_gb": peak_alloc / 1e9, "peak_reserved_gb": peak_reserved / 1e9,
            "loss_first": losses[0], "loss_last": losses[-1], "trace": os.path.basename(trace + ".gz") if trace else None,
            "kernels": kernels}


def environment() -> dict:
    """The shared harness's record (``workbench.benchmarking.environment``), the layer spec and each Megatron
    dependency's version (or why it is absent)."""
    env = {**shared_environment(packages=()), "layer_spec": "local"}
    for name in ("megatron.core", "triton", "transformer_engine", "apex"):
        try:
            module = __import__(name, fromlist=["__version__"])
            env[name] = getattr(module, "__version__", "present")
        except Exception as error:  # noqa: BLE001 -- absent is a fact to record
            env[name] = f"absent ({type(error).__name__})"
    return env


def check() -> None:
    """CPU check: the model builds with the local spec (catches API errors before a GPU run); no step."""
    import torch

    init_single_process()
    config, model = build_model(Row("tiny", 1, 64, "selective"))
    names = sorted({type(m).__name__ for m in model.modules()})
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"built": True, "params": params, "dtype": str(next(model.parameters()).dtype),
                      "modules": names, "torch": torch.__version__}))
    torch.distributed.destroy_process_group()


def sweep(out: str, budget_s: float, name: str, trace_label: str | None, *, only_missing: bool = False,
          row_cap_s: float | None = None) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"environment_{name}{'_refill' if only_missing else ''}.json"), "w") as handle:
        json.dump({**environment(), "command": " ".join(sys.argv)}, handle, indent=2)
    rows = SWEEPS[name]()
    trace_label = trace_label or (rows[0].label if name == "main" else None)
    deadline = time.time() + budget_s
    results = os.path.join(out, "megatron_local.jsonl" if name == "main" else f"megatron_local_{name}.jsonl")
    done = measured_labels(results) if only_missing else set()
    for row in rows:
        if row.label in done:
            continue
        left = min(deadline - time.time(), row_cap_s or float("inf"))
        if left < 15:
            record = {**asdict(row), "label": row.label, "skipped": "time budget"}
        else:
            cmd = [sys.executable, __file__, "--row", json.dumps(asdict(row))]
            if row.label == trace_label:
                cmd += ["--trace", os.path.join(out, "traces", row.label.replace(" ", "_").replace("=", "-") + ".json")]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
                record = json.loads(lines[-1]) if proc.returncode == 0 and lines else \
                    {**asdict(row), "label": row.label, "error": (proc.stderr or proc.stdout)[-1500:]}
            except subprocess.TimeoutExpired:
                record = {**asdict(row), "label": row.label, "error": "timeout"}
        with open(results, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        brief = (f"{record['step_time_s'] * 1e3:8.1f} ms {record['peak_reserved_gb']:6.1f} GB"
                 if "step_time_s" in record else record.get("skipped") or (record["error"].strip().splitlines() or [""])[-1][:100])
        print(f"{row.label:45} {brief}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", nargs="?", const="main", choices=sorted(SWEEPS), help="run a sweep (default: main)")
    p.add_argument("--row", help="one row as JSON (the sweep's subprocess); prints one JSON line")
    p.add_argument("--trace", help="with --row: write the profiled steps' Kineto trace here (+ .gz)")
    p.add_argument("--trace-row", help="with --sweep: the label of the row that writes a trace")
    p.add_argument("--out", default="megatron_runs_out")
    p.add_argument("--budget-s", type=float, default=170)
    p.add_argument("--list", action="store_true", help="print the sweep's rows")
    p.add_argument("--check", action="store_true", help="build a tiny model (MEGATRON_RUNS_DEVICE=cpu works)")
    p.add_argument("--only-missing", action="store_true",
                   help="skip the rows already measured in --out's results file; append the others")
    p.add_argument("--row-cap-s", type=float, help="wall-clock cap of one row (default: what the budget leaves)")
    args = p.parse_args()
    if args.list:
        for r in SWEEPS[args.sweep or "main"]():
            print(json.dumps({**asdict(r), "label": r.label}))
    elif args.check:
        check()
    elif args.row:
        if args.trace:
            os.makedirs(os.path.dirname(args.trace), exist_ok=True)
        print(json.dumps(run_row(Row(**json.loads(args.row)), trace=args.trace)))
    elif args.sweep:
        sweep(args.out, args.budget_s, args.sweep, args.trace_row, only_missing=args.only_missing,
              row_cap_s=args.row_cap_s)
    else:
        p.error("--sweep, --row, --list or --check")


if __name__ == "__main__":
    main()
