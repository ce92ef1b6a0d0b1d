"""A mixture-of-experts MLP: a router and E expert MLPs, of which each token uses its top k.

The router is a linear layer to E logits; a token takes the k experts of largest logit and
weighs their outputs by a softmax over those k logits (Mixtral's rule). The step's tokens are
grouped by expert, so each picked expert multiplies all its tokens in one product and its
weights are read once per step, however many tokens picked it. That is why MoE decode reads
more weights as the batch grows: batch 1 reads k experts per layer, a large batch all E.
The layer counts the distinct experts its last call read (`experts_read`), which the engine's
experts measurement (engine/experts.py) reads after each step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .layers import Linear


class Expert(nn.Module):
    """One expert: a SwiGLU MLP of the model's MLP shape, down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = Linear(cfg.hidden, 2 * cfg.intermediate)
        self.down_proj = Linear(cfg.intermediate, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, experts), each (tokens, top_k): the top_k experts of largest router logit for
    each token, and a softmax over just those logits (computed in float32)."""
    top, chosen = logits.topk(top_k, dim=-1)
    return torch.softmax(top.float(), dim=-1).to(logits.dtype), chosen


class MoE(nn.Module):
    """The MLP of an MoE layer: router, top-k, E experts, tokens grouped by expert."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not 0 < cfg.top_k <= cfg.experts:
            raise ValueError(f"top_k must be 1..{cfg.experts}, got {cfg.top_k}")
        self.top_k = cfg.top_k
        self.router = Linear(cfg.hidden, cfg.experts)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(cfg.experts))
        self.experts_read = 0  # distinct experts the last call multiplied by

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = route(self.router(flat), self.top_k)
        picks = chosen.flatten()
        order = picks.argsort(stable=True)  # the (token, choice) pairs grouped by expert
        tokens = order // self.top_k
        weights = weights.flatten().index_select(0, order)
        counts = torch.bincount(picks, minlength=len(self.experts)).tolist()
        out = torch.zeros_like(flat)
        start = 0
        for expert, count in zip(self.experts, counts):
            if count:
                rows = tokens[start:start + count]
                y = expert(flat.index_select(0, rows)) * weights[start:start + count, None]
                out.index_add_(0, rows, y)
                start += count
        self.experts_read = sum(1 for count in counts if count)
        return out.reshape(x.shape)

    def expert_bytes(self) -> int:
        """Bytes of one expert's weights, as held."""
        return sum(m.weight_bytes() for m in self.experts[0].modules() if isinstance(m, Linear))


def moe_layers(model: nn.Module) -> list[MoE]:
    """The model's MoE MLPs, in layer order (none in a dense model)."""
    return [m for m in model.modules() if isinstance(m, MoE)]


def experts_read(model: nn.Module) -> list[int]:
    """Distinct experts each MoE layer read in the model's last forward pass, in layer order."""
    return [m.experts_read for m in moe_layers(model)]
