"""SessionJobs: events reach the handler, a closed session cancels its jobs and runs no handler
once its document is gone, and a frame walks a served page's model index once. A burst of
events in a served session arriving in few frames (counted against the time they took):
test_session_frames.py."""

from __future__ import annotations

import gc
import weakref
from functools import partial

from bokeh.document import Document
from panel.io.document import _destroy_document
from panel.io.state import set_curdoc

from engine.lab.events import Job, JobEvent
from lessons.session_jobs import SessionJobs
from widgets.request_lanes import RequestLanes


class StubService:
    """Records calls; delivers two events synchronously, as the real service's thread would."""

    def __init__(self):
        self.cancelled_sessions: list[str] = []
        self.cancelled: list[Job] = []

    def submit(self, kind, params, on_event=None, session_id=None, use_cache=True, **queue):
        job = Job(7, kind, dict(params or {}), on_event, session_id, use_cache)
        on_event(JobEvent(7, kind, "queued", {"ahead": 0}))
        on_event(JobEvent(7, kind, "result", {"ok": True}, cached=True, device="cpu: x",
                          measured_at="2026-01-01T00:00:00+0000"))
        return job

    def cancel(self, job):
        self.cancelled.append(job)
        return True

    def cancel_session(self, session_id):
        self.cancelled_sessions.append(session_id)
        return 1


def test_events_reach_the_handler_without_a_server():
    service = StubService()
    jobs = SessionJobs(doc=None, service=service)
    seen = []
    job = jobs.submit("sweep_point", {"batch_size": 2}, seen.append)
    assert not jobs.served and jobs.session_id is None
    assert [e.type for e in seen] == ["queued", "result"] and seen[-1].cached
    assert job.params == {"batch_size": 2} and jobs.jobs == [job]
    assert jobs.cancel_all() == 1 and service.cancelled == [job]


def test_a_destroyed_session_cancels_its_jobs_and_ignores_late_events():
    service = StubService()
    jobs = SessionJobs(doc=None, service=service)
    jobs.session_id = "abc"
    seen = []
    jobs.submit("info", {}, seen.append)
    jobs._session_destroyed(None)
    assert service.cancelled_sessions == ["abc"] and jobs.closed
    jobs._receive(seen.append, JobEvent(7, "info", "progress", {}))
    assert [e.type for e in seen] == ["queued", "result"]


class _Context:
    """Stands for a served session's context: a document with one counts as served."""
    id = "reader-1"


def _served_lanes(context: _Context):
    """A served session's document holding request lanes with one request, its SessionJobs,
    and a step handler that grows the lanes (what it saw, in `seen`)."""
    doc = Document()
    doc._session_context = weakref.ref(context)
    doc.destroy = partial(_destroy_document, doc)  # as Panel's server sets it on each document
    lanes = RequestLanes()
    doc.add_root(lanes.figure)
    lanes.arrive(0, 0.0)
    seen = []

    def on_step(event: JobEvent) -> None:
        seen.append(event.data["t_ms"])
        lanes.advance(event.data["t_ms"])

    return doc, lanes, SessionJobs(doc=doc, service=StubService()), on_step, seen


def test_a_frame_after_the_document_was_destroyed_runs_no_handler():
    """Bokeh destroys a closed session's document under its lock and only then runs the
    session-destroyed hooks (which set `closed`); a frame already waiting for the lock runs in
    between. Its handlers would read emptied models: three-schedules' lanes raised KeyError
    'left' in RequestLanes._patch on a step event."""
    context = _Context()
    doc, lanes, jobs, on_step, seen = _served_lanes(context)
    assert jobs.served
    jobs._batch = [(on_step, JobEvent(1, "serve_run", "step", {"t_ms": 5.0}))]
    jobs._flush()  # live: the bar grows
    assert seen == [5.0] and lanes.spans(0) == {"queued": (0.0, 5.0)}
    doc.destroy(None)  # the session closed; its destroyed hooks have not run yet
    jobs._batch = [(on_step, JobEvent(1, "serve_run", "step", {"t_ms": 9.0}))]
    jobs._flush()
    assert seen == [5.0] and jobs.closed


def test_an_event_after_the_document_was_destroyed_is_not_handled_on_the_services_thread():
    """The same gap seen from the service's thread: an event arriving after Bokeh destroyed
    the document, before the destroyed hooks ran, found the session not served (its context
    gone) and was handled at once there, as for a page never served: three-schedules' lanes
    raised KeyError 'left' in RequestLanes._patch 1 s after a class of 30 left. It is dropped,
    and the session counts as closed."""
    context = _Context()
    doc, lanes, jobs, on_step, seen = _served_lanes(context)
    doc.destroy(None)  # the session closed; its destroyed hooks have not run yet
    assert not jobs.served and not jobs.closed
    jobs._receive(on_step, JobEvent(1, "serve_run", "step", {"t_ms": 9.0}))
    assert seen == [] and jobs.closed and jobs._batch == []


def test_a_frame_recomputes_the_pages_model_index_once_whatever_it_updates():
    """On a served lesson page (the knob, as app.serve_page builds it) an update of an HTML pane
    sets its stylesheets, which holds models, and Bokeh then walks every model of the page again
    (its model index), unless the frame holds the index frozen: then once, at the end."""
    from bokeh.server.contexts import BokehSessionContext, _RequestProxy

    from app import serve_page
    from widgets.job_status import JobStatus

    doc = Document()
    context = BokehSessionContext("reader-1", None, doc)
    context._request = _RequestProxy(None, arguments={"lesson": [b"knob"]})
    doc._session_context = lambda: context
    with set_curdoc(doc):
        serve_page(doc)
    # the page's status line (type(), not isinstance: torch's deprecated aliases warn)
    status = next(o for o in gc.get_objects() if type(o) is JobStatus
                  and any(model.document is doc for model, _ in o._text._models.values()))
    jobs = SessionJobs(doc=doc, service=StubService())
    walks = []
    recompute = doc.models.recompute
    doc.models.recompute = lambda: (walks.append(1), recompute())[1]
    done = {"cached": True, "device": "cpu: x", "measured_at": "2026-01-01T00:00:00+0000"}
    jobs._batch = [(status.handle, event) for event in (
        JobEvent(1, "sweep_point", "queued", {"ahead": 3}),
        JobEvent(1, "sweep_point", "started", {}),
        JobEvent(1, "sweep_point", "progress", {"step": 3, "steps": 10}),
        JobEvent(1, "sweep_point", "result", {"batch_size": 4}, **done))]
    jobs._flush()
    assert "cached:" in status._label.object  # the frame's last event reached the status
    assert len(walks) == 1
