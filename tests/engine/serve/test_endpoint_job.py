"""The lab's endpoint_load_test job against a real server (our own `engine serve`): the load
test's mix sent over HTTP, every request answered with its length, progress per request, a
cancel that stops it, and an unreachable server refused in one line."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.lab import worker
from engine.lab.results import (
    EndpointConcurrencyResult,
    EndpointLoadTestResult,
    EndpointRateSweepResult,
    EndpointStreamResult,
)
from engine.tokenizer import Tokenizer

SMALL = {"requests": 8, "rate": 40.0, "long_share": 0.25, "short_prompt": [8, 16],
         "short_output": [2, 6], "long_prompt": [32, 48], "long_output": [8, 12]}


def test_load_test_over_http(server):
    events = []
    result = worker.run("endpoint_load_test",
                        {**SMALL, "url": server["url"], "model": server["model"]},
                        lambda t, d: events.append((t, d)), lambda: False)
    run = EndpointLoadTestResult.from_dict(result)
    assert run.model == "tiny" and run.base_url == server["url"].rstrip("/")
    assert run.failed == 0 and run.first_error is None and not run.cancelled
    assert run.metrics.completed == 8
    assert {r.size for r in run.requests} <= {"short", "long"}
    for r in run.requests:  # the server answered each with exactly the length asked for
        assert len(r.token_s) == r.output_len and r.admitted_s is None
        assert r.arrival_s <= r.first_token_s <= r.finish_s
    progress = [d["done"] for t, d in events if t == "progress"]
    assert progress[0] == 0 and progress[-1] == 8 and progress == sorted(progress)


def test_cancel_stops_the_load_test(server):
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 3

    slow = {**SMALL, "requests": 50, "rate": 1.0}  # 50 s of arrivals unless stopped
    assert worker.run("endpoint_load_test", {**slow, "url": server["url"],
                                             "model": server["model"]},
                      lambda t, d: None, cancelled) is None


def test_unreachable_server_is_a_one_line_refusal():
    with pytest.raises(ConfigError, match="cannot reach http://127.0.0.1:9/v1"):
        worker.run("endpoint_load_test", {**SMALL, "url": "http://127.0.0.1:9", "model": "m"},
                   lambda t, d: None, lambda: False)


def test_rate_sweep_over_http(server):
    events = []
    params = {"rates": [20.0, 40.0], "requests": 4, "prompt_len": [8, 16],
              "output_len": [2, 6], "url": server["url"], "model": server["model"]}
    result = worker.run("endpoint_rate_sweep", params, lambda t, d: events.append((t, d)),
                        lambda: False)
    sweep = EndpointRateSweepResult.from_dict(result)
    assert [p.rate for p in sweep.points] == [20.0, 40.0]
    assert all(p.completed == 4 and p.failed == 0 and len(p.ttft_ms) == 4 for p in sweep.points)
    steps = [d["rate"] for t, d in events if t == "step"]
    assert steps == [20.0, 40.0]
    progress = [d["done"] for t, d in events if t == "progress"]
    assert progress[-1] == 8 and progress == sorted(progress)


def test_concurrent_clients_over_http(server):
    params = {"concurrency": 3, "prompt_len": 12, "new_tokens": 6, "url": server["url"],
              "model": server["model"]}
    result = worker.run("endpoint_concurrency", params, lambda t, d: None, lambda: False)
    point = EndpointConcurrencyResult.from_dict(result)
    assert point.completed == 3 and point.failed == 0 and point.new_tokens == 6
    assert point.tokens_per_s > 0 and point.tpot_ms > 0 and point.ttft_ms > 0


def test_the_readers_prompt_streamed_beside_background_requests(server):
    events = []
    params = {"prompt": "The engine reads", "max_new_tokens": 6, "background": 2,
              "arrive_after_ms": 100.0, "url": server["url"], "model": server["model"]}
    result = worker.run("endpoint_stream", params, lambda t, d: events.append((t, d)),
                        lambda: False)
    run = EndpointStreamResult.from_dict(result)
    tokens = [d for t, d in events if t == "token"]
    assert [d["index"] for d in tokens] == list(range(6)) == list(range(run.output_tokens))
    assert "".join(d["text"] for d in tokens) == run.text == "".join(t.text for t in run.tokens)
    assert run.prompt_tokens == len(Tokenizer().encode(params["prompt"])) and run.background == 2 and run.background_failed == 0
    times = [t.t_ms for t in run.tokens]
    assert times == sorted(times) and times[0] == run.ttft_ms and times[-1] == run.e2e_ms
    assert run.tpot_ms == pytest.approx((run.e2e_ms - run.ttft_ms) / 5)
    assert run.itl_ms.count == 5 and run.user_tokens_per_s == pytest.approx(1000 / run.tpot_ms)
