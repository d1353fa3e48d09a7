"""DeepSpeed ZeRO-2 and ZeRO-3 training Hugging Face transformers' ``LlamaForCausalLM``, timed on the local GPU:
the ``deepspeed-zero2`` and ``deepspeed-zero3`` stacks' ground truth (issue 16).

What runs is what a fine-tuning or pretraining script built on DeepSpeed runs (one GPU, world size 1):

    model = LlamaForCausalLM(LlamaConfig(..., attn_implementation="sdpa"))   # from a config, no download
    model.gradient_checkpointing_enable()                                   # ac = full only
    engine, *_ = deepspeed.initialize(model=model, config={"bf16": {"enabled": True},
                                      "zero_optimization": {"stage": 2 | 3}, "optimizer": {"type": "AdamW"}, ...})
    loss = engine(input_ids=x, labels=x).loss; engine.backward(loss); engine.step()

bf16 parameters, fp32 master weights and Adam moments in the ZeRO optimizer, ZeRO's defaults for every bucket
(``reduce_bucket_size`` = ``allgather_bucket_size`` = 5e8 elements, ``overlap_comm`` on for stage 3 only),
gradient clipping at 1.0 (what the HF Trainer's ``max_grad_norm`` passes). The optimizer is DeepSpeed's ``AdamW``
(its ``FusedAdam``, JIT-built once per machine by a preflight process); if that build fails, every row runs
``torch.optim.AdamW(fused=True)`` as DeepSpeed's client optimizer (``zero_allow_untested_optimizer``). Each row
records which ran (``optimizer_impl``).

Each configuration runs in its own process (clean peak memory; an out-of-memory row does not end the sweep) and
writes one JSON line: median step time over the timed steps (host clock around synchronized steps), peak allocated
and reserved memory, and CUDA kernel time per kernel name from a ``torch.profiler`` pass of one further step; rows
marked ``trace`` also write that step's Kineto trace (gzipped) under ``DIR/traces/``. The roles of the rows (fit /
test / holdout) are ``benchmarks/stacks/deepspeed_split.json``, written before any of them ran.

    python benchmarks/stacks/deepspeed_runs.py --sweep [main|holdout] --out DIR [--budget-s 240]
    python benchmarks/stacks/deepspeed_runs.py --repeats 3 --out DIR [--rows LABEL,...] [--steps 10]
    python benchmarks/stacks/deepspeed_runs.py --row '{"stack": "deepspeed-zero2", "model": "1b", ...}'
    python benchmarks/stacks/deepspeed_runs.py --list [--sweep holdout]

``--repeats N`` re-measures rows (default ``REPEAT_ROWS``: the host-bound ZeRO-3 1B rows and a ZeRO-2 control) in
N processes each, the row order rotated from one round to the next, into ``DIR/deepspeed_repeats.jsonl`` and
``DIR/REPORT.md``; it never writes the sweep files the evaluation reads. Each of these processes also records, after
its timed steps (so nothing timed moves): the step times in call order, the time the cyclic garbage collector took
during the timed steps, the host time of forward, backward and ``engine.step()`` apart (a synchronize between them),
Python calls per step on every thread (``sys.monitoring``), the load average and the process's CPU. Why: the 1B
ZeRO-3 rows are host-bound and moved 14-21 % between two processes of the same row (``deepspeed_repeat.jsonl``),
and their micro-batch-1 rows sit 17-28 % above a model whose host terms do not depend on the micro-batch.
"""

from __future__ import annotations

import argparse
import collections
import gc
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
from workbench.benchmarking import measured_labels, profile_kernels, time_steps  # noqa: E402

MODELS = {
    # Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): tied embeddings, rope_theta 500000 (llama3 scaling left
    # out: it changes the rotary tables' values, not a kernel)
    "1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True, head_dim=64),
    # Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json), 4 of its 32 layers
    "8b-4l": dict(hidden_size=4096, num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=8,
                  intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False, head_dim=128),
    # a smoke test of this script (tiny shapes)
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=256, tie_word_embeddings=True, head_dim=16),
}
STAGES = {"deepspeed-zero2": 2, "deepspeed-zero3": 3}
DEVICE = os.environ.get("DEEPSPEED_RUNS_DEVICE", "cuda")
"""``cpu``: a smoke test of this script without a GPU (DeepSpeed's CPU accelerator, gloo; no timing meaning)."""
EXTENSIONS_DIR = os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp/ds_torch_extensions")
"""Where DeepSpeed's JIT-built FusedAdam lands (one build per machine, shared by the row processes)."""


