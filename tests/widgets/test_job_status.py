"""Provenance labels, error messages and the progress bar, fed with the service's events."""

from __future__ import annotations

import panel as pn

from engine.lab.events import JobEvent
from widgets.job_status import (
    CachedLabel,
    EngineError,
    JobProgress,
    JobStatus,
    describe_measurement,
    format_time,
)

DEVICE = "cpu: Test CPU (2 cores)"
WHEN = "2026-11-22T02:48:18+0000"


def root(viewer):
    """The Bokeh model a Viewer renders to, built without a server."""
    return pn.panel(viewer).get_root()


def event(type_, data=None, **meta) -> JobEvent:
    return JobEvent(1, "sweep_point", type_, data or {}, **meta)


def test_describe_measurement_says_cached_device_and_time():
    assert describe_measurement(True, DEVICE, WHEN) == \
        f"cached: measured on {DEVICE} at 2026-11-22 02:48 UTC"
    assert describe_measurement(False, DEVICE, WHEN).startswith(f"measured live on {DEVICE}")
    assert format_time("not a time") == "not a time"


def test_cached_label_shows_what_the_result_event_says():
    label = CachedLabel()
    pane = root(label)
    assert label.text == "" and not pane.visible
    label.update(event("result", {}, cached=True, device=DEVICE, measured_at=WHEN))
    assert label.text == f"cached: measured on {DEVICE} at 2026-11-22 02:48 UTC"
    assert pane.visible and label.text in pane.text


def test_engine_error_shows_one_line():
    err = EngineError()
    alert = root(err)
    assert not alert.visible
    err.message = "batch of 9 needs 90 KV blocks\nsecond line"
    assert alert.visible
    assert "batch of 9 needs 90 KV blocks" in err._alert.object
    assert "second line" not in err._alert.object
    err.message = ""
    assert not err._alert.visible


def test_progress_appears_only_after_a_second():
    bar = JobProgress()
    bar.start("measuring")
    start = bar._since
    bar.update(3, 10)
    bar.tick(now=start + 0.5)
    assert not bar.shown
    bar.tick(now=start + 1.5)
    assert bar.shown and bar._bar.value == 30
    assert "3 of 10 steps" in bar._text.object
    bar.stop()
    assert not bar.shown and not bar.running


def test_job_status_routes_events():
    status = JobStatus()
    root(status)
    status.handle(event("queued", {"ahead": 2}))
    assert status.progress.running and "2 jobs ahead" in status.progress.message
    status.handle(event("started"))
    status.handle(event("progress", {"done": 1, "total": 4}))
    assert (status.progress.done, status.progress.total) == (1, 4)
    status.handle(event("result", {"x": 1}, cached=False, device=DEVICE, measured_at=WHEN))
    assert not status.progress.running
    assert status.label.text.startswith("measured live")
    status.handle(event("queued", {"ahead": 0}))
    status.handle(event("error", {"message": "the prompt is empty: give some text"}))
    assert status.error.message == "the prompt is empty: give some text"
    assert not status.progress.running
