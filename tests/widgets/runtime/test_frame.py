"""widgets.runtime.frame: inside a frame each key's redraw runs once, after the frame's events, with the
state they left; outside one at once; a failing redraw does not drop the others."""

from __future__ import annotations

from widgets.itl_timeline import ItlTimeline
from widgets.runtime.frame import once_per_frame, one_frame


def test_a_frames_redraws_run_once_each_at_its_end_in_first_asked_order():
    state, drawn = {"n": 0}, []
    with one_frame():
        for n in range(1, 4):
            state["n"] = n
            once_per_frame("table", lambda: drawn.append(("table", state["n"])))
            once_per_frame("bar", lambda: drawn.append(("bar", state["n"])))
        with one_frame():  # nested: still the one frame
            once_per_frame("table", lambda: drawn.append(("table", state["n"])))
        assert drawn == []  # nothing before the frame ends
    assert drawn == [("table", 3), ("bar", 3)]
    once_per_frame("table", lambda: drawn.append("at once"))
    assert drawn[-1] == "at once"


def test_a_failing_redraw_leaves_the_others(caplog):
    drawn = []
    with one_frame():
        once_per_frame("bad", lambda: 1 / 0)
        once_per_frame("good", lambda: drawn.append(1))
    assert drawn == [1] and "a redraw at the end of a frame failed" in caplog.text


def test_a_frame_of_step_events_redraws_the_gap_table_once_with_every_gap():
    timeline = ItlTimeline(series=["no chunking"])
    tables = []
    draw = timeline._refresh_table
    timeline._refresh_table = lambda: (tables.append(1), draw())
    with one_frame():
        for step in range(5):
            timeline.stream("no chunking", [0.1 * step], [20.0 + step], [step % 2])
    assert len(tables) == 1
    assert '<td class="num">5</td><td class="num">22.0</td>' in timeline.table_html  # 5 gaps,
    # median 22 ms: the table drawn after the last of them
