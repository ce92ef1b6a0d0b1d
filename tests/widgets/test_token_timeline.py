"""The token timeline's data: ticks streamed per row, the wait shaded in parts, cleared for a new
run; built without a browser (get_root)."""

from __future__ import annotations

import panel as pn
import pytest

from widgets.token_timeline import TokenTimeline


@pytest.fixture
def timeline():
    t = TokenTimeline(rows=["engine", "your browser"], x_label="ms")
    pn.panel(t).get_root()
    return t


def test_rows_are_the_y_factors_top_to_bottom(timeline):
    assert list(timeline.figure.y_range.factors) == ["your browser", "engine"]
    assert set(timeline.sources) == {"engine", "your browser"}


def test_ticks_stream_into_their_row_with_running_indices(timeline):
    timeline.add_ticks("engine", [10.0, 20.5], ["a", "b"])
    timeline.add_ticks("engine", [31.0], ["c"])
    data = timeline.sources["engine"].data
    assert data["x"] == [10.0, 20.5, 31.0] and data["index"] == [0, 1, 2]
    assert data["text"] == ["a", "b", "c"] and set(data["row"]) == {"engine"}
    assert timeline.ticks("your browser") == []


def test_wait_parts_replace_only_their_row(timeline):
    timeline.set_wait("engine", [("queued", 0.0, 5.0), ("prefill", 5.0, 40.0)])
    timeline.set_wait("your browser", [("waiting", 0.0, 90.0)])
    timeline.set_wait("engine", [("queued", 0.0, 7.0), ("prefill", 7.0, 41.0)])
    spans = timeline.spans.data
    rows = list(zip(spans["row"], spans["part"], spans["left"], spans["right"]))
    assert ("your browser", "waiting", 0.0, 90.0) in rows
    assert [r for r in rows if r[0] == "engine"] == [("engine", "queued", 0.0, 7.0),
                                                    ("engine", "prefill", 7.0, 41.0)]


def test_clear_empties_every_row(timeline):
    timeline.add_ticks("engine", [1.0])
    timeline.set_wait("engine", [("queued", 0.0, 1.0)])
    timeline.clear()
    assert timeline.ticks("engine") == [] and timeline.spans.data["left"] == []
