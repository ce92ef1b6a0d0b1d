"""Throughput and goodput against rate: two panels, like with like, and a table."""

from __future__ import annotations

import math

import panel as pn
from bokeh.models import Whisker

from widgets.rate_curve import FIGURES, RateCurve

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


def test_each_figure_carries_its_interval_over_the_runs():
    curve = RateCurve()
    pn.panel(curve).get_root()
    curve.set_points([{**P1, "throughput_tok_s_lo": 36.0, "throughput_tok_s_hi": 44.0,
                       "goodput_rps_lo": 0.8, "goodput_rps_hi": 1.0, "runs": 3}, P2])
    one, four = curve.points()
    assert (one["throughput_tok_s_lo"], one["throughput_tok_s_hi"], one["runs"]) == (
        36.0, 44.0, 3)
    assert four["throughput_tok_s_lo"] is None and four["runs"] is None  # one run: none
    drawn = {(w.lower, w.upper) for fig in curve.figures for w in fig.center
             if isinstance(w, Whisker)}
    assert drawn == {(f"{f}_lo", f"{f}_hi") for f in FIGURES}
    table = curve.table_html
    assert "40.0 [36.0–44.0]" in table and "0.900 [0.800–1.00]" in table
