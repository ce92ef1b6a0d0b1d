"""Engine jobs for one browser session, with their events delivered on that session's own event
loop.

The engine service calls back on its dispatcher thread; Bokeh models may only be changed on the
session's loop, holding its document lock. So events are buffered here and flushed in frames: at
most one every FRAME_S (20 a second) per session, each carrying every event since the last, all
handled under one pn.io.hold, so a burst of token or step events reaches the browser as one
update. The first event after a pause is flushed at once (on the next tick); later ones wait for
the next frame. The web server's work thus grows with frames, not with tokens, and never
competes with a timed step for long; the engine's own timestamps stay per token (they travel in
the events), and the browser's clock (widgets.browser_clock) stamps each row when it is drawn.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from engine.lab.client import EngineService, get_service
from engine.lab.events import Job, JobEvent
from widgets.runtime.doc_hold import model_index_held
from widgets.runtime.frame import one_frame

log = logging.getLogger(__name__)

Handler = Callable[[JobEvent], None]
FRAME_S = 0.05  # at most 20 frames a second per session


class SessionJobs:
    """Submit engine jobs on behalf of one session; cancel them when the session closes."""

    _by_doc: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    _by_doc_lock = threading.Lock()

    def __init__(self, doc: Document | None = None, service: EngineService | None = None):
        self.doc = doc if doc is not None else pn.state.curdoc
        context = self.doc.session_context if self.doc is not None else None
        self.session_id: str | None = context.id if context is not None else None
        self._service = service
        self._lock = threading.Lock()
        self._batch: list[tuple[Handler, JobEvent]] = []
        self._scheduled = False
        self._last_frame = -float("inf")  # time.monotonic() of the last flush
        self.frames = 0  # flushes so far (each one frame of updates to the browser)
        self.closed = False
        self.jobs: list[Job] = []
        self._for_session = context is not None  # served once: never handled off its loop
        if context is not None:
            self.doc.on_session_destroyed(self._session_destroyed)

    @classmethod
    def for_session(cls, doc: Document | None = None) -> SessionJobs:
        """The one SessionJobs of the current (or given) session's document."""
        doc = doc if doc is not None else pn.state.curdoc
        if doc is None:
            return cls(None)
        with cls._by_doc_lock:
            jobs = cls._by_doc.get(doc)
            if jobs is None:
                jobs = cls._by_doc[doc] = cls(doc)
            return jobs

    @property
    def service(self) -> EngineService:
        return self._service or get_service()

    @property
    def served(self) -> bool:
        """True inside a served session; outside one (tests, scripts) events are handled at once
        on the service's thread."""
        return self.doc is not None and self.doc.session_context is not None

    def submit(self, kind: str, params: dict | None = None, on_event: Handler | None = None,
               use_cache: bool = True, **queue: Any) -> Job:
        """Queue an engine job; on_event(event) runs on this session's loop for each event.
        `queue`: the service's demo, replace and nearby (engine.lab.client.EngineService.submit)."""
        self.jobs = [j for j in self.jobs if not j.finished]
        job = self.service.submit(kind, params, on_event=partial(self._receive, on_event),
                                  session_id=self.session_id, use_cache=use_cache, **queue)
        self.jobs.append(job)
        return job

    def cancel(self, job: Job) -> bool:
        return self.service.cancel(job)

    def cancel_all(self) -> int:
        return sum(self.service.cancel(j) for j in self.jobs if not j.finished)

    # ---- from the service's thread to the session's loop ---------------------------------
    def _receive(self, handler: Handler | None, event: JobEvent) -> None:
        if handler is None or self._gone():
            return
        if not self.served:  # never a session (tests, scripts): at once, on this thread
            handler(event)
            return
        with self._lock:
            self._batch.append((handler, event))
            if self._scheduled:
                return  # the next frame takes it
            self._scheduled = True
            wait_s = self._last_frame + FRAME_S - time.monotonic()
        with set_curdoc(self.doc):
            if wait_s <= 0:
                pn.state.execute(self._flush, schedule=True)
            else:  # a timeout is set from the loop itself (Bokeh's next tick is the thread-safe way in)
                pn.state.execute(partial(self._flush_in, wait_s), schedule=True)

    def _flush_in(self, wait_s: float) -> None:
        self.doc.add_timeout_callback(self._flush, max(1, round(1000 * wait_s)))

    def _flush(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
            self._scheduled = False
            self._last_frame = time.monotonic()
            self.frames += 1
        if self._gone() or not batch:
            return
        # the page's model index is recomputed at most once for the frame, not once for every
        # pane a handler updates (Bokeh walks every model of the page each time, a large share
        # of the web process's time while a class arrives), and not at all when no handler
        # changed the page's models (widgets.doc_hold.model_index_held)
        # and what many events of the frame redraw is redrawn once, after them (widgets.frame)
        with (set_curdoc(self.doc), pn.io.hold(self.doc), model_index_held(self.doc),
              one_frame()):
            for handler, event in batch:
                try:
                    handler(event)
                except Exception:  # one widget's bug must not drop the other events
                    log.exception("handling %s event of job %s failed", event.type,
                                  event.job_id)

    def _gone(self) -> bool:
        """Closed, or made for a session whose document is destroyed (Bokeh clears its models'
        data; Panel's destroy sets no session context) before the session-destroyed hook set
        `closed`: Bokeh destroys the document under its lock and runs the hooks after, and a
        frame already waiting for that lock, or an event arriving on the service's thread,
        comes in between. A handler would read emptied models (a KeyError in
        RequestLanes._patch on three-schedules, in a frame, or on the service's thread, which
        would take the destroyed session for one never served and run the handler there)."""
        if not self.closed and self._for_session and not self.served:
            self.closed = True
        return self.closed

    def _session_destroyed(self, session_context) -> None:
        self.closed = True
        if self.doc is not None:
            with SessionJobs._by_doc_lock:  # the entry would keep the document alive otherwise
                SessionJobs._by_doc.pop(self.doc, None)
        if self.session_id is not None and self.jobs:  # never start a service just to cancel
            self.service.cancel_session(self.session_id)
