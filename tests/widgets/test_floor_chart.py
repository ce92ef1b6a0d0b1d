"""Measured values beside their floor: kept in x order, with the ratio in the table."""

from __future__ import annotations

import panel as pn

from widgets.floor_chart import FloorChart


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
