"""What a closed session leaves behind in the web process: nothing. The app is served in this
process (pn.serve, threaded), readers come and go as Bokeh client sessions that send the
browser's "document ready" event (so every lesson starts its measurements), and once the server
has discarded their sessions no Bokeh document, page, periodic callback or engine job of theirs is
alive. Readers arrive as a class does, a lesson's worth at once (their stays overlap, so the
test waits one stay per round, not one per reader), then the same again. The same with 500
sessions and the process's memory, against a served app: python bench/lab/classroom.py --churn 500."""

from __future__ import annotations

import gc
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import panel as pn
import pytest
from bokeh.client import pull_session
from bokeh.document import Document
from bokeh.events import DocumentReady
from helpers import seed_machine_setup, wait_until

from bench.web.served_app import free_port
from engine.lab import client, cores
from lessons.base import LessonPage
from lessons.registry import LESSONS
from lessons.session_jobs import SessionJobs

HOLD_S = 1.0  # each reader stays this long: long enough for jobs to be queued and running
WAIT_S = 60.0


@pytest.fixture
def served_app(tmp_path, monkeypatch, machine_setup):
    # the worker's cache: this test's, as a set-up machine has it
    monkeypatch.setenv("LLM_SPEED_CACHE", str(seed_machine_setup(machine_setup, tmp_path)))
    from lessons.shell.router import build_page

    port = free_port()
    allowed = cores.available_cores()  # the app's service pins this process to the web's cores
    server = pn.serve({"/app": build_page}, port=port, address="127.0.0.1", threaded=True,
                      show=False, websocket_origin=[f"127.0.0.1:{port}"],
                      unused_session_lifetime_milliseconds=300,
                      check_unused_sessions_milliseconds=100)
    try:
        wait_for(lambda: listening(port), "a server listening")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        if client._service is not None:
            client._service.shutdown()
            client._service = None
        cores.pin(0, allowed)  # given back: later tests (and the servers they start) get them all


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def visit(url: str, args: dict) -> None:
    """A reader opens the page, its browser says "loaded", and it leaves after HOLD_S."""
    session = pull_session(url=f"{url}/app", arguments=args)
    session.document.callbacks.send_event(DocumentReady())
    timer = threading.Timer(HOLD_S, lambda: session._connection.io_loop.add_callback(
        session.close))
    timer.start()
    session._loop_until_closed()
    timer.join()


def visit_together(url: str, pages: list[dict]) -> None:
    """Readers open these pages at once, each in a thread of its own (a Bokeh client session runs
    its own event loop), and each leaves HOLD_S after its page loaded; a reader's error is
    raised here."""
    with ThreadPoolExecutor(max_workers=len(pages)) as readers:
        list(readers.map(lambda args: visit(url, args), pages))


def alive(kind: type) -> list:
    """Every live object of `kind`. The test is by the object's real type: isinstance() falls back
    to an object's __class__, and on torch's deprecated module aliases that lookup warns."""
    gc.collect()
    return [o for o in gc.get_objects() if issubclass(type(o), kind)]


def wait_for(predicate, what: str) -> None:
    """Poll every 0.2 s (the server discards closed sessions on its own timer)."""
    wait_until(predicate, WAIT_S, what, every_s=0.2)


def new_since(before: list, kind: type) -> list:
    """The objects of a kind alive now that were not alive before (other tests in this process
    may keep pages and documents of their own)."""
    return [o for o in alive(kind) if not any(o is b for b in before)]


# A page's URL settings that keep its jobs short: a running job holds its page until it ends, and
# building the roofline's default (small) preset cannot be stopped half way.
SHORT = {"roofline": {"preset": "tiny", "max_batch": "4", "max_prompt": "64"}}


def test_closed_sessions_leave_nothing_behind(served_app):
    pages_before, docs_before = alive(LessonPage), alive(Document)
    periodic_before, docs_with_jobs_before = set(pn.state._periodic), set(SessionJobs._by_doc)
    pages = [{"lesson": info.slug, **SHORT.get(info.slug, {})} for info in LESSONS]
    for _ in range(2):  # a second class after the first has closed its pages
        visit_together(served_app, pages + [{"page": "about"}, {}])
    service = client.get_service()
    # first the engine: a closed session's queued jobs are cancelled, its running one stops at
    # its next step; until then the job's handler holds its page
    wait_for(lambda: not service.status()["queued"] and not service.status()["running"],
             "no engine jobs of closed sessions")
    wait_for(lambda: not new_since(pages_before, LessonPage), "no lesson pages alive")
    wait_for(lambda: not set(pn.state._periodic) - periodic_before,
             "no periodic callbacks registered")
    assert [d for d in new_since(docs_before, Document) if d.session_context is not None] == []
    assert not set(SessionJobs._by_doc) - docs_with_jobs_before
    assert service._dispatcher.queue._served == {}  # the queue forgets readers who left
