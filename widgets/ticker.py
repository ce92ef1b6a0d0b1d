"""One clock per web process for the text that changes with time on open pages (a status line's
seconds, a queue position), instead of a timer per page.

A Panel periodic callback per page costs the web server's one core a scheduled call, the
session's document lock and Panel's busy bookkeeping every time it fires, whether or not the
page has anything new to show: a status line's timer at 4 a second and a queue poll at 2 a
second were about 180 calls a second for 30 readers waiting in a class, nearly all of them
changing nothing. Here one Tornado timer asks every watched page, outside any session's lock,
whether it has something new to show (`due(now)` returns the change to make, or None); only a
page whose text changes gets a call on its own session's loop, holding its lock, to make it.

    watch = TICKER.watch(doc, due)   # due(now) -> Callable | None, on the server's loop
    TICKER.unwatch(watch)

A watch ends with unwatch, or by itself once its session is gone; the timer stops when no page
is watched. Outside a served session (tests, scripts) nothing is watched: callers tick by hand.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc
from tornado.ioloop import PeriodicCallback

log = logging.getLogger(__name__)

Due = Callable[[float], Callable[[], None] | None]


class Ticker:
    """A process-wide timer that changes a page only when its `due` says there is news."""

    def __init__(self, period_ms: int):
        self.period_ms = period_ms
        self._watches: dict[int, tuple[Document, Due]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._timer: PeriodicCallback | None = None
        self.ticks = 0  # times the timer fired
        self.changes = 0  # changes it sent to pages (each one call on a session's loop)

    def watch(self, doc: Document, due: Due) -> int:
        """Ask `due(now)` every period_ms; the key for unwatch."""
        with self._lock:
            key = next(self._ids)
            self._watches[key] = (doc, due)
            start = self._timer is None
        if start:  # the timer belongs to the server's loop: start it from there
            with set_curdoc(doc):
                pn.state.execute(self._start, schedule=True)
        return key

    def unwatch(self, key: int | None) -> None:
        with self._lock:
            self._watches.pop(key, None)

    @property
    def watched(self) -> int:
        return len(self._watches)

    def _start(self) -> None:
        with self._lock:
            if self._timer is not None or not self._watches:
                return
            self._timer = PeriodicCallback(self.tick, self.period_ms)
        self._timer.start()

    def tick(self, now: float | None = None) -> None:
        """Ask every watched page; send the changes of those with news."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self.ticks += 1
            watches = list(self._watches.items())
            if not watches and self._timer is not None:
                self._timer.stop()
                self._timer = None
        for key, (doc, due) in watches:
            context = doc.session_context
            if context is None or context.destroyed:  # the reader has gone
                self.unwatch(key)
                continue
            try:
                change = due(now)
                if change is not None:
                    with set_curdoc(doc):
                        pn.state.execute(change, schedule=True)  # on its loop, under its lock
                    self.changes += 1
            except Exception:  # one page's fault must not stop the others' clocks
                log.exception("a page's timed update failed; its clock is stopped")
                self.unwatch(key)


STATUS_TICK_MS = 250  # a status line's seconds and its bar (widgets.job_status)
QUEUE_POLL_MS = 500  # a waiting job's place in the engine's queue (lessons.job_runner)
STATUS_TICKER = Ticker(STATUS_TICK_MS)
QUEUE_TICKER = Ticker(QUEUE_POLL_MS)
