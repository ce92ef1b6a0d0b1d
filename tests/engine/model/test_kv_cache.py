"""The paged cache's geometry and the block manager's bookkeeping."""

from __future__ import annotations

import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import PRESETS, get_preset
from engine.errors import ConfigError
from engine.model.kv_cache import PagedKVCache
from engine.sequence import Sequence


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bytes_per_token_is_the_formula_and_what_is_allocated(name, dtype):
    cfg = get_preset(name)
    block_size = 16
    budget = 40 * cfg.kv_bytes_per_token(dtype.itemsize) * block_size + 123  # 40 blocks and change
    cache = PagedKVCache(cfg, budget, block_size, dtype, "cpu")
    formula = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * dtype.itemsize
    assert cache.bytes_per_token == formula
    assert cache.num_blocks == 40
    assert cache.allocated_bytes == formula * block_size * 40 <= budget


def test_budget_too_small_for_one_block_is_refused():
    with pytest.raises(ConfigError, match="holds no block"):
        PagedKVCache(get_preset("tiny"), 1000, 16, torch.float32, "cpu")


def test_blocks_grow_a_block_at_a_time_and_come_back():
    manager = BlockManager(num_blocks=10, block_size=4)
    seq = Sequence(id=0, prompt_ids=list(range(9)), max_new_tokens=8)
    assert manager.blocks_needed(seq, 9) == 3
    manager.grow(seq, 9)
    assert len(seq.block_table) == 3 and manager.num_free == 7
    seq.num_computed = 9
    manager.grow(seq, 1)  # token 10 fits in block 3 (slots 8..11)
    assert len(seq.block_table) == 3
    seq.num_computed = 12
    manager.grow(seq, 1)  # token 13 needs a fourth block
    assert len(seq.block_table) == 4 and manager.num_free == 6
    other = Sequence(id=1, prompt_ids=list(range(30)), max_new_tokens=1)
    assert not manager.can_grow(other, 30)  # 8 blocks needed, 6 free
    manager.free(seq)
    assert manager.num_free == 10 and seq.block_table == [] and seq.num_computed == 0
    assert manager.can_grow(other, 30)


def test_no_block_is_handed_out_twice():
    manager = BlockManager(num_blocks=32, block_size=16)
    seqs = [Sequence(id=i, prompt_ids=[1] * (10 + 7 * i), max_new_tokens=1) for i in range(6)]
    for s in seqs:
        manager.grow(s, s.num_uncomputed)
    owned = [b for s in seqs for b in s.block_table]
    assert len(owned) == len(set(owned)) == manager.num_used
    manager.free(seqs[2])
    manager.grow(seqs[2], 40)
    owned = [b for s in seqs for b in s.block_table]
    assert len(owned) == len(set(owned)) == manager.num_used


def test_write_puts_tokens_at_their_slots():
    cfg = get_preset("tiny")
    cache = PagedKVCache(cfg, 4 * cfg.kv_bytes_per_token(4) * 16, 16, torch.float32, "cpu")
    k = torch.randn(3, cfg.kv_heads, cfg.head_dim)
    v = torch.randn(3, cfg.kv_heads, cfg.head_dim)
    slots = torch.tensor([5, 16 * 2 + 3, 63])
    cache.write(1, slots, k, v)
    assert torch.equal(cache.k[1, 0, 5], k[0]) and torch.equal(cache.v[1, 2, 3], v[1])
    assert torch.equal(cache.k[1, 3, 15], k[2])
    assert cache.k[0].abs().sum() == 0  # other layers untouched
