"""A DLRM with a DCNv2 interaction (Naumov et al. 2019; Wang et al. 2021, "DCN V2"), built from a catalog
``DLRMModel``, and the row-wise Adagrad its tables train with.

Tables are fp32, stored as one table-batched parameter, and sum-pooled; their gradients are sparse (only the looked-up rows), and ``RowWiseAdagrad``
keeps one fp32 accumulator per row, as FBGEMM's table-batched embeddings do and as ``workbench.memory``
assumes. With the Triton ``embedding_bag`` kernel the gradient is dense instead (table-sized; the kernel's
backward writes a full dweight), which costs a table's worth of memory.
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

    def __init__(self, m: DLRMModel, kernels: KernelSet, max_table_rows: int | None = None):
        super().__init__()
        self.config, self.kernels = m, kernels
        self.table_rows = capped_rows(m, max_table_rows)
        self.weight = nn.Parameter(torch.empty(sum(self.table_rows), m.embedding_dim))  # [sum rows, d]
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
        """Sum-pooled bags [T * B, d] (fp32) from global row indices and CSR offsets [T * B + 1]."""
        if self.kernels.uses("embedding_bag") and (indices.is_cuda or _interpreting()):
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


class RowWiseAdagrad(torch.optim.Optimizer):
    """Adagrad with one accumulator per table row (the mean squared gradient of the row):
    state[r] += mean(g_r^2); w_r -= lr * g_r / (sqrt(state[r]) + eps). Sparse gradients touch only their rows."""

    def __init__(self, params, lr: float = 0.01, eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "sum" not in state:
                    state["sum"] = torch.zeros(p.shape[0], device=p.device, dtype=torch.float32)  # [rows]
                acc = state["sum"]
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
