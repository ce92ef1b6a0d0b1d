"""engine.calc.stats: the bootstrap interval covers the true value about 95% of the time for
known distributions, and percentiles from too few samples are marked unbounded."""

import math

import numpy as np
import pytest

from engine.calc.stats import (
    CONFIDENCE,
    bootstrap_interval,
    bootstrap_intervals,
    deciles,
    estimate,
    estimates,
    grouped_estimate,
    grouped_estimates,
    min_samples,
    ratio_interval,
    runs_estimate,
    series_estimate,
    series_estimates,
)

DRAWS = 300  # independent samples per distribution: coverage's standard error about 1.3%


def coverage(draw, q, truth, n, seed=1):
    rng = np.random.default_rng(seed)
    hits = 0
    for i in range(DRAWS):
        lo, hi = bootstrap_interval(draw(rng, n), q, resamples=800, seed=i)
        hits += lo <= truth <= hi
    return hits / DRAWS


def test_median_of_a_normal_is_covered_about_95_percent():
    cov = coverage(lambda rng, n: rng.normal(10, 2, n), 50, 10.0, 100)
    assert 0.91 <= cov <= 0.985


def test_mean_of_a_skewed_distribution_is_covered_about_95_percent():
    cov = coverage(lambda rng, n: rng.exponential(3.0, n), None, 3.0, 120)
    assert 0.89 <= cov <= 0.985


def test_p90_of_a_lognormal_latency_is_covered_about_95_percent():
    truth = math.exp(0.5 * 1.2815516)  # lognormal(0, 0.5): exp(sigma * z_0.9)
    cov = coverage(lambda rng, n: rng.lognormal(0, 0.5, n), 90, truth, 300)
    assert 0.89 <= cov <= 0.985


def test_the_interval_brackets_the_value_and_narrows_with_more_samples():
    rng = np.random.default_rng(7)
    small = estimate(rng.lognormal(3, 0.4, 40), 50)
    large = estimate(rng.lognormal(3, 0.4, 1600), 50)
    for e in (small, large):
        assert e.lo <= e.value <= e.hi
    assert (large.hi - large.lo) < (small.hi - small.lo) / 3  # about 1/sqrt(40) as wide


def test_too_few_samples_to_bound_a_percentile():
    assert [min_samples(q) for q in (50, 90, 95, 99, 99.9)] == [2, 10, 20, 100, 1000]
    rng = np.random.default_rng(3)
    assert not estimate(rng.normal(size=99), 99).bounded
    assert estimate(rng.normal(size=100), 99).bounded
    assert not estimate(rng.normal(size=19), 95).bounded
    assert estimate(rng.normal(size=19), 50).bounded
    note = estimate(rng.normal(size=32), 99).note()
    assert "too few samples" in note and "n = 32" in note and "100" in note
    with pytest.raises(ValueError):
        min_samples(100)


def test_same_samples_same_interval_and_bad_values_skipped():
    data = [5.0, 7.0, None, 6.0, float("nan"), 9.0, 4.0]
    a, b = estimate(data, 50), estimate(data, 50)
    assert a == b and a.n == 5 and a.value == 6.0
    assert estimate([], 50).value is None and estimate([], 50).note() == "no samples"
    one = estimate([3.0])
    assert (one.value, one.lo, one.hi, one.bounded) == (3.0, 3.0, 3.0, False)


def test_ratio_interval_swaps_the_ends():
    e = estimate([9.0, 10.0, 11.0, 10.0, 10.5, 9.5], 50)
    lo, hi = ratio_interval(8, e)
    assert lo == pytest.approx(8 / e.hi) and hi == pytest.approx(8 / e.lo) and lo < hi


def test_why_the_rule_a_p99_from_50_samples_is_not_covered():
    """The bootstrap cannot see past the slowest sample: a P99 interval from 50 samples misses
    the true P99 most of the time, which is why such a percentile is marked unbounded."""
    truth = math.exp(0.5 * 2.3263479)
    assert coverage(lambda rng, n: rng.lognormal(0, 0.5, n), 99, truth, 50) < 0.7


def requests_gaps(rng, groups=30, per=20):
    """Token gaps of `groups` requests: each request's own level (normal, sd 1) plus noise
    (sd 1), so one request's gaps move together. The population median is 0."""
    return [rng.normal(rng.normal(0, 1), 1, per) for _ in range(groups)]


