"""Allocation of KV blocks to sequences: a free list, and a block table per sequence."""

from __future__ import annotations

from collections import deque

from .sequence import Sequence


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class BlockManager:
    """Hands out fixed-size blocks so a sequence's cache grows a block at a time, never
    reserving its whole possible length up front, and takes them back when it ends."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    def take_scratch_block(self) -> int:
        """Withdraw one block from circulation for writes that must land somewhere harmless."""
        self.num_blocks -= 1
        return self.free_blocks.pop()

    def blocks_needed(self, seq: Sequence, new_tokens: int) -> int:
        """Blocks to add so seq can hold new_tokens more tokens than it has computed."""
        total = blocks_for(seq.num_computed + new_tokens, self.block_size)
        return max(0, total - len(seq.block_table))

    def can_grow(self, seq: Sequence, new_tokens: int) -> bool:
        return self.blocks_needed(seq, new_tokens) <= self.num_free

    def grow(self, seq: Sequence, new_tokens: int) -> None:
        """Give seq enough blocks for new_tokens more tokens; the caller checked can_grow."""
        needed = self.blocks_needed(seq, new_tokens)
        if needed > self.num_free:
            raise MemoryError(f"need {needed} KV blocks, {self.num_free} free")
        for _ in range(needed):
            seq.block_table.append(self.free_blocks.popleft())

    def free(self, seq: Sequence) -> None:
        """Return all of seq's blocks; its cached tokens are forgotten."""
        self.free_blocks.extend(seq.block_table)
        seq.block_table.clear()
        seq.num_computed = 0
