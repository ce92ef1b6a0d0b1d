"""SessionJobs outside a served session: events reach the handler, a closed session cancels its
jobs (the served path, events moved onto the session's loop, is covered by tests/ui)."""

from __future__ import annotations

from engine.lab.events import Job, JobEvent
from lessons.session_jobs import SessionJobs


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
