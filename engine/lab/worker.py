"""The engine worker: the process that runs jobs (engine.lab.supervisor spawns it), and `run`, which
runs one job in this process (the worker's loop calls it; so do tests).

A job's body is found by the import path its kind declares (engine.lab.registry) and receives
its parameters checked; the bodies live in engine.lab.jobs and import torch, so only this process
imports them. The worker first pins itself to the engine's cores (engine.lab.cores) with one
torch thread per core, and `run` wraps every timed job in a disturbance check (engine.lab.quality:
the scheduler's accounting around it, a calibration probe before and after).

A job's engine is built first, in steps (prepare_engine), and the service may stop it between
two: the half-built engine is kept for the job's next turn. A running job sees the service
through its Control (WorkerControl; engine.lab.control): `cancelled()` between two steps stops
it when the service set cancel_id, and pauses it there when the service set pause_id (a pausable
job: a load test, a schedule run, a rate sweep; the worker runs the jobs the service sends
meanwhile, and the job goes on when told to resume, its clock and its disturbance check leaving
the pause out). `fill(ahead_s)` lends an idle gap of its serving loop (nothing to do until its
next arrival) when the service set fill_id: the worker asks the service for one short job and
runs it there, and the run's clock stops only for what went past the gap (engine.serve.loop), so
what the run measures is as if it had slept. `inbox(timeout_s)` gives a running job the
"class" messages the service sent it on the job pipe (the class run's requests, knob changes and
stop: engine.lab.class_service); those that come while the worker waits for another answer (a
lent gap's) are held for it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..device import configure_threads
from . import cores, quality, trace
from .control import Control, as_control
from .events import now_iso, one_line
from .jobs.engines import build, engine_key, is_built, path_of, put_back, set_aside
from .jobs.machine import worker_identity
from .jobs.probe import get_probe, measure_checked
from .registry import ENGINE, JOBS, Cancelled, Emit, JobSpec, get_spec
from .results import Measured

log = logging.getLogger(__name__)
ENGINE_PARAMS = ENGINE.keys()  # a job with all of these runs on one of the worker's engines
HELD_MESSAGES = 10_000  # class messages kept while the worker waits for another answer


def body(spec: JobSpec) -> Callable:
    """The function that runs a kind (imported on first use)."""
    return function(spec.body)


def function(path: str) -> Callable:
    """The function at a "module:function" path (imported on first use)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def run(kind: str, params: dict, emit: Emit, control: Control | Cancelled | None = None,
        paused: list[tuple[quality.Usage, quality.Usage]] | None = None) -> dict | None:
    """Run one job in this process; returns its result with its spread and disturbance check
    (engine.lab.results.Measured), or None when it was cancelled. Bad parameters raise
    ConfigError (an unknown kind or parameter: ValueError). `control`: the job's line to the
    service (engine.lab.control; a plain "is it cancelled?" function will do); `paused`: the
    snapshots around the job's pauses (filled in while it runs), left out of its check."""
    spec = get_spec(kind)
    checked = spec.check(params)
    control = as_control(control)
    stop = control.stop_build
    if not (prepare_engine(checked, emit, stop) and prepare_more(spec, checked, emit, stop)):
        return None  # stopped while building
    trace.mark("prepared")
    if not issubclass(spec.result, Measured):  # a kind whose record carries no spread or check
        return body(spec)(checked, emit, control)
    if not spec.timed:  # it times nothing, or checks what it times itself (info's limits)
        result = body(spec)(checked, emit, control)
        return None if result is None else {"spread": None, "check": None, **result}
    result, check = measure_checked(lambda: body(spec)(checked, emit, control),
                                    paused if paused is not None else ())
    if result is None:
        return None
    path = path_of(engine_key(checked)) if ENGINE_PARAMS <= checked.keys() else None
    return {"spread": None, **({"path": path} if path else {}), **result, "check": check}


def prepare_engine(params: dict, emit: Emit, cancelled: Cancelled) -> bool:
    """Build the engine a job's params ask for (registry.ENGINE's), if the worker has not
    got it, before the job's own work: so a model's build (tens of seconds for the small
    preset on a CPU) is never inside a measurement's window, and it is done in steps that the
    service may pause between for other readers' short jobs (cancelled() turns True; the
    build is kept, and goes on when this job runs again). Each step is a "progress" event with
    "building": True, and the last one "building": False. False if it was paused."""
    if not ENGINE_PARAMS <= params.keys():
        return True
    key = engine_key(params)
    if is_built(key):
        build(key)  # most recently used now
        return True
    what = f"loading the {params['preset']} model"
    on_step = _building(emit, what)
    if build(key, cancelled, on_step) is None:
        return False
    _built(emit, what)
    return True


