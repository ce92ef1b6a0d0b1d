"""Hybrid attention: window layers equal a masked dense reference through the paged engine
(chunked prefill, batched decode, shuffled blocks, blocks freed behind the window), and the
blocks a long request holds match the formula."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from engine.block_manager import FREED, BlockManager, blocks_for
from engine.config import ModelConfig, get_preset
from engine.model.kv_cache import PagedKVCache
from engine.model.model import LlamaModel
from engine.model_runner import ModelRunner
from engine.sequence import Sequence

BLOCK, WINDOW = 4, 8
CFG = ModelConfig(name="hybrid-test", layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16,
                  intermediate=128, vocab=128, context=256, weights="random",
                  sliding_window=WINDOW)


def dense_logits(model: LlamaModel, tokens: list[int], window: int | None) -> torch.Tensor:
    """Every position's logits from one dense forward pass: causal attention, masked to the
    last `window` positions in the windowed layers (None: no window anywhere)."""
    n = len(tokens)
    rows = torch.arange(n)[:, None]
    keys = torch.arange(n)[None, :]

    def attend(layer, q, k, v):
        mask = keys <= rows
        if window is not None and CFG.windowed[layer]:
            mask = mask & (keys > rows - window)
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                             v.transpose(0, 1)[None], attn_mask=mask,
                                             enable_gqa=True)
        return out[0].transpose(0, 1).reshape(n, -1)

    with torch.inference_mode():
        return model.logits(model(torch.tensor(tokens), torch.arange(n), attend))


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    m = LlamaModel(CFG)
    m.init_random(0)
    return m.eval()


def test_window_layers_through_the_paged_engine_equal_the_masked_dense_reference(model):
    cache = PagedKVCache(CFG, 64 * CFG.kv_bytes_per_token(4) // 2 * BLOCK, BLOCK,
                         torch.float32, "cpu")
    assert cache.num_blocks == 64  # a block holds half the layers: a window or a full group
    blocks = BlockManager(cache.num_blocks, BLOCK, window=WINDOW)
    random.Random(0).shuffle(blocks.free_blocks)
    runner = ModelRunner(model, cache, "torch", "cpu", scratch_block=blocks.take_scratch_block())
    rng = random.Random(1)
    seqs = [Sequence(i, [rng.randrange(CFG.vocab) for _ in range(n)], 20)
            for i, n in enumerate((25, 9))]
    logits: dict[int, list[torch.Tensor]] = {s.id: [] for s in seqs}

    def run(decode, prefill):
        for seq in decode:
            blocks.grow(seq, 1)
        for seq, count in prefill:
            blocks.grow(seq, count)
        tokens = runner.step(decode, prefill)
        for seq in [*decode, *(s for s, _ in prefill)]:
            if seq.id in tokens:
                seq.output_ids.append(tokens[seq.id])
                logits[seq.id].append(runner.last_logits[seq.id])

    for start in range(0, 25, 10):  # the long prompt in chunks of 10
        run([], [(seqs[0], min(10, 25 - start))])
    run([], [(seqs[1], 9)])
    for _ in range(12):  # both decode together, past several windows
        run(seqs, [])
        window_held = [b for s in seqs for b in s.window_table if b != FREED]
        full_held = [b for s in seqs for b in s.block_table]
        assert len(set(window_held + full_held)) == len(window_held) + len(full_held)
        assert blocks.num_used == len(window_held) + len(full_held)
        for s in seqs:
            assert blocks.window_blocks(s) <= -(-WINDOW // BLOCK) + 1
    for seq in seqs:
        tokens = seq.token_ids[:-1]  # the last token sampled has not run yet
        want = dense_logits(model, tokens, WINDOW)[len(seq.prompt_ids) - 1:]
        got = torch.stack(logits[seq.id])
        assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
        no_window = dense_logits(model, tokens, None)[len(seq.prompt_ids) - 1:]
        assert not torch.allclose(got, no_window, atol=1e-2)  # the window changes the answer
        blocks.free(seq)
    assert blocks.num_used == 0


@pytest.mark.parametrize("chunk", [256, 2048])
def test_a_long_request_holds_full_blocks_for_its_context_and_window_blocks_for_its_window(chunk):
    cfg = get_preset("tiny-hybrid")
    block, window = 16, cfg.sliding_window
    cache = PagedKVCache(cfg, 2**23, block, torch.float32, "cpu")
    assert cache.bytes_per_token == cfg.kv_bytes_per_token(4) // 2
    blocks = BlockManager(cache.num_blocks, block, window=window)
    seq = Sequence(0, [1] * 1500, 500)
    for start in range(0, 1500, chunk):  # what the engine does: grow, then the step's tokens
        count = min(chunk, 1500 - start)
        blocks.grow(seq, count)
        held = blocks.window_blocks(seq)
        assert held <= blocks_for(window + count - 1, block) + 1
        seq.num_computed += count
    most = 0
    for length in range(1500, 2000):
        blocks.grow(seq, 1)
        seq.num_computed += 1
        assert len(seq.block_table) == blocks_for(length + 1, block)
        most = max(most, blocks.window_blocks(seq))
        assert blocks.num_used == len(seq.block_table) + blocks.window_blocks(seq)
    # ceil(2000 / 16) full blocks; the window's ceil(256 / 16) + 1 while it straddles a block
    assert len(seq.block_table) == 125 and most == blocks_for(window, block) + 1 == 17
    blocks.free(seq)
    assert blocks.num_used == 0 and blocks.num_free == cache.num_blocks
