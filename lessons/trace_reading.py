"""Reading a serving run's trace (engine.lab.results.ServedRun: requests, steps, metrics) in
plain words: the percentile table, each request's latencies, and why the slowest requests were
slow.

Pure functions on the run's record, no Panel: lessons 2 and 3 (and any other page) can use and
test them.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from engine.calc.stats import Estimate, estimates, grouped_estimates
from engine.lab.results import (
    EndpointLoadTestResult,
    Percentiles,
    RunMetrics,
    ServedRun,
    StepRecord,
)
from widgets.tables import with_interval

STAT_COLUMNS = ("P50", "mean", "P90", "P95", "P99", "max", "samples")


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "\u2013"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def stats(summary: Percentiles) -> tuple[float | None, ...]:
    """A summary's figures in STAT_COLUMNS' order (P50, mean, P90, P95, P99, max)."""
    return (summary.p50, summary.mean, summary.p90, summary.p95, summary.p99, summary.max)


STAT_QS = (50, None, 90, 95, 99)  # the columns that are statistics with an interval (not max)


def request_samples(run: ServedRun | EndpointLoadTestResult) -> dict[str, list[list[float]]]:
    """Each finished request's samples of each figure of percentile_rows, in ms: one a request
    (TTFT, TPOT, E2E, queue), or its gaps (ITL)."""
    out: dict[str, list[list[float]]] = {"ttft": [], "itl": [], "tpot": [], "e2e": [],
                                         "queue": []}
    for r in run.requests:
        if r.finish_s is None or not r.token_s:
            continue
        gaps = [1000 * (b - a) for a, b in zip(r.token_s, r.token_s[1:])]
        out["ttft"].append([1000 * (r.first_token_s - r.arrival_s)])
        out["itl"].append(gaps)
        out["tpot"].append([statistics.mean(gaps)] if gaps else [])
        out["e2e"].append([1000 * (r.token_s[-1] - r.arrival_s)])
        out["queue"].append([] if r.admitted_s is None else [1000 * (r.admitted_s - r.arrival_s)])
    return out


def _estimates(key: str, groups: list[list[float]]) -> list[Estimate]:
    """STAT_QS' estimates of one figure: a request's gaps are resampled together (they move
    together, engine.calc.stats.grouped_estimate); the other figures, one a request, singly."""
    if key == "itl":
        return grouped_estimates(groups, STAT_QS)
    return estimates([v for g in groups for v in g], STAT_QS)


def percentile_rows(m: RunMetrics, run: ServedRun | EndpointLoadTestResult | None = None
                    ) -> list[tuple]:
    """(metric label, P50, mean, P90, P95, P99, max, samples) in ms as text, for a table. Given
    the run, each statistic carries its 95% interval from the run's requests ("412 [380–450]",
    "412 †" for a percentile too few samples bound) and the samples column their count."""
    rows = (("TTFT (to first token)", "ttft", m.ttft_ms), ("ITL (each gap)", "itl", m.itl_ms),
            ("TPOT (mean gap per request)", "tpot", m.tpot_ms),
            ("E2E (to last token)", "e2e", m.e2e_ms), ("queue time", "queue", m.queue_ms))
    samples = request_samples(run) if run is not None else None
    out = []
    for label, key, summary in rows:
        figures = stats(summary)
        if samples is None:
            out.append((label, *[fmt_ms(v) for v in figures], f"{summary.count:,}"))
            continue
        ests = _estimates(key, samples[key])
        cells = [with_interval(v, e) for v, e in zip(figures, ests, strict=False)]
        requests = sum(1 for g in samples[key] if g)
        n = (f"{ests[0].n:,} gaps of {requests} requests" if key == "itl"
             else f"{ests[0].n:,} requests")
        out.append((label, *cells, fmt_ms(summary.max), n))
    return out


@dataclass(frozen=True)
class Latency:
    """One finished request's latencies, in ms (times from the run's start); `why` says what
    made it slow (filled in by `slowest`)."""

    id: int
    size: str  # "short" or "long" in a load test, "" otherwise
    prompt_len: int
    output_len: int
    arrival_ms: float
    admitted_ms: float | None  # None when timed at a client, which never sees admission
    first_token_ms: float
    finish_ms: float
    queue_ms: float | None
    ttft_ms: float
    e2e_ms: float
    preemptions: int
    why: tuple[str, ...] = ()


def request_latencies(run: ServedRun | EndpointLoadTestResult) -> list[Latency]:
    """Per finished request: id, size class, prompt and output tokens, and in ms its arrival,
    queue time, TTFT, E2E, first token and finish (times from the run's start). A run timed at
    a client has no admission times: its queue times are None."""
    out = []
    for r in run.requests:
        if r.finish_s is None or not r.token_s:
            continue
        a, admitted = r.arrival_s, r.admitted_s
        out.append(Latency(
            id=r.id, size=r.size or "", prompt_len=r.prompt_len, output_len=len(r.token_s),
            arrival_ms=1000 * a, admitted_ms=None if admitted is None else 1000 * admitted,
            first_token_ms=1000 * r.first_token_s, finish_ms=1000 * r.finish_s,
            queue_ms=None if admitted is None else 1000 * (admitted - a),
            ttft_ms=1000 * (r.first_token_s - a),
            e2e_ms=1000 * (r.token_s[-1] - a), preemptions=r.preemptions))
    return out


def _running_at(steps: Sequence[StepRecord], t: float) -> int:
    """Batch slots held by the last step that started at or before t (0 before any)."""
    starts = [s.start_s for s in steps]
    i = bisect.bisect_right(starts, t) - 1
    return steps[i].running if i >= 0 else 0


def explain_request(run: ServedRun, rid: int) -> list[str]:
    """Why a request took as long as it did, read from the trace, biggest cause first."""
    req = next(r for r in run.requests if r.id == rid)
    done = [r for r in run.requests if r.finish_s is not None and r.token_s]
    steps = run.steps
    max_batch = run.config.max_batch
    a, admitted, first = req.arrival_s, req.admitted_s, req.first_token_s
    e2e = req.token_s[-1] - a
    causes: list[tuple[float, str]] = []  # (seconds it explains, words)

    queue = admitted - a
    if queue > 0.2 * e2e and queue > 0.005:
        busy = _running_at(steps, a)
        slots = f" ({busy} of {max_batch} batch slots were taken when it arrived)" \
            if max_batch else ""
        causes.append((queue, f"waited {1000 * queue:,.0f} ms in the queue for a free "
                              f"slot{slots}"))

    median_out = statistics.median(len(r.token_s) for r in done)
    n_out = len(req.token_s)
    gaps = [b - x for x, b in zip(req.token_s, req.token_s[1:])]
    if n_out >= 2 * median_out and n_out > 1:
        typical = statistics.median(gaps) if gaps else 0.0
        causes.append(((n_out - median_out) * typical,
                       f"a long answer: {n_out} tokens, {n_out / median_out:.1f} x the "
                       f"median of {median_out:.0f}"))

    median_prompt = statistics.median(r.prompt_len for r in done)
    prefill = first - admitted
    if req.prompt_len >= 2 * median_prompt and prefill > 0:
        causes.append((prefill, f"a long prompt: {req.prompt_len} tokens to read before the "
                                f"first token ({1000 * prefill:,.0f} ms from admission)"))

    during = [s for s in steps if first < s.end_s <= req.finish_s]
    stalls = [s for s in during if s.prefill_tokens > 0]
    if gaps and stalls:
        typical = statistics.median(gaps)
        worst = max(gaps)
        if worst > 2 * typical:
            extra = sum(max(0.0, (s.end_s - s.start_s) - typical) for s in stalls)
            causes.append((extra, f"{len(stalls)} of its decode steps also read other requests' "
                                  f"prompts ({sum(s.prefill_tokens for s in stalls):,} "
                                  f"tokens); its worst gap was {1000 * worst:,.0f} ms against a "
                                  f"typical {1000 * typical:,.1f} ms"))
    if during and max_batch:
        mean_batch = statistics.mean(s.decode_seqs for s in during)
        if mean_batch >= 0.75 * max_batch and mean_batch > 1:
            causes.append((0.0, f"a crowded batch: each of its decode steps carried "
                                f"{mean_batch:.1f} sequences on average"))
    if req.preemptions:
        causes.append((0.0, f"pushed out of the batch {req.preemptions} time(s) for lack of "
                            "KV memory, and recomputed"))
    if not causes:
        return ["no single cause stands out: it met a busy server at an unlucky moment"]
    causes.sort(key=lambda c: -c[0])
    return [words for _, words in causes]


def slowest(run: ServedRun, count: int = 5) -> list[Latency]:
    """The `count` requests with the largest E2E, each with its `why`."""
    rows = sorted(request_latencies(run), key=lambda r: -r.e2e_ms)[:count]
    return [dataclasses.replace(row, why=tuple(explain_request(run, row.id))) for row in rows]
