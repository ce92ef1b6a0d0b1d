"""Turning logits into tokens: greedy, or seeded temperature / top-k / top-p sampling.

Each sampled request carries its own random generator, seeded from its seed, so its tokens do not
depend on which other requests share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .errors import ConfigError


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k cut
    top_p: float = 1.0  # 1 means no nucleus cut
    seed: int = 0
    _generator: torch.Generator | None = field(default=None, repr=False, compare=False)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def generator(self) -> torch.Generator:
        if self._generator is None:
            self._generator = torch.Generator().manual_seed(self.seed)
        return self._generator

    def validate(self) -> None:
        if self.temperature < 0:
            raise ConfigError("temperature must be 0 (greedy) or more")
        if self.top_k < 0:
            raise ConfigError("top-k must be 0 (off) or a positive count")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError("top-p must be in (0, 1]")


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set whose
    probability reaches top_p (the most likely token always stays)."""
    logits = logits.clone()
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[..., -1, None]
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) >= top_p  # mass before this token
        sorted_logits[drop] = float("-inf")
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def sample_one(logits: torch.Tensor, params: SamplingParams) -> int:
    """One token id from a row of logits (float32, on CPU)."""
    if params.greedy:
        return int(torch.argmax(logits))
    filtered = filter_logits(logits / params.temperature, params.top_k, params.top_p)
    probs = filtered.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=params.generator()))


def sample(logits: torch.Tensor, params: list[SamplingParams]) -> list[int]:
    """One token per row. Greedy rows are taken in one argmax; sampled rows one by one."""
    if all(p.greedy for p in params):
        return logits.argmax(-1).tolist()
    logits = logits.float().cpu()
    return [sample_one(row, p) for row, p in zip(logits, params)]
