"""Measured values beside their floor: kept in x order, with the ratio in the table."""

from __future__ import annotations

import panel as pn
from bokeh.models import Whisker

from engine.calc.stats import estimate
from widgets.floor_chart import FloorChart
from widgets.tables import UNBOUNDED, sig


def test_points_are_sorted_and_replaced_by_x():
    chart = FloorChart()
    pn.panel(chart).get_root()
    chart.add(1, 20.0, 10.0)
    chart.add(4, 30.0, 10.5)
    chart.add(2, 24.0, 10.2)
    assert [r["x"] for r in chart.rows()] == [1, 2, 4]
    assert chart.rows()[0]["ratio"] == 2.0
    chart.add(2, 22.0, 10.2)  # measured again
    assert [r["measured"] for r in chart.rows()] == [20.0, 22.0, 30.0]
    assert "2.0x" in chart.table_html and "batch size" in chart.table_html
    chart.clear()
    assert chart.rows() == []


def test_a_measured_median_carries_its_interval_whisker_and_sample_count():
    chart = FloorChart()
    pn.panel(chart).get_root()
    steps = [2.0, 2.1, 2.2, 2.3, 2.4, 2.2, 2.1, 2.3]
    est = estimate(steps, 50)
    chart.add(1, est.value, 1.0, est)
    chart.add(2, 3.0, 1.1, estimate([3.0], 50))  # one step: no interval to draw
    chart.add(4, 4.0, 1.2)  # no samples given
    one, two, four = chart.rows()
    assert (one["lo"], one["hi"], one["n"]) == (est.lo, est.hi, 8)
    assert est.lo <= est.value <= est.hi and est.lo < est.hi
    assert (two["lo"], two["hi"], two["n"]) == (None, None, 1)
    assert (four["lo"], four["hi"], four["n"]) == (None, None, None)
    [whisker] = [r for r in chart.figure.center if isinstance(r, Whisker)]
    assert whisker.source is chart.source and (whisker.lower, whisker.upper) == ("lo", "hi")
    html = chart.table_html
    assert f"[{sig(est.lo)}\u2013{sig(est.hi)}]" in html and ">8<" in html
    assert f"{sig(3.0)} {UNBOUNDED}" in html  # a median of one step: marked, not drawn as known
