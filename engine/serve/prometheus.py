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
two servers in one process (tests) never share a count; the lab's engine service
(engine.lab.metrics) keeps the same families in a registry of its own, a series per preset. The engine thread records; prometheus
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


class VllmFamilies:
    """vLLM's metric families in one registry, labelled by model_name and engine: a server's
    one model (ServerMetrics), or each preset the lab's engine runs (engine.lab.metrics).
    Token-count histograms take buckets up to `context` tokens."""

    def __init__(self, context: int, registry: CollectorRegistry | None = None):
        self.registry = reg = registry or CollectorRegistry()
        labels = ["model_name", "engine"]
        tokens = one_two_five_buckets(context)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model "
                             "execution batches.", labels, registry=reg)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                             "processed.", labels, registry=reg)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                              "usage.", labels, registry=reg)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     labels, registry=reg)
        self.generation_tokens = Counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.", labels,
                                         registry=reg)
        self.preemptions = Counter("vllm:num_preemptions",
                                   "Cumulative number of preemption from the engine.", labels,
                                   registry=reg)
        self.success = Counter("vllm:request_success", "Count of successfully processed "
                               "requests.", [*labels, "finished_reason"], registry=reg)
        self.request_prompt = Histogram("vllm:request_prompt_tokens",
                                        "Number of prefill tokens processed.", labels,
                                        buckets=tokens, registry=reg)
        self.request_generation = Histogram("vllm:request_generation_tokens",
                                            "Number of generation tokens processed.", labels,
                                            buckets=tokens, registry=reg)
        self.iteration_tokens = Histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.",
                                          labels, buckets=ITERATION_BUCKETS, registry=reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", labels,
                              buckets=TTFT_BUCKETS, registry=reg)
        self.itl = Histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", labels,
                             buckets=ITL_BUCKETS, registry=reg)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", labels,
                             buckets=REQUEST_BUCKETS, registry=reg)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", labels,
                               buckets=REQUEST_BUCKETS, registry=reg)


class ServerMetrics:
    """One model's series of vLLM's families (a registry of its own unless `families` is
    given), fed by the engine thread that serves it."""

    def __init__(self, model_name: str, context: int, families: VllmFamilies | None = None):
        f = families or VllmFamilies(context)
        self.registry = f.registry
        values = (model_name, ENGINE_INDEX)
        for name in ("running", "waiting", "kv_usage", "prompt_tokens", "generation_tokens",
                     "preemptions", "request_prompt", "request_generation", "iteration_tokens",
                     "ttft", "itl", "e2e", "queue"):
            setattr(self, name, getattr(f, name).labels(*values))
        self.success = {reason: f.success.labels(*values, reason)
                        for reason in ("stop", "length")}

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
    def set_state(self, running: int, waiting: int, kv_used: int, kv_total: int) -> None:
        """The gauges: requests running and waiting, and the KV pool's share in use, now."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_used / kv_total if kv_total else 0.0)

    def exposition(self, running: int, waiting: int, kv_used: int, kv_total: int) -> bytes:
        """The text format, with the gauges set to the engine's state now."""
        self.set_state(running, waiting, kv_used, kv_total)
        return generate_latest(self.registry)
