"""Building blocks of the decoder: RMSNorm, rotary embedding, and a linear layer that picks its
matrix layout by batch size.

Why the layout matters: a decode step multiplies a few rows of activations by every weight matrix,
so its speed is how fast the weights stream from memory. On CPUs the BLAS routines stream an
(in x out) matrix fastest for one row, and an (out x in) matrix fastest as W @ x.T for a few rows
(shared/PERF-NOTES.md measures both). Keeping both copies costs memory, not time per step: each
step reads only one of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Linear(nn.Module):
    """y = x @ W.T without bias, with a per-batch-size choice of matrix layout on CPU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_t: torch.Tensor | None = None  # (in x out) copy for one-row products on CPU

    def prepare_for_cpu_decode(self) -> None:
        """Keep a transposed copy for one-row products (see the module docstring)."""
        self.weight_t = self.weight.detach().t().contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_t is None:
            return F.linear(x, self.weight)
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] == 1:
            out = rows @ self.weight_t
        elif rows.shape[0] <= 64:
            out = (self.weight @ rows.t()).t()
        else:
            out = F.linear(rows, self.weight)
        return out.reshape(*x.shape[:-1], self.out_features)


class Rotary(nn.Module):
    """Rotary position embedding (the rotate-half form used by Llama)."""

    def __init__(self, head_dim: int, context: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (..., tokens, heads, head_dim); positions: (..., tokens)."""
        cos = self.cos[positions].unsqueeze(-2).to(x.dtype)
        sin = self.sin[positions].unsqueeze(-2).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
