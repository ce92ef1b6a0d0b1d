"""SessionJobs in a served session (a real Panel server and a Bokeh client session, no browser):
a burst of token events arrives in a few frames, none lost, in order. The frames are counted
against the time the events took to send: a wall-clock bound, so this runs alone."""

from __future__ import annotations

import math
import socket
import threading
import time

import panel as pn
from bokeh.client import pull_session

from engine.lab.events import JobEvent
from lessons.session_jobs import FRAME_S, SessionJobs


def test_a_burst_of_token_events_reaches_the_page_in_few_frames_none_lost_in_order():
    made: dict = {}
    ready = threading.Event()

    def app():
        made["jobs"] = SessionJobs()
        ready.set()
        return pn.pane.Markdown("frames")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = pn.serve({"/frames": app}, port=port, address="127.0.0.1", threaded=True,
                      show=False, websocket_origin=[f"127.0.0.1:{port}"])
    session = None
    try:
        deadline = time.monotonic() + 30
        while session is None:
            try:
                session = pull_session(url=f"http://127.0.0.1:{port}/frames")
            except OSError:  # the server thread is still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert ready.wait(30)
        jobs = made["jobs"]
        assert jobs.served
        seen: list[tuple[int, int]] = []  # (token index, frame it came in)
        done = threading.Event()
        count = 400

        def handler(event: JobEvent) -> None:
            seen.append((event.data["index"], jobs.frames))
            if len(seen) == count:
                done.set()

        start = time.monotonic()
        for i in range(count):  # as the engine service's thread delivers a stream of tokens
            jobs._receive(handler, JobEvent(1, "generate", "token", {"index": i, "t_s": i}))
            time.sleep(0.001)
        sent_s = time.monotonic() - start
        assert done.wait(30), len(seen)
        assert [i for i, _ in seen] == list(range(count))  # none lost, order kept
        frames = len({frame for _, frame in seen})
        assert frames <= math.ceil(sent_s / FRAME_S) + 2  # at most one a frame period
        assert frames < count / 10  # each frame carried many tokens
    finally:
        if session is not None:
            session.close()
        server.stop()
        server.join(30)  # stopped before the next test resets Panel's state
