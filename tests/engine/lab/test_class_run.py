"""The class run through the engine service, with the real worker and the tiny engine: several
students' requests join one live run, each gets its tokens and a finished event; a knob changed
mid-run shows in the snapshot and in every step after it; one student's burst does not hold
another's request back; bounds are refused with a reason; stopping gives the run's summary and
frees the engine for other jobs."""

from __future__ import annotations

import threading

import pytest
from service_helpers import QUICK, TIMEOUT, finished, service_on_own_cache, wait_until

from engine.errors import ConfigError

MAX_TOKENS = 8


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with service_on_own_cache(tmp_path_factory.mktemp("llm-speed-cache")) as svc:
        yield svc
        svc.class_stop()


class Student:
    """One simulated student: sends requests, keeps each one's events."""

    def __init__(self, service, name: str):
        self.service, self.name = service, name
        self.events: dict[str, list[dict]] = {}
        self.lock = threading.Lock()

    def send(self, prompt: str = "The cat sat on the", max_tokens: int = MAX_TOKENS) -> dict:
        got: list[dict] = []
        answer = self.service.class_send(self.name, prompt, max_tokens,
                                         lambda e: self._on(got, e))
        if answer["ok"]:
            with self.lock:
                self.events[answer["request_id"]] = got
        return answer

    def _on(self, got: list[dict], event: dict) -> None:
        with self.lock:
            got.append(event)

    def ended(self) -> bool:
        with self.lock:
            return all(evs and evs[-1]["type"] in ("finished", "dropped")
                       for evs in self.events.values())


def live(service, **settings) -> dict:
    service.class_stop()
    applied = service.class_start({"max_tokens": MAX_TOKENS, **settings})
    wait_until(lambda: service.class_snapshot()["ready"], TIMEOUT, "the class run to start")
    return applied


def test_students_requests_join_one_run_and_a_knob_change_applies_from_the_next_step(service):
    applied = live(service, max_batch=4)
    assert applied["max_batch"] == 4 and applied["policy"] == "continuous"
    assert service.class_start({"max_batch": 9})["max_batch"] == 4  # the live one's
    assert service.class_active() and service.status()["class_mode"]
    students = [Student(service, f"student-{i}") for i in range(3)]
    for s in students:
        for _ in range(2):
            assert s.send()["ok"]
    wait_until(lambda: all(s.ended() for s in students), TIMEOUT, "every request to end")
    for s in students:
        for evs in s.events.values():
            types = [e["type"] for e in evs]
            assert types[0] == "admitted" and types[-1] == "finished", types
            assert 1 <= types.count("token") <= MAX_TOKENS
            done = evs[-1]
            assert done["output_len"] == types.count("token")
            assert done["ttft_ms"] > 0 and len(done["itl_ms"]) == done["output_len"] - 1

    change = service.class_set({"max_batch": 2})
    assert change["applied"] == {"max_batch": 2}
    wait_until(lambda: service.class_snapshot()["knob_changes"], TIMEOUT, "the knob event")
    for s in students:
        for _ in range(2):
            assert s.send()["ok"]
    wait_until(lambda: all(s.ended() for s in students), TIMEOUT, "every request to end")
    snap = service.class_snapshot()
    (knob,) = snap["knob_changes"]
    assert knob["changes"] == {"max_batch": 2} and knob["by"] == "teacher"
    assert snap["settings"]["max_batch"] == 2
    before = [s for s in snap["steps"] if s["index"] < knob["step"]]
    after = [s for s in snap["steps"] if s["index"] >= knob["step"]]
    assert max(s["batch"] for s in before) > 2  # six requests at once filled four slots
    assert after and max(s["batch"] for s in after) <= 2
    mine = [r for r in snap["requests"] if r["student"] == "student-0"]
    assert len(mine) == 4 and all(r["finish_s"] and r["ttft_ms"] > 0 for r in mine)

    with pytest.raises(ConfigError, match="policy"):
        service.class_set({"policy": "fastest"})
    with pytest.raises(ConfigError, match="cannot be changed"):
        service.class_set({"max_tokens": 5})


