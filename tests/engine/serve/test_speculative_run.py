"""`run --speculative`: the serving loop verifying a draft's proposals in its decode-only steps
writes the same greedy text as the plain run of the same workload (prompt lookup and the draft
model, with requests arriving while others decode, and under KV pressure), tokens accepted
together share their step's time, every block (the draft's too) is given back, and the `run`
command reports the decoder's stats."""

from __future__ import annotations

import json
import math

import pytest
from run_checks import assert_same_greedy_output, tiny_engine_with_budget

from engine.cli.main import main
from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.workload import WorkloadSpec, make_workload
from engine.speculative import ModelDraft, NgramDraft, SpeculativeDecoder


def check_traces(result, requests) -> None:
    """Every request gets its whole output; tokens come in time order, several at one time
    when a verify step accepted them together."""
    by_id = {r.id: r for r in result.requests}
    assert not result.cancelled
    for req in requests:
        t = by_id[req.id]
        assert len(t.token_s) == len(t.output_ids) == req.output_len
        assert t.finish_s == t.token_s[-1] and t.first_token_s == t.token_s[0]
        assert all(a <= b for a, b in zip(t.token_s, t.token_s[1:]))
        assert t.arrival_s <= t.admitted_s <= t.first_token_s


@pytest.fixture(scope="module")
def engine():
    return tiny_engine_with_budget(16 * 2**20)


@pytest.fixture(scope="module")
def requests(engine):
    # staggered arrivals: prefill steps (plain) and decode-only steps (verified) interleave
    spec = WorkloadSpec(kind="poisson", requests=6, rate=40.0, prompt_len=(20, 90),
                        output_len=(24, 40), seed=5)
    return make_workload(spec, engine.tokenizer)


@pytest.fixture(scope="module")
def plain(engine, requests):
    result = run(engine, requests, SchedulerConfig("continuous", 4))
    return {r.id: r.output_ids for r in result.requests}


@pytest.mark.parametrize("method, k", [("ngram", 3), ("draft", 2)])
def test_speculative_run_writes_the_plain_runs_text(engine, requests, plain, method, k):
    draft = NgramDraft() if method == "ngram" else ModelDraft.for_target(engine)
    spec = SpeculativeDecoder(engine, draft, k)
    config = SchedulerConfig("continuous", 4)
    result = run(engine, requests, config, speculative=spec)
    check_traces(result, requests)
    assert_same_greedy_output(engine, requests, plain,
                              {r.id: r.output_ids for r in result.requests}, method)
    stats = result.to_json()["speculative"]
    assert stats["steps"] > 0 and stats["tokens"] == stats["accepted"] + stats["rounds"]
    assert stats["accepted"] > 0  # the tiny model repeats itself: some guesses are right
    # a verify step's accepted tokens arrive together: fewer distinct times than tokens
    assert any(len(set(r.token_s)) < len(r.token_s) for r in result.requests)
    assert engine.blocks.num_used == 0
    if method == "draft":
        assert not draft.mirrors and draft.engine.blocks.num_used == 0


def test_speculation_waits_for_kv_room_and_keeps_the_text(requests, plain):
    small = tiny_engine_with_budget(20 * 16 * 3072)  # 20 blocks: too few for every proposal, preemptions
    spec = SpeculativeDecoder(small, NgramDraft(), 4)
    config = SchedulerConfig("continuous", 8, chunk_size=32)
    result = run(small, requests, config, speculative=spec)
    check_traces(result, requests)
    assert_same_greedy_output(small, requests, plain,
                              {r.id: r.output_ids for r in result.requests}, "small pool")
    assert small.blocks.num_used == 0


def test_run_command_reports_the_speculative_stats(capsys):
    assert main(["run", "--policy", "continuous", "--workload", "fixed", "--concurrency", "2",
                 "--requests", "2", "--prompt-len", "24", "--output-len", "16",
                 "--speculative", "ngram", "--spec-k", "3", "--kv-budget-mib", "8",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    spec = result["speculative"]
    assert spec["method"] == "ngram" and spec["k"] == 3
    assert spec["tokens"] <= sum(r["output_len"] for r in result["requests"])
    assert math.isfinite(spec["tokens_per_step"]) and spec["tokens_per_step"] >= 1
    assert main(["run", "--policy", "continuous", "--requests", "1", "--spec-k", "0"]) == 2
    assert "spec k" in capsys.readouterr().err
