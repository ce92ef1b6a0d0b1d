"""The lab engine's Prometheus metrics: what the web app's GET /metrics answers
(lessons.shell.routes), so the engine behind the pages can be watched as a served one is.

Two groups, in one registry of their own (never prometheus_client's global one):

- vLLM's families (engine.serve.prometheus.VllmFamilies, the same definitions `engine serve`
  exposes), a series per preset (label model_name), fed by the runs the worker serves:
  - counters and histograms (vllm:prompt_tokens_total, vllm:generation_tokens_total,
    vllm:num_preemptions_total, vllm:request_success_total, TTFT, inter-token latency, E2E,
    queue time, tokens per request and per step) from each result of a run on the lab's own
    engine that carries its requests' and steps' traces (the serving jobs: serve_run, load_test
    and the others whose result is `python -m engine run`'s JSON). A run counts once when its
    result comes back, however many readers it answered; a disturbed result measured again
    counts each time the engine ran it; a run cancelled or cut short before its result counts
    nothing; a cached answer is no engine work and counts nothing either;
  - the gauges (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc)
    from the live "request" and "step" events of the runs that stream them (serve_run), paused
    runs included (their requests keep their places and KV blocks); 0 when none is live.
- The service's own, prefixed `lab_`: jobs queued, running and paused, completed by kind and
  outcome (measured, cached, error, cancelled), cache hits, runs shared by several readers,
  pauses and restarts of the worker, read from the service's status at each scrape.

Runs on a teacher's endpoint (engine.lab.endpoint) measure another server: that server's own
/metrics covers them, so they count here only as lab jobs. Torch-free; thread-safe (the
dispatcher's thread records, the web server's thread scrapes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..config import PRESETS
from ..serve.prometheus import CONTENT_TYPE, ServerMetrics, VllmFamilies
from ..serve.trace import RequestTrace, StepTrace
from .endpoint import measured_on

__all__ = ["CONTENT_TYPE", "LabMetrics"]

PREFIX = "lab_"
OUTCOMES = ("measured", "cached", "error", "cancelled")
# The service's counters (status()'s counts, and restarts) as lab_<name>_total, with their help.
STATUS_COUNTERS = {
    "jobs_done": ("runs", "Runs the engine worker finished (a shared run once)."),
    "cache_hits": ("cache_hits", "Jobs answered from the result cache without a run."),
    "shared_runs": ("shared_runs", "Runs that answered several readers' jobs at once."),
    "preemptions": ("preemptions", "Runs paused, stopped in their build or cut short for "
                                   "shorter jobs."),
    "gap_fills": ("gap_fills", "Points run in a serving run's idle gap."),
    "disturbed": ("disturbed_results", "Results whose disturbance check failed."),
    "remeasured": ("remeasured", "Disturbed results measured again."),
    "restarts": ("worker_restarts", "Times the engine worker was started again after it died."),
}


@dataclass
class LiveRun:
    """A serving run's requests and KV pool as its live events tell them."""

    model: str
    waiting: set[int] = field(default_factory=set)
    running: set[int] = field(default_factory=set)
    kv_used: int = 0
    kv_total: int = 0

    def on_request(self, kind: str, request_id: int) -> None:
        if kind == "arrived":
            self.waiting.add(request_id)
        elif kind == "admitted":
            self.waiting.discard(request_id)
            self.running.add(request_id)
        elif kind == "preempted":
            self.running.discard(request_id)
            self.waiting.add(request_id)
        elif kind in ("finished", "refused"):
            self.running.discard(request_id)
            self.waiting.discard(request_id)


class _StatusCollector(Collector):
    """The lab_ families, from the status the last scrape read."""

    def __init__(self) -> None:
        self.status: dict = {}

    def collect(self) -> Iterable:
        s = self.status
        for name, help_, value in (
                ("jobs_queued", "Jobs waiting in the engine service's queue.", s.get("queued")),
                ("jobs_running", "Runs the engine worker is running now (0 or 1).",
                 int(s.get("running") is not None)),
                ("runs_paused", "Runs paused for shorter jobs, waiting to go on.",
                 s.get("paused_runs")),
                ("worker_up", "1 while the engine worker is up and has said hello.",
                 int(bool(s.get("ready")) and bool(s.get("worker_alive")))),
                ("cache_entries", "Results kept in the result cache.", s.get("cache_entries"))):
            yield GaugeMetricFamily(PREFIX + name, help_, value=float(value or 0))
        for key, (name, help_) in STATUS_COUNTERS.items():
            yield CounterMetricFamily(PREFIX + name, help_, value=float(s.get(key) or 0))


