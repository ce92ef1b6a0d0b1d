"""The block manager's prefix cache, driven by hand (no model): what a hit takes, reference counts,
hash chaining, partial blocks, LRU eviction under pressure, trimming. With caching off it must hand
out blocks exactly as before."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager
from engine.sequence import Sequence

B = 4  # tokens per block


def seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(id=i, prompt_ids=list(tokens), max_new_tokens=4)


def admit(blocks: BlockManager, s: Sequence) -> int:
    """What a scheduler does at admission: take the cached prefix, reserve the rest of the
    prompt, and (as the engine's step would) mark the prompt computed and offer its blocks."""
    cached = blocks.cached_prefix(s)
    blocks.grow(s, s.num_uncomputed - cached, cached)
    s.num_computed = s.num_tokens
    blocks.cache_full_blocks(s)
    return cached


def test_a_shared_prefix_is_taken_not_recomputed_and_counted_once_per_holder():
    blocks = BlockManager(16, B, prefix_caching=True)
    prefix = list(range(100, 108))  # two full blocks
    a, b = seq(0, prefix + [1, 2, 3]), seq(1, prefix + [7, 8])
    assert admit(blocks, a) == 0
    assert blocks.cached_prefix(b) == 8
    assert admit(blocks, b) == 8
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    shared = a.block_table[:2]
    assert [blocks.ref_counts[x] for x in shared] == [2, 2]
    assert blocks.num_used == 3 + 1  # two shared, a's third, b's third
    assert blocks.stats.hits == 1 and blocks.stats.tokens_skipped == 8
    assert blocks.stats.blocks_shared == 2 and blocks.stats.lookups == 2
    blocks.free(a)
    assert [blocks.ref_counts[x] for x in shared] == [1, 1] and blocks.num_used == 3
    blocks.free(b)
    assert all(r == 0 for r in blocks.ref_counts) and blocks.num_used == 0
    assert blocks.num_cached == 2  # the full blocks stay cached while free
    c = seq(2, prefix + [9])
    assert admit(blocks, c) == 8 and c.block_table[:2] == shared
    assert blocks.stats.blocks_shared == 2  # taken from the free cache, not from a holder


def test_same_block_after_a_different_prefix_does_not_hit():
    blocks = BlockManager(16, B, prefix_caching=True)
    admit(blocks, seq(0, [1, 2, 3, 4, 5, 6, 7, 8, 0]))
    other = seq(1, [9, 9, 9, 9, 5, 6, 7, 8, 0])  # its second block equals the first's second
    assert blocks.cached_prefix(other) == 0
    tail = seq(2, [1, 2, 3, 4, 9, 9, 9, 9, 0])  # first block equal: only it hits
    assert blocks.cached_prefix(tail) == 4


def test_partial_blocks_are_never_shared_and_the_last_token_is_always_computed():
    blocks = BlockManager(16, B, prefix_caching=True)
    a = seq(0, [1, 2, 3, 4, 5, 6])  # one full block, one partial
    admit(blocks, a)
    assert blocks.num_cached == 1
    assert blocks.cached_prefix(seq(1, [1, 2, 3, 4, 5, 6, 7])) == 4  # not the partial block
    exact = seq(2, [1, 2, 3, 4, 5, 6, 7, 8])
    admit(blocks, exact)  # two full blocks, both cached now
    same = seq(3, [1, 2, 3, 4, 5, 6, 7, 8])
    # the whole prompt is cached, but its last token must run to give a token to sample
    assert blocks.cached_prefix(same) == 4
    assert blocks.cached_prefix(seq(4, [1, 2, 3, 4, 5, 6, 7, 8, 1])) == 8


def test_eviction_is_least_recently_used_and_never_touches_a_block_in_use():
    blocks = BlockManager(6, B, prefix_caching=True)
    old, newer, held = (seq(i, [10 * i + t for t in range(5)]) for i in (1, 2, 3))
    for s in (old, newer, held):  # each: one full (cached) block and one partial
        admit(blocks, s)
    cached = {s.id: s.block_table[0] for s in (old, newer, held)}
    blocks.free(old)
    blocks.free(newer)  # held keeps its blocks
    assert blocks.num_free == 4 and len(blocks.free_blocks) == 2
    big = seq(9, list(range(200, 213)))  # 4 blocks: 2 plain free ones, then 2 evictions
    assert blocks.cached_prefix(big) == 0
    blocks.grow(big, big.num_uncomputed)
    assert blocks.stats.evictions == 2
    assert cached[old.id] in big.block_table and cached[newer.id] in big.block_table
    assert blocks.cached_prefix(seq(5, old.prompt_ids)) == 0  # forgotten
    assert blocks.cached_prefix(seq(6, held.prompt_ids)) == 4  # in use: never evicted
    assert not blocks.can_grow(seq(7, [1] * 5), 5)  # nothing left but blocks in use
    blocks.free(big)
    blocks.free(held)


def test_lru_order_follows_last_use():
    blocks = BlockManager(4, B, prefix_caching=True)
    a, b = seq(0, [1, 2, 3, 4, 0]), seq(1, [5, 6, 7, 8, 0])
    admit(blocks, a)
    admit(blocks, b)
    blocks.free(a)
    blocks.free(b)
    again = seq(2, [1, 2, 3, 4, 9])  # a's block used again: b's is now the oldest
    admit(blocks, again)
    blocks.free(again)
    victim = seq(3, list(range(50, 59)))
    blocks.grow(victim, victim.num_uncomputed)  # 3 blocks: 2 plain, 1 eviction
    assert blocks.cached_prefix(seq(4, [1, 2, 3, 4, 9])) == 4
    assert blocks.cached_prefix(seq(5, [5, 6, 7, 8, 9])) == 0


def test_off_hands_out_blocks_exactly_as_a_plain_free_list():
    blocks = BlockManager(8, B)
    a, b = seq(0, [1] * 9), seq(1, [1] * 9)
    for s in (a, b):
        assert blocks.cached_prefix(s) == 0
        blocks.grow(s, s.num_uncomputed)
        s.num_computed = s.num_tokens
        blocks.cache_full_blocks(s)
    assert a.block_table == [0, 1, 2] and b.block_table == [3, 4, 5]
    blocks.free(a)
    assert list(blocks.free_blocks) == [6, 7, 0, 1, 2] and blocks.num_cached == 0
    assert blocks.stats.lookups == 0


def test_trim_gives_back_blocks_past_the_computed_tokens():
    blocks = BlockManager(8, B)
    s = seq(0, [1] * 5)
    blocks.grow(s, 5 + 6)  # room for 6 speculative tokens: 3 blocks
    s.num_computed = 7  # 2 accepted after the prompt
    blocks.trim(s)
    assert s.block_table == [0, 1] and list(blocks.free_blocks)[:1] == [2]
    assert blocks.num_used == 2


def test_a_cached_hit_that_does_not_fit_takes_nothing():
    blocks = BlockManager(3, B, prefix_caching=True)
    a = seq(0, [1, 2, 3, 4, 5])
    admit(blocks, a)
    blocks.free(a)
    s = seq(1, [1, 2, 3, 4] + [0] * 12)
    cached = blocks.cached_prefix(s)
    assert cached == 4 and not blocks.can_grow(s, s.num_uncomputed - cached, cached)
    with pytest.raises(MemoryError):
        blocks.grow(s, s.num_uncomputed - cached, cached)
    assert s.block_table == [] and s.num_computed == 0 and blocks.num_cached == 1


def test_caching_switched_on_and_off_between_steps():
    blocks = BlockManager(16, B)  # built without it: a live run turns it on
    prefix = list(range(200, 208))
    a = seq(0, prefix + [1])
    assert admit(blocks, a) == 0 and blocks.num_cached == 0
    blocks.set_prefix_caching(True)
    b, c = seq(1, prefix + [2]), seq(2, prefix + [3])
    assert admit(blocks, b) == 0  # a's blocks were computed while it was off: not offered
    assert blocks.num_cached == 2 and admit(blocks, c) == 8  # b's were: c takes them
    blocks.free(b)
    blocks.free(c)
    assert blocks.num_cached == 2 and len(blocks.cached_free) == 2
    blocks.set_prefix_caching(False)  # off: every cached prefix is forgotten, its blocks free
    assert blocks.num_cached == 0 and not blocks.cached_free
    assert blocks.num_used == len(a.block_table) and blocks.cached_prefix(seq(3, prefix)) == 0
    with pytest.raises(ValueError, match="sliding-window"):
        BlockManager(16, B, window=8).set_prefix_caching(True)
