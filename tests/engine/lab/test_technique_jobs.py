"""The prefix_cache and speculative jobs (engine.lab.jobs.techniques), run in this process on the
trained tiny preset: what they report and that it agrees with itself and with the engine without
the technique (same tokens), not how fast."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.lab import registry, worker
from engine.lab.control import Control
from engine.lab.jobs.engines import _engines
from engine.lab.results import PrefixCacheResult, SpeculativeResult, parse_result
from engine.lab.worker import plain

SMALL_KV = {"kv_budget_mib": 64}


def run_job(kind: str, params: dict):
    events: list[tuple[str, dict]] = []
    def emit(type_: str, data: dict) -> None:
        if "building" not in data:  # the body's own events, not its engine's build
            events.append((type_, data))

    result = worker.run(kind, params, emit, lambda: False)
    assert result is not None
    record = parse_result(kind, plain(result))
    assert record.to_dict() == plain(result)  # its record reads it and gives it back unchanged
    return record, events


PREFIX = {**SMALL_KV, "shared_prefix_len": 128, "requests": 3, "prompt_len": [8, 16],
          "output_len": 2}


def test_the_prefix_cache_serves_the_shared_prompt_from_the_cache_after_the_first_request():
    on, events = run_job("prefix_cache", PREFIX)
    assert isinstance(on, PrefixCacheResult) and on.prefix_cache
    first, *later = on.requests
    assert first.cached_tokens == 0  # a cold start, even on an engine that served it before
    for r in later:  # the shared prompt's full blocks, never the request's own tokens
        assert r.cached_tokens == 128 and r.prompt_tokens > 128
    stats = on.stats
    assert stats.lookups == 3 and stats.hits == 2 and stats.tokens_skipped == 256
    assert stats.hit_blocks == 2 * 128 // on.block_size
    assert stats.token_hit_rate == pytest.approx(256 / sum(r.prompt_tokens for r in on.requests))
    assert on.later_ttft_ms == pytest.approx(sum(r.ttft_ms for r in later) / 2)
    assert events[-1] == ("progress", {"done": 3, "total": 3, "message": "requests answered"})
    # one request at a time, 2 tokens each: a prefill step and a decode step per request
    assert on.spread.what == "engine step" and on.spread.count == 6
    assert on.spread.p10 <= on.spread.p50 <= on.spread.p90 and on.check is not None

    again, _ = run_job("prefix_cache", PREFIX)  # the same engine: cleared, so cold again
    assert again.requests[0].cached_tokens == 0 and again.stats.hits == 2

    off, _ = run_job("prefix_cache", {**PREFIX, "prefix_cache": False})
    assert not off.prefix_cache and off.stats is None
    assert all(r.cached_tokens == 0 for r in off.requests)
    assert [r.prompt_tokens for r in off.requests] == [r.prompt_tokens for r in on.requests]
    caching = {key[-1] for key in _engines}
    assert caching == {True, False}  # the cache lives on an engine of its own


def test_a_prefix_shorter_than_a_block_is_never_cached():
    result, _ = run_job("prefix_cache", {**PREFIX, "shared_prefix_len": 8})
    assert all(r.cached_tokens == 0 for r in result.requests) and result.stats.hits == 0


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculative_generation_gives_plain_decodings_tokens_in_fewer_target_steps(method):
    params = {**SMALL_KV, "batch_size": 2, "prompt_len": 24, "new_tokens": 24}
    plain_run, _ = run_job("speculative", {**params, "method": "off"})
    assert plain_run.k == 0 and plain_run.acceptance_rate is None
    assert plain_run.target_steps == 23 and plain_run.tokens_per_step == 1.0
    spec, events = run_job("speculative", {**params, "method": method, "k": 3})
    assert isinstance(spec, SpeculativeResult) and spec.k == 3
    assert spec.output_ids == plain_run.output_ids and spec.text == plain_run.text
    assert all(len(ids) == 24 for ids in spec.output_ids)
    assert spec.acceptance_rate == pytest.approx(spec.accepted / spec.proposed)
    assert spec.target_steps < plain_run.target_steps  # tiny's text repeats itself enough
    assert 1.0 < spec.tokens_per_step <= 4.0
    assert events[-1][1]["done"] == events[-1][1]["total"] == 48
    for run in (plain_run, spec):  # every gap between two tokens of a sequence, 23 each
        assert run.spread.what == "token gap" and run.spread.count == 2 * 23


def test_speculative_refuses_k_out_of_range_naming_it():
    with pytest.raises(ConfigError, match="k must be between 1 and 8"):
        registry.JOBS["speculative"].check({"k": 9})


def test_the_draft_model_is_built_in_steps_before_the_job_and_goes_on_where_it_stopped():
    """The worker builds a "draft" job's draft model before the job's work, in steps it may stop
    between for other readers' jobs (like an engine: engine.lab.worker.prepare_more); stopped,
    the job ends without a result, and its next turn goes on with the build where it stopped."""
    from engine.lab.jobs import techniques

    techniques._drafts.clear()
    techniques._draft_builds.clear()
    params = {**SMALL_KV, "method": "draft", "k": 2, "batch_size": 1, "prompt_len": 8,
              "new_tokens": 4, "seed": 5}
    said: list[str] = []

    def emit(type_: str, data: dict) -> None:
        if "building" in data:
            said.append(data["message"])

    class StopTheDraftsBuild(Control):
        def stop_build(self) -> bool:  # at the draft's first step, never the job's own work
            return any(m.startswith("loading the draft model: ") for m in said)

    assert worker.run("speculative", params, emit, StopTheDraftsBuild()) is None
    assert not techniques._drafts and len(techniques._draft_builds) == 1
    stopped_at = len(said)
    result = worker.run("speculative", params, emit, lambda: False)
    assert result is not None and result["method"] == "draft" and len(techniques._drafts) == 1
    draft = [m for m in said if m.startswith("loading the draft model")]
    assert draft[0] == "loading the draft model..." and draft[-1].endswith("done; measuring")
    assert sum("weights made" in m for m in draft) == 1  # it went on; it never started over
    assert said[stopped_at] == "loading the draft model..." and not techniques._draft_builds
