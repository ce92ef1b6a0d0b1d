"""A request-rate sweep's settings and the analysis of its runs: pure functions on its records.

The SLO lesson measures a sweep and the capacity lesson looks the same sweep up in the
measurement cache, so both build its parameters here (a cache key is its parameters: one
function, one key). A rate may be run several times, each run with other requests; the
analysis pools a rate's runs into one point (all their requests, all their tokens over all
their time) and gives each figure with its 95% interval over the runs; from the judged points
it finds the operating points (the best goodput, the best throughput) and how the curves bend at
the top rate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..lab.results import RatePoint
from .slo_math import SLO, Judged, judge
from .stats import Estimate, estimates, runs_estimate

PROMPT_LEN, OUTPUT_LEN = [32, 128], [16, 64]  # the sweep's mix of lengths (tokens, low and high)
MAX_RATE, POINTS, REQUESTS, RUNS = 128.0, 5, 16, 3  # the sweep's default settings
CURVE_FIGURES = ("completed_rps", "goodput_rps", "throughput_tok_s", "goodput_tok_s")


def sweep_rates(max_rate: float, points: int) -> list[float]:
    """points rates, doubling up to max_rate: max_rate / 2^(points - 1), ..., max_rate."""
    return [round(max_rate / 2 ** (points - 1 - i), 4) for i in range(points)]


def sweep_params(max_rate: float, points: int, requests: int, runs: int, max_batch: int) -> dict:
    """The `rate_sweep` job's params for these settings, on the sweep's mix of lengths."""
    return {"rates": sweep_rates(max_rate, points), "requests": requests, "runs": runs,
            "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN, "max_batch": max_batch}


def default_sweep_params(max_batch: int) -> dict:
    """The sweep at its default rates, requests and runs and at a batch limit: the job the
    capacity lesson looks up in the cache to use the SLO lesson's measurement of a replica."""
    return sweep_params(MAX_RATE, POINTS, REQUESTS, RUNS, max_batch)


def pool_runs(points: list[RatePoint]) -> list[RatePoint]:
    """One point per rate, in rate order: its runs' requests together (their per-request lists
    joined; counts, tokens and seconds added), so a percentile or an attainment is of all the
    rate's requests and a throughput all its tokens over all its time (runs_estimate's figure).
    A rate of one run is that run."""
    by_rate: dict[float, list[RatePoint]] = {}
    for p in points:
        by_rate.setdefault(p.rate, []).append(p)
    return [runs[0] if len(runs) == 1 else _pool(runs) for _rate, runs in sorted(by_rate.items())]


def _pool(runs: list[RatePoint]) -> RatePoint:
    durations = [r.duration_s for r in runs]
    seconds = None if None in durations else sum(durations)
    done, tokens = sum(r.completed for r in runs), sum(r.output_tokens for r in runs)
    slots = [(r.slot_use, r.duration_s) for r in runs if r.slot_use is not None]
    itl_max = [r.itl_max_ms for r in runs if r.itl_max_ms is not None]
    return dataclasses.replace(
        runs[0], requests=sum(r.requests for r in runs), completed=done, duration_s=seconds,
        output_tokens=tokens, throughput_tok_s=tokens / seconds if seconds else None,
        requests_per_s=done / seconds if seconds else None,
        ttft_ms=[v for r in runs for v in r.ttft_ms], tpot_ms=[v for r in runs for v in r.tpot_ms],
        e2e_ms=[v for r in runs for v in r.e2e_ms],
        output_len=[v for r in runs for v in r.output_len],
        itl_p50_ms=None, itl_p99_ms=None, itl_max_ms=max(itl_max) if itl_max else None,
        preemptions=sum(r.preemptions for r in runs),
        slot_use=(sum(u * d for u, d in slots) / sum(d for _u, d in slots)
                  if seconds and slots else None),
        failed=None if all(r.failed is None for r in runs) else sum(r.failed or 0 for r in runs),
        run=None)


