"""The status of a page's engine jobs, fed with the service's events: a single job is a group of
one; progress appears after a second; provenance says cached or live, device and time; an error
is one line; a group counts its finished jobs."""

from __future__ import annotations

import panel as pn

from engine.lab.events import JobEvent
from widgets.job_status import EngineError, JobStatus, describe_measurement, format_time

DEVICE = "cpu: Test CPU (2 cores)"
WHEN = "2026-11-22T02:48:18+0000"


def root(viewer):
    """The Bokeh model a Viewer renders to, built without a server."""
    return pn.panel(viewer).get_root()


def event(type_, data=None, job_id=1, **meta) -> JobEvent:
    return JobEvent(job_id, "sweep_point", type_, data or {}, **meta)


def test_describe_measurement_says_cached_device_and_time():
    assert describe_measurement(True, DEVICE, WHEN) == \
        f"cached: measured on {DEVICE} at 2026-11-22 02:48 UTC"
    assert describe_measurement(False, DEVICE, WHEN).startswith(f"measured live on {DEVICE}")
    assert format_time("not a time") == "not a time"


def test_the_label_shows_what_the_result_event_says():
    status = JobStatus()
    root(status)
    status.start(1)
    assert status.label_text == "" and not status._label.visible
    status.handle(event("result", {}, cached=True, device=DEVICE, measured_at=WHEN))
    text = f"cached: measured on {DEVICE} at 2026-11-22 02:48 UTC"
    assert status.label_text == f'<span class="measurement-label cached">{text}</span>'
    assert status._label.visible


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


def test_progress_of_one_job_appears_only_after_a_second():
    status = JobStatus()
    status.start(1, "measuring")
    start = status._since
    status.job_progress(3, 10)
    status.tick(now=start + 0.5)
    assert not status.shown
    status.tick(now=start + 1.5)
    assert status.shown and status._bar.value == 300  # of 1000: 30%
    assert "measuring: 3 of 10 steps" in status.progress_text
    status.stop()
    assert not status.shown and not status.running


def test_one_job_routes_its_events():
    status = JobStatus()
    root(status)
    status.start(1)
    status.queued(2)
    assert status.running and "queued behind 2 jobs" in status.message
    status.handle(event("started"))
    assert status.message == "measuring"
    status.handle(event("progress", {"done": 1, "total": 4}))
    assert (status.done, status.steps) == (1, 4)
    status.handle(event("result", {"x": 1}, cached=False, device=DEVICE, measured_at=WHEN))
    assert not status.running
    assert "measured live on" in status.label_text
    status.start(1)
    status.handle(event("error", {"message": "the prompt is empty: give some text"}))
    assert status.error.message == "the prompt is empty: give some text"
    assert not status.running


def test_progress_of_a_group_counts_finished_jobs_and_shows_after_a_second():
    status = JobStatus("measurements")
    root(status)
    status.start(3, "starting")
    assert status.running and not status.shown
    status.handle(event("progress", {"done": 5, "total": 10, "message": "batch 4"}))
    status.tick(now=status._since + 2)
    assert status.shown and "0 of 3 measurements done (now: batch 4)" in status.progress_text
    assert status._bar.value == 166
    status.handle(event("result", {}, 1, cached=True, device=DEVICE, measured_at=WHEN))
    status.handle(event("result", {}, 2, cached=False, device=DEVICE, measured_at=WHEN))
    assert status.running and status.finished == 2
    status.handle(event("result", {}, 3, cached=True, device=DEVICE, measured_at=WHEN))
    assert not status.running and not status.shown
    label = status.label_text
    assert f"1 measured live on {DEVICE}" in label and "2 cached: measured on" in label


def test_an_error_shows_its_message_and_a_new_group_clears_it():
    status = JobStatus()
    status.start(1)
    status.handle(event("error", {"message": "batch of 99 needs 900 KV blocks"}))
    assert "batch of 99 needs 900 KV blocks" in status.error._alert.object
    assert not status.running
    status.start(2)
    assert status.error.message == "" and status.label_text == ""


