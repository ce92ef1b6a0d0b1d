"""The class bench's students: readers of a served lesson page that cost the web server what a
browser costs it and almost nothing more to run.

A student speaks the Bokeh server's websocket protocol itself (ProtocolStudent), as BokehJS
does in a browser: a session id and token (bokeh.util.token), the app's /ws endpoint with the
"bokeh" subprotocol, ACK, PULL-DOC-REQ and its reply, then PATCH-DOC messages both ways. It reads
the document and the patches as JSON and keeps only the few models it needs (the skip button,
the slider it moves, the knob chart's "points" source); it builds no Bokeh model. It sends
exactly what a browser sends: the document-ready event (Panel runs the page's onload on it, so
the lesson starts as in a browser), the skip button's click, and a slider's value followed by
its value_throttled (a mouse release). Every student of a class is a coroutine on one asyncio
loop in a thread of its own (StudentLoop).

Why not Bokeh client sessions (BokehStudent in bench/lab/bokeh_students.py, kept for
comparison: `python bench/lab/classroom.py --bokeh-clients`): those run one thread each in the
bench's one process, rebuilding every page as Bokeh models and applying every patch of every open
page to them. With a class of them on the web server's core they wait for the GIL and the core,
so part of each "first number" measures the load generator, not the server. A class's browsers
are on other machines and cost the web core only the protocol.

What the server sees is what it sees from those clients: the same websocket URL with the page's
settings as its query, the same token (no HTTP page request first, as with pull_session), the
same events. One difference: a Bokeh client's first model reference (the skip click) carries the
whole Button, which the server logs as "BokehUserWarning: reference already known"; a browser,
and a ProtocolStudent, send the reference alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

from bokeh.util.token import generate_jwt_token, generate_session_id
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClosedError, websocket_connect

from bench.lab.bokeh_wire import (
    Assembler,
    button_click,
    decode,
    document_ready,
    message,
    model_changed,
    walk_objects,
)
from bench.web.served_app import SKIP_PREDICTION

SHOWN = re.compile(r"measured live|cached: measured|nearby")  # a number on the page, and whence
PARTIAL = re.compile(r"measured live so far")  # a run's figure while it goes on (job_status)
CONNECT_TIMEOUT_S = 120.0  # the websocket handshake on a busy server
PULL_TIMEOUT_S = 120.0  # the page's document after asking for it
MAX_MESSAGE_BYTES = 20 * 2**20  # as bokeh.client


# ---- a student ---------------------------------------------------------------------------------
@dataclass
class Reader:
    """What every kind of student records: one reader on one lesson page (its URL), from opening
    it to its first number, and each slider release to its result."""

    n: int
    url: str
    slug: str
    args: dict  # the page's query: {"lesson": slug, settings...}
    slider: tuple[str, list] | None  # the slider's title and the values it is moved to
    rng: random.Random
    ready: bool = True  # send the ready event and skip; without: only load the page (warm-up)
    opened_at: float = 0.0
    opened_unix: float = 0.0  # the same moment on the wall clock, to match the server's log
    first_number_s: float | None = None
    first_result_s: float | None = None  # the first full result (no partial figure)
    releases: list[dict] = field(default_factory=list)  # {"value", "at", "drawn_s"}
    error: str = ""
    # the arrival's timeline (seconds after opening): the document received, the ready event and
    # the skip click sent
    pulled_s: float | None = None
    pull_cpu_s: float | None = None  # of which its own CPU (reading, or rebuilding, the page)
    cpu_s: float | None = None  # its own CPU over its whole visit
    ready_s: float | None = None
    skip_s: float | None = None
    session_id: str = ""
    _skipped: bool = False
    _closing: bool = False  # close() came: a page still loading is closed once it has loaded
    _pending: dict | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _saw_text(self, text: str, now: float) -> None:
        """A text the server set on the page: its first number, or a release's result."""
        if not SHOWN.search(text):
            return
        partial = PARTIAL.search(text) is not None
        if self.first_number_s is None:
            self.first_number_s = now - self.opened_at
        if self.first_result_s is None and not partial:
            self.first_result_s = now - self.opened_at
        with self._lock:
            pending = self._pending
        if pending and pending["kind"] == "shown" and now > pending["at"] and not partial:
            self._drawn(now)

    def _saw_batches(self, batches, now: float) -> None:
        """The knob chart's points as they are now: a released batch among them is drawn."""
        with self._lock:
            pending = self._pending
        if pending and pending["kind"] == "point" and pending["value"] in batches:
            self._drawn(now)

    def _drawn(self, now: float) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending["drawn_s"] = now - self._pending["at"]
                self.releases.append(self._pending)
                self._pending = None

    def _pend(self, value) -> None:
        kind = "point" if self.slug == "knob" else "shown"
        with self._lock:
            self._pending = {"slider": self.slider[0], "value": value, "kind": kind,
                             "at": time.monotonic(), "drawn_s": None}


