"""One request as the engine sees it: its tokens, how many are in the cache, its block table."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sampler import SamplingParams


@dataclass
class Sequence:
    id: int
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    ignore_eos: bool = False  # forced output lengths, so runs under different policies compare
    output_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    # Hybrid attention (block_manager): the sliding-window layers' blocks by position, like
    # block_table; a block wholly before the window is given back and its entry becomes FREED.
    window_table: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose K and V are in the cache
    finished: bool = False
    # Prefix caching (block_manager): chained hashes of the full blocks of token_ids, computed
    # once, and how many leading blocks of block_table were already offered to the cache.
    block_hashes: list[bytes] = field(default_factory=list, repr=False)
    hashed_blocks: int = 0

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def token_slice(self, start: int, end: int) -> list[int]:
        """token_ids[start:end] without building token_ids, a copy of the whole sequence (a
        decode step reads one token of each, however long)."""
        prompt = len(self.prompt_ids)
        if start >= prompt:
            return self.output_ids[start - prompt: end - prompt]
        if end <= prompt:
            return self.prompt_ids[start:end]
        return self.prompt_ids[start:] + self.output_ids[: end - prompt]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model before the next token can be sampled: the
        prompt (or what is left of it) in prefill, 1 in decode, everything after a preemption."""
        return self.num_tokens - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_uncomputed > 1

    @property
    def done(self) -> bool:
        return self.finished or len(self.output_ids) >= self.max_new_tokens
