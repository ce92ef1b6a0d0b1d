"""The web process's one clock for open pages' timed text (widgets.ticker): a page is called
only when what it shows changes, and a page whose reader has gone is dropped."""

from __future__ import annotations

from types import SimpleNamespace

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from widgets.job_status import JobStatus
from widgets.ticker import Ticker


class Page:
    """A served session's document as the clock sees it: a session context and a next tick."""

    def __init__(self):
        self.session_context = SimpleNamespace(destroyed=False)
        self.calls = []

    def add_next_tick_callback(self, callback):
        self.calls.append(callback)

    def run_calls(self):
        calls, self.calls = self.calls, []
        for call in calls:
            call()


def test_a_class_of_waiting_pages_is_called_once_a_second_not_four_times():
    """30 readers waiting on the engine: their status lines' seconds change once a second, so
    the clock calls each page once a second (a timer per page fired 4 times a second, and sent
    nothing 3 times of 4); in between, no page is called at all."""
    clock = Ticker(250)
    pages, statuses = [Page() for _ in range(30)], []
    for page in pages:
        status = JobStatus()
        pn.panel(status).get_root()
        status.start(1, "queued behind 12 jobs")
        status._since = 100.0
        status.tick(now=100.0)
        statuses.append(status)
        clock.watch(page, status._due)
    for page in pages:
        page.calls.clear()  # the clock's own start, scheduled on the first page's loop
    called = []
    for now in (100.25, 100.5, 100.75, 101.0, 101.25, 101.4, 102.0, 102.25):
        clock.tick(now)
        called.append(sum(len(page.calls) for page in pages))
        for page in pages:
            page.run_calls()
    # "1 s" from 100.75 (rounded to the second), the bar from 101.0, "2 s" from 102.0
    assert called == [0, 0, 30, 30, 0, 0, 30, 0]
    assert all("(2 s)" in status.progress_text and status.shown for status in statuses)
    pages[0].session_context.destroyed = True  # that reader left
    statuses[1].stop()
    clock.tick(103.0)
    assert clock.watched == 29 and sum(len(page.calls) for page in pages) == 28


def test_an_unchanged_status_changes_no_model():
    status = JobStatus()
    doc = Document()
    with set_curdoc(doc):
        pn.panel(status).server_doc(doc)
    status.start(1, "measuring")
    status.tick(now=status._since + 1.2)
    changes = []
    doc.on_change(changes.append)
    assert status._due(status._since + 1.4) is None
    status.tick(now=status._since + 1.4)
    assert changes == []
    status._due(status._since + 2.6)()
    assert [c.attr for c in changes] == ["text"] and "(3 s)" in changes[0].model.text
