"""What each traffic class got out of a run: its TTFT percentiles (with counts and intervals),
its refusals, and its output throughput; and what lanes and quotas changed between runs.

Definitions (torch-free, from a run's request records):
- a class's TTFT P50 and P99 are over its requests that completed (first token minus arrival),
  with 95% bootstrap intervals (calc.stats.estimate); a P99 from fewer than 100 requests is
  marked unbounded there, and pages say so;
- a class's throughput is its output tokens divided by its span: from its first arrival to its
  last finish, in seconds (a batch job's tokens per second as the job's owner sees them);
- a class's makespan is that span: how long the job took, end to end;
- the flooding tenant is counted apart from the other interactive users ("tenant" below), since
  a quota is there to protect the others from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .stats import Estimate, estimate


@dataclass(frozen=True)
class ClassRecord:
    """One request as the analysis needs it: its lane, tenant, times in seconds, tokens."""

    traffic_class: str
    tenant: str | None
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    output_tokens: int
    refused: str | None = None

    @classmethod
    def from_json(cls, r: Mapping) -> ClassRecord:
        """From a request of the `run` JSON (its traffic_class and tenant fields)."""
        return cls(r.get("traffic_class") or "default", r.get("tenant"), r["arrival_s"],
                   r.get("first_token_s"), r.get("finish_s"),
                   len(r.get("token_s") or []), r.get("refused"))


@dataclass(frozen=True)
class ClassStats:
    """A group of requests (a class, or a class's requests of some tenants) in one run."""

    name: str
    arrived: int
    completed: int
    refused: int
    ttft_p50: Estimate
    ttft_p99: Estimate
    output_tokens: int
    span_s: float | None  # first arrival to last finish
    throughput_tok_s: float | None

    def to_dict(self) -> dict:
        return {"name": self.name, "arrived": self.arrived, "completed": self.completed,
                "refused": self.refused, "ttft_p50_ms": self.ttft_p50.to_dict(),
                "ttft_p99_ms": self.ttft_p99.to_dict(), "output_tokens": self.output_tokens,
                "span_s": self.span_s, "throughput_tok_s": self.throughput_tok_s}


def ttft_ms(r: ClassRecord) -> float | None:
    if r.first_token_s is None or r.finish_s is None:
        return None
    return 1000 * (r.first_token_s - r.arrival_s)


def group_stats(name: str, records: Iterable[ClassRecord]) -> ClassStats:
    """The stats of one group of requests (see the module docstring)."""
    records = list(records)
    done = [r for r in records if r.finish_s is not None and r.first_token_s is not None]
    ttfts = [ttft_ms(r) for r in done]
    p50, p99 = estimate(ttfts, 50), estimate(ttfts, 99)
    tokens = sum(r.output_tokens for r in done)
    span = None
    if done:
        span = max(r.finish_s for r in done) - min(r.arrival_s for r in records)
    return ClassStats(name, len(records), len(done), sum(r.refused is not None for r in records),
                      p50, p99, tokens, span, tokens / span if span and span > 0 else None)


def class_stats(records: Iterable[ClassRecord], split_tenant: str | None = None
                ) -> dict[str, ClassStats]:
    """Stats per class, in the order classes first appear. With split_tenant, that tenant's
    requests form a group of their own, named "<class>/<tenant>", and leave their class's."""
    groups: dict[str, list[ClassRecord]] = {}
    for r in records:
        name = r.traffic_class
        if split_tenant is not None and r.tenant == split_tenant:
            name = f"{name}/{split_tenant}"
        groups.setdefault(name, []).append(r)
    return {name: group_stats(name, rs) for name, rs in groups.items()}


def ratio(new: float | None, old: float | None) -> float | None:
    """new / old, or None when either is missing or old is 0: how many times a figure moved."""
    if new is None or old is None or old == 0:
        return None
    return new / old