def deepspeed_arch_list(value: str) -> str:
    """``TORCH_CUDA_ARCH_LIST`` as DeepSpeed 0.19.8's JIT op builder can read it: its
    ``compute_capability_args`` parses every entry as numbers, so the H200 image's ``9.0a`` (sm_90a, the
    arch-specific target) made the FusedAdam build fail (``int('0a')``); FusedAdam needs no sm_90a feature, so the
    suffix is dropped (``9.0a`` -> ``9.0``, ``+PTX`` kept). Untested on the device machine: the first sweep's
    ``environment_*.json`` records the list and whether the build then worked."""
    entries = [e for e in value.replace(" ", ";").split(";") if e]
    out = []
    for entry in entries:
        arch, ptx = entry.split("+")[0], "+PTX" if entry.endswith("+PTX") else ""
        out.append(arch.rstrip("af") + ptx)
    return ";".join(dict.fromkeys(out))


@dataclass(frozen=True)
class Row:
    stack: str  # deepspeed-zero2 or deepspeed-zero3
    model: str
    micro_batch: int
    seq_len: int
    ac: str = "none"  # none, or full (HF gradient_checkpointing_enable())
    optimizer: str = "deepspeed"  # deepspeed (its AdamW: FusedAdam) or torch (torch.optim.AdamW(fused=True))
    trace: bool = False
    steps: int = 6
    warmup: int = 3
    diagnose: bool = False  # the repeats' extra records (after the timed steps)
    repeat: int = 0  # which process of the row (``--repeats``)

    @property
    def label(self) -> str:
        """The row's name in ``deepspeed_split.json``."""
        return f"{self.stack} {self.model} mb{self.micro_batch} s{self.seq_len} ac={self.ac}"


def _main() -> list[Row]:
    """Per stack: the 1B shape at three token counts and both checkpointing modes, the 8B shape cut to 4 layers."""
    shapes = (("1b", 1, 2048, "none"), ("1b", 2, 4096, "none"), ("1b", 1, 8192, "full"), ("1b", 4, 2048, "full"),
              ("8b-4l", 1, 4096, "none"), ("8b-4l", 1, 8192, "full"))
    return [Row(stack, m, mb, s, ac, trace=(i == 0)) for stack in STAGES for i, (m, mb, s, ac) in enumerate(shapes)]


def _holdout() -> list[Row]:
    """Configurations of no main row, chosen with the split file before anything ran: never fitted on."""
    return [Row("deepspeed-zero2", "1b", 2, 8192, "full"), Row("deepspeed-zero2", "8b-4l", 1, 2048, "none"),
            Row("deepspeed-zero3", "1b", 2, 2048, "none"), Row("deepspeed-zero3", "1b", 1, 4096, "full"),
            Row("deepspeed-zero3", "8b-4l", 2, 4096, "full")]


SWEEPS = {"main": _main, "holdout": _holdout}

DIAGNOSTIC_ROWS = (Row("deepspeed-zero3", "1b", 2, 4096, "full"),)
"""Rows of no sweep, never fitted or evaluated: with ``1b mb1 s4096 ac=full`` (holdout) it separates the micro-batch
from the sequence length under full checkpointing (``mb4 s2048`` and ``mb1 s8192`` differ in both)."""
REPEAT_ROWS = ("deepspeed-zero3 1b mb1 s2048 ac=none", "deepspeed-zero3 1b mb2 s2048 ac=none",
               "deepspeed-zero3 1b mb2 s4096 ac=none", "deepspeed-zero3 1b mb1 s4096 ac=full",
               "deepspeed-zero3 1b mb2 s4096 ac=full", "deepspeed-zero3 1b mb1 s8192 ac=full",
               "deepspeed-zero3 1b mb4 s2048 ac=full", "deepspeed-zero2 1b mb1 s2048 ac=none")
"""What ``--repeats`` measures by default: every host-bound ZeRO-3 1B row (fit, test, holdout and the diagnostic
one) and, as a control of the machine's own host noise, the host-bound ZeRO-2 row of the same model."""


def rows_by_label() -> dict[str, Row]:
    """Every row a sweep or the repeats can run, by label."""
    return {r.label: r for r in [*_main(), *_holdout(), *DIAGNOSTIC_ROWS]}


# ----------------------------------------------------------------------------------------------------------------
# one row (torch, transformers and deepspeed imported only in the row process)

