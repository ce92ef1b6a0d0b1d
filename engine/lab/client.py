"""The engine service's client: the web process holds one; one worker process per server runs
engine jobs, one at a time, in order of arrival.

Why a process: the worker owns the device, so the web server's Python work (serializing page
updates for a classroom of browsers) never holds the interpreter lock while a measured step runs,
and an engine crash does not take the pages down: the service restarts the worker and tells the
job that was waiting. The web process never imports torch; only the worker (engine.lab.worker)
does.

Flow: `submit` checks the kind and fills in its defaults (engine.lab.registry) and queues a Job;
a dispatcher thread sends the oldest queued job to the worker when it is idle, receives the
worker's events (progress, token, step, result, error, cancelled) and calls the job's `on_event`
with a JobEvent (engine.lab.events; on the dispatcher thread: a page moves events onto its own
event loop itself). Results are cached (engine.lab.cache) keyed by the worker's device, the job
kind, its parameters with defaults filled in, and the engine version; a job whose result is cached
is answered at once, without waiting in the queue, and its result event says `cached=True` with
the device and time it was measured. Torch-free.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing as mp
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

from ..paths import cache_dir
from . import registry
from .cache import CacheStore
from .events import FINAL_EVENTS, FINAL_STATES, Job, JobEvent, one_line

log = logging.getLogger(__name__)


def _worker_process(job_conn, event_conn, cancel_id) -> None:
    """The spawned child's entry: the worker's code is imported there, never in the web process."""
    from .worker import main

    main(job_conn, event_conn, cancel_id)


@dataclass
class _Worker:
    """One incarnation of the worker process and its pipes (fresh ones after a restart: a process
    killed mid-write can leave a pipe holding half a message)."""

    process: Any
    jobs: Any  # our end of the job pipe (we send)
    events: Any  # our end of the event pipe (we receive)
    cancel_id: Any  # shared int: the id of the running job to cancel
    identity: dict | None = None  # the hello: device, engine_version, pid
    started_at: float = field(default_factory=time.time)


class EngineService:
    """The thin client of the engine worker; see the module docstring. Thread-safe."""

    def __init__(self, cache_path: Path | None = None, start: bool = True):
        self._ctx = mp.get_context("spawn")
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._pending: deque[Job] = deque()
        self._current: Job | None = None
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
               session_id: str | None = None, use_cache: bool = True) -> Job:
        """Queue a job; returns at once. Its events go to on_event on the service's thread.
        Bad parameters or an unknown kind end the job with an error event, never an exception."""
        job = Job(next(self._ids), kind, dict(params or {}), on_event, session_id, use_cache)
        try:
            spec = registry.get_spec(kind)
            job.params = spec.normalize(job.params)
            job.use_cache = use_cache and spec.cacheable
        except ValueError as e:
            self._finish(job, "error", {"message": one_line(e)}, deliver_later=True)
            return job
        with self._lock:
            if self._stopping:
                self._finish(job, "error", {"message": "the engine service has shut down"},
                             deliver_later=True)
                return job
            ahead = len(self._pending) + (self._current is not None)
            self._pending.append(job)
            # queued before started, whatever the dispatcher does next: both go through it
            self._ready_results.append((job, JobEvent(job.id, kind, "queued", {"ahead": ahead})))
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
        """Cancel a queued or running job; False if it had already finished."""
        with self._lock:
            if job.state in FINAL_STATES:
                return False
            if job in self._pending:
                self._pending.remove(job)
                self._finish(job, "cancelled", {}, deliver_later=True)
                return True
            if job is self._current and self._worker is not None:
                self._worker.cancel_id.value = job.id  # the job polls it and stops
                return True
        return False

    def cancel_session(self, session_id: str) -> int:
        """Cancel every queued or running job of a session (a closed browser tab); the count."""
        with self._lock:
            mine = [j for j in self._pending if j.session_id == session_id]
            if self._current is not None and self._current.session_id == session_id:
                mine.append(self._current)
        return sum(self.cancel(j) for j in mine)

    def status(self) -> dict:
        """What the service is doing now (safe to show any reader: no session ids)."""
        with self._lock:
            w, cur = self._worker, self._current
            identity = (w.identity or {}) if w else {}
            running = None
            if cur is not None:
                running = {"id": cur.id, "kind": cur.kind, "params": cur.params,
                           "progress": cur.progress,
                           "running_s": round(time.time() - (cur.started_at or time.time()), 2)}
            return {
                "ready": bool(w and w.identity),
                "worker_pid": identity.get("pid"),
                "worker_alive": bool(w and w.process.is_alive()),
                "device": identity.get("device", ""),
                "engine_version": identity.get("engine_version", ""),
                "running": running,
                "queued": len(self._pending),
                "queue": [{"id": j.id, "kind": j.kind} for j in self._pending],
                "jobs_done": self.jobs_done,
                "jobs_cancelled": self.jobs_cancelled,
                "cache_hits": self.cache_hits,
                "cache_entries": len(self._cache),
                "restarts": self.restarts,
                "start_error": self._start_error,
            }

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel what is queued, stop the worker and the dispatcher thread."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            pending = list(self._pending)
            self._pending.clear()
            current = self._current
            if current is not None and self._worker is not None:
                self._worker.cancel_id.value = current.id
        for job in pending:
            self._finish(job, "cancelled", {})
        if current is not None:
            self._finish(current, "error", {"message": "the engine service has shut down"})
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
        process = self._ctx.Process(target=_worker_process, args=(job_r, event_w, cancel_id),
                                    name="engine-worker", daemon=True)
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
        return _Worker(process, job_w, event_r, cancel_id)

    def _worker_died(self, w: _Worker) -> None:
        """Tell the job that was running, start a fresh worker; queued jobs go on there."""
        w.process.join(1.0)
        code = w.process.exitcode
        w.jobs.close()
        w.events.close()
        with self._lock:
            current, self._current = self._current, None
            if self._stopping:
                return
            if w.identity is None:  # it never came up: do not spin; fail what waits
                self._start_error = self._start_error or f"engine worker exited with code {code}"
                failed, self._pending = list(self._pending), deque()
                self._worker = None
            else:
                failed = []
                self.restarts += 1
                self._worker = self._spawn()
        if current is not None:
            self._finish(current, "error", {"message": (
                f"the engine worker stopped unexpectedly (exit code {code}) while running this "
                "job; it has been restarted, try again")})
        for job in failed:
            self._finish(job, "error", {"message": f"the engine could not start: "
                                                   f"{self._start_error}"})
        log.warning("engine worker %s exited with code %s", w.process.pid, code)

    # ---- the dispatcher thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
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
                        self._handle(w, message)
                elif w.process.sentinel in ready:
                    self._drain(w)
                    self._worker_died(w)
            self._pump()

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
            return
        if tag == "fatal":
            self._start_error = message[1]
            return
        job_id = message[1]
        with self._lock:
            job = self._current if self._current and self._current.id == job_id else None
        if job is None:
            return  # an event of a job already given up (cancelled, or its worker replaced)
        if tag == "result":
            result, measured_at = message[2], message[3]
            device = w.identity["device"]
            if job.use_cache:
                self._cache.put(self._key(job, w), result, measured_at)
                self._cache_generation += 1
            self._finish(job, "result", result, device=device, measured_at=measured_at)
        else:
            type_, data = message[2], message[3]
            if type_ == "progress":
                job.progress = data
            if type_ in FINAL_EVENTS:
                self._finish(job, type_, data)
            else:
                self._emit(job, type_, data)

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
                if self._pending and not self._stopping:  # the last start failed: try again
                    self._worker = self._spawn()
            elif w.identity:  # up: the cache key needs its device
                for job in list(self._pending):
                    if not job.use_cache or job._cache_checked == self._cache_generation:
                        continue  # looked up already, and nothing new was stored since
                    job._cache_checked = self._cache_generation
                    record = self._cache.get(self._key(job, w))
                    if record is not None:
                        self._pending.remove(job)
                        self.cache_hits += 1
                        self._finish(job, "result", record["result"], deliver_later=True,
                                     cached=True, device=record["device"],
                                     measured_at=record["measured_at"])
                if self._current is None and self._pending:
                    job = self._pending.popleft()
                    self._current = job
                    job.state, job.started_at = "running", time.time()
                    w.cancel_id.value = 0
                    try:
                        w.jobs.send(("run", job.id, job.kind, job.params))
                    except (OSError, ValueError):
                        pass  # it died: the sentinel tells us next
                    self._ready_results.append((job, JobEvent(job.id, job.kind, "started", {})))
        self._deliver_ready()

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
        self._deliver(job, JobEvent(job.id, job.kind, type_, data))

    def _finish(self, job: Job, type_: str, data: dict, deliver_later: bool = False,
                **meta) -> None:
        """Record a job's end and send its final event."""
        with self._lock:
            if job.state in FINAL_STATES:
                return
            if job is self._current:
                self._current = None
                self.jobs_done += type_ == "result"  # measured; cache answers count as hits
            job.state = {"result": "done"}.get(type_, type_)
            if type_ == "cancelled":
                self.jobs_cancelled += 1
            if type_ == "result":
                job.result = data
                job.cached = meta.get("cached", False)
                job.device = meta.get("device", "")
                job.measured_at = meta.get("measured_at", "")
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


# ---- one service per server process -----------------------------------------------------------
_service: EngineService | None = None
_service_lock = threading.Lock()


def get_service() -> EngineService:
    """The process's engine service, started on first use and stopped at exit."""
    global _service
    with _service_lock:
        if _service is None or _service._stopping:
            _service = EngineService()
            atexit.register(_service.shutdown)
        return _service

