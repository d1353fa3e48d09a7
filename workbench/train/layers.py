"""The job's building blocks with a switch between torch's kernels and the project's Triton kernels
(``workbench.kernels``), and the fp8 linear.

Which implementation runs is decided once, from the recipe, into a ``KernelSet``; the model modules call its
methods. Triton calls are kept out of torch.compile graphs (``torch.compiler.disable``): the wrappers check
their inputs on the host, which would break the graph anyway.

fp8 (``Float8Linear``): dynamic scaling, e4m3 for every fp8 operand (weights, activations and gradients), bf16
output; only the transformer blocks' linears (``build.BLOCK_LINEARS``), so embedding, output head, norms and
attention stay in bf16. The three GEMMs of a linear (forward, dgrad, wgrad) each quantize their operands along their
own reduction dimension; the recipe (``FP8_LINEAR_RECIPES``, torchao's names) says how each GEMM scales, or that it
stays in bf16:

- ``tensorwise``: one scale per operand in all three GEMMs. torchao's ``tensorwise`` puts gradients in e5m2
  (``Float8LinearConfig``'s grad_output default, pytorch/ao ``torchao/float8/config.py``), which the project's
  ``scaled_matmul`` (e4m3 only) does not take: here they are e4m3.
- ``rowwise``: a scale per row of A and per column of B along K in all three GEMMs: torchao's ``rowwise`` (e4m3
  everywhere) except that torchao rounds scales down to powers of two.
- ``rowwise_with_gw_hp``: torchao's ``Float8LinearRecipeName.ROWWISE_WITH_GW_HP`` (``from_recipe_name``, same
  file): forward rowwise; dgrad with dy rowwise and the weight per tensor; the weight gradient (wgrad, the
  reduction over tokens) in high precision -- here a bf16 GEMM of the saved bf16 input and the bf16 output
  gradient (torch's matmul, or the project's Triton GEMM where the ``KernelSet`` routes GEMMs to it). Why: the
  all-e4m3 recipes needed ~7% more steps than bf16 to the same loss (``benchmarks/results/h200/train/fp8_seeds/
  REPORT.md``), and production recipes keep the gradient operands out of e4m3 -- torchao this way, Transformer
  Engine's default ``Format.HYBRID`` with e4m3 forward and e5m2 gradients. How much of the weight gradients' error
  each GEMM causes is measured by ``benchmarks/train/fp8_recipe_numerics.py`` (on the proof's model, on a CPU: at
  initialisation the forward GEMMs cause most of it; after 20 bf16 steps the wgrad GEMM does, and this recipe cuts
  the weight gradients' error against fp32 to about a third of rowwise's).

On a GPU the fp8 GEMM is ``workbench.kernels.dispatch.triton_scaled_matmul``; on a CPU without the Triton interpreter, or
anywhere when the linear's ``emulate`` is set (as torchao's ``Float8LinearConfig.emulate``), it is emulated
(dequantize, then an fp32 matmul), which keeps fp8's rounding but not its speed: on a GPU that separates the fp8 GEMM
kernel from the fp8 numerics. Every recipe saves the bf16 input and weight for backward (the quantized copies are
made again there), so the recipes differ in time, not in saved activations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value (OCP FP8 spec)."""


def _interpreting() -> bool:
    from workbench.kernels._common import interpreting

    return interpreting()


def _triton_usable(t: torch.Tensor) -> bool:
    """Triton kernels run on GPU tensors, or on CPU tensors under TRITON_INTERPRET=1."""
    return t.is_cuda or (t.device.type == "cpu" and _interpreting())