def test_grouped_interval_covers_the_pooled_median_when_a_requests_gaps_move_together():
    rng = np.random.default_rng(11)
    hits = pooled_hits = 0
    for i in range(150):
        groups = requests_gaps(rng)
        est = grouped_estimate(groups, 50, resamples=400, seed=i)
        hits += est.lo <= 0.0 <= est.hi
        lo, hi = bootstrap_interval(np.concatenate(groups), 50, resamples=400, seed=i)
        pooled_hits += lo <= 0.0 <= hi
    assert 0.89 <= hits / 150 <= 0.99
    assert pooled_hits / 150 < 0.75  # resampling single gaps: far too narrow


def test_grouped_estimate_is_the_pooled_percentile_with_its_count():
    groups = [[1.0, 2.0, 3.0], [4.0, None], [], [5.0, 6.0, 7.0, 8.0]]
    est = grouped_estimate(groups, 50)
    assert est.value == float(np.percentile([1, 2, 3, 4, 5, 6, 7, 8], 50)) and est.n == 8
    assert est.lo <= est.value <= est.hi and est.bounded
    assert not grouped_estimate(groups, 99).bounded  # 8 gaps cannot bound a P99
    one = grouped_estimate([[1.0, 2.0, 3.0]], 50)
    assert one.lo is None and not one.bounded  # one request: nothing to resample
    assert grouped_estimate([[], [None]], 50).value is None
    mean = grouped_estimate(groups, None)
    assert mean.what == "mean" and mean.value == 4.5 and mean.lo <= 4.5 <= mean.hi


def one_streams_gaps(rng, n=120, phi=0.6):
    """One stream's gaps in order: an AR(1) series (each gap phi times the last one's offset
    plus noise), so neighbours move together as a stall spans a few steps. Median 0."""
    noise = rng.normal(0, 1, n)
    gaps = np.empty(n)
    gaps[0] = noise[0] / math.sqrt(1 - phi ** 2)
    for i in range(1, n):
        gaps[i] = phi * gaps[i - 1] + noise[i]
    return gaps


def test_series_interval_covers_the_median_of_one_streams_correlated_gaps():
    rng = np.random.default_rng(5)
    hits = single_hits = 0
    for i in range(150):
        gaps = one_streams_gaps(rng)
        est = series_estimate(gaps, 50, resamples=400, seed=i)
        assert est.n == 120 and est.bounded and est.value == float(np.percentile(gaps, 50))
        hits += est.lo <= 0.0 <= est.hi
        lo, hi = bootstrap_interval(gaps, 50, resamples=400, seed=i)
        single_hits += lo <= 0.0 <= hi
    # a block bootstrap undercovers a short series (0.81-0.89 for n 47-120, phi 0.3-0.6, with
    # these seeds: 125 of 150 here), single gaps resampled far more (110 of 150 here)
    assert 0.78 <= hits / 150 <= 0.99, hits / 150
    assert single_hits + 10 <= hits, (single_hits, hits)


def test_series_estimate_marks_a_p99_of_one_answer_unbounded():
    gaps = list(np.linspace(10, 20, 47))  # 48 tokens: 47 gaps
    assert not series_estimate(gaps, 99).bounded and series_estimate(gaps, 50).bounded
    assert series_estimate([12.0], 50).lo is None  # one gap: one block, nothing to resample


@pytest.mark.parametrize("runs", [3, 5])
def test_a_rate_over_repeated_runs_is_covered_about_95_percent(runs):
    """Runs of a rate sweep: each lasts a few seconds (its arrivals are random) and produces
    tokens at the true rate, give or take 10% (what else the machine did, when requests came).
    Student's t over the runs' residuals covers the true rate; the normal's 1.96 would not with
    so few runs."""
    rng = np.random.default_rng(3)
    hits = narrow = 0
    draws = 2000
    for _ in range(draws):
        seconds = rng.uniform(3.0, 5.0, runs)
        amounts = 100.0 * seconds * (1 + 0.1 * rng.normal(size=runs))
        est = runs_estimate(amounts, seconds)
        hits += est.lo <= 100.0 <= est.hi
        half = 1.96 / 2.0 * (est.hi - est.lo) / {3: 4.303, 5: 2.776}[runs]
        narrow += est.value - half <= 100.0 <= est.value + half
    assert 0.93 <= hits / draws <= 0.97
    assert narrow / draws < 0.92  # the same standard error without t: too narrow


