"""The engine service: what the web process's pages call (EngineService), and the one service a
server process holds (get_service). One worker process per service runs engine jobs, one at a
time, in the order the classroom's queue and policy decide. Torch-free: only the worker imports
torch.

Why a process: the worker owns the device, so the web server's Python work (serializing page
updates for a classroom of browsers) never holds the interpreter lock while a measured step runs,
and an engine crash does not take the pages down: the service restarts the worker and tells the
job that was waiting.

The service is three parts, each with one job:
- this facade (EngineService): checks a job's kind and fills in its defaults
  (engine.lab.registry), and answers what pages ask: submit, cached, cancel, cancel_session,
  position, status;
- the dispatcher (engine.lab.dispatcher): the queue and the runs; a thread that asks the policy
  (engine.lab.policy, engine.lab.job_queue) what to do, tells the worker, and delivers the
  worker's events (progress, token, step, result, error, cancelled) to each job's `on_event` as
  JobEvents (engine.lab.events), on its own thread (a page moves events onto its own event loop
  itself);
- the supervisor (engine.lab.supervisor): spawns the worker, pins it and the web side to their
  cores (engine.lab.cores), restarts it when it dies.

Jobs asking the same question (same kind and parameters) share one run: those queued leave the
queue with the first, and one submitted while it runs joins it; each gets every event from then
on, and the result says how many readers it answered. Results are cached (engine.lab.cache) keyed
by the worker's device, the job kind, its parameters with defaults filled in, and the engine
version; a job whose result is cached is answered without waiting in the queue, and its result
event says `cached=True` with the device and time it was measured. Every timed result carries its
spread and a disturbance check (engine.lab.quality); a disturbed result is never cached, and a
cacheable job's disturbed result is delivered with `remeasuring=True` (not final) and measured
again once the engine's cores are quiet, while no other reader waits (the policy's rule).

A service in a process of its own, with several web processes as its clients (a lecture hall on
a bigger machine), keeps the dispatcher and the supervisor as they are and replaces this facade
in each web process by a proxy: the facade's calls become messages over a
multiprocessing.connection (submit carries the job's fields and no callback; cancel, cached,
status, position carry a job id), and the dispatcher's one delivery point (engine.lab.outbox)
sends each JobEvent to the connection its job came from, where the proxy calls `on_event`. Jobs,
events and results are plain data already (the worker sends them through pipes), so nothing else
changes.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..paths import cache_dir
from . import registry
from .cache import CacheStore
from .class_service import ClassService
from .dispatcher import RECENTLY_ENDED, Dispatcher
from .events import Job, JobEvent, one_line
from .job_queue import question
from .memory import process_memory
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .settings import DEFAULT, Settings
from .supervisor import Supervisor

__all__ = ["METRICS_CONTENT_TYPE", "RECENTLY_ENDED", "EngineService", "get_service"]


class EngineService(ClassService):
    """The pages' side of the engine service; see the module docstring. Thread-safe. The
    class run's calls (class_start, class_send, ...) are engine.lab.class_service's."""

    def __init__(self, cache_path: Path | None = None, start: bool = True,
                 core_setting: str | None = None, pin_self: bool = False,
                 remeasures: int = DEFAULT.remeasures, settings: Settings = DEFAULT):
        """core_setting: the engine's cores (engine.lab.cores; default $ENGINE_CORES or auto);
        pin_self: pin this process to the other cores (a server's; not a test's or a
        script's); remeasures: how often a disturbed result is measured again; settings: the
        scheduler's tunables (engine.lab.settings)."""
        self._supervisor = Supervisor(core_setting, pin_self)
        self._cache = CacheStore(cache_path or cache_dir() / "results")
        self._dispatcher = Dispatcher(self._cache, self._supervisor,
                                      replace(settings, remeasures=remeasures))
        self._class_lock = threading.Lock()
        if start:
            self.start()

    # ---- the tunables (engine.lab.settings) ------------------------------------------------------
    @property
    def settings(self) -> Settings:
        return self._dispatcher.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self._dispatcher.settings = settings

    def _setting(name: str):  # noqa: N805 (a property factory used in the class body)
        def get(self):
            return getattr(self.settings, name)

        def set_(self, value) -> None:
            self.settings = replace(self.settings, **{name: value})

        return property(get, set_, doc=f"settings.{name}")

    preempt_after_s = _setting("preempt_after_s")
    turn_s = _setting("turn_s")
    max_pause_s = _setting("max_pause_s")
    hard_pause_s = _setting("hard_pause_s")
    remeasures = _setting("remeasures")
    lend_gaps = _setting("lend_gaps")
    del _setting

    @property
    def core_setting(self) -> str:
        return self._supervisor.core_setting

    @property
    def restarts(self) -> int:
        return self._supervisor.restarts

    @property
    def cut_short(self) -> int:
        return self._dispatcher.counts["cut_short"]

    # ---- what pages call -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and the dispatcher thread (once)."""
        self._dispatcher.start()

    def submit(self, kind: str, params: dict | None = None,
               on_event: Callable[[JobEvent], None] | None = None,
               session_id: str | None = None, use_cache: bool = True,
               demo: str | None = None, replace: bool = False, nearby: bool = False,
               aside: bool = False, background: bool = False) -> Job:
        """Queue a job; returns at once. Its events go to on_event on the service's thread.
        With replace, it replaces the session's queued jobs of the same demo (they end
        cancelled, with {"replaced_by": its id}): a slider's newest position wins. With nearby,
        a job that has to wait gets a cached result of nearby params first (a "nearby" event).
        With aside, the job is a lookup beside the page's measurements (the GPU box's machine
        description): its answer does not count as the reader's first number (job_queue rule 0).
        With background, the job is context for a point the reader asked for (the knob's batch 1
        and half its batch): it waits behind other readers' points and runs (job_queue rule 1).
        Bad parameters or an unknown kind end the job with an error event, never an exception."""
        d = self._dispatcher
        job = Job(next(d.ids), kind, dict(params or {}), on_event, session_id, use_cache,
                  demo, nearby=nearby, aside=aside, background=background)
        try:
            spec = registry.get_spec(kind)
            job.params = spec.normalize(job.params)
            job.use_cache = use_cache and spec.cacheable
            job.size = spec.size_for(job.params, self._device())
            job.pausable, job.figures = spec.pausable, spec.figures
            job.question = question(kind, job.params) if spec.cacheable else None
        except ValueError as e:
            d.finish(job, "error", {"message": one_line(e)})
            return job
        d.add(job, replace)
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
        with self._dispatcher.lock:
            w = self._supervisor.worker
            identity = w.identity if w is not None else None
        if not spec.cacheable or not identity:
            return None
        return self._cache.get(CacheStore.key(identity["device"], identity["engine_version"],
                                              kind, params))

    def cancel(self, job: Job) -> bool:
        """Cancel a queued or running job; False if it had already finished. A job that shares
        its run with other readers' leaves it (they go on); the last one stops it."""
        return self._dispatcher.cancel(job)

    def cancel_session(self, session_id: str) -> int:
        """Cancel every queued or running job of a session (a closed browser tab); the count."""
        return sum(self.cancel(j) for j in self._dispatcher.jobs_of_session(session_id))

    def position(self, job: Job) -> int | None:
        """How many runs come before this queued job's (the running one included); None if it is
        not queued."""
        d = self._dispatcher
        with d.lock:
            ahead = d.queue.position(job, time.time())
            return None if ahead is None else ahead + (d.running is not None)

    def status(self) -> dict:
        """What the service is doing now (safe to show any reader: no session ids). "queue"
        lists the waiting jobs in the order they will run (a job sharing an earlier one's run is
        left out)."""
        d, sup = self._dispatcher, self._supervisor
        with d.lock:
            w, run = sup.worker, d.running
            identity = (w.identity or {}) if w else {}
            running = None
            if run is not None:
                lead = run.lead
                running = {"id": run.id, "kind": lead.kind, "params": lead.params,
                           "progress": lead.progress, "readers": len(run.jobs),
                           "running_s": round(time.time() - (lead.started_at or time.time()), 2)}
            innermost = d.paused[-1] if d.paused else None
            return {
                "ready": bool(w and w.identity),
                "worker_pid": identity.get("pid"),
                "worker_alive": bool(w and w.process.is_alive()),
                "device": identity.get("device", ""),
                "engine_version": identity.get("engine_version", ""),
                "running": running,
                "class_mode": bool(run is not None and run.lead.kind == registry.CLASS_KIND),
                "paused": ({"id": innermost.id, "kind": innermost.lead.kind,
                            "readers": len(innermost.jobs)} if innermost else None),
                "paused_runs": len(d.paused),
                "queued": len(d.queue),
                "queue": [{"id": j.id, "kind": j.kind, "size": j.size}
                          for j in d.queue.order(time.time())],
                "recently_ended": list(d.ended),  # oldest first: a job's own outcome
                **d.counts,
                "cache_entries": len(self._cache),
                "restarts": sup.restarts,
                "start_error": sup.start_error,
                "cores": identity.get("cores"),
                "threads": identity.get("threads"),
                "memory": self.memory(identity.get("pid")),
            }

    def prometheus(self) -> bytes:
        """GET /metrics's text: vLLM's metrics of the runs on the lab's engine and the service's
        own, in Prometheus' text format (engine.lab.metrics), served as METRICS_CONTENT_TYPE."""
        return self._dispatcher.metrics.exposition(self.status())

    def memory(self, worker_pid: int | None = None) -> dict:
        """Resident memory in MiB: this (web) process now and at most; the worker now, at most
        (its busiest moment so far) and when it last fell idle."""
        worker = process_memory(worker_pid)
        if worker is not None:
            worker["idle_mib"] = self._dispatcher.worker_idle_mib
        return {"web": process_memory(os.getpid()), "worker": worker}

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel what is queued, stop the worker and the dispatcher thread."""
        self._dispatcher.shutdown(timeout)

    @property
    def stopping(self) -> bool:
        return self._dispatcher.stopping

    def _device(self) -> str:
        """The worker's device once it has said hello ("" before)."""
        w = self._supervisor.worker
        return w.device if w else ""


# ---- one service per server process -----------------------------------------------------------
_service: EngineService | None = None
_service_lock = threading.Lock()


def get_service() -> EngineService:
    """The process's engine service, started on first use and stopped at exit. It pins this
    process (the web server) to the cores the engine leaves it."""
    global _service
    with _service_lock:
        if _service is None or _service.stopping:
            _service = EngineService(pin_self=True)
            atexit.register(_service.shutdown)
        return _service