def prepare_more(spec: JobSpec, params: dict, emit: Emit, cancelled: Cancelled) -> bool:
    """Build what a job needs besides its engine (its kind's `prepare`: the speculative
    lesson's draft model), in steps like the engine and for the same reason; a build stopped
    between two steps is kept by whoever made the steps, and goes on at the job's next turn.
    False if it was stopped."""
    found = function(spec.prepare)(params) if spec.prepare else None
    if found is None:
        return True
    what, steps = found
    on_step = _building(emit, what)
    while True:
        try:
            done = next(steps)
        except StopIteration:
            break
        on_step(done)
        if cancelled():
            return False
    _built(emit, what)
    return True


def _building(emit: Emit, what: str) -> Callable[[str], None]:
    """Say a build starts; the function that says each of its steps ("building": True, so the
    service may stop it between two)."""
    emit("progress", {"done": 0, "total": 0, "message": f"{what}...", "building": True})

    def on_step(done: str) -> None:
        emit("progress", {"done": 0, "total": 0, "message": f"{what}: {done}",
                          "building": True})

    return on_step


def _built(emit: Emit, what: str) -> None:
    emit("progress", {"done": 0, "total": 0, "message": f"{what}: done; measuring",
                      "building": False})


def isolate(setting: str | None, available: list[int] | None) -> cores.CoreSplit:
    """Pin this process to the engine's cores of the split (of `available`, the cores the web
    process may use) and use one torch thread per core."""
    split = cores.plan(available or cores.available_cores(), setting,
                       gpu=torch.cuda.is_available())
    try:
        cores.pin(0, split.engine)
    except OSError as e:  # a container that forbids it: the note says so
        split = cores.CoreSplit(split.engine, split.web, split.setting,
                                f"{split.note}; pinning failed: {e}")
    configure_threads()
    return split


class _Stop(BaseException):
    """The web process said stop, or went away (a BaseException: no job body catches it)."""


@dataclass
class _Pipes:
    """The worker's ends: jobs in, events out, and the shared ids of the job to cancel and of
    the job to pause (engine.lab.dispatcher sets them)."""

    jobs: Any
    events: Any
    cancel_id: Any
    pause_id: Any = None
    fill_id: Any = None  # the id of the running job whose idle gaps may run a short job

    held: deque = field(default_factory=lambda: deque(maxlen=HELD_MESSAGES))  # "class"
    # messages that came while the worker waited for another answer (a lent gap's)
    early: deque = field(default_factory=deque)  # other messages read while looking for those

    def receive(self) -> tuple:
        trace.mark("idle")
        while True:
            message = self.early.popleft() if self.early else self._recv()
            if message[0] != "class":
                break
            self.held.append(message)  # for the running job's inbox (class_messages)
        if trace.on:
            trace.mark("recv", message[1] if len(message) > 1 else 0, tag=message[0])
        if message[0] == "stop":
            raise _Stop
        return message

    def _recv(self) -> tuple:
        try:
            return self.jobs.recv()
        except (EOFError, OSError):
            raise _Stop from None

    def _poll(self, timeout_s: float) -> bool:
        try:
            return self.jobs.poll(timeout_s)
        except (EOFError, OSError):
            raise _Stop from None

    def class_messages(self, job_id: int, timeout_s: float) -> list[dict]:
        """The "class" messages the service sent job job_id (its class run's requests, knob
        changes, stop), waiting at most timeout_s for one. Another message read meanwhile is
        kept for receive; a class message of another job is dropped (that run has ended)."""
        found = [m[2] for m in self.held if m[1] == job_id]
        self.held.clear()
        wait = 0.0 if found else timeout_s
        while self._poll(wait):
            wait = 0.0
            message = self._recv()
            if message[0] == "class":
                if message[1] == job_id:
                    found.append(message[2])
            elif message[0] == "stop":
                raise _Stop
            else:
                self.early.append(message)
                break
        return found


