"""The results of jobs that measure an OpenAI-compatible endpoint over HTTP: a load test, a rate
sweep, a concurrency ladder and one stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .record import Record
from .serving import RatePoint
from .shared import (
    LoadTestWorkload,
    Percentiles,
    RequestRecord,
    RunMetrics,
    TokenAt,
    WorkloadSettings,
)


@dataclass(frozen=True)
class EndpointLoadTestResult(Record):
    """The load test's mix sent over HTTP to an OpenAI-compatible server and timed at the
    client (engine.serve.bench_client): no engine steps and no admission times, which only the
    server knows; failed requests are counted and left out of the metrics, as vLLM does."""

    job_kind: ClassVar[str] = "endpoint_load_test"
    base_url: str
    model: str
    cancelled: bool
    duration_s: float
    requests: list[RequestRecord]
    metrics: RunMetrics
    failed: int
    first_error: str | None
    workload: LoadTestWorkload


@dataclass(frozen=True)
class EndpointRateSweepResult(Record):
    """The rate sweep's workload sent over HTTP to an OpenAI-compatible server, timed at the
    client; each point counts its failed requests (left out of its figures)."""

    job_kind: ClassVar[str] = "endpoint_rate_sweep"
    base_url: str
    model: str
    workload: WorkloadSettings
    points: list[RatePoint]


@dataclass(frozen=True)
class EndpointConcurrencyResult(Record):
    """N clients streaming at once from an OpenAI-compatible server, timed at the client:
    medians of TTFT and time per token, total output tokens/s (None when nothing finished)."""

    job_kind: ClassVar[str] = "endpoint_concurrency"
    base_url: str
    model: str
    concurrency: int
    prompt_len: int
    new_tokens: int
    completed: int
    failed: int
    first_error: str | None
    ttft_ms: float | None
    tpot_ms: float | None
    tokens_per_s: float | None


@dataclass(frozen=True)
class EndpointStreamResult(Record):
    """The reader's prompt streamed from an OpenAI-compatible server beside N background
    requests, timed at the client (this app's server): the client sees when tokens arrive, not
    how the server split the wait before the first one (queue, prefill), so there is no split."""

    job_kind: ClassVar[str] = "endpoint_stream"
    base_url: str
    model: str
    prompt_tokens: int  # as the server counted them (usage), for its own tokenizer
    max_new_tokens: int
    background: int
    text: str
    tokens: list[TokenAt]
    ttft_ms: float
    tpot_ms: float | None
    itl_ms: Percentiles
    e2e_ms: float
    user_tokens_per_s: float | None
    output_tokens: int
    background_failed: int
    first_error: str | None
