"""The teacher's console without a browser: built with get_root, drawn from plain snapshots,
read-only without the key."""

from __future__ import annotations

import logging

import panel as pn
import pytest
from bokeh.document import Document
from snapshots import request, snapshot, step

from lessons.classroom import teacher_key
from lessons.classroom.console import ClassConsole, knob_changes, knob_values
from lessons.classroom.feed import ClassFeed, describe_change


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(teacher_key.ENV, "the-key")
    teacher_key.forget_key()
    yield "the-key"
    teacher_key.forget_key()


def built(console):
    pn.panel(console).get_root(Document())
    return console


def fed() -> ClassFeed:
    feed = ClassFeed()
    feed.ingest(snapshot(2.0, [request("a", "s1", 0.2, 0.5, 1.5, 300.0, [20.0, 40.0]),
                               request("b", "s2", 0.4, 0.9, None, 500.0),
                               request("c", None, 0.3, 0.6, 1.0, 250.0, [25.0], background=True)],
                         [step(0.3, 1, 16), step(0.6, 3, 8), step(1.0, 3)]))
    return feed


def test_the_console_draws_a_snapshot(key):
    feed = fed()
    console = built(ClassConsole(feed=feed, key=key))
    console.live.draw()
    live = console.live
    assert live.steps.source.data["batch"] == [1, 3, 3]
    assert live.load.source.data["in_flight"] == [2.0] and live.kv.source.data["kv_blocks_used"] == [12.0]
    assert sum(live.ttft.everyone.data["count"]) == 3 and sum(live.itl.everyone.data["count"]) == 3
    assert sum(live.ttft.mine.data["count"]) == 0  # the console picks out no one
    assert set(live.lanes.source.data["id"]) == {"a", "b", "c"}
    assert "background" in live.lanes.source.data["who"]
    assert "3 values, P50 300 ms" in live.ttft.text.sentence
    assert "Live for 2 s: 2 requests in flight, 1 waiting" in console.status.object
    # the next frame streams only what is new
    feed.ingest(snapshot(3.0, [], [step(2.5, 4)],
                         [{"t_s": 2.4, "step": 9, "changes": {"chunk_size": 32}, "by": "teacher"}]))
    live.draw()
    assert live.steps.source.data["batch"] == [1, 3, 3, 4]
    assert live.marks.source.data["label"] == ["chunked prefill on (32 tokens a step)"]
    assert "2.4 s: chunked prefill on (32 tokens a step) (by teacher)" in console.changes.object


def test_read_only_without_the_key(key, caplog):
    console = built(ClassConsole(feed=fed(), key=""))
    assert not console.unlocked
    assert console.start_button.disabled and console.apply_button.disabled
    assert all(w.disabled for w in console.knob_widgets)
    assert console.aggregate.disabled  # the class's aggregate is the teacher's
    assert "How the class predicted" in console.predictions_slot[0][0].object
    assert "Read-only" in console.access.object
    with caplog.at_level(logging.WARNING, "lessons.classroom.teacher_key"):
        assert console.start_run() is None  # no service is asked: none is given
        assert console.apply_knobs() is None
    assert "changing a knob refused without the teacher's key" in caplog.text
    assert "needs the teacher's key" in console.message.object


def test_entering_the_key_unlocks_the_controls(key):
    console = built(ClassConsole(feed=fed(), key=""))
    console.key_field.value = "not-it"
    console._enter_key()
    assert not console.unlocked and "not the teacher's key" in console.message.object
    console.key_field.value = key
    console._enter_key()
    assert console.unlocked and not console.start_button.disabled
    assert "The controls are yours" in console.access.object


def test_knob_changes_are_only_what_differs():
    settings = {"policy": "continuous", "max_batch": 16, "chunk_size": 0,
                "prefix_cache": False, "background_rps": 0.0, "lanes": False}
    wanted = {**knob_values(settings), "chunked": True, "chunk_size": 32}
    assert knob_changes(settings, wanted) == {"chunk_size": 32}
    wanted = {**knob_values({**settings, "chunk_size": 32}), "chunked": False}
    assert knob_changes({**settings, "chunk_size": 32}, wanted) == {"chunk_size": 0}
    wanted = {**knob_values(settings), "policy": "static", "background_rps": 2.0}
    assert knob_changes(settings, wanted) == {"policy": "static", "background_rps": 2.0}
    assert knob_changes(settings, knob_values(settings)) == {}
    assert knob_values({**settings, "lanes": True})["lanes"] is True
    assert knob_values({})["lanes"] is False  # a run from before the knob: off
    wanted = {**knob_values(settings), "lanes": True}
    assert knob_changes(settings, wanted) == {"lanes": True}
    assert knob_changes({**settings, "lanes": True}, knob_values(settings)) == {"lanes": False}


def test_the_lanes_knob_is_a_checkbox_and_its_change_is_described(key):
    console = built(ClassConsole(feed=fed(), key=key))
    (box,) = [w for w in console.knob_widgets if w.name.startswith("Lanes")]
    assert box.name == "Lanes: students before the background load" and box.value is False
    box.value = True
    assert console.lanes is True
    assert knob_changes(console.live.feed.settings, console.param.values()) == {"lanes": True}
    assert describe_change({"lanes": True}) == "lanes on (students before the background load)"
    assert describe_change({"policy": "continuous", "lanes": False}) == (
        "policy continuous, lanes off (one queue)")