@dataclass
class KernelSet:
    """Which ops run the project's Triton kernels, and the GEMM configs the recipe pinned per shape (a GEMM
    whose shape has none, and every other Triton op, takes its kernel's default config)."""

    triton: frozenset[str] = frozenset()
    gemm_configs: dict[tuple, dict] = field(default_factory=dict)
    """Keyed by the shape's sorted items: ((k, K), (m, M), (n, N)) -> config."""

    def uses(self, op: str) -> bool:
        return op in self.triton

    gemm_vendor: frozenset[tuple] = frozenset()
    """GEMM shapes (same keys) the recipe gave to the vendor library (cuBLAS/hipBLASLt): the per-vendor shim."""
    compile_loss: bool = False
    """Run ``ChunkedCrossEntropy``'s per-chunk math through torch.compile (the recipe compiles): each chunk's
    upcast, log-sum-exp and gradient fuse into one pass over the bf16 logits instead of eager fp32 temporaries."""

    def gemm_config(self, m: int, n: int, k: int) -> dict | None:
        return self.gemm_configs.get((("k", k), ("m", m), ("n", n)))

    def matmul(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """a [M, K] @ b [K, N] (+ bias [N]): torch's GEMM where the recipe chose the vendor library for this shape
        (in either orientation: C^T = B^T A^T costs the same), else the project's Triton GEMM with the recipe's
        config (or, without one, the kernel's zero-warmup selection)."""
        from workbench.kernels.dispatch import triton_matmul as matmul

        (m, k), n = a.shape, b.shape[1]
        if (("k", k), ("m", m), ("n", n)) in self.gemm_vendor or (("k", k), ("m", n), ("n", m)) in self.gemm_vendor:
            out = a @ b
            return out if bias is None else out + bias
        return matmul(a, b, bias=bias, config=self.gemm_config(m, n, k))

    # ---------------------------------------------------------------------------------------- elementwise ops
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x [..., h] -> [..., h] in x's dtype."""
        weight = weight.to(x.dtype)
        if self.uses("rmsnorm") and _triton_usable(x):
            return _triton_rms_norm(x, weight, eps)
        return RMSNormFunction.apply(x, weight, eps)

    def swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [..., 2f] (gate first) -> silu(gate) * up [..., f]."""
        if self.uses("swiglu") and _triton_usable(gate_up):
            return _triton_swiglu(gate_up)
        return SwiGLUFunction.apply(gate_up)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss (fp32) of logits [N, V] against targets [N]."""
        if self.uses("cross_entropy") and _triton_usable(logits):
            return _triton_cross_entropy(logits, targets)
        return ChunkedCrossEntropy.apply(logits, targets, self.compile_loss)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention: q [B, Hq, S, D], k/v [B, Hkv, S, D] -> [B, Hq, S, D]."""
        if self.uses("attention") and _triton_usable(q):
            return _triton_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm with torch ops, fp32 inside, saving only x and the fp32 1/rms [rows] for backward (an eager
    ``F.rms_norm`` decomposition saves fp32 copies of x and of the normalised x: four times the bytes)."""

    @staticmethod
    def forward(ctx, x, weight, eps: float):  # x: [..., h], weight: [h]
        rstd = torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps)  # [..., 1]
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        xhat = x.float() * rstd  # [..., h]
        dy_w = dy.float() * weight.float()
        dx = rstd * (dy_w - xhat * (dy_w * xhat).mean(-1, keepdim=True))
        dw = (dy.float() * xhat).flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        return dx.to(x.dtype), None if dw is None else dw.to(weight.dtype), None


