"""For comparison: the class bench's students as Bokeh client sessions (`python
bench/lab/classroom.py --bokeh-clients`). Why the protocol students are the default:
bench/lab/students.py."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

from bench.lab.students import Reader
from bench.web.served_app import SKIP_PREDICTION


@dataclass
class BokehStudent(Reader):
    """A reader as a Bokeh client session (bokeh.client.pull_session) in a thread of its own: it
    rebuilds the page as Bokeh models and applies every patch to them (`--bokeh-clients`)."""

    _session: object = None
    _thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True, name=f"student-{self.n}")
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        import panel.models  # noqa: F401 (registers Panel's Bokeh models, so the client can read the page)
        from bokeh.client import pull_session
        from bokeh.events import DocumentReady

        self.opened_at, self.opened_unix = time.monotonic(), time.time()
        cpu = time.thread_time()  # pull_session runs its connection's loop on this thread
        try:
            try:
                session = pull_session(url=f"{self.url}/app", arguments=self.args)
            except Exception as e:  # a refused or failed connection: a finding, not a crash
                self.error = f"{type(e).__name__}: {e}"
                return
            self._session = session
            self.pulled_s = time.monotonic() - self.opened_at
            self.pull_cpu_s = time.thread_time() - cpu
            self.session_id = session.id
            if self._closing:  # left while the page was still loading (a busy server)
                session.close()
                return
            session.document.on_change(self._changed)
            if self.ready:
                session.document.callbacks.send_event(DocumentReady())  # the browser's "loaded"
                self.ready_s = time.monotonic() - self.opened_at
                self._skip_prediction()
            try:
                session._loop_until_closed()  # process the server's updates until closed
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
        finally:
            self.cpu_s = time.thread_time() - cpu

    def _skip_prediction(self) -> None:
        """Click the lesson's skip button once it is on the page (on this session's thread)."""
        from bokeh.events import ButtonClick
        from bokeh.models import Button

        if self._skipped:
            return
        for model in list(self._session.document.models):
            if isinstance(model, Button) and model.label == SKIP_PREDICTION:
                self._skipped = True
                self._session.document.callbacks.send_event(ButtonClick(model))
                self.skip_s = time.monotonic() - self.opened_at
                return

    def _changed(self, event) -> None:
        """Every change the server sends, on this session's thread."""
        now = time.monotonic()
        if self.ready and not self._skipped:
            self._skip_prediction()
        new = getattr(event, "new", None)
        if isinstance(new, str):
            self._saw_text(new, now)
        if self._pending is not None:
            source = self._session.document.get_model_by_name("points")
            self._saw_batches(list(source.data.get("batch", [])) if source is not None else [],
                              now)

    def release(self) -> None:
        """Move the lesson's slider to another value and release it (from any thread)."""
        if self._session is None or self.slider is None or self._pending is not None:
            return
        title, values = self.slider
        value = self.rng.choice(values)

        def move() -> None:
            from bokeh.document.events import ModelChangedEvent
            from bokeh.models import Slider

            sliders = [m for m in self._session.document.models
                       if isinstance(m, Slider) and title in (m.title or "")]
            if not sliders or sliders[0].value == value:
                return
            self._pend(value)
            slider = sliders[0]
            slider.value = value
            # A mouse release sends value_throttled, which a Bokeh client may not set (it is
            # read-only in Python): send the same change the browser's release sends.
            self._session._document_patched(ModelChangedEvent(
                self._session.document, slider, "value_throttled", value))

        self._session._connection.io_loop.add_callback(move)

    def close(self) -> None:
        """Leave (from any thread): the session closes now, or as soon as its page has loaded
        (without that, a reader who left during a slow load stayed connected for good: in the
        lead's churn run the server had opened 110 connections and closed 11 by the 100th
        reader)."""
        self._closing = True
        session = self._session
        if session is not None:
            session._connection.io_loop.add_callback(session.close)


def deep_client_stacks() -> None:
    """A Bokeh client session handles each message the server sends one await deeper than the
    last (bokeh.client.connection: _handle_messages awaits _next, which awaits the next
    _handle_messages), so a session that gets a few hundred page updates hits Python's recursion
    limit and stops listening (a RecursionError in a long class). A student
    lives for a class: give its thread room for tens of thousands of messages."""
    sys.setrecursionlimit(200_000)
    threading.stack_size(512 * 2**20)  # address space only, until used
