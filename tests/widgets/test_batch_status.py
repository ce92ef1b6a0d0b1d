"""Progress, provenance and errors of a batch of jobs."""

from __future__ import annotations

import panel as pn

from engine.lab.events import JobEvent
from widgets.batch_status import BatchStatus

DEVICE, WHEN = "cpu: Test CPU", "2026-11-22T02:48:18+0000"


def event(type_, data=None, **meta):
    return JobEvent(1, "sweep_point", type_, data or {}, **meta)


def test_progress_counts_finished_jobs_and_shows_after_a_second():
    status = BatchStatus("measurements")
    pn.panel(status).get_root()
    status.start(3, "starting")
    assert status.running and not status.shown
    status.handle(event("progress", {"done": 5, "total": 10, "message": "batch 4"}))
    status.tick(now=status._since + 2)
    assert status.shown and "0 of 3 measurements done (now: batch 4)" in status.progress_text
    assert status._bar.value == 166
    status.handle(event("result", {}, cached=True, device=DEVICE, measured_at=WHEN))
    status.handle(event("result", {}, cached=False, device=DEVICE, measured_at=WHEN))
    assert status.running and status.finished == 2
    status.handle(event("result", {}, cached=True, device=DEVICE, measured_at=WHEN))
    assert not status.running and not status.shown
    label = status.label_text
    assert "1 measured live on cpu: Test CPU" in label and "2 cached: measured on" in label


def test_an_error_shows_its_message_and_a_new_batch_clears_it():
    status = BatchStatus()
    status.start(1)
    status.handle(event("error", {"message": "batch of 99 needs 900 KV blocks"}))
    assert "batch of 99 needs 900 KV blocks" in status.error._alert.object
    assert not status.running
    status.start(2)
    assert status.error.message == "" and status.label_text == ""


def test_a_single_cached_result_reads_like_the_job_status_label():
    status = BatchStatus()
    status.start(1)
    status.handle(event("result", {}, cached=True, device=DEVICE, measured_at=WHEN))
    assert status.label_text.endswith(f"cached: measured on {DEVICE} at 2026-11-22 02:48 UTC</span>")
