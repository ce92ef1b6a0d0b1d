"""The class run's charts: their data from plain rows, without a browser."""

from __future__ import annotations

import numpy as np

from widgets.class_charts import (
    BACKGROUND,
    MINE,
    ClassHistogram,
    KnobMarks,
    TimeChart,
    histogram_columns,
    lane_rows,
)


def test_histogram_bins_hold_everyone_and_the_readers_own_alike():
    everyone, mine = histogram_columns([100.0, 200.0, 300.0, None], [300.0], bins=3)
    assert everyone["left"] == mine["left"] and everyone["left"][0] == 0.0
    assert sum(everyone["count"]) == 3 and mine["count"] == [0, 0, 1]
    hist = ClassHistogram(title="TTFT", mine_label="yours")
    hist.update(np.array([100.0, 200.0, np.nan]), [200.0])
    assert "TTFT: 2 values, P50 150 ms" in hist.text.sentence and "yours: 1" in hist.text.sentence
    hist.update([])
    assert hist.text.sentence == "TTFT: nothing measured yet."


def test_lanes_show_the_last_seconds_newest_on_top_coloured_by_owner():
    rows = [{"id": "old", "student": "me", "arrival_s": 1.0, "first_token_s": 1.5,
             "finish_s": 2.0},
            {"id": "mine", "student": "me", "arrival_s": 25.0, "first_token_s": 26.0,
             "finish_s": None},
            {"id": "bg", "student": None, "background": True, "arrival_s": 27.0,
             "first_token_s": None, "finish_s": None}]
    cols = lane_rows(rows, now_s=30.0, window_s=20.0, me="me")
    assert "old" not in cols["id"]
    assert cols["id"] == ["bg", "mine", "mine"] and cols["y"] == [0, 1, 1]
    waiting = cols["part"].index("waiting for first token", 1)
    assert (cols["left"][waiting], cols["right"][waiting]) == (25.0, 26.0)
    decoding = cols["part"].index("decoding")
    assert cols["color"][decoding] == MINE and cols["right"][decoding] == 30.0  # open: to now
    assert cols["who"][0] == "background" and cols["color"][0] != BACKGROUND  # still waiting


def test_knob_marks_stream_only_new_changes_and_restart_with_a_new_run():
    marks = KnobMarks()
    chart = TimeChart(title="Requests", y_label="requests", series=[("n", "in flight")],
                      marks=marks)
    marks.show([{"t_s": 3.0, "label": "policy static"}])
    marks.show([{"t_s": 3.0, "label": "policy static"}, {"t_s": 9.0, "label": "max batch 4"}])
    assert marks.source.data["t_s"] == [3.0, 9.0] and marks.count == 2
    marks.show([{"t_s": 1.0, "label": "prefix cache on"}])  # fewer: a new run's list
    assert marks.source.data["label"] == ["prefix cache on"]
    chart.stream([{"t_s": 1.0, "n": 3}, {"t_s": 2.0, "n": None}])
    assert chart.source.data["n"][0] == 3.0 and np.isnan(chart.source.data["n"][1])
    assert chart.text.sentence == "Requests at 2 s: nothing yet."