def main(job_conn, event_conn, cancel_id, core_setting: str | None = None,
         available: list[int] | None = None, pause_id=None, fill_id=None) -> None:
    """The worker: pins itself to the engine's cores, says hello (device, engine version, the
    core split), then runs jobs as they come, sending their events back; exits when the web
    process goes away or says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops us
    logging.basicConfig(level=logging.INFO, format="engine worker: %(message)s")
    try:
        split = isolate(core_setting, available)
        for spec in JOBS.values():  # every body imported now, not inside a job's time
            body(spec)
        get_probe()  # the machine's probe profile too (a few probes the first time)
        hello = worker_identity()
    except BaseException as e:
        event_conn.send(("fatal", one_line(e)))
        return
    event_conn.send(("hello", {**hello, "pid": os.getpid(), "cores": split.to_dict(),
                               "threads": torch.get_num_threads()}))
    pipes = _Pipes(job_conn, event_conn, cancel_id, pause_id, fill_id)
    try:
        while True:
            message = pipes.receive()
            if message[0] == "run":
                run_job(pipes, *message[1:])
            # anything else ("resume" of a job that is no longer paused) has nothing to do
    except _Stop:
        return
    finally:
        trace.flush()


class WorkerControl(Control):
    """A job's Control in the worker: answers from the signals the service sets (the pipes'
    cancel_id, pause_id and fill_id), pausing the job inside cancelled() when asked. `paused`
    collects the snapshots around its pauses and lent gaps, left out of its check."""

    def __init__(self, pipes: _Pipes, job_id: int, kind: str, params: dict):
        self._pipes, self._id = pipes, job_id
        self._kind, self._params = kind, params
        self._engine: tuple | None | bool = False  # not looked up yet
        self.paused: list[tuple[quality.Usage, quality.Usage]] = []

    def cancelled(self) -> bool:
        pipes = self._pipes
        if pipes.pause_id is not None and pipes.pause_id.value == self._id:
            self.pause_here()
        return pipes.cancel_id.value == self._id

    def pause_here(self) -> None:
        """Pause between two steps: run what the service sends until it says resume."""
        self.paused.append(pause(self._pipes, self._id, self.engine()))

    def stop_build(self) -> bool:  # the service's -id stops the build, not the job's own work
        return self.cancelled() or self._pipes.cancel_id.value == -self._id

    def fill(self, ahead_s: float) -> float:  # its serving loop has ahead_s with nothing to do
        pipes = self._pipes
        if pipes.fill_id is None or pipes.fill_id.value != self._id:
            return 0.0
        return fill_gap(pipes, self._id, self.engine, ahead_s, self.paused)

    def inbox(self, timeout_s: float = 0.0) -> list[dict]:  # the service's class messages
        return self._pipes.class_messages(self._id, timeout_s)

    def engine(self) -> tuple | None:
        """Its engine's key (engine_of): params checked once, not at every lent gap."""
        if self._engine is False:
            self._engine = engine_of(self._kind, self._params)
        return self._engine


def run_job(pipes: _Pipes, job_id: int, kind: str, params: dict, options: dict) -> None:
    """Run one job the service sent, sending its events and its result (or error)."""
    sending = [0.0, 0]  # seconds in events.send and sends, for the trace

    def emit(type_: str, data: dict) -> None:
        started = time.monotonic()
        pipes.events.send(("event", job_id, type_, plain(data)))
        sending[0] += time.monotonic() - started
        sending[1] += 1

    control = WorkerControl(pipes, job_id, kind, params)
    try:
        _run_job(pipes, job_id, kind, params, options, emit, control)
    finally:
        trace.mark("done", job_id, kind=kind, send_s=sending[0], sends=sending[1])
        trace.flush(due=True)


