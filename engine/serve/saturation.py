"""Over-saturation: a load test whose server cannot keep up, so its queue, and with it every
request's TTFT, grows for as long as the test runs. Its figures then measure the test's length,
not the server; a rate sweep stops at the first such rate (`--rate 1,2,4,...`).

The test is GuideLLM's over-saturation detection (guidellm's scheduler constraint
`over_saturation`), applied to a finished run: a least-squares line through
- the requests outstanding at each sending, against the sending time, and
- each request's TTFT, against its sending time,
each counts as rising when its slope is positive and its margin of error (the t-critical value
at 95% confidence times the slope's standard error, divided by the slope) is below 2, with at
least 5 points. GuideLLM calls a run over-saturated when both rise; we also ask that the rate
achieved fall short of the rate offered, the plain symptom of a queue that grows, which keeps a
short run's chance rise out: requests completed per second, from the first completion to the
last, below 90% of requests sent per second, from the first sending to the last (both measured
in the run, so a short run's arrival draws, which can come faster or slower than the rate
asked for, do not count as the server's doing). GuideLLM's other guards (30 s before judging, half the TTFTs above 2.5 s) are for
its long runs on GPUs; a teaching run is seconds long, so they are left out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .trace import RequestTrace

MOE_THRESHOLD = 2.0
MIN_POINTS = 5
ACHIEVED_SHARE = 0.9
# two-sided 95% t-critical values by degrees of freedom (1..30); the normal 1.96 beyond
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_critical(dof: int) -> float:
    return T_975[dof - 1] if dof <= len(T_975) else 1.96


@dataclass(frozen=True)
class Slope:
    """A least-squares slope, its margin of error (relative), and whether it counts as rising."""

    slope: float | None
    margin_of_error: float | None
    points: int
    rising: bool


def rising(x: list[float], y: list[float]) -> Slope:
    """The slope of y against x and whether it rises (module docstring)."""
    n = len(x)
    if n < max(3, MIN_POINTS):
        return Slope(None, None, n, False)
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sxx = float(((xs - xs.mean()) ** 2).sum())
    if sxx <= 0:
        return Slope(None, None, n, False)
    sxy = float(((xs - xs.mean()) * (ys - ys.mean())).sum())
    syy = float(((ys - ys.mean()) ** 2).sum())
    slope = sxy / sxx
    rss = max(0.0, syy - sxy * sxy / sxx)
    se = math.sqrt(rss / (n - 2) / sxx)
    moe = t_critical(n - 2) * se / slope if slope > 0 else math.inf
    return Slope(slope, moe if math.isfinite(moe) else None, n,
                 slope > 0 and moe < MOE_THRESHOLD)


@dataclass(frozen=True)
class Saturation:
    """One run judged: its concurrency and TTFT slopes, the rate achieved against the rate
    offered (both measured), and the verdict."""

    offered_rps: float | None
    achieved_rps: float | None
    concurrency: Slope
    ttft: Slope
    over_saturated: bool

    def to_json(self) -> dict:
        return asdict(self)

    def reason(self) -> str:
        def rate(x):
            return "n/a" if x is None else f"{x:.2f}"
        return (f"TTFT rose {1000 * (self.ttft.slope or 0.0):.0f} ms per second of the test "
                f"and the requests outstanding grew {self.concurrency.slope or 0:.1f} per "
                f"second; {rate(self.achieved_rps)} req/s completed of "
                f"{rate(self.offered_rps)} sent")


def outstanding_at_sending(requests: list[RequestTrace]) -> list[tuple[float, int]]:
    """(sending time, requests outstanding then, itself included), in sending order."""
    sent = sorted((r for r in requests if r.arrival_s is not None), key=lambda r: r.arrival_s)
    out = []
    for r in sent:
        t = r.arrival_s
        out.append((t, sum(1 for q in sent if q.arrival_s <= t
                           and (q.finish_s is None or q.finish_s > t))))
    return out


def per_second(times: list[float]) -> float | None:
    """Events per second from the first to the last: (n - 1) / span; None for fewer than 2 or
    all at once."""
    if len(times) < 2 or max(times) <= min(times):
        return None
    return (len(times) - 1) / (max(times) - min(times))


def judge(requests: list[RequestTrace]) -> Saturation:
    """Whether a run was over-saturated (module docstring)."""
    load = outstanding_at_sending(requests)
    concurrency = rising([t for t, _ in load], [float(c) for _, c in load])
    done = [r for r in requests if r.first_token_s is not None]
    ttft = rising([r.arrival_s for r in done], [r.first_token_s - r.arrival_s for r in done])
    offered = per_second([t for t, _ in load])
    achieved = per_second([r.finish_s for r in requests if r.finish_s is not None])
    short = offered is not None and achieved is not None and \
        achieved < ACHIEVED_SHARE * offered
    return Saturation(offered, achieved, concurrency, ttft,
                      concurrency.rising and ttft.rising and short)
