"""The serving loop: same greedy text whatever the schedule, live events, cancellation, closed
loops, real-time arrivals, a pause that is not the run's time, refusals that name the limit, and
the `run` command's contract. What its clock does through a lent idle gap (wall-clock bounds):
test_serving_clock.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from run_checks import (
    assert_same_greedy_output,
    check_invariants,
    check_run_shape,
    tiny_engine_with_budget,
)

from engine.cli.main import main
from engine.errors import ConfigError
from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.trace import RequestEvent, StepEvent, TokenEvent, event_to_json
from engine.serve.workload import Request, WorkloadSpec, make_workload


@pytest.fixture(scope="module")
def engine():
    return tiny_engine_with_budget(16 * 2**20)


@pytest.fixture(scope="module")
def small_engine():
    """20 KV blocks of 16 tokens: too few for the workload below, so requests get preempted."""
    return tiny_engine_with_budget(20 * 16 * 3072)


@pytest.fixture(scope="module")
def requests(engine):
    spec = WorkloadSpec(kind="poisson", requests=8, rate=math.inf, prompt_len=(20, 90),
                        output_len=(24, 40), seed=5)
    return make_workload(spec, engine.tokenizer)


def test_greedy_output_is_the_same_under_every_schedule(engine, small_engine, requests):
    schedules = {
        "continuous whole prompts": (engine, SchedulerConfig("continuous", 4, chunk_size=0)),
        "continuous 16-token chunks": (engine, SchedulerConfig("continuous", 3, chunk_size=16)),
        "static": (engine, SchedulerConfig("static", 4)),
        "dynamic": (engine, SchedulerConfig("dynamic", 5, timeout_ms=1)),
        "preempted": (small_engine, SchedulerConfig("continuous", 8, chunk_size=32)),
    }
    outputs = {}
    for label, (eng, config) in schedules.items():
        result = run(eng, requests, config)
        check_invariants(result, requests, config)
        outputs[label] = {r.id: r.output_ids for r in result.requests}
        if label == "preempted":
            assert result.metrics.preemptions > 0
    reference = outputs.pop("continuous whole prompts")
    for label, out in outputs.items():
        assert_same_greedy_output(engine, requests, reference, out, label)


def test_events_stream_the_trace_while_it_happens(engine):
    reqs = [Request(0, engine.tokenizer.encode("The function returns"), 6, 0.0),
            Request(1, engine.tokenizer.encode("A list is"), 4, 0.0)]
    events = []
    result = run(engine, reqs, SchedulerConfig("continuous", 4), on_event=events.append,
                 stream_text=True)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e.step for e in events if isinstance(e, StepEvent)]
    assert steps == result.steps
    for trace in result.requests:
        mine = [e for e in tokens if e.request_id == trace.id]
        assert [e.index for e in mine] == list(range(trace.output_len))
        assert [e.t_s for e in mine] == trace.token_s
        assert [e.token_id for e in mine] == trace.output_ids
        assert "".join(e.text for e in mine) == engine.tokenizer.decode(trace.output_ids)
        kinds = [e.kind for e in events if isinstance(e, RequestEvent) and e.request_id == trace.id]
        assert kinds == ["arrived", "admitted", "finished"]
    for e in events:
        data = json.loads(json.dumps(event_to_json(e), allow_nan=False))
        assert data["kind"] == e.kind
    # a step's event comes after its tokens
    first_step = events.index(next(e for e in events if isinstance(e, StepEvent)))
    assert all(isinstance(e, (TokenEvent, RequestEvent)) for e in events[:first_step])


def test_cancel_stops_promptly_and_gives_blocks_back(engine, requests):
    seen = []
    result = run(engine, requests, SchedulerConfig("continuous", 4),
                 on_event=seen.append, cancelled=lambda: len(seen) > 30)
    assert result.cancelled
    assert engine.blocks.num_used == 0
    assert 0 < len(result.steps) < 10
    assert any(not r.finished for r in result.requests)
    json.dumps(result.to_json(), allow_nan=False)


PAUSE = 1.0  # s: a pause of a run, far longer than the loop's own work between two polls


def test_a_pause_inside_cancelled_is_not_the_runs_time(engine):
    """The lab's worker pauses a load test inside its cancelled() call to run other readers'
    jobs: the run's clock stops for the pause, so no step or token is stamped with it and no
    request's TTFT holds it (8 requests at once with a batch of 4: four wait while it pauses).
    Each token's stamp on the run's clock is read against the wall clock as it arrives: the
    run's clock falls behind by the pause, however fast or slow the machine runs the steps."""
    spec = WorkloadSpec(kind="poisson", requests=8, rate=math.inf, prompt_len=(20, 90),
                        output_len=(4, 8), seed=5)
    requests = make_workload(spec, engine.tokenizer)
    polls = [0]

    def cancelled() -> bool:
        polls[0] += 1
        if polls[0] == 3:  # between the second step and the third
            time.sleep(PAUSE)
        return False

    seen = []  # each token as it arrives: (its request, the wall clock, the run's own stamp)

    def on_event(event) -> None:
        if isinstance(event, TokenEvent):
            seen.append((event.request_id, time.perf_counter(), event.t_s))

    start = time.perf_counter()
    result = run(engine, requests, SchedulerConfig("continuous", 4), on_event=on_event,
                 cancelled=cancelled)
    assert time.perf_counter() - start >= PAUSE and not result.cancelled
    assert all(r.finished for r in result.requests)
    behind = [wall - own for _, wall, own in seen]  # how far the run's clock is behind
    assert max(behind) - min(behind) >= PAUSE  # tokens after the pause: stamped without it
    first = {}
    for rid, wall, own in seen:
        first.setdefault(rid, wall - own)
    waited = [rid for rid, lag in first.items() if lag >= min(behind) + PAUSE]
    assert len(waited) >= 4  # their first tokens came after it, their TTFTs without it


