"""Peak memory and host time of the single-GPU stacks of ``workbench.graph.stack_kernels`` (plain PyTorch eager and
compiled, torchtitan on one GPU).

Memory: what autograd holds, per term, at the two moments one of which is the peak -- the loss's backward (every
block's saved activations still alive, the autocast weight copies, the fp32 logits and their gradient) and the end
of backward (every parameter's gradient allocated). ``workbench.memory`` models the project's job (FSDP2, chunked
loss); these are new functions beside it. The allocator's reserved/allocated slack is each stack's
``reserved_over_allocated`` (``specs/stacks/``, fitted on the fit rows of ``benchmarks/stacks/host_fit_split.json``),
and under full checkpointing its ``reserved_over_allocated_checkpointed`` where it has one (``reserved_ratio``).

Host time: an eager step launches every kernel from Python through the dispatcher (and autocast, and autograd's
engine in backward); with few tokens the GPU waits for the CPU. ``host_time_s`` counts kernel launches by where they
come from and prices each at a host constant; the step is ``max(device, host)`` (the CPU runs ahead of the GPU and
the two overlap except where the GPU waits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.graph.ops import Op
from workbench.graph.stack_kernels import Dims, Policy, StackFlavor

if TYPE_CHECKING:
    from workbench.stacks import Stack

GB = 1e9

# ----------------------------------------------------------------------------------------------------------------
# Host time. Constants are guesses (calibrate me); kernel_classes.py fits the first two on the fit rows.
HOST_US: dict[str, float] = {
    # CPU time per kernel an eager forward or backward op launches (Python module call, dispatcher, autocast,
    # autograd recording or the engine's node): guess, calibrate me on host-bound eager rows
    "host_eager_kernel_us": 20.0,
    # extra CPU time per kernel of a checkpointed block's recompute (torch.utils.checkpoint's unpack hook reruns the
    # block's Python forward, storing each saved tensor through a Python hook): guess, calibrate me
    "host_recompute_kernel_us": 20.0,
    # CPU time per call of a compiled graph (guards, the AOTAutograd wrapper, the launcher's setup): guess
    "host_graph_call_us": 40.0,
    # CPU time per kernel launched from a compiled graph (inductor's generated wrapper): guess
    "host_compiled_kernel_us": 4.0,
}


def launch_counts(ops: list[Op], flavor: StackFlavor, layers: int) -> dict[str, float]:
    """Kernels per step by what launches them: eager code, a checkpointed recompute, a compiled graph."""
    return part_launch_counts(((ops, 1),), flavor.compile_blocks, graph_calls(flavor, layers))


def graph_calls(flavor: StackFlavor, layers: int) -> int:
    """Compiled graphs called per micro-batch: each block's forward and backward, and the loss's when compiled."""
    return 2 * layers + (2 if flavor.compile_loss else 0) if flavor.compile_blocks else 0


def piece_launch_counts(ops: Iterable[Op], compile_blocks: bool,
                        recomputed: bool = False) -> tuple[float, float, float]:
    """(eager, recompute, compiled) kernels of one copy of ``ops`` (``launch_counts`` without the graph calls);
    ``recomputed``: ``ops`` are the forward ops a recomputed piece copies (``graph.recomputed.RecomputedPiece``:
    their counts, kinds and layers, each copy a ``recompute.`` one), counted as the copies, which are not made."""
    eager = recompute = compiled = 0.0
    for op in ops:
        n = op.count * (2 if op.kind == "attention" else 1)  # SDPA launches its helper kernels beside the main one
        if compile_blocks and op.layer in ("attention", "mlp"):
            compiled += n
        elif recomputed or op.name.startswith("recompute."):
            recompute += n
        else:
            eager += n
    return eager, recompute, compiled


def part_launch_counts(parts, compile_blocks: bool, graphs: int = 0,
                       piece_counts: Sequence[tuple[float, float, float]] | None = None) -> dict[str, float]:
    """``launch_counts`` of (ops, copies) pieces (``graph.stacked.Parts``) and ``graphs`` graph calls;
    ``piece_counts``: each piece's ``piece_launch_counts``, already made. Counts are whole numbers, so the sum is
    exact in any grouping."""
    if piece_counts is None:
        piece_counts = [piece_launch_counts(ops, compile_blocks) for ops, _ in parts]
    eager = recompute = compiled = 0.0
    for (_, copies), (e, r, c) in zip(parts, piece_counts, strict=True):
        eager += e * copies
        recompute += r * copies
        compiled += c * copies
    return {"eager": eager, "recompute": recompute, "compiled": compiled, "graphs": float(graphs)}


def host_time_s(counts: dict[str, float], constants: dict[str, float] | None = None) -> float:
    c = {**HOST_US, **(constants or {})}
    return 1e-6 * (counts["eager"] * c["host_eager_kernel_us"]
                   + counts["recompute"] * (c["host_eager_kernel_us"] + c["host_recompute_kernel_us"])
                   + counts["compiled"] * c["host_compiled_kernel_us"] + counts["graphs"] * c["host_graph_call_us"])


def step_time_s(device_s: float, host_s: float) -> float:
    """The CPU enqueues ahead of the GPU; the step ends when the later of the two does."""
    return max(device_s, host_s)


# ----------------------------------------------------------------------------------------------------------------
# Memory terms (bytes), each from what autograd saves in the torch code of stack_kernels' tables.

def saved_per_token(d: Dims, flavor: StackFlavor, mode: str) -> float:
    """Bytes one block saves for backward per token, for ``mode`` none / selective-op / full.

    none, eager: attn_norm's input x (stream dtype), the bf16 casts of its output each q/k/v linear saves (3 under
    autocast: casts of a non-leaf are not cached; 1 shared tensor with bf16 params), SDPA's q, k, v, out (+ fp32
    lse per head), wo's input (the contiguous copy of out), ffn_norm's input, w1/w3's inputs (2 casts or 1), silu's
    input, mul's two inputs, w2's input. RoPE saves only its [S, d/2] tables (its inputs need no grad).
    none, compiled: the AOT forward graph of the plain loop's block (``min_cut_rematerialization_partition``, torch
    2.13; the H200 trace's backward kernels, torch 2.11, agree) saves the block input, one bf16 y per norm, q and k
    after RoPE, v, SDPA's out and lse, wo's input (the contiguous copy of out), wo's output (2h: backward rebuilds
    ffn_norm's input x + wo(...) in the kernel of ffn_norm's backward, ``fused_rms_norm_backward_add``), w1's and
    w3's outputs and w2's input (the SwiGLU product: w2's weight-gradient GEMM reads it, no kernel recomputes it);
    two fp32 rsqrt per token and the RoPE tables are left out (``tests/test_stack_memory.py`` replays the
    partition on the CPU).
    selective-op: the outputs torchtitan's policy MUST_SAVEs (wq, wv, w1, w2 outputs; SDPA out and lse) and the
    checkpoint's input; compiled, all but w2's (the AOT forward graph of a checkpointed block under torch.compile,
    torch 2.13, returns the policy's outputs that its backward reads, and the residual add reads none). full: the
    checkpoint's input.
    """
    h, q, kv, f, s = d.hidden, d.q, d.kv, d.ffn, flavor.stream_bytes
    lse = 4 * d.heads
    if mode == "full":
        return s * h
    if mode == "selective-op":  # compiled: the partitioner keeps a MUST_SAVE output only if backward needs it,
        w2_out = 0 if flavor.compile_blocks else 2 * h  # and w2's output feeds only the residual add
        return s * h + 2 * q + 2 * kv + 2 * f + w2_out + 2 * q + lse
    if flavor.compile_blocks:  # x; y, q, k, v, out, wo's input and output; y; w1, w3 outputs, w2 input
        return s * h + 2 * h + 2 * q + 4 * kv + 2 * q + 2 * q + 2 * h + 2 * h + 6 * f + lse
    casts_attn, casts_ffn = (3, 2) if flavor.autocast else (1, 1)
    return (2 * s * h + 2 * h * (casts_attn + casts_ffn) + 2 * q + 4 * kv + 2 * q + 2 * q + 8 * f + lse)


def activation_bytes(d: Dims, flavor: StackFlavor, policy: Policy) -> tuple[float, float]:
    """(saved by all blocks at the end of forward, the extra peak of one block's backward under checkpointing)."""
    t, n = d.tokens, d.layers
    none = saved_per_token(d, flavor, "none") * t
    if policy == "none":
        return n * none, 0.0
    if policy in ("full", "selective-op"):
        return n * saved_per_token(d, flavor, policy) * t, none
    if policy == "selective-op-all-mm":  # the workbench's selective: every matmul and SDPA output saved; bounded
        return n * none, 0.0             # above by what no checkpointing saves (the recomputed outputs are small)
    every = int(policy.split("-", 1)[1])  # selective-N: layers // N blocks fully checkpointed
    full_blocks = n // every
    return full_blocks * saved_per_token(d, flavor, "full") * t + (n - full_blocks) * none, none if full_blocks else 0.0


def weight_copy_bytes(d: Dims, flavor: StackFlavor, policy: Policy) -> float:
    """Autocast's bf16 copies of the linears' weights alive at the loss: every block's (the cache lives for the
    forward; each linear saves its copy for dgrad) unless the block is checkpointed (the checkpoint saves only its
    input, the cache is cleared when the autocast region exits), plus the head's. Under torchao float8 the blocks'
    linears keep none: ``matmul_with_hp_or_float8_args`` (torchao/float8/float8_linear.py) saves the fp32 parameter
    itself and the bf16 input, as a bf16 linear saves its input; the fp8 operands are cast again in backward."""
    if not flavor.autocast:
        return 0.0
    head = 2 * d.vocab * d.hidden
    block = 2 * (d.block_params - 2 * d.hidden) if flavor.float8 == "none" else 0.0
    if policy == "none":
        return head + d.layers * block
    if policy.startswith("selective-") and policy not in ("selective-op", "selective-op-all-mm"):
        return head + (d.layers - d.layers // int(policy.split("-", 1)[1])) * block
    return head


def loss_bytes(d: Dims, flavor: StackFlavor) -> float:
    """Peak of the loss per logit x logits. Eager: the bf16 logits (the caller's variable holds them), log_softmax's
    fp32 output (saved), in its backward the zeroed fp32 grad and the fp32 result: 2 + 4 + 4 + 4 = 14 B.
    Compiled (torchtitan's ``cross_entropy_loss`` under torch.compile): the bf16 logits and the bf16 dlogits, 4 B.
    Its AOT forward graph (torch 2.13) saves the bf16 input and two fp32 values per row (the max and the log of the
    sum), not the log-probs, and its backward recomputes the softmax inside the kernel that writes the bf16 grad."""
    per_logit = 4 if flavor.compile_loss else 14
    return per_logit * d.tokens * d.vocab


@dataclass(frozen=True)
class StackMemory:
    params: float
    optimizer: float
    grads: float
    weight_copies: float
    activations: float
    recompute_peak: float
    loss: float

    @property
    def at_loss(self) -> float:
        """The loss's backward: no gradient yet (zero_grad(set_to_none=True)), everything forward saved."""
        return self.params + self.optimizer + self.weight_copies + self.activations + self.loss

    @property
    def at_backward_end(self) -> float:
        """Every gradient allocated, activations released, one block's recompute at most."""
        return self.params + self.optimizer + self.grads + self.recompute_peak

    @property
    def peak_allocated(self) -> float:
        return max(self.at_loss, self.at_backward_end)

    def as_gb(self) -> dict[str, float]:
        out = {k: getattr(self, k) / GB for k in ("params", "optimizer", "grads", "weight_copies", "activations",
                                                  "recompute_peak", "loss")}
        out["peak_allocated"] = self.peak_allocated / GB
        return out


def stack_memory(d: Dims, flavor: StackFlavor, policy: Policy) -> StackMemory:
    params = d.layers * d.block_params + d.vocab * d.hidden * (1 if flavor.tied else 2) + d.hidden
    pb = 4 if flavor.param_dtype == "fp32" else 2
    activations, recompute = activation_bytes(d, flavor, policy)
    return StackMemory(params=pb * params, optimizer=2 * pb * params, grads=pb * params,
                       weight_copies=weight_copy_bytes(d, flavor, policy), activations=activations,
                       recompute_peak=recompute, loss=loss_bytes(d, flavor))


def reserved_ratio(stack: Stack, policy: Policy) -> float:
    """The caching allocator's reserved / allocated at the peak, from the stack's fitted constants (1: none given).

    Full checkpointing gets its own ratio (``reserved_over_allocated_checkpointed``) where the stack has one: the
    checkpointed plain-loop rows on the H200 reserve 1.11-1.22 times their peak allocation (one, whose peak is at
    the end of backward, 1.07), the others 1.01-1.11 (``benchmarks/results/h200/stacks/plain_pytorch/``,
    ``trace_holdout/``). The likely mechanism, not simulated here: a checkpointed
    step's allocated peak is the loss's few GB-sized fp32 [tokens, vocab] blocks over small checkpoint inputs, and
    the caching allocator, which never merges blocks across segments, maps new segments for them where the memory
    freed after the loss holds smaller long-lived tensors (the gradients, AdamW's moments created at the first step);
    without checkpointing the peak is many block-sized activations, which fit in such holes."""
    plain = stack.constant("reserved_over_allocated", 1.0)
    if policy == "full":
        return stack.constant("reserved_over_allocated_checkpointed", plain)
    return plain
