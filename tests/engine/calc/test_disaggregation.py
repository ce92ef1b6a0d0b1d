"""The disaggregation lesson's analysis: the best arm, the handover's line, the KV transfer."""

from __future__ import annotations

import pytest

from engine.calc.disaggregation import ArmRow, best, fit_line, median, transfer_ms


def row(arm, ttft99, itl99, goodput, met=None, completed=10):
    return ArmRow(arm, "measured live", None, ttft99, itl99, goodput, met, completed)


def test_best_picks_the_lowest_tail_and_the_highest_goodput():
    rows = [row("colocated", 900.0, 400.0, 1.0), row("chunked", 700.0, 90.0, 1.5),
            row("disaggregated", 650.0, 40.0, None)]
    assert best(rows, "ttft_p99_ms") == "disaggregated"
    assert best(rows, "itl_p99_ms") == "disaggregated"
    assert best(rows, "goodput_rps", lower=False) == "chunked"  # the one without a figure skipped
    assert best([row("a", None, None, None)], "goodput_rps", lower=False) is None
    assert row("a", 1, 1, 1, met=7).attainment == 0.7
    assert row("a", 1, 1, 1).attainment is None


def test_fit_line_recovers_a_line_and_needs_two_points():
    fit = fit_line([16, 64, 256], [1.0 + 0.01 * x for x in (16, 64, 256)])
    assert fit.fixed == pytest.approx(1.0) and fit.per_unit == pytest.approx(0.01)
    assert fit.at(100) == pytest.approx(2.0)
    assert fit_line([5, 5], [1.0, 2.0]) is None
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([1.0, 4.0]) == 2.5 and median([]) is None


def test_transfer_time_is_the_kv_bytes_over_the_link():
    # 1000 tokens of 128 KiB each over 100 GB/s: 131.072 MB / 100 GB/s = 1.31072 ms
    assert transfer_ms(1000, 131072, 100.0) == pytest.approx(1.31072)
    with pytest.raises(ValueError):
        transfer_ms(1, 1, 0.0)
