"""The engine service's client: the web process holds one; one worker process per server runs
engine jobs, one at a time, in the order engine.lab.job_queue decides for a classroom.

Why a process: the worker owns the device, so the web server's Python work (serializing page
updates for a classroom of browsers) never holds the interpreter lock while a measured step runs,
and an engine crash does not take the pages down: the service restarts the worker and tells the
job that was waiting. The web process never imports torch; only the worker (engine.lab.worker)
does.

Flow: `submit` checks the kind and fills in its defaults (engine.lab.registry) and queues a Job;
a dispatcher thread sends the job the queue picks (short jobs first, readers in turn, a reader's
newest request of a demo replacing their queued ones) to the worker when it is idle, receives the
worker's events (progress, token, step, result, error, cancelled) and calls the job's `on_event`
with a JobEvent (engine.lab.events; on the dispatcher thread: a page moves events onto its own
event loop itself). Jobs asking the same question (same kind and parameters) share one run: those
queued leave the queue with the first, and one submitted while it runs joins it; each gets every
event from then on, and the result says how many readers it answered. Results are cached
(engine.lab.cache) keyed by the worker's device, the job kind, its parameters with defaults filled
in, and the engine version; a job whose result is cached is answered at once, without waiting in
the queue, and its result event says `cached=True` with the device and time it was measured.
Torch-free.

Long work gives way to short jobs (a class must not wait 20-30 s behind one reader): once a
point or a newcomer's first job (engine.lab.job_queue) has waited PREEMPT_AFTER_S and the
running job has had a turn of TURN_S, a long pausable run (a load test, a schedule run, a rate
sweep, a small preset's point on a CPU) is paused between two of its steps, outside what it
times, for smaller jobs (the worker runs them inside the pause, and the run's clock and
disturbance check leave the pause out: engine.lab.worker), and a model's build is stopped
between two of its steps (the worker keeps the half-built engine). Either goes on where it
stopped, so nothing it had done is lost or run again: a paused run once no smaller job waits;
after MAX_PAUSE_S, before the runs and load tests that wait, at the first moment no other
reader's point or newcomer's first job waits (points keep their priority: a turn given while
they wait made each of them wait it out); after HARD_PAUSE_S whatever waits, so it always
ends. A run started inside a pause may be paused in turn, up to MAX_PAUSED
deep; the innermost goes on first. One more place is kept for points: the run started inside the
MAX_PAUSED-th pause is paused for points only, and inside that pause only points start, and
newcomers' first runs that show a partial figure within a second or so (schedule runs, load
tests, rate sweeps), each stopped at that figure whoever waits and queued again whole
(figure_only; so is one started with MAX_PAUSED runs paused, so it never takes that last place).
Any other newcomer's long first job waits for the innermost run to end. So whatever runs, a
point gets in within one step of it or of a newcomer's first figure. A newcomer's first run (a
schedule run, a load test, a rate sweep) is wanted urgently only until its first partial figure
is on the page: then, if other readers' points or newcomers' first jobs wait, it is cut short
and queued again whole, to wait by the size rule (_cut_short), so newcomers' runs do not fill
the pause stack.

A run's idle time goes to points too: while another reader's point waits, a running job whose
serving loop has nothing to do until its next arrival lends that gap (_offer_gaps, _fill): the
worker asks for one point and runs it there, and the run's clock stops only for what the point
takes past the gap (engine.serve.loop, engine.lab.worker.fill_gap), so the run is not paused.

Measurement quality (engine.lab.cores, engine.lab.quality): the worker pins itself to the
engine's cores (ENGINE_CORES, or `core_setting=`) and, once it has said which, this process
pins itself to the others when `pin_self` is set (the app's service, get_service), or else
just the dispatcher thread. Every timed
result carries its spread and a disturbance check; a disturbed result is never cached, and a
cacheable job's disturbed result is delivered with `remeasuring=True` (not final) and the job
queued again, to run once the engine's cores are quiet (at most `remeasures` times; after that the last
result is final, labelled disturbed). It is measured again only when no other reader's job
waits: in a class, a re-measure in front of readers who have no number yet costs them two more
runs and the quiet waits (bench/classroom.py), so while others wait the first result is final,
labelled; and a re-measure stops (even in its wait for quiet) when another reader's job arrives,
its first result then final (_maybe_give_way).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing as mp
import os
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from ..errors import ResultError
from ..paths import cache_dir
from . import cores, registry, trace
from .cache import CacheStore, SharedResult, disturbed
from .endpoint import measured_on
from .events import FINAL_EVENTS, FINAL_STATES, Job, JobEvent, one_line
from .job_queue import SIZES, JobQueue, Newcomers, question
from .memory import process_memory
from .results import parse_result

log = logging.getLogger(__name__)

PREEMPT_AFTER_S = 1.0  # a short job waiting this long pauses a load test or an engine's build
# (2 s until bench/classroom.py at 30 students showed a knob point's wait in the engine made of
# it: p50 2.4 s, the pause requested at 2 s; a slider's release is to be drawn within 5 s)
TURN_S = 2.0  # ... once that has run this long since it started or went on
MAX_PAUSE_S = 10.0  # a paused run goes on after this long, before the runs and load tests that
# wait, at the first moment no other reader's point or newcomer's first job waits (it used to go
# on here whatever waited: a 2 s turn every 10-15 s that 20-40 waiting jobs sat behind, and knob
# points waited p95 5-6 s; bench/classroom.py at 30 students, server logs of main ba10dfb)
HARD_PAUSE_S = 30.0  # ... and after this long even while they wait: a paused run always ends
PAUSED_RUNS_TAKE = ("point", "run")  # the sizes of jobs an engine's build is stopped for
MAX_PAUSED = 4  # runs paused inside each other's pauses for any shorter job at most (each holds
# an engine: tiny's is about 130 MiB with its KV pool, so 4 deep adds about half a GiB to the
# worker); the run inside the last of them may be paused once more, for points alone (as many
# runs at once as before, when that one could not be paused at all)
REMEASURES = 2  # a disturbed result is measured again at most this many times
QUIET_WAIT_S = 5.0  # before measuring again, the worker waits at most this long for quiet
RECENTLY_ENDED = 100  # the status lists this many of the last jobs to end, with how each ended
GAP_SIZES = ("point",)  # the jobs a running job's idle gap may run (_fill)


def _worker_process(job_conn, event_conn, cancel_id, core_setting, available, pause_id,
                    fill_id) -> None:
    """The spawned child's entry: the worker's code is imported there, never in the web process."""
    from .worker import main

    main(job_conn, event_conn, cancel_id, core_setting, available, pause_id, fill_id)


@dataclass
class _Worker:
    """One incarnation of the worker process and its pipes (fresh ones after a restart: a process
    killed mid-write can leave a pipe holding half a message)."""

    process: Any
    jobs: Any  # our end of the job pipe (we send)
    events: Any  # our end of the event pipe (we receive)
    cancel_id: Any  # shared int: the id of the running job to cancel
    pause_id: Any  # shared int: the id of the running job to pause (a pausable one)
    fill_id: Any  # shared int: the id of the running job whose idle gaps may run a point
    identity: dict | None = None  # the hello: device, engine_version, pid, cores, threads
    started_at: float = field(default_factory=time.time)


@dataclass(eq=False)
class _Run:
    """What the worker is running: one job's kind and params, and every job it answers (the one
    that asked first, then those that asked the same question). The worker knows it by the first
    job's id."""

    id: int
    jobs: list[Job]
    first: Job | None = None  # jobs[0] when it started: its lead, even once every job has left
    cancelling: bool = False  # every job has left it; the worker was told to stop
    preempting: bool = False  # stopped to let short jobs through: its jobs are queued again
    building: bool = False  # the worker is building its engine (engine.lab.worker.prepare_engine)
    pausing: bool = False  # the worker was told to pause it (a pausable job)
    figured: bool = False  # it has shown a first partial figure ("so_far")
    giving_way: bool = False  # a re-measure stopped for other readers: its first result stands
    figure_only: bool = False  # a newcomer's first run started with the pause stack (nearly)
    # full: it stops at its first figure, queued again whole, never paused (_cut_short)
    started_at: float = field(default_factory=time.time)  # or when it last went on
    paused_at: float = 0.0

    def __post_init__(self) -> None:
        self.first = self.first or self.jobs[0]

    @property
    def lead(self) -> Job:
        """The job whose kind and params the worker runs: the first still in it, or the one it
        started with once the last has left (a run being stopped: cancel)."""
        return self.jobs[0] if self.jobs else self.first


