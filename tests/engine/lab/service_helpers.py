"""Helpers for the engine service's tests (a plain module, imported under one name): the
workloads they run, an event recorder, waits, and a stand-in for the worker's pipes, so the
dispatcher's application of the policy can be checked without a process."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.lab.client import EngineService
from engine.lab.events import JobEvent
from engine.lab.runs import Run, RunState
from engine.lab.supervisor import Worker

KV = 64  # MiB: every job shares one small engine in the worker
QUICK = {"preset": "tiny", "kv_budget_mib": KV, "prompt_len": 16, "new_tokens": 8}
LONG = {"preset": "tiny", "kv_budget_mib": KV, "prompt_len": 16, "new_tokens": 1500,
        "batch_size": 4}
LOAD = {"rate": 6.0, "long_share": 0.0, "short_prompt": [8, 16], "short_output": [4, 8],
        "kv_budget_mib": KV}
TIMEOUT = 120


class Recorder:
    """Collects every job's events, in the order the service delivered them."""

    def __init__(self):
        self.events: list[JobEvent] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def __call__(self, event: JobEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(self, job) -> list[JobEvent]:
        with self._lock:
            return [e for e in self.events if e.job_id == job.id]

    def types(self, job) -> list[str]:
        return [e.type for e in self.of(job)]

    def wait_for(self, job, type_: str, timeout: float = TIMEOUT) -> JobEvent:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for e in self.events:
                    if e.job_id == job.id and e.type == type_:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {type_} event for job {job.id}: {self.types(job)}")
                self._changed.wait(left)


def wait_until(condition, timeout: float = TIMEOUT, what: str = "") -> None:
    """Poll until condition() is true; fail after timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.02)


def wait_ready(svc: EngineService, timeout: float) -> bool:
    """Until the worker has said hello."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if svc.status()["ready"]:
            return True
        time.sleep(0.05)
    return False


@contextmanager
def service_on_own_cache(path: Path, **settings) -> Iterator[EngineService]:
    """A real service and worker measuring into a cache of their own at `path`: $LLM_SPEED_CACHE
    points there while it runs (the worker inherits it: its probe profile, limits and plans) and
    is restored after; a disturbed point is not measured again (each job measured once, so the
    counts of jobs done are exact); `settings` are the service's attributes to set before the
    worker is ready (lend_gaps, preempt_after_s)."""
    env = pytest.MonkeyPatch()
    env.setenv("LLM_SPEED_CACHE", str(path))
    svc = EngineService(cache_path=path / "results", remeasures=0)
    try:
        for name, value in settings.items():
            setattr(svc, name, value)
        assert wait_ready(svc, TIMEOUT), svc.status()
        yield svc
    finally:
        svc.shutdown()
        env.undo()


def finished(job, timeout: float = TIMEOUT):
    assert job.wait(timeout), f"job {job.id} ({job.kind}) did not finish: {job.state}"
    return job


def stand_in_worker() -> tuple[Worker, list]:
    """A worker record whose pipes record what the dispatcher sends (and nothing else), up."""
    sent: list = []
    w = Worker(process=types.SimpleNamespace(is_alive=lambda: False, pid=None), jobs=types.SimpleNamespace(send=sent.append), events=None,
               cancel_id=types.SimpleNamespace(value=0),
               pause_id=types.SimpleNamespace(value=0), fill_id=types.SimpleNamespace(value=0),
               identity={"device": "cpu", "engine_version": "test", "pid": None})
    return w, sent


@contextmanager
def stand_in_service(tmp_path, **settings):
    """An unstarted service whose dispatcher talks to a stand-in worker: yields (service, its
    dispatcher, the worker record, what was sent to it)."""
    svc = EngineService(cache_path=tmp_path / "results", start=False)
    for name, value in settings.items():
        setattr(svc, name, value)
    w, sent = stand_in_worker()
    svc._supervisor.worker = w
    try:
        yield svc, svc._dispatcher, w, sent
    finally:
        svc._supervisor.worker = None  # the stand-in has no process to stop
        svc.shutdown()


def paused_stack(d, depth: int, now: float, jobs) -> list[Run]:
    """Put `depth` runs of these jobs on the dispatcher's pause stack, paused at `now`."""
    d.paused = [Run(job.id, [job], state=RunState.PAUSED, paused_at=now) for job in jobs[:depth]]
    return d.paused
