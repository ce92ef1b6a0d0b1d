"""The engine service for lesson tests without a server: every job runs for real, in the calling
thread, through `engine.lab.worker.run` (the function the service's worker runs), on the shipped tiny
model or the preset the page asks for. Its events reach the page at once, as SessionJobs delivers
them outside a served session. The queue and worker thread themselves are tested in
tests/engine/test_service.py; here the subject is what each page does with real results.

Identical jobs are answered from memory (as the real service's measurement cache would answer
them), so a test module pays for each measurement once.

Two switches change delivery, never results: `hold` keeps the answers of the kinds named until
`release()` (answers arriving late, out of order, or after a cancel), and `fail` answers a kind
with the given error message (the page's error path; the engine's own errors and their messages
are tested in tests/engine).
"""

from __future__ import annotations

import itertools
import json

from engine.lab import registry, worker
from engine.lab.events import Job, JobEvent
from engine.lab.results import parse_result
from engine.lab.worker import plain
from lessons.session_jobs import SessionJobs

WHEN = "measured in this test run"
DEVICE = worker.worker_identity()["device"]
_ANSWERS: dict[str, tuple[list, dict]] = {}  # (kind, params) -> (events emitted, result)


def run_job(kind: str, params: dict) -> tuple[list, dict]:
    """The events and result of a real run of the job, once per (kind, params) per process."""
    key = json.dumps([kind, params], sort_keys=True)
    if key not in _ANSWERS:
        events: list = []
        result = worker.run(kind, params, lambda t, d: events.append((t, d)), lambda: False)
        assert parse_result(kind, plain(result)).to_dict() == plain(result)  # its typed record
        _ANSWERS[key] = (events, result)
    return _ANSWERS[key]


class InProcessService:
    """Runs each submitted job at once (unless its kind is held) and delivers its events."""

    def __init__(self, fail: dict | None = None, hold: set | None = None):
        self.fail = fail or {}
        self.hold = hold or set()
        self.submitted: list[Job] = []
        self.held: list[Job] = []
        self.cancelled: list[Job] = []
        self._ids = itertools.count(1)

    def submit(self, kind, params, on_event=None, session_id=None, use_cache=True, demo=None,
               replace=False, nearby=False, aside=False, background=False):
        job = Job(next(self._ids), kind, registry.normalize(kind, params), on_event, session_id,
                  use_cache, demo, nearby=nearby, aside=aside, background=background)
        self.submitted.append(job)
        on_event(JobEvent(job.id, kind, "queued", {"ahead": len(self.held)}))
        if kind in self.hold:
            self.held.append(job)
        else:
            self.answer(job)
        return job

    def answer(self, job: Job) -> None:
        if job.finished:
            return
        if job.kind in self.fail:
            job.state = "error"
            job._done.set()
            job.on_event(JobEvent(job.id, job.kind, "error", {"message": self.fail[job.kind]}))
            return
        events, result = run_job(job.kind, job.params)
        job.on_event(JobEvent(job.id, job.kind, "started", {}))
        for type_, data in events:
            job.on_event(JobEvent(job.id, job.kind, type_, data))
        job.state, job.result = "done", result
        job._done.set()
        job.on_event(JobEvent(job.id, job.kind, "result", result, cached=False,
                              device=DEVICE, measured_at=WHEN))

    def result(self, kind: str) -> dict:
        """The result of the last submitted job of this kind."""
        return [j for j in self.submitted if j.kind == kind][-1].result

    def release(self, reverse: bool = False) -> None:
        held, self.held = self.held, []
        for job in reversed(held) if reverse else held:
            self.answer(job)

    def cancel(self, job):
        if job.finished:
            return False
        self.cancelled.append(job)
        job.state = "cancelled"
        job._done.set()
        return True

    def cancel_session(self, session_id):
        return 0

    def cached(self, kind, params):
        """No measurement cache here: every job is a fresh run (so a page's predict-first hold
        parks it until the reader predicts)."""
        return None

    def status(self):
        return {"queue": [{"id": j.id, "kind": j.kind} for j in self.held], "running": None}

    def position(self, job):
        return self.held.index(job) if job in self.held else None

    def kinds(self) -> list[str]:
        return [j.kind for j in self.submitted]


def attach(page, service: InProcessService | None = None,
           predict: bool = False) -> InProcessService:
    """Give a page (built without a server) the in-process service. A lesson that asks for a
    prediction first is told the reader skipped it, unless `predict` (a test of that gate)."""
    service = service or InProcessService()
    page._jobs = SessionJobs(doc=None, service=service)
    box = getattr(page, "prediction_box", None)
    if box is not None and not predict:
        box.skip()
    return service
