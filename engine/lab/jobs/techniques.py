"""Jobs for the lessons on serving techniques, each one measurement a page compares against
the same engine without the technique (run as a second job):

- `prefix_cache`: requests that all start with the same system prompt, served one at a time
  (a closed loop of one user, so each TTFT is that request's prefill alone), with the engine's
  prefix cache on or off. The cache is cleared first, so the first request always computes the
  shared prompt; the later ones find it cached when the cache is on. Reports every request's
  TTFT and how many of its prompt tokens came from the cache, and the cache's counters.
- `speculative`: greedy generation from corpus prompts for a batch of sequences, plainly or
  with speculative decoding (prompt lookup or the draft model proposing k tokens a step, the
  target verifying them in one step). Reports TPOT, target steps, and the acceptance figures
  beside the formula (1 - a^(k+1)) / (1 - a).
"""

from __future__ import annotations

import statistics

import numpy as np

from ...generate import generate
from ...llm_engine import LLMEngine
from ...scheduler import SchedulerConfig
from ...serve.loop import run
from ...serve.trace import RequestEvent
from ...serve.workload import PromptSource, WorkloadSpec, make_workload
from ...speculative import Draft, ModelDraft, SpeculativeDecoder, make_draft
from ...steps import Steps
from ..control import Control
from ..quality import spread
from ..registry import Emit
from .engines import engine_from_params
from .generation import gaps_ms
from .serving import step_spread

ONE_AT_A_TIME = SchedulerConfig("continuous", max_batch=1, chunk_size=0)


def prefix_cache_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """Requests sharing a system prompt, one at a time, with the prefix cache on or off."""
    engine = engine_from_params(params)  # with the prefix cache on or off, as asked
    count = params["requests"]
    spec = WorkloadSpec(kind="fixed", requests=count, concurrency=1,
                        prompt_len=tuple(params["prompt_len"]),
                        output_len=(params["output_len"], params["output_len"]),
                        shared_prefix_len=params["shared_prefix_len"], seed=params["seed"])
    spec.validate()
    requests = make_workload(spec, engine.tokenizer)
    engine.blocks.clear_cache()  # a cold start: the first request finds nothing
    finished = 0

    def on_event(event) -> None:
        nonlocal finished
        if isinstance(event, RequestEvent) and event.kind == "finished":
            finished += 1
            emit("progress", {"done": finished, "total": count, "message": "requests answered"})

    emit("progress", {"done": 0, "total": count, "message": "requests answered"})
    result = run(engine, requests, ONE_AT_A_TIME, on_event=on_event, cancelled=control)
    if result.cancelled or control.cancelled():
        return None
    cache = result.extra.get("prefix_cache")
    cached = cache["cached_tokens"] if cache else [0] * count
    rows = [{"id": r.id, "prompt_tokens": r.prompt_len, "cached_tokens": c,
             "ttft_ms": 1000 * (r.first_token_s - r.arrival_s)}
            for r, c in zip(result.requests, cached, strict=True)]
    stats = None
    if cache:
        stats = {k: cache[k] for k in ("lookups", "lookup_tokens", "hits", "hit_blocks",
                                       "tokens_skipped", "blocks_shared", "evictions",
                                       "token_hit_rate", "cached_blocks_at_end")}
    later = [r["ttft_ms"] for r in rows[1:]]
    return {
        "device": engine.device,
        "preset": params["preset"],
        "weights": result.weights,
        "prefix_cache": params["prefix_cache"],
        "shared_prefix_len": params["shared_prefix_len"],
        "block_size": result.block_size,
        "kv_blocks_total": result.kv_blocks_total,
        "requests": rows,
        "first_ttft_ms": rows[0]["ttft_ms"],
        "later_ttft_ms": statistics.mean(later) if later else None,
        "stats": stats,
        "spread": step_spread(result.steps),  # how steady its engine steps were
    }


# ---- speculative decoding -------------------------------------------------------------------
_drafts: dict[tuple[int, str], Draft] = {}  # (id of the target engine, method) -> its draft
_draft_builds: dict[tuple[int, str], Steps[None]] = {}  # a draft model's build, between steps


