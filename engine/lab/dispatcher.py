"""The engine service's dispatcher: the thread that moves jobs to the worker and its events back.

It holds the queue (engine.lab.job_queue), the running run, the paused stack and the run lent a
gap (engine.lab.runs), asks engine.lab.policy what to do whenever something changes, and applies
the decision by telling the worker (its pipes and signals: engine.lab.supervisor.Worker). It
receives the worker's messages (hello, events, "paused", "gap", result), answers cached jobs from
the cache, measures disturbed results again, and delivers every job's events in order through
its outbox (engine.lab.outbox). One lock guards all of it. Torch-free.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from multiprocessing.connection import wait

from . import policy, trace
from .answers import Answers
from .cache import CacheStore
from .events import FINAL_STATES, Job, JobEvent
from .job_queue import JobQueue
from .memory import process_memory
from .messages import WorkerMessages
from .metrics import LabMetrics
from .outbox import Outbox, deliver
from .policy import Action, Decision
from .registry import CLASS_KIND
from .runs import Run, RunState, jobs_of
from .settings import Settings
from .supervisor import Supervisor, Worker

log = logging.getLogger(__name__)

RECENTLY_ENDED = 100  # the status lists this many of the last jobs to end, with how each ended
COUNTS = ("jobs_done", "jobs_cancelled", "cache_hits", "shared_runs", "preemptions",
          "gap_fills", "cut_short", "disturbed", "remeasured", "disturbed_final")


class Dispatcher(WorkerMessages):
    """The queue, the runs, and the thread that applies the policy's decisions (see the module
    docstring). Every method that reads or changes state holds `lock`."""

    def __init__(self, cache: CacheStore, supervisor: Supervisor, settings: Settings):
        self.lock = threading.RLock()
        self.supervisor = supervisor
        self.answers = Answers(cache)
        self.queue = JobQueue(settings)
        self.running: Run | None = None  # what the worker is running now
        self.filling: Run | None = None  # a point it runs in the running job's idle gap
        self.paused: list[Run] = []  # runs paused for short jobs, the innermost last
        self.outbox = Outbox(supervisor.pipe())
        self.ids = itertools.count(1)
        self.stopping = False
        self.counts = dict.fromkeys(COUNTS, 0)
        self.ended: deque[dict] = deque(maxlen=RECENTLY_ENDED)  # status()["recently_ended"]
        self.worker_idle_mib: float | None = None  # the worker's RSS when it last fell idle
        self.metrics = LabMetrics()  # what GET /metrics shows (engine.lab.metrics)
        self._runs_ended = 0
        self._idle_checked = -1  # runs ended when the idle memory was read
        self._thread: threading.Thread | None = None

    @property
    def settings(self) -> Settings:
        return self.queue.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        with self.lock:
            self.queue.settings = settings

    @property
    def worker(self) -> Worker | None:
        return self.supervisor.worker

    # ---- from the facade (any thread) ----------------------------------------------------------
    def start(self) -> None:
        """Start the worker and the dispatcher thread (once)."""
        with self.lock:
            if self._thread is not None:
                return
            self.supervisor.spawn()
            self._thread = threading.Thread(target=self._loop, name="engine-service",
                                            daemon=True)
            self._thread.start()

    def add(self, job: Job, replace: bool) -> None:
        """Queue a checked job, or let it join the run asking the same question; with replace,
        its reader's queued jobs of its demo end cancelled, replaced by it."""
        with self.lock:
            if self.stopping:
                self.finish(job, "error", {"message": "the engine service has shut down"})
                return
            replaced = self.queue.replace(job.session_id, job.demo) if replace else []
            run = self.running
            if run is not None and not run.cancelling and JobQueue.shares(run.lead, job):
                run.jobs.append(job)  # asked while it runs: it joins that run
                job.state, job.started_at = "running", time.time()
                self.outbox.put(job, JobEvent(job.id, job.kind, "queued", {"ahead": 0}))
                self.outbox.put(job, JobEvent(job.id, job.kind, "started", {}))
            else:
                self.queue.add(job)
                ahead = self.queue.position(job, time.time()) + (run is not None)
                # queued before started, whatever the dispatcher does next: both go through it
                self.outbox.put(job, JobEvent(job.id, job.kind, "queued", {"ahead": ahead}))
            for old in replaced:
                self.finish(old, "cancelled", {"replaced_by": job.id})
        self.outbox.wake()

    def cancel(self, job: Job) -> bool:
        """Cancel a queued or running job; False if it had already finished. A job that shares
        its run with other readers' leaves it (they go on); the last one stops it."""
        with self.lock:
            if job.state in FINAL_STATES:
                return False
            if self.queue.remove(job):
                self.finish(job, "cancelled", {})
                return True
            run = next((r for r in (self.running, self.filling, *self.paused)
                        if r and job in r.jobs), None)
            if run is None:
                return False
            if len(run.jobs) > 1 or run.state.requeues:  # the others go on, or it stops anyway
                run.jobs.remove(job)
                if not run.jobs:  # a run being stopped that nobody is in: no new job joins it
                    run.state = RunState.CANCELLING
                self.finish(job, "cancelled", {})
                return True
            if run in self.paused:  # it goes on once it is the innermost and the worker is
                run.state = RunState.CANCELLING  # free, to stop
                self.outbox.wake()
                return True
            if self.worker is not None:
                run.state = RunState.CANCELLING
                self.worker.cancel_id.value = run.id  # the job polls it and stops
                return True
        return False

    def send_to_running(self, run_id: int, message: dict) -> bool:
        """Send a message to the running job run_id (its Control's inbox: the class run's
        requests and knob changes); False if that run is not the one running now."""
        with self.lock:
            run, w = self.running, self.worker
            if run is None or run.id != run_id or w is None or self.stopping:
                return False
            w.send(("class", run_id, message))
            return True

    @property
    def class_mode(self) -> bool:
        """True while a class run holds the engine (running, or lending a gap)."""
        with self.lock:
            return self.running is not None and self.running.lead.kind == CLASS_KIND

    def jobs_of_session(self, session_id: str) -> list[Job]:
        """Every queued or running job of a reader, who is forgotten by the queue."""
        with self.lock:
            mine = [j for j in (*self.queue, *jobs_of(self.running, self.filling, *self.paused))
                    if j.session_id == session_id]
            self.queue.forget(session_id)
        return mine

    def shutdown(self, timeout: float) -> None:
        """Cancel what is queued, fail what runs, stop the dispatcher thread and the worker."""
        with self.lock:
            if self.stopping:
                return
            self.stopping = True
            pending = list(self.queue)
            self.queue = JobQueue(self.queue.settings)
            runs = (self.running, self.filling, *self.paused)
            self.running, self.filling, self.paused = None, None, []
            if runs[0] is not None and self.worker is not None:
                self.worker.cancel_id.value = runs[0].id
        for job in pending:
            self.finish(job, "cancelled", {}, now=True)
        for job in jobs_of(*runs):
            self.finish(job, "error", {"message": "the engine service has shut down"}, now=True)
        self.outbox.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.supervisor.stop(timeout)

    # ---- the thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self.lock:
                if self.stopping:
                    trace.flush()
                    return
                w = self.worker
            waitables = [self.outbox.wake_r] + ([w.events, w.process.sentinel] if w else [])
            ready = wait(waitables, timeout=1.0)
            if self.outbox.wake_r in ready:
                self.outbox.woken()
            if w is not None:
                if w.events in ready:
                    try:
                        message = w.events.recv()
                    except (EOFError, OSError, ValueError, TypeError, AttributeError):
                        self._worker_died(w)  # it died, perhaps mid-message
                    else:
                        if trace.on:
                            trace.mark("got", message[1] if len(message) > 1 else 0,
                                       tag=message[0], type=message[2] if message[0] == "event"
                                       else None, queued=len(self.queue))
                        self.handle(w, message)
                        trace.mark("handled")
                elif w.process.sentinel in ready:
                    self._drain(w)
                    self._worker_died(w)
            self.pump()
            trace.flush(due=True)

    def _drain(self, w: Worker) -> None:
        """Handle what a worker sent before it exited."""
        try:
            while w.events.poll():
                self.handle(w, w.events.recv())
        except (EOFError, OSError, ValueError, TypeError, AttributeError):
            pass

    def _worker_died(self, w: Worker) -> None:
        """Tell the jobs that were running; a fresh worker runs what is queued. One that never
        came up fails what waits instead of spinning."""
        with self.lock:
            runs = (self.running, self.filling, *self.paused)
            self.running, self.filling, self.paused = None, None, []
            self.metrics.worker_gone()
            code, restarted = self.supervisor.died(w, restart=not self.stopping)
            if self.stopping:
                return
            failed = []
            if not restarted:
                failed, self.queue = list(self.queue), JobQueue(self.queue.settings)
            for job in jobs_of(*runs):
                self.finish(job, "error", {"message": (
                    f"the engine worker stopped unexpectedly (exit code {code}) while running "
                    "this job; it has been restarted, try again")})
            for job in failed:
                self.finish(job, "error", {"message": f"the engine could not start: "
                                                      f"{self.supervisor.start_error}"})

    # ---- applying the policy -------------------------------------------------------------------
    def pump(self) -> None:
        """Answer cached jobs from the cache, apply the policy's decisions until it says wait,
        and deliver what is ready. Every event made here goes through the outbox, behind the
        "queued" events that submit put there, so each job's events arrive in order."""
        with self.lock:
            w = self.worker
            if w is None:
                if self.queue and not self.stopping:  # the last start failed: try again
                    self.supervisor.spawn()
            elif w.identity:  # up: the cache key needs its device
                self._answer_from_cache(w)
                self._note_idle_memory(w)
                for _ in range(8):  # each decision changes what the next one sees
                    decision = policy.decide(self.queue, self.running, self.paused,
                                             self.filling, time.time(), self.settings)
                    lend = decision.action is Action.LEND_GAP
                    want = self.running.id if lend else 0
                    if w.fill_id.value != want:
                        w.fill_id.value = want
                    if decision.action in (Action.WAIT, Action.LEND_GAP):
                        break
                    self.apply(w, decision)
        self.outbox.deliver()
        trace.mark("delivered")

    def apply(self, w: Worker, decision: Decision) -> None:
        """Carry out one decision (under the lock)."""
        action, run = decision.action, decision.run
        if action is Action.START:
            jobs = self.queue.take_lead(decision.job)
            run = self.running = Run(jobs[0].id, jobs, figure_only=decision.figure_only)
            w.cancel_id.value = w.pause_id.value = 0
            options = ({"quiet_first": self.settings.quiet_wait_s} if run.lead.remeasures
                       else {})
            self._send_run(w, run, options)
        elif action is Action.RESUME:
            log.info("%s (job %s) goes on after %.1f s paused (%s; %d jobs wait)",
                     run.lead.kind, run.id, time.time() - run.paused_at, decision.why,
                     len(self.queue))
            self.paused.pop()
            self.running = run
            run.started_at = time.time()
            run.state = policy.after_pause(run.state)
            w.pause_id.value = 0
            w.cancel_id.value = run.id if run.cancelling else 0
            for job in run.jobs:
                self.outbox.put(job, JobEvent(job.id, job.kind, "started", {}))
            w.send(("resume", run.id))
        elif action is not Action.WAIT:
            self._tell(w, decision)

    def _tell(self, w: Worker, decision: Decision) -> None:
        """Tell the worker to pause or stop a run (PAUSE, STOP_BUILD, CUT_SHORT, GIVE_WAY)."""
        action, run = decision.action, decision.run
        lead, now = run.lead, time.time()
        if action is Action.PAUSE:
            run.state = RunState.PAUSING
            w.pause_id.value = run.id
            log.info("pausing %s (job %s; %d paused) to let %d waiting jobs through",
                     lead.kind, run.id, len(self.paused) + 1, len(self.queue))
        elif action is Action.STOP_BUILD:
            run.state = RunState.STOPPING_BUILD
            w.cancel_id.value = -run.id  # stops the build only, never the job's own work
            log.info("stopping %s's engine build (job %s) to let %d waiting jobs through",
                     lead.kind, run.id, len(self.queue))
        elif action is Action.CUT_SHORT:
            run.state = RunState.CUTTING_SHORT
            w.cancel_id.value = run.id  # the job stops at its next check and says "cancelled"
            self.counts["cut_short"] += 1
            log.info("cutting %s (job %s) short at its first figure (waited %.1f s, ran %.1f s)"
                     " to %s; queued again in full", lead.kind, run.id,
                     (lead.started_at or now) - lead.submitted_at, now - (lead.started_at or now),
                     decision.why)
        elif action is Action.GIVE_WAY:
            run.state = RunState.GIVING_WAY
            w.cancel_id.value = run.id  # the quiet wait and the job poll it
            log.info("stopping the re-measure of %s (job %s) to let %d waiting jobs through; "
                     "its disturbed result stands", lead.kind, run.id, len(self.queue))

    def _send_run(self, w: Worker, run: Run, options: dict, gap: bool = False) -> None:
        """Tell the run's jobs they started and send it to the worker."""
        for job in run.jobs:
            job.state, job.started_at = "running", time.time()
            self.outbox.put(job, JobEvent(job.id, job.kind, "started", {}))
        if trace.on:
            trace.mark("send", run.id, kind=run.lead.kind, queued=len(self.queue), gap=gap)
        w.send(("run", run.id, run.lead.kind, run.lead.params, options))

    def _requeue(self, run: Run) -> None:
        """A run stopped while it built its engine, or cut short at a newcomer's first figure:
        its jobs wait again (their arrival time kept: they soon count as points, or as aged
        runs), each told so with a queued event ("resumes": the build goes on where it stopped;
        without it, the job's own work starts over, and a page that drew its first part keeps
        that until the result: lessons.job_runner)."""
        resumes = run.state is RunState.STOPPING_BUILD
        for job in run.jobs:
            if resumes:
                job.paused += 1
            else:
                job.preempted += 1
            job.state, job.started_at, job.progress = "queued", None, None
            self.queue.add(job)
        for job in run.jobs:
            self.counts["preemptions"] += 1
            ahead = self.queue.position(job, time.time()) or 0
            self.outbox.put(job, JobEvent(job.id, job.kind, "queued", {
                "ahead": ahead, "preempted": True, "resumes": resumes}))
        self.outbox.wake()

    def _remeasure(self, jobs: list[Job], result: dict, **meta) -> None:
        """A disturbed result of a run: deliver it to each job the run answered (labelled, not
        final) and queue them again (their arrival time kept); the worker waits for a quiet
        machine before it runs them."""
        self.counts["remeasured"] += 1
        for job in jobs:
            self._answered(job, "disturbed result")  # it has a number, labelled
            job.remeasures += 1
            job.result, job.state, job.started_at = result, "queued", None
            job.device, job.measured_at = meta["device"], meta["measured_at"]
            self.queue.add(job)
        for job in jobs:
            ahead = self.queue.position(job, time.time()) or 0
            self.outbox.put(job, JobEvent(job.id, job.kind, "result", result, remeasuring=True,
                                          readers=len(jobs), **meta))
            self.outbox.put(job, JobEvent(job.id, job.kind, "queued", {
                "ahead": ahead, "remeasure": job.remeasures}))
        self.outbox.wake()

    # ---- the cache and the readers' first numbers ----------------------------------------------
    def _answer_from_cache(self, w: Worker) -> None:
        """Answer queued jobs whose result is cached; show a waiting job a nearby one."""
        for job, how, record in list(self.answers.lookups(self.queue, w)):
            if how == "hit":
                self.queue.remove(job)
                self.counts["cache_hits"] += 1
                self.finish(job, "result", record["result"], cached=True,
                            device=record["device"], measured_at=record["measured_at"])
            else:  # a number is on the page, labelled nearby
                self._answered(job, "nearby")
                self.outbox.put(job, JobEvent(
                    job.id, job.kind, "nearby", record["result"], cached=True,
                    device=record["device"], measured_at=record["measured_at"],
                    near=record["key"]["params"]))

    def _note_idle_memory(self, w: Worker) -> None:
        """The worker's resident memory once it falls idle after a run (status's memory)."""
        if (self.running is None and not self.paused and not self.queue
                and w.identity.get("pid") and self._idle_checked != self._runs_ended):
            self._idle_checked = self._runs_ended
            worker = process_memory(w.identity["pid"])
            self.worker_idle_mib = worker and worker["rss_mib"]

    def _answered(self, job: Job, how: str) -> None:
        """The job's reader has a number on the page now, unless it was a lookup aside. The log
        says when a newcomer's first number came, `how` and how long after the job was asked:
        the engine's part of a new reader's wait."""
        if job.aside:
            return
        if self.queue.newcomer(job.session_id):
            log.info("first number for a reader: job %s (%s, %s) %.1f s after it was asked",
                     job.id, job.kind, how, time.time() - job.submitted_at)
        self.queue.answered(job.session_id)

    # ---- a job's end -----------------------------------------------------------------------------
    def finish(self, job: Job, type_: str, data: dict, now: bool = False, **meta) -> None:
        """Record a job's end and send its final event: through the outbox, or with `now`
        on the calling thread (shutdown)."""
        with self.lock:
            if job.state in FINAL_STATES:
                return
            job.state = {"result": "done"}.get(type_, type_)
            self.metrics.job_ended(job.kind, job.state, bool(meta.get("cached")))
            self.ended.append({"id": job.id, "kind": job.kind, "state": job.state,
                               "cached": bool(meta.get("cached"))})
            if type_ == "cancelled":
                self.counts["jobs_cancelled"] += 1
            if type_ == "result":
                self._answered(job, "cached result" if meta.get("cached") else "result")
                job.result = data
                job.cached = meta.get("cached", False)
                job.device = meta.get("device", "")
                job.measured_at = meta.get("measured_at", "")
                job.readers = meta.get("readers", 1)
            elif type_ == "error":
                job.error = data["message"]
        event = JobEvent(job.id, job.kind, type_, data, **meta)
        if now:
            deliver(job, event)
            job._done.set()
        else:
            self.outbox.put(job, event)
            self.outbox.wake()
