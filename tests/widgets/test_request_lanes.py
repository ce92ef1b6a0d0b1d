"""Request lanes: drawn at once from traces, or live from arrivals, admissions, first tokens,
finishes and step ends (streamed and patched in place)."""

from __future__ import annotations

import panel as pn
import pytest

from widgets.request_lanes import RequestLanes


@pytest.fixture
def lanes():
    lanes = RequestLanes()
    pn.panel(lanes).get_root()
    return lanes


def test_show_draws_queued_prefill_and_decode_per_request(lanes):
    lanes.show([
        {"id": 0, "arrival_ms": 0.0, "admitted_ms": 0.0, "first_token_ms": 20.0,
         "finish_ms": 100.0},
        {"id": 1, "arrival_ms": 5.0, "admitted_ms": 60.0, "first_token_ms": 80.0,
         "finish_ms": 150.0},
    ])
    assert lanes.spans(0) == {"prefill": (0.0, 20.0), "decode": (20.0, 100.0)}
    assert lanes.spans(1) == {"queued": (5.0, 60.0), "prefill": (60.0, 80.0),
                              "decode": (80.0, 150.0)}
    assert lanes.firsts.data["x"] == [20.0, 80.0] and lanes.finished_count == 2
    assert (lanes.figure.y_range.start, lanes.figure.y_range.end) == (1.5, -0.5)


def test_live_bars_grow_with_the_clock(lanes):
    lanes.expect(2)
    lanes.arrive(0, 10.0)
    lanes.advance(30.0)
    assert lanes.spans(0) == {"queued": (10.0, 30.0)}
    lanes.admit(0, 35.0)
    lanes.advance(50.0)
    assert lanes.spans(0) == {"queued": (10.0, 35.0), "prefill": (35.0, 50.0)}
    lanes.first_token(0, 55.0)
    lanes.advance(90.0)
    assert lanes.spans(0)["decode"] == (55.0, 90.0)
    lanes.finish(0, 120.0)
    lanes.advance(200.0)  # a finished request stops growing
    assert lanes.spans(0)["decode"] == (55.0, 120.0)
    assert lanes.now_line.location == 200.0 and lanes.now_line.visible
    assert len(lanes.lanes.data["id"]) == 3  # three rows per request, patched in place


def test_repeated_events_are_ignored_and_late_ids_widen_the_axis(lanes):
    lanes.expect(1)
    lanes.arrive(3, 0.0)
    lanes.arrive(3, 5.0)
    assert lanes.figure.y_range.start == 3.5
    lanes.first_token(3, 9.0)
    lanes.first_token(3, 12.0)
    assert lanes.firsts.data["x"] == [9.0]


def test_clear_forgets_everything(lanes):
    lanes.arrive(0, 0.0)
    lanes.clear()
    assert lanes.lanes.data["id"] == [] and lanes.finished_count == 0
