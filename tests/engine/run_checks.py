"""Checks on a serving run shared by the scheduler, serving, HTTP and bench-client tests, as a
plain module (test modules are not imported as libraries): an engine with a given KV budget,
the invariants every batching policy keeps, greedy outputs that agree up to genuine near-ties,
and the `run` JSON contract."""

from __future__ import annotations

import json
import math

import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.model import full_logits
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


NEAR_TIE = 1e-3  # logits closer than this are a genuine tie: either token is a right answer


def top2_margin(engine, ids: list[int]) -> float:
    """Gap between the two largest next-token logits after ids, by a full recompute."""
    with torch.inference_mode():
        logits = full_logits(engine.model, torch.tensor([ids]))[0, -1].float()
    logits = logits[: min(engine.tokenizer.vocab_size, logits.shape[-1])]
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def assert_same_greedy_output(engine, requests, reference, other, label):
    """Identical tokens, except after a divergence at a genuine near-tie (checked by margin)."""
    for req in requests:
        a, b = reference[req.id], other[req.id]
        assert len(a) == len(b) == req.output_len
        if a == b:
            continue
        i = next(k for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        margin = top2_margin(engine, req.prompt_ids + a[:i])
        assert margin < NEAR_TIE, (f"{label}: request {req.id} differs at token {i} although "
                                   f"the top two logits are {margin:.4f} apart")


def check_run_shape(out: dict) -> None:
    """The `run` JSON contract (DESIGN.md), which bench-client prints too."""
    json.dumps(out, allow_nan=False)
    assert {"device", "preset", "policy", "requests", "steps", "metrics"} <= out.keys()
    for r in out["requests"]:
        assert {"id", "arrival_s", "admitted_s", "first_token_s", "finish_s", "prompt_len",
                "output_len", "token_s", "preemptions"} <= r.keys()
    for s in out["steps"]:
        assert {"start_s", "end_s", "prefill_tokens", "decode_seqs", "kv_blocks_used"} <= s.keys()
    m = out["metrics"]
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        assert {"mean", "p50", "p90", "p95", "p99", "max"} <= m[name].keys()
    assert {"throughput_tok_s", "requests_per_s", "goodput_rps"} <= m.keys()