def test_closed_loop_keeps_concurrency_requests_outstanding(engine):
    spec = WorkloadSpec(kind="fixed", requests=9, concurrency=3, prompt_len=(8, 30),
                        output_len=(2, 12), seed=6)
    reqs = make_workload(spec, engine.tokenizer)
    result = run(engine, reqs, SchedulerConfig("continuous", 8))
    traces = result.requests
    assert all(r.finished and len(r.token_s) == r.output_len for r in traces)
    finishes = sorted(r.finish_s for r in traces)
    released = sorted(r.arrival_s for r in traces[3:])
    assert released == finishes[:6]  # each later request arrived as one finished
    for step in result.steps:
        outstanding = [r for r in traces if r.arrival_s <= step.start_s < r.finish_s]
        assert len(outstanding) <= 3
    check_invariants(result, reqs, SchedulerConfig("continuous", 8))


def test_explicit_requests_replay_arrivals_on_the_wall_clock(engine):
    """Lesson 1's shape: the reader's prompt plus background requests, one arriving later; the
    loop sleeps until it arrives."""
    prompt = engine.tokenizer.encode("Explain what a dictionary is.")
    background = make_workload(WorkloadSpec(requests=2, prompt_len=(10, 10), output_len=(3, 3)),
                               engine.tokenizer)
    reqs = [Request(10, prompt, 5, 0.15)] + background
    result = run(engine, reqs, SchedulerConfig("continuous", 4), slo_ttft_ms=10_000)
    late = result.requests[0]
    assert late.id == 10 and late.arrival_s == 0.15 and late.admitted_s >= 0.15
    assert all(r.finished for r in result.requests)
    assert result.metrics.requests_meeting_slo == 3


@pytest.mark.parametrize("make, words", [
    (lambda e: [Request(0, [1] * 2000, 100)], "context of 2048"),
    (lambda e: [Request(0, [1] * 300, 100)], "KV budget"),
    (lambda e: [Request(0, [], 3)], "prompt is empty"),
    (lambda e: [Request(0, [1], 0)], "output length"),
    (lambda e: [Request(0, [1], 2), Request(0, [1], 2)], "unique"),
    (lambda e: [Request(0, [1], 2, None)], "closed-loop"),
])
def test_requests_that_can_never_run_are_refused(small_engine, make, words):
    with pytest.raises(ConfigError, match=words):
        run(small_engine, make(small_engine), SchedulerConfig("continuous", 4))


