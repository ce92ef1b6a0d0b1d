"""The latency histogram's bars and markers, from values or from a run's summary."""

from __future__ import annotations

import numpy as np
import panel as pn
import pytest

from widgets.latency_histogram import LatencyHistogram, histogram, marker_values


def test_marker_values_use_linear_percentiles_like_the_engine():
    values = list(range(1, 101))
    marks = marker_values(values)
    assert marks["p50"] == pytest.approx(np.percentile(values, 50))
    assert marks["p99"] == pytest.approx(np.percentile(values, 99))
    assert marks["mean"] == pytest.approx(50.5)
    assert marker_values([]) == {}


def test_histogram_starts_at_zero_and_counts_every_value():
    counts, edges = histogram([5.0, 10.0, 400.0], bins=10)
    assert edges[0] == 0.0 and counts.sum() == 3 and edges[-1] >= 400.0


def test_update_draws_bars_and_markers_in_order():
    hist = LatencyHistogram(bins=20)
    pn.panel(hist).get_root()
    skewed = [100.0] * 90 + [1000.0] * 10
    hist.update(skewed)
    assert sum(hist.bars.data["count"]) == 100 and hist.count == 100
    names = hist.marks.data["name"]
    assert names == ["p50", "mean", "p90", "p95", "p99"]
    x = dict(zip(names, hist.marks.data["x"]))
    assert x["mean"] > x["p50"]  # the tail pulls the mean right of the median
    assert x["p99"] >= x["p95"] >= x["p90"] >= x["p50"]
    assert hist.rows()[0] == ("P50", x["p50"])
    assert all(label.endswith(" ms") for label in hist.marks.data["label"])


def test_markers_from_a_summary_and_clear():
    hist = LatencyHistogram(markers=["p50", "p99", "max"])
    pn.panel(hist).get_root()
    hist.update([1.0, 2.0, 3.0], summary={"p50": 2.0, "p99": 2.98, "max": 3.0, "mean": 2.0})
    assert hist.marks.data["name"] == ["p50", "p99", "max"]
    assert hist.marks.data["x"] == [2.0, 2.98, 3.0]
    hist.clear()
    assert hist.count == 0 and hist.marks.data["x"] == []


def test_each_marker_has_its_interval_band_and_an_unbounded_p99_is_marked():
    hist = LatencyHistogram()
    pn.panel(hist).get_root()
    rng = np.random.default_rng(0)
    hist.update(list(rng.lognormal(5, 0.5, 50)))  # 50 requests: a P99 needs 100
    data = hist.marks.data
    for name, x, lo, hi, label in zip(data["name"], data["x"], data["lo"], data["hi"],
                                      data["label"]):
        if name == "p99":
            assert lo is None and hi is None and label.endswith("ms \u2020")
        else:
            assert lo <= x <= hi and label.endswith(" ms")
    assert "\u2020" in hist.text.table.object and "[" in hist.text.table.object