class EngineService:
    """The thin client of the engine worker; see the module docstring. Thread-safe."""

    def __init__(self, cache_path: Path | None = None, start: bool = True,
                 core_setting: str | None = None, pin_self: bool = False,
                 remeasures: int = REMEASURES):
        """core_setting: the engine's cores (engine.lab.cores; default $ENGINE_CORES or auto);
        pin_self: pin this process to the other cores (a server's; not a test's or a
        script's); remeasures: how often a disturbed result is measured again."""
        self._ctx = mp.get_context("spawn")
        self.core_setting = core_setting or os.environ.get(cores.ENV, "auto")
        self._available = list(cores.available_cores())  # before this process pins itself
        self.pin_self = pin_self
        self.remeasures = remeasures
        self.lend_gaps = True  # a running job's idle gaps run waiting points (_fill)
        self.preempt_after_s = PREEMPT_AFTER_S
        self.turn_s = TURN_S
        self.max_pause_s = MAX_PAUSE_S
        self.hard_pause_s = HARD_PAUSE_S
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._queue = JobQueue()
        self._running: _Run | None = None  # what the worker is running now
        self._filling: _Run | None = None  # a point it runs in the running job's idle gap
        self._paused: list[_Run] = []  # runs paused for short jobs, the innermost last
        self._ready_results: deque[tuple[Job, JobEvent]] = deque()  # events to deliver, in order
        self._cache = CacheStore(cache_path or cache_dir() / "results")
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._wake_lock = threading.Lock()
        self._woken = False
        self._cache_generation = 0  # bumped per stored result: queued jobs are looked up again
        self._worker: _Worker | None = None
        self._stopping = False
        self._start_error: str | None = None
        self.restarts = 0
        self.jobs_done = 0
        self.jobs_cancelled = 0
        self.cache_hits = 0
        self.shared_runs = 0  # runs that answered more than one reader's job
        self.preemptions = 0  # jobs stopped to let short ones through, and queued again
        self.gap_fills = 0  # points run in a running job's idle gap (_fill)
        self.cut_short = 0  # newcomers' runs stopped at their first figure, and queued again
        self.worker_idle_mib: float | None = None  # the worker's RSS when it last fell idle
        self._runs_ended = 0
        self._ended: deque[dict] = deque(maxlen=RECENTLY_ENDED)  # status()["recently_ended"]
        self._idle_checked = -1  # runs ended when it was read
        self.disturbed = 0  # results that came back disturbed
        self.remeasured = 0  # of those, measured again
        self.disturbed_final = 0  # of those, final at once: other readers' jobs were waiting
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # ---- public API ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and the dispatcher thread (once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._worker = self._spawn()
            self._thread = threading.Thread(target=self._run, name="engine-service", daemon=True)
            self._thread.start()

    def submit(self, kind: str, params: dict | None = None,
               on_event: Callable[[JobEvent], None] | None = None,
               session_id: str | None = None, use_cache: bool = True,
               demo: str | None = None, replace: bool = False, nearby: bool = False,
               aside: bool = False) -> Job:
        """Queue a job; returns at once. Its events go to on_event on the service's thread.
        With replace, it replaces the session's queued jobs of the same demo (they end
        cancelled, with {"replaced_by": its id}): a slider's newest position wins. With nearby,
        a job that has to wait gets a cached result of nearby params first (a "nearby" event).
        With aside, the job is a lookup beside the page's measurements (the GPU box's machine
        description): its answer does not count as the reader's first number (job_queue rule 0).
        Bad parameters or an unknown kind end the job with an error event, never an exception."""
        job = Job(next(self._ids), kind, dict(params or {}), on_event, session_id, use_cache,
                  demo, nearby=nearby, aside=aside)
        try:
            spec = registry.get_spec(kind)
            job.params = spec.normalize(job.params)
            job.use_cache = use_cache and spec.cacheable
            job.size = spec.size_for(job.params, self._device())
            job.pausable, job.figures = spec.pausable, spec.figures
            job.question = question(kind, job.params) if spec.cacheable else None
        except ValueError as e:
            self._finish(job, "error", {"message": one_line(e)}, deliver_later=True)
            return job
        with self._lock:
            if self._stopping:
                self._finish(job, "error", {"message": "the engine service has shut down"},
                             deliver_later=True)
                return job
            replaced = self._queue.replace(session_id, demo) if replace else []
            run = self._running
            if run is not None and not run.cancelling and JobQueue.shares(run.lead, job):
                run.jobs.append(job)  # asked while it runs: it joins that run
                job.state, job.started_at = "running", time.time()
                self._ready_results.append((job, JobEvent(job.id, kind, "queued", {"ahead": 0})))
                self._ready_results.append((job, JobEvent(job.id, kind, "started", {})))
            else:
                self._queue.add(job)
                ahead = self._queue.position(job, time.time()) + (run is not None)
                # queued before started, whatever the dispatcher does next: both go through it
                self._ready_results.append((job, JobEvent(job.id, kind, "queued",
                                                          {"ahead": ahead})))
        for old in replaced:
            self._finish(old, "cancelled", {"replaced_by": job.id}, deliver_later=True)
        self._wake()
        return job

    def cached(self, kind: str, params: dict | None = None) -> dict | None:
        """The cache's record of this job ({"result", "device", "measured_at", ...}) for the
        worker's device and engine version, or None: not measured yet, not cacheable, bad
        parameters, or the worker not up yet. Runs nothing: a page asks it to tell a result it
        can show at once from one it would have to measure."""
        try:
            spec = registry.get_spec(kind)
            params = spec.normalize(dict(params or {}))
        except ValueError:
            return None
        with self._lock:
            w = self._worker
            identity = w.identity if w is not None else None
        if not spec.cacheable or not identity:
            return None
        return self._cache.get(CacheStore.key(identity["device"], identity["engine_version"],
                                              kind, params))

    def cancel(self, job: Job) -> bool:
        """Cancel a queued or running job; False if it had already finished. A job that shares
        its run with other readers' leaves it (they go on); the last one stops it."""
        with self._lock:
            if job.state in FINAL_STATES:
                return False
            if self._queue.remove(job):
                self._finish(job, "cancelled", {}, deliver_later=True)
                return True
            run = next((r for r in (self._running, self._filling, *self._paused)
                        if r and job in r.jobs), None)
            if run is None:
                return False
            if len(run.jobs) > 1 or run.preempting:  # the others go on, or it stops anyway
                run.jobs.remove(job)
                # a run being stopped that nobody is in any more: no new job joins it (it was
                # joined, and its lead read, with no job left: IndexError in submit, at 50
                # students a three-schedules reader's slider moved as its first run was cut short)
                run.cancelling = run.cancelling or not run.jobs
                self._finish(job, "cancelled", {}, deliver_later=True)
                return True
            if run in self._paused:  # it goes on once it is the innermost and the worker is
                # free, to stop
                run.cancelling = True
                self._wake()
                return True
            if self._worker is not None:
                run.cancelling = True
                self._worker.cancel_id.value = run.id  # the job polls it and stops
                return True
        return False

    def cancel_session(self, session_id: str) -> int:
        """Cancel every queued or running job of a session (a closed browser tab); the count."""
        with self._lock:
            mine = [j for j in (*self._queue,
                                *_jobs_of(self._running, self._filling, *self._paused))
                    if j.session_id == session_id]
            self._queue.forget(session_id)
        return sum(self.cancel(j) for j in mine)

    def status(self) -> dict:
        """What the service is doing now (safe to show any reader: no session ids). "queue"
        lists the waiting jobs in the order they will run (a job sharing an earlier one's run is
        left out)."""
        with self._lock:
            w, run = self._worker, self._running
            identity = (w.identity or {}) if w else {}
            running = None
            if run is not None:
                lead = run.lead
                running = {"id": run.id, "kind": lead.kind, "params": lead.params,
                           "progress": lead.progress, "readers": len(run.jobs),
                           "running_s": round(time.time() - (lead.started_at or time.time()), 2)}
            order = self._queue.order(time.time())
            return {
                "ready": bool(w and w.identity),
                "worker_pid": identity.get("pid"),
                "worker_alive": bool(w and w.process.is_alive()),
                "device": identity.get("device", ""),
                "engine_version": identity.get("engine_version", ""),
                "running": running,
                "paused": ({"id": self._paused[-1].id, "kind": self._paused[-1].lead.kind,
                            "readers": len(self._paused[-1].jobs)} if self._paused else None),
                "paused_runs": len(self._paused),
                "queued": len(self._queue),
                "queue": [{"id": j.id, "kind": j.kind, "size": j.size} for j in order],
                "jobs_done": self.jobs_done,
                "jobs_cancelled": self.jobs_cancelled,
                "recently_ended": list(self._ended),  # oldest first: a job's own outcome
                "cache_hits": self.cache_hits,
                "shared_runs": self.shared_runs,
                "preemptions": self.preemptions,
                "gap_fills": self.gap_fills,
                "cut_short": self.cut_short,
                "cache_entries": len(self._cache),
                "restarts": self.restarts,
                "start_error": self._start_error,
                "cores": identity.get("cores"),
                "threads": identity.get("threads"),
                "disturbed": self.disturbed,
                "remeasured": self.remeasured,
                "disturbed_final": self.disturbed_final,
                "memory": self.memory(identity.get("pid")),
            }

    def memory(self, worker_pid: int | None = None) -> dict:
        """Resident memory in MiB: this (web) process now and at most; the worker now, at most
        (its busiest moment so far) and when it last fell idle."""
        worker = process_memory(worker_pid)
        if worker is not None:
            worker["idle_mib"] = self.worker_idle_mib
        return {"web": process_memory(os.getpid()), "worker": worker}

    def _device(self) -> str:
        """The worker's device once it has said hello ("" before)."""
        w = self._worker
        return ((w.identity or {}).get("device", "") if w else "")

    def position(self, job: Job) -> int | None:
        """How many runs come before this queued job's (the running one included); None if it is
        not queued."""
        with self._lock:
            ahead = self._queue.position(job, time.time())
            return None if ahead is None else ahead + (self._running is not None)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel what is queued, stop the worker and the dispatcher thread."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            pending = list(self._queue)
            self._queue = JobQueue()
            run, self._running = self._running, None
            filling, self._filling = self._filling, None
            paused, self._paused = self._paused, []
            if run is not None and self._worker is not None:
                self._worker.cancel_id.value = run.id
        for job in pending:
            self._finish(job, "cancelled", {})
        for job in _jobs_of(run, filling, *paused):
            self._finish(job, "error", {"message": "the engine service has shut down"})
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        w = self._worker
        if w is not None:
            try:
                w.jobs.send(("stop",))
            except (OSError, ValueError):
                pass
            w.process.join(timeout)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout)

    # ---- the worker's lifecycle ----------------------------------------------------------------
    def _spawn(self) -> _Worker:
        job_r, job_w = self._ctx.Pipe(duplex=False)
        event_r, event_w = self._ctx.Pipe(duplex=False)
        cancel_id = self._ctx.RawValue("q", 0)  # no lock: a killed worker cannot leave it held
        pause_id = self._ctx.RawValue("q", 0)
        fill_id = self._ctx.RawValue("q", 0)
        process = self._ctx.Process(
            target=_worker_process, name="engine-worker", daemon=True,
            args=(job_r, event_w, cancel_id, self.core_setting, self._available, pause_id,
                  fill_id))
        # spawn re-runs the parent's main script in the child (`panel serve`'s, pytest's, a
        # user's script without a __main__ guard); the worker needs none of it, so it is hidden
        # for the instant the child's start-up data is written.
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            process.start()
        finally:
            sys.modules["__main__"] = main
        job_r.close()  # the worker holds these ends; closing ours lets EOF mean "it died"
        event_w.close()
        return _Worker(process, job_w, event_r, cancel_id, pause_id, fill_id)

    def _worker_died(self, w: _Worker) -> None:
        """Tell the job that was running, start a fresh worker; queued jobs go on there."""
        w.process.join(1.0)
        code = w.process.exitcode
        w.jobs.close()
        w.events.close()
        with self._lock:
            run, self._running = self._running, None
            filling, self._filling = self._filling, None
            paused, self._paused = self._paused, []
            if self._stopping:
                return
            if w.identity is None:  # it never came up: do not spin; fail what waits
                self._start_error = self._start_error or f"engine worker exited with code {code}"
                failed, self._queue = list(self._queue), JobQueue()
                self._worker = None
            else:
                failed = []
                self.restarts += 1
                self._worker = self._spawn()
        for job in _jobs_of(run, filling, *paused):
            self._finish(job, "error", {"message": (
                f"the engine worker stopped unexpectedly (exit code {code}) while running this "
                "job; it has been restarted, try again")}, deliver_later=True)
        for job in failed:
            self._finish(job, "error", {"message": f"the engine could not start: "
                                                   f"{self._start_error}"}, deliver_later=True)
        log.warning("engine worker %s exited with code %s", w.process.pid, code)

    # ---- the dispatcher thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    trace.flush()
                    return
                w = self._worker
            waitables = [self._wake_r] + ([w.events, w.process.sentinel] if w else [])
            ready = wait(waitables, timeout=1.0)
            if self._wake_r in ready:
                with self._wake_lock:
                    self._woken = False
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
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
                                       else None, queued=len(self._queue))
                        self._handle(w, message)
                        trace.mark("handled")
                elif w.process.sentinel in ready:
                    self._drain(w)
                    self._worker_died(w)
            self._pump()
            trace.flush(due=True)

    def _drain(self, w: _Worker) -> None:
        """Handle what a worker sent before it exited."""
        try:
            while w.events.poll():
                self._handle(w, w.events.recv())
        except (EOFError, OSError, ValueError, TypeError, AttributeError):
            pass

    def _handle(self, w: _Worker, message: tuple) -> None:
        tag = message[0]
        if tag == "hello":
            with self._lock:
                w.identity = message[1]
                self._start_error = None
            self._keep_off_engine_cores(message[1].get("cores"))
            return
        if tag == "fatal":
            self._start_error = message[1]
            return
        job_id = message[1]
        if tag == "paused":
            self._was_paused(w, job_id)
            return
        if tag == "gap":
            self._fill(w, job_id)
            return
        with self._lock:
            run = next((r for r in (self._running, self._filling) if r and r.id == job_id),
                       None)
            if run is None:
                return  # an event of a run already given up (cancelled, or its worker replaced)
            jobs = list(run.jobs)
            final = tag == "result" or message[2] in FINAL_EVENTS
            requeue = run.preempting and tag != "result" and message[2] == "cancelled"
            if final and run is self._filling:
                self._filling = None
                if self._running is not None:  # the gap it was lent is not the run's turn
                    self._running.started_at += time.time() - run.started_at
            elif final:
                self._running = None
            if final:
                self._runs_ended += 1
                self.jobs_done += tag == "result"  # measured; cache answers count as hits
                self.shared_runs += tag == "result" and len(jobs) > 1
        if tag == "result":
            result, measured_at = message[2], message[3]
            device = measured_on(run.lead.params) or w.identity["device"]
            try:
                parse_result(run.lead.kind, result)  # pages read records: check it once, here
            except ResultError as e:
                log.error("job %s (%s) returned a malformed result: %s", run.id, run.lead.kind, e)
                for job in jobs:
                    self._finish(job, "error", {"message": f"the engine's result was malformed: "
                                                           f"{one_line(e)}"}, deliver_later=True)
                return
            ran_s = time.time() - (run.lead.started_at or time.time())
            waited_s = (run.lead.started_at or run.lead.submitted_at) - run.lead.submitted_at
            if disturbed(result):
                self.disturbed += 1
                with self._lock:
                    waiting = self._queue.others_waiting(j.session_id for j in jobs)
                log.info("job %s (%s %s, %d readers) waited %.1f s, ran %.1f s: disturbed (%s); "
                         "%s", run.id, run.lead.kind, run.lead.size, len(jobs), waited_s, ran_s,
                         "; ".join(
                             result["check"].get("reasons") or ["?"]),
                         f"not measured again: {waiting} jobs of others wait" if waiting else
                         "measured again" if run.lead.remeasures < self.remeasures else "final")
                if (registry.get_spec(run.lead.kind).cacheable and not waiting
                        and run.lead.remeasures < self.remeasures):
                    self._remeasure(jobs, result, device=device, measured_at=measured_at)
                    return
                self.disturbed_final += bool(waiting)
            else:
                log.info("job %s (%s %s, %d readers) waited %.1f s, ran %.1f s", run.id,
                         run.lead.kind, run.lead.size, len(jobs), waited_s, ran_s)
                if any(job.use_cache for job in jobs):
                    result = SharedResult(result)  # a hit while a page holds it: this object
                    self._cache.put(self._key(run.lead, w), result, measured_at)
                    self._cache_generation += 1
            for job in jobs:
                self._finish(job, "result", result, deliver_later=True, device=device,
                             measured_at=measured_at, readers=len(jobs))
            return
        if requeue:
            self._requeue(run)
            return
        if run.giving_way and final and message[2] == "cancelled":
            with self._lock:
                self.disturbed_final += 1
            for job in jobs:  # the disturbed result they were shown, now final
                self._finish(job, "result", job.result, deliver_later=True, device=job.device,
                             measured_at=job.measured_at, readers=len(jobs))
            return
        type_, data = message[2], message[3]
        if type_ == "progress" and (data.get("so_far") or {}).get("e2e_p50_ms") is not None:
            with self._lock:  # a run's first partial figure is on its readers' pages
                # (widgets.job_status.so_far_text: none before the first request is answered)
                firsts = any(not job.aside and self._queue.newcomer(job.session_id)
                             for job in jobs)
                for job in jobs:
                    self._answered(job, "first figure")
                if (firsts or run.figure_only) and not run.figured:  # not for a newcomer who
                    self._cut_short(w, run)  # joined it late: what it has done would be lost
                run.figured = True
        if type_ == "progress" and "building" in data:
            with self._lock:
                run.building = bool(data["building"])
                if run.building and run is self._filling and not run.preempting:
                    run.preempting = True  # a gap is no place for a model's build: stopped at
                    w.cancel_id.value = -run.id  # its next step, kept, queued again
                if not run.building and run.preempting:  # built before it could be stopped
                    run.preempting = False
                    if w.cancel_id.value == -run.id:
                        w.cancel_id.value = 0
        for job in jobs:
            if type_ == "progress":
                job.progress = data
            if final:
                self._finish(job, type_, data, deliver_later=True)
            else:
                self._emit(job, type_, data)

    def _remeasure(self, jobs: list[Job], result: dict, **meta) -> None:
        """A disturbed result of a run: deliver it to each job the run answered (labelled, not
        final) and queue them again (their arrival time kept); the worker waits for a quiet
        machine before it runs them."""
        with self._lock:
            self.remeasured += 1
            for job in jobs:
                self._answered(job, "disturbed result")  # it has a number, labelled
                job.remeasures += 1
                job.result, job.state, job.started_at = result, "queued", None
                job.device, job.measured_at = meta["device"], meta["measured_at"]
                self._queue.add(job)
            for job in jobs:
                ahead = self._queue.position(job, time.time()) or 0
                self._ready_results.append((job, JobEvent(
                    job.id, job.kind, "result", result, remeasuring=True, readers=len(jobs),
                    **meta)))
                self._ready_results.append((job, JobEvent(
                    job.id, job.kind, "queued", {"ahead": ahead, "remeasure": job.remeasures})))
        self._wake()

    def _keep_off_engine_cores(self, split: dict | None) -> None:
        """Once the worker has said which cores are the engine's: pin this process to the
        others (pin_self, a server's), or at least this dispatcher thread (we are on it), which
        receives every event while a job measures."""
        if not (split and split.get("isolated")):
            return
        try:
            if self.pin_self:
                cores.pin(0, split["web"])
            else:
                os.sched_setaffinity(0, split["web"])  # this thread only
        except OSError as e:
            log.warning("could not pin the web side to cores %s: %s", split["web"], e)

    def _key(self, job: Job, w: _Worker) -> dict:
        return CacheStore.key(w.identity["device"], w.identity["engine_version"], job.kind,
                              job.params)

    def _pump(self) -> None:
        """Answer cached jobs from the cache; send the oldest other one to an idle worker.
        Every event made here goes through the ready queue, behind the "queued" events that
        submit() put there, so each job's events arrive in order."""
        with self._lock:
            w = self._worker
            if w is None:
                if self._queue and not self._stopping:  # the last start failed: try again
                    self._worker = self._spawn()
            elif w.identity:  # up: the cache key needs its device
                for job in self._queue:
                    if not job.use_cache or job._cache_checked == self._cache_generation:
                        continue  # looked up already, and nothing new was stored since
                    job._cache_checked = self._cache_generation
                    record = self._cache.get(self._key(job, w))
                    if record is not None:
                        self._queue.remove(job)
                        self.cache_hits += 1
                        self._finish(job, "result", record["result"], deliver_later=True,
                                     cached=True, device=record["device"],
                                     measured_at=record["measured_at"])
                    elif job.nearby:
                        job.nearby = False  # offered once
                        self._offer_nearby(job, w)
                if (self._running is None and not self._paused and not self._queue
                        and w.identity.get("pid")):
                    if self._idle_checked != self._runs_ended:
                        self._idle_checked = self._runs_ended
                        worker = process_memory(w.identity["pid"])
                        self.worker_idle_mib = worker and worker["rss_mib"]
                self._maybe_give_way(w)
                self._maybe_preempt(w)
                if self._running is None and self._paused:
                    self._maybe_resume(w)
                jobs = [] if self._running is not None else self._queue.take(
                    time.time(), *self._may_start())
                if jobs:
                    run = self._running = _Run(jobs[0].id, jobs)
                    run.figure_only = (len(self._paused) >= MAX_PAUSED and run.lead.figures
                                       and self._queue.newcomer(run.lead.session_id))
                    for job in jobs:
                        job.state, job.started_at = "running", time.time()
                        self._ready_results.append((job, JobEvent(job.id, job.kind, "started",
                                                                  {})))
                    w.cancel_id.value = w.pause_id.value = 0
                    options = {"quiet_first": QUIET_WAIT_S} if run.lead.remeasures else {}
                    if trace.on:
                        trace.mark("send", run.id, kind=run.lead.kind, queued=len(self._queue))
                    try:
                        w.jobs.send(("run", run.id, run.lead.kind, run.lead.params, options))
                    except (OSError, ValueError):
                        pass  # it died: the sentinel tells us next
                self._offer_gaps(w)
        self._deliver_ready()
        trace.mark("delivered")

    def _offer_gaps(self, w: _Worker) -> None:
        """Tell the worker whether the running job's idle gaps may run a waiting point
        (fill_id; engine.lab.worker.fill_gap): one at a time, while another point waits."""
        run = self._running
        lend = (self.lend_gaps and run is not None and self._filling is None
                and not run.cancelling and self._queue.waiting(GAP_SIZES, newcomers=False) > 0)
        want = run.id if lend else 0
        if w.fill_id.value != want:
            w.fill_id.value = want

    def _fill(self, w: _Worker, job_id: int) -> None:
        """The running job's serving loop has an idle gap (nothing to do until its next arrival)
        and asks for a point to run there: send the one the queue picks, or "nofill". The run
        loses nothing it measures (its clock stops for what the point takes past the gap,
        engine.serve.loop), and in a class the engine's core does what it would have slept
        through: at 30 students load tests and serve runs computed 12 of their 40 s
        (bench/engine_gaps.py on bench/classroom.py, main 8b9077e)."""
        with self._lock:
            run, jobs = self._running, []
            if (run is not None and run.id == job_id and self._filling is None
                    and not run.cancelling and not self._stopping):
                jobs = self._queue.take(time.time(), GAP_SIZES, False)
            if jobs:
                fill = self._filling = _Run(jobs[0].id, jobs)
                self.gap_fills += 1
                for job in jobs:
                    job.state, job.started_at = "running", time.time()
                    self._ready_results.append((job, JobEvent(job.id, job.kind, "started",
                                                              {})))
                # never a quiet wait, even for a re-measure: the run whose gap it is would
                # wait through it (up to QUIET_WAIT_S) past its next arrival
                message = ("run", fill.id, fill.lead.kind, fill.lead.params, {})
                if trace.on:
                    trace.mark("send", fill.id, kind=fill.lead.kind, queued=len(self._queue),
                               gap=True)
            else:
                message = ("nofill", job_id)  # it waits for an answer: always one
            w.fill_id.value = 0  # until this one has ended
        try:
            w.jobs.send(message)
        except (OSError, ValueError):
            pass  # it died: the sentinel tells us next

    def _maybe_give_way(self, w: _Worker) -> None:
        """Stop a re-measure (waiting for quiet, or measuring) as soon as another reader's job
        waits: its readers already have the disturbed result, labelled, which then stands as
        final (_handle). A re-measure starts only when nobody else waits (_handle), but it
        waits up to QUIET_WAIT_S for quiet first, and readers arriving meanwhile waited behind
        it: a knob point's re-measure held 8 newcomers' points for 5.6 s (a class of 30)."""
        run = self._running
        if (run is None or run.cancelling or run.giving_way or run.preempting or run.pausing
                or run.lead.remeasures == 0 or run.lead.result is None
                or not self._queue.others_waiting(j.session_id for j in run.jobs)):
            return
        run.giving_way = True
        w.cancel_id.value = run.id  # the quiet wait and the job poll it
        log.info("stopping the re-measure of %s (job %s) to let %d waiting jobs through; its "
                 "disturbed result stands", run.lead.kind, run.id, len(self._queue))

    def _maybe_preempt(self, w: _Worker) -> None:
        """Let other readers' shorter jobs that have waited preempt_after_s go before a run that
        may wait, once it has had a turn of turn_s since it started or went on: a run building
        its engine is stopped between two steps of the build (for points and runs); a pausable
        run bigger than a point (a load test, a schedule run, a rate sweep, a small preset's
        point on a CPU) is paused between two steps, for jobs of a smaller size (_smaller).
        Either goes on later where it stopped (the worker keeps it), so each turn adds to it
        and it always ends. A run inside another's pause is paused in turn only for points (up
        to MAX_PAUSED deep: each holds an engine, and one more for points alone). A newcomer's
        first job counts as any size (job_queue), except for that last place (_may_start)."""
        run, now = self._running, time.time()
        if run is None or run.cancelling or run.preempting or run.pausing:
            return
        if run.building:
            sizes = PAUSED_RUNS_TAKE
        elif run.figure_only:
            return  # it stops at its first figure (_cut_short), a second or so in
        elif (len(self._paused) <= MAX_PAUSED and run.lead.size != "point"
              and all(j.pausable for j in run.jobs)):
            sizes = ("point",) if self._paused else _smaller(run)
        else:
            return
        # the place past MAX_PAUSED is for points: a run paused into it is paused for them alone
        # (not for a newcomer's long first job), so what runs there is a point, never a run
        # that nothing could pause
        newcomers = run.building or len(self._paused) < MAX_PAUSED
        if (now - run.started_at < self.turn_s
                or self._queue.longest_wait(now, sizes=sizes, newcomers=newcomers,
                                            besides=(j.session_id for j in run.jobs))
                < self.preempt_after_s):
            return  # (a reader's own jobs wait behind theirs in any case)
        if run.building:
            run.preempting = True
            w.cancel_id.value = -run.id  # stops the build only, never the job's own work
        else:
            run.pausing = True
            w.pause_id.value = run.id
        log.info("pausing %s%s (job %s; %d paused) to let %d waiting jobs through",
                 run.lead.kind, "'s engine build" if run.building else "", run.id,
                 len(self._paused) + (not run.building), len(self._queue))

    def _may_start(self) -> tuple[tuple[str, ...], Newcomers]:
        """The sizes of the jobs the free worker may start now, and which newcomers' first
        jobs of any size may (job_queue.take): any with nothing paused; those smaller than the
        innermost paused run (and newcomers' firsts) inside its pause; with more than
        MAX_PAUSED runs paused, the place kept for points: points, and newcomers' first jobs
        that show a partial figure soon (a schedule run, a load test, a rate sweep), each
        stopped at that figure (figure_only, _cut_short), so nothing there outlasts a point's
        wait. (Before the place was kept, what started inside the MAX_PAUSED-th pause could not
        be paused, and a point arriving behind it waited for all of it: bench/classroom.py at
        30 students, a rate sweep ran 32 s there with 45 jobs waiting. Before newcomers' runs
        could start there, five newcomers' first runs waited 13-21 s for the innermost run, a
        load test, to end: first number p95 19.8 s, same bench, main 246338e.) The rest wait
        for the innermost run to end."""
        if not self._paused:
            return SIZES, True
        if len(self._paused) > MAX_PAUSED:
            return ("point",), _figures_soon
        return _smaller(self._paused[-1]), True

    def _was_paused(self, w: _Worker, job_id: int) -> None:
        """The worker has paused the running job (a pausable run, between two steps) and waits
        for other jobs: tell its readers, and send the next one."""
        with self._lock:
            run = self._running
            if run is None or run.id != job_id:  # not ours (cannot happen): let it end
                w.cancel_id.value = job_id
                w.jobs.send(("resume", job_id))
                return
            run.pausing, run.paused_at = False, time.time()
            self._paused.append(run)
            self._running = None
            self.preemptions += 1
            ahead = self._queue.waiting(_smaller(run))
            for job in run.jobs:
                job.paused += 1
                self._ready_results.append((job, JobEvent(
                    job.id, job.kind, "queued", {"ahead": ahead, "preempted": True,
                                                 "resumes": True})))
        self._wake()

    def _maybe_resume(self, w: _Worker) -> None:
        """The worker is free and runs are paused: let the innermost go on (the worker is
        inside its pause) when no job it gives way to waits; once it has been paused
        max_pause_s, when no other reader's point or newcomer's first job waits (the runs and
        load tests queued inside its pause wait behind it now); once hard_pause_s, whatever
        waits (it always ends); or to stop (cancelled meanwhile). A turn given while points
        wait costs each of them the turn (TURN_S) and more: points are drawn within seconds,
        the paused run's reader has its first figure already."""
        run, now = self._paused[-1], time.time()
        sizes, newcomers = self._may_start()
        paused_s = now - run.paused_at
        if run.cancelling or not self._queue.waiting(sizes, newcomers):
            why = ""
        elif paused_s >= self.hard_pause_s:
            why = "paused longest"
        elif paused_s >= self.max_pause_s and not self._queue.waiting(
                ("point",), newcomers, besides=(j.session_id for j in run.jobs)):
            why = "no point waits"
        else:
            return
        if why:
            log.info("%s (job %s) goes on after %.1f s paused (%s; %d jobs wait)",
                     run.lead.kind, run.id, paused_s, why, len(self._queue))
        self._paused.pop()
        self._running = run
        run.started_at = now
        w.pause_id.value = 0
        w.cancel_id.value = run.id if run.cancelling else 0
        for job in run.jobs:
            self._ready_results.append((job, JobEvent(job.id, job.kind, "started", {})))
        try:
            w.jobs.send(("resume", run.id))
        except (OSError, ValueError):
            pass  # it died: the sentinel tells us next

    def _requeue(self, run: _Run) -> None:
        """A run stopped while it built its engine, or cut short at a newcomer's first figure
        (_cut_short): its jobs wait again (their arrival time kept: they soon count as points,
        or as aged runs), each told so with a queued event ("resumes": the build goes on where
        it stopped; without it, the job's own work starts over, and a page that drew its first
        part keeps that until the result: lessons.job_runner)."""
        with self._lock:
            for job in run.jobs:
                if run.building:
                    job.paused += 1
                else:
                    job.preempted += 1
                job.state, job.started_at, job.progress = "queued", None, None
                self._queue.add(job)
            for job in run.jobs:
                self.preemptions += 1
                ahead = self._queue.position(job, time.time()) or 0
                self._ready_results.append((job, JobEvent(
                    job.id, job.kind, "queued",
                    {"ahead": ahead, "preempted": True, "resumes": run.building})))
        self._wake()

    def _cut_short(self, w: _Worker, run: _Run) -> None:
        """A newcomer's run has just put its first figure on the page (a "so_far" progress
        event): that figure is what their first job was urgent for. If other readers' points or
        newcomers' first jobs wait, the run is stopped now, between two steps, and queued again
        whole (_requeue, its arrival time kept) to wait by the size rule like any run of a
        reader with a number. Paused instead, it would hold a place on the pause stack: at 30
        students the first readers' schedule runs, load tests and a rate sweep filled it, and
        later newcomers' first runs waited 45-53 s for the innermost to end (bench/classroom.py,
        main 4ee85ab). The cost: the run's start (its engine is kept, so a second or two) is
        served again in the full run. A run started with the pause stack (nearly) full
        (figure_only: nothing may pause it) stops at its first figure whoever waits."""
        if run.cancelling or run.preempting or run.pausing or run.building:
            return  # stopping, or being paused already (which loses nothing)
        waiting = self._queue.urgent(j.session_id for j in run.jobs)
        if not waiting and not run.figure_only:
            return  # nobody waits: it runs on
        run.preempting = True
        w.cancel_id.value = run.id  # the job stops at its next check and says "cancelled"
        self.cut_short += 1
        lead, now = run.lead, time.time()
        why = (f"let {waiting} waiting points and first jobs through" if waiting else
               "keep the pause stack's last place for points")
        log.info("cutting %s (job %s) short at its first figure (waited %.1f s, ran %.1f s) to "
                 "%s; queued again in full", lead.kind, run.id,
                 (lead.started_at or now) - lead.submitted_at, now - (lead.started_at or now), why)

    def _answered(self, job: Job, how: str) -> None:
        """The job's reader has a number on the page now, unless it was a lookup aside. The
        log says when a newcomer's first number came, `how` and how long after the job was
        asked: the engine's part of a new reader's wait (bench/classroom.py measures the
        whole, page included)."""
        if job.aside:
            return
        if self._queue.newcomer(job.session_id):
            log.info("first number for a reader: job %s (%s, %s) %.1f s after it was asked",
                     job.id, job.kind, how, time.time() - job.submitted_at)
        self._queue.answered(job.session_id)

    def _offer_nearby(self, job: Job, w: _Worker) -> None:
        """Queue a "nearby" event for a job that waits: the closest cached result, if any."""
        record = self._cache.nearest(self._key(job, w))
        if record is not None:
            self._answered(job, "nearby")  # a number is on the page, labelled nearby
            self._ready_results.append((job, JobEvent(
                job.id, job.kind, "nearby", record["result"], cached=True,
                device=record["device"], measured_at=record["measured_at"],
                near=record["key"]["params"])))

    def _deliver_ready(self) -> None:
        while True:
            with self._lock:
                if not self._ready_results:
                    return
                job, event = self._ready_results.popleft()
            self._deliver(job, event)
            if event.final:
                job._done.set()

    # ---- events ------------------------------------------------------------------------------------
    def _emit(self, job: Job, type_: str, data: dict) -> None:
        """A worker's event, delivered after what waits for the job already (a job that joined a
        run has its "queued" and "started" there)."""
        with self._lock:
            self._ready_results.append((job, JobEvent(job.id, job.kind, type_, data)))

    def _finish(self, job: Job, type_: str, data: dict, deliver_later: bool = False,
                **meta) -> None:
        """Record a job's end and send its final event."""
        with self._lock:
            if job.state in FINAL_STATES:
                return
            job.state = {"result": "done"}.get(type_, type_)
            self._ended.append({"id": job.id, "kind": job.kind, "state": job.state,
                                "cached": bool(meta.get("cached"))})
            if type_ == "cancelled":
                self.jobs_cancelled += 1
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
        if deliver_later:  # from a caller's thread: the dispatcher delivers it, then sets done
            with self._lock:
                self._ready_results.append((job, event))
            self._wake()
        else:
            self._deliver(job, event)
            job._done.set()

    def _deliver(self, job: Job, event: JobEvent) -> None:
        if job.on_event is None:
            return
        try:
            job.on_event(event)
        except Exception:  # a page's bug must not stop the service
            log.exception("on_event of job %s (%s) failed", job.id, job.kind)

    def _wake(self) -> None:
        """Make the dispatcher look again (one byte at most in flight, so writers never block)."""
        with self._wake_lock:
            if self._woken:
                return
            self._woken = True
        try:
            self._wake_w.send_bytes(b"!")
        except (OSError, ValueError):
            pass


def _smaller(run: _Run) -> tuple[str, ...]:
    """The sizes of the jobs a paused run gives way to (engine.lab.job_queue.SIZES): those
    smaller than its own, so a schedule run is never swapped for another (a newcomer's first
    job counts as any size)."""
    size = run.lead.size
    return SIZES[:SIZES.index(size)] if size in SIZES else PAUSED_RUNS_TAKE


def _figures_soon(job: Job) -> bool:
    """True for a job that shows a partial figure soon after it starts (registry: `figures`):
    the newcomers' first jobs that may start with the pause stack full (_may_start)."""
    return job.figures


def _jobs_of(*runs: _Run | None) -> list[Job]:
    """Every job these runs answer (the running one and the paused ones; None for none)."""
    return [job for run in runs if run is not None for job in run.jobs]


# ---- one service per server process -----------------------------------------------------------
_service: EngineService | None = None
_service_lock = threading.Lock()


def get_service() -> EngineService:
    """The process's engine service, started on first use and stopped at exit. It pins this
    process (the web server) to the cores the engine leaves it."""
    global _service
    with _service_lock:
        if _service is None or _service._stopping:
            _service = EngineService(pin_self=True)
            atexit.register(_service.shutdown)
        return _service

