"""The benchmark cases of ``workbench bench``, apart from the kernel files: per kernel, which shapes its quick
and full suites run and how one case is built (fresh random inputs, our kernel, the vendor / torch baseline, the
float64 reference, FLOP and byte counts from the kernel module, the accepted error).

``bench_cases(kernel, suite)`` is what ``workbench.bench.run_suite`` runs, ``gemm_shape_cases(shapes)`` the GEMMs a
user names. The cases live in the package, not under ``benchmarks/``: the installed ``workbench bench`` command
runs them. The shape sets of the broad side-by-side run stay in ``benchmarks/kernels/shapes.yaml``. ``norms.py``
still builds its own cases (``norms.bench_cases``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

import torch

from workbench.kernels import attention, cross_entropy, embedding_bag, gemm, norms, swiglu
from workbench.kernels._common import BenchCase, check, fp8_dtype
from workbench.kernels.dispatch import triton_matmul, triton_scaled_matmul
from workbench.kernels.reference import (
    reference_attention,
    reference_attention_grads,
    reference_cross_entropy,
    reference_cross_entropy_grad,
    reference_embedding_bag,
    reference_embedding_bag_grad,
    reference_gelu,
    reference_matmul,
    reference_scaled_matmul,
    reference_swiglu,
    torch_gelu,
    torch_swiglu,
)
from workbench.models import get_model

Pass = Literal["fwd", "bwd", "fwd_bwd"]


# ------------------------------------------------------------------------------------------------------------ GEMM
GEMM_TOKENS = 8192
"""Tokens per GEMM in the Llama cases: one 8k-token microbatch (e.g. 1 x 8192 or 2 x 4096)."""


def llama_gemms(model_name: str) -> list[tuple[str, int, int]]:
    """(layer, N, K) of one Llama block's projections, derived from the model catalog."""
    model = get_model(model_name)
    hidden = model.hidden_size
    return [("qkv", model.q_size + 2 * model.kv_size, hidden), ("o", hidden, model.q_size),
            ("gate_up", 2 * model.ffn_hidden_size, hidden), ("down", hidden, model.ffn_hidden_size)]


def _case(name: str, dtype: str, m: int, n: int, k: int, make_inputs, run, baseline, reference,
          **extra) -> BenchCase:
    return BenchCase(op="gemm", name=f"{name} {m}x{n}x{k}", dtype=dtype,
                     row={"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}, make_inputs=make_inputs, run=run,
                     baseline=baseline, reference=reference, flops=gemm.flops(m, n, k),
                     bytes=gemm.bytes_moved(m, n, k, dtype),
                     tolerance=gemm.TOLERANCE[dtype], extra=extra)


def _dense_inputs(m: int, n: int, k: int, dtype: torch.dtype, bias: bool = False):
    def make(device: str) -> tuple:
        a = torch.randn(m, k, device=device, dtype=dtype)  # a: [M, K] row-major
        b = torch.randn(k, n, device=device, dtype=dtype)  # b: [K, N] row-major
        return (a, b, torch.randn(n, device=device, dtype=dtype)) if bias else (a, b)
    return make


def _fp8_inputs(m: int, n: int, k: int):
    def make(device: str) -> tuple:
        fp8 = fp8_dtype(device)
        a = torch.randn(m, k, device=device).to(fp8)  # a: [M, K] row-major
        b = torch.randn(n, k, device=device).to(fp8).t()  # b: [K, N] column-major, as _scaled_mm requires
        scale_a = torch.rand((), device=device) + 0.5  # per-tensor scales: fp32 scalars
        scale_b = torch.rand((), device=device) + 0.5
        return a, b, scale_a, scale_b
    return make


def _torch_tf32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # cuBLAS may use TF32
    try:
        return torch.matmul(a, b)
    finally:
        torch.set_float32_matmul_precision(previous)


def _torch_addmm_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.addmm(bias, a, b))


def _torch_scaled_mm(a, b, scale_a, scale_b, use_fast_accum: bool = False) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=use_fast_accum)


def _matmul_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return triton_matmul(a, b, bias=bias, activation="relu")


def _reference_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return reference_matmul(a, b, bias=bias, activation="relu")


