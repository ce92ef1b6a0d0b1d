"""The roofline chart: roofs from the two limits, measured points, the table beside."""

from __future__ import annotations

import panel as pn
import pytest
from bokeh.models import ColumnDataSource, Span

from widgets.roofline_chart import RooflineChart


def test_roof_is_the_minimum_of_the_two_limits():
    chart = RooflineChart()
    root = pn.panel(chart).get_root()
    assert chart.roof.data["x"] == [] and chart.ridge_point is None
    chart.set_limits(30.0, 180.0)
    xs, ys = chart.roof.data["x"], chart.roof.data["y"]
    assert chart.ridge_point == 6.0 and xs[1] == 6.0
    assert ys == [min(180.0, 30.0 * x) for x in xs]
    spans = [m for m in root.references() if isinstance(m, Span)]
    assert any(s.location == 6.0 and s.visible for s in spans)
    assert "ridge point 6.00 FLOP/byte" in chart.table_html


def test_the_roof_is_flat_from_the_ridge_at_exactly_the_peak():
    chart = RooflineChart()
    chart.set_limits(38.8, 185.0)  # 38.8 x (185 / 38.8) rounds to 184.99999999999997
    ys = chart.roof.data["y"]
    assert ys[1] == ys[2] == 185.0 and ys[0] == pytest.approx(38.8 * chart.roof.data["x"][0])


def test_points_stream_into_their_series_and_the_table():
    chart = RooflineChart(series=["decode step", "prefill pass"])
    root = pn.panel(chart).get_root()
    chart.set_limits(30.0, 180.0)
    chart.add_point("decode step", "decode, batch 1", 0.5, 7.5, 20.0)
    chart.add_point("prefill pass", "prefill, 1,024 tokens", 500.0, 90.0, 900.0)
    decode = chart.points("decode step")
    assert decode[0]["intensity"] == 0.5 and decode[0]["roof_share"] == pytest.approx(0.5)
    sources = [m for m in root.references() if isinstance(m, ColumnDataSource)]
    assert any(s.data.get("label") == ["prefill, 1,024 tokens"] for s in sources)
    assert chart.roof.data["x"][-1] >= 1500  # the roof stretches past the rightmost point
    table = chart.table_html
    assert "decode, batch 1" in table and "50%" in table and "prefill, 1,024 tokens" in table
    with pytest.raises(ValueError, match="unknown series"):
        chart.add_point("training step", "x", 1, 1, 1)
    chart.clear()
    assert chart.points("decode step") == [] and "decode, batch 1" not in chart.table_html


def test_a_point_before_the_limits_has_no_share_yet():
    chart = RooflineChart()
    chart.add_point("decode step", "decode, batch 4", 2.0, 10.0, 5.0)
    assert chart.roof_at(2.0) is None and "decode, batch 4" in chart.table_html
