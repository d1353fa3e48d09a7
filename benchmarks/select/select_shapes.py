"""The shapes of the kernel-selection evaluation (issue #4): GEMMs and attention drawn from the catalog's models.

Deterministic: the same list on every machine, so the H200 sweep (``select_sweep.py``) and the CPU-side
evaluation (``select_eval.py``) agree on ids. Layouts follow the training step: a forward GEMM is ``nn``
(activations [M, K] @ weight [K, N]), dgrad multiplies by the transposed weight (``nt``), wgrad by the
transposed activations (``tn``).
"""

from __future__ import annotations

import math
import random

from workbench.config import Parallelism, TrainingConfig
from workbench.predict import predict
from workbench.select import LAYOUT_OF_PHASE

MAX_GEMM_FLOPS = 2.5e12
"""Largest GEMM swept (about 4 ms at 600 TFLOP/s): the exhaustive sweep runs every config of every shape."""
MIN_DIM = 16
"""tl.dot's smallest tile side; thinner GEMMs are matrix-vector products the vendor library runs."""

# (model, micro-batch, sequence length, tensor-parallel degree): a training step's GEMMs per entry.
_MODEL_STEPS = (
    ("llama3-8b", 1, 4096, 1),
    ("llama3-8b", 2, 4096, 2),
    ("llama3-70b", 1, 4096, 8),
    ("llama3-70b", 1, 8192, 4),
    ("llama3-405b", 1, 2048, 8),
    ("mixtral-8x7b", 1, 4096, 1),
    ("gpt2-small", 8, 1024, 1),
    ("dlrm-dcnv2", 2048, 0, 1),
    ("hstu-gr", 8, 0, 1),
)


def _model_gemms() -> list[dict]:
    shapes = []
    for model, micro_batch, seq_len, tp in _MODEL_STEPS:
        config = TrainingConfig(micro_batch=micro_batch, seq_len=seq_len,
                                parallelism=Parallelism(dp=1, tp=tp))
        for op in predict(model, "h200-sxm", config).ops:
            if op.op.kind != "gemm":
                continue
            phase = op.op.name.rsplit(".", 1)[-1]
            s = op.op.shape
            shapes.append(dict(source=f"{model} tp{tp} {op.op.name}", m=s.m, n=s.n, k=s.k,
                               layout=LAYOUT_OF_PHASE.get(phase, "nn")))
    return shapes


def _skinny() -> list[dict]:
    """Decode-like and small-batch GEMMs: M <= 128 rows against Llama weights."""
    weights = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (1280, 8192), (8192, 3584))
    rows = (16, 32, 64, 100, 128)
    return [dict(source=f"skinny m={m}", m=m, n=n, k=k, layout="nn")
            for i, (n, k) in enumerate(weights) for m in rows if (i + m) % 2 == 0 or m in (16, 128)]


def _odd() -> list[dict]:
    """Sizes that are not multiples of 16 or of any tile: masked edges and unaligned rows."""
    sizes = ((1000, 1000, 1000), (4095, 4097, 4096), (4096, 4096, 4095), (3000, 5000, 777),
             (2047, 6144, 4096), (8191, 1023, 2049), (513, 4001, 1537), (12345, 678, 910),
             (5555, 3333, 1111), (777, 11008, 4096), (4096, 11008, 4099), (1999, 2999, 3999))
    return [dict(source="odd", m=m, n=n, k=k, layout="nn") for m, n, k in sizes]


def _log_uniform(count: int, seed: int = 2026) -> list[dict]:
    rng = random.Random(seed)
    shapes = []
    while len(shapes) < count:
        m, n, k = (int(round(math.exp(rng.uniform(math.log(64), math.log(16384))))) for _ in range(3))
        if 2.0 * m * n * k <= MAX_GEMM_FLOPS:
            shapes.append(dict(source="log-uniform", m=m, n=n, k=k, layout=rng.choice(("nn", "nt", "tn"))))
    return shapes


def gemm_shapes() -> list[dict]:
    """About 150 distinct GEMMs, each a dict with id, source, m, n, k, layout (in sweep order)."""
    seen, shapes = set(), []
    for shape in _model_gemms() + _skinny() + _odd() + _log_uniform(36):
        key = (shape["m"], shape["n"], shape["k"], shape["layout"])
        if key in seen or min(key[:3]) < MIN_DIM or 2.0 * key[0] * key[1] * key[2] > MAX_GEMM_FLOPS:
            continue
        seen.add(key)
        shapes.append(shape)
    for i, shape in enumerate(shapes):
        shape["id"] = f"g{i:03d}"
    return shapes


def fp8_ready(shape: dict) -> bool:
    """torch._scaled_mm takes K and N multiples of 16 (and this sweep's fp8 B is column-major: layout nt)."""
    return shape["k"] % 16 == 0 and shape["n"] % 16 == 0


def low_precision_subset(shapes: list[dict], count: int = 50) -> list[dict]:
    """Every third shape that fp8 can run, up to ``count``: the fp16 and fp8 sweeps use the same shapes."""
    ready = [s for s in shapes if fp8_ready(s)]
    step = max(1, len(ready) // count)
    return ready[::step][:count]


def attention_shapes() -> list[dict]:
    """30 flash-attention forward shapes: (batch, seq, heads_q, heads_kv, head_dim, causal) from the models
    (Llama 3 8B/70B/405B per tensor-parallel rank, Mixtral, GPT-2) at 4k-16k tokens."""
    heads = (("llama3-8b", 32, 8, 128), ("llama3-70b tp8", 8, 1, 128), ("llama3-405b tp8", 16, 1, 128),
             ("mixtral-8x7b", 32, 8, 128), ("gpt2-small", 12, 12, 64), ("llama3-70b tp4", 16, 2, 128))
    shapes = []
    for i, (source, hq, hkv, d) in enumerate(heads):
        for j, seq in enumerate((1024, 2048, 4096, 8192, 16384)):
            batch = max(1, 16384 // seq)
            causal = (i + j) % 4 != 3
            shapes.append(dict(id=f"a{len(shapes):03d}", source=source, batch=batch, seq=seq, heads_q=hq,
                               heads_kv=hkv, head_dim=d, causal=causal))
    return shapes


if __name__ == "__main__":
    gemms = gemm_shapes()
    print(len(gemms), "GEMMs;", len(low_precision_subset(gemms)), "fp16/fp8;", len(attention_shapes()), "attention")
    for s in gemms:
        print(s["id"], s["source"], s["m"], s["n"], s["k"], s["layout"])