def _run_job(pipes: _Pipes, job_id: int, kind: str, params: dict, options: dict, emit: Emit,
             control: WorkerControl) -> None:
    try:
        if options.get("quiet_first"):
            wait_for_quiet(options["quiet_first"], emit, control.cancelled)
            trace.mark("quiet", job_id)
            if pipes.cancel_id.value == job_id:  # stopped while waiting (a re-measure giving
                emit("cancelled", {})  # way to other readers): nothing measured
                return
        result = run(kind, params, emit, control, control.paused)
    except Exception as e:
        if not isinstance(e, ValueError):  # a bad setting (ConfigError) is no bug: no trace
            log.error("job %s %s failed:\n%s", kind, params, traceback.format_exc())
        emit("error", {"message": one_line(e)})
        return
    if result is None or pipes.cancel_id.value == job_id:
        emit("cancelled", {})
        return
    try:
        result = plain(result)
    except (TypeError, ValueError) as e:
        emit("error", {"message": f"job {kind} returned a result that is not JSON: {e}"})
        return
    pipes.events.send(("result", job_id, result, now_iso()))


def pause(pipes: _Pipes, job_id: int,
          engine: tuple | None) -> tuple[quality.Usage, quality.Usage]:
    """Pause a running job (its body is inside control.cancelled(), between two steps): run the
    jobs the service sends meanwhile, until it says resume. The job's engine is set aside, since its
    requests hold KV blocks (the jobs inside get another). Returns the snapshots around the
    pause: not the job's own time, so its disturbance check leaves them out, and its serving
    loop's clock stops for it (engine.serve.loop). `engine`: the job's engine key (engine_of)."""
    pipes.pause_id.value = 0
    start = quality.Usage.now(cores.available_cores())
    with _engine_aside(engine):
        pipes.events.send(("paused", job_id))
        trace.mark("paused", job_id)
        try:
            while True:
                message = pipes.receive()
                if message[0] == "resume" and message[1] == job_id:
                    break
                if message[0] == "run":
                    run_job(pipes, *message[1:])
        finally:
            trace.mark("resumed", job_id)
    return start, quality.Usage.now(start.cores)


def fill_gap(pipes: _Pipes, job_id: int, engine: Callable[[], tuple | None], ahead_s: float,
             paused: list[tuple[quality.Usage, quality.Usage]]) -> float:
    """Lend a running job's idle gap (its serving loop has ahead_s with nothing to do): ask
    the service for one short job ("gap"; it answers with a "run" or "nofill") and run it, the
    job's engine set aside as in a pause. The window goes into `paused`, left out of the job's
    disturbance check; returns the seconds it took (the loop stops its clock for what went past
    the gap). The service asks no more of the worker than that answer meanwhile: the job is
    still its running one. `engine()`: the job's engine key (engine_of), asked only when a
    short job comes."""
    started = time.monotonic()
    start = quality.Usage.now(cores.available_cores())
    pipes.events.send(("gap", job_id, ahead_s))
    trace.mark("gap", job_id, ahead_s=ahead_s)
    message = pipes.receive()
    if message[0] == "run":
        with _engine_aside(engine()):
            run_job(pipes, *message[1:])
    paused.append((start, quality.Usage.now(start.cores)))
    trace.mark("filled", job_id)
    return time.monotonic() - started


def engine_of(kind: str, params: dict) -> tuple | None:
    """The key of the engine a job runs on (engines.engine_key of its checked params), None for
    a kind that runs on none."""
    checked = get_spec(kind).check(params)  # as its body has them
    return engine_key(checked) if ENGINE_PARAMS <= checked.keys() else None


@contextmanager
def _engine_aside(key: tuple | None):
    """While a job is paused or lends a gap, its engine (`key`) is set aside, since its requests
    hold KV blocks (the jobs run meanwhile get another, engines.set_aside); it is put back
    after."""
    mine = set_aside(key) if key else None
    try:
        yield
    finally:
        if key:
            put_back(key, mine)


def wait_for_quiet(timeout_s: float, emit: Emit, cancelled: Cancelled) -> None:
    """Before measuring again: wait (at most timeout_s) until other processes leave the engine's
    cores alone (engine.lab.quality.wait_until_quiet)."""
    def on_wait(waited_s: float, share: float) -> None:
        emit("progress", {"done": 0, "total": 1, "message": (
            f"re-measuring: waiting for the engine's cores to be quiet (other processes use "
            f"{share:.0%} of them; waited {waited_s:.0f} of {timeout_s:.0f} s)")})

    quality.wait_until_quiet(cores.available_cores(), timeout_s, on_wait, cancelled)


def plain(data: dict) -> dict:
    """JSON types only: what the disk cache can hold, and what the web process can unpickle
    without importing torch (a torch.__version__ or a tensor would drag it in)."""
    return json.loads(json.dumps(data))
