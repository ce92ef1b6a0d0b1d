"""Prefix caching on the real tiny model: requests that share a system prompt produce the same
greedy tokens with the cache as without it, while skipping the shared prefill; under KV pressure
cached blocks are evicted and preempted requests come back, still with the same tokens."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.workload import WorkloadSpec, make_workload

SHARED = 48  # three blocks of 16


def workload(engine, **spec):
    defaults = dict(kind="fixed", requests=6, concurrency=2, prompt_len=(4, 20),
                    output_len=(4, 10), shared_prefix_len=SHARED, seed=3)
    return make_workload(WorkloadSpec(**{**defaults, **spec}), engine.tokenizer)


def cached_engine(kv_budget_bytes: int) -> LLMEngine:
    return LLMEngine(EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=kv_budget_bytes,
                                  prefix_caching=True))


def outputs(result) -> dict[int, list[int]]:
    return {r.id: r.output_ids for r in result.requests}


@pytest.fixture(scope="module")
def cached() -> LLMEngine:
    return cached_engine(8 * 2**20)


def prefilled(result) -> dict[int, int]:
    """Prompt tokens each request ran through the model."""
    done: dict[int, int] = {}
    for step in result.steps:
        for i, n in step.prefill_chunks:
            done[i] = done.get(i, 0) + n
    return done


def test_same_tokens_with_and_without_the_cache(engine, cached):
    requests = workload(engine)
    config = SchedulerConfig(policy="continuous", max_batch=2, chunk_size=0)
    plain = run(engine, requests, config)
    hit = run(cached, workload(engine), config)
    assert outputs(hit) == outputs(plain)
    stats = hit.to_json()["prefix_cache"]
    # the first two start together (nothing cached yet); every later one finds the prefix
    assert stats["cached_tokens"] == [0, 0] + [SHARED] * 4
    assert stats["hits"] == 4 and stats["tokens_skipped"] == 4 * SHARED
    assert prefilled(hit) == {r.id: len(r.prompt_ids) - (SHARED if r.id > 1 else 0)
                              for r in requests}
    assert prefilled(plain) == {r.id: len(r.prompt_ids) for r in requests}
    assert "prefix_cache" not in plain.to_json()
    assert all(r == 0 for r in cached.blocks.ref_counts) and cached.blocks.num_used == 0
    assert cached.blocks.num_cached > 0  # kept for the next request


def test_static_batches_take_cached_prefixes_too(engine, cached):
    cached.blocks.clear_cache()
    config = SchedulerConfig(policy="static", max_batch=2)
    plain = run(engine, workload(engine), config)
    hit = run(cached, workload(engine), config)
    assert outputs(hit) == outputs(plain)
    assert hit.to_json()["prefix_cache"]["cached_tokens"] == [0, 0] + [SHARED] * 4


def test_under_pressure_blocks_are_evicted_and_preempted_requests_still_match(engine):
    small = cached_engine(13 * 16 * engine.cache.bytes_per_token)  # 12 blocks after the scratch
    spec = dict(kind="poisson", rate=float("inf"), requests=8, prompt_len=(8, 40),
                output_len=(8, 24))
    config = SchedulerConfig(policy="continuous", max_batch=4, chunk_size=32)
    plain = run(engine, workload(engine, **spec), config)
    hit = run(small, workload(engine, **spec), config)
    assert outputs(hit) == outputs(plain)
    stats = hit.to_json()["prefix_cache"]
    assert stats["hits"] > 0 and stats["evictions"] > 0
    assert sum(r.preemptions for r in hit.requests) > 0
    assert all(r == 0 for r in small.blocks.ref_counts) and small.blocks.num_used == 0
