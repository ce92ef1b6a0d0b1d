"""The engine worker: the process that runs jobs (engine.lab.client spawns it), and `run`, which
runs one job in this process (the worker's loop calls it; so do tests).

A job's body is found by the import path its kind declares (engine.lab.registry) and receives
its parameters checked; the bodies live in engine.lab.jobs and import torch, so only this process
imports them.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import traceback
from collections.abc import Callable

from .events import now_iso, one_line
from .jobs.machine import worker_identity
from .registry import JOBS, Cancelled, Emit, JobSpec, get_spec

log = logging.getLogger(__name__)


def body(spec: JobSpec) -> Callable:
    """The function that runs a kind (imported on first use)."""
    module, _, name = spec.body.partition(":")
    return getattr(importlib.import_module(module), name)


def run(kind: str, params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """Run one job in this process; returns its result, or None when it was cancelled. Bad
    parameters raise ConfigError (an unknown kind or parameter: ValueError)."""
    spec = get_spec(kind)
    return body(spec)(spec.check(params), emit, cancelled)


def main(job_conn, event_conn, cancel_id) -> None:
    """The worker: says hello (device, engine version), then runs jobs as they come, sending
    their events back; exits when the web process goes away or says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops us
    logging.basicConfig(level=logging.INFO, format="engine worker: %(message)s")
    try:
        for spec in JOBS.values():  # every body imported now, not inside a job's time
            body(spec)
        hello = worker_identity()
    except BaseException as e:
        event_conn.send(("fatal", one_line(e)))
        return
    event_conn.send(("hello", {**hello, "pid": os.getpid()}))
    while True:
        try:
            message = job_conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, job_id, kind, params = message

        def emit(type_: str, data: dict, job_id: int = job_id) -> None:
            event_conn.send(("event", job_id, type_, plain(data)))

        def cancelled(job_id: int = job_id) -> bool:
            return cancel_id.value == job_id

        try:
            result = run(kind, params, emit, cancelled)
        except Exception as e:
            if not isinstance(e, ValueError):  # a bad setting (ConfigError) is no bug: no trace
                log.error("job %s %s failed:\n%s", kind, params, traceback.format_exc())
            emit("error", {"message": one_line(e)})
            continue
        if result is None or cancelled():
            emit("cancelled", {})
            continue
        try:
            result = plain(result)
        except (TypeError, ValueError) as e:
            emit("error", {"message": f"job {kind} returned a result that is not JSON: {e}"})
            continue
        event_conn.send(("result", job_id, result, now_iso()))


def plain(data: dict) -> dict:
    """JSON types only: what the disk cache can hold, and what the web process can unpickle
    without importing torch (a torch.__version__ or a tensor would drag it in)."""
    return json.loads(json.dumps(data))
