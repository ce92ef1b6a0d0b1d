"""Latency targets (SLOs), goodput and SLO attainment under them, and the cost of a million
tokens.

Pure Python (numpy only, no torch), so a page can re-judge a measured run against new limits as
the reader types them, without running anything again.

An SLO here is what vLLM's benchmark takes with --goodput: per-request limits on TTFT, on TPOT
and, optionally, on E2E (`SLO`; a limit of None is not checked). Whether one request met them is
`meets_slo`, the one definition: engine.serve.metrics judges a run's requests with it under the
--slo-ttft-ms and --slo-tpot-ms limits, and the pages through `SLO.met`. A request with one
output token has no TPOT and meets any TPOT limit (vLLM counts its TPOT as 0).

- goodput = requests that met every limit / the run's wall time (goodput tokens/s counts their
  output tokens);
- SLO attainment = requests that met every limit / completed requests;
- the percentile check holds the run's P50 and P99 of each limited metric to the same limit. A
  P99 within the TTFT limit says 99% of requests met that one limit; attainment counts those
  that met all of them at once, so it can be lower than every percentile suggests.

Cost per million output tokens = (price per hour / 3600) x (1,000,000 / tokens per second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SLO:
    """Per-request limits in ms (vLLM's --goodput ttft:X tpot:Y e2el:Z); None: not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None

    def met(self, ttft_ms: float, tpot_ms: float | None, e2e_ms: float | None = None) -> bool:
        """Whether one request met every limit (meets_slo, the definition)."""
        return meets_slo(ttft_ms, tpot_ms, e2e_ms, ttft_limit_ms=self.ttft_ms,
                         tpot_limit_ms=self.tpot_ms, e2e_limit_ms=self.e2e_ms)


@dataclass(frozen=True)
class Targets:
    """A service's two latency targets, both set: TTFT and TPOT in ms. The one record for what
    lesson 8's capacity search holds a load to (its P95 TTFT, and tokens/s each user) and what
    lesson 12's plan holds a deployment to: a reader's speed is 1000 / TPOT tokens/s, so "at
    least 20 tokens/s each" is "TPOT at most 50 ms" (`per_user`). Unlike an SLO, neither may be
    left out; `slo()` is the same pair as per-request limits."""

    ttft_ms: float
    tpot_ms: float

    @classmethod
    def per_user(cls, ttft_ms: float, per_user_tok_s: float) -> Targets:
        """Targets from a TTFT and the tokens/s each user must get (0: no speed target)."""
        return cls(ttft_ms, 1000.0 / per_user_tok_s if per_user_tok_s > 0 else math.inf)

    @property
    def per_user_tok_s(self) -> float:
        """The slowest reading speed the TPOT target allows: 1000 / TPOT (0 when unlimited)."""
        return 1000.0 / self.tpot_ms if self.tpot_ms > 0 else math.inf

    def slo(self) -> SLO:
        return SLO(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms)


# Example limits for a chat, each taken from a published example (CHAT_SOURCES); not measured
# here, and not an industry standard: a page lets the reader set their own.
CHAT = SLO(ttft_ms=200.0, tpot_ms=100.0)
CHAT_SOURCES = (
    ("TTFT 200 ms", "the DistServe authors' blog post (Hao AI Lab, 2024, "
                    "hao-ai-lab.github.io/blogs/distserve): \"a chatbot may require a fast "
                    "initial response (e.g., under 0.2 seconds)\""),
    ("TPOT 100 ms", "Databricks documentation, \"Conduct your own LLM endpoint benchmarking\": "
                    "\"a TPOT of 100 milliseconds per token would be 10 tokens per second, or "
                    "~450 words per minute, which is faster than a typical person can read\""),
)


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


def per_user_tokens_per_s(tpot_ms: float | None) -> float | None:
    """One reader's speed: 1000 / TPOT in ms (a TPOT of 10 ms is 100 tokens/s). From TPOT, the
    mean gap, so a stall in the middle of an answer counts (the median gap would hide it);
    None when there is no TPOT (one output token)."""
    return 1000.0 / tpot_ms if tpot_ms else None


def percentile(values, q: float) -> float | None:
    """numpy's linear-interpolation percentile (as engine.serve.metrics uses); None for no values."""
    data = [v for v in values if v is not None]
    return float(np.percentile(data, q)) if data else None


@dataclass(frozen=True)
class Judged:
    """One run judged against an SLO."""

    completed: int
    good: int  # requests that met every limit
    duration_s: float | None
    output_tokens: int
    good_tokens: int
    met_each: tuple[tuple[str, int], ...]  # (metric, requests within its own limit)
    checks: tuple[tuple[str, float | None, float, bool], ...]  # (what, measured, limit, met)

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
    def attainment(self) -> float | None:
        """Share of completed requests that met every limit (0 to 1)."""
        return self.good / self.completed if self.completed else None

    @property
    def all_checks_met(self) -> bool:
        return all(met for *_, met in self.checks)


def judge(point: dict, slo: SLO) -> Judged:
    """Judge a measured run (a rate_sweep point: per-request ttft_ms, tpot_ms, e2e_ms and
    output_len lists, and duration_s) against per-request limits."""
    ttft, tpot, e2e = point["ttft_ms"], point["tpot_ms"], point["e2e_ms"]
    outputs = point["output_len"]
    good = [slo.met(a, b, c) for a, b, c in zip(ttft, tpot, e2e, strict=True)]
    limited = [(name, values, limit) for name, values, limit in
               (("TTFT", ttft, slo.ttft_ms), ("TPOT", tpot, slo.tpot_ms),
                ("E2E", e2e, slo.e2e_ms)) if limit is not None]
    met_each = tuple((name, sum(1 for v in values if v is None or v <= limit))
                     for name, values, limit in limited)
    checks = []
    for name, values, limit in limited:
        for q in (50, 99):
            value = percentile(values, q)
            checks.append((f"P{q} {name}", value, limit, value is not None and value <= limit))
    return Judged(completed=len(ttft), good=sum(good), duration_s=point.get("duration_s"),
                  output_tokens=int(sum(outputs)),
                  good_tokens=int(sum(o for o, g in zip(outputs, good, strict=True) if g)),
                  met_each=met_each, checks=tuple(checks))


def cost_per_million_tokens(price_per_hour: float, tokens_per_s: float) -> float:
    """(price per hour / 3600) x (1,000,000 / tokens per second). ValueError for bad inputs."""
    if not price_per_hour >= 0:
        raise ValueError("the price per hour cannot be negative")
    if not tokens_per_s > 0:
        raise ValueError("no tokens were produced, so a million of them has no price")
    return (price_per_hour / 3600) * (1_000_000 / tokens_per_s)
