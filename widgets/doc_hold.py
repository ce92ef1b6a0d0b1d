"""A decorator for widget methods that change Bokeh models directly (a source's data, a range, a
title), so that they are safe from any callback Panel runs.

Bokeh lets a served document change only while its session holds the document lock, and raises
"_pending_writes should be non-None ..." otherwise. Panel replays some user events off that lock:
a click that arrives while a debounced change of another widget is pending runs as an unlocked
task. Under pn.io.hold the changes are collected and Panel sends them itself, which works with or
without the lock (and sends a burst of changes as one message). Outside a served session it does
nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import panel as pn

F = TypeVar("F", bound=Callable)


def changes_bokeh_models(method: F) -> F:
    @functools.wraps(method)
    def held(*args, **kwargs):
        with pn.io.hold():
            return method(*args, **kwargs)
    return held  # type: ignore[return-value]
