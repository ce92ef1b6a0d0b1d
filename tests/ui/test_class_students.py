"""The class bench's students (bench/lab/students.py): a protocol student speaks Bokeh's websocket
protocol without Bokeh models, so what it sends must be what Bokeh and BokehJS send, and on a
served lesson it must get what a reader gets: the page, a number once it has sent the ready event
and skipped, and a released slider's point. No browser: the served app and a websocket."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import time

import numpy as np
from bokeh.document import Document
from bokeh.document.events import ColumnsStreamedEvent, MessageSentEvent, ModelChangedEvent
from bokeh.events import DocumentReady
from bokeh.models import Button, Column, ColumnDataSource, Slider
from bokeh.protocol import Protocol

from bench.lab.students import (
    Assembler,
    ProtocolStudent,
    StudentLoop,
    decode,
    document_ready,
    model_changed,
    walk_objects,
)

WAIT_S = 60.0  # a first knob point on tiny comes within a few seconds; a bound, not a target


def fragments(msg) -> list:
    """The websocket fragments Bokeh's server writes for a message, in order."""
    out: list = []

    class Lock:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    class Conn:
        class write_lock:  # noqa: N801 (the attribute Bokeh's Message.send uses)
            @staticmethod
            async def acquire():
                return Lock()

        async def write_message(self, fragment, binary=False, locked=True):
            out.append(fragment)

    # in a thread of its own: in the whole suite a Playwright test before this one leaves an
    # event loop running in the main thread, and asyncio.run refuses to start inside it
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, msg.send(Conn())).result()
    return out


def test_a_student_writes_and_reads_what_bokeh_does():
    doc = Document()
    slider = Slider(start=1, end=64, value=4, step=1, title="Batch size")
    points = ColumnDataSource({"batch": np.array([2, 4]), "y": [1.5, float("nan")]},
                              name="points")
    doc.add_root(Column(Button(label="Skip"), slider))
    doc.add_root(points)
    protocol = Protocol()
    ready = protocol.create("PATCH-DOC", [MessageSentEvent(doc, "bokeh_event", DocumentReady())])
    assert json.loads(ready.content_json) == document_ready()
    release = protocol.create("PATCH-DOC", [ModelChangedEvent(doc, slider, "value_throttled", 8)])
    assert json.loads(release.content_json) == model_changed(slider.id, "value_throttled", 8)

    def read(msg) -> dict:
        assembler, whole = Assembler(), []
        for fragment in fragments(msg):
            whole.append(assembler.consume(fragment))
        assert all(m is None for m in whole[:-1]) and whole[-1] is not None
        return whole[-1]

    pulled = read(protocol.create("PULL-DOC-REPLY", "r1", doc))  # the batch array in a buffer
    assert pulled["buffers"]
    models: dict = {}
    walk_objects(pulled["content"]["doc"], models)
    assert models[slider.id]["attributes"]["title"] == "Batch size"
    data = decode(models[points.id]["attributes"]["data"], pulled["buffers"])
    assert data["batch"] == [2, 4] and np.isnan(data["y"][1])
    streamed = read(protocol.create("PATCH-DOC", [ColumnsStreamedEvent(
        doc, points, "data", {"batch": np.array([16])}, None)]))
    event = streamed["content"]["events"][0]
    assert decode(event["data"], streamed["buffers"]) == {"batch": [16]}


def test_a_protocol_student_reads_a_number_and_a_released_point(app_url):
    loop = StudentLoop()
    student = ProtocolStudent(0, app_url, "knob", {"lesson": "knob", "batch_size": "2"},
                              ("Batch size", [3]), random.Random(0), loop=loop)
    try:
        student.start()
        deadline = time.monotonic() + WAIT_S
        while student.first_result_s is None and time.monotonic() < deadline \
                and not student.error:
            time.sleep(0.1)
        assert not student.error
        assert student.pulled_s is not None and student.ready_s is not None
        assert student.skip_s is not None, "the skip button was not found on the page"
        assert student.first_number_s is not None, f"no number within {WAIT_S:.0f} s"
        assert 0 < student.pull_cpu_s < student.pulled_s + 1
        student.release()  # to batch 3: a point nobody measured yet
        deadline = time.monotonic() + WAIT_S
        while not student.releases and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [r["value"] for r in student.releases] == [3], "the released point was not drawn"
    finally:
        student.close()
        student.join(10)
        loop.stop()
