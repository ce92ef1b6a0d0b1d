"""Throughput and goodput against rate: two panels, like with like, and a table."""

from __future__ import annotations

import math

import panel as pn

from widgets.rate_curve import RateCurve

P1 = {"rate": 1.0, "completed_rps": 0.9, "goodput_rps": 0.9, "throughput_tok_s": 40.0,
      "goodput_tok_s": 40.0}
P2 = {"rate": 4.0, "completed_rps": 3.1, "goodput_rps": 1.0, "throughput_tok_s": 120.0,
      "goodput_tok_s": 35.0}


def test_points_stream_in_rate_order_and_patch_when_rejudged():
    curve = RateCurve()
    pn.panel(curve).get_root()
    curve.add(P2)
    curve.add(P1)  # out of order: kept sorted
    assert [p["rate"] for p in curve.points()] == [1.0, 4.0]
    assert curve.offered.data == {"x": [1.0, 4.0], "y": [1.0, 4.0]}
    curve.set_points([{**P1, "goodput_rps": None, "goodput_tok_s": None}, P2])
    first = curve.points()[0]
    assert first["goodput_rps"] is None
    assert math.isnan(curve.source.data["goodput_rps"][0])  # a gap in the line, not a zero
    table = curve.table_html
    assert "goodput (req/s)" in table and "3.10" in table and "120" in table
    curve.set_points([])
    assert curve.points() == [] and curve.offered.data["x"] == []
