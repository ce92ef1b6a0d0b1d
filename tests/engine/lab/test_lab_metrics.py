"""The lab engine's /metrics (engine.lab.metrics, lessons.shell.routes): Prometheus' text format,
read back with prometheus_client's own parser, after real runs on the real worker and tiny
engine; and the live gauges and the counting rules on the events a run streams."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_helpers import KV, Recorder, finished, service_on_own_cache, stand_in_service
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application

from engine.lab.events import Job
from engine.lab.metrics import LabMetrics

RUN = {"preset": "tiny", "kv_budget_mib": KV, "requests": 3,
       "prompt_len": [8, 12], "output_len": [3, 5], "max_batch": 4, "seed": 5}


def samples(text: str | bytes) -> dict[tuple, float]:
    """Every sample as {(name, sorted labels): value}, parsed by prometheus_client."""
    if isinstance(text, bytes):
        text = text.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float:
    """One sample's value; 0 for a series not there yet (a counter never moved)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


TINY = {"model_name": "tiny", "engine": "0"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with service_on_own_cache(tmp_path_factory.mktemp("llm-speed-cache"),
                              lend_gaps=False) as svc:
        yield svc


def test_a_serving_run_moves_the_counters_by_exactly_its_requests_and_tokens(service):
    before = samples(service.prometheus())
    rec = Recorder()
    job = finished(service.submit("serve_run", RUN, rec, session_id="metrics-reader"))
    assert job.state == "done", job.error
    requests = job.result["requests"]
    tokens = sum(len(r["token_s"]) for r in requests)
    prompts = sum(r["prompt_len"] for r in requests)
    preempted = sum(len(s["preempted_ids"]) for s in job.result["steps"])
    after = samples(service.prometheus())

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert tokens >= 3 * 3 and prompts >= 3 * 8  # the workload asked for these at least
    assert moved("vllm:generation_tokens_total", **TINY) == tokens
    assert moved("vllm:prompt_tokens_total", **TINY) == prompts
    assert moved("vllm:num_preemptions_total", **TINY) == preempted
    assert moved("vllm:request_success_total", **TINY, finished_reason="length") == 3
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                      "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens"):
        assert moved(f"{histogram}_count", **TINY) == 3, histogram
    assert moved("vllm:request_prompt_tokens_sum", **TINY) == prompts
    assert moved("vllm:inter_token_latency_seconds_count", **TINY) == tokens - 3  # gaps
    assert moved("vllm:iteration_tokens_total_count", **TINY) == len(job.result["steps"])
    assert moved("vllm:iteration_tokens_total_sum", **TINY) == sum(
        s["prefill_tokens"] + s["decode_seqs"] for s in job.result["steps"])
    assert moved("lab_jobs_completed_total", kind="serve_run", outcome="measured") == 1
    assert moved("lab_runs_total") == 1
    # nothing runs now: the gauges are back at rest, the worker up
    assert value(after, "vllm:num_requests_running", **TINY) == 0
    assert value(after, "vllm:num_requests_waiting", **TINY) == 0
    assert value(after, "vllm:kv_cache_usage_perc", **TINY) == 0
    assert value(after, "lab_worker_up") == 1
    assert value(after, "lab_jobs_running") == 0


def test_a_job_that_serves_nothing_or_a_cache_answer_counts_as_a_lab_job_only(service):
    """kv_allocation times nothing, so its result is never disturbed and is always cached: the
    same question again is a cache answer, no engine work."""
    params = {"blocks": 3}
    before = samples(service.prometheus())
    job = finished(service.submit("kv_allocation", params))
    again = finished(service.submit("kv_allocation", params))
    assert job.state == again.state == "done" and again.cached and not job.cached
    after = samples(service.prometheus())

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("lab_jobs_completed_total", kind="kv_allocation", outcome="measured") == 1
    assert moved("lab_jobs_completed_total", kind="kv_allocation", outcome="cached") == 1
    assert moved("lab_cache_hits_total") == 1
    assert moved("lab_runs_total") == 1
    assert moved("lab_cache_entries") == 1
    assert moved("vllm:generation_tokens_total", **TINY) == 0


def test_the_route_answers_the_text_format(service, monkeypatch):
    """GET /metrics on a Tornado server with the app's route, as `python app.py` adds it."""
    from lessons.shell import routes

    monkeypatch.setattr(routes, "get_service", lambda: service)
    sockets = bind_sockets(0, "127.0.0.1")
    port = sockets[0].getsockname()[1]
    up, got = threading.Event(), {}

    async def serve() -> None:
        server = HTTPServer(Application([routes.METRICS_ROUTE]))
        server.add_sockets(sockets)
        got["loop"], got["stop"] = asyncio.get_running_loop(), asyncio.Event()
        up.set()
        await got["stop"].wait()
        server.stop()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert up.wait(10)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            kind = response.headers["Content-Type"]
            body = response.read().decode()
    finally:
        got["loop"].call_soon_threadsafe(got["stop"].set)
        thread.join(10)
    assert kind.startswith("text/plain; version=")  # the exposition format's
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"vllm:generation_tokens", "vllm:prompt_tokens", "vllm:num_requests_running",
            "vllm:time_to_first_token_seconds", "lab_jobs_queued", "lab_cache_hits",
            "lab_worker_restarts"} <= names
    assert "vllm:num_requests_running" in body


