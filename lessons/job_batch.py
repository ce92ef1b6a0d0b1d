"""A demo's batch of engine jobs: submitted together, shown by one widgets.batch_status.BatchStatus,
and replaced as a whole when the reader changes a control (the old jobs are cancelled and their
late events dropped, so a chart never mixes two settings).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.lab.events import Job, JobEvent
from widgets.batch_status import BatchStatus

Handler = Callable[[JobEvent], None]


class JobBatch:
    """Submit (kind, params, handler) jobs through a page's run_job; one batch at a time."""

    def __init__(self, page, status: BatchStatus):
        self.page = page
        self.status = status
        self.generation = 0
        self.jobs: list[Job] = []

    def run(self, jobs: list[tuple[str, dict, Handler]], use_cache: bool = True,
            message: str = "") -> None:
        self.cancel()
        self.generation += 1
        generation = self.generation
        self.status.start(len(jobs), message)

        def deliver(handler: Handler) -> Handler:
            def on_event(event: JobEvent) -> None:
                if generation != self.generation:
                    return  # a job of a batch the reader has moved on from
                self.status.handle(event)
                handler(event)
            return on_event

        self.jobs = [self.page.run_job(kind, params, deliver(handler), use_cache=use_cache)
                     for kind, params, handler in jobs]

    def cancel(self) -> None:
        """Cancel the unfinished jobs of the current batch; their events are dropped."""
        self.generation += 1
        for job in self.jobs:
            if not job.finished:
                try:
                    self.page.jobs.cancel(job)
                except Exception:  # the service may be gone already; nothing to cancel then
                    pass
        self.jobs = []
        if self.status.running:
            self.status.stop()

    @property
    def busy(self) -> bool:
        return any(not job.finished for job in self.jobs)
