"""Latency targets (SLOs), goodput under them, and the cost of a million tokens.

Pure Python (numpy only, no torch), so a page can re-judge a measured run against new targets as
the reader types them, without running anything again.

Goodput counts the completed requests that meet every SLO, per second of the run. Whether one
request met its SLOs is `meets_slo`, the one definition (vLLM's --goodput): per-request limits on
TTFT, on TPOT (a request with one token has no TPOT and meets any TPOT limit) and, here, on E2E;
a limit of None is not checked. engine.serve.metrics judges a run's requests with it under the
--slo-ttft-ms and --slo-tpot-ms limits.

Targets are the five an interactive chat service might start from (P50/P99 TTFT, P50/P99 ITL,
P99 E2E). Goodput needs a yes or no for each request, so `request_meets` holds each request to
the limits no single request should pass: its TTFT within the P99 TTFT target, its TPOT (its mean
gap) within the P50 ITL target, and its E2E within the P99 E2E target. Goodput tokens/s counts
the output tokens of the requests that met them.

Cost per million output tokens = (price per hour / 3600) x (1,000,000 / tokens per second).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Targets:
    """Latency targets in ms; None: not part of the SLO."""

    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.ttft_p50_ms, self.ttft_p99_ms, self.itl_p50_ms,
                                       self.itl_p99_ms, self.e2e_p99_ms))


# Quoted starting targets for an interactive chat at moderate load (the E2E one is for a
# 512-token answer); see INTERACTIVE_CHAT_SOURCE. Not measured here.
INTERACTIVE_CHAT = Targets(ttft_p50_ms=300, ttft_p99_ms=1200, itl_p50_ms=40, itl_p99_ms=120,
                           e2e_p99_ms=8000)
INTERACTIVE_CHAT_SOURCE = ("starting targets often suggested for an interactive chat service at "
                           "moderate load: rules of thumb gathered in this course's content brief "
                           "(lesson 2's reference points), not an industry standard")


def meets_slo(ttft_ms: float, tpot_ms: float | None, e2e_ms: float | None = None, *,
              ttft_limit_ms: float | None = None, tpot_limit_ms: float | None = None,
              e2e_limit_ms: float | None = None) -> bool:
    """Whether one request met every SLO given: TTFT, TPOT and E2E each within its limit (None:
    not checked). A request with no TPOT (one output token) meets any TPOT limit, as vLLM counts
    its TPOT as 0."""
    if ttft_limit_ms is not None and ttft_ms > ttft_limit_ms:
        return False
    if tpot_limit_ms is not None and tpot_ms is not None and tpot_ms > tpot_limit_ms:
        return False
    return e2e_limit_ms is None or e2e_ms <= e2e_limit_ms


def request_meets(ttft_ms: float, tpot_ms: float | None, e2e_ms: float,
                  targets: Targets) -> bool:
    """Whether one request met the per-request limits the targets imply (see the module doc):
    TTFT within the P99 TTFT target, TPOT within the P50 ITL target, E2E within the P99 E2E."""
    return meets_slo(ttft_ms, tpot_ms, e2e_ms, ttft_limit_ms=targets.ttft_p99_ms,
                     tpot_limit_ms=targets.itl_p50_ms, e2e_limit_ms=targets.e2e_p99_ms)


def percentile(values, q: float) -> float | None:
    """numpy's linear-interpolation percentile (as engine.serve.metrics uses); None for no values."""
    data = [v for v in values if v is not None]
    return float(np.percentile(data, q)) if data else None


@dataclass(frozen=True)
class Judged:
    """One run judged against targets."""

    completed: int
    good: int
    duration_s: float | None
    output_tokens: int
    good_tokens: int
    checks: tuple[tuple[str, float | None, float, bool], ...]  # (what, measured, target, met)

    @property
    def requests_per_s(self) -> float | None:
        return self.completed / self.duration_s if self.duration_s else None

    @property
    def goodput_rps(self) -> float | None:
        return self.good / self.duration_s if self.duration_s else None

    @property
    def throughput_tok_s(self) -> float | None:
        return self.output_tokens / self.duration_s if self.duration_s else None

    @property
    def goodput_tok_s(self) -> float | None:
        return self.good_tokens / self.duration_s if self.duration_s else None

    @property
    def all_targets_met(self) -> bool:
        return all(met for *_, met in self.checks)


def judge(point: dict, targets: Targets) -> Judged:
    """Judge a measured run (a rate_sweep point: per-request ttft_ms, tpot_ms, e2e_ms,
    output_len lists, itl_p50_ms, itl_p99_ms and duration_s) against the targets."""
    ttft, tpot, e2e = point["ttft_ms"], point["tpot_ms"], point["e2e_ms"]
    outputs = point["output_len"]
    good = [request_meets(a, b, c, targets) for a, b, c in zip(ttft, tpot, e2e, strict=True)]
    measured = {
        "P50 TTFT": (percentile(ttft, 50), targets.ttft_p50_ms),
        "P99 TTFT": (percentile(ttft, 99), targets.ttft_p99_ms),
        "P50 ITL": (point.get("itl_p50_ms"), targets.itl_p50_ms),
        "P99 ITL": (point.get("itl_p99_ms"), targets.itl_p99_ms),
        "P99 E2E": (percentile(e2e, 99), targets.e2e_p99_ms),
    }
    checks = tuple((what, value, target, value is not None and value <= target)
                   for what, (value, target) in measured.items() if target is not None)
    return Judged(completed=len(ttft), good=sum(good), duration_s=point.get("duration_s"),
                  output_tokens=int(sum(outputs)),
                  good_tokens=int(sum(o for o, g in zip(outputs, good, strict=True) if g)),
                  checks=checks)


def cost_per_million_tokens(price_per_hour: float, tokens_per_s: float) -> float:
    """(price per hour / 3600) x (1,000,000 / tokens per second). ValueError for bad inputs."""
    if not price_per_hour >= 0:
        raise ValueError("the price per hour cannot be negative")
    if not tokens_per_s > 0:
        raise ValueError("no tokens were produced, so a million of them has no price")
    return (price_per_hour / 3600) * (1_000_000 / tokens_per_s)