class StudentLoop:
    """One asyncio loop, in a thread of its own, for every ProtocolStudent of a run. Its thread
    keeps the niceness and cores of the thread that made it (Linux keeps both per thread).

    It also times itself: a timer every LAG_EVERY_S notes how late it ran (lags: (when, seconds
    late)). A late timer is a student that could not read what the server had sent: the loop
    busy with other students, or its thread kept from the core."""

    LAG_EVERY_S = 0.1

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.lags: list[tuple[float, float]] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="students")
        self.thread.start()
        self.submit(self._time_itself())

    async def _time_itself(self) -> None:
        while True:
            due = time.monotonic() + self.LAG_EVERY_S
            await asyncio.sleep(self.LAG_EVERY_S)
            now = time.monotonic()
            self.lags.append((now, now - due))

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def cpu_s(self) -> float:
        """The loop thread's CPU seconds so far: every student's share and the loop's own."""
        return time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class ProtocolStudent(Reader):
    """A reader speaking the Bokeh server protocol directly (see the module's docstring)."""

    loop: StudentLoop | None = None
    _future: concurrent.futures.Future | None = None
    _socket: object = None
    _assembler: Assembler = field(default_factory=Assembler)
    _models: dict = field(default_factory=dict)  # id -> the model's JSON, as last seen
    _points: str | None = None  # the id of the knob chart's "points" source
    _batches: list = field(default_factory=list)  # its batch column

    # -- the bench's side (any thread) --
    @property
    def started(self) -> bool:
        return self._future is not None

    def start(self) -> None:
        self._future = self.loop.submit(self.run())

    def join(self, timeout: float) -> None:
        if self._future is not None:
            concurrent.futures.wait([self._future], timeout)

    def release(self) -> None:
        """Move the lesson's slider to another value and release it."""
        if self._socket is None or self.slider is None or self._pending is not None:
            return
        self.loop.call(self._move, self.rng.choice(self.slider[1]))

    def close(self) -> None:
        """Leave: the websocket closes now, or as soon as the page has loaded."""
        self._closing = True
        if self.loop is not None:
            self.loop.call(self._close)

    # -- on the students' loop --
    async def run(self) -> None:
        self.opened_at, self.opened_unix = time.monotonic(), time.time()
        self.cpu_s = 0.0
        self.session_id = generate_session_id()
        host = self.url.split("://", 1)[1]
        request = HTTPRequest(f"ws://{host}/app/ws?{urlencode(self.args)}",
                              connect_timeout=CONNECT_TIMEOUT_S,
                              request_timeout=CONNECT_TIMEOUT_S)
        try:
            self._socket = await websocket_connect(
                request, subprotocols=["bokeh", generate_jwt_token(self.session_id)],
                max_message_size=MAX_MESSAGE_BYTES)
            doc = await asyncio.wait_for(self._pull(), PULL_TIMEOUT_S)
        except Exception as e:  # a refused, failed or timed-out connection: a finding, not a crash
            if not self._closing:  # (not a reader who left while the page loaded)
                self.error = f"{type(e).__name__}: {e}"
            self._close()
            return
        now = time.monotonic()
        with self._cpu():
            self._read_document(doc)
        self.pulled_s, self.pull_cpu_s = now - self.opened_at, self.cpu_s
        if self._closing:
            self._close()
            return
        if self.ready:
            await self._send(document_ready())
            self.ready_s = time.monotonic() - self.opened_at
            await self._skip_prediction()
        try:
            await self._listen()
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self._close()

    async def _read(self) -> dict | None:
        """The server's next whole message; None once the connection is closed."""
        while True:
            fragment = await self._socket.read_message()
            if fragment is None:
                return None
            with self._cpu():
                msg = self._assembler.consume(fragment)
            if msg is not None:
                return msg

    async def _pull(self) -> dict:
        """ACK, then the page's document (PULL-DOC-REPLY to our request): its JSON."""
        ack = await self._read()
        if ack is None or ack["header"]["msgtype"] != "ACK":
            raise ConnectionError(f"no ACK from the server ({ack and ack['header']})")
        request = message("PULL-DOC-REQ", {})
        msgid = json.loads(request[0])["msgid"]
        await self._write(request)
        while True:  # what comes before the reply is in the document the reply holds
            msg = await self._read()
            if msg is None:
                raise ConnectionError("the server closed the connection before the document")
            if msg["header"].get("reqid") == msgid:
                if msg["header"]["msgtype"] == "ERROR":
                    raise RuntimeError(f"pulling the document: {msg['content'].get('text')}")
                return msg

    def _read_document(self, msg: dict) -> None:
        walk_objects(msg["content"]["doc"], self._models)
        for model_id, model in self._models.items():
            if model.get("attributes", {}).get("name") == "points":
                self._points = model_id
                data = decode(model["attributes"].get("data", {}), msg["buffers"])
                self._batches = list(data.get("batch", []))

    async def _listen(self) -> None:
        """Every message the server sends until the connection closes: the page's changes."""
        while True:
            msg = await self._read()
            if msg is None:
                return
            if msg["header"]["msgtype"] != "PATCH-DOC":
                continue
            now = time.monotonic()
            with self._cpu():
                for event in msg["content"].get("events", []):
                    self._patched(event, msg["buffers"], now)
                if self._pending is not None:
                    self._saw_batches(self._batches, now)
            if self.ready and not self._skipped:
                await self._skip_prediction()

    def _patched(self, event: dict, buffers: dict, now: float) -> None:
        """One change of the page: keep the models we read up to date, and note a number."""
        kind = event.get("kind")
        target = (event.get("model") or {}).get("id")
        if kind == "ModelChanged":
            new = event.get("new")
            walk_objects(new, self._models)
            model = self._models.get(target)
            if model is not None:
                model.setdefault("attributes", {})[event["attr"]] = new
            if target == self._points and event["attr"] == "data":
                self._batches = list(decode(new, buffers).get("batch", []))
            if isinstance(new, str):
                self._saw_text(new, now)
        elif kind == "RootAdded":
            walk_objects(event.get("model"), self._models)
        elif target is not None and target == self._points:
            self._patch_points(kind, event, buffers)

    def _patch_points(self, kind: str, event: dict, buffers: dict) -> None:
        """A change to the knob chart's points: all new columns, rows added, or cells set."""
        if kind == "ColumnDataChanged":
            data = decode(event.get("data"), buffers)
            if "batch" in data:
                self._batches = list(data["batch"])
        elif kind == "ColumnsStreamed":
            added = list(decode(event.get("data"), buffers).get("batch", []))
            rollover = event.get("rollover")
            self._batches = self._batches + added
            if rollover:
                self._batches = self._batches[-rollover:]
        elif kind == "ColumnsPatched":
            for index, value in decode(event.get("patches"), buffers).get("batch", []):
                if isinstance(index, int) and index < len(self._batches):
                    self._batches[index] = value

    async def _skip_prediction(self) -> None:
        """Click the lesson's skip button once it is on the page."""
        if self._skipped:
            return
        button = next((i for i, m in self._models.items()
                       if m.get("attributes", {}).get("label") == SKIP_PREDICTION), None)
        if button is not None:
            self._skipped = True
            await self._send(button_click(button))
            self.skip_s = time.monotonic() - self.opened_at

    def _move(self, value) -> None:
        """Set the slider to `value` and release it, as a mouse does: its value, then its
        value_throttled (the one the lessons measure on)."""
        if self._socket is None or self._pending is not None:
            return
        title = self.slider[0]
        slider = next((i for i, m in self._models.items()
                       if m.get("name", "").endswith("Slider")
                       and title in (m.get("attributes", {}).get("title") or "")), None)
        if slider is None or self._models[slider]["attributes"].get("value") == value:
            return
        self._pend(value)
        self._models[slider]["attributes"]["value"] = value
        asyncio.ensure_future(self._release(slider, value))

    async def _release(self, slider: str, value) -> None:
        await self._send(model_changed(slider, "value", value))
        await self._send(model_changed(slider, "value_throttled", value))

    async def _send(self, content: dict) -> None:
        await self._write(message("PATCH-DOC", content))

    async def _write(self, fragments: list[str]) -> None:
        """A message's fragments, written back to back (the loop runs nothing in between, so no
        other message of this student interleaves); a closed connection is not an error."""
        try:
            await asyncio.gather(*[self._socket.write_message(f) for f in fragments])
        except WebSocketClosedError:
            pass

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close(1000, "closed")

    @contextlib.contextmanager
    def _cpu(self):
        """Adds the CPU time of a synchronous step to this student's cpu_s: the loop thread runs
        one student's step at a time, so its thread time between two awaits is that student's."""
        t0 = time.thread_time()
        try:
            yield
        finally:
            self.cpu_s += time.thread_time() - t0

