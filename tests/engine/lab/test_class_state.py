"""The class run's web-side state (engine.lab.class_state), fed the class_run job's events by
hand: each student's callback gets its request's events, the snapshot keeps what changed since a
run time, and an ended run drops what was still waiting. Torch-free, no worker."""

from __future__ import annotations

import time

from engine.lab.class_state import ENDED, ClassState
from engine.lab.events import JobEvent

SETTINGS = {"preset": "tiny", "policy": "continuous", "max_batch": 4, "chunk_size": 0,
            "prefix_cache": False, "background_rps": 0.0, "max_prompt_tokens": 256,
            "max_tokens": 8, "per_student_per_min": 2}


def class_event(events: list[dict], **state) -> JobEvent:
    return JobEvent(1, "class_run", "class", {"events": events, "state": {
        "in_flight": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 64, **state}})


def test_a_students_events_and_the_snapshot_since_a_time():
    state = ClassState(SETTINGS)
    got: list[dict] = []
    name, reason = state.admit("ann", "Hello", 4, got.append)
    assert reason is None
    start = time.monotonic() - 10.0  # the run started 10 s ago
    state.on_job_event(class_event([
        {"type": "ready", "start_mono": start, "t_s": 0.0, "settings": {}, "device": "cpu",
         "preset": "tiny", "kv_blocks_total": 64, "max_batch_limit": 256},
        {"type": "arrived", "id": name, "student": "ann", "background": False,
         "arrival_s": 9.0, "prompt_tokens": 2, "step": 5},
        {"type": "arrived", "id": "bg1", "student": "background", "background": True,
         "arrival_s": 2.0, "prompt_tokens": 20, "step": 1},
        {"type": "admitted", "id": name, "t_s": 9.1, "step": 5},
        {"type": "token", "id": name, "text": " there", "t_s": 9.2},
        {"type": "step", "index": 5, "start_s": 9.1, "t_s": 9.2, "batch": 1,
         "prefill_tokens": 2, "decode": 0, "tokens": 1, "kv_blocks_used": 1},
        {"type": "token", "id": name, "text": "!", "t_s": 9.3},
        {"type": "step", "index": 6, "start_s": 9.2, "t_s": 9.3, "batch": 1,
         "prefill_tokens": 0, "decode": 1, "tokens": 1, "kv_blocks_used": 1},
        {"type": "finished", "id": name, "ttft_ms": 200.0, "itl_ms": [100.0],
         "output_len": 2, "t_s": 9.3},
        {"type": "knob", "t_s": 9.5, "step": 7, "changes": {"max_batch": 2}, "by": "teacher",
         "preempted": 0}], in_flight=1, kv_blocks_used=3))
    assert [e["type"] for e in got] == ["admitted", "token", "token", "finished"]
    assert got[1] == {"type": "token", "text": " there", "t_s": 9.2}
    assert got[-1]["ttft_ms"] == 200.0 and got[-1]["itl_ms"] == [100.0]
    snap = state.snapshot()
    assert snap["ready"] and snap["active"] and 9.9 < snap["t_s"] < 12
    assert snap["in_flight"] == 1 and snap["kv_blocks_used"] == 3
    assert snap["settings"]["max_batch"] == 2  # the knob's change is in force
    assert snap["knob_changes"] == [{"t_s": 9.5, "step": 7, "changes": {"max_batch": 2},
                                     "by": "teacher"}]
    assert 0.3 < snap["tokens_per_s"] <= 0.4  # two tokens in the last 5 s
    (mine,) = [r for r in snap["requests"] if r["id"] == name]
    assert mine["first_token_s"] == 9.2 and mine["finish_s"] == 9.3
    assert mine["arrival_step"] == 5 and mine["admitted_step"] == 5
    later = state.snapshot(since_s=9.25)
    assert [s["index"] for s in later["steps"]] == [6]
    assert [r["id"] for r in later["requests"]] == [name]  # the background's did not change


def test_the_per_minute_bound_and_an_ended_run():
    state = ClassState(SETTINGS)
    got: list[dict] = []
    assert state.admit("bob", "a", 4, got.append)[1] is None
    assert state.admit("bob", "b", 4, None)[1] is None
    name, reason = state.admit("bob", "c", 4, None)
    assert name is None and "2 requests in the last minute" in reason
    assert state.admit("cat", "c", 4, None)[1] is None
    state.on_job_event(JobEvent(1, "class_run", "cancelled", {}))
    assert got == [{"type": "dropped", "reason": ENDED}]
    assert not state.active and "not live" in state.admit("cat", "d", 4, None)[1]