def test_one_students_burst_does_not_hold_back_anothers_request(service):
    live(service, max_batch=4, per_student_per_min=60)
    a, b = Student(service, "a"), Student(service, "b")
    for _ in range(30):
        assert a.send()["ok"]
    assert b.send()["ok"]
    wait_until(lambda: a.ended() and b.ended(), TIMEOUT, "every request to end")
    snap = service.class_snapshot()
    reqs = {r["id"]: r for r in snap["requests"]}
    (b_id,) = b.events
    mine = reqs[b_id]
    # B's request waits for one of A's to end (at most its MAX_TOKENS steps), never for 30
    assert mine["admitted_step"] - mine["arrival_step"] <= MAX_TOKENS + 1
    # and from B's arrival on, no request of A's took a place before B's
    a_after = [r for i, r in reqs.items() if i in a.events
               and r["admitted_step"] >= mine["arrival_step"]]
    assert len(a_after) >= 20 and all(r["admitted_step"] >= mine["admitted_step"]
                                      for r in a_after)


def test_bounds_are_refused_with_a_reason(service):
    live(service, max_batch=4, per_student_per_min=3, max_prompt_tokens=16)
    s = Student(service, "c")
    over = service.class_send("c", "hello", MAX_TOKENS + 1, None)
    assert not over["ok"] and f"1 to {MAX_TOKENS} new tokens" in over["reason"]
    empty = service.class_send("c", "   ", 4, None)
    assert not empty["ok"] and "empty" in empty["reason"]
    long = s.send("word " * 40)  # over 16 tokens: the engine's tokenizer counts them
    assert long["ok"]
    wait_until(s.ended, TIMEOUT, "the long prompt's end")
    (events,) = s.events.values()
    assert events[-1]["type"] == "dropped" and "at most 16 tokens" in events[-1]["reason"]
    assert s.send()["ok"] and s.send()["ok"]
    third = s.send()
    assert not third["ok"] and "3 requests in the last minute" in third["reason"]
    assert Student(service, "d").send()["ok"]  # another student is not held by c's count


def test_stop_gives_the_summary_and_frees_the_engine(service):
    live(service, max_batch=4)
    s = Student(service, "e")
    assert s.send()["ok"]
    wait_until(s.ended, TIMEOUT, "the request's end")
    summary = service.class_stop()
    assert summary["requests"] == 1 and summary["finished"] == 1
    assert summary["students"] == 1 and summary["ttft_ms"]["count"] == 1
    assert not service.class_active() and not service.status()["class_mode"]
    assert service.class_stop() is None
    refused = service.class_send("e", "hi", 4, None)
    assert not refused["ok"] and "not live" in refused["reason"]
    point = finished(service.submit("sweep_point", QUICK, use_cache=False))
    assert point.state == "done"


def test_other_readers_points_run_in_the_class_runs_idle_gaps_and_are_not_cached(service):
    live(service, max_batch=4)
    params = {**QUICK, "seed": 41}
    point = service.submit("sweep_point", params, session_id="reader")
    load = service.submit("serve_run", {"preset": "tiny", "requests": 2, "rate": 5.0},
                          session_id="reader-2", use_cache=False)
    assert finished(point).state == "done" and not point.cached
    assert service.class_active() and service.status()["class_mode"]  # it ran in a gap
    assert service.status()["gap_fills"] >= 1
    assert service.cached("sweep_point", params) is None  # measured between the class's
    # requests: never cached as an isolated measurement
    assert load.state == "queued"  # a run waits for the class run to end
    s = Student(service, "f")
    assert s.send()["ok"]  # the class still serves
    wait_until(s.ended, TIMEOUT, "the request's end")
    assert list(s.events.values())[0][-1]["type"] == "finished"
    service.class_stop()
    assert finished(load).state == "done"