def gemm_cases(suite: str = "quick") -> list[BenchCase]:
    """quick: one case per kind (6); full: bf16 and fp8 on every Llama 3 8B/70B projection plus recsys, fp16
    and tf32 cases, fp8 with and without fast accumulation on both sides (29). Llama GEMMs are M = GEMM_TOKENS rows
    of activations times the weight [K, N]."""
    check(suite in ("quick", "full"), "suite", repr(suite), "'quick' or 'full'")
    llama = {model: llama_gemms(model) for model in ("llama3-8b", "llama3-70b")}
    shapes = {(model, layer): (n, k) for model, gemms in llama.items() for layer, n, k in gemms}
    m = GEMM_TOKENS

    def dense(model, layer, dtype_name):
        n, k = shapes[model, layer]
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype_name]
        run = functools.partial(triton_matmul, precision="tf32") if dtype_name == "tf32" else triton_matmul
        baseline = _torch_tf32_matmul if dtype_name == "tf32" else torch.matmul
        return _case(f"{model} {layer}", dtype_name, m, n, k, _dense_inputs(m, n, k, dtype), run, baseline,
                     reference_matmul, model=model, layer=layer)

    def fp8(model, layer, fast_accum=False):
        n, k = shapes[model, layer]
        run = functools.partial(triton_scaled_matmul, use_fast_accum=fast_accum)
        baseline = functools.partial(_torch_scaled_mm, use_fast_accum=fast_accum)
        label = f"{model} {layer}{' fast-accum' if fast_accum else ''}"
        return _case(label, "fp8", m, n, k, _fp8_inputs(m, n, k), run, baseline, reference_scaled_matmul,
                     model=model, layer=layer, scaling="per-tensor", use_fast_accum=fast_accum)

    rm, rn, rk = 65536, 1024, 1024  # a DLRM-style top-MLP layer over a 64k batch
    recsys = _case("recsys mlp addmm+relu", "bf16", rm, rn, rk, _dense_inputs(rm, rn, rk, torch.bfloat16, bias=True),
                   _matmul_bias_relu, _torch_addmm_relu,
                   _reference_bias_relu, bias=True, activation="relu")
    if suite == "quick":
        return [dense("llama3-8b", "qkv", "bf16"), dense("llama3-70b", "down", "bf16"), recsys,
                dense("llama3-8b", "o", "fp16"), dense("llama3-8b", "o", "tf32"), fp8("llama3-8b", "gate_up")]
    return ([dense(model, layer, "bf16") for model, layer in shapes] + [recsys]
            + [dense("llama3-8b", layer, "fp16") for layer in ("qkv", "o")]
            + [dense("llama3-8b", layer, "tf32") for layer in ("o", "down")]
            + [fp8(model, layer) for model, layer in shapes]
            + [fp8(model, layer, fast_accum=True) for model, layer in shapes])


def gemm_shape_cases(shapes: list[dict]) -> list[BenchCase]:
    """Bench cases for user-chosen GEMMs: each a dict with m, n, k and dtype (bf16, fp16 or fp8), row-major
    A [m, k] @ B [k, n] against torch.matmul / torch._scaled_mm."""
    cases = []
    for i, shape in enumerate(shapes):
        check(isinstance(shape, dict), f"shapes[{i}]", type(shape).__name__, "a dict with m, n, k, dtype")
        m, n, k = (shape.get(key) for key in ("m", "n", "k"))
        dtype = shape.get("dtype", "bf16")
        check(all(isinstance(v, int) and v > 0 for v in (m, n, k)), f"shapes[{i}]", shape, "positive integers m, n, k")
        check(dtype in ("bf16", "fp16", "fp8"), f"shapes[{i}]['dtype']", repr(dtype), "'bf16', 'fp16' or 'fp8'")
        if dtype == "fp8":
            cases.append(_case("custom", "fp8", m, n, k, _fp8_inputs(m, n, k), triton_scaled_matmul, _torch_scaled_mm,
                               reference_scaled_matmul, scaling="per-tensor"))
        else:
            torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
            cases.append(_case("custom", dtype, m, n, k, _dense_inputs(m, n, k, torch_dtype), triton_matmul,
                               torch.matmul,
                               reference_matmul))
    return cases


# ------------------------------------------------------------------------------------------------------- attention
ATTENTION_MODELS = (("llama3-8b", 32, 8, 128), ("llama3-70b", 64, 8, 128))  # name, heads_q, heads_kv, head_dim


ATTENTION_TOKENS = 16384  # batch * seq of every case


def attention_cases(suite: str) -> list[BenchCase]:
    """Llama 3 8B and 70B attention (GQA, causal, bf16), B * S = 16384 tokens; quick: S 4096; full: S 2k-16k.
    Each shape twice: forward, and forward + backward (pass fwd_bwd), next to torch SDPA (default backend)."""
    check(suite in ("quick", "full"), "suite", repr(suite), "'quick' or 'full'")
    seqs = (4096,) if suite == "quick" else (2048, 4096, 8192, 16384)
    return [_attention_case(model, hq, hkv, d, s, pass_) for model, hq, hkv, d in ATTENTION_MODELS for s in seqs
            for pass_ in ("fwd", "fwd_bwd")]


