"""A hybrid model's KV counted one way everywhere: block_manager.peak_blocks (what admission,
the static batch and the serve loop's checks ask, through engine.blocks_per_sequence) equals the
most blocks the block manager really holds for a sequence, and sweep's kv_bytes counts the
window layers' blocks as well as the full layers'."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager, blocks_for, peak_blocks
from engine.config import EngineConfig
from engine.errors import ConfigError
from engine.llm_engine import LLMEngine
from engine.scheduler import SchedulerConfig
from engine.sequence import Sequence
from engine.serve.loop import check_request, run
from engine.serve.workload import Request
from engine.sweep import measure_point


def most_held(tokens: int, block: int, window: int, prefill: int, chunk: int) -> int:
    """Grow a sequence as the engine does (prefill chunks, then one token a step) and return
    the most blocks the block manager gave it at once."""
    blocks = BlockManager(4096, block, window=window)
    seq = Sequence(0, [1] * prefill, tokens - prefill + 1)
    most, n = 0, 0
    while n < tokens:
        new = min(chunk or prefill, prefill - n) if n < prefill else 1
        blocks.grow(seq, new)
        most = max(most, blocks.num_used)
        seq.num_computed += new
        n += new
    blocks.free(seq)
    assert blocks.num_used == 0
    return most


@pytest.mark.parametrize("tokens,prefill,chunk", [
    (40, 40, 0), (40, 10, 0), (300, 100, 0), (300, 300, 64), (1000, 200, 0), (1000, 1000, 48),
    (17, 1, 0), (64, 63, 7)])
@pytest.mark.parametrize("window", [0, 8, 20, 64])
def test_peak_blocks_equals_what_the_block_manager_holds(tokens, prefill, chunk, window):
    block = 16
    assert peak_blocks(tokens, block, window, prefill, chunk) == most_held(
        tokens, block, window, prefill, chunk)


def test_a_long_hybrid_decode_needs_about_one_table_and_a_whole_prompt_two():
    # 1,000 tokens decoded after a 100-token prompt: 63 full blocks and the window's 5 at most
    assert peak_blocks(1000, 16, 64, prefill=100) == 63 + blocks_for(64, 16) + 1
    # a whole 1,000-token prompt in one chunk holds both tables' 63 during its step
    assert peak_blocks(1000, 16, 64) == 2 * 63
    assert peak_blocks(1000, 16, 0) == 63


@pytest.fixture(scope="module")
def hybrid() -> LLMEngine:
    """tiny-hybrid (random weights: timing only) with a pool of 64 blocks of 16 tokens."""
    probe = LLMEngine(EngineConfig(preset="tiny-hybrid", device="cpu", backend="torch",
                                   kv_budget_bytes=2**20))
    per_block = probe.cache.bytes_per_block
    return LLMEngine(EngineConfig(preset="tiny-hybrid", device="cpu", backend="torch",
                                  kv_budget_bytes=65 * per_block))


def test_a_static_batch_admits_what_the_pool_holds_at_each_members_peak(hybrid):
    blocks = hybrid.blocks.num_blocks
    # prompt 20, output 200: 14 full blocks at the end and, inside the 256-token window, 14
    # window blocks beside them (one table's count would let four start and run dry)
    each = hybrid.blocks_per_sequence(219, prefill=20)
    assert each == peak_blocks(219, 16, 256, 20) == 28
    fit = blocks // each
    assert fit == 2
    requests = [Request(i, [5 + i] * 20, 200, 0.0, stop_at_eos=False) for i in range(fit + 1)]
    config = SchedulerConfig("static", max_batch=fit + 1)
    result = run(hybrid, requests, config)
    first = [r for r in result.requests if r.admitted_s == result.requests[0].admitted_s]
    assert len(first) == fit  # the next one waited for the batch to end: it did not fit
    assert all(r.output_len == 200 for r in result.requests)
    assert hybrid.blocks.num_used == 0


def test_the_serve_checks_refuse_what_could_never_fit_and_accept_what_can(hybrid):
    pool = hybrid.blocks.num_blocks  # 64 blocks of 16 tokens: one table of 1,024 tokens
    long_decode = Request(0, [3] * 16, 700)  # 45 full blocks and 17 window blocks at most
    assert hybrid.blocks_per_sequence(715, prefill=16) == 62
    check_request(hybrid, long_decode, SchedulerConfig("static", max_batch=1))
    # a whole prompt of 700 tokens holds 44 blocks in each table during its step: 88 > 64
    whole = Request(1, [3] * 700, 10)
    assert hybrid.blocks_per_sequence(709, prefill=700) > pool
    with pytest.raises(ConfigError, match="KV blocks"):
        check_request(hybrid, whole, SchedulerConfig("static", max_batch=1))
    with pytest.raises(ConfigError, match="KV blocks"):  # unchunked continuous: the same
        check_request(hybrid, whole, SchedulerConfig("continuous", chunk_size=0))
    # in chunks of 64 it never holds more than its full table and the window's blocks
    check_request(hybrid, whole, SchedulerConfig("continuous", chunk_size=64))


def test_sweep_kv_bytes_are_the_blocks_the_manager_holds_in_both_tables(hybrid):
    used = []
    point = measure_point(hybrid, 2, prompt_len=150, new_tokens=8,
                          on_step=lambda done, total: used.append(hybrid.blocks.num_used))
    per_block = hybrid.cache.bytes_per_block
    assert point.kv_bytes == used[-1] * per_block
    # 157 positions, all inside the 256-token window: each table holds 10 blocks
    assert point.kv_bytes == 2 * (10 + 10) * per_block
