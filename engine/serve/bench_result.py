"""What a client-side load test measured (engine/serve/bench_client.py sends the requests): the
server it measured, how the requests were let out, each request as the client saw it, and the
run's summary, the `run` command's JSON shape plus the comparison with the engine's own trace.

Against our own server, the engine's trace of the same requests (GET /v1/engine/trace, matched
by response id) gives the server's side of each one. The client's TTFT and E2E are the server's
plus the network and the HTTP server's queueing, which is reported as their difference. The two
clocks are lined up by the only offsets causality allows (a request was sent before the server
got it, and each token was made before the client got it), so the engine's steps can be drawn on
the client's clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

from ..errors import ConfigError
from .metrics import Metrics, compute_metrics, e2e_ms, summarize, ttft_ms
from .report import DEFAULT_PERCENTILES, SLOs, slo_report, vllm_result
from .trace import RequestTrace, StepTrace


@dataclass
class Endpoint:
    """What the server says about the model before the run."""

    base: str
    model: str
    context: int | None  # max_model_len, when the server reports it
    weights: str | None = None


@dataclass(frozen=True)
class Load:
    """How the requests are let out, beyond their arrival times (vLLM's and GuideLLM's knobs).

    max_concurrency caps the requests outstanding at once: one due while the cap is reached
    waits for a slot, and its clock starts when it is sent (as vLLM's --max-concurrency, so the
    wait is not in its TTFT; the time it was due stays in `scheduled_s`). Requests sent in the
    first warmup_s seconds are warm-up: sent, answered and listed, but left out of the metrics.
    duration_s stops sending after that many seconds; what was sent is still awaited (within
    the timeout), and requests never sent are left out of the result."""

    max_concurrency: int | None = None
    warmup_s: float = 0.0
    duration_s: float | None = None

    def validate(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"max concurrency must be at least 1 (got {self.max_concurrency})")
        if not (self.warmup_s >= 0 and math.isfinite(self.warmup_s)):
            raise ConfigError(f"warm-up must be 0 s or more (got {self.warmup_s})")
        if self.duration_s is not None:
            if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
                raise ConfigError(f"duration must be above 0 s (got {self.duration_s})")
            if self.warmup_s >= self.duration_s:
                raise ConfigError(f"the warm-up ({self.warmup_s:g} s) must end before the "
                                  f"duration ({self.duration_s:g} s) does")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Sent:
    """One request as the client saw it: its trace, the server's id for it, and any error.
    scheduled_s is when it was due (None: closed loop); warmup marks a warm-up request."""

    trace: RequestTrace
    prompt: str
    name: str | None = None
    error: str | None = None
    scheduled_s: float | None = None
    warmup: bool = False
    text: str = ""  # the answer as it streamed
    tags: dict = field(default_factory=dict)  # e.g. a multi-turn request's conversation, turn

    def to_json(self) -> dict:
        return {**self.trace.to_json(), "name": self.name, "error": self.error,
                "scheduled_s": self.scheduled_s, "warmup": self.warmup, **self.tags}


@dataclass
class BenchResult:
    """A client-side run; to_json() gives the `run` command's shape plus the comparison."""

    endpoint: Endpoint
    sent: list[Sent]
    duration_s: float
    cancelled: bool
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    server: dict | None = None  # the engine's trace of the same requests, when it has one
    extra: dict = field(default_factory=dict)
    load: Load = field(default_factory=Load)
    slo_itl_ms: float | None = None
    slo_e2e_ms: float | None = None

    @property
    def slos(self) -> SLOs:
        return SLOs(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_itl_ms, self.slo_e2e_ms)

    @property
    def measured(self) -> list[Sent]:
        """The requests the metrics count: every one sent but the warm-up."""
        return [s for s in self.sent if not s.warmup]

    @property
    def traces(self) -> list[RequestTrace]:
        return [s.trace for s in self.measured]

    @property
    def warmup_requests(self) -> int:
        return sum(s.warmup for s in self.sent)

    @property
    def failed(self) -> int:
        return sum(s.error is not None for s in self.measured)

    @cached_property
    def metrics(self) -> Metrics:
        """The client's metrics, over the requests that finished; goodput counts the requests
        meeting every SLO given, the ITL and E2E ones too (report.py)."""
        metrics = compute_metrics(self.traces, slo_ttft_ms=self.slo_ttft_ms,
                                  slo_tpot_ms=self.slo_tpot_ms)
        report = self.slo
        if report is None:
            return metrics
        return replace(metrics, goodput_rps=report["goodput_rps"],
                       requests_meeting_slo=report["requests_meeting_slo"])

    @cached_property
    def slo(self) -> dict | None:
        """Attainment of each SLO, goodput and good-token throughput (report.slo_report)."""
        duration = compute_metrics(self.traces).duration_s
        return slo_report(self.traces, self.slos, duration)

    def vllm_result(self, request_rate: float, burstiness: float,
                    percentiles=DEFAULT_PERCENTILES) -> dict:
        """This run under `vllm bench serve --save-result`'s keys, ours added (report.py)."""
        return vllm_result(self.traces, self.failed, self.metrics.duration_s,
                           model=self.endpoint.model, request_rate=request_rate,
                           burstiness=burstiness, max_concurrency=self.load.max_concurrency,
                           slos=self.slos, percentiles=percentiles,
                           extra={"source": "llm-serving-speed bench-client",
                                  "base_url": self.endpoint.base,
                                  "warmup_requests": self.warmup_requests,
                                  "cancelled": self.cancelled, **self.extra})

    @cached_property
    def comparison(self) -> dict | None:
        """The engine's side of the same requests (see `compare`), when the server has one."""
        return compare(self.sent, self.server) if self.server else None

    def track_of(self) -> dict[int, int]:
        """Engine request id -> client request id, for the requests the server's trace matched
        (perfetto.chrome_trace draws the engine's prefill chunks on the client's tracks)."""
        by_name = {s.name: s.trace.id for s in self.sent if s.name}
        comparison = self.comparison or {"requests": []}
        return {r["id"]: by_name[r["name"]] for r in comparison["requests"]
                if r["name"] in by_name}

    def to_json(self) -> dict:
        server = self.server or {}
        comparison = self.comparison
        steps = []
        if comparison and comparison["clock_offset_s"] is not None:
            steps = shift_steps(server["steps"], comparison["clock_offset_s"])
        return {
            "device": server.get("device"),
            "preset": self.endpoint.model,
            "weights": self.endpoint.weights,
            "policy": server.get("policy"),
            "source": "client",
            "base_url": self.endpoint.base,
            "model": self.endpoint.model,
            **self.extra,
            "config": server.get("config"),
            "cancelled": self.cancelled,
            "duration_s": self.duration_s,
            "load": {**self.load.to_json(), "warmup_requests": self.warmup_requests,
                     "note": "warm-up requests are sent and listed but left out of the metrics"
                     if self.warmup_requests else None},
            "requests": [s.to_json() for s in self.sent],
            "steps": steps,
            "metrics": {**self.metrics.to_json(), "failed": self.failed},
            "slo": self.slo,
            "server": comparison,
        }


