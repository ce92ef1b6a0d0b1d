"""The class run's lanes knob (engine.serve.class_knobs, class_run) with the real tiny engine:
the students' requests in an interactive lane ahead of the background load's batch lane, which
holds at most half the slots. The runs are driven by step index (the background load is added
by the script, not by the wall clock), so every admission order below is the same on any
machine."""

from __future__ import annotations

import time

import pytest

from engine.errors import ConfigError
from engine.lab.class_service import SETTINGS, check_changes, class_params
from engine.lab.class_state import ClassState
from engine.lab.registry import LANES_NEED_CONTINUOUS
from engine.serve.class_knobs import ClassSettings, changed
from engine.serve.class_run import ClassRun

PROMPT = "The engine reads the whole prompt first, and then"
MAX_BATCH, CAP = 4, 2  # the batch lane's share: half of 4
BACKGROUND_REQUESTS = 6  # 8 new tokens each (max_tokens 8): more than the slots hold


def send(i: int, student: str) -> dict:
    return {"op": "send", "id": f"r{i}", "student": student, "prompt": PROMPT, "max_tokens": 8}


def batch_lane_held(run: ClassRun) -> int:
    """Background requests in the engine's scheduler, holding a slot or waiting for one."""
    scheduler = run.loop.scheduler
    return sum(1 for seq in [*scheduler.running, *scheduler.waiting]
               if run.requests[seq.id].background)


def serve(engine, settings: ClassSettings, at: dict[int, list[dict]], limit_s: float = 120.0,
          held: list[int] | None = None) -> tuple[ClassRun, dict, list[dict]]:
    """Run with the background load added at step 0 and the messages of `at` handed in once
    the run reaches each step index; stop once every student's request has ended (the
    background's still left are dropped) or, with no student, once nothing is left. held
    gets batch_lane_held between every two steps."""
    batches: list[dict] = []
    run = ClassRun(engine, settings, batches.append, seed=5)
    at = dict(at)
    deadline = time.monotonic() + limit_s

    def inbox(timeout_s: float) -> list[dict]:
        step = run.loop.step_count
        if held is not None:
            held.append(batch_lane_held(run))
        if step == 0 and not run.summary.background:
            for _ in range(BACKGROUND_REQUESTS):
                run.add_background()
        keys = sorted(at)
        if keys and keys[0] <= step:
            return at.pop(keys[0])
        students_left = any(not r.background for r in run.requests.values())
        if (not at and not students_left and (run.summary.sent or not run.requests)) \
                or time.monotonic() > deadline:
            return [{"op": "stop"}]
        if timeout_s:
            time.sleep(min(timeout_s, 0.005))
        return []

    summary = run.run(inbox, lambda: False)
    assert time.monotonic() < deadline, "the run did not end in time"
    return run, summary, [e for b in batches for e in b["events"]]


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def first_admissions(events: list[dict]) -> dict[str, int]:
    """Each request's first admission as its place in the run's admission order (step by
    step, in the order the scheduler admitted them within a step)."""
    order: dict[str, int] = {}
    steps = [e["step"] for e in of(events, "admitted")]
    assert steps == sorted(steps)  # the events come in step order
    for e in of(events, "admitted"):
        order.setdefault(e["id"], len(order))
    return order


def overtaken(events: list[dict]) -> list[tuple[str, str]]:
    """(student request, background request) pairs where the background request was waiting
    when the student's arrived, and was admitted first."""
    admitted = first_admissions(events)
    seen: set[str] = set()  # admitted so far, in event order
    waiting_bg: set[str] = set()
    pairs, checked = [], 0
    for e in events:
        if e["type"] == "admitted":
            seen.add(e["id"])
            waiting_bg.discard(e["id"])
        elif e["type"] == "arrived" and e["background"]:
            waiting_bg.add(e["id"])
        elif e["type"] == "arrived":
            assert waiting_bg, "no background request waited when this one arrived"
            checked += 1
            pairs += [(e["id"], bg) for bg in waiting_bg
                      if bg in admitted and admitted[bg] < admitted[e["id"]]]
    assert checked == 6
    return pairs


BURST = {3: [send(i, "s1") for i in range(4)] + [send(i, "s2") for i in range(4, 6)]}