def ds_config(row: Row) -> dict:
    config = {
        "train_micro_batch_size_per_gpu": row.micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": STAGES[row.stack]},  # every bucket and threshold at DeepSpeed's default
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if row.optimizer == "deepspeed":
        config["optimizer"] = {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                           "weight_decay": 0.1}}
    else:
        config["zero_allow_untested_optimizer"] = True
    return config


def _init_distributed() -> None:
    """World size 1, as a launcher would set it up."""
    port = str(29500 + os.getpid() % 2000)  # a fresh port per row process
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", port), ("RANK", "0"), ("WORLD_SIZE", "1"),
                       ("LOCAL_RANK", "0"), ("DS_ACCELERATOR", DEVICE)):
        os.environ.setdefault(key, value)
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if DEVICE == "cuda" else "gloo")


def build(row: Row):
    import deepspeed
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**MODELS[row.model], max_position_embeddings=max(8192, row.seq_len), rope_theta=500000.0,
                         rms_norm_eps=1e-5, attn_implementation="sdpa", use_cache=False)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(config)
    if row.ac == "full":
        model.gradient_checkpointing_enable()
    model.train()
    client = None
    if row.optimizer == "torch":
        client = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                   fused=DEVICE == "cuda")
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=client, config=ds_config(row),
                                                   model_parameters=None if client else model.parameters())

    def forward(x):
        return engine(input_ids=x, labels=x).loss

    def step(x):
        loss = forward(x)
        engine.backward(loss)
        engine.step()
        return loss

    step.phases = (forward, engine.backward, engine.step)
    inner = getattr(optimizer, "optimizer", optimizer)
    params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    info = {"params": params, "zero_optimizer": type(optimizer).__name__, "optimizer_impl": type(inner).__name__,
            "attn_implementation": model.config._attn_implementation,
            "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
            "param_dtype": str(next(iter(engine.module.parameters())).dtype).replace("torch.", "")}
    return step, info


def run_row(row: Row) -> dict:
    import torch

    cuda = DEVICE == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    _init_distributed()
    torch.manual_seed(0)
    step, info = build(row)
    vocab = MODELS[row.model]["vocab_size"]
    data = [torch.randint(0, vocab, (row.micro_batch, row.seq_len), device=DEVICE) for _ in range(4)]
    in_order: list[float] = []
    gc_clock = GcClock()

    def timed(i):
        began = time.perf_counter()
        loss = step(data[i % len(data)])
        sync()  # time_steps' own synchronize follows at once: nothing timed moves
        in_order.append(time.perf_counter() - began)
        return loss

    def after_warmup():
        in_order.clear()
        gc.callbacks.append(gc_clock)
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    timing = time_steps(timed, warmup=row.warmup, repeats=row.steps, synchronize=sync, after_warmup=after_warmup)
    gc.callbacks.remove(gc_clock)
    times, warmup_s = timing.times_s, timing.warmup_s
    losses = [float(loss.detach()) for loss in timing.results]
    peak_alloc, peak_reserved = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()) if cuda \
        else (0, 0)
    kernels = profile_kernels(lambda i: step(data[i % len(data)]), 1, trace=_trace_path(row)) if cuda else []
    median = timing.median_s
    extra = {}
    if row.diagnose:
        extra = {"step_times_in_order_s": in_order, "gc_during_timed_steps": gc_clock.record(),
                 **diagnostics(step, data, sync)}
    return {**asdict(row), "label": row.label, **info, "step_time_s": median, "step_times_s": times,
            "tokens_per_s": row.micro_batch * row.seq_len / median, "warmup_s": warmup_s,
            "peak_allocated_gb": peak_alloc / 1e9, "peak_reserved_gb": peak_reserved / 1e9,
            "loss_first": losses[0], "loss_last": losses[-1], "kernels": kernels, "versions": versions(), **extra}


