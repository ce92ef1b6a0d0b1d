"""The server's Prometheus metrics (GET /metrics), under vLLM's names so a vLLM dashboard reads
them.

The names, label names (model_name, engine) and histogram buckets are vLLM's V1 engine's
(vllm/v1/metrics/loggers.py, PrometheusStatLogger):

- gauges: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
  (blocks in use / blocks in the pool, 0 to 1), read from the engine when a scrape comes;
- counters: vllm:prompt_tokens_total (a request's prompt tokens, counted when its prefill is
  done, i.e. at its first token), vllm:generation_tokens_total (every output token, as its
  step ends), vllm:num_preemptions_total, vllm:request_success_total{finished_reason} (stop or
  length; aborted and failed requests are not successes);
- histograms: vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds (every gap
  between two tokens of a request), vllm:e2e_request_latency_seconds,
  vllm:request_queue_time_seconds (arrival to first admission), vllm:request_prompt_tokens,
  vllm:request_generation_tokens, vllm:iteration_tokens_total (tokens per engine step).

Times are the engine's own (the step's end after the device finished, online.py), so they
leave out the HTTP server's share that a client sees. Each server has its own registry, so
two servers in one process (tests) never share a count. The engine thread records; prometheus
client's metrics are thread-safe, so a scrape on the HTTP thread reads them as they are.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .trace import RequestTrace, StepTrace

CONTENT_TYPE = CONTENT_TYPE_LATEST
ENGINE_INDEX = "0"  # one engine per server

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def one_two_five_buckets(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to limit (vLLM's build_1_2_5_buckets for token counts)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return out
            out.append(m * scale)
        scale *= 10


class ServerMetrics:
    """The counters and histograms of one server, fed by its engine thread."""

    def __init__(self, model_name: str, context: int):
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = (model_name, ENGINE_INDEX)
        reg = self.registry

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=reg).labels(*values)

        def counter(name, doc):
            return Counter(name, doc, labels, registry=reg).labels(*values)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, labels, buckets=buckets, registry=reg).labels(*values)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model "
                                                          "execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                                                          "processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                                                          "usage.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.")
        self.preemptions = counter("vllm:num_preemptions",
                                   "Cumulative number of preemption from the engine.")
        self._success = Counter("vllm:request_success", "Count of successfully processed "
                                "requests.", [*labels, "finished_reason"], registry=reg)
        self.success = {reason: self._success.labels(*values, reason)
                        for reason in ("stop", "length")}
        tokens = one_two_five_buckets(context)
        self.request_prompt = histogram("vllm:request_prompt_tokens",
                                        "Number of prefill tokens processed.", tokens)
        self.request_generation = histogram("vllm:request_generation_tokens",
                                            "Number of generation tokens processed.", tokens)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.",
                                          ITERATION_BUCKETS)
        self.ttft = histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", REQUEST_BUCKETS)
        self.queue = histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.",
                               REQUEST_BUCKETS)

    # ---- the engine thread ---------------------------------------------------------------------
    def on_step(self, step: StepTrace) -> None:
        self.iteration_tokens.observe(step.num_tokens)
        if step.preempted_ids:
            self.preemptions.inc(len(step.preempted_ids))

    def on_tokens(self, trace: RequestTrace, new: int) -> None:
        """A request got `new` tokens in the step that just ended (its token_s holds them)."""
        if new <= 0:
            return
        self.generation_tokens.inc(new)
        times = trace.token_s
        first = len(times) - new
        if first == 0:  # its first token: the prefill is done
            self.prompt_tokens.inc(trace.prompt_len)
            self.ttft.observe(times[0] - trace.arrival_s)
            if trace.admitted_s is not None:
                self.queue.observe(trace.admitted_s - trace.arrival_s)
        for k in range(max(1, first), len(times)):
            self.itl.observe(times[k] - times[k - 1])

    def on_end(self, trace: RequestTrace, reason: str) -> None:
        """A request ended with this finish reason (stop, length, abort, error)."""
        if reason not in self.success or not trace.token_s:
            return
        self.success[reason].inc()
        self.e2e.observe(trace.token_s[-1] - trace.arrival_s)
        self.request_prompt.observe(trace.prompt_len)
        self.request_generation.observe(len(trace.token_s))

    # ---- a scrape --------------------------------------------------------------------------------
    def exposition(self, running: int, waiting: int, kv_used: int, kv_total: int) -> bytes:
        """The text format, with the gauges set to the engine's state now."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_used / kv_total if kv_total else 0.0)
        return generate_latest(self.registry)