# ---- the server's side ---------------------------------------------------------------------------
def compare(sent: list[Sent], server: dict) -> dict:
    """The engine's trace against the client's, request by request (matched by response id).

    For each request: client TTFT - server TTFT and client E2E - server E2E are the time spent
    outside the engine (network, HTTP parsing, tokenizing, the event loop), never negative.
    The clock offset (client clock - server clock) must lie between the largest (sent - server
    arrival) and the smallest (client token time - server token time); its midpoint lines the
    steps up, and half the interval is how far off it can be."""
    by_name = {r["name"]: r for r in server.get("requests", []) if r.get("name")}
    pairs = [(s.trace, by_name[s.name]) for s in sent
             if s.name in by_name and s.trace.finished and by_name[s.name]["finish_s"]]
    mine = [_trace(r) for _, r in pairs]
    lo = max((c.arrival_s - s.arrival_s for c, s in zip((c for c, _ in pairs), mine)),
             default=None)
    hi = min((ct - st for (c, _), s in zip(pairs, mine)
              for ct, st in zip(c.token_s, s.token_s)), default=None)
    offset = error = None
    if lo is not None and hi is not None and lo <= hi:
        offset, error = (lo + hi) / 2, (hi - lo) / 2
    return {
        "requests_matched": len(pairs),
        "metrics": compute_metrics(mine, [_step(s) for s in server.get("steps", [])],
                                   (server.get("config") or {}).get("max_batch")).to_json(),
        "ttft_gap_ms": summarize(ttft_ms(c) - ttft_ms(s) for (c, _), s in zip(pairs, mine))
        .to_json(),
        "e2e_gap_ms": summarize(e2e_ms(c) - e2e_ms(s) for (c, _), s in zip(pairs, mine))
        .to_json(),
        "clock_offset_s": offset,
        "clock_offset_error_s": error,
        "clock_offset_bounds_s": [lo, hi],
        "requests": [{"name": r["name"], "id": r["id"], "arrival_s": r["arrival_s"],
                      "admitted_s": r["admitted_s"], "first_token_s": r["first_token_s"],
                      "finish_s": r["finish_s"], "output_len": r["output_len"],
                      "token_s": r["token_s"]} for _, r in pairs],
    }


def _trace(r: dict) -> RequestTrace:
    return RequestTrace(id=r["id"], arrival_s=r["arrival_s"], prompt_len=r["prompt_len"],
                        output_len=r["output_len"], admitted_s=r["admitted_s"],
                        first_token_s=r["first_token_s"], finish_s=r["finish_s"],
                        token_s=list(r["token_s"]), preemptions=r.get("preemptions", 0))


def _step(s: dict) -> StepTrace:
    return StepTrace(index=s["index"], start_s=s["start_s"], end_s=s["end_s"],
                     prefill_tokens=s["prefill_tokens"], decode_seqs=s["decode_seqs"],
                     kv_blocks_used=s["kv_blocks_used"], running=s["running"])


def shift_steps(steps: list[dict], offset_s: float) -> list[dict]:
    """The engine's steps on the client's clock."""
    return [{**s, "start_s": s["start_s"] + offset_s, "end_s": s["end_s"] + offset_s}
            for s in steps]
