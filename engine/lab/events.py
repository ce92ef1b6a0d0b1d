"""What the engine service tells the web process: a job's record (Job) and its events (JobEvent).

A result event's data is the job's result dict; `event.result` gives it as the kind's typed
record (engine.lab.results). Torch-free.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import ConfigError
from .results import Record, parse_result

# Event types a job's on_event receives; "queued" and "started" come from the service itself.
EVENT_TYPES = ("queued", "nearby", "started", "progress", "token", "step", "result", "error",
               "cancelled")
FINAL_EVENTS = ("result", "error", "cancelled")
FINAL_STATES = ("done", "error", "cancelled")
MAX_MESSAGE = 300  # characters of an error message shown to a reader


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def one_line(error: BaseException) -> str:
    """A reader-facing message: a ConfigError's (or plain ValueError's) text as is, anything else
    with its type's name in front; one line."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if not (isinstance(error, ConfigError) or type(error) is ValueError):
        name = type(error).__name__
        text = f"{name}: {text}" if text else name
    return text[:MAX_MESSAGE]


@dataclass(frozen=True)
class JobEvent:
    """One thing that happened to a job. `data` by type:
    queued {"ahead": jobs before it; "preempted": True when a running job was stopped to let
    short jobs through and waits again, its run starting over, or, with "resumes": True,
    paused, to go on where it stopped (its engine's build, or a load test between two steps)},
    nearby {a cached result of nearby settings, shown while
    this one waits: `near` has the settings it was measured with; asked for with submit's
    nearby=True}, started {}, progress {"done", "total", maybe "message"},
    token {"index", "text", "t_s"}, step {whatever the job reports}, result {the job's result},
    error {"message": one line}, cancelled {}.
    Result events also carry cached (from the cache, not measured now), device, measured_at and
    readers: how many readers' jobs the one run answered (several asked the same question at
    once: engine.lab.job_queue), this one included. A disturbed result that the service measures
    again comes with remeasuring=True and is not final (a queued event, then the new
    measurement's events follow)."""

    job_id: int
    kind: str
    type: str
    data: dict
    cached: bool = False
    device: str = ""
    measured_at: str = ""
    remeasuring: bool = False
    readers: int = 1
    near: dict | None = None  # a nearby event's: the params its result was measured with

    @property
    def final(self) -> bool:
        return self.type in FINAL_EVENTS and not self.remeasuring

    @cached_property
    def result(self) -> Record:
        """A result (or nearby) event's data as its kind's record (engine.lab.results);
        ResultError if the data does not have the record's shape, ValueError if this event has
        no result."""
        if self.type not in ("result", "nearby"):
            raise ValueError(f"a {self.type} event has no result")
        return parse_result(self.kind, self.data)


@dataclass(eq=False)
class Job:
    """A submitted job and what became of it; `wait()` blocks until it has finished."""

    id: int
    kind: str
    params: dict
    on_event: Callable[[JobEvent], None] | None = None
    session_id: str | None = None
    use_cache: bool = True
    demo: str | None = None  # which of the session's demos asked (its newest request wins)
    size: str = "point"  # the kind's declared size (engine.lab.registry): the queue's order
    question: str | None = None  # kind and params as text, for cacheable kinds: one run answers
    nearby: bool = False  # while it waits, show a cached result of nearby params (a nearby event)
    pausable: bool = False  # the queue may pause it between two steps (registry)
    figures: bool = False  # it shows a partial figure soon after it starts (registry)
    aside: bool = False  # a lookup beside the page's measurements: its answer is not the
    # reader's first number (engine.lab.job_queue rule 0)
    background: bool = False  # context for the point the reader asked for (the knob's batch 1
    # and half its batch): it waits behind the others' points and runs (engine.lab.job_queue
    # rule 1)
    preempted: int = 0  # times it was stopped to let short jobs through, and queued again
    paused: int = 0  # times it was paused for short jobs, to go on where it stopped
    state: str = "queued"  # queued | running | done | error | cancelled
    result: dict | None = None
    error: str | None = None
    cached: bool = False
    device: str = ""
    measured_at: str = ""
    readers: int = 1  # how many readers' jobs the run that answered this one answered
    progress: dict | None = None
    remeasures: int = 0  # times a disturbed result of it was measured again
    submitted_at: float = field(default_factory=time.time)
    started_at: float | None = None
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _cache_checked: int = field(default=-1, repr=False)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the job has a result, an error or was cancelled; False on timeout."""
        return self._done.wait(timeout)

    @property
    def record(self) -> Record | None:
        """The result as its kind's record (engine.lab.results); None until there is one."""
        return None if self.result is None else parse_result(self.kind, self.result)
