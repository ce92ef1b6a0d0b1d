"""Points asked in the background (the knob's context: batch 1 and half the batch) through the
service's facade and its dispatcher, against a stand-in for the worker's pipes: a reader's
released point starts before another reader's context point that waited longer, and a paused
run goes on rather than wait for context. The rules themselves are rows in test_policy.py."""

from __future__ import annotations

import time

from service_helpers import stand_in_service

from engine.lab.events import Job
from engine.lab.runs import RunState

POINT = {"preset": "tiny", "prompt_len": 16, "new_tokens": 8}


def test_the_facade_marks_a_background_job_and_the_released_point_starts_first(tmp_path):
    with stand_in_service(tmp_path, lend_gaps=False) as (svc, d, w, sent):
        for reader in ("a", "b"):
            d.queue.answered(reader)
        with d.lock:  # both queued before the dispatcher looks
            context = svc.submit("sweep_point", {**POINT, "batch_size": 2}, session_id="a",
                                 background=True)
            released = svc.submit("sweep_point", {**POINT, "batch_size": 4}, session_id="b")
            context.submitted_at -= 1.5  # it waited longer
        assert context.background and not released.background
        d.pump()
        assert d.running.jobs == [released] and sent[-1][:2] == ("run", released.id)


def test_a_paused_run_goes_on_while_only_context_waits(tmp_path):
    now = time.time()
    with stand_in_service(tmp_path, lend_gaps=False) as (svc, d, w, sent):
        load = Job(1, "load_test", {}, session_id="lt", size="load", pausable=True,
                   use_cache=False, submitted_at=now - 60)
        d.queue.add(load)
        d.pump()
        run = d.running
        run.state, run.paused_at = RunState.PAUSED, now - 1
        d.paused, d.running = [run], None
        d.queue.answered("a")
        d.queue.add(Job(2, "sweep_point", {}, session_id="a", size="point", use_cache=False,
                        submitted_at=now - 5, background=True))
        d.pump()
        assert d.running is run and sent[-1] == ("resume", run.id)
