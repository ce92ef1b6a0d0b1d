"""The class run's pages and routes against the real engine service (its worker, the tiny
engine): the JSON routes apply with the teacher's key; the console starts the run, changes a knob
and stops it; a student's request goes in from the student page and comes back as their own TTFT
and gaps, picked out in the class's charts; a bound's refusal is shown in plain words (a burst
past the per-minute bound: what went, and why the rest did not)."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager

import panel as pn
import pytest
from bokeh.document import Document
from helpers import wait_until
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.testing import bind_unused_port
from tornado.web import Application

from engine.lab.client import EngineService
from lessons.classroom import teacher_key
from lessons.classroom.console import ClassConsole
from lessons.classroom.feed import ClassFeed
from lessons.classroom.student import StudentPage
from lessons.shell import routes

KEY = "console-live-key"
TIMEOUT = 180  # the worker's start and the tiny engine's build on a busy machine: a bound


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("llm-speed-cache")
    mp.setenv("LLM_SPEED_CACHE", str(path))  # the worker inherits it
    svc = EngineService(cache_path=path / "results", remeasures=0)
    yield svc
    svc.class_stop()
    svc.shutdown()
    mp.undo()


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(teacher_key.ENV, KEY)
    teacher_key.forget_key()
    yield KEY
    teacher_key.forget_key()


@contextmanager
def served_routes(service):
    """The class routes on a Tornado server of their own (a thread), as app.py registers them."""
    sock, port = bind_unused_port()
    started = threading.Event()
    loops: list[IOLoop] = []

    def serve():
        asyncio.set_event_loop(asyncio.new_event_loop())
        app = Application([(p, h, {"service": service}) for p, h, _ in routes.CLASS_ROUTES])
        HTTPServer(app).add_sockets([sock])
        loops.append(IOLoop.current())
        started.set()
        IOLoop.current().start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loops[0].add_callback(loops[0].stop)
        thread.join(10)


def post(url: str, body: dict | None = None, key: str | None = None,
         cookie: str | None = None) -> tuple[int, dict]:
    headers = {"X-Teacher-Key": key} if key else {}
    if cookie:  # as the console's browser sends it
        headers["Cookie"] = f"{teacher_key.COOKIE}={cookie}"
    request = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_routes_apply_with_the_key(service):
    with served_routes(service) as url:
        assert post(f"{url}/class/start", {"max_batch": 4})[0] == 403
        assert not service.class_active()  # refused: nothing started
        status, answer = post(f"{url}/class/start", {"max_batch": 4, "max_tokens": 8}, KEY)
        assert status == 200 and answer["settings"]["max_batch"] == 4, answer
        assert service.class_active()
        status, answer = post(f"{url}/class/knobs", {"policy": "static"}, KEY)
        assert status == 200 and answer["applied"] == {"policy": "static"}, answer
        wait_until(lambda: service.class_snapshot()["knob_changes"], TIMEOUT,
                   "the knob change to be applied")
        change = service.class_snapshot()["knob_changes"][-1]
        assert change["changes"] == {"policy": "static"} and change["by"] == "teacher"
        status, answer = post(f"{url}/class/knobs", {"max_batch": -3}, KEY)
        assert status == 400 and answer["ok"] is False and "max_batch" in answer["reason"]
        status, answer = post(f"{url}/class/stop", None, cookie=KEY)
        assert status == 200 and answer["ok"] is True
        assert not service.class_active()


def test_console_and_student_pages_drive_one_live_run(service):
    feed = ClassFeed()
    console = ClassConsole(service=service, feed=feed, key=KEY)
    student = StudentPage(service=service, feed=feed, student="reader-1", max_tokens=64)
    for page in (console, student):
        pn.panel(page).get_root(Document())
    console.param.update(max_batch=4)
    settings = console.start_run()
    assert settings is not None and settings["max_batch"] == 4
    wait_until(lambda: service.class_snapshot()["ready"], TIMEOUT, "the class run to start")
    service.class_stop()  # the same run again, asking for few tokens: a short test
    service.class_start({**settings, "max_tokens": 6})
    wait_until(lambda: service.class_snapshot()["ready"], TIMEOUT, "the class run to start")
    feed.poll(service, force=True)

    sent = student.send(2)
    assert len(sent) == 2 and all(r.request_id for r in sent)

    def student_done():
        student.own_tick()
        return all(r.state == "finished" for r in sent)

    wait_until(student_done, TIMEOUT, "the student's requests to finish")
    assert all(r.ttft_ms > 0 and 1 <= len(r.token_t_s) <= 6 and r.text for r in sent)  # the cap
    assert "finished" in student.own.object

    def drawn():
        feed.poll(service, force=True)
        student.live.draw()
        return sum(student.live.ttft.mine.data["count"]) == 2
    wait_until(drawn, TIMEOUT, "the student's TTFTs in the class's histogram")
    assert "2 of them yours" in student.live.lanes.text.sentence

    console.param.update(chunked=True, chunk_size=32)
    applied = console.apply_knobs()
    assert applied is not None and applied["applied"] == {"chunk_size": 32}

    def marked():
        console.live.tick_now()
        student.live.draw()
        return console.live.marks.source.data["label"] == ["chunked prefill on (32 tokens a step)"]
    wait_until(marked, TIMEOUT, "the knob change on the console's charts")
    assert "the teacher changed: chunked prefill on (32 tokens a step)" in student.changes.object
    assert console.live.steps.count > 0 and console.live.load.source.data["t_s"]

    assert len(student.send(10)) == 10  # 12 in this minute: under the bound of 20
    assert len(student.send(10)) == 8
    assert "The other 2 were not sent: You have sent 20 requests in the last minute" in (
        student.message.object)

    console.stop_run()
    assert not service.class_active()
    refused = student.send(1)
    assert refused == [] and "not live" in student.message.object
