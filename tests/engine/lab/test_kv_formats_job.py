"""Lesson 6's formats job (engine.lab.jobs.kv_formats), run in this process: each figure equals
the engine's own, found independently here: the pool each format builds in the budget, the
requests the block manager really holds at once, fp8's quality computed directly on both
caches, and the hybrid preset's blocks against what its allocator gives sequences growing in
step. What it reports, not how fast."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.kv_quality import kv_quality
from engine.lab import worker
from engine.lab.results import KVFormatsResult, parse_result
from engine.lab.worker import plain
from engine.llm_engine import LLMEngine

PARAMS = {"device": "cpu", "budget_mib": 4, "batch_size": 2, "prompt_len": 32,
          "new_tokens": 10, "windows": 1, "contexts": [200, 600], "hybrid_prompt": 64,
          "chunk_size": 64}
BUDGET = 4 * 2**20


@pytest.fixture(scope="module")
def result() -> KVFormatsResult:
    out = worker.run("kv_formats", PARAMS, lambda t, d: None, lambda: False)
    record = parse_result("kv_formats", plain(out))
    assert record.to_dict() == plain(out)
    return record


def fits_in_step(engine: LLMEngine, count: int, tokens: int, prompt: int, chunk: int) -> bool:
    """Whether `count` sequences growing side by side (prompt in chunks, then a token a step)
    all get their blocks from the engine's block manager to `tokens` positions."""
    seqs = [engine.new_sequence([1] * prompt, tokens - prompt + 1, ignore_eos=True)
            for _ in range(count)]
    try:
        done = 0
        while done < tokens:
            new = min(chunk, prompt - done) if done < prompt else 1
            for seq in seqs:
                if not engine.reserve(seq, new):
                    return False
            for seq in seqs:
                seq.num_computed += new
            done += new
        return True
    finally:
        for seq in seqs:
            engine.release(seq)


def test_each_formats_pool_and_the_requests_it_holds_are_the_engines(result):
    tokens = PARAMS["prompt_len"] + PARAMS["new_tokens"]
    by = {f.kv_dtype: f for f in result.formats}
    assert set(by) == {"float32", "fp8"}
    for kv_dtype, row in (("auto", by["float32"]), ("fp8", by["fp8"])):
        engine = LLMEngine(EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=BUDGET,
                                        kv_dtype=kv_dtype))
        assert (row.blocks, row.bytes_per_block) == (engine.cache.num_blocks,
                                                     engine.cache.bytes_per_block)
        assert fits_in_step(engine, row.requests_fit, tokens, PARAMS["prompt_len"], 10**6)
        assert not fits_in_step(engine, row.requests_fit + 1, tokens, PARAMS["prompt_len"],
                                10**6)
        assert row.steps_timed == len(row.step_ms_all) and row.step_ms > 0
    assert by["fp8"].blocks > 3.9 * by["float32"].blocks


def test_fp8_quality_is_what_both_caches_give_directly(result):
    engine = LLMEngine(EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=BUDGET))
    direct = kv_quality(engine, PARAMS["windows"])
    q = result.quality
    assert (q.positions, q.agreement) == (direct.positions, direct.agreement)
    assert q.loss_fp8 == pytest.approx(direct.loss_fp8, rel=1e-6)
    assert q.max_logit_diff == pytest.approx(direct.max_logit_diff, rel=1e-6)
    assert 0 < q.max_logit_diff and q.agreement > 0.9


def test_the_hybrid_rows_are_what_the_allocator_gives(result):
    rows = {(h.preset, h.tokens): h for h in result.hybrid}
    assert set(rows) == {(p, t) for p in ("tiny", "tiny-hybrid") for t in (200, 600)}
    for (preset, tokens), row in rows.items():
        engine = LLMEngine(EngineConfig(preset=preset, device="cpu", backend="torch",
                                        kv_budget_bytes=BUDGET, random_weights=True))
        assert row.pool_blocks == engine.cache.num_blocks
        assert row.bytes_per_block == engine.cache.bytes_per_block
        prompt, chunk = row.prompt, PARAMS["chunk_size"]
        assert fits_in_step(engine, row.requests_fit, tokens, prompt, chunk)
        assert not fits_in_step(engine, row.requests_fit + 1, tokens, prompt, chunk)
        seq = engine.new_sequence([1] * prompt, tokens - prompt + 1, ignore_eos=True)
        done = 0
        while done < tokens:  # one sequence: what it holds at the end is the row's kv_bytes
            new = min(chunk, prompt - done) if done < prompt else 1
            engine.reserve(seq, new)
            seq.num_computed += new
            done += new
        assert row.kv_bytes == engine.blocks.num_used * engine.cache.bytes_per_block
        engine.release(seq)
    # past the window the hybrid holds fewer bytes a token, and more requests fit
    assert rows[("tiny-hybrid", 600)].bytes_per_token < rows[("tiny", 600)].bytes_per_token
    assert rows[("tiny-hybrid", 600)].requests_fit > rows[("tiny", 600)].requests_fit
    assert rows[("tiny-hybrid", 200)].bytes_per_token == rows[("tiny", 200)].bytes_per_token
