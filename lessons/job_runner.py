"""How a page runs its engine jobs: one group at a time, shown by one widgets.job_status.JobStatus.

    runner = JobRunner(page, JobStatus("measurements"))
    runner.submit("load_test", params, on_event)          # a group of one
    runner.run([(kind, params, on_event), ...])           # a group: a roofline's dozen points
    runner.add("sweep_point", params, on_event)           # one more job in the current group
    runner.cancel(keep=lambda job: job.state == "running")

`submit` and `run` replace the current group: its unfinished jobs are cancelled and their late
events dropped, so a chart never mixes two settings; the engine's queue is told too (the group's
first job replaces the runner's queued ones in one step, engine.lab.job_queue), so a reader's
newest setting is the one that waits. A runner made with nearby=True asks for a cached result of
nearby settings while a job waits; its handlers get it as a "nearby" event, and the status says
what it is. A handler that raises leaves a message in the status, never a stuck spinner. A
disturbed result that the engine measures again (engine.lab.dispatcher: remeasuring) is shown by the
status ("re-measuring", disturbed) and not passed to the handler; nor are the new measurement's
live events (steps, tokens, request changes), only its result: a page draws one result per job,
never two runs' streams over each other. The same holds for a run the engine cut short after its
first partial figure and queued again to start over (engine.lab.policy: cut short): the page
keeps what it drew of the first part, the status keeps its partial figure labelled, and the full
run's result replaces both. Predict first: after `hold_fresh(waiting)`, while `waiting()` is true a
job the engine's cache cannot answer is parked instead of run (a cached one is answered at once,
as ever), and `release()` sends the parked ones: a lesson holds its first fresh measurement until
the reader has made a prediction. With `hold_fresh(waiting, cached_too=True)` a cached job is
parked as well and the status says a result is ready: no answer shows before the prediction, and
the reveal is instant. Each job's events reach its handler on the session's own loop
(lessons.session_jobs), after the status has taken them. While the group's first job waits in the
engine's queue behind other readers' jobs, the status says how many are ahead, refreshed twice a
second (on the web process's one clock, widgets.ticker, which changes the page only when the
count does): in a classroom of thirty, a reader sees "queued behind 4 jobs" rather than a frozen
page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from engine.lab.events import Job, JobEvent
from engine.lab.results import Record
from widgets.job_status import JobStatus, queue_message
from widgets.ticker import QUEUE_TICKER

log = logging.getLogger(__name__)

Handler = Callable[[JobEvent], None]
R = TypeVar("R", bound=Record)
STREAMED = ("token", "step", "request")  # a run's live events, drawn as they come
HELD = "held"  # the state of a parked job's placeholder: not sent to the engine yet


def event_record(record: type[R], data: dict) -> R:
    """A live event's data (its "kind" aside) as the record the job's result holds for the same
    thing: a serving run's "step" event as a StepRecord, a rate sweep's point as a RatePoint."""
    return record.from_dict({k: v for k, v in data.items() if k != "kind"})


class _Entry:
    """One submitted job of the group, with its handler; `dropped` once the page let it go."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.job: Job | None = None  # set when submit returns (events may come before)
        self.final = False
        self.dropped = False
        self.remeasuring = False  # a disturbed result came; the engine measures it again
        self.streamed = False  # the handler has drawn some of the run's live events
        self.restarted = False  # ... and the run was stopped and queued again, to start over
        self.parked: tuple[str, dict, bool] | None = None  # (kind, params, use_cache) if held
        self.ready = False  # parked, though the cache holds its result
        self.background = False  # context for the group's main point (engine.lab.job_queue)

    @property
    def open(self) -> bool:
        return not (self.final or self.dropped or (self.job is not None and self.job.finished))


