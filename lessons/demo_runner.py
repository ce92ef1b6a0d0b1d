"""What every live demo of lessons 1 to 4 needs around its engine jobs, in one place.

`DemoRunner` submits a demo's jobs through its page (events on the session's own loop), feeds a
widgets.job_status.JobStatus (progress after a second, errors as a one-line message, "cached:
measured on <device> at <time>"), and, while a job waits in the engine's queue behind other
readers' jobs, says how many are ahead, refreshed twice a second: in a classroom of thirty, a
reader sees "queued behind 4 jobs" rather than a frozen page.

`provenance(result, event)` is the line printed next to measured numbers: the preset, its
weights ("random weights: timing only" for untrained presets) and the device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import panel as pn

from engine.lab.events import Job, JobEvent
from widgets.job_status import JobStatus

log = logging.getLogger(__name__)

QUEUE_POLL_MS = 500
RANDOM_WEIGHTS = "random weights: timing only"


def queue_position(status: dict, job_id: int) -> int | None:
    """How many jobs run before this one: those queued ahead of it plus the running one;
    None when it is not queued (running, finished, or answered from the cache)."""
    ids = [q["id"] for q in status.get("queue", [])]
    if job_id not in ids:
        return None
    return ids.index(job_id) + (1 if status.get("running") else 0)


def queue_message(ahead: int) -> str:
    if ahead <= 0:
        return "starting"
    return (f"queued behind {ahead} job{'s' if ahead != 1 else ''} from other readers "
            "(the engine runs one at a time, in order)")


def weights_text(weights: str | None) -> str:
    return RANDOM_WEIGHTS if weights == "random" else f"{weights or 'trained'} weights"


def provenance(result: dict, event: JobEvent | None = None) -> str:
    """'tiny preset (trained weights) on cpu: <model> (2 cores)': what measured these numbers."""
    device = (event.device if event is not None and event.device else "") or \
        result.get("device", "this machine")
    return f"{result.get('preset', '?')} preset ({weights_text(result.get('weights'))}) on {device}"


class DemoRunner:
    """Runs one demo's engine jobs for a lesson page and keeps its JobStatus current."""

    def __init__(self, page, status: JobStatus | None = None):
        self.page = page
        self.status = status if status is not None else JobStatus()
        self.jobs: list[Job] = []
        self._poll = None

    def submit(self, kind: str, params: dict, on_event: Callable[[JobEvent], None],
               use_cache: bool = True, replace: bool = True) -> Job:
        """Queue a job; with replace, this demo's unfinished jobs are cancelled first."""
        if replace:
            self.cancel()
        holder: list[Job] = []

        def handle(event: JobEvent) -> None:
            if event.type == "queued" and event.data.get("ahead"):
                self.status.handle(event)
                self.status.progress.update(0, 0, queue_message(event.data["ahead"]))
                self._start_polling()
            else:
                self.status.handle(event)
            on_event(event)
            if event.final and holder and holder[0] in self.jobs:
                self.jobs.remove(holder[0])

        job = self.page.run_job(kind, params, handle, use_cache=use_cache)
        holder.append(job)
        if not job.finished:
            self.jobs.append(job)
        return job

    def cancel(self, keep: Callable[[Job], bool] | None = None) -> int:
        """Cancel this demo's unfinished jobs (those `keep` does not spare); the count."""
        count = 0
        for job in list(self.jobs):
            if keep is not None and keep(job):
                continue
            if self.page.jobs.cancel(job):
                count += 1
            self.jobs.remove(job)
        return count

    @property
    def busy(self) -> bool:
        return any(not job.finished for job in self.jobs)

    # ---- where a job stands in the queue -------------------------------------------------
    def refresh_queue_position(self) -> None:
        """Say how many jobs are ahead of this demo's oldest queued job; stop polling when
        none of its jobs waits in the queue any more."""
        waiting = [job for job in self.jobs if job.state == "queued"]
        if not waiting:
            self._stop_polling()
            return
        try:
            status = self.page.jobs.service.status()
        except Exception:  # the service is restarting: say nothing new
            log.debug("service status failed", exc_info=True)
            return
        ahead = queue_position(status, waiting[0].id)
        if ahead is not None and self.status.progress.running:
            self.status.progress.update(0, 0, queue_message(ahead))

    def _start_polling(self) -> None:
        if self._poll is not None or not self.page.jobs.served:
            return
        self._poll = pn.state.add_periodic_callback(self.refresh_queue_position,
                                                    period=QUEUE_POLL_MS)

    def _stop_polling(self) -> None:
        if self._poll is not None:
            self._poll.stop()
            self._poll = None
