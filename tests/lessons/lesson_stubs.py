"""A stand-in engine service for lesson tests without a server: it records what a page submits
and lets the test deliver events (real job results, run in this process) as the service would."""

from __future__ import annotations

import itertools
import json

from engine.lab import registry, worker
from engine.lab.events import Job, JobEvent
from lessons.session_jobs import SessionJobs

DEVICE = "cpu: Test CPU (2 cores)"
WHEN = "2026-11-22T02:48:18+0000"


class StubService:
    def __init__(self):
        self.submitted: list[Job] = []
        self.cancelled: list[Job] = []
        self._ids = itertools.count(1)
        self.queue: list[Job] = []
        self.running: Job | None = None
        self.cache: dict[str, dict] = {}  # what cached() answers: put(kind, params, record)

    @staticmethod
    def _key(kind, params) -> str:
        return json.dumps([kind, registry.normalize(kind, params)], sort_keys=True)

    def put(self, kind, params, record: dict) -> None:
        """Make the measurement cache hold a record for this job."""
        self.cache[self._key(kind, params)] = record

    def cached(self, kind, params):
        return self.cache.get(self._key(kind, params))

    def submit(self, kind, params, on_event=None, session_id=None, use_cache=True, demo=None,
               replace=False, nearby=False, aside=False, background=False):
        job = Job(next(self._ids), kind, registry.normalize(kind, params), on_event, session_id,
                  use_cache, demo, nearby=nearby, aside=aside, background=background)
        job.replace = replace  # what the page asked of the queue, for the tests to read
        self.submitted.append(job)
        return job

    def cancel(self, job):
        if job.finished:
            return False
        job.state = "cancelled"
        job._done.set()
        self.cancelled.append(job)
        return True

    def cancel_session(self, session_id):
        return 0

    def position(self, job):
        """Jobs before this queued one (the running one included); None if it is not queued."""
        if job not in self.queue:
            return None
        return self.queue.index(job) + (self.running is not None)

    # ---- the test plays the service's part ----------------------------------------------
    def send(self, job: Job, type_: str, data: dict | None = None, **meta) -> None:
        job.on_event(JobEvent(job.id, job.kind, type_, data or {}, **meta))

    def finish(self, job: Job, result: dict, cached: bool = False) -> None:
        job.state = "done"
        self.send(job, "result", result, cached=cached, device=DEVICE, measured_at=WHEN)
        job._done.set()

    def run_for_real(self, job: Job, cached: bool = False) -> dict:
        """Run the job in this process, delivering its events and its result."""
        self.send(job, "started")
        result = worker.run(job.kind, job.params,
                          lambda t, d: self.send(job, t, d), lambda: False)
        self.finish(job, result, cached)
        return result


def attach(page, predict: bool = False) -> StubService:
    """Give a page (built without a server) the stub service. A lesson that asks for a
    prediction first is told the reader skipped it, unless `predict` (a test of that gate)."""
    service = StubService()
    page._jobs = SessionJobs(doc=None, service=service)
    box = getattr(page, "prediction_box", None)
    if box is not None and not predict:
        box.skip()
    return service


def said(page) -> list[str]:
    """What the page's live region has said, and what waits for its gap (outside a server a
    throttled message stays waiting): a screen reader reads both."""
    live = page.runner.status.live
    return [live.message, live.pending]


def downloaded(download) -> tuple[dict, list[dict]]:
    """A widgets.data_download.DataDownload's JSON file read back (header, rows), after checking
    that its CSV file holds the same header keys and the same rows (as text)."""
    import json

    from widgets.data_download import read_csv

    csv_file, json_file = download.texts()
    data = json.loads(json_file)
    csv_head, csv_rows = read_csv(csv_file)
    assert list(csv_head) == list(data["header"])
    assert csv_rows == [{k: "" if v is None else str(v) for k, v in row.items()}
                        for row in data["rows"]]
    return data["header"], data["rows"]