class JobRunner:
    """Runs a page's engine jobs, one group at a time, and keeps its JobStatus current."""

    def __init__(self, page, status: JobStatus | None = None, nearby: bool = False):
        self.page = page  # anything with `.jobs`, a lessons.session_jobs.SessionJobs
        self.status = status if status is not None else JobStatus()
        self.nearby = nearby  # the page draws "nearby" events: ask the engine for them
        self.demo = f"runner-{id(self)}"  # names this runner's jobs in the engine's queue
        self._entries: list[_Entry] = []
        self._poll = None
        self._waiting: Callable[[], bool] | None = None
        self._hold_message = ""
        self._hold_cached = False
        self._ready_message = ""
        # called with (job, event) for each result the page's handler has drawn: the class's
        # records of what a reader was shown (lessons.classroom.recording)
        self.result_listeners: list[Callable[[Job | None, JobEvent], None]] = []

    # ---- submitting ------------------------------------------------------------------------------
    def run(self, jobs: Sequence[tuple[str, dict, Handler]], use_cache: bool = True,
            message: str = "starting") -> list[Job]:
        """Replace the current group with these (kind, params, handler) jobs."""
        self._drop(self._entries)
        self._entries = []
        self.status.start(len(jobs), message)
        return [self._submit(kind, params, handler, use_cache, replace=i == 0)
                for i, (kind, params, handler) in enumerate(jobs)]

    def submit(self, kind: str, params: dict, on_event: Handler, use_cache: bool = True) -> Job:
        """Replace the current group with this one job."""
        return self.run([(kind, params, on_event)], use_cache)[0]

    def add(self, kind: str, params: dict, on_event: Handler, use_cache: bool = True,
            background: bool = False) -> Job:
        """One more job in the current group (a new group when none is running). With
        background, it is context for the point the reader asked for: it waits behind other
        readers' points and runs (engine.lab.job_queue rule 1)."""
        self._entries = [e for e in self._entries if e.open]
        self.status.add(1)
        return self._submit(kind, params, on_event, use_cache, background=background)

    def _submit(self, kind: str, params: dict, handler: Handler, use_cache: bool,
                replace: bool = False, background: bool = False) -> Job:
        entry = _Entry(handler)
        entry.background = background
        self._entries.append(entry)
        if self._waiting is not None and self._waiting():
            cached = use_cache and self._cached(kind, params)
            if not cached or self._hold_cached:
                entry.parked = (kind, dict(params), use_cache)
                entry.job = Job(0, kind, dict(params), None, None, use_cache, state=HELD,
                                background=background)
                entry.ready = cached
                ready = all(e.ready for e in self._entries if e.parked is not None)
                self.status.job_progress(0, 0, self._ready_message if ready
                                         else self._hold_message)
                return entry.job
        self._send(entry, kind, params, use_cache, replace)
        return entry.job

    def _send(self, entry: _Entry, kind: str, params: dict, use_cache: bool,
              replace: bool = False) -> None:
        entry.job = self.page.jobs.submit(kind, params, lambda e: self._deliver(entry, e),
                                          use_cache, demo=self.demo, replace=replace,
                                          nearby=self.nearby, background=entry.background)

    # ---- predict first ---------------------------------------------------------------------------
    def hold_fresh(self, waiting: Callable[[], bool],
                   message: str = "waiting for your prediction above (or skip it)",
                   cached_too: bool = False,
                   ready_message: str = "a result is ready: predict above (or skip) to see "
                                        "it at once") -> None:
        """While `waiting()` is true, park the jobs the cache cannot answer, and with
        `cached_too` the ones it can as well (module doc)."""
        self._waiting = waiting
        self._hold_message = message
        self._hold_cached = cached_too
        self._ready_message = ready_message

    def release(self) -> None:
        """Send the parked jobs of the current group to the engine."""
        for entry in self._entries:
            if entry.parked is not None and not entry.dropped:
                kind, params, use_cache = entry.parked
                entry.parked = None
                self._send(entry, kind, params, use_cache)
        if not self.held:
            self.status.job_progress(0, 0, "starting")

    @property
    def held(self) -> list[Job]:
        """The group's parked jobs (placeholders, not in the engine's queue)."""
        return [e.job for e in self._entries if e.parked is not None and not e.dropped]

    def _cached(self, kind: str, params: dict) -> bool:
        try:
            return self.page.jobs.service.cached(kind, params) is not None
        except Exception:  # no cache to ask (a service without one, or one shutting down)
            log.debug("cache lookup failed", exc_info=True)
            return False

    # ---- cancelling ------------------------------------------------------------------------------
    def cancel(self, keep: Callable[[Job], bool] | None = None) -> int:
        """Cancel the group's unfinished jobs (those `keep` does not spare) and drop their late
        events; the count cancelled."""
        gone = [e for e in self._entries if e.open and not (keep and e.job and keep(e.job))]
        count = self._drop(gone)
        self.status.forget(len(gone))
        return count

    def _drop(self, entries: list[_Entry]) -> int:
        count = 0
        for entry in entries:
            if not entry.open:
                continue
            entry.dropped = True
            if entry.parked is not None:
                continue  # never sent: nothing to cancel
            try:
                count += bool(entry.job and self.page.jobs.cancel(entry.job))
            except Exception:  # the service may be gone already: nothing left to cancel
                log.debug("cancelling job %s failed", entry.job, exc_info=True)
        return count

    # ---- what the group is doing -----------------------------------------------------------------
    @property
    def jobs(self) -> list[Job]:
        """The group's unfinished jobs, in the order they were submitted."""
        return [e.job for e in self._entries if e.open and e.job is not None]

    @property
    def busy(self) -> bool:
        return bool(self.jobs)

    def _deliver(self, entry: _Entry, event: JobEvent) -> None:
        if entry.dropped:
            return  # a job of a group the reader has moved on from
        if event.final:
            entry.final = True
        if event.type == "queued" and event.data.get("ahead") and self._first_open() is entry:
            self.status.queued(event.data["ahead"], bool(event.data.get("preempted")),
                               bool(event.data.get("resumes")))
            self._start_polling()
        if event.type == "nearby" and entry.job is not None:
            self.status.nearby(event, entry.job.params)
        if (event.type == "queued" and event.data.get("preempted")
                and not event.data.get("resumes") and entry.streamed):
            entry.restarted = True  # cut short after its first figure (engine.lab.policy)
        self.status.handle(event)
        if event.remeasuring:  # disturbed: the status says so; the page waits for the new one
            entry.remeasuring = True
            return
        if (entry.remeasuring or entry.restarted) and event.type in STREAMED:
            return  # the new run's stream, not drawn over the first one's
        entry.streamed = entry.streamed or event.type in STREAMED
        try:
            entry.handler(event)
        except Exception as e:  # the page's own bug: say so on the page, keep the session
            log.exception("the page's handler of a %s event of job %s failed", event.type,
                          event.job_id)
            self.status.page_failed(e)
            return
        if event.type == "result":
            for listener in self.result_listeners:
                try:
                    listener(entry.job, event)
                except Exception:  # a record not kept never costs the reader the page
                    log.exception("recording the result of job %s failed", event.job_id)

    def _first_open(self) -> _Entry | None:
        return next((e for e in self._entries if e.open), None)

    def refresh_queue_position(self) -> None:
        """Say how many jobs are ahead of the group's first unfinished job while it waits in
        the queue; stop polling once it has started (the group's own jobs follow it)."""
        news = self._queue_news()
        if news is not None:
            self.status.queued(*news)

    def _queue_due(self, now: float | None = None) -> Callable[[], None] | None:
        """For the process's clock, which asks outside the session's lock: the refresh when
        the line would change (done on the session's loop, where it asks once more), None when
        the count shown still holds (no call, no message)."""
        return None if self._queue_news() is None else self.refresh_queue_position

    def _queue_news(self) -> tuple[int, bool, bool] | None:
        """(ahead, preempted, resumes) for the status when its queue line would change."""
        first = self._first_open()
        if first is None or first.job is None or first.job.state != "queued":
            self._stop_polling()
            return None
        try:
            ahead = self.page.jobs.service.position(first.job)
        except Exception:  # the service is restarting: say nothing new
            log.debug("service position failed", exc_info=True)
            return None
        if ahead is None or not self.status.running:
            return None
        # a run cut short (preempted) starts over, whatever pauses it had before
        news = (ahead, bool(first.job.preempted),
                bool(first.job.paused) and not first.job.preempted)
        return None if queue_message(*news) == self.status.message else news

    def _start_polling(self) -> None:
        if self._poll is not None or not self.page.jobs.served:
            return
        self._poll = QUEUE_TICKER.watch(self.page.jobs.doc, self._queue_due)

    def _stop_polling(self) -> None:
        QUEUE_TICKER.unwatch(self._poll)
        self._poll = None
