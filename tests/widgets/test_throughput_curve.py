"""The batch-size curve: points streamed (or patched when re-measured), lines in batch order,
and the "you are here" marker."""

from __future__ import annotations

import panel as pn
import pytest

from widgets.throughput_curve import ThroughputCurve


@pytest.fixture
def curve():
    curve = ThroughputCurve()
    pn.panel(curve).get_root()
    return curve


def test_points_accumulate_and_lines_follow_batch_order(curve):
    curve.add_point(8, 900.0, 8.9, "measured live")
    curve.add_point(1, 200.0, 5.0, "cached", cached=True)
    curve.add_point(4, 600.0, 6.7, "measured live")
    assert curve.points.data["batch"] == [8, 1, 4]  # streamed in arrival order
    assert curve.lines.data["batch"] == [1, 4, 8]
    assert curve.lines.data["tokens_per_s"] == [200.0, 600.0, 900.0]
    assert curve.point(1)["cached"] and curve.point(1)["size"] < curve.point(8)["size"]
    assert curve.figure.extra_y_ranges["latency"].end >= 8.9


def test_measuring_a_batch_again_replaces_its_point(curve):
    curve.add_point(2, 300.0, 6.0, "cached", cached=True)
    curve.add_point(2, 320.0, 5.9, "measured live")
    assert curve.batches() == [2] and curve.point(2)["tokens_per_s"] == 320.0


def test_you_are_here_marks_a_measured_point(curve):
    curve.set_here(16)
    assert curve.here_line.visible and curve.here_line.location == 16
    assert curve.marker.data["batch"] == []  # not measured yet: the line only
    curve.add_point(16, 1500.0, 10.0, "measured live")
    assert curve.marker.data == {"batch": [16], "tokens_per_s": [1500.0], "ms_per_token": [10.0]}
    curve.set_here(None)
    assert not curve.here_line.visible
    curve.clear()
    assert curve.batches() == []
