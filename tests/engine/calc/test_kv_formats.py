"""The KV-format formulas the pages show, against the engine's real cache and allocator."""

from __future__ import annotations

import pytest
import torch

from engine.block_manager import BlockManager
from engine.calc.gpu_scaling import H100, LLAMA_3_8B
from engine.calc.kv_formats import (
    H200,
    fp8_bytes_per_block,
    gpu_kv_row,
    hybrid_blocks,
    hybrid_bytes_per_token,
    requests_that_fit,
)
from engine.config import get_preset
from engine.model.kv_cache import PagedKVCache
from engine.sequence import Sequence

BUDGET = 4 * 2**20


@pytest.mark.parametrize("name", ["tiny", "mini", "tiny-hybrid"])
def test_the_fp8_block_is_what_the_engine_allocates(name):
    cfg = get_preset(name)
    cache = PagedKVCache(cfg, BUDGET, 16, torch.float32, "cpu", kv_dtype="fp8")
    layers = cfg.layers // 2 if cfg.sliding_window else cfg.layers  # a hybrid block: one group
    assert cache.bytes_per_block == fp8_bytes_per_block(layers, cfg.kv_heads, cfg.head_dim, 16)
    assert cache.allocated_bytes == cache.num_blocks * cache.bytes_per_block


def fill(cache: PagedKVCache, tokens: int, window: int) -> int:
    """Requests of `tokens` tokens the engine's allocator admits, each prefilled in 64-token
    chunks and then one decode step (blocks behind the window given back as it goes)."""
    manager, admitted = BlockManager(cache.num_blocks, 16, window=window), []
    while True:
        seq = Sequence(len(admitted), [1] * tokens, 1)
        while seq.num_computed < tokens - 1:
            count = min(64, tokens - 1 - seq.num_computed)
            if not manager.can_grow(seq, count):
                manager.free(seq)
                return len(admitted)
            manager.grow(seq, count)
            seq.num_computed += count
        if not manager.can_grow(seq, 1):
            manager.free(seq)
            return len(admitted)
        manager.grow(seq, 1)
        admitted.append(seq)
        full, windowed = hybrid_blocks(tokens, 16, window) if window else (0, 0)
        if window:
            assert len(seq.block_table) == full and manager.window_blocks(seq) <= windowed


@pytest.mark.parametrize("tokens", [100, 300, 700])
def test_requests_that_fit_match_the_allocator_for_full_and_hybrid(tokens):
    full_cfg, hybrid_cfg = get_preset("tiny"), get_preset("tiny-hybrid")
    shape = (full_cfg.layers, full_cfg.kv_heads, full_cfg.head_dim, 4, 16)
    full = PagedKVCache(full_cfg, BUDGET, 16, torch.float32, "cpu")
    hybrid = PagedKVCache(hybrid_cfg, BUDGET, 16, torch.float32, "cpu")
    assert fill(full, tokens, 0) == requests_that_fit(BUDGET, tokens, *shape)
    # the formula counts the window's worst case (ceil(W / B) + 1 blocks): the allocator
    # admits that many, or one more where a request's window sits on block boundaries
    counted = requests_that_fit(BUDGET, tokens, *shape, window=256)
    assert counted <= fill(hybrid, tokens, 256) <= counted + counted // 16 + 1
    if tokens > 2 * 256:  # well past the window, hybrid fits more
        assert counted > requests_that_fit(BUDGET, tokens, *shape)


def test_hybrid_bytes_per_token_tend_to_half_of_full():
    full = 2 * 6 * 2 * 32 * 4
    assert hybrid_bytes_per_token(64, 6, 2, 32, 4, 16, 256) == full
    assert full / 2 < hybrid_bytes_per_token(2048, 6, 2, 32, 4, 16, 256) < 0.6 * full


def test_llama_3_8b_on_an_h100_and_an_h200():
    assert LLAMA_3_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    h100, h200 = gpu_kv_row(H100, 8192), gpu_kv_row(H200, 8192)
    assert h100.free_bytes == pytest.approx(80e9 - 16.06e9)
    assert h100.fp8_tokens == 2 * h100.bf16_tokens or h100.fp8_tokens == 2 * h100.bf16_tokens + 1
    assert h100.bf16_sequences == int((80e9 - 16.06e9) // (131072 * 8192)) == 59
    assert h200.fp8_sequences == int((141e9 - 16.06e9) // (65536 * 8192)) == 232
