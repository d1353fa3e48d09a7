"""Side environments with torchtitan 0.3.0 and 0.2.2 for checking exports with torchtitan's own config managers.

Installed once with ``pip install --no-deps --target`` into ``.venv/torchtitan-<version>/`` (ignored by git): the
project venv's CPU torch stays the only torch. 0.3.0's folder holds the pinned import-time dependencies of
``torchtitan.models.llama3.config_registry`` and of its float8/mx converters (torchao 0.18: 0.3.0's MXFP8 linear
is ``torchao.prototype.moe_training.mxfp8_linear``, absent from 0.16); 0.2.2's folder holds torchtitan and torchao
0.16 (the newest with the ``MXLinearConfig`` 0.2.2 imports) and borrows the rest (PYTHONPATH order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("0.3.0", "0.2.2")
_DEPS = ("tyro==1.0.17", "docstring-parser==0.18.0", "typeguard==4.6.1", "shtab==1.13.0", "typing-extensions",
         "rich", "markdown-it-py", "mdurl", "spmd_types==0.2.3", "torch_checkpointing==0.1.1", "tensorboard==2.21.0",
         "protobuf", "absl-py", "torchdata==0.11.0", "tokenizers", "datasets==4.7.0", "multiprocess", "dill",
         "pyarrow", "huggingface_hub<1", "xxhash", "torchao==0.18.0")


def env_dir(version: str) -> Path:
    return ROOT / ".venv" / f"torchtitan-{version}"


def install(version: str) -> Path:
    """The side folder for ``version``, installed on first use (a marker file says it completed)."""
    target = env_dir(version)
    if (target / ".complete").exists():
        return target
    packages = [f"torchtitan=={version}", *(_DEPS if version == "0.3.0" else ("torchao==0.16.0",))]
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--target", str(target), *packages], check=True, capture_output=True, text=True, timeout=900)
    (target / ".complete").write_text(" ".join(packages) + "\n")
    return target


# Runs in the side environment: parses every case through torchtitan's ConfigManager and prints what landed.
# On a CPU, torchtitan 0.3.0's converters (built inside the config function) ask for the GPU's CUDA capability;
# each case passes its target GPU's, so the converter runs as it would on that GPU.
_PARSER = r'''
import json, os, sys, traceback
cases = json.load(sys.stdin)
sys.path.insert(0, os.getcwd())
from torchtitan.config import ConfigManager
out = {}
for case in cases:
    try:
        if case["version"] == "0.3":
            import torchtitan.tools.utils as u
            import torchtitan.components.quantization.float8 as f8, torchtitan.components.quantization.mx as mx
            cap = tuple(case["capability"])
            u.has_cuda_capability = f8.has_cuda_capability = mx.has_cuda_capability = lambda a, b: cap >= (a, b)
            c = ConfigManager().parse_args(case["argv"])
            m = c.model_spec.model
            from torchtitan.protocols.module import Module
            def base(cfg):  # the class under LoRA's adapter subclass and its frozen copies
                return next(k.__qualname__ for k in type(cfg).__mro__
                            if "LoRA" not in k.__qualname__ and not k.__qualname__.startswith("Frozen"))
            linears = {base(l.attention.wo) for l in m.layers} | {base(l.feed_forward.w1) for l in m.layers}
            lora, segments = {}, set()
            for fqn, cfg, _, _ in m.traverse(Module.Config, recurse=True):
                segments.add(fqn.rsplit(".", 1)[-1])
                if "LoRA" in type(cfg).__qualname__:
                    lora.setdefault(fqn.rsplit(".", 1)[-1], set()).add((cfg.rank, cfg.alpha))
            ac = c.activation_checkpoint
            landed = {"flavor": c.model_spec.flavor, "layers": len(m.layers), "vocab": m.vocab_size, "dim": m.dim,
                      "lm_head": base(m.lm_head), "linears": sorted(linears),
                      "lora": {k: sorted(v) for k, v in lora.items()}, "fused_qkv": "wqkv" in segments,
                      "lm_head_frozen": type(m.lm_head).__qualname__.startswith("Frozen"),
                      "ac": {"SelectiveAC.Config": "selective", "FullAC.Config": "full", "NoneType": "none"}.get(
                          type(ac).__qualname__, type(ac).__qualname__),
                      "compile": c.compile.enable, "async_tp": c.compile.enable_async_tensor_parallel,
                      "cuda_graphs_off": c.training.disable_cuda_graphs, "hf_assets_path": c.hf_assets_path,
                      "loss_vocab": c.loss.loss_fn.global_vocab_size}
        else:
            c = ConfigManager().parse_args(case["argv"])
            f8 = c.quantize.linear.float8
            landed = {"flavor": c.model.flavor, "converters": list(c.model.converters),
                      "ac": c.activation_checkpoint.mode, "ac_option": c.activation_checkpoint.selective_ac_option,
                      "compile": c.compile.enable, "hf_assets_path": c.model.hf_assets_path, "lr": c.optimizer.lr,
                      "float8_recipe": f8.recipe_name, "fsdp_float8_all_gather": f8.enable_fsdp_float8_all_gather,
                      "mx_recipe": c.quantize.linear.mx.recipe_name}
        t, p = c.training, c.parallelism
        landed.update(micro=t.local_batch_size, global_batch=t.global_batch_size, seq=t.seq_len, dtype=t.dtype,
                      param=t.mixed_precision_param, reduce=t.mixed_precision_reduce,
                      degrees=[p.data_parallel_replicate_degree, p.data_parallel_shard_degree,
                               p.tensor_parallel_degree, p.pipeline_parallel_degree, p.context_parallel_degree,
                               p.expert_parallel_degree],
                      pipeline=[p.pipeline_parallel_schedule, p.pipeline_parallel_layers_per_stage,
                                p.pipeline_parallel_first_stage_less_layers,
                                p.pipeline_parallel_last_stage_less_layers])
        out[case["id"]] = landed
    except BaseException as exc:  # tyro exits with SystemExit on a rejected option
        out[case["id"]] = {"error": f"{type(exc).__name__}: {exc}"[:2000] + traceback.format_exc()[-1500:]}
print("@@RESULT@@" + json.dumps(out))
'''


def parse_all(version: str, cases: list[dict], workdir: Path) -> dict[str, dict]:
    """Parse ``cases`` (id, version "0.3"|"0.2", argv, capability) in one subprocess run in ``workdir``."""
    paths = [install(version)] + ([install("0.3.0")] if version == "0.2.2" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", _PARSER], input=json.dumps(cases), cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=900)
    if "@@RESULT@@" not in proc.stdout:
        raise RuntimeError(f"torchtitan {version} parser failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.split("@@RESULT@@", 1)[1])