class SwiGLUFunction(torch.autograd.Function):
    """silu(gate) * up from gate_up [..., 2f], saving only gate_up (eager ``F.silu(gate) * up`` also keeps the
    silu output: one more [..., f] per layer)."""

    @staticmethod
    def forward(ctx, gate_up):
        ctx.save_for_backward(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up  # [..., f]

    @staticmethod
    def backward(ctx, dout):
        (gate_up,) = ctx.saved_tensors
        gate, up = gate_up.float().chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        dgate = dout.float() * up * sig * (1 + gate * (1 - sig))  # d silu(g) / dg = s (1 + g (1 - s))
        dup = dout.float() * gate * sig
        return torch.cat([dgate, dup], dim=-1).to(gate_up.dtype)


CE_CHUNK_ELEMENTS = 1 << 28
"""fp32 logits upcast per chunk of rows in ``ChunkedCrossEntropy`` (1 GiB): bounds the loss's extra memory."""


def _chunk_lse(logits: torch.Tensor) -> torch.Tensor:
    """log-sum-exp [rows] in fp32 of a logits chunk [rows, V]."""
    return torch.logsumexp(logits.float(), dim=1)


def _chunk_grad_into(out: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                     scale: torch.Tensor) -> None:
    """out [rows, V] (a chunk of dlogits, the logits dtype) = (softmax - one-hot(targets)) * scale, in fp32;
    compiled, one kernel that writes the chunk in place."""
    probs = (logits.float() - lse[:, None]).exp()  # softmax [rows, V]
    cols = torch.arange(logits.shape[1], device=logits.device)
    probs = probs - (cols[None, :] == targets[:, None]).float()  # - one-hot
    out.copy_((probs * scale).to(logits.dtype))


def _chunk_grad_eager(logits, targets, lse, scale):
    """``_chunk_grad_into``'s gradient, returned, with in-place eager ops (one fp32 temporary fewer)."""
    probs = (logits.float() - lse[:, None]).exp_()  # softmax [rows, V]
    probs.scatter_add_(1, targets[:, None], torch.full_like(probs[:, :1], -1.0))  # - one-hot
    return (probs * scale).to(logits.dtype)


_COMPILED_CE: dict[str, object] = {}


def _compiled(name: str):
    """The torch.compile'd per-chunk function, made once per process (a full chunk compiles static; another shape,
    such as the last chunk, recompiles once with dynamic shapes)."""
    if name not in _COMPILED_CE:
        _COMPILED_CE[name] = torch.compile({"lse": _chunk_lse, "grad": _chunk_grad_into}[name])
    return _COMPILED_CE[name]


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits [N, V] (any float dtype) with torch ops, computed in fp32 a chunk of rows at
    a time: it keeps only the logits and the fp32 log-sum-exp [N] for backward, and the gradient comes back in
    the logits dtype. ``F.cross_entropy(logits.float())`` would hold fp32 log-probabilities [N, V] and, in
    backward, two more fp32 [N, V] tensors: 50 GB at 32k tokens x 128k vocabulary. With ``compiled`` (a compiled
    recipe) each chunk's math runs through torch.compile: the same fp32 operations, fused into one kernel per chunk
    reading the bf16 chunk (forward), and one reading it and writing its gradient into dlogits (backward): no
    fp32 [rows, V] temporaries."""

    @staticmethod
    def forward(ctx, logits, targets, compiled: bool = False):  # logits: [N, V], targets: [N]
        n, v = logits.shape
        rows = max(1, CE_CHUNK_ELEMENTS // v)
        lse_fn = _compiled("lse") if compiled else _chunk_lse
        lse = torch.empty(n, device=logits.device, dtype=torch.float32)  # [N]
        picked = logits.gather(1, targets[:, None]).squeeze(1).float()  # [N]
        for start in range(0, n, rows):
            lse[start:start + rows] = lse_fn(logits[start:start + rows])
        ctx.save_for_backward(logits, targets, lse)
        ctx.compiled = compiled
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad_loss):
        logits, targets, lse = ctx.saved_tensors
        n, v = logits.shape
        rows = max(1, CE_CHUNK_ELEMENTS // v)
        scale = grad_loss.float() / n
        dlogits = torch.empty_like(logits)  # [N, V] in the logits dtype
        for start in range(0, n, rows):
            chunk = slice(start, start + rows)
            if ctx.compiled:
                _compiled("grad")(dlogits[chunk], logits[chunk], targets[chunk], lse[chunk], scale)
            else:
                dlogits[chunk] = _chunk_grad_eager(logits[chunk], targets[chunk], lse[chunk], scale)
        return dlogits, None, None


@torch.compiler.disable
def _triton_rms_norm(x, weight, eps):
    from workbench.kernels.norms import rms_norm

    return rms_norm(x, weight, eps)


@torch.compiler.disable
def _triton_swiglu(gate_up):
    from workbench.kernels.swiglu import swiglu

    return swiglu(gate_up)


@torch.compiler.disable
def _triton_cross_entropy(logits, targets):
    from workbench.kernels.cross_entropy import cross_entropy

    return cross_entropy(logits, targets, check_targets=False)


@torch.compiler.disable
def _triton_attention(q, k, v):
    from workbench.kernels.attention import flash_attention

    return flash_attention(q, k, v, causal=True)


# -------------------------------------------------------------------------------------------- Triton GEMM
class _TritonLinearFunction(torch.autograd.Function):
    """y = x @ w^T (+ b) with the project's GEMM for the forward, dgrad and wgrad products."""

    @staticmethod
    def forward(ctx, x, weight, bias, kernels: KernelSet):  # x: [M, K], weight: [N, K], bias: [N] or None
        ctx.save_for_backward(x, weight)
        ctx.kernels, ctx.has_bias = kernels, bias is not None
        return kernels.matmul(x, weight.t(), bias)  # [M, N]

    @staticmethod
    def backward(ctx, dy):  # dy: [M, N]
        x, weight = ctx.saved_tensors
        kernels = ctx.kernels
        dy = dy.to(x.dtype)
        dx = kernels.matmul(dy, weight) if ctx.needs_input_grad[0] else None  # [M, K]
        dw = kernels.matmul(dy.t(), x) if ctx.needs_input_grad[1] else None  # [N, K]
        db = dy.float().sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # [N]
        return dx, dw, db, None


class TritonLinear(nn.Linear):
    """``nn.Linear`` whose three GEMMs run the project's Triton kernel (in the autocast / input dtype)."""

    kernels: KernelSet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _triton_usable(x):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).to(dtype)  # [M, K]
        bias = None if self.bias is None else self.bias.to(dtype)
        y = _linear_triton(x2, self.weight.to(dtype), bias, self.kernels)
        return y.reshape(*lead, self.out_features)