def test_a_group_grows_and_forgets_cancelled_jobs():
    status = JobStatus()
    status.add()  # nothing running: a new group of one
    status.add(2)
    assert (status.total, status.running) == (3, True)
    status.handle(event("result", {}, device=DEVICE, measured_at=WHEN))
    status.forget(2)  # the page cancelled the other two
    assert not status.running and status.total == 1


def quality(waited_ms: float = 0.0) -> dict:
    """A result's spread and disturbance check, as the worker writes them (engine.lab.quality):
    a job that computed 1 s and waited `waited_ms` for its core."""
    from engine.lab import quality as q

    before = q.Usage(cores=(1,), wall=0.0, cpu_s=0.0, threads={7: (0, 0)}, ticks={1: (0, 0)})
    after = q.Usage(cores=(1,), wall=1.0, cpu_s=1.0,
                    threads={7: (10**9, int(waited_ms * 10**6))}, ticks={1: (100, 0)})
    return {"spread": q.spread([2.0, 2.1, 2.2, 2.3, 2.4], "decode step"),
            "check": q.check(before, after)}


def test_the_label_shows_how_steady_the_timed_steps_were():
    status = JobStatus()
    root(status)
    status.start(1)
    status.handle(event("result", quality(), device=DEVICE, measured_at=WHEN))
    # deciles within the steps timed (2.0 to 2.4 ms; the exclusive method gave 1.96-2.44)
    assert "decode steps p10\u2013p90 2.04\u20132.36 ms (5 timed)" in status.label_text
    assert "DISTURBED" not in status.label_text and not status.disturbed


def test_a_disturbed_result_is_labelled_then_re_measured():
    status = JobStatus()
    root(status)
    status.start(1)
    status.handle(event("result", quality(waited_ms=300), device=DEVICE, measured_at=WHEN,
                        remeasuring=True))
    assert status.running and status.finished == 0  # not over: it is measured again
    assert status.message.startswith("re-measuring") and status.remeasuring
    assert "DISTURBED: other work kept the engine off its core for 300 ms" in status.label_text
    assert "re-measuring once the engine's core is quiet" in status.label_text
    assert "disturbed" in status._label.object  # styled apart
    status.handle(event("queued", {"ahead": 0, "remeasure": 1}))
    status.handle(event("started"))
    status.handle(event("result", quality(), device=DEVICE, measured_at=WHEN))
    assert not status.running and status.finished == 1
    assert "DISTURBED" not in status.label_text and not status.disturbed


def test_a_result_still_disturbed_after_its_re_measures_says_so():
    status = JobStatus()
    root(status)
    status.start(1)
    status.handle(event("result", quality(waited_ms=300), device=DEVICE, measured_at=WHEN))
    assert not status.running and status.disturbed and not status.remeasuring
    assert "not cached; measure again when the machine is quiet" in status.label_text


def test_a_run_shows_its_figure_so_far_labelled_partial_until_its_result():
    """A serving run's progress carries its median end-to-end latency so far
    (engine.lab.jobs.serving.SoFar): the status line shows it as partial while the run goes on,
    and drops it once the result (the run's own figures) is in."""
    status = JobStatus()
    root(status)
    status.start(1)
    status.handle(event("progress", {"done": 0, "total": 16, "message": "requests answered",
                                     "so_far": {"answered": 0, "e2e_p50_ms": None}}))
    assert "so far" not in status.progress_text  # nothing answered yet: no figure
    status.handle(event("progress", {"done": 5, "total": 16, "message": "requests answered",
                                     "so_far": {"answered": 5, "e2e_p50_ms": 1432.4}}))
    assert status.progress_text.endswith(
        "; measured live so far: median end-to-end latency 1,432 ms over the 5 requests "
        "answered (the run goes on)")
    status.handle(event("progress", {"done": 1, "total": 4}))  # a page's own progress keeps it
    assert "measured live so far" in status.progress_text
    status.handle(event("result", {}, cached=False, device=DEVICE, measured_at=WHEN))
    assert status.so_far == "" and "measured live on" in status.label_text
    status.start(1)
    status.handle(event("progress", {"done": 1, "total": 3,
                                     "so_far": {"answered": 1, "e2e_p50_ms": 80.0}}))
    assert "over the first request answered" in status.progress_text
