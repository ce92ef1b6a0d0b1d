"""The engine worker's keeper: spawns the worker process (engine.lab.worker) with its pipes and
shared signals, pins the web side off the engine's cores once the worker says which are its own,
restarts a worker that died, and stops it. The web process never imports torch: only the
spawned child does. Torch-free.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

from . import cores

log = logging.getLogger(__name__)


def _worker_process(job_conn, event_conn, cancel_id, core_setting, available, pause_id,
                    fill_id) -> None:
    """The spawned child's entry: the worker's code is imported there, never in the web process."""
    from .worker import main

    main(job_conn, event_conn, cancel_id, core_setting, available, pause_id, fill_id)


@dataclass
class Worker:
    """One incarnation of the worker process, its pipes and the signals the service sets for its
    running job (fresh ones after a restart: a process killed mid-write can leave a pipe holding
    half a message). Each signal holds a run's id, or 0 for none."""

    process: Any
    jobs: Any  # our end of the job pipe (we send)
    events: Any  # our end of the event pipe (we receive)
    cancel_id: Any  # the run to stop (its -id: stop its engine's build only)
    pause_id: Any  # the run to pause (a pausable one), between two of its steps
    fill_id: Any  # the run whose idle gaps may run a point
    identity: dict | None = None  # the hello: device, engine_version, pid, cores, threads
    started_at: float = field(default_factory=time.time)

    def send(self, message: tuple) -> None:
        """Send a message; a dead worker is noticed by its sentinel, not here."""
        try:
            self.jobs.send(message)
        except (OSError, ValueError):
            pass

    @property
    def device(self) -> str:
        return (self.identity or {}).get("device", "")


class Supervisor:
    """Spawns, pins, restarts and stops the worker; the dispatcher calls it under its lock."""

    def __init__(self, core_setting: str | None = None, pin_self: bool = False):
        """core_setting: the engine's cores (engine.lab.cores; default $ENGINE_CORES or auto);
        pin_self: pin this process to the other cores (a server's; not a test's or a
        script's)."""
        self._ctx = mp.get_context("spawn")
        self.core_setting = core_setting or os.environ.get(cores.ENV, "auto")
        self._available = list(cores.available_cores())  # before this process pins itself
        self.pin_self = pin_self
        self.worker: Worker | None = None
        self.start_error: str | None = None
        self.restarts = 0

    def pipe(self):
        """A one-way pipe of the spawn context (the dispatcher's wake-up)."""
        return self._ctx.Pipe(duplex=False)

    def spawn(self) -> Worker:
        """Start a fresh worker process; it says hello (or "fatal") on its event pipe."""
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
        self.worker = Worker(process, job_w, event_r, cancel_id, pause_id, fill_id)
        return self.worker

    def died(self, w: Worker, restart: bool = True) -> tuple[int | None, bool]:
        """A worker exited: close its pipes and start a fresh one if it had come up (never
        spinning on one that cannot start) and `restart`. Returns its exit code and whether it
        was restarted."""
        w.process.join(1.0)
        code = w.process.exitcode
        w.jobs.close()
        w.events.close()
        log.warning("engine worker %s exited with code %s", w.process.pid, code)
        if not restart:
            return code, False
        if w.identity is None:  # it never came up
            self.start_error = self.start_error or f"engine worker exited with code {code}"
            self.worker = None
            return code, False
        self.restarts += 1
        self.spawn()
        return code, True

    def hello(self, w: Worker, identity: dict) -> None:
        """The worker is up: record what it said and keep the web side off its cores."""
        w.identity = identity
        self.start_error = None
        self.keep_off_engine_cores(identity.get("cores"))

    def keep_off_engine_cores(self, split: dict | None) -> None:
        """Pin this process to the cores the engine leaves (pin_self, a server's), or at least
        the calling thread (the dispatcher's, which receives every event while a job
        measures)."""
        if not (split and split.get("isolated")):
            return
        try:
            if self.pin_self:
                cores.pin(0, split["web"])
            else:
                os.sched_setaffinity(0, split["web"])  # this thread only
        except OSError as e:
            log.warning("could not pin the web side to cores %s: %s", split["web"], e)

    def stop(self, timeout: float) -> None:
        """Ask the worker to stop; kill it if it has not within timeout."""
        w = self.worker
        if w is None:
            return
        w.send(("stop",))
        w.process.join(timeout)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(timeout)