@torch.compiler.disable
def _linear_triton(x, weight, bias, kernels):
    with torch.autocast(x.device.type, enabled=False):
        return _TritonLinearFunction.apply(x, weight, bias, kernels)


# ---------------------------------------------------------------------------------------------------- fp8
def _fp8_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda" and torch.version.hip:
        from workbench.kernels._common import fp8_dtype as project_fp8

        return project_fp8(str(device))
    return torch.float8_e4m3fn


def quantize_fp8(t: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(t_fp8, inverse scale fp32): scaled so that the amax of each slice along ``dim`` (every element when
    None: one scale per tensor) maps to the e4m3 maximum. Inverse scales keep ``dim`` as a size-1 axis."""
    amax = t.abs().amax() if dim is None else t.abs().amax(dim=dim, keepdim=True)
    scale = E4M3_MAX / amax.float().clamp(min=1e-12)
    q = (t.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(_fp8_dtype(t.device))
    return q, scale.reciprocal()


def fp8_matmul(a: torch.Tensor, b: torch.Tensor, rowwise: bool, emulate: bool = False,
               b_rowwise: bool | None = None) -> torch.Tensor:
    """a [M, K] @ b [K, N] through fp8 with dynamic scales: per row of a (``rowwise``) and per column of b
    (``b_rowwise``, default ``rowwise``) along K, else one per tensor; bf16 out [M, N]. ``emulate``: the fp32
    emulation even where the Triton GEMM could run."""
    b_rowwise = rowwise if b_rowwise is None else b_rowwise
    a8, sa = quantize_fp8(a, 1 if rowwise else None)  # sa: [M, 1] or scalar
    b8, sb = quantize_fp8(b, 0 if b_rowwise else None)  # sb: [1, N] or scalar
    # Hopper's fp8 tensor-core instruction (wgmma) reads both operands K-major: A row-major, B column-major.
    # dgrad (B = weight, row-major) and wgrad (A = dy^T, column-major) get that layout from a copy of the
    # 1-byte operand (the H200 sweep timed fp8 only in this layout; other layouts are the suspected cause of the
    # fp8 proof run's 6.5x over prediction).
    a8 = a8.contiguous()  # [M, K], K contiguous
    b8 = b8.t().contiguous().t()  # [K, N], K contiguous
    if _triton_usable(a) and not emulate:
        from workbench.kernels.dispatch import triton_scaled_matmul as scaled_matmul

        return scaled_matmul(a8, b8, sa, sb)
    return ((a8.float() * sa) @ (b8.float() * sb)).to(torch.bfloat16)  # emulation, same rounding


@torch.library.custom_op("workbench_train::fp8_matmul", mutates_args=())
def fp8_matmul_op(a: torch.Tensor, b: torch.Tensor, rowwise: bool, emulate: bool = False,
                  b_rowwise: bool | None = None) -> torch.Tensor:
    """``fp8_matmul`` as one opaque op: torch.compile keeps it whole (no graph break around the Triton launch)
    and selective checkpointing can save its output (``parallel.checkpoint_block``)."""
    return fp8_matmul(a, b, rowwise, emulate, b_rowwise)


@fp8_matmul_op.register_fake
def _fp8_matmul_shape(a: torch.Tensor, b: torch.Tensor, rowwise: bool, emulate: bool = False,
                      b_rowwise: bool | None = None) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.bfloat16)


@dataclass(frozen=True)
class GemmScaling:
    """How one GEMM of an fp8 linear quantizes its operands A [M, K] and B [K, N]: a scale per row of A / per
    column of B along K (True) or one per tensor (False)."""

    a_rowwise: bool
    b_rowwise: bool


@dataclass(frozen=True)
class Fp8LinearRecipe:
    """An fp8 training recipe of ``Float8Linear``, per GEMM of y = x W^T: its scaling, or None where the GEMM
    runs in bf16. Operands: forward x @ W^T, dgrad dy @ W, wgrad dy^T @ x."""

    name: str
    """torchao's ``Float8LinearRecipeName`` value, so a recipe file means the same under torchao and here."""
    forward: GemmScaling
    dgrad: GemmScaling
    wgrad: GemmScaling | None
    """None: wgrad is a bf16 GEMM (torchao's ``ScalingType.DISABLED`` for both wgrad operands)."""


FP8_LINEAR_RECIPES: dict[str, Fp8LinearRecipe] = {r.name: r for r in (
    Fp8LinearRecipe("tensorwise", GemmScaling(False, False), GemmScaling(False, False), GemmScaling(False, False)),
    Fp8LinearRecipe("rowwise", GemmScaling(True, True), GemmScaling(True, True), GemmScaling(True, True)),
    # torchao ROWWISE_WITH_GW_HP: input/weight axiswise; grad_output axiswise with weight_for_grad_input
    # TENSORWISE; input_for_grad_weight and grad_output_for_grad_weight DISABLED (high precision)
    Fp8LinearRecipe("rowwise_with_gw_hp", GemmScaling(True, True), GemmScaling(True, False), None),
)}
"""The recipes ``Float8Linear`` runs, by name (``workbench.train.spec.FP8_MODES`` lists the same)."""


def fp8_linear_recipe(name: str) -> Fp8LinearRecipe:
    """The recipe called ``name`` (exact); an unknown name raises ``ValueError`` listing the accepted ones."""
    if name not in FP8_LINEAR_RECIPES:
        raise ValueError(f"fp8 recipe {name!r}: expected one of {', '.join(FP8_LINEAR_RECIPES)}")
    return FP8_LINEAR_RECIPES[name]


def _gemm(a: torch.Tensor, b: torch.Tensor, scaling: GemmScaling | None, emulate: bool,
          kernels: KernelSet | None) -> torch.Tensor:
    """a [M, K] @ b [K, N] -> bf16 [M, N]: fp8 with ``scaling``, or (None) a bf16 GEMM with fp32 accumulation."""
    if scaling is not None:
        return fp8_matmul_op(a, b, scaling.a_rowwise, emulate, scaling.b_rowwise)
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    if kernels is not None and kernels.uses("gemm") and _triton_usable(a):
        return _bf16_matmul_triton(a, b, kernels)
    return a @ b


@torch.compiler.disable
def _bf16_matmul_triton(a, b, kernels):
    return kernels.matmul(a, b)


class _Float8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, recipe: str, emulate: bool, kernels):  # x: [M, K], weight: [N, K] bf16
        ctx.save_for_backward(x, weight)  # bf16: every recipe quantizes again in backward (or, wgrad in bf16, not)
        ctx.recipe, ctx.emulate, ctx.kernels = FP8_LINEAR_RECIPES[recipe], emulate, kernels
        return _gemm(x, weight.t(), ctx.recipe.forward, emulate, kernels)  # [M, N]

    @staticmethod
    def backward(ctx, dy):  # dy: [M, N]
        x, weight = ctx.saved_tensors
        r, e, kernels = ctx.recipe, ctx.emulate, ctx.kernels
        dx = _gemm(dy, weight, r.dgrad, e, kernels).to(x.dtype) if ctx.needs_input_grad[0] else None  # [M, K]
        dw = _gemm(dy.t(), x, r.wgrad, e, kernels).to(weight.dtype) if ctx.needs_input_grad[1] else None  # [N, K]
        return dx, dw, None, None, None


