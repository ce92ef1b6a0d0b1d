"""The student page without a browser: built with get_root, the reader's own requests picked out
among everyone's from a plain snapshot, and their engine events turned into TTFT and gaps."""

from __future__ import annotations

import panel as pn
from bokeh.document import Document
from snapshots import request, snapshot

from lessons.classroom.feed import ClassFeed
from lessons.classroom.student import NOT_LIVE, OwnRequest, StudentPage
from widgets.class_charts import MINE


def page_on(feed: ClassFeed, student: str = "me") -> StudentPage:
    page = StudentPage(feed=feed, student=student)
    pn.panel(page).get_root(Document())
    return page


def test_the_readers_requests_are_picked_out():
    feed = ClassFeed()
    feed.ingest(snapshot(3.0, [request("1", "me", 0.5, 0.9, 2.0, 400.0, [30.0, 50.0]),
                               request("2", "you", 0.6, 0.8, 2.0, 200.0, [10.0, 12.0]),
                               request("3", "you", 0.7, 1.0, None, 300.0)]))
    page = page_on(feed)
    page.live.draw()
    ttft = page.live.ttft
    assert sum(ttft.everyone.data["count"]) == 3 and sum(ttft.mine.data["count"]) == 1
    mine_bin = ttft.mine.data["count"].index(1)
    assert ttft.mine.data["left"][mine_bin] <= 400.0 <= ttft.mine.data["right"][mine_bin]
    assert sum(page.live.itl.mine.data["count"]) == 2
    lanes = page.live.lanes.source.data
    assert {i for i, w, c in zip(lanes["id"], lanes["who"], lanes["color"])
            if w == "yours" and c == MINE} == {"1"}
    assert "1 of them yours" in page.live.lanes.text.sentence
    assert "yours: 1, median 400 ms" in ttft.text.sentence


def test_the_page_says_when_no_run_is_live_and_what_the_teacher_changed():
    feed = ClassFeed()
    page = page_on(feed)
    page.live.draw()
    assert NOT_LIVE.split(":")[0] in page.status.object
    assert "Nothing yet" in page.changes.object
    feed.ingest(snapshot(9.0, changes=[
        {"t_s": 4.0, "step": 30, "changes": {"chunk_size": 0}, "by": "teacher"},
        {"t_s": 7.5, "step": 61, "changes": {"policy": "static"}, "by": "teacher"}]))
    page.live.draw()
    assert "The class run is live (9 s): policy continuous, max batch 16" in page.status.object
    text = page.changes.object
    assert text.index("At 7.5 s the teacher changed: policy static") < text.index(
        "At 4.0 s the teacher changed: chunked prefill off")  # newest first
    assert page.live.marks.source.data["t_s"] == [4.0, 7.5]


def test_own_events_give_ttft_and_gaps_as_tokens_arrive():
    page = page_on(ClassFeed())
    own = OwnRequest(number=1, prompt="hello", request_id="r1")
    page.requests.append(own)
    page._receive(own, {"type": "admitted", "t_s": 1.00})
    page._receive(own, {"type": "token", "text": "The", "t_s": 1.20})
    page._receive(own, {"type": "token", "text": " end", "t_s": 1.25})
    assert page.apply_events() == 3
    assert own.state == "streaming" and own.text == "The end"
    assert [round(g, 6) for g in own.gaps_ms()] == [50.0]
    assert own.shown_ttft_ms() is not None  # this server's clock until the engine's comes
    page.draw_own()
    assert "streaming" in page.own.object and "The end" in page.own.object
    page._receive(own, {"type": "finished", "ttft_ms": 210.0, "itl_ms": [48.0],
                        "output_len": 2, "t_s": 1.25})
    page.own_tick()
    assert own.state == "finished" and own.shown_ttft_ms() == 210.0 and own.gaps_ms() == [48.0]
    assert "210" in page.own.object
    dropped = OwnRequest(number=2, prompt="x", request_id="r2")
    page.requests.append(dropped)
    page._receive(dropped, {"type": "dropped", "reason": "the class run stopped"})
    page.own_tick()
    assert "dropped: the class run stopped" in page.own.object


def test_an_empty_prompt_is_not_sent():
    page = page_on(ClassFeed())
    page.prompt.value = "   "
    assert page.send(1) == []  # no service is asked: none is given
    assert "Write a prompt first" in page.message.object