def _attention_case(model: str, hq: int, hkv: int, d: int, s: int, pass_: Pass) -> BenchCase:
    b = max(1, ATTENTION_TOKENS // s)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def make_inputs(device: str) -> tuple:
        q = torch.randn(b, hq, s, d, device=device, dtype=torch.bfloat16)
        k = torch.randn(b, hkv, s, d, device=device, dtype=torch.bfloat16)
        v = torch.randn(b, hkv, s, d, device=device, dtype=torch.bfloat16)
        if pass_ == "fwd":
            return (q, k, v)
        do = torch.randn(b, hq, s, d, device=device, dtype=torch.bfloat16)
        return (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), do)

    if pass_ == "fwd":
        def run(q, k, v):
            return attention.flash_attention(q, k, v, causal=True)

        def baseline(q, k, v):
            return sdpa(q, k, v, is_causal=True, enable_gqa=True)

        def reference(q, k, v):
            return reference_attention(q, k, v, causal=True)
    else:
        # Both return (O, dQ, dK, dV), so the check covers the gradients too; autograd.grad, not .backward(),
        # so that repeated timing runs do not accumulate into q.grad.
        def run(q, k, v, do):
            o = attention.flash_attention(q, k, v, causal=True)
            return (o, *torch.autograd.grad(o, (q, k, v), do))

        def baseline(q, k, v, do):
            o = sdpa(q, k, v, is_causal=True, enable_gqa=True)
            return (o, *torch.autograd.grad(o, (q, k, v), do))

        def reference(q, k, v, do):
            return reference_attention_grads(q, k, v, do, causal=True)

    row = {"op": "attention", "batch": b, "seq": s, "heads_q": hq, "heads_kv": hkv, "head_dim": d,
           "causal": "true", "pass": pass_, "dtype": "bf16"}
    return BenchCase(op="attention", name=f"{model} attention {pass_} b{b} s{s} hq{hq} hkv{hkv} d{d} causal",
                     dtype="bf16", row=row, make_inputs=make_inputs, run=run, baseline=baseline,
                     reference=reference, flops=attention.flops(b, hq, s, d, True, pass_),
                     bytes=attention.bytes_moved(b, hq, hkv, s, d, True, pass_, "bf16"),
                     tolerance=attention.TOLERANCE["bf16"],
                     extra={"pass": pass_})


# ------------------------------------------------------------------------------------------------- SwiGLU and GELU
SWIGLU_SHAPES = {"quick": [("llama3-8b", 8192, 14336)],
                "full": [("llama3-8b", 8192, 14336), ("llama3-70b", 8192, 28672)]}


def _fwd_bwd(fn, *inputs_and_dout):
    """Forward, then the whole backward with a given dout (through autograd.grad, so repeated runs do not
    accumulate into .grad); returns the first input's gradient, the output the benchmark checks."""
    *inputs, dout = inputs_and_dout
    return torch.autograd.grad(fn(*inputs), inputs, dout)[0]


