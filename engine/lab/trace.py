"""Timestamps of the engine service's dispatch, to find where the engine core's time goes around
jobs in a class (bench/lab/engine_gaps.py reads them): the worker marks when it waits for a job, when
one arrives, its probes and its result sent; the dispatcher thread in the web process marks when
a worker's message reaches it and when it sends the next job. Off unless $LLM_SPEED_TRACE names a
file; then both processes append JSON lines to it, one a mark: {"t": time.monotonic() (one
clock for every process on the machine), "cpu": this thread's CPU seconds, "pid", "what", "job",
...}.

Marks are kept in memory and written in batches (flush): a write is a system call that lets go of
the web process's interpreter lock, and getting it back behind a busy page build is one of the
waits this is meant to see, so the trace must not add its own. A call site that builds a mark's
arguments (a queue's length, a message's tag) on a hot path, every worker message, checks `on`
first: with tracing off it then costs one attribute read. Torch-free.
"""

from __future__ import annotations

import json
import os
import threading
import time

ENV = "LLM_SPEED_TRACE"
FLUSH_EVERY_S = 1.0  # flush(due=True) writes at most this often

_path = os.environ.get(ENV) or None
on = _path is not None  # tracing: read once, at import (the worker inherits the variable)
_lines: list[str] = []
_lock = threading.Lock()
_flushed_at = 0.0


def mark(what: str, job: int = 0, **extra) -> None:
    """Note that `what` happened now (kept until the next flush); nothing when tracing is off."""
    if not on:
        return
    line = json.dumps({"t": time.monotonic(), "cpu": time.thread_time(), "pid": os.getpid(),
                       "what": what, "job": job, **extra})
    with _lock:
        _lines.append(line)


def flush(due: bool = False) -> None:
    """Append the kept marks to the file (with due: only if FLUSH_EVERY_S has passed since the
    last write). One write, O_APPEND: the two processes' batches never interleave mid-line."""
    global _flushed_at
    if not on:
        return
    now = time.monotonic()
    with _lock:
        if not _lines or (due and now - _flushed_at < FLUSH_EVERY_S):
            return
        text, _flushed_at = "".join(line + "\n" for line in _lines), now
        _lines.clear()
    fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read(path: str) -> list[dict]:
    """Every mark in a trace file, oldest first (a torn last line, from a process killed
    mid-write, is skipped)."""
    marks = []
    with open(path) as f:
        for line in f:
            try:
                marks.append(json.loads(line))
            except ValueError:
                continue
    return sorted(marks, key=lambda m: m["t"])
