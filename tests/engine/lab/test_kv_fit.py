"""The worker sizes an engine's KV pool to what the job at hand holds (engine.lab.jobs.engines):
it grows for a big batch, shrinks again for a small one, keeps an explicit budget, and the
resized engine still decodes exactly as before."""

from __future__ import annotations

import pytest

from engine.lab.jobs import engines
from engine.lab.jobs.engines import engine_for, fit_kv, resident_lengths, smallest_pool_bytes
from engine.lab.worker import run
from engine.serve.workload import Request


@pytest.fixture
def fresh_engines():
    saved = dict(engines._engines)
    engines._engines.clear()
    yield
    engines._engines.clear()
    engines._engines.update(saved)


def test_a_pool_starts_small_grows_for_a_big_job_and_shrinks_back(fresh_engines):
    engine = engine_for("tiny", "cpu")
    start = engine.cache.allocated_bytes
    assert start <= smallest_pool_bytes("tiny", "cpu") < 8 * 2**20  # one context, not a GiB
    assert engine.cache.capacity_tokens >= engine.model_config.context
    fit_kv(engine, [160] * 64)
    grown = engine.cache.num_blocks
    assert grown >= 64 * 10 + 1 and grown & (grown - 1) == 0  # room for all, a power of two
    fit_kv(engine, [160] * 40)
    assert engine.cache.num_blocks == grown  # fits: left alone
    fit_kv(engine, [96])
    assert engine.cache.allocated_bytes <= start  # a quarter or less in use: shrunk
    assert engine.blocks.num_used == 0


def test_an_explicit_budget_is_kept(fresh_engines):
    engine = engine_for("tiny", "cpu", kv_budget_mib=2)
    blocks = engine.cache.num_blocks
    fit_kv(engine, [160] * 64)
    assert engine.cache.num_blocks == blocks


def test_a_job_runs_the_same_before_and_after_the_pool_is_resized(fresh_engines):
    params = {"prompt": "The cache", "max_new_tokens": 12, "device": "cpu"}
    first = run("generate", params, lambda *a: None, lambda: False)
    run("sweep_point", {"batch_size": 48, "prompt_len": 64, "new_tokens": 8, "device": "cpu"},
        lambda *a: None, lambda: False)  # grows the pool
    assert engine_for("tiny", "cpu").cache.capacity_tokens >= 48 * 72
    again = run("generate", params, lambda *a: None, lambda: False)  # shrinks it back
    assert again["text"] == first["text"]


def test_a_served_run_holds_at_most_its_max_batch_longest_requests():
    requests = [Request(id=i, prompt_ids=[1] * p, output_len=o, arrival_s=0.0)
                for i, (p, o) in enumerate([(10, 5), (100, 50), (30, 1), (60, 60)])]
    assert resident_lengths(requests, 2) == [149, 119]
    assert sum(resident_lengths(requests, 10)) == 14 + 149 + 30 + 119
