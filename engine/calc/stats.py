"""How sure a measured number is: its sample count and a 95% confidence interval.

A page that shows "P99 TTFT 412 ms" from 32 requests says more than it knows. Every statistic of
several samples a page shows goes through `estimate`, which returns the value together with

- n, the number of samples it was computed from;
- a 95% bootstrap confidence interval (the percentile method: resample the samples with
  replacement B times, compute the statistic on each resample, take the 2.5th and 97.5th
  percentiles of those). It needs no assumption about the shape of the distribution, which for
  latencies is skewed to the right; it is what load-testing tools (GuideLLM, AIPerf) report;
- `bounded`: whether the sample can bound this percentile at all. A P99 is the value 1 request
  in 100 exceeds; from fewer than 100 requests the slowest one is the only evidence, and no
  resampling makes up for the requests that were never sent. The rule: a percentile q needs at
  least 1 / (1 - q/100) samples (P50: 2, P90: 10, P95: 20, P99: 100), so that the tail it
  describes holds at least one sample on average. An unbounded percentile is still computed,
  but pages mark it ("too few samples") rather than draw it as if it were known.

Percentiles are numpy's linear interpolation, as engine.serve.metrics and calc.slo_math compute
them, so an interval always brackets the figure the page already shows. The resampling is seeded:
the same samples give the same interval on every reload. Torch-free (numpy only).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000  # bootstrap resamples: the interval's ends move by under 1% of its width
SEED = 0


def min_samples(q: float) -> int:
    """The fewest samples that can bound percentile q (0-100): 1 / (1 - q/100), rounded up
    (P50: 2, P90: 10, P95: 20, P99: 100). The mean (q=None elsewhere) needs 2."""
    if not 0 <= q < 100:
        raise ValueError(f"a percentile is between 0 and 100, not including 100 (got {q})")
    return max(2, math.ceil(1 / (1 - q / 100) - 1e-9))


@dataclass(frozen=True)
class Estimate:
    """A statistic of n samples with its 95% interval [lo, hi]; bounded False when n is too few
    for the statistic (see min_samples), and then lo/hi only describe the samples at hand."""

    what: str  # "mean", "P50", "P99", ...
    value: float | None
    lo: float | None
    hi: float | None
    n: int
    bounded: bool

    @property
    def min_n(self) -> int:
        return 2 if self.what == "mean" else min_samples(float(self.what[1:]))

    def note(self) -> str:
        """The sample count and interval in words, for a table cell or a tooltip."""
        if self.value is None:
            return "no samples"
        if not self.bounded:
            return (f"n = {self.n}: too few samples to bound the {self.what} "
                    f"(needs at least {self.min_n})")
        return f"95% CI {_fmt(self.lo)} to {_fmt(self.hi)}, n = {self.n}"

    def to_dict(self) -> dict:
        return {"what": self.what, "value": self.value, "ci_lo": self.lo, "ci_hi": self.hi,
                "n": self.n, "bounded": self.bounded}


def deciles(values: Sequence[float]) -> list[float]:
    """The nine cut points p10, p20, ..., p90 of values (at least one): statistics.quantiles'
    inclusive method, the same linear interpolation as numpy's percentile, so each lies within
    the data. (Its default, the exclusive method, extrapolates past the smallest and largest of
    a few samples: the p10 of 1, 2 and 3 ms would be 0.4 ms, faster than any step timed.)"""
    if len(values) == 1:
        return [float(values[0])] * 9
    return statistics.quantiles(values, n=10, method="inclusive")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _clean(samples: Iterable[float | None]) -> np.ndarray:
    return np.asarray([float(s) for s in samples if s is not None and math.isfinite(s)],
                      dtype=float)


def _label(q: float | None) -> str:
    return "mean" if q is None else f"P{q:g}"


def estimate(samples: Iterable[float | None], q: float | None = None, *,
             resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """The mean (q None) or the q-th percentile of the samples (None values skipped), with its
    95% bootstrap interval and sample count."""
    return estimates(samples, (q,), resamples=resamples, seed=seed)[0]


def estimates(samples: Iterable[float | None], qs: Sequence[float | None], *,
              resamples: int = RESAMPLES, seed: int = SEED) -> list[Estimate]:
    """estimate of each of `qs` from one set of resamples (the same figures: see
    grouped_estimates)."""
    data = _clean(samples)
    n = len(data)
    if n == 0:
        return [Estimate(_label(q), None, None, None, 0, False) for q in qs]
    values = [float(data.mean() if q is None else np.percentile(data, q)) for q in qs]
    if n == 1:
        return [Estimate(_label(q), v, v, v, 1, False) for q, v in zip(qs, values)]
    intervals = bootstrap_intervals(data, qs, resamples=resamples, seed=seed)
    return [Estimate(_label(q), v, lo, hi, n, n >= (2 if q is None else min_samples(q)))
            for q, v, (lo, hi) in zip(qs, values, intervals)]


def grouped_estimate(groups: Iterable[Iterable[float | None]], q: float | None, *,
                     resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """The q-th percentile (the mean for q None) of every sample of every group pooled (the
    token gaps of many requests: what the engine's ITL figures are), with a 95% interval from
    resampling whole groups. One request's gaps move together (a long prefill in the batch stalls every gap of
    that moment, a request decoding beside many others has long gaps throughout), so resampling
    single gaps as if independent gives an interval too narrow. n is the pooled samples;
    bounded needs min_samples(q) of them (2 for the mean) from at least 2 groups."""
    return grouped_estimates(groups, (q,), resamples=resamples, seed=seed)[0]


def grouped_estimates(groups: Iterable[Iterable[float | None]], qs: Sequence[float | None], *,
                      resamples: int = RESAMPLES, seed: int = SEED) -> list[Estimate]:
    """grouped_estimate of each of `qs`, the same figures, from one set of resamples: the
    resamples depend on the seed alone, so each statistic is computed on the same draws; drawn
    and sorted once, they cost one statistic's time, not one per statistic (the web server's
    core computes them for every result a lesson 2 table shows)."""
    kept = [g for g in (_clean(group) for group in groups) if len(g)]
    if not kept:
        return [Estimate(_label(q), None, None, None, 0, False) for q in qs]
    pooled = np.concatenate(kept)
    n = len(pooled)
    values = [float(pooled.mean() if q is None else np.percentile(pooled, q)) for q in qs]
    if len(kept) == 1:
        return [Estimate(_label(q), v, None, None, n, False) for q, v in zip(qs, values)]
    # A resample picks groups, some more than once: its samples are the pooled ones, each
    # counted as often as its group was picked. In the pooled samples' sorted order (fixed) a
    # resample's k-th smallest is where its running count of samples passes k: no resample is
    # gathered or sorted, only counted (bench/results/web.md has what it saves).
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(kept), size=(resamples, len(kept)))
    times = np.zeros((resamples, len(kept)), dtype=np.int32)  # each group's picks, per resample
    np.add.at(times, (np.arange(resamples)[:, None], picks), 1)
    sizes = np.array([len(g) for g in kept])
    totals = times @ sizes  # samples in each resample
    order = np.argsort(pooled, kind="stable")
    ordered = pooled[order]
    group_of = np.repeat(np.arange(len(kept)), sizes)[order]
    cuts = {q: np.empty(resamples) for q in qs if q is not None}
    chunk = max(1, 500_000 // n)  # resamples counted at a time: a few MB however long the run
    for start in range(0, resamples, chunk):
        part = slice(start, min(start + chunk, resamples))
        running = np.cumsum(times[part][:, group_of], axis=1, dtype=np.int32)
        rows = np.arange(len(running))
        stride = int(totals[part].max()) + 1  # each resample's counts moved past the last's
        flat = (running + stride * rows[:, None].astype(np.int64)).ravel()
        for q, out in cuts.items():  # numpy's linear percentile of each resample
            pos = (totals[part] - 1) * q / 100
            below = np.floor(pos).astype(int)
            low, high = (ordered[np.searchsorted(flat, k + stride * rows, side="right") - rows * n]
                         for k in (below, np.minimum(below + 1, totals[part] - 1)))
            out[part] = low + (high - low) * (pos - below)
    means = (times @ np.array([g.sum() for g in kept])) / totals
    tail = 100 * (1 - CONFIDENCE) / 2
    estimates = []
    for q, value in zip(qs, values):
        lo, hi = np.percentile(means if q is None else cuts[q], [tail, 100 - tail])
        estimates.append(Estimate(_label(q), value, float(lo), float(hi), n,
                                  n >= (2 if q is None else min_samples(q))))
    return estimates


def block_length(n: int) -> int:
    """Neighbouring samples per block when resampling a series of n: n^(1/3) rounded up, at
    least 2 (the order of block length that the block bootstrap's theory asks for: long enough
    to keep what neighbours share, short enough to leave many blocks to resample)."""
    return max(2, math.ceil(n ** (1 / 3) - 1e-9))


def series_estimate(samples: Iterable[float | None], q: float | None, *,
                    resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """The q-th percentile (the mean for q None) of one time series (one stream's token gaps,
    in order), with a 95% interval from a block bootstrap: the series cut into consecutive
    blocks of block_length(n) samples, whole blocks resampled (grouped_estimate, each block a
    group). Neighbouring gaps of one stream move together: a background request's prefill or
    another process taking the core stalls a few steps in a row, and the batch's size changes
    only now and then. Resampling single gaps would treat them as independent and give an
    interval too narrow (the test shows it on a correlated series); keeping neighbours together
    in blocks keeps that dependence (Carlstein's non-overlapping block bootstrap). It still
    undercovers a short series: on AR(1) series of 47-120 gaps (phi 0.3-0.6) its 95% interval
    covered the median 81-89% of the time, against 73% resampling single gaps (phi 0.6, n 120;
    tests/engine/calc/test_stats.py). n is the samples; bounded as in grouped_estimate
    (min_samples(q) samples, at least 2 blocks)."""
    return series_estimates(samples, (q,), resamples=resamples, seed=seed)[0]


def series_estimates(samples: Iterable[float | None], qs: Sequence[float | None], *,
                     resamples: int = RESAMPLES, seed: int = SEED) -> list[Estimate]:
    """series_estimate of each of `qs` from one set of resamples (the same figures: see
    grouped_estimates)."""
    return batch_series_estimates([samples], qs, resamples=resamples, seed=seed)


def batch_series_estimate(streams: Sequence[Iterable[float | None]], q: float | None, *,
                          resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """series_estimate for several streams decoded together (a batch's sequences: they share
    every step, so their gaps at the same place move together): a block is the same positions
    of every stream, resampled as one."""
    return batch_series_estimates(streams, (q,), resamples=resamples, seed=seed)[0]


def batch_series_estimates(streams: Sequence[Iterable[float | None]],
                           qs: Sequence[float | None], *, resamples: int = RESAMPLES,
                           seed: int = SEED) -> list[Estimate]:
    """batch_series_estimate of each of `qs` from one set of resamples."""
    data = [_clean(s) for s in streams]
    longest = max((len(d) for d in data), default=0)
    size = block_length(longest)
    blocks = [np.concatenate([d[i:i + size] for d in data]) for i in range(0, longest, size)]
    return grouped_estimates(blocks, qs, resamples=resamples, seed=seed)


# Student's t, two-sided 95%, by degrees of freedom (runs - 1): a few runs' spread is itself
# uncertain, so the interval widens to cover it (1 degree: 12.7 standard errors; 4: 2.78)
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262}


def runs_estimate(amounts: Sequence[float], seconds: Sequence[float]) -> Estimate:
    """A rate measured in repeated runs (tokens/s, requests/s): all the runs' amount over all
    their time, and its 95% interval from how the runs differ (the ratio estimator's, as survey
    statistics computes it for repeated clusters: the runs' residuals a_i - R t_i give its
    standard error, widened by Student's t with runs - 1 degrees of freedom; 1.96 past 10 runs).
    The samples are the runs, not the requests: the requests of one run share its queue and
    the machine's state, and what moves a rate's figure from one run to the next (when the
    requests came, what else the machine did) shows only between runs. bounded needs 2 runs."""
    a = np.asarray(amounts, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(a) != len(t):
        raise ValueError(f"{len(a)} amounts for {len(t)} durations")
    n = len(a)
    if n == 0 or not t.sum() > 0:
        return Estimate("mean", None, None, None, n, False)
    rate = float(a.sum() / t.sum())
    if n == 1:
        return Estimate("mean", rate, None, None, 1, False)
    residuals = a - rate * t
    se = float(np.sqrt((residuals ** 2).sum() / (n * (n - 1)))) / float(t.mean())
    half = T_95.get(n - 1, 1.96) * se
    return Estimate("mean", rate, max(0.0, rate - half), rate + half, n, True)  # never < 0


def bootstrap_interval(data: Sequence[float] | np.ndarray, q: float | None, *,
                       resamples: int = RESAMPLES, seed: int = SEED,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile-method bootstrap interval of the mean (q None) or q-th percentile."""
    return bootstrap_intervals(data, (q,), resamples=resamples, seed=seed,
                               confidence=confidence)[0]


def bootstrap_intervals(data: Sequence[float] | np.ndarray, qs: Sequence[float | None], *,
                        resamples: int = RESAMPLES, seed: int = SEED,
                        confidence: float = CONFIDENCE) -> list[tuple[float, float]]:
    """bootstrap_interval of each of `qs`, from one set of resamples (drawn once: the draws
    depend on the seed alone, so the figures are those of one call per statistic)."""
    data = np.asarray(data, dtype=float)
    rng = np.random.default_rng(seed)
    percentiles = [q for q in qs if q is not None]
    # resample in chunks so that a long run (thousands of samples) stays within a few MB
    chunk = max(1, 2_000_000 // max(1, len(data)))
    means, cuts = [], []
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, len(data), size=(min(chunk, resamples - start), len(data)))
        draws = data[idx]
        if None in qs:
            means.append(draws.mean(axis=1))
        if percentiles:  # one partition of the draws for every percentile asked
            cuts.append(np.percentile(draws, percentiles, axis=1))
    tail = 100 * (1 - confidence) / 2
    out = []
    for q in qs:
        stats = (np.concatenate(means) if q is None
                 else np.concatenate([c[percentiles.index(q)] for c in cuts]))
        lo, hi = np.percentile(stats, [tail, 100 - tail])
        out.append((float(lo), float(hi)))
    return out


def ratio_interval(numerator: float, est: Estimate) -> tuple[float | None, float | None]:
    """numerator / x for an estimate of x (tokens/s from a step time): the interval's ends swap,
    as the ratio falls when x rises."""
    if est.lo is None or est.hi is None or est.lo <= 0 or est.hi <= 0:
        return None, None
    return numerator / est.hi, numerator / est.lo
