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
process collects garbage and trims. malloc_trim(0) walks every arena, the ones glibc gives the
server's other threads included, so no MALLOC_ARENA_MAX is needed for it to reach them. Each trim
is logged (the server's log: resident memory before and after, what malloc still holds in use
and free) and `status()` says how many ran and whether one is coming: /engine-status carries it as
"web_heap", so a bench samples the memory after the trim, not before it. What that returns is
measured by `python bench/classroom.py --churn 500` (figures in issue 16's notes). On a system
without glibc (macOS, musl) there is nothing to call and nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time

from bokeh.document import Document
from tornado.ioloop import IOLoop

log = logging.getLogger(__name__)

TRIM_AFTER_S = 10.0  # after a session ends; Panel's own collection runs 5 s after the last one

_lock = threading.Lock()
_scheduled = False
trims = 0  # trims done in this process (the served memory test reads it)
_last: dict | None = None  # what the last trim did (status)


def _libc_function(name: str):
    """A function of glibc's, or None where the C library has none."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_function("malloc_trim")
if _malloc_trim is not None:
    _malloc_trim.argtypes = [ctypes.c_size_t]
    _malloc_trim.restype = ctypes.c_int


class _Mallinfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (2.33 and later): what malloc holds, in bytes."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


_mallinfo2 = _libc_function("mallinfo2")
if _mallinfo2 is not None:
    _mallinfo2.restype = _Mallinfo2


def malloc_mib() -> dict | None:
    """What glibc's malloc holds, in MiB, every arena together: "in_use" (allocated chunks,
    mmapped ones included) and "free" (free chunks it keeps; the pages of those a trim returned
    count here too, though no longer resident); None without glibc 2.33 or later."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return {"in_use": round((info.uordblks + info.hblkhd) / 2**20, 1),
            "free": round(info.fordblks / 2**20, 1)}


def status() -> dict:
    """For /engine-status: trims done, whether one is coming, and what the last one did."""
    return {"trims": trims, "trim_pending": _scheduled, "trim_after_s": TRIM_AFTER_S,
            "last_trim": _last}


def _rss_mib() -> float | None:
    """This process's resident memory in MiB (Linux's /proc), None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


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
    global _scheduled, trims, _last
    with _lock:
        _scheduled = False
    if _malloc_trim is None:
        return False
    start, before = time.perf_counter(), _rss_mib()
    gc.collect()
    collected = time.perf_counter()
    released = bool(_malloc_trim(0))
    trimmed = time.perf_counter()
    trims += 1
    _last = {"rss_before_mib": before, "rss_after_mib": _rss_mib(), "malloc_mib": malloc_mib(),
             "gc_ms": round(1000 * (collected - start)),
             "trim_ms": round(1000 * (trimmed - collected))}
    # on the server's loop: every session waits meanwhile (0.1-1.2 s in the 100-reader churn)
    log.info("trim %d: resident %s -> %s MiB, malloc %s MiB, gc %d ms, trim %d ms", trims,
             _last["rss_before_mib"], _last["rss_after_mib"], _last["malloc_mib"],
             _last["gc_ms"], _last["trim_ms"])
    return released
