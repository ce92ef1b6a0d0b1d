"""The dispatcher's outbox: job events waiting to be delivered, in order, and the wake-up pipe
that makes the dispatcher thread look again. Torch-free.

Every event goes through here, whichever thread made it (a page's submit, the dispatcher's
handling of a worker's message), so each job's events arrive in the order they were made, on the
dispatcher's thread (a page moves them onto its own event loop itself).
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from .events import Job, JobEvent

log = logging.getLogger(__name__)


class Outbox:
    """Events to deliver (put), delivered by the dispatcher thread (deliver), which `wake`
    rouses."""

    def __init__(self, pipe):
        """pipe: a one-way (reader, writer) pair (multiprocessing's: `wait` can watch it)."""
        self._ready: deque[tuple[Job, JobEvent]] = deque()
        self._lock = threading.Lock()
        self.wake_r, self._wake_w = pipe
        self._woken = False

    def put(self, job: Job, event: JobEvent) -> None:
        with self._lock:
            self._ready.append((job, event))

    def pending(self) -> list[tuple[Job, JobEvent]]:
        """What waits to be delivered, oldest first."""
        with self._lock:
            return list(self._ready)

    def deliver(self) -> None:
        """Deliver every waiting event (on the dispatcher thread); a final one marks its job
        done after its on_event has run."""
        while True:
            with self._lock:
                if not self._ready:
                    return
                job, event = self._ready.popleft()
            deliver(job, event)
            if event.final:
                job._done.set()

    def wake(self) -> None:
        """Make the dispatcher look again (one byte at most in flight, so writers never block)."""
        with self._lock:
            if self._woken:
                return
            self._woken = True
        try:
            self._wake_w.send_bytes(b"!")
        except (OSError, ValueError):
            pass

    def woken(self) -> None:
        """The dispatcher has seen the wake-up: empty the pipe."""
        with self._lock:
            self._woken = False
            while self.wake_r.poll():
                self.wake_r.recv_bytes()


def deliver(job: Job, event: JobEvent) -> None:
    """Call the job's on_event; a page's bug must not stop the service."""
    if job.on_event is None:
        return
    try:
        job.on_event(event)
    except Exception:
        log.exception("on_event of job %s (%s) failed", job.id, job.kind)