class LabMetrics:
    """The lab's registry, fed by the dispatcher (on_event, on_result, job_ended) and read by
    `exposition` (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        context = max(p.context for p in PRESETS.values())
        self._families = VllmFamilies(context, self.registry)
        self._models: dict[str, ServerMetrics] = {}
        self._live: dict[int, LiveRun] = {}
        self._lock = threading.Lock()
        self._completed = Counter(PREFIX + "jobs_completed",
                                  "Jobs ended, by kind and outcome (measured: a run's result; "
                                  "cached: from the result cache; error; cancelled).",
                                  ["kind", "outcome"], registry=self.registry)
        self._status = _StatusCollector()
        self.registry.register(self._status)

    def _model(self, name: str) -> ServerMetrics:
        if name not in self._models:
            self._models[name] = ServerMetrics(name, 0, self._families)
        return self._models[name]

    # ---- the dispatcher's thread ---------------------------------------------------------------
    def job_ended(self, kind: str, state: str, cached: bool) -> None:
        """A job reached its final state (done, error, cancelled)."""
        outcome = ("cached" if cached else "measured") if state == "done" else state
        if outcome in OUTCOMES:
            self._completed.labels(kind, outcome).inc()

    def on_event(self, run_id: int, params: dict, type_: str, data: dict) -> None:
        """A live event of a run on the worker: requests and steps move the gauges; a final
        one (error, cancelled) ends the run's part in them."""
        with self._lock:
            if type_ in ("error", "cancelled"):
                self._live.pop(run_id, None)
                return
            if measured_on(params) is not None or type_ not in ("request", "step", "progress"):
                return
            live = self._live.get(run_id)
            if live is None:
                if type_ == "progress" and "kv_blocks_total" not in data:
                    return  # a run that streams nothing the gauges read
                live = self._live[run_id] = LiveRun(str(params.get("preset", "")))
            if type_ == "request":
                live.on_request(data.get("kind", ""), data.get("request_id"))
            elif type_ == "step":
                live.kv_used = int(data.get("kv_blocks_used") or 0)
            elif "kv_blocks_total" in data:
                live.kv_total = int(data["kv_blocks_total"])

    def on_result(self, run_id: int, params: dict, result: dict) -> None:
        """A run's result: the run is no longer live, and a serving run's requests and steps
        are counted under its preset."""
        with self._lock:
            self._live.pop(run_id, None)
            if measured_on(params) is not None:
                return
            requests, steps = result.get("requests"), result.get("steps")
            if not (isinstance(requests, list) and isinstance(steps, list)):
                return
            if not all(isinstance(r, dict) and "token_s" in r and "arrival_s" in r
                       for r in requests):
                return
            m = self._model(str(result.get("preset") or params.get("preset", "")))
            for step in steps:
                m.on_step(StepTrace(step["index"], step["start_s"], step["end_s"],
                                    step["prefill_tokens"], step["decode_seqs"],
                                    step["kv_blocks_used"], step["running"],
                                    preempted_ids=list(step.get("preempted_ids") or [])))
            for r in requests:
                if r["arrival_s"] is None or not r["token_s"]:
                    continue  # released never, or refused by its class: no token made
                trace = RequestTrace(r["id"], r["arrival_s"], r["prompt_len"], r["output_len"],
                                     admitted_s=r.get("admitted_s"),
                                     token_s=list(r["token_s"]))
                m.on_tokens(trace, len(trace.token_s))
                if r.get("finish_s") is not None:
                    # the lab's workloads ask for a fixed output length (end-of-text ignored)
                    m.on_end(trace, "length")

    def worker_gone(self) -> None:
        """The worker died: no run of it is live any more."""
        with self._lock:
            self._live.clear()

    # ---- a scrape (any thread) ------------------------------------------------------------------
    def exposition(self, status: dict) -> bytes:
        """The text format: vLLM's gauges from the live runs now, the lab's from `status`
        (EngineService.status())."""
        with self._lock:
            by_model: dict[str, list[LiveRun]] = {}
            for live in self._live.values():
                by_model.setdefault(live.model, []).append(live)
            for name in set(self._models) | set(by_model):
                runs = by_model.get(name, [])
                self._model(name).set_state(
                    sum(len(r.running) for r in runs), sum(len(r.waiting) for r in runs),
                    sum(r.kv_used for r in runs), sum(r.kv_total for r in runs))
            self._status.status = status
            return generate_latest(self.registry)