def test_with_lanes_students_go_before_the_waiting_background_within_its_share(engine):
    settings = ClassSettings(max_batch=MAX_BATCH, max_tokens=8, lanes=True)
    held: list[int] = []
    run, summary, events = serve(engine, settings, BURST, held=held)
    assert summary["finished"] >= 6 and summary["requests"] == 6
    # the background enters the scheduler only within its share: none waits there on the
    # lane's cap
    assert max(held) == CAP
    assert overtaken(events) == []
    steps = of(events, "step")
    assert max(s["background"] for s in steps) == CAP  # the lane is full, never over
    assert all(s["batch"] <= MAX_BATCH for s in steps)
    admitted = first_admissions(events)
    # the two slots the batch lane leaves free take two students' requests at once, one each
    assert {e["id"] for e in of(events, "admitted") if e["step"] == 3} == {"r0", "r4"}
    assert admitted["r0"] < admitted["r4"] < admitted["r1"]  # the fair share among students


def test_without_lanes_the_fair_share_lets_the_background_in_between(engine):
    settings = ClassSettings(max_batch=MAX_BATCH, max_tokens=8)
    run, summary, events = serve(engine, settings, BURST)
    assert summary["requests"] == 6
    assert max(s["background"] for s in of(events, "step")) == MAX_BATCH
    pairs = overtaken(events)
    # when the four background requests end together, the background (none in flight, like
    # s1 and s2) takes the third free slot: it has the fewest in flight, not the most served
    assert pairs and {student for student, _ in pairs} >= {"r1", "r2", "r3"}


def test_lanes_turn_on_and_off_from_the_next_step(engine):
    settings = ClassSettings(max_batch=MAX_BATCH, max_tokens=8)
    at = {2: [{"op": "set", "changes": {"lanes": True}}],
          5: [{"op": "set", "changes": {"lanes": False}}]}
    run, summary, events = serve(engine, settings, at)
    on, off = of(events, "knob")
    assert (on["step"], on["preempted"]) == (2, 2)  # the two newest background rows wait
    assert off["step"] == 5 and off["preempted"] == 0
    rows = {s["index"]: s["background"] for s in of(events, "step")}
    assert rows[0] <= rows[1] == MAX_BATCH
    assert all(rows[i] <= CAP for i in range(2, 5))
    assert rows[5] == MAX_BATCH  # one queue again: the preempted ones are back at once
    assert summary["finished"] == BACKGROUND_REQUESTS  # the preempted kept their place
    assert summary["settings"]["lanes"] is False and not of(events, "knob_refused")


def test_lanes_need_the_continuous_policy(engine):
    static = ClassSettings(policy="static", max_batch=MAX_BATCH, max_tokens=8)
    with pytest.raises(ConfigError, match="Lanes need the continuous policy"):
        changed(static, {"lanes": True})
    with pytest.raises(ConfigError, match="Lanes need the continuous policy"):
        changed(ClassSettings(lanes=True), {"policy": "dynamic"})
    with pytest.raises(ConfigError, match="Lanes need the continuous policy"):
        ClassSettings(policy="static", lanes=True).validate()
    assert changed(static, {"policy": "continuous", "lanes": True}).lanes
    with pytest.raises(ConfigError, match="true or false"):
        changed(ClassSettings(), {"lanes": "yes"})
    run, summary, events = serve(engine, static, {1: [{"op": "set",
                                                      "changes": {"lanes": True}}]})
    (refused,) = of(events, "knob_refused")
    assert refused["reason"] == LANES_NEED_CONTINUOUS and not of(events, "knob")
    assert summary["settings"]["lanes"] is False
    assert summary["finished"] == BACKGROUND_REQUESTS


def test_the_lab_takes_lanes_as_a_start_setting_and_a_live_knob():
    """The service's own checks (before the run sees a message): the same rule, the same
    sentence."""
    params = class_params({"preset": "tiny", "lanes": True})
    assert params["lanes"] is True and class_params({"preset": "tiny"})["lanes"] is False
    with pytest.raises(ConfigError, match="Lanes need the continuous policy"):
        class_params({"preset": "tiny", "policy": "static", "lanes": True})
    state = ClassState({k: params[k] for k in SETTINGS})
    assert check_changes(state, {"lanes": False}) == {"lanes": False}
    with pytest.raises(ConfigError, match="Lanes need the continuous policy"):
        check_changes(state, {"policy": "dynamic"})
    assert check_changes(state, {"policy": "dynamic", "lanes": False}) == {
        "policy": "dynamic", "lanes": False}
