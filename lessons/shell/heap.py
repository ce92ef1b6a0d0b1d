"""Give the memory that closed sessions freed back to the system.

A page's session builds thousands of Python and Bokeh objects; when the reader leaves, Bokeh and
Panel discard the session and a garbage collection frees them. Freed is not returned: glibc's
malloc keeps freed chunks in its heaps for reuse, and gives back to the system only a free stretch
at the very top of a heap. After a busy moment (ten readers arriving at once) the heaps are full of
holes between objects that stayed, so the web process's resident memory stays at that moment's
high-water mark long after everyone left, and a teacher reading the about page sees a process that
looks like it leaks. `malloc_trim(0)` walks every heap and hands each wholly free page back (the
pages stay mapped; the system gives them zeros if they are touched again).

Python's own allocator for small objects (pymalloc) is worse still: it takes 1 MiB arenas from the
system and gives one back only when every object in it is gone, so a few objects that outlive a
session (a cache entry, an interned name) keep whole arenas resident, and no trim reaches them.
The class command in the README therefore starts the server with PYTHONMALLOC=malloc (every
object from glibc's malloc, whose free pages a trim returns); app.py drops the variable before
the engine worker is spawned, so the worker's step loop keeps pymalloc's speed.

So a while after a session ends (TRIM_AFTER_S, one trim however many sessions end meanwhile) the
process collects garbage and trims. What that returns is measured by
`python bench/classroom.py --churn 500` (figures in issue 16's notes). On a system without glibc
(macOS, musl) there is nothing to call and nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time

from bokeh.document import Document
from tornado.ioloop import IOLoop

log = logging.getLogger(__name__)

TRIM_AFTER_S = 10.0  # after a session ends; Panel's own collection runs 5 s after the last one

_lock = threading.Lock()
_scheduled = False
trims = 0  # trims done in this process (the served memory test reads it)


def _load_malloc_trim():
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()


def trim_after_session(doc: Document | None) -> None:
    """Return the freed memory once this session's document is destroyed (call while building
    the session's page)."""
    if doc is None or doc.session_context is None or _malloc_trim is None:
        return
    loop = IOLoop.current()  # the server's loop: session callbacks run on it
    doc.on_session_destroyed(lambda _context: _schedule(loop))


def _schedule(loop: IOLoop) -> None:
    """One trim TRIM_AFTER_S from now, unless one is already coming (a class leaving at once
    costs one trim, and a steady stream of leavers one every TRIM_AFTER_S at most)."""
    global _scheduled
    with _lock:
        if _scheduled:
            return
        _scheduled = True
    loop.call_later(TRIM_AFTER_S, return_freed_memory)


def return_freed_memory() -> bool:
    """Collect garbage, then hand the heaps' free pages back to the system. True if glibc
    returned any memory."""
    global _scheduled, trims
    with _lock:
        _scheduled = False
    if _malloc_trim is None:
        return False
    start = time.perf_counter()
    gc.collect()
    released = bool(_malloc_trim(0))
    trims += 1
    log.debug("gc.collect and malloc_trim took %.0f ms", 1000 * (time.perf_counter() - start))
    return released
