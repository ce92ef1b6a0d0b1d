"""Give the memory that closed sessions freed back to the system. Calls glibc's malloc_trim and
mallopt (nothing happens without glibc: macOS, musl).

Why: a page's session builds thousands of Python and Bokeh objects; when the reader leaves, Bokeh
and Panel discard the session and a garbage collection frees them. Freed is not returned: glibc's
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
object from glibc's malloc, whose free pages a trim returns); `install` drops the variable before
the engine worker is spawned, so the worker's step loop keeps pymalloc's speed.

So a while after sessions end (TRIM_AFTER_S, one trim however many sessions end meanwhile) the
process collects garbage and trims: once at most half of the sessions that were open at the most
since the last trim are left (a class leaving, a lone reader, not one reader of thirty, whose
page returns next to nothing). malloc_trim(0) walks every arena, the ones glibc gives the
server's other threads included. keep_big_blocks_apart sets malloc so that more of what the
sessions freed is in whole pages a trim can return. Each trim is logged (the server's log:
resident memory before and after, what malloc still holds in use and free) and `status()` says
how many ran and whether one is coming: /engine-status carries it as "web_heap", so a bench
samples the memory after the trim, not before it. What that returns is measured by
`python bench/lab/classroom.py --churn 500`.
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
_open = 0  # sessions whose page was built and that have not ended
_most_open = 0  # the most open at once since the last trim
trims = 0  # trims done in this process (the served memory test reads it)
_last: dict | None = None  # what the last trim did (status)
big_blocks_apart = False  # keep_big_blocks_apart took (malloc cannot be asked)


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


_mallopt = _libc_function("mallopt")
if _mallopt is not None:
    _mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _mallopt.restype = ctypes.c_int

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 64 * 1024  # bytes: a block this big or bigger gets pages of its own


def keep_big_blocks_apart() -> bool:
    """Tell glibc's malloc to give every block of MMAP_THRESHOLD or more pages of its own; True
    if it took it. Call once, as the server starts.

    A trim (return_freed_memory) can hand back only pages with no live byte on them. A page's
    first message (tens of kB of JSON), a patch, a cached result's text, a socket's buffer: glibc
    puts blocks this size in mmap'd pages of their own at first, but each one freed raises its
    threshold to that size (up to 32 MiB), so from then on they land in the heaps, between small
    objects that outlive them. A fixed threshold stops that rise: such a block is unmapped the
    moment it is freed, and the server's most memory during a class is lower.
    The threads keep their own heaps (glibc's default): with one heap for every thread
    (M_ARENA_MAX 1) a class ended with more memory held, since what the engine's dispatcher
    thread allocates (results, which outlive pages) then stays apart from the pages the
    server's loop builds and frees."""
    global big_blocks_apart
    if _mallopt is None:
        return False
    big_blocks_apart = big_blocks_apart or bool(_mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return big_blocks_apart


def install() -> None:
    """Set this process up as the web server (idempotent): big blocks apart, each trim logged
    at INFO, and PYTHONMALLOC dropped from the environment so that the engine worker, spawned
    later, keeps Python's own allocator, faster for its step loop (this process read the
    variable once, at its start, and already uses glibc's malloc)."""
    keep_big_blocks_apart()
    log.setLevel(logging.INFO)
    os.environ.pop("PYTHONMALLOC", None)


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
    """For /engine-status: trims done, whether one is coming, what the last one did, and the
    sessions open now and at most since it."""
    return {"trims": trims, "trim_pending": _scheduled, "trim_after_s": TRIM_AFTER_S,
            "last_trim": _last, "sessions_open": _open, "most_open_since_trim": _most_open}


def _rss_mib() -> float | None:
    """This process's resident memory in MiB (Linux's /proc), None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def trim_after_session(doc: Document | None) -> None:
    """Return the freed memory once enough sessions like this one have ended (call while
    building the session's page): see _session_ended."""
    global _open, _most_open
    if doc is None or doc.session_context is None or _malloc_trim is None:
        return
    loop = IOLoop.current()  # the server's loop: session callbacks run on it
    with _lock:
        _open += 1
        _most_open = max(_most_open, _open)
    doc.on_session_destroyed(lambda _context: _session_ended(loop))


def _session_ended(loop: IOLoop) -> None:
    """A trim is scheduled once the sessions open have fallen to half the most that were open
    since the last trim or fewer: a class leaving, a lone reader, ten churned readers.

    One reader leaving a class of thirty frees one page among thirty live ones: such a trim
    returns next to nothing, and holds the server's loop for its garbage collection (hundreds
    of milliseconds with thirty pages open) while every reader waits."""
    global _open
    with _lock:
        _open -= 1
        due = _open <= _most_open // 2
    if due:
        _schedule(loop)


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
    global _scheduled, trims, _last, _most_open
    with _lock:
        _scheduled = False
        _most_open = _open  # the next trim waits for half of these to leave
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
    # on the server's loop: every session waits meanwhile
    log.info("trim %d: resident %s -> %s MiB, malloc %s MiB, gc %d ms, trim %d ms", trims,
             _last["rss_before_mib"], _last["rss_after_mib"], _last["malloc_mib"],
             _last["gc_ms"], _last["trim_ms"])
    return released