def draft_for(engine: LLMEngine, method: str) -> Draft:
    """The draft for a target engine, built once (the draft model loads its own engine)."""
    key = (id(engine), method)
    if key not in _drafts:
        _keep_draft(key, make_draft(method, engine))
    return _drafts[key]


def _keep_draft(key: tuple[int, str], draft: Draft) -> None:
    _drafts.clear()  # drafts of engines the worker may have dropped go with them
    _drafts[key] = draft


def draft_steps(params: dict) -> tuple[str, Steps[None]] | None:
    """What a speculative job builds besides its engine, for the worker to run in steps before
    the job's work (engine.lab.worker.prepare_more): the draft model of method "draft" (about
    10 s on a CPU), so that other readers' short jobs may run between its steps instead of
    waiting for all of it. None when there is nothing to build. A build stopped between two
    steps is kept (one at most) and the next call gives it back to go on where it stopped."""
    if params["method"] != "draft":
        return None
    engine = engine_from_params(params)  # built already: the worker builds it first
    key = (id(engine), "draft")
    if key in _drafts:
        return None
    if key not in _draft_builds:
        _draft_builds.clear()

        def build() -> Steps[None]:
            try:
                _keep_draft(key, (yield from ModelDraft.build_steps(engine)))
            finally:  # built, failed or given up: not to be gone on with
                _draft_builds.pop(key, None)

        _draft_builds[key] = build()
    return "loading the draft model", _draft_builds[key]


def speculative_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """Greedy generation for a batch of corpus prompts, plain or speculative."""
    engine = engine_from_params(params)
    method, k, batch = params["method"], params["k"], params["batch_size"]
    new_tokens = params["new_tokens"]
    rng = np.random.default_rng(params["seed"])
    source = PromptSource(engine.tokenizer)
    prompts = [source.prompt(params["prompt_len"], rng) for _ in range(batch)]
    decoder = None if method == "off" else SpeculativeDecoder(engine, draft_for(engine, method), k)
    total, done = batch * new_tokens, 0

    def on_token(event) -> None:
        nonlocal done
        done += 1
        if done % 16 == 0 or done == total:
            emit("progress", {"done": done, "total": total, "message": "tokens generated"})

    emit("progress", {"done": 0, "total": total, "message": "tokens generated"})
    gens = generate(engine, prompts, new_tokens, on_token=on_token, cancelled=control,
                    ignore_eos=True, speculative=decoder)
    if control.cancelled():
        return None
    stats = decoder.stats if decoder is not None else None
    return {
        "device": engine.device,
        "preset": params["preset"],
        "weights": "random" if params["random_weights"] else engine.model_config.weights,
        "method": method,
        "k": k if decoder is not None else 0,
        "batch_size": batch,
        "prompt_len": params["prompt_len"],
        "new_tokens": new_tokens,
        "tpot_ms": statistics.mean(g.tpot_ms for g in gens),
        "ttft_ms": statistics.mean(g.ttft_ms for g in gens),
        "duration_ms": 1000 * max(g.token_times[-1] for g in gens),
        "text": gens[0].text,
        "output_ids": [g.seq.output_ids for g in gens],
        "target_steps": stats.steps if stats else new_tokens - 1,
        "proposed": stats.proposed if stats else 0,
        "accepted": stats.accepted if stats else 0,
        "acceptance_rate": stats.acceptance_rate if stats else None,
        "alpha": stats.alpha if stats else None,
        "tokens_per_step": stats.tokens_per_round if stats else 1.0,
        "expected_tokens_per_step": stats.expected_tokens() if stats else None,
        "expected_tokens_per_step_at_k": stats.expected_tokens(k) if stats else None,
        "draft_ms": 1000 * stats.draft_s if stats else 0.0,
        "verify_ms": 1000 * stats.verify_s if stats else 0.0,
        # how steady the token gaps were (a speculative step gives several tokens at once)
        "spread": spread([gap for g in gens for gap in gaps_ms(g.token_times)], "token gap"),
        "gaps_ms": [gaps_ms(g.token_times) for g in gens],  # each prompt's: tpot_ms is their mean
    }
