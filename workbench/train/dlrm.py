"""A DLRM with a DCNv2 interaction (Naumov et al. 2019; Wang et al. 2021, "DCN V2"), built from a catalog
``DLRMModel``, and the row-wise Adagrad its tables train with.

Tables are fp32, stored as one table-batched parameter, and sum-pooled; ``RowWiseAdagrad`` keeps one fp32
accumulator per row, as FBGEMM's table-batched embeddings do and as ``workbench.memory`` assumes. The table never
gets a gradient tensor: the bags' backward records (indices, offsets, gradient of the pooled bags) on the
parameter's ``pooled_grads`` list, and the optimizer step applies embedding-bag backward and update in one pass
(``workbench.kernels.rowwise_adagrad``; FBGEMM fuses the same into its backward kernel). ``fused_update=False``
keeps torch's way (a sparse gradient with one row per lookup, ``coalesce``, an update over the coalesced rows):
the reference the fused path is tested against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workbench.models import DLRMModel
from workbench.train.layers import KernelSet


def _mlp(widths: tuple[int, ...], relu_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if relu_last or i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CrossLayer(nn.Module):
    """x_{l+1} = x0 * (U (V x_l) + b) + x_l with a rank-r factorisation U V."""

    def __init__(self, width: int, rank: int):
        super().__init__()
        self.down = nn.Linear(width, rank, bias=False)
        self.up = nn.Linear(rank, width)

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.up(self.down(x)) + x  # [B, D]


class DLRM(nn.Module):
    """(dense [B, F], indices, offsets) -> click logit [B], or the loss given labels.

    All tables live in one fp32 parameter [sum of rows, d] (as FBGEMM's table-batched embeddings): table t's
    rows start at ``row_offsets[t]``, and one ``embedding_bag`` call pools every table's bags, table-major:
    bag t * B + b is sample b's bag of table t (see ``data.RecsysBatches``)."""

    def __init__(self, m: DLRMModel, kernels: KernelSet, max_table_rows: int | None = None, fused_update: bool = True):
        super().__init__()
        self.config, self.kernels, self.fused_update = m, kernels, fused_update
        self.table_rows = capped_rows(m, max_table_rows)
        self.weight = nn.Parameter(torch.empty(sum(self.table_rows), m.embedding_dim))  # [sum rows, d]
        self.weight.pooled_grads = []  # (indices, offsets, grad of the pooled bags) per backward, for RowWiseAdagrad
        self.bottom = _mlp((m.num_dense_features, *m.bottom_mlp), relu_last=True)
        self.cross = nn.ModuleList([CrossLayer(m.interaction_width, m.cross_low_rank) for _ in range(m.cross_layers)])
        self.top = _mlp((m.interaction_width, *m.top_mlp), relu_last=False)

    def init_weights(self) -> None:
        """Each table uniform(+-1/sqrt(rows)) as the DLRM reference; linears torch's default (Kaiming uniform)."""
        start = 0
        with torch.no_grad():
            for rows in self.table_rows:
                bound = 1 / math.sqrt(rows)
                self.weight[start:start + rows].uniform_(-bound, bound)
                start += rows
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def pooled(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Sum-pooled bags [T * B, d] (fp32) from global row indices and CSR offsets [T * B + 1]; the forward is
        the project's Triton kernel where the recipe selects it."""
        triton = self.kernels.uses("embedding_bag") and (indices.is_cuda or _interpreting())
        if self.fused_update:
            return _pooled_with_fused_update(self.weight, indices, offsets, triton)
        if triton:
            from workbench.kernels.embedding_bag import embedding_bag

            return _triton_bag(embedding_bag, self.weight, indices, offsets)
        return F.embedding_bag(indices, self.weight, offsets, mode="sum", sparse=True, include_last_offset=True)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                labels: torch.Tensor | None = None) -> torch.Tensor:
        """Click logits [B]; with ``labels`` [B], the mean binary cross-entropy instead."""
        logits = self.logits(dense, indices, offsets)
        return logits if labels is None else F.binary_cross_entropy_with_logits(logits, labels)

    def logits(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        b, t, d = dense.shape[0], len(self.table_rows), self.config.embedding_dim
        x = self.bottom(dense)  # [B, bottom_mlp[-1]]
        pooled = self.pooled(indices, offsets).view(t, b, d).transpose(0, 1).reshape(b, t * d)  # [B, T d]
        x0 = torch.cat([x, pooled.to(x.dtype)], dim=1)  # [B, D]
        xl = x0
        for layer in self.cross:
            xl = layer(x0, xl)
        return self.top(xl).squeeze(1).float()  # [B]


def capped_rows(m: DLRMModel, max_table_rows: int | None) -> tuple[int, ...]:
    return tuple(min(t.rows, max_table_rows) if max_table_rows else t.rows for t in m.tables)


def _interpreting() -> bool:
    from workbench.kernels._common import interpreting

    return interpreting()


@torch.compiler.disable
def _triton_bag(embedding_bag, weight, indices, offsets):
    return embedding_bag(weight, indices, offsets, check_values=False)


class _PooledBags(torch.autograd.Function):
    """Sum-pooled bags whose backward records the pooled gradient for the fused update instead of returning a
    table gradient (``weight.pooled_grads``); the weight's ``.grad`` stays None."""

    @staticmethod
    def forward(ctx, weight, indices, offsets, triton):
        ctx.save_for_backward(indices, offsets)
        ctx.pending = weight.pooled_grads
        if triton:
            from workbench.kernels._common import backend
            from workbench.kernels.embedding_bag import config_space, embedding_bag_forward

            return embedding_bag_forward(weight, indices, offsets, None, config_space(backend())[0])
        return F.embedding_bag(indices, weight, offsets, mode="sum", include_last_offset=True)  # [bags, d]

    @staticmethod
    def backward(ctx, grad_out):
        indices, offsets = ctx.saved_tensors
        ctx.pending.append((indices, offsets, grad_out))  # grad_out: [bags, d]
        return None, None, None, None


@torch.compiler.disable
def _pooled_with_fused_update(weight, indices, offsets, triton):
    return _PooledBags.apply(weight, indices, offsets, triton)


def merge_pooled_grads(pending: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One (indices, offsets, grad_out) for the micro-batches of a step: bags and lookups concatenated."""
    if len(pending) == 1:
        return pending[0]
    indices = torch.cat([i for i, _, _ in pending])
    starts, shifted = 0, []
    for i, o, _ in pending:
        shifted.append(o[:-1] + starts)
        starts += i.shape[0]
    offsets = torch.cat([*shifted, torch.tensor([starts], device=indices.device, dtype=pending[0][1].dtype)])
    return indices, offsets, torch.cat([g for _, _, g in pending])


class RowWiseAdagrad(torch.optim.Optimizer):
    """Adagrad with one accumulator per table row (the mean squared gradient of the row):
    state[r] += mean(g_r^2); w_r -= lr * g_r / (sqrt(state[r]) + eps). Sparse gradients touch only their rows.

    A parameter with a non-empty ``pooled_grads`` list (``DLRM``'s table) is updated from those instead of
    ``.grad``: embedding-bag backward and update fused (``rowwise_adagrad_update``); the list is emptied."""

    def __init__(self, params, lr: float = 0.01, eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                pending = getattr(p, "pooled_grads", None)
                if p.grad is None and not pending:
                    continue
                state = self.state[p]
                if "sum" not in state:
                    state["sum"] = torch.zeros(p.shape[0], device=p.device, dtype=torch.float32)  # [rows]
                acc = state["sum"]
                if pending:
                    from workbench.kernels.rowwise_adagrad import rowwise_adagrad_update

                    indices, offsets, grad_out = merge_pooled_grads(pending)
                    pending.clear()
                    rowwise_adagrad_update(p.data, acc, grad_out, indices, offsets, group["lr"], group["eps"],
                                           use_triton=p.is_cuda)
                    continue
                grad = p.grad
                if grad.is_sparse:
                    grad = grad.coalesce()  # duplicate rows summed: [n] rows, [n, d] values
                    p.grad = None  # frees the uncoalesced gradient (one row per lookup) before the update
                    rows, values = grad.indices()[0], grad.values()
                    acc.index_add_(0, rows, torch.linalg.vector_norm(values.float(), dim=1).square_() / values.shape[1])
                    values.mul_((-group["lr"] / (acc[rows].sqrt() + group["eps"])).unsqueeze(1).to(values.dtype))
                    p.index_add_(0, rows, values)  # in place on the coalesced values: no [n, d] temporary
                else:
                    acc.add_(grad.float().pow(2).mean(1))
                    p.add_(grad / (acc.sqrt() + group["eps"]).unsqueeze(1), alpha=-group["lr"])
        return None