class GcClock:
    """Collections of Python's cyclic garbage collector and the seconds they took, per generation (a
    ``gc.callbacks`` entry): a full collection over the heap of torch, transformers and DeepSpeed is tens of ms."""

    def __init__(self) -> None:
        self.collections, self.seconds, self._began = [0, 0, 0], [0.0, 0.0, 0.0], None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.collections[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._began
            self._began = None

    def record(self) -> dict:
        return {"collections": self.collections, "seconds": self.seconds}


def python_calls(run) -> tuple[int, dict[str, int]]:
    """(Python function calls, the 40 most called functions) during ``run()`` on every thread -- autograd's device
    thread runs ZeRO-3's backward hooks -- counted by a ``sys.monitoring`` PY_START callback (Python >= 3.12;
    (0, {}) before). Counts, not times: the callback's own cost is the same per call in every row."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        run()
        return 0, {}
    tool, counts = 3, collections.Counter()  # 3: a tool id Python leaves free (0-2 and 5 are named)
    monitoring.use_tool_id(tool, "deepspeed_runs")
    monitoring.register_callback(tool, monitoring.events.PY_START, lambda code, offset: counts.update((code,)))
    monitoring.set_events(tool, monitoring.events.PY_START)
    try:
        run()
    finally:
        monitoring.set_events(tool, 0)
        monitoring.register_callback(tool, monitoring.events.PY_START, None)
        monitoring.free_tool_id(tool)
    top = {f"{Path(c.co_filename).name}:{c.co_firstlineno}:{c.co_qualname}": n for c, n in counts.most_common(40)}
    return sum(counts.values()), top


def host_state() -> dict:
    """The machine's load average and the CPU this process last ran on (``/proc``; None where absent)."""
    def read(path):
        try:
            return Path(path).read_text()
        except OSError:
            return None
    load, stat = read("/proc/loadavg"), read("/proc/self/stat")
    cpu = int(stat.rsplit(")", 1)[1].split()[36]) if stat else None  # field 39, "processor"
    return {"loadavg": [float(x) for x in load.split()[:3]] if load else None, "cpu": cpu,
            "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def diagnostics(step, data, sync, steps: int = 3) -> dict:
    """After the timed steps: forward (loss included), backward and ``engine.step()`` timed apart over ``steps``
    further steps (median seconds each, a synchronize between the phases: their sum exceeds the step by the overlap
    the synchronizes remove), then one step's Python calls (``python_calls``)."""
    forward, backward, update = step.phases
    phases = {"forward": [], "backward": [], "step": []}
    for i in range(steps):
        sync()
        began = time.perf_counter()
        loss = forward(data[i % len(data)])
        sync()
        mid = time.perf_counter()
        backward(loss)
        sync()
        late = time.perf_counter()
        update()
        sync()
        for name, seconds in zip(phases, (mid - began, late - mid, time.perf_counter() - late)):
            phases[name].append(seconds)
    calls, top = python_calls(lambda: (step(data[0]), sync()))
    return {"phases_s": {name: sorted(v)[len(v) // 2] for name, v in phases.items()}, "python_calls": calls,
            "python_calls_top": top, "host": host_state()}


def _trace_path(row: Row) -> str | None:
    folder = os.environ.get("DEEPSPEED_TRACE_DIR")
    if not (folder and row.trace):
        return None
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, row.label.replace(" ", "-").replace("=", "") + ".json")


def versions() -> dict:
    import importlib.metadata as metadata

    out = {}
    for name in ("torch", "transformers", "deepspeed", "accelerate", "pydantic", "triton"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict:
    """The shared harness's record (``workbench.benchmarking.environment``) and the stack's package versions."""
    return {**shared_environment(packages=()), "versions": versions()}


# ----------------------------------------------------------------------------------------------------------------
# the sweep

def preflight_fused_adam(timeout_s: float) -> dict:
    """JIT-build DeepSpeed's FusedAdam once (``FusedAdamBuilder().load()``) in its own process; the rows then load
    the cached build. Returns {"ok": bool, "seconds": ..., "error": ...}."""
    code = "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load()"
    start = time.time()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        ok, error = proc.returncode == 0, (proc.stderr or proc.stdout)[-800:] if proc.returncode else ""
    except subprocess.TimeoutExpired:
        ok, error = False, f"timeout after {timeout_s:.0f} s"
    return {"ok": ok, "seconds": round(time.time() - start, 1), "error": error}


def run_subprocess(row: Row, timeout_s: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, __file__, "--row", json.dumps(asdict(row))], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**asdict(row), "label": row.label, "error": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    return {**asdict(row), "label": row.label, "error": (proc.stderr or proc.stdout)[-1200:]}


def sweep(out: str, budget_s: float, name: str, optimizer: str, build_timeout_s: float, *,
          only_missing: bool = False, row_cap_s: float | None = None) -> None:
    deadline = time.time() + budget_s
    os.makedirs(out, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = EXTENSIONS_DIR
    image_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if image_arch:  # the preflight build and every row process inherit it
        os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(image_arch)
    os.environ.setdefault("DEEPSPEED_TRACE_DIR", os.path.join(out, "traces"))
    env = {**environment(), "command": " ".join(sys.argv), "torch_cuda_arch_list":
           {"image": image_arch, "for_deepspeed": os.environ.get("TORCH_CUDA_ARCH_LIST")}}
    if optimizer == "auto":
        env["fused_adam_build"] = preflight_fused_adam(min(build_timeout_s, max(1.0, deadline - time.time() - 60)))
        optimizer = "deepspeed" if env["fused_adam_build"]["ok"] else "torch"
        print(f"FusedAdam JIT build: {env['fused_adam_build']}; rows use optimizer={optimizer}", flush=True)
    env["optimizer"] = optimizer
    with open(os.path.join(out, f"environment_{name}{'_refill' if only_missing else ''}.json"), "w") as handle:
        json.dump(env, handle, indent=2)
    results = os.path.join(out, "deepspeed.jsonl" if name == "main" else f"deepspeed_{name}.jsonl")
    done = measured_labels(results) if only_missing else set()
    for row in SWEEPS[name]():
        if row.label in done:
            continue
        row = Row(**{**asdict(row), "optimizer": optimizer})
        left = min(deadline - time.time(), row_cap_s or float("inf"))
        record = {**asdict(row), "label": row.label, "skipped": "time budget"} if left < 15 else \
            run_subprocess(row, left)
        failed = "error" in record and "out of memory" not in record["error"].lower()
        if failed and row.optimizer == "deepspeed" and time.time() < deadline - 15:  # FusedAdam's load, say
            retry = run_subprocess(Row(**{**asdict(row), "optimizer": "torch"}), deadline - time.time())
            record = {**retry, "first_error": record["error"][-400:]} if "step_time_s" in retry else record
        with open(results, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        brief = (f"{record['step_time_s'] * 1e3:8.1f} ms {record['peak_allocated_gb']:6.1f} GB alloc "
                 f"{record['peak_reserved_gb']:6.1f} GB reserved ({record['optimizer_impl']})"
                 if "step_time_s" in record else
                 record.get("skipped") or (record["error"].strip().splitlines() or ["?"])[-1][:100])
        print(f"{row.label:48} {brief}", flush=True)


def _rotated(rows: list[Row], k: int) -> list[Row]:
    return rows[k % len(rows):] + rows[:k % len(rows)]


def repeat_rows(labels: list[str], repeats: int, steps: int, optimizer: str) -> list[Row]:
    """The processes of ``--repeats``: round k runs every row once, the order rotated by k (no row always first)."""
    known = rows_by_label()
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise SystemExit(f"--rows: unknown {unknown}; expected labels of: {sorted(known)}")
    rows = [Row(**{**asdict(known[label]), "optimizer": optimizer, "trace": False, "steps": steps,
                   "diagnose": True}) for label in labels]
    return [Row(**{**asdict(r), "repeat": k}) for k in range(repeats) for r in _rotated(rows, k)]


def repeats(out: str, budget_s: float, labels: list[str], count: int, steps: int, optimizer: str,
            row_cap_s: float) -> None:
    """Run ``repeat_rows`` into ``out/deepspeed_repeats.jsonl`` within ``budget_s``, then write ``out/REPORT.md``."""
    deadline = time.time() + budget_s
    planned = repeat_rows(labels, count, steps, optimizer)  # an unknown label ends here, before anything runs
    os.makedirs(out, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = EXTENSIONS_DIR
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(os.environ["TORCH_CUDA_ARCH_LIST"])
    with open(os.path.join(out, "environment_repeats.json"), "w") as handle:
        json.dump({**environment(), "command": " ".join(sys.argv), "optimizer": optimizer}, handle, indent=2)
    results = os.path.join(out, "deepspeed_repeats.jsonl")
    for row in planned:
        left = min(deadline - time.time(), row_cap_s)
        record = {**asdict(row), "label": row.label, "skipped": "time budget"} if left < 15 else \
            run_subprocess(row, left)
        with open(results, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        brief = (f"{record['step_time_s'] * 1e3:7.1f} ms (in order: "
                 f"{' '.join(f'{t * 1e3:.0f}' for t in record.get('step_times_in_order_s', []))})"
                 if "step_time_s" in record else
                 record.get("skipped") or (record["error"].strip().splitlines() or ["?"])[-1][:100])
        print(f"[{row.repeat}] {row.label:42} {brief}", flush=True)
    with open(os.path.join(out, "REPORT.md"), "w") as handle:
        handle.write(repeat_report([json.loads(line) for line in open(results)]))


def repeat_report(records: list[dict]) -> str:
    """REPORT.md of the repeats: per row, each process's median step, their median and spread, the steps' spread
    inside a process, the garbage collector's time per timed step, the phases and the Python calls per step."""
    by_label: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        by_label[r["label"]].append(r)
    lines = ["# DeepSpeed repeats (`deepspeed_runs.py --repeats`)", "",
             "Per row: each process's median step (ms, in run order), the median over processes and their spread "
             "(max / min); inside a process the timed steps' max / min; the cyclic GC's ms per timed step; forward, "
             "backward and engine.step() host ms timed apart (median); Python calls per step (all threads).", "",
             "| row | processes (ms) | median | spread | in-process max/min | GC ms/step | fwd / bwd / step ms | "
             "Python calls |", "|---|---|---|---|---|---|---|---|"]
    for label, rows in by_label.items():
        done = [r for r in rows if "step_time_s" in r]
        if not done:
            lines.append(f"| {label} | {', '.join(r.get('skipped') or 'error' for r in rows)} | | | | | | |")
            continue
        medians = [r["step_time_s"] * 1e3 for r in done]
        inner = max(max(r["step_times_s"]) / min(r["step_times_s"]) for r in done)
        gc_ms = [1e3 * sum(r["gc_during_timed_steps"]["seconds"]) / r["steps"] for r in done]
        ph = [r["phases_s"] for r in done]
        phases = " / ".join(f"{sorted(p[k] for p in ph)[len(ph) // 2] * 1e3:.0f}" for k in ("forward", "backward",
                                                                                             "step"))
        calls = sorted(r["python_calls"] for r in done)[len(done) // 2]
        failed = f" (+{len(rows) - len(done)} not measured)" if len(done) < len(rows) else ""
        lines.append(f"| {label} | {', '.join(f'{m:.1f}' for m in medians)}{failed} | "
                     f"{sorted(medians)[len(medians) // 2]:.1f}"
                     f" | {max(medians) / min(medians):.2f} | {inner:.2f} | {max(gc_ms):.1f} | {phases} | {calls:,} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", nargs="?", const="main", choices=sorted(SWEEPS), help="run a sweep (default: main)")
    p.add_argument("--row", help="one row as JSON (the sweep's subprocess), result to stdout")
    p.add_argument("--out", default="deepspeed_out")
    p.add_argument("--budget-s", type=float, default=240)
    p.add_argument("--optimizer", choices=("auto", "deepspeed", "torch"), default="auto",
                   help="auto: DeepSpeed's AdamW if its FusedAdam JIT-builds, else torch's fused AdamW")
    p.add_argument("--build-timeout-s", type=float, default=150)
    p.add_argument("--list", action="store_true", help="print the sweep's rows")
    p.add_argument("--only-missing", action="store_true",
                   help="skip the rows already measured in --out's results file; append the others")
    p.add_argument("--row-cap-s", type=float, help="wall-clock cap of one row (default: what the budget leaves)")
    p.add_argument("--repeats", type=int, help="re-measure --rows in this many processes each (see the docstring)")
    p.add_argument("--rows", default=",".join(REPEAT_ROWS), help="--repeats: comma-separated row labels")
    p.add_argument("--steps", type=int, default=10, help="--repeats: timed steps per process")
    args = p.parse_args()
    if args.list:
        for r in SWEEPS[args.sweep or "main"]():
            print(json.dumps({**asdict(r), "label": r.label}))
    elif args.row:
        if os.environ.get("TORCH_CUDA_ARCH_LIST"):  # a row run on its own: as the sweep sets it
            os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(os.environ["TORCH_CUDA_ARCH_LIST"])
        print(json.dumps(run_row(Row(**json.loads(args.row)))))
    elif args.repeats:
        repeats(args.out, args.budget_s, [x.strip() for x in args.rows.split(",") if x.strip()], args.repeats,
                args.steps, "torch" if args.optimizer == "auto" else args.optimizer, args.row_cap_s or 60)
    elif args.sweep:
        sweep(args.out, args.budget_s, args.sweep, args.optimizer, args.build_timeout_s,
              only_missing=args.only_missing, row_cap_s=args.row_cap_s)
    else:
        p.error("--sweep, --repeats, --row or --list")


if __name__ == "__main__":
    main()
