"""Per-phase request times (engine/serve/phases.py): the definitions on a planted trace, and on
real runs of the tiny engine (in this process and behind the HTTP server) the phases cover each
request's end-to-end time, the tokenizer's time is measured, and a queued request's queue phase
covers its wait. A bound on what the phases leave out is a wall-clock bound: these run alone."""

from __future__ import annotations

import httpx
import pytest
from run_checks import tiny_engine_with_budget
from server_calls import engine_trace

from engine.generate import generate
from engine.lab.results import parse_result
from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.perfetto import chrome_trace
from engine.serve.phases import mean_phases_ms, request_phases, run_phases
from engine.serve.trace import RequestTrace, StepTrace
from engine.serve.workload import WorkloadSpec, make_workload

# The phases leave out only the engine's time between steps (the scheduler, bookkeeping): on a
# request of a few steps that is well under a tenth of its time, plus a little for a busy CPU.
TOLERANCE_SHARE, TOLERANCE_S = 0.10, 0.010


@pytest.fixture(scope="module")
def engine():
    return tiny_engine_with_budget(8 * 2**20)


def test_the_phases_follow_their_definitions_on_a_planted_trace():
    trace = RequestTrace(0, arrival_s=1.0, prompt_len=4, output_len=2, admitted_s=1.5,
                         first_token_s=1.8, finish_s=2.0, token_s=[1.8, 2.0],
                         tokenize_start_s=1.1, tokenize_end_s=1.2, detokenize_s=0.05,
                         response_s=2.1)
    steps = [StepTrace(0, 1.5, 1.6, 2, 0, 1, 1, prefill_chunks=[(0, 2)]),
             StepTrace(1, 1.65, 1.8, 2, 0, 1, 1, prefill_chunks=[(0, 2)]),
             StepTrace(2, 1.85, 2.0, 0, 1, 1, 1, decode_ids=[0])]
    p = run_phases([trace], steps)[0]
    assert p.tokenize_s == pytest.approx(0.1)
    assert p.queue_s == pytest.approx(0.4)  # arrival to admission, less the tokenizer's run
    assert p.prefill_s == pytest.approx(0.25)  # both chunks
    assert p.decode_s == pytest.approx(0.15)
    assert p.e2e_s == pytest.approx(1.1)  # arrival to the text being ready
    assert p.other_s == pytest.approx(0.15)  # the two gaps between steps and 0.05 after
    # Behind a server: the tokenizer ran before arrival, so the queue keeps all of its wait.
    served = RequestTrace(0, arrival_s=1.0, prompt_len=4, output_len=1, admitted_s=1.5,
                          first_token_s=1.8, finish_s=1.8, token_s=[1.8], received_s=0.7,
                          tokenize_start_s=0.8, tokenize_end_s=0.9, response_s=1.8,
                          response_end_s=1.9)
    q = request_phases(served, 0.3, 0.0)
    assert (q.http_in_s, q.tokenize_s, q.queue_s, q.http_out_s) == pytest.approx(
        (0.2, 0.1, 0.5, 0.1))
    assert q.e2e_s == pytest.approx(1.2) and q.covered_s + q.other_s == pytest.approx(q.e2e_s)
    assert request_phases(RequestTrace(1, 0.0, 4, 2), 0.0, 0.0) is None  # never finished


def test_a_runs_phases_cover_each_requests_time_and_the_queue_covers_the_wait(engine):
    spec = WorkloadSpec(kind="poisson", requests=3, rate=float("inf"), prompt_len=(24, 40),
                        output_len=(3, 4), seed=5)
    requests = make_workload(spec, engine.tokenizer)
    assert all(r.prompt_text for r in requests)
    result = run(engine, requests, SchedulerConfig("continuous", max_batch=1))
    phases = result.phases()
    assert sorted(phases) == [0, 1, 2]
    by_id = {t.id: t for t in result.requests}
    for rid, p in phases.items():
        t = by_id[rid]
        assert p.tokenize_s > 0 and p.prefill_s > 0 and p.decode_s > 0 and p.detokenize_s > 0
        assert p.e2e_s >= (t.finish_s - t.arrival_s)  # to the text, after the last token
        assert abs(p.e2e_s - p.covered_s) <= TOLERANCE_SHARE * p.e2e_s + TOLERANCE_S
    # One slot: request 1 waits for request 0 to finish, and its queue phase covers that wait.
    first, second = by_id[0], by_id[1]
    assert phases[1].queue_s >= first.finish_s - second.arrival_s - phases[1].tokenize_s
    out = result.to_json()
    assert out["requests"][1]["phases"]["queue_s"] == phases[1].queue_s
    assert mean_phases_ms(phases.values())["tokenize"] > 0
    assert parse_result("serve_run", {**out, "workload": spec.to_json(), "spread": None,
                                      "check": None}).requests[1].phases.queue_s == \
        phases[1].queue_s  # the lab's typed records read them
    names = {e["name"] for e in chrome_trace(out)["traceEvents"] if e.get("ph") == "X"}
    assert {"tokenize", "queued", "prefill", "decode", "detokenize"} <= names


def test_generates_phases_cover_its_time(engine):
    ids = [engine.tokenizer.encode(text) for text in ("Once upon a time", "The cat sat")]
    gens = generate(engine, ids, 3)
    for gen in gens:
        p = gen.phases(tokenize_s=0.001)
        assert p.prefill_s > 0 and p.decode_s > 0 and p.detokenize_s > 0
        assert abs(p.e2e_s - p.covered_s) <= TOLERANCE_SHARE * p.e2e_s + TOLERANCE_S
    # Each prompt waits through the other's prefill: its queue phase is that time.
    assert gens[1].queue_s == pytest.approx(gens[0].prefill_s)
    assert gens[0].queue_s == pytest.approx(gens[1].prefill_s)


def test_a_served_requests_phases_cover_its_time(server):
    """Behind the server the phases add its HTTP side (engine.serve.phases): together they
    cover the request's time from reaching the server to the end of its response."""
    body = {"model": "tiny", "prompt": "The function returns", "max_tokens": 24,
            "temperature": 0}
    resp = httpx.post(server["url"] + "/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    [mine] = [t for t in engine_trace(server)["requests"] if t["name"] == resp.json()["id"]]
    p = mine["phases"]
    assert p["http_in_s"] >= 0 and p["tokenize_s"] > 0 and p["http_out_s"] >= 0
    covered = sum(v for k, v in p.items() if k not in ("other_s", "e2e_s"))
    assert abs(p["e2e_s"] - covered) <= TOLERANCE_SHARE * p["e2e_s"] + TOLERANCE_S
