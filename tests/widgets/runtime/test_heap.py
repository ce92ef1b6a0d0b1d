"""widgets.runtime.heap: a while after sessions end the web process collects garbage and trims once
(however many end together), and a trim hands freed heap memory back to the system, which glibc's
free alone does not do for memory below a live object. What that does for the served app's memory
is measured in bench/lab/classroom.py --churn."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from bokeh.document import Document
from helpers import run_coroutine

from engine.lab.memory import process_memory
from widgets.runtime import heap

pytestmark = pytest.mark.skipif(heap._malloc_trim is None, reason="no glibc malloc_trim here")

ROOT = Path(__file__).resolve().parents[3]
CHUNK = 2000  # bytes: above pymalloc's 512, so glibc's malloc serves them
COUNT = 40_000  # about 80 MiB


def rss_mib() -> float:
    return process_memory(os.getpid())["rss_mib"]


def test_a_trim_returns_the_holes_that_free_leaves():
    chunks = [bytearray(CHUNK) for _ in range(COUNT)]  # bytearray(n) writes n zeros: resident
    keep = chunks[::100]  # every 100th stays, so the freed ones are holes, not the heap's top
    del chunks
    held = rss_mib()
    assert heap.return_freed_memory()
    returned = held - rss_mib()
    assert returned > 0.5 * CHUNK * COUNT / 2**20, f"only {returned:.1f} MiB returned"
    assert len(keep) == COUNT // 100
    last = heap.status()["last_trim"]  # what the server logs and /engine-status carries
    assert last["rss_before_mib"] - last["rss_after_mib"] > 0.5 * CHUNK * COUNT / 2**20
    if last["malloc_mib"] is not None:  # glibc 2.33 and later
        assert last["malloc_mib"]["in_use"] < held


class Context:  # what a served document's session_context stands for here
    id = "a-session"


def served_doc(context: Context) -> Document:
    doc = Document()
    doc._session_context = weakref.ref(context)
    return doc


def end_session(doc: Document, context: Context) -> None:
    """What Bokeh's server does when the reader's session is discarded."""
    for destroyed in list(doc.callbacks.session_destroyed_callbacks):
        destroyed(context)


def test_sessions_ending_together_cost_one_trim_and_a_later_end_another(monkeypatch):
    monkeypatch.setattr(heap, "TRIM_AFTER_S", 0.05)
    monkeypatch.setattr(heap, "_open", 0)
    monkeypatch.setattr(heap, "_most_open", 0)
    context = Context()
    docs = [served_doc(context) for _ in range(3)]

    async def serve() -> list[int]:
        for doc in docs:  # on the server's loop, as build_page runs
            heap.trim_after_session(doc)
        start = heap.trims
        assert not heap.status()["trim_pending"]
        end_session(docs[0], context)
        end_session(docs[1], context)
        counts = [heap.trims - start]  # nothing yet: the trim waits for TRIM_AFTER_S
        assert heap.status()["trim_pending"]  # a bench waits on this before sampling memory
        await asyncio.sleep(0.3)
        counts.append(heap.trims - start)  # one for both
        assert not heap.status()["trim_pending"]
        end_session(docs[2], context)
        await asyncio.sleep(0.3)
        counts.append(heap.trims - start)
        assert heap.status()["trims"] == heap.trims
        return counts

    assert run_coroutine(serve()) == [0, 1, 2]


def test_one_reader_leaving_a_class_waits_for_half_the_class_to_leave(monkeypatch):
    """A trim while 29 pages stay open returns next to nothing and holds the server's loop for
    a garbage collection: none is scheduled until half the most open have left."""
    monkeypatch.setattr(heap, "TRIM_AFTER_S", 0.05)
    monkeypatch.setattr(heap, "_open", 0)
    monkeypatch.setattr(heap, "_most_open", 0)
    context = Context()
    docs = [served_doc(context) for _ in range(30)]

    async def serve() -> list[tuple[int, bool]]:
        for doc in docs:
            heap.trim_after_session(doc)
        start, seen = heap.trims, []
        for leaving in (docs[:1], docs[1:14], docs[14:15]):  # 29 left, 16, then 15
            for doc in leaving:
                end_session(doc, context)
            seen.append((heap.status()["sessions_open"], heap.status()["trim_pending"]))
        await asyncio.sleep(0.3)
        assert heap.trims - start == 1
        assert heap.status()["most_open_since_trim"] == 15  # the next waits for 8 to leave
        return seen

    assert run_coroutine(serve()) == [(29, False), (16, False), (15, True)]


def test_a_page_built_outside_a_server_schedules_nothing():
    doc = Document()  # no session: a test building a page, a static export
    heap.trim_after_session(doc)
    heap.trim_after_session(None)
    assert doc.callbacks.session_destroyed_callbacks == set()


@pytest.mark.parametrize("apart", [True, False])
def test_big_blocks_get_pages_of_their_own_after_a_bigger_one_was_freed(apart):
    """With keep_big_blocks_apart, a 200 KiB block is mmap'd (given back the moment it is freed)
    even after a 4 MiB one was freed; without, glibc's threshold rose to 4 MiB with that free and
    the blocks land in the heap among small objects. In a process of its own: it sets malloc."""
    code = """if True:
        import sys
        from widgets.runtime import heap
        if heap._mallinfo2 is None:
            print("skip"); sys.exit()
        if sys.argv[1] == "apart":
            assert heap.keep_big_blocks_apart()
        big = bytearray(4 * 2**20)
        del big  # freed: unless the threshold is fixed, glibc's rises to 4 MiB here
        rounds = []
        for _ in range(3):  # the interpreter may free a mapped block of its own meanwhile
            before = heap._mallinfo2().hblks
            blocks = [bytearray(200 * 1024) for _ in range(10)]
            rounds.append(heap._mallinfo2().hblks - before)
            del blocks
        print(",".join(map(str, rounds)), 10)
    """
    out = subprocess.run([sys.executable, "-c", code, "apart" if apart else "default"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "skip":
        pytest.skip("no mallinfo2 (glibc before 2.33)")
    rounds, made = out.stdout.split()
    assert made == "10"
    assert ("10" if apart else "0") in rounds.split(","), rounds  # in one round at least