class Float8Linear(nn.Linear):
    """``nn.Linear`` (no bias) with fp8 GEMMs per ``recipe`` (``FP8_LINEAR_RECIPES``); inputs are cast to bf16 first."""

    recipe: str = "tensorwise"
    """A key of ``FP8_LINEAR_RECIPES``: tensorwise, rowwise or rowwise_with_gw_hp."""
    emulate: bool = False
    """Emulate the fp8 GEMMs in fp32 (same rounding) even on a GPU: a numerics check, not a fast path."""
    kernels: KernelSet | None = None
    """Where the recipe keeps a GEMM in bf16 (rowwise_with_gw_hp's wgrad): the project's Triton GEMM if this
    routes GEMMs to it, else torch's matmul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)  # [M, K]
        recipe = fp8_linear_recipe(self.recipe)
        # the KernelSet only reaches the autograd function where a bf16 GEMM may use it (a plain argument otherwise)
        kernels = self.kernels if recipe.wgrad is None and self.kernels is not None and self.kernels.uses("gemm") else None
        y = _linear_fp8(x2, self.weight.to(torch.bfloat16), recipe.name, self.emulate, kernels)
        return y.reshape(*lead, self.out_features)


def _linear_fp8(x, weight, recipe: str, emulate=False, kernels=None):
    with torch.autocast(x.device.type, enabled=False):
        return _Float8LinearFunction.apply(x, weight, recipe, emulate, kernels)


def swap_linear(linear: nn.Linear, cls: type[nn.Linear], **attributes) -> nn.Linear:
    """A ``cls`` instance that shares ``linear``'s parameters (no copy)."""
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    new.in_features, new.out_features = linear.in_features, linear.out_features
    new.register_parameter("weight", linear.weight)
    new.register_parameter("bias", linear.bias)
    for key, value in attributes.items():
        setattr(new, key, value)
    return new
