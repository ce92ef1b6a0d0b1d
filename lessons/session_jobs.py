"""Engine jobs for one browser session, with their events delivered on that session's own event
loop.

The engine service calls back on its dispatcher thread; Bokeh models may only be changed on the
session's loop, holding its document lock. So events are buffered here and flushed in one next-tick
callback (pn.state.execute with the session's document), many at a time under pn.io.hold, which
sends a burst of token or progress events to the browser as one message.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from engine.lab.client import EngineService, get_service
from engine.lab.events import Job, JobEvent

log = logging.getLogger(__name__)

Handler = Callable[[JobEvent], None]


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
        self.closed = False
        self.jobs: list[Job] = []
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
        if handler is None or self.closed:
            return
        if not self.served:
            handler(event)
            return
        with self._lock:
            self._batch.append((handler, event))
            if self._scheduled:
                return
            self._scheduled = True
        with set_curdoc(self.doc):
            pn.state.execute(self._flush, schedule=True)

    def _flush(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
            self._scheduled = False
        if self.closed or not batch:
            return
        with set_curdoc(self.doc), pn.io.hold(self.doc):
            for handler, event in batch:
                try:
                    handler(event)
                except Exception:  # one widget's bug must not drop the other events
                    log.exception("handling %s event of job %s failed", event.type,
                                  event.job_id)

    def _session_destroyed(self, session_context) -> None:
        self.closed = True
        if self.doc is not None:
            with SessionJobs._by_doc_lock:  # the entry would keep the document alive otherwise
                SessionJobs._by_doc.pop(self.doc, None)
        if self.session_id is not None and self.jobs:  # never start a service just to cancel
            self.service.cancel_session(self.session_id)