def test_runs_estimate_is_all_the_amount_over_all_the_time():
    est = runs_estimate([300.0, 500.0], [3.0, 4.0])
    assert est.value == pytest.approx(800 / 7) and est.n == 2 and est.bounded
    assert est.lo < est.value < est.hi
    same = runs_estimate([200.0, 300.0, 400.0], [2.0, 3.0, 4.0])  # the same rate every run
    assert same.value == same.lo == same.hi == pytest.approx(100.0)
    one = runs_estimate([300.0], [3.0])  # one run: no spread to judge it by
    assert (one.value, one.lo, one.hi, one.bounded) == (100.0, None, None, False)
    assert runs_estimate([0.0, 4.0, 0.0], [1.0, 1.0, 1.0]).lo == 0.0  # a rate is never < 0
    assert runs_estimate([], []).value is None
    with pytest.raises(ValueError):
        runs_estimate([1.0], [1.0, 2.0])


def test_deciles_stay_within_a_few_samples():
    """statistics.quantiles' default method puts the p10 of 1, 2, 3 at 0.4; numpy's linear
    percentile, and deciles, at 1.2."""
    assert deciles([1.0, 2.0, 3.0])[0] == pytest.approx(1.2)
    assert deciles([1.0, 2.0, 3.0])[-1] == pytest.approx(2.8)
    for values in ([5.0, 1.0], [2.0] * 3, list(range(7))):
        cuts = deciles(values)
        assert cuts == pytest.approx(list(np.percentile(values, range(10, 100, 10))))
    assert deciles([4.0]) == [4.0] * 9


def resampled_groups_reference(groups, q, resamples, seed):
    """grouped_estimate's interval the plain way: each resample's picked groups joined and its
    statistic taken by numpy, with the same picks (the seed's first draw)."""
    picks = np.random.default_rng(seed).integers(0, len(groups), size=(resamples, len(groups)))
    stats = [np.mean(np.concatenate([groups[g] for g in row])) if q is None
             else np.percentile(np.concatenate([groups[g] for g in row]), q) for row in picks]
    tail = 100 * (1 - CONFIDENCE) / 2
    return tuple(np.percentile(stats, [tail, 100 - tail]))


@pytest.mark.parametrize("seed", [0, 7])
def test_grouped_estimates_equal_resampling_the_groups_plainly(seed):
    """The counting method (no resample gathered or sorted) gives each resample's statistic
    as joining its groups and asking numpy would: ties, one-sample groups, uneven sizes."""
    rng = np.random.default_rng(100 + seed)
    groups = [np.round(rng.lognormal(size=k), 1) for k in (1, 3, 17, 2, 40, 5, 9)]  # ties
    qs = (50, None, 90, 95, 99)
    got = grouped_estimates(groups, qs, resamples=300, seed=seed)
    for q, est in zip(qs, got):
        lo, hi = resampled_groups_reference(groups, q, 300, seed)
        assert (est.lo, est.hi) == pytest.approx((lo, hi), rel=1e-12, abs=1e-12)
        assert est == grouped_estimate(groups, q, resamples=300, seed=seed)  # one at a time


def test_many_statistics_at_once_are_those_asked_one_by_one():
    rng = np.random.default_rng(3)
    data = rng.lognormal(size=61)
    qs = (None, 50, 90, 99)
    assert estimates(data, qs) == [estimate(data, q) for q in qs]
    assert bootstrap_intervals(data, qs, resamples=500, seed=4) == [
        bootstrap_interval(data, q, resamples=500, seed=4) for q in qs]
    assert estimates([], qs)[2].value is None and estimates([2.0], qs)[1].lo == 2.0
    assert grouped_estimates([[1.0, 2.0]], qs)[0].lo is None  # one group: no interval
    gaps = list(rng.lognormal(size=47))
    assert series_estimates(gaps, qs) == [series_estimate(gaps, q) for q in qs]
