"""engine.calc.rate_sweep: the sweep's rates and parameters (one cache key for both lessons that
read it) and the pooling of a rate's runs, checked against sums done by hand."""

from __future__ import annotations

import pytest

from engine.calc.rate_sweep import (
    MAX_RATE,
    POINTS,
    REQUESTS,
    RUNS,
    curve_point,
    default_sweep_params,
    operating_points,
    point_estimates,
    pool_runs,
    run_figures,
    sweep_params,
    sweep_rates,
    sweep_trend,
)
from engine.calc.slo_math import SLO, judge
from engine.calc.stats import Estimate
from engine.lab.results import RatePoint


def point(rate, ttft, tpot, seconds, tokens, run=None, itl_max=None, slot_use=None) -> RatePoint:
    n = len(ttft)
    return RatePoint(rate=rate, requests=n, completed=n, duration_s=seconds,
                     output_tokens=tokens, throughput_tok_s=tokens / seconds,
                     requests_per_s=n / seconds, ttft_ms=list(ttft), tpot_ms=list(tpot),
                     e2e_ms=[t + 10 for t in ttft], output_len=[tokens // n] * n,
                     itl_p50_ms=1.0, itl_p99_ms=2.0, itl_max_ms=itl_max, preemptions=1,
                     slot_use=slot_use, run=run)


def test_rates_double_up_to_the_highest():
    assert sweep_rates(16, 5) == [1, 2, 4, 8, 16]
    assert sweep_rates(3, 2) == [1.5, 3]


def test_the_default_sweep_is_the_sweep_at_the_default_settings():
    assert default_sweep_params(8) == sweep_params(MAX_RATE, POINTS, REQUESTS, RUNS, 8)
    assert default_sweep_params(8)["rates"] == sweep_rates(MAX_RATE, POINTS)
    assert default_sweep_params(8) != default_sweep_params(32)


def test_pooling_joins_a_rates_runs_and_adds_their_totals():
    a = point(2.0, [10, 20], [5, None], 1.0, 30, run=1, itl_max=7.0, slot_use=0.5)
    b = point(2.0, [30, 40, 50], [6, 7, 8], 3.0, 60, run=2, itl_max=9.0, slot_use=1.0)
    c = point(1.0, [5], [4], 2.0, 10)
    first, second = pool_runs([a, c, b])
    assert first is c  # a rate of one run is that run, and rates come in order
    assert second.ttft_ms == [10, 20, 30, 40, 50] and second.tpot_ms == [5, None, 6, 7, 8]
    assert (second.requests, second.completed, second.output_tokens) == (5, 5, 90)
    assert second.duration_s == 4.0
    assert second.throughput_tok_s == pytest.approx(90 / 4.0)
    assert second.requests_per_s == pytest.approx(5 / 4.0)
    assert second.slot_use == pytest.approx((0.5 * 1 + 1.0 * 3) / 4)  # weighted by time
    assert (second.itl_max_ms, second.itl_p50_ms, second.preemptions, second.run) == (
        9.0, None, 2, None)


def test_run_figures_are_the_pooled_runs_figures_with_an_interval_over_the_runs():
    runs = [point(4.0, [10] * 4, [5] * 4, 2.0, 40, run=1),
            point(4.0, [10, 10, 900, 900], [5] * 4, 2.0, 44, run=2)]
    figures = run_figures(runs, SLO(ttft_ms=100, tpot_ms=50))
    assert figures["throughput_tok_s"].value == pytest.approx(84 / 4.0)
    assert figures["completed_rps"].value == pytest.approx(8 / 4.0)
    assert figures["goodput_rps"].value == pytest.approx(6 / 4.0)  # two requests too late
    assert all(f.n == 2 for f in figures.values())


def test_point_estimates_name_the_percentiles_the_slo_is_judged_on():
    est = point_estimates(point(1.0, list(range(1, 101)), [2.0] * 100, 10.0, 1000))
    assert set(est) == {f"P{q} {m}" for q in (50, 99) for m in ("TTFT", "TPOT", "E2E")}
    assert est["P50 TTFT"].n == 100 and est["P99 TTFT"].bounded
    assert est["P50 TPOT"].value == pytest.approx(2.0)


def judged(*points):
    slo = SLO(ttft_ms=25.0)  # a request counts if its first token came within 25 ms
    return [(p, judge(p.to_dict(), slo)) for p in points]


def test_operating_points_are_the_best_goodput_and_the_best_throughput():
    low = point(1.0, [10, 20], [5, 5], 1.0, 20)  # both good: 20 good tokens/s
    mid = point(2.0, [10, 30, 40], [5, 5, 5], 1.0, 30)  # one good of three
    top = point(4.0, [50, 60, 70, 80], [5] * 4, 1.0, 40)  # none good, the most tokens
    best = operating_points(judged(low, mid, top))
    assert (best.goodput_rate, best.goodput_tok_s, best.goodput_rps) == (1.0, 20, 2)
    assert (best.throughput_rate, best.throughput_tok_s) == (4.0, 40)
    untimed = point(1.0, [10], [5], 1.0, 10)
    assert operating_points([(untimed, judge({**untimed.to_dict(), "duration_s": None},
                                              SLO()))]) is None


def test_the_trend_says_whether_goodput_fell_and_throughput_still_rose():
    low = point(1.0, [10, 20], [5, 5], 1.0, 20)  # goodput 2/s
    mid = point(2.0, [10, 30, 40], [5, 5, 5], 1.0, 30)  # goodput 1/s: fell
    top = point(4.0, [50, 60, 70, 80], [5] * 4, 1.0, 40)  # goodput 0; throughput x1.33
    trend = sweep_trend(judged(low, mid, top))
    assert (trend.goodput_falls, trend.throughput_rises) == (True, False)
    assert trend.top_rate == 4.0 and trend.best_goodput_rps == 2
    assert trend.throughput_ratio == pytest.approx(40 / 30)
    rising = sweep_trend(judged(low, point(2.0, [10, 12], [5, 5], 1.0, 40)))
    assert (rising.goodput_falls, rising.throughput_rises) == (False, True)
    assert sweep_trend(judged(low)) is None  # one rate has no trend


def test_a_curve_point_carries_an_interval_only_where_the_runs_bound_one():
    row = curve_point(2.0, {"goodput_rps": Estimate("mean", 3.0, 2.5, 3.5, 3, True),
                            "throughput_tok_s": Estimate("mean", 90.0, None, None, 1, False)})
    assert row == {"rate": 2.0, "runs": 1, "goodput_rps": 3.0, "goodput_rps_lo": 2.5,
                   "goodput_rps_hi": 3.5, "throughput_tok_s": 90.0}
