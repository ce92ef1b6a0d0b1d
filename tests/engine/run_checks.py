"""Checks on a serving run shared by the scheduler and serving tests, as a plain module (test
modules are not imported as libraries): an engine with a given KV budget, and the invariants
every batching policy keeps."""

from __future__ import annotations

import math

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.scheduler import SchedulerConfig
from engine.serve.loop import RunResult
from engine.serve.workload import Request


def tiny_engine_with_budget(kv_budget_bytes: int) -> LLMEngine:
    """The tiny preset with its trained weights, on CPU, with a given KV budget."""
    return LLMEngine(EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=kv_budget_bytes))


def check_invariants(result: RunResult, requests: list[Request], cfg: SchedulerConfig) -> None:
    """What every batching policy keeps, read from a run's trace: each request's tokens, one a
    step, never before it arrived; steps in order, within max_batch and the KV pool; for
    continuous batching, the token budget and chunk size."""
    by_id = {r.id: r for r in result.requests}
    assert not result.cancelled
    for req in requests:
        t = by_id[req.id]
        # every request gets exactly its output length, one token per step
        assert len(t.token_s) == len(t.output_ids) == req.output_len
        assert t.finish_s == t.token_s[-1] and t.first_token_s == t.token_s[0]
        assert all(a < b for a, b in zip(t.token_s, t.token_s[1:]))
        # no admission before arrival
        assert t.arrival_s <= t.admitted_s <= t.first_token_s
    previous_end = 0.0
    for step in result.steps:
        assert step.start_s >= previous_end and step.end_s > step.start_s
        previous_end = step.end_s
        ran = step.decode_ids + [i for i, _ in step.prefill_chunks]
        assert len(ran) == len(set(ran))
        assert all(by_id[i].arrival_s <= step.start_s for i in ran), "ran before it arrived"
        # never more than max_batch sequences hold a slot, decoding or prefilling
        assert len(ran) <= step.running <= cfg.max_batch
        assert step.decode_seqs == len(step.decode_ids)
        assert step.kv_blocks_used <= result.kv_blocks_total
        for i in step.decode_ids + step.finished_ids:
            assert step.end_s in by_id[i].token_s
    if cfg.policy == "continuous":
        budget = cfg.token_budget or math.inf
        for step in result.steps:
            assert step.num_tokens <= budget, "over the per-step token budget"
            for _, n in step.prefill_chunks:
                assert cfg.chunk_size == 0 or n <= cfg.chunk_size