def test_unchunked_prompt_over_an_explicit_budget_is_refused(engine):
    config = SchedulerConfig("continuous", 4, chunk_size=0, max_tokens_per_step=64)
    with pytest.raises(ConfigError, match="token budget of 64"):
        run(engine, [Request(0, [1] * 100, 2)], config)


def test_run_json_follows_the_contract(engine, requests):
    result = run(engine, requests[:3], SchedulerConfig("static", 4), slo_tpot_ms=1000)
    out = result.to_json()
    check_run_shape(out)
    assert out["policy"] == "static" and out["preset"] == "tiny"
    assert out["metrics"]["goodput_rps"] is not None


# ---- the command line ------------------------------------------------------------------------
def test_cli_run_json_prints_one_object():
    out = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--policy", "continuous", "--requests", "4",
         "--rate", "inf", "--prompt-len", "8:24", "--output-len", "3:6", "--kv-budget-mib", "8",
         "--slo-ttft-ms", "5000", "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # exactly one JSON object, nothing else on stdout
    assert {"device", "preset", "policy", "requests", "steps", "metrics", "workload"} <= \
        result.keys()
    assert len(result["requests"]) == 4
    assert all(len(r["token_s"]) == r["output_len"] for r in result["requests"])


def test_cli_run_with_a_shared_prefix_and_the_prefix_cache(capsys):
    assert main(["run", "--policy", "continuous", "--workload", "fixed", "--concurrency", "1",
                 "--requests", "3", "--prompt-len", "4", "--output-len", "2",
                 "--shared-prefix-len", "32", "--prefix-cache", "on", "--kv-budget-mib", "8",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["workload"]["shared_prefix_len"] == 32
    assert [r["prompt_len"] for r in result["requests"]] == [36, 36, 36]
    cache = result["prefix_cache"]
    assert cache["cached_tokens"] == [0, 32, 32]  # one at a time: each after the first hits
    assert cache["hits"] == 2 and cache["tokens_skipped"] == 64 and cache["lookups"] == 3


@pytest.mark.parametrize("args, words", [
    ([], "--policy"),
    (["--policy", "fifo"], "invalid choice"),
    (["--policy", "static", "--rate", "0"], "rate"),
    (["--policy", "static", "--rate", "fast"], "rate"),
    (["--policy", "static", "--prompt-len", "9:3"], "A <= B"),
    (["--policy", "static", "--output-len", "0"], "output length"),
    (["--policy", "static", "--max-batch", "0"], "max batch"),
    (["--policy", "dynamic", "--timeout-ms", "-5"], "timeout"),
    (["--policy", "continuous", "--chunk-size", "-1"], "chunk size"),
    (["--policy", "continuous", "--chunk-size", "256", "--max-tokens-per-step", "128"],
     "at least the chunk size"),
    (["--policy", "static", "--burstiness", "0"], "burstiness"),
    (["--policy", "static", "--slo-ttft-ms", "nan"], "TTFT SLO"),
    (["--policy", "static", "--workload", "interference", "--long-prompt-len", "2000"],
     "context of 2048"),
    (["--policy", "static", "--shared-prefix-len", "-1"], "shared prefix length"),
    (["--policy", "static", "--shared-prefix-len", "1900"], "context of 2048"),
    (["--policy", "static", "--prefix-cache", "maybe"], "invalid choice"),
])
def test_cli_bad_flags_exit_2_with_one_line(capsys, args, words):
    assert main(["run", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in captured.err


def test_cli_refuses_a_request_over_the_kv_budget(capsys):
    assert main(["run", "--policy", "continuous", "--workload", "interference", "--requests", "1",
                 "--kv-budget-mib", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "KV budget" in err[0]