def point_estimates(point: RatePoint) -> dict[str, Estimate]:
    """The percentiles a rate is judged on (P50 and P99 of each metric the SLO can limit), each
    with its sample count and its 95% bootstrap interval over the rate's requests. TPOT is per
    request (a one-token answer has none and is not counted)."""
    return {f"P{q} {name}": est
            for name, values in (("TTFT", point.ttft_ms), ("TPOT", point.tpot_ms),
                                 ("E2E", point.e2e_ms))
            for q, est in zip((50, 99), estimates(values, (50, 99)))}


def run_figures(runs: list[RatePoint], slo: SLO) -> dict[str, Estimate]:
    """The rate curve's four figures at one rate from its runs, each all the runs' requests (or
    tokens) over all their time with its 95% interval over the runs (runs_estimate): the same
    figure as the pooled run's, judged against the SLO."""
    judged = [judge(r.to_dict(), slo) for r in runs if r.duration_s]
    seconds = [j.duration_s for j in judged]
    amounts = {"completed_rps": [j.completed for j in judged],
               "goodput_rps": [j.good for j in judged],
               "throughput_tok_s": [j.output_tokens for j in judged],
               "goodput_tok_s": [j.good_tokens for j in judged]}
    return {f: runs_estimate(amounts[f], seconds) for f in CURVE_FIGURES}


def curve_point(rate: float, figures: dict[str, Estimate]) -> dict:
    """A rate on the rate curve: each figure, its interval when its runs bound one, and the
    number of runs."""
    row: dict = {"rate": rate, "runs": None}
    for field, est in figures.items():
        row[field] = est.value
        row["runs"] = est.n
        if est.bounded:
            row.update({f"{field}_lo": est.lo, f"{field}_hi": est.hi})
    return row


@dataclass(frozen=True)
class OperatingPoints:
    """The best goodput and the best throughput among the measured rates, and where."""

    goodput_rate: float
    goodput_tok_s: float | None
    goodput_rps: float | None
    throughput_rate: float
    throughput_tok_s: float | None


def operating_points(judged: list[tuple[RatePoint, Judged]]) -> OperatingPoints | None:
    """The operating points among the judged rates that lasted some time; None when none did."""
    timed = [(p, j) for p, j in judged if j.duration_s]
    if not timed:
        return None
    good = max(timed, key=lambda pj: pj[1].goodput_tok_s or 0)
    fast = max(timed, key=lambda pj: pj[1].throughput_tok_s or 0)
    return OperatingPoints(
        goodput_rate=good[0].rate, goodput_tok_s=good[1].goodput_tok_s,
        goodput_rps=good[1].goodput_rps, throughput_rate=fast[0].rate,
        throughput_tok_s=fast[1].throughput_tok_s)


GOODPUT_FALL = 0.9  # goodput at the top rate under 90% of its best: it fell
THROUGHPUT_RISE = 1.5  # throughput up by half when the rate last doubled: it still rises


@dataclass(frozen=True)
class SweepTrend:
    """How a sweep's curves bend at its top rate: whether goodput fell from its best (by more
    than a tenth), and whether throughput still rose by half on the rate before."""

    goodput_falls: bool
    throughput_rises: bool
    top_rate: float
    top: Judged
    before: Judged
    best_goodput_rps: float

    @property
    def throughput_ratio(self) -> float:
        """The top rate's throughput over the rate before's."""
        return (self.top.throughput_tok_s or 0) / (self.before.throughput_tok_s or 1)


def sweep_trend(judged: list[tuple[RatePoint, Judged]]) -> SweepTrend | None:
    """The trend of a sweep of two rates or more, every one timed; None otherwise."""
    if len(judged) < 2 or any(j.duration_s is None for _p, j in judged):
        return None
    (_p0, before), (top_p, top) = judged[-2], judged[-1]
    best_good = max(j.goodput_rps or 0 for _p, j in judged)
    return SweepTrend(
        goodput_falls=(top.goodput_rps or 0) < GOODPUT_FALL * best_good,
        throughput_rises=(top.throughput_tok_s or 0) >= THROUGHPUT_RISE * (
            before.throughput_tok_s or 0),
        top_rate=top_p.rate, top=top, before=before, best_goodput_rps=best_good)
