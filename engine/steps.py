"""Work done in steps that its caller may pause between: a generator that yields a few words
after each step (what is done so far, for a progress line) and returns its result.

Why: building a model for the small preset takes tens of seconds on a CPU (making its weights,
timing its matrix products). The engine service's worker runs one job at a time for a whole
class, so it builds a model in steps and lets other readers' short jobs run between them; the
half-built model waits, kept, and the build goes on where it stopped
(engine.lab.jobs.engines). Everyone else calls `run_steps` and gets the plain result.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")
Steps = Generator[str, None, T]  # yields what is done so far (a few words); returns the result


def run_steps(steps: Steps[T]) -> T:
    """Run steps to their end without pausing; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
