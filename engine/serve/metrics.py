"""Serving metrics from request traces, defined as vLLM's benchmark_serving defines them.

Definitions (every time is a RequestTrace timestamp, seconds from the run's start; metrics are
reported in milliseconds):

- TTFT (time to first token) = first token - arrival.
- TPOT (time per output token) per request = (E2E - TTFT) / (N - 1) = (last token - first
  token) / (N - 1), for a request with N output tokens: the first token is excluded. Requests
  with N = 1 have no TPOT and are left out of its summary.
- ITL (inter-token latency) = every gap between two consecutive output tokens of one request,
  pooled over all requests (a request with N tokens gives N - 1 gaps).
- N, for a finished request, is its output_len. In the engine's trace that is one token per
  entry of token_s; in a client's trace (bench_client.py) token_s holds the arrival of each
  streamed chunk and N is the completion tokens the server's usage reported, so a server that
  sends several tokens in one chunk gets fewer ITL gaps but the right TPOT and throughput, as
  vLLM's benchmark counts them.
- E2E (end-to-end latency) = last token - arrival.
- queue time = first admission into a running batch - arrival (a request preempted later keeps
  its first admission); only the engine knows it, so a client's trace has none.
- Each of these is summarized as mean, p50, p90, p95, p99 and max. Percentiles use numpy's
  default linear interpolation between closest ranks (numpy.percentile, as vLLM does).
- duration = last finish - first arrival, over the completed requests (the run's wall time
  from the first request's arrival to the last token).
- throughput = total output tokens of the completed requests / duration (tokens per second for
  the whole server, not per user).
- requests/s = completed requests / duration.
- goodput = completed requests that met every SLO given (TTFT <= --slo-ttft-ms and
  TPOT <= --slo-tpot-ms) / duration. A request with one output token has no TPOT and meets any
  TPOT SLO (vLLM counts its TPOT as 0). With no SLO given, goodput is None: it is undefined.
  Whether a request met its SLOs is engine.calc.slo_math.meets_slo (the pages use it too).

Only completed requests (those with a finish time) count, as in vLLM; a cancelled run's
unfinished requests are left out. Empty inputs never raise: a summary of no values has None in
every field (None, not NaN, because it must survive JSON), and a rate with no completed
request, or a zero duration, is None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from itertools import pairwise

import numpy as np

from ..calc import slo_math as slo
from .trace import RequestTrace, StepTrace

PERCENTILES = (50, 90, 95, 99)


@dataclass
class Summary:
    """mean, percentiles (numpy linear interpolation) and max of a list of values, in ms."""

    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    count: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def summarize(values: Iterable[float]) -> Summary:
    """Summary of values; every field None when there are none."""
    data = np.asarray(list(values), dtype=np.float64)
    if data.size == 0:
        return Summary(None, None, None, None, None, None, 0)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(data, PERCENTILES))
    return Summary(float(data.mean()), p50, p90, p95, p99, float(data.max()), int(data.size))


@dataclass
class Metrics:
    ttft_ms: Summary
    tpot_ms: Summary
    itl_ms: Summary
    e2e_ms: Summary
    queue_ms: Summary
    throughput_tok_s: float | None
    requests_per_s: float | None
    goodput_rps: float | None
    completed: int
    output_tokens: int
    duration_s: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    requests_meeting_slo: int | None
    preemptions: int
    slot_use: float | None  # time-weighted share of the max_batch slots held (steps given)

    def to_json(self) -> dict:
        out = asdict(self)
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
            out[name] = getattr(self, name).to_json()
        return out


def ttft_ms(r: RequestTrace) -> float:
    return 1000 * (r.first_token_s - r.arrival_s)


def e2e_ms(r: RequestTrace) -> float:
    return 1000 * (r.token_s[-1] - r.arrival_s)


def output_tokens(r: RequestTrace) -> int:
    """N: a finished request's output length, else the tokens it has so far."""
    return r.output_len if r.finished else len(r.token_s)


def tpot_ms(r: RequestTrace) -> float | None:
    """(E2E - TTFT) / (N - 1); None for a single-token request."""
    n = output_tokens(r)
    return None if n < 2 else 1000 * (r.token_s[-1] - r.token_s[0]) / (n - 1)


def itl_ms(r: RequestTrace) -> list[float]:
    return [1000 * (b - a) for a, b in pairwise(r.token_s)]


def meets_slo(r: RequestTrace, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    """Whether a request met the run's SLOs (engine.calc.slo_math.meets_slo, the definition)."""
    return slo.meets_slo(ttft_ms(r), tpot_ms(r), ttft_limit_ms=slo_ttft_ms,
                         tpot_limit_ms=slo_tpot_ms)


def slot_use(steps: list[StepTrace], max_batch: int) -> float | None:
    """Time-weighted mean of running / max_batch over the steps: how full the batch was while
    the engine worked (idle time between steps is not counted)."""
    busy = sum(s.end_s - s.start_s for s in steps)
    if not steps or busy <= 0 or max_batch < 1:
        return None
    return sum(s.running * (s.end_s - s.start_s) for s in steps) / (max_batch * busy)


def _rate(count: float, duration: float | None) -> float | None:
    return None if not duration or duration <= 0 or math.isnan(duration) else count / duration


def compute_metrics(requests: Iterable[RequestTrace], steps: list[StepTrace] | None = None,
                    max_batch: int | None = None, slo_ttft_ms: float | None = None,
                    slo_tpot_ms: float | None = None) -> Metrics:
    """The metrics of a run (see the module docstring for each definition)."""
    requests = list(requests)
    done = [r for r in requests if r.finish_s is not None and r.token_s]
    duration = None
    if done:
        duration = max(r.finish_s for r in done) - min(r.arrival_s for r in done)
    tokens = sum(output_tokens(r) for r in done)
    meeting = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        meeting = sum(meets_slo(r, slo_ttft_ms, slo_tpot_ms) for r in done)
    tpots = (tpot_ms(r) for r in done)
    return Metrics(
        ttft_ms=summarize(ttft_ms(r) for r in done),
        tpot_ms=summarize(t for t in tpots if t is not None),
        itl_ms=summarize(gap for r in done for gap in itl_ms(r)),
        e2e_ms=summarize(e2e_ms(r) for r in done),
        queue_ms=summarize(1000 * (r.admitted_s - r.arrival_s) for r in done
                           if r.admitted_s is not None),
        throughput_tok_s=_rate(tokens, duration),
        requests_per_s=_rate(len(done), duration),
        goodput_rps=None if meeting is None else _rate(meeting, duration),
        completed=len(done),
        output_tokens=tokens,
        duration_s=duration,
        slo_ttft_ms=slo_ttft_ms,
        slo_tpot_ms=slo_tpot_ms,
        requests_meeting_slo=meeting,
        preemptions=sum(r.preemptions for r in requests),
        slot_use=slot_use(steps, max_batch) if steps is not None and max_batch else None,
    )
