"""The class feed: snapshots merged into what the console and student pages draw (plain dicts in
the class-run API's shape; no engine)."""

from __future__ import annotations

import math

from snapshots import request, snapshot, step

from lessons.classroom.feed import ClassFeed, describe_change


def test_requests_merge_by_id_and_steps_are_kept_once():
    feed = ClassFeed()
    feed.ingest(snapshot(1.0, [request("a", "s1", 0.1)], [step(0.2, 1), step(0.5, 2)]))
    feed.ingest(snapshot(2.0, [request("a", "s1", 0.1, 0.4, 1.5, 300.0, [20.0, 40.0])],
                         [step(0.5, 2), step(1.2, 3)]))  # 0.5 again: at the boundary
    rows = feed.request_rows()
    assert len(rows) == 1 and rows[0]["finish_s"] == 1.5 and rows[0]["ttft_ms"] == 300.0
    steps, at = feed.steps_from(0)
    assert [s["t_s"] for s in steps] == [0.2, 0.5, 1.2] and at == 3
    assert feed.steps_from(2) == ([steps[2]], 3)


def test_points_carry_the_gauges_and_the_tail_of_the_last_ten_seconds():
    feed = ClassFeed()
    feed.ingest(snapshot(1.0, in_flight=0))
    first, _ = feed.points_from(0)
    assert math.isnan(first[0]["ttft_p50"])  # no first token yet: a gap, not a zero
    old = [request(f"o{i}", "s1", 0.0, 0.5, 1.0, 5000.0, [500.0]) for i in range(5)]
    feed.ingest(snapshot(2.0, old))
    new = [request(f"n{i}", "s2", 20.0, 20.0 + i / 10, 21.0, 100.0 + i, [10.0, 30.0])
           for i in range(10)]
    feed.ingest(snapshot(25.0, new, in_flight=7, waiting=3))
    points, at = feed.points_from(0)
    assert at == 3
    last = points[-1]
    assert last["in_flight"] == 7 and last["waiting"] == 3
    assert 100.0 <= last["ttft_p50"] <= 109.0  # the old 5 s requests left the window
    assert last["ttft_p99"] < 110.0
    assert last["itl_p50"] == 20.0 and last["itl_p99"] < 31.0
    assert points[1]["ttft_p50"] == 5000.0


def test_a_new_run_starts_a_new_record_and_a_stop_keeps_the_last():
    feed = ClassFeed()
    feed.ingest(snapshot(5.0, [request("a", "s1", 1.0)], [step(1.0, 1)]))
    run = feed.run
    feed.ingest({"active": False, "t_s": 5.0, "steps": [], "requests": []})
    assert not feed.active and feed.request_rows()  # the last run stays on show
    feed.ingest(snapshot(0.5, [request("b", "s1", 0.1)]))
    assert feed.active and feed.run == run + 1
    assert [r["id"] for r in feed.request_rows()] == ["b"] and feed.steps_from(0)[0] == []


def test_knob_changes_in_plain_words():
    assert describe_change({"chunk_size": 0}) == "chunked prefill off"
    assert describe_change({"chunk_size": 64, "prefix_cache": True}) == (
        "chunked prefill on (64 tokens a step), prefix cache on")
    assert describe_change({"policy": "static", "max_batch": 4}) == "policy static, max batch 4"
    assert describe_change({"background_rps": 2}) == "background load 2 requests/s"
    feed = ClassFeed()
    change = {"t_s": 3.0, "step": 40, "changes": {"policy": "static"}, "by": "teacher"}
    feed.ingest(snapshot(4.0, changes=[change]))
    assert feed.changes() == [change]


class Failing:
    def class_snapshot(self, since_s=0.0):
        raise ConnectionError("the worker is restarting")


def test_a_failed_poll_is_kept_as_one_line_and_polls_are_spaced():
    feed = ClassFeed()
    assert feed.poll(Failing()) is True
    assert feed.error == "ConnectionError: the worker is restarting"
    assert feed.poll(Failing()) is False  # within a second: the last answer stands


def test_what_each_session_reads_is_computed_once_per_snapshot():
    feed = ClassFeed()
    feed.ingest(snapshot(30.0, [request("a", "me", 1.0, 1.2, 2.0, 200.0, [10.0, 20.0]),
                                request("b", "you", 25.0, 25.5, None, 500.0, [30.0]),
                                request("c", None, 26.0, background=True)]))
    assert [r["id"] for r in feed.rows_of("me")] == ["a"] and feed.rows_of(None) == []
    assert {r["id"] for r in feed.recent_rows(20.0)} == {"b", "c"}  # "a" ended at 2 s
    first = feed.latencies()
    assert sorted(first["ttft"]) == [200.0, 500.0] and sorted(first["itl"]) == [10.0, 20.0, 30.0]
    assert feed.latencies() is first  # the same arrays until the next snapshot
    feed.ingest(snapshot(31.0, [request("b", "you", 25.0, 25.5, 30.5, 500.0, [30.0, 40.0])]))
    assert sorted(feed.latencies()["itl"]) == [10.0, 20.0, 30.0, 40.0]
