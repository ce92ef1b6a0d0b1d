"""The online engine (the step loop in its own thread) without HTTP: stop strings, and an abort
that frees the sequence's slot and KV blocks before the next step."""

from __future__ import annotations

import queue

import pytest

from engine.sampler import SamplingParams
from engine.scheduler import SchedulerConfig
from engine.serve.online import OnlineEngine, Output, Submission, safe_end, stop_at


def test_stop_strings_cut_at_the_first_match_and_hold_back_a_possible_start():
    assert stop_at("hello world", ["wor"], 0) == 6
    assert stop_at("hello world", ["wor", "ll"], 0) == 2
    assert stop_at("hello world", ["ll"], 4) is None  # text before 4 was already sent
    assert safe_end("hello wo", ["world"]) == 6  # "wo" may still become "world"
    assert safe_end("hello w", ["xyz", "w!"]) == 6
    assert safe_end("hello", ["world"]) == 5 and safe_end("abc", []) == 3


def test_an_abort_frees_the_slot_and_blocks_before_the_next_step(engine):
    online = OnlineEngine(engine, SchedulerConfig("continuous", max_batch=4))
    outputs: dict[int, queue.Queue] = {}
    seen_at_abort = {}

    def deliver_to(i: int):
        def deliver(out: Output) -> None:  # runs on the engine thread, between steps
            if out.finish_reason == "abort" and i == 1:
                running = online.loop.scheduler.running
                seen_at_abort.update(
                    running=[s.id for s in running], used=engine.blocks.num_used,
                    held=sum(len(s.block_table) for s in running), steps=online.loop.step_count)
            outputs[i].put(out)
        return deliver

    ids = engine.tokenizer.encode("A list is a sequence")
    online.start()
    try:
        handles = {}
        for i in range(3):
            outputs[i] = queue.Queue()
            handles[i] = online.submit(Submission(ids, 1500, SamplingParams(), deliver_to(i),
                                                  ignore_eos=True, name=f"r{i}"))
        for i in range(3):
            for _ in range(3):
                assert outputs[i].get(timeout=60).finish_reason is None
        online.abort(handles[1])
        while (out := outputs[1].get(timeout=60)).finish_reason is None:
            pass
        assert out.finish_reason == "abort"
        assert handles[1] not in seen_at_abort["running"] and len(seen_at_abort["running"]) == 2
        assert seen_at_abort["used"] == seen_at_abort["held"] > 0  # its blocks are back
        for _ in range(3):  # the others go on
            assert outputs[0].get(timeout=60).finish_reason is None
        later = [s for s in online.trace()["steps"] if s["index"] >= seen_at_abort["steps"]]
        assert later and all(handles[1] not in s["decode_ids"] for s in later)
    finally:
        online.close()
    assert engine.blocks.num_used == 0
    ended = {r["name"]: r for r in online.trace()["requests"]}
    assert ended["r1"]["finish_reason"] == "abort" and ended["r1"]["finish_s"] is None
    assert {ended["r0"]["finish_reason"], ended["r2"]["finish_reason"]} == {"abort"}  # closed


def test_a_closed_engine_refuses_new_requests(engine):
    online = OnlineEngine(engine, SchedulerConfig("continuous", max_batch=2))
    online.start()
    online.close()
    with pytest.raises(RuntimeError, match="not running"):
        online.submit(Submission([1, 2], 2, SamplingParams(), lambda out: None))
