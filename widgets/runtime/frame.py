"""Work done once per frame of engine events, however many events of the frame ask for it.

lessons.session_jobs hands a page its engine events in frames (at most 20 a second), each event
to its handler. A run's step events come several to a frame, and each would redraw what sums up
all steps so far (the chunked-prefill lesson's gap table: percentiles of every gap, an HTML
table, the chart's text; the status line's progress), mostly for states the reader never sees,
overwritten in the same frame. With a class on the server those redraws were a noticeable share
of the web process's one core (docs/decisions/web-runtime-patches.md). This patches no library:
it is the web runtime's side of the frames that the patches to Bokeh's model index also hold.

    with one_frame():                      # lessons.session_jobs, around a frame's handlers
        ...
        once_per_frame(key, redraw)        # a handler: redraw once, after the frame's events

Outside a frame (a test, a reader's click, a script) `once_per_frame` runs the call at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
_local = threading.local()  # .pending: key -> call, while a frame is open on this thread


@contextmanager
def one_frame() -> Iterator[None]:
    """Collect once_per_frame calls made inside; run each key's last call once at the end
    (in the order the keys were first asked for). Nested frames are one frame."""
    if getattr(_local, "pending", None) is not None:
        yield
        return
    _local.pending = {}
    try:
        yield
    finally:
        pending, _local.pending = _local.pending, None
        for call in pending.values():
            try:
                call()
            except Exception:  # one widget's bug must not drop the others' redraws
                log.exception("a redraw at the end of a frame failed")


def once_per_frame(key: Hashable, call: Callable[[], None]) -> None:
    """call() at the end of the open frame, once for this key; at once when none is open."""
    pending = getattr(_local, "pending", None)
    if pending is None:
        call()
    else:
        pending[key] = call
