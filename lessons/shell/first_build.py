"""Build every page once as the server starts, so that its start holds what the first readers
would otherwise leave behind.

The first page of each kind built in a process leaves things that stay for its whole life,
whoever reads next: Panel's Markdown pane imports its renderer (markdown-it-py with its plugins
and linkify-it, Python-Markdown, xml.etree: about a hundred modules, 3.7 MB of Python objects
in tracemalloc) at its first render, and Bokeh and Panel fill their caches of model classes and
serializers: about 10 MiB that a second round over the same pages does not add to. Built here,
before the server accepts a reader, they are part of the start, not of the first class, and the
first reader of each lesson does not pay the first build's extra CPU (why:
docs/decisions/pages-built-at-start.md; the figures: bench/results/web.md).

Each page is built as a session's page is (app.serve_page into a document with a session
context carrying the page's URL arguments), turned into the message a browser's first pull gets
(the PULL-DOC-REPLY), and then destroyed as Panel destroys the page it builds for --warm
(panel.io.document._cleanup_doc, with the document's destroy that Panel's application gives
every served document, which also forgets the page in Panel's per-document state: the lesson's
onload callbacks, never run here, kept each page alive without it), without its "document ready": no lesson starts a
measurement, as no reader is there. Left out: the about page (it starts a
periodic callback of its own) and the engine check (its purpose is a measurement); they build
nothing the others do not.

Then everything the process holds is frozen (gc.freeze): the modules, Bokeh's and Panel's
classes and caches, about 150,000 objects that live as long as the server. A full garbage
collection walks every tracked object, and the server runs one on its event loop each time
sessions close (Panel's, a few seconds after) and before each memory trim (widgets.runtime.heap),
while every reader's page waits: frozen, such a collection walks the open pages' objects
only, not the start's (bench/results/web.md has the times). Garbage among the frozen
objects is never collected; there is none to speak of, since the start-up pages were collected
just before.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from bokeh.document import Document
from bokeh.protocol import Protocol
from bokeh.server.contexts import BokehSessionContext, _RequestProxy
from bokeh.util.token import generate_session_id
from panel.io.document import _cleanup_doc, _destroy_document
from panel.io.state import set_curdoc

from widgets.job_status import format_time
from widgets.runtime import heap

from ..registry import LESSONS

log = logging.getLogger(__name__)

# each page's URL arguments: the course map, every lesson, the reference pages
PAGES: tuple[dict[str, str], ...] = (
    {}, *({"lesson": info.slug} for info in LESSONS),
    {"page": "vocabulary"}, {"page": "summary"}, {"page": "instructor"})

_built = False


def before_serving() -> bool:
    """True when app.py runs as the server starts (`panel serve --warm` builds a page in its
    main thread before its event loop runs), False in a reader's session (built on the running
    loop, or on a thread of --num-threads)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def build_every_page_once(serve_page: Callable[[Document], None]) -> float:
    """Each of PAGES built, serialized and destroyed once (the first call in a process; later
    calls return at once), then garbage collected and trimmed; the seconds it took."""
    global _built
    if _built:
        return 0.0
    _built = True
    start = time.perf_counter()
    for args in PAGES:
        try:
            _build_and_discard(serve_page, args)
        except Exception:  # a page's bug must not stop the server: its reader will see it
            log.exception("building the page for %s at start-up failed", args)
    _what_a_first_result_imports()
    heap.return_freed_memory()  # collect the pages and give their memory back
    gc.freeze()  # what the start holds, left out of every later collection (docstring)
    took = time.perf_counter() - start
    log.info("built %d pages once at start-up in %.1f s", len(PAGES), took)
    return took


def _what_a_first_result_imports() -> None:
    """Import and set up what the web process otherwise does at a page's first measured result
    (the modules that are new after a class): Bokeh's serializer asks
    numpy for numpy.ma on a result's arrays, a cached result's time label is parsed with
    datetime.strptime (the _strptime module and its cache of patterns), and the estimates' intervals
    draw from numpy.random. Done during a class, what that allocates for good lands among the
    pages then open, and the memory of those pages stays pinned around it after they close."""
    importlib.import_module("numpy.ma")
    format_time("2026-01-01T00:00:00+0000")
    np.random.default_rng(0).integers(0, 2)


def _build_and_discard(serve_page: Callable[[Document], None], args: dict[str, str]) -> None:
    doc = Document()
    context = BokehSessionContext(generate_session_id(), None, doc)
    context._request = _RequestProxy(None, arguments={k: [v.encode()] for k, v in args.items()})
    doc._session_context = lambda: context
    doc.destroy = partial(_destroy_document, doc)  # as Panel's application sets on every page
    with set_curdoc(doc):
        serve_page(doc)
        Protocol().create("PULL-DOC-REPLY", "first-build", doc)  # the page as first sent
    _cleanup_doc(doc)  # as Panel discards its own --warm page: callbacks, views, the document
