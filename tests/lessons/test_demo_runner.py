"""The demo runner: queue position in words, provenance lines, one job at a time per demo."""

from __future__ import annotations

import panel as pn
from lesson_stubs import DEVICE, attach

from engine.lab.events import Job, JobEvent
from lessons.base import UrlPage
from lessons.demo_runner import (
    DemoRunner,
    provenance,
    queue_message,
    queue_position,
)


def test_queue_position_counts_the_running_job_and_those_ahead():
    status = {"queue": [{"id": 4}, {"id": 5}, {"id": 9}], "running": {"id": 2}}
    assert queue_position(status, 9) == 3
    assert queue_position({**status, "running": None}, 4) == 0
    assert queue_position(status, 2) is None  # running, not queued
    assert queue_message(1) == ("queued behind 1 job from other readers (the engine runs one "
                                "at a time, in order)")
    assert "behind 4 jobs" in queue_message(4) and queue_message(0) == "starting"


def test_provenance_names_preset_weights_and_device():
    event = JobEvent(1, "sweep_point", "result", {}, device=DEVICE)
    assert provenance({"preset": "tiny", "weights": "trained"}, event) == \
        f"tiny preset (trained weights) on {DEVICE}"
    assert provenance({"preset": "small", "weights": "random", "device": "cpu"}) == \
        "small preset (random weights: timing only) on cpu"


def test_runner_shows_the_live_queue_and_replaces_its_job():
    page = UrlPage()
    service = attach(page)
    runner = DemoRunner(page)
    pn.panel(runner.status).get_root()
    seen = []
    first = runner.submit("sweep_point", {"batch_size": 2}, seen.append)
    service.send(first, "queued", {"ahead": 2})
    assert "queued behind 2 jobs" in runner.status.progress.message
    service.queue, service.running = [first], Job(99, "info", {})  # another reader's job
    runner.refresh_queue_position()
    assert "queued behind 1 job " in runner.status.progress.message
    second = runner.submit("sweep_point", {"batch_size": 4}, seen.append)
    assert service.cancelled == [first] and runner.jobs == [second]
    service.send(second, "started")
    assert runner.status.progress.message == "measuring"
    service.finish(second, {"batch_size": 4})
    assert runner.jobs == [] and not runner.busy
    assert [e.type for e in seen] == ["queued", "started", "result"]
    assert "cached" not in runner.status.label.text and DEVICE in runner.status.label.text


def test_errors_become_a_message():
    page = UrlPage()
    service = attach(page)
    runner = DemoRunner(page)
    job = runner.submit("sweep_point", {"batch_size": 2}, lambda e: None)
    service.send(job, "error", {"message": "batch of 2 needs 9 KV blocks"})
    assert "batch of 2 needs 9 KV blocks" in runner.status.error._alert.object
