"""Changes to a page's Bokeh models, held: widget methods under Panel's hold, and a page's model
index walked once per reader event or frame of engine events. Patches a served Bokeh Document's
apply_json_patch and, while held, its model index's invalidate.

Why `changes_bokeh_models`: Bokeh lets a served document change only while its session holds
the document lock, and raises "_pending_writes should be non-None ..." otherwise. Panel replays
some user events off that lock: a click that arrives while a debounced change of another widget
is pending runs as an unlocked task. Under pn.io.hold the changes are collected and Panel sends
them itself, which works with or without the lock (and sends a burst of changes as one message).
Outside a served session it does nothing.

Why `model_index_held` and `one_walk_per_reader_event`: each time a property is set to, or from,
a value holding models (an HTML pane's stylesheets, on every update), Bokeh recomputes the
document's model index, a walk over every model of the page. A reader's click or a frame of
engine events updates many panes, and walked the page once for each; with a class on the server
those walks were a large share of the web process's one core (docs/decisions/
web-runtime-patches.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import panel as pn

F = TypeVar("F", bound=Callable)


def changes_bokeh_models(method: F) -> F:
    """`method`, run under pn.io.hold: safe to change Bokeh models from any Panel callback."""

    @functools.wraps(method)
    def held(*args, **kwargs):
        with pn.io.hold():
            return method(*args, **kwargs)
    return held  # type: ignore[return-value]


def one_walk_per_reader_event(doc) -> None:
    """Handle each of the reader's UI events on `doc` (a click, the page's "document ready")
    with the page's model index held, so Bokeh walks the page's models once for the event, not
    once for every pane its callbacks update.

    A reader's click reaches the server as a PATCH-DOC message, and Bokeh applies it to the
    page with `Document.apply_json_patch`, running the event's callbacks inside it (Panel runs a
    button's watchers, and the lesson's onload start, there and then). An HTML pane's update in
    those callbacks sets properties that hold models (its stylesheets), and each such set makes
    Bokeh recompute the document's model index.

    Only patches carrying a UI event are held: a plain property patch (a slider's value, a
    layout's size) walks nothing and calls back later, outside this message (Panel debounces
    it). Called once per served page (app.serve_page), as Panel itself replaces `destroy` on
    every served document."""
    apply = doc.apply_json_patch

    @functools.wraps(apply)
    def apply_held(patch_json, *args, **kwargs):
        if not _carries_ui_event(patch_json):
            return apply(patch_json, *args, **kwargs)
        with model_index_held(doc):
            return apply(patch_json, *args, **kwargs)

    doc.apply_json_patch = apply_held


@contextmanager
def model_index_held(doc) -> Iterator[None]:
    """Bokeh's `doc.models.freeze()`, less its walk when nothing asked for one: the page's
    model index is walked once at the end if anything changed the page's graph of models
    meanwhile, and not at all otherwise.

    Bokeh asks for a walk (DocumentModelManager.invalidate) whenever a property is set to, or
    from, a value holding models; a frozen index cannot say whether that happened, so its freeze
    walks at its end whatever did, even for a frame of engine events that only sets text and
    numbers (a status line, a table, a chart's data). Here the index's invalidate is replaced,
    while held, by a note that one was asked for (nested holds share the note); while held, as
    under a freeze, the index is updated only at the end. lessons.session_jobs holds it around
    each frame of engine events."""
    models = doc.models
    outer = models.__dict__.get("invalidate")  # a hold around this one
    asked: list[bool] = []
    models.invalidate = lambda: asked.append(True)
    try:
        yield
    finally:
        if outer is None:
            del models.invalidate
        else:
            models.invalidate = outer
        if asked:
            models.invalidate()


def _carries_ui_event(patch_json) -> bool:
    """True if a PATCH-DOC's content holds a UI event (BokehJS sends one as "MessageSent")."""
    content = getattr(patch_json, "content", patch_json)  # a bokeh Serialized, or the dict
    events = content.get("events") if isinstance(content, dict) else None
    return any(isinstance(e, dict) and e.get("kind") == "MessageSent" for e in events or ())
