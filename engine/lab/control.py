"""What a running job's body asks the service between two of its steps: a Control. Torch-free.

`control.cancelled()` says whether to stop now; inside that same call the job pauses if the
service asked it to (the worker runs other jobs meanwhile, and the call returns when the job may
go on), so every place a body checks for a stop is also a place it may be paused, outside what
it times. `control.fill(ahead_s)` lends an idle gap of a serving loop (nothing to do for
ahead_s) to a waiting point and returns the seconds that took (0 when none was lent).
`control.stop_build()` says whether to stop building the job's engine (the build is kept).
`control.inbox(timeout_s)` gives the messages the service sent the running job (the class run's
requests and knob changes), waiting at most timeout_s for one.

A Control is also callable as `control()`, the same as `control.cancelled()`, so it goes where
a plain "is it cancelled?" function goes (the serving loop, generate, the HTTP bench).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Control:
    """A job nobody stops, pauses or lends gaps of (a test's, a script's run in this process);
    the worker's own (engine.lab.worker.WorkerControl) answers from the service's signals."""

    def cancelled(self) -> bool:
        """Stop now? Pauses here first when the service asked for a pause."""
        return False

    def __call__(self) -> bool:
        return self.cancelled()

    def stop_build(self) -> bool:
        """Stop building the job's engine (kept for its next turn)?"""
        return self.cancelled()

    def fill(self, ahead_s: float) -> float:
        """Lend an idle gap of ahead_s seconds to a waiting job; the seconds it took."""
        return 0.0

    def inbox(self, timeout_s: float = 0.0) -> list[dict]:
        """The messages the service sent this job since the last call (none here), waiting
        at most timeout_s for one."""
        if timeout_s > 0:
            time.sleep(timeout_s)
        return []


class Polled(Control):
    """A Control that asks a plain function whether to stop (a test's `lambda: False`)."""

    def __init__(self, cancelled: Callable[[], bool]):
        self._cancelled = cancelled

    def cancelled(self) -> bool:
        return bool(self._cancelled())


def as_control(cancelled: Control | Callable[[], bool] | None) -> Control:
    """The Control for what a caller passed: itself, or a plain function wrapped."""
    if isinstance(cancelled, Control):
        return cancelled
    return Control() if cancelled is None else Polled(cancelled)