# ---- the live gauges and the counting rules, on the events a run streams ----------------------
def request(kind: str, rid: int) -> dict:
    return {"kind": kind, "request_id": rid, "t_s": 0.0}


def test_the_gauges_follow_a_live_runs_requests_and_steps_and_rest_at_its_end():
    m = LabMetrics()
    params = {"preset": "tiny"}
    m.on_event(7, params, "progress", {"done": 0, "total": 3, "kv_blocks_total": 8})
    for rid in (0, 1, 2):
        m.on_event(7, params, "request", request("arrived", rid))
    m.on_event(7, params, "request", request("admitted", 0))
    m.on_event(7, params, "request", request("admitted", 1))
    m.on_event(7, params, "step", {"kind": "step", "kv_blocks_used": 2})
    now = samples(m.exposition({}))
    assert value(now, "vllm:num_requests_running", **TINY) == 2
    assert value(now, "vllm:num_requests_waiting", **TINY) == 1
    assert value(now, "vllm:kv_cache_usage_perc", **TINY) == 0.25
    m.on_event(7, params, "request", request("preempted", 1))
    m.on_event(7, params, "request", request("finished", 0))
    now = samples(m.exposition({}))
    assert value(now, "vllm:num_requests_running", **TINY) == 0
    assert value(now, "vllm:num_requests_waiting", **TINY) == 2
    m.on_event(7, params, "cancelled", {})
    now = samples(m.exposition({}))
    assert value(now, "vllm:num_requests_waiting", **TINY) == 0
    assert value(now, "vllm:kv_cache_usage_perc", **TINY) == 0


def test_a_run_on_a_teachers_endpoint_is_that_servers_to_count_not_ours():
    m = LabMetrics()
    params = {"url": "http://127.0.0.1:8000/v1", "model": "tiny", "preset": "tiny"}
    m.on_event(3, params, "request", request("arrived", 0))
    m.on_result(3, params, {"preset": "tiny", "steps": [], "requests": [
        {"id": 0, "arrival_s": 0.0, "admitted_s": 0.0, "prompt_len": 8, "output_len": 2,
         "token_s": [0.1, 0.2], "finish_s": 0.2}]})
    m.job_ended("endpoint_load_test", "done", False)
    found = samples(m.exposition({"queued": 2, "cache_hits": 4, "restarts": 1}))
    assert value(found, "vllm:generation_tokens_total", **TINY) == 0
    assert value(found, "vllm:num_requests_waiting", **TINY) == 0
    assert value(found, "lab_jobs_completed_total", kind="endpoint_load_test",
                 outcome="measured") == 1
    assert value(found, "lab_jobs_queued") == 2
    assert value(found, "lab_cache_hits_total") == 4
    assert value(found, "lab_worker_restarts_total") == 1


def test_the_dispatcher_feeds_the_gauges_from_the_workers_events_and_ends_them(tmp_path):
    """The worker's messages of a running serve_run, as the dispatcher handles them (a stand-in
    for the worker's pipes): the gauges move with them; its cancellation ends its part."""
    with stand_in_service(tmp_path, lend_gaps=False) as (svc, d, w, sent):
        job = Job(1, "serve_run", {"preset": "tiny"}, session_id="a", size="run",
                  pausable=True, use_cache=False)
        d.queue.add(job)
        d.pump()
        assert d.running is not None and sent[-1][:2] == ("run", job.id)
        d.handle(w, ("event", job.id, "progress", {"done": 0, "total": 2,
                                                   "kv_blocks_total": 10}))
        for message in (request("arrived", 0), request("arrived", 1), request("admitted", 0)):
            d.handle(w, ("event", job.id, "request", message))
        d.handle(w, ("event", job.id, "step", {"kind": "step", "kv_blocks_used": 4}))
        now = samples(svc.prometheus())
        assert value(now, "vllm:num_requests_running", **TINY) == 1
        assert value(now, "vllm:num_requests_waiting", **TINY) == 1
        assert value(now, "vllm:kv_cache_usage_perc", **TINY) == 0.4
        assert value(now, "lab_jobs_running") == 1
        svc.cancel(job)
        d.handle(w, ("event", job.id, "cancelled", {}))
        d.pump()
        now = samples(svc.prometheus())
        assert value(now, "vllm:num_requests_running", **TINY) == 0
        assert value(now, "vllm:num_requests_waiting", **TINY) == 0
        assert value(now, "lab_jobs_completed_total", kind="serve_run", outcome="cancelled") == 1