def make_swiglu_case(op: Literal["swiglu", "gelu"], rows: int, cols: int, dtype: str = "bf16", fwd_bwd: bool = False,
                    concat: bool = False, label: str = "") -> BenchCase:
    """One point on [rows, cols] outputs. Inputs: swiglu (gate, up) or (gate_up,) with concat; gelu (x,). fwd+bwd
    adds dout and makes the inputs require grad; run/baseline/reference compute every input gradient and return
    the first (dgate, dgate_up or dx; the unit tests check dup)."""
    torch_dtype = swiglu.TORCH_DTYPES[dtype]
    ours, vendor, ref = {"swiglu": (swiglu.swiglu, torch_swiglu, reference_swiglu),
                         "gelu": (swiglu.gelu, torch_gelu, reference_gelu)}[op]
    if op == "gelu":
        shapes = [(rows, cols)]
    else:
        shapes = [(rows, 2 * cols)] if concat else [(rows, cols), (rows, cols)]

    def make_inputs(device: str) -> tuple:
        inputs = [torch.randn(shape, dtype=torch_dtype, device=device) for shape in shapes]
        if not fwd_bwd:
            return tuple(inputs)
        return (*(t.requires_grad_(True) for t in inputs), torch.randn(rows, cols, dtype=torch_dtype, device=device))

    def reference(*inputs):
        if not fwd_bwd:
            return ref(*inputs)
        *tensors, dout = inputs
        return _fwd_bwd(ref, *(t.detach().double().requires_grad_(True) for t in tensors), dout.double())

    pass_ = "fwd_bwd" if fwd_bwd else "fwd"
    name = f"{op}_fwd_bwd" if fwd_bwd else op
    output = ("dx" if op == "gelu" else "dgate_up" if concat else "dgate") if fwd_bwd else "out"
    return BenchCase(
        op=name,
        name=" ".join(filter(None, [label, op, "gate_up" if concat else "", "fwd+bwd" if fwd_bwd else "fwd",
                                    f"{rows}x{cols}"])),
        dtype=dtype,
        row={"op": name, "rows": rows, "cols": cols, "dtype": dtype},
        make_inputs=make_inputs,
        run=(lambda *inputs: _fwd_bwd(ours, *inputs)) if fwd_bwd else ours,
        baseline=(lambda *inputs: _fwd_bwd(vendor, *inputs)) if fwd_bwd else vendor,
        reference=reference,
        flops=swiglu.flops(op, rows, cols, pass_),
        bytes=swiglu.bytes_moved(op, rows, cols, dtype, pass_),
        tolerance=swiglu.TOLERANCE[dtype],
        extra={"pass": pass_, "output": output, "layout": "gate_up" if concat else "separate"},
    )


def swiglu_cases(suite: str = "quick") -> list[BenchCase]:
    """quick: Llama 3 8B FFN (8192 tokens), swiglu and gelu, fwd and fwd+bwd (4 cases); full: also 70B and the
    concatenated gate_up layout for swiglu (12 cases)."""
    check(suite in SWIGLU_SHAPES, "suite", suite, f"one of {', '.join(SWIGLU_SHAPES)}")
    cases = []
    for label, tokens, ffn in SWIGLU_SHAPES[suite]:
        for fwd_bwd in (False, True):
            cases.append(make_swiglu_case("swiglu", tokens, ffn, "bf16", fwd_bwd, label=label))
            if suite == "full":
                cases.append(make_swiglu_case("swiglu", tokens, ffn, "bf16", fwd_bwd, concat=True, label=label))
            cases.append(make_swiglu_case("gelu", tokens, ffn, "bf16", fwd_bwd, label=label))
    return cases


# --------------------------------------------------------------------------------------------------- cross-entropy
def cross_entropy_cases(suite: str) -> list[BenchCase]:
    """Llama 3 (V 128256) at 4k and 8k tokens, Llama 2 / Mistral (V 32000) at 16k tokens; bf16, fwd and fwd+bwd."""
    check(suite in ("quick", "full"), "suite", repr(suite), "'quick' or 'full'")
    shapes = [(4096, 128256, "llama3 4k tokens")]
    if suite == "full":
        shapes += [(8192, 128256, "llama3 8k tokens"), (16384, 32000, "llama2 16k tokens")]
    cases = []
    for n, v, label in shapes:
        for pass_ in ("fwd", "fwd_bwd"):
            cases.append(_cross_entropy_case(n, v, label, pass_))
    return cases


def _cross_entropy_case(n: int, v: int, label: str, pass_: Pass) -> BenchCase:
    op = "cross_entropy" if pass_ == "fwd" else "cross_entropy_fwd_bwd"

    def make_inputs(device: str) -> tuple:
        logits = torch.randn(n, v, device=device, dtype=torch.bfloat16) * 2.0
        targets = torch.randint(0, v, (n,), device=device)
        return (logits.requires_grad_(pass_ == "fwd_bwd"), targets)

    if pass_ == "fwd":
        # The target range check is a host sync; torch's kernel does not do one either.
        def run(logits, targets):
            return cross_entropy.cross_entropy(logits, targets, check_targets=False)

        def baseline(logits, targets):
            return torch.nn.functional.cross_entropy(logits, targets)

        reference, tolerance = reference_cross_entropy, 1e-3  # relative error of the mean loss
    else:
        def run(logits, targets):
            return torch.autograd.grad(cross_entropy.cross_entropy(logits, targets, check_targets=False), logits)[0]

        def baseline(logits, targets):
            return torch.autograd.grad(torch.nn.functional.cross_entropy(logits, targets), logits)[0]

        reference, tolerance = reference_cross_entropy_grad, 2e-2  # relative Frobenius error of dlogits

    return BenchCase(op=op, name=f"{label} cross-entropy {pass_} {n}x{v}", dtype="bf16",
                     row={"op": op, "rows": n, "cols": v, "dtype": "bf16"}, make_inputs=make_inputs, run=run,
                     baseline=baseline, reference=reference, flops=cross_entropy.flops(n, v, pass_),
                     bytes=cross_entropy.bytes_moved(n, v, "bf16", pass_), tolerance=tolerance, extra={"pass": pass_})


