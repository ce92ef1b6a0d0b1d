"""The analysis of one workload served three ways (colocated without and with chunked prefill,
and disaggregated): each arm's TTFT, ITL tail and DistServe's goodput side by side, the handover
against prompt length, and the time a prompt's KV takes over a link of a stated bandwidth.

Definitions (engine/serve/metrics.py computes them from each run's trace):
- TTFT: arrival to the first token. Disaggregated, the first token comes from the prefill
  worker, so the handover is not in it; it is in the gap to the second token (an ITL).
- goodput (DistServe, OSDI 2024): completed requests per second that met both the TTFT target
  and the TPOT target.
Pure and torch-free: the pages import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ARMS = ("colocated", "chunked", "disaggregated")
ARM_NAMES = {"colocated": "colocated, whole prompts", "chunked": "colocated, chunked prefill",
             "disaggregated": "disaggregated"}


@dataclass(frozen=True)
class ArmRow:
    """One arm's figures for the comparison table; how: "measured live" or "computed from
    measured costs" (the replay)."""

    arm: str
    how: str
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    goodput_rps: float | None
    met: int | None
    completed: int
    handover_p50_ms: float | None = None

    @property
    def attainment(self) -> float | None:
        """The share of requests that met both targets."""
        return None if self.met is None or not self.completed else self.met / self.completed


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return None
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def best(rows: Sequence[ArmRow], field: str, lower: bool = True) -> str | None:
    """The arm with the best value of field (lowest, or highest when lower is False); None
    where no arm has one."""
    have = [r for r in rows if getattr(r, field) is not None]
    if not have:
        return None
    pick = min if lower else max
    return pick(have, key=lambda r: getattr(r, field)).arm


@dataclass(frozen=True)
class LineFit:
    """seconds = fixed + per_unit * x, by least squares."""

    fixed: float
    per_unit: float

    def at(self, x: float) -> float:
        return self.fixed + self.per_unit * x


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """The least-squares line through (xs, ys); None with fewer than two distinct xs."""
    if len(xs) != len(ys):
        raise ValueError("as many ys as xs")
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
             / sum((x - mx) ** 2 for x in xs))
    return LineFit(my - slope * mx, slope)


def kv_bytes(prompt_len: int, kv_bytes_per_token: int) -> int:
    """The KV a prompt's prefill leaves: every layer's keys and values for each token."""
    return prompt_len * kv_bytes_per_token


def transfer_ms(prompt_len: int, kv_bytes_per_token: int, link_gb_per_s: float) -> float:
    """Milliseconds to move a prompt's KV over a link at link_gb_per_s (10^9 bytes a second),
    the bandwidth alone (no latency, no overlap with the prefill)."""
    if link_gb_per_s <= 0:
        raise ValueError("the link's bandwidth must be above zero")
    return 1000 * kv_bytes(prompt_len, kv_bytes_per_token) / (link_gb_per_s * 1e9)