# --------------------------------------------------------------------------------------------------- embedding bag
# DLRM-like workload: 26 sparse features (Criteo) with their tables folded into one 4M-row table; each bag reads
# from its feature's slice of rows. Batch and pooling factors are the brief's sweep, not a specific model's.
DLRM_TABLES = 26


DLRM_ROWS = 4 * 1024 * 1024


DLRM_DIM = 128


DLRM_BATCH = 65536


def embedding_bag_cases(suite: str) -> list[BenchCase]:
    """Pooling 8 fwd and fwd+bwd (quick); pooling 1, 8 and 100, fwd and fwd+bwd (full). fp32, D 128."""
    check(suite in ("quick", "full"), "suite", repr(suite), "'quick' or 'full'")
    poolings = (8,) if suite == "quick" else (1, 8, 100)
    return [_embedding_bag_case(p, pass_) for p in poolings for pass_ in ("fwd", "fwd_bwd")]


def _embedding_bag_case(pooling: int, pass_: Pass) -> BenchCase:
    op = "embedding_bag" if pass_ == "fwd" else "embedding_bag_fwd_bwd"
    rows, dim, batch = DLRM_ROWS, DLRM_DIM, DLRM_BATCH
    lookups = batch * pooling

    def make_inputs(device: str) -> tuple:
        weight = torch.randn(rows, dim, device=device, dtype=torch.float32)
        table_rows = rows // DLRM_TABLES
        table_start = (torch.arange(batch, device=device) % DLRM_TABLES) * table_rows  # bag b reads table b % 26
        indices = table_start.repeat_interleave(pooling) + torch.randint(0, table_rows, (lookups,), device=device)
        offsets = torch.arange(batch + 1, device=device) * pooling
        if pass_ == "fwd":
            return (weight, indices, offsets)
        grad_out = torch.randn(batch, dim, device=device, dtype=torch.float32)
        return (weight.requires_grad_(True), indices, offsets, grad_out)

    if pass_ == "fwd":
        def run(weight, indices, offsets):
            # torch checks no values either
            return embedding_bag.embedding_bag(weight, indices, offsets, check_values=False)

        def baseline(weight, indices, offsets):
            return torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True)

        reference = reference_embedding_bag
    else:
        def run(weight, indices, offsets, grad_out):
            out = embedding_bag.embedding_bag(weight, indices, offsets, check_values=False)
            return torch.autograd.grad(out, weight, grad_out)[0]

        def baseline(weight, indices, offsets, grad_out):
            out = torch.nn.functional.embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True)
            return torch.autograd.grad(out, weight, grad_out)[0]

        def reference(weight, indices, offsets, grad_out):
            return reference_embedding_bag_grad(weight, indices, offsets, grad_out)

    return BenchCase(op=op,
                     name=f"dlrm {DLRM_TABLES} tables in {rows}x{dim}, batch {batch}, pooling {pooling}, {pass_}",
                     dtype="fp32", row={"op": op, "rows": lookups, "cols": dim, "dtype": "fp32", "pooling": pooling},
                     make_inputs=make_inputs, run=run, baseline=baseline, reference=reference,
                     flops=embedding_bag.flops(lookups, dim, pass_),
                     bytes=embedding_bag.bytes_moved(lookups, batch, dim, "fp32", pass_, rows),
                     tolerance=1e-5, extra={"pass": pass_, "bags": batch, "num_rows": rows})


# ------------------------------------------------------------------------------------------------------- suites
KERNEL_CASES: dict[str, Callable[[str], list[BenchCase]]] = {
    "gemm": gemm_cases, "attention": attention_cases, "norms": norms.bench_cases, "swiglu": swiglu_cases,
    "cross_entropy": cross_entropy_cases, "embedding_bag": embedding_bag_cases,
}
"""Kernel name (``workbench.bench.KERNEL_MODULES``) -> its suite's case builder."""


def bench_cases(kernel: str, suite: str = "quick") -> list[BenchCase]:
    """The ``suite`` ("quick" or "full") cases of ``kernel`` (a key of ``KERNEL_CASES``)."""
    check(kernel in KERNEL_CASES, "kernel", repr(kernel), f"one of {', '.join(KERNEL_CASES)}")
    return KERNEL_CASES[kernel](suite)
