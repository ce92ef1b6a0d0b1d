"""What building one page costs the web process, page by page, as `panel serve app.py` builds it.

    python bench/web/page_build.py [--rounds 5] [--page knob ...]

A class arriving at once queues behind each page's build on the web server's one core. This
builds each page of
lessons.shell.first_build.PAGES (the course map, every lesson, the reference pages) in this
process the way a session gets it: app.serve_page into a document with a session context
carrying the page's URL arguments, then the message a browser's first pull gets (PULL-DOC-REPLY,
serialized to the JSON text the socket is given), then the document destroyed as Panel destroys
a closed session's. One untimed round first, as `--warm` does at the server's start (the first
build of a kind imports and fills caches); then every round prints each page's build and
first-send milliseconds; last, per page, the mean over the rounds, the page's Bokeh model count
and its first message's size.

No engine worker is started (a served page finds the service running; the build does not use
it). Run it on a quiet machine: a busy one slows every page. To compare two trees, run it
from each in one hold (PYTHONPATH at the tree): the ratio of the two means is the figure.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("LLM_SPEED_CACHE", tempfile.mkdtemp(prefix="page-build-cache-"))

from bokeh.document import Document  # noqa: E402
from bokeh.protocol import Protocol  # noqa: E402
from bokeh.server.contexts import BokehSessionContext, _RequestProxy  # noqa: E402
from bokeh.util.token import generate_session_id  # noqa: E402
from panel.io.document import _cleanup_doc, _destroy_document  # noqa: E402
from panel.io.state import set_curdoc  # noqa: E402

import lessons.shell.router as router  # noqa: E402
from bench.harness import Run  # noqa: E402

router.get_service = lambda: None  # no engine worker: a page that is only built needs none

import app  # noqa: E402 (after the stub)
from lessons.shell.first_build import PAGES  # noqa: E402


def label(args: dict[str, str]) -> str:
    return next(iter(args.values()), "index")


def build_once(args: dict[str, str]) -> tuple[float, float, int, int]:
    """(build s, first-send s, models, first message bytes) for one session's page."""
    doc = Document()
    context = BokehSessionContext(generate_session_id(), None, doc)
    context._request = _RequestProxy(None, arguments={k: [v.encode()] for k, v in args.items()})
    doc._session_context = lambda: context
    doc.destroy = partial(_destroy_document, doc)  # as Panel's application sets on every page
    # A full collection comes every so many allocations, whichever page is being built then:
    # without this it lands on the same page of every round (100 ms on one page, none on the
    # next), and a page that allocates less moves it onto another. Collected here, each page
    # starts from the same state; the young generations' collections stay in its figures.
    gc.collect()
    with set_curdoc(doc):
        t0 = time.perf_counter()
        app.serve_page(doc)
        t1 = time.perf_counter()
        message = Protocol().create("PULL-DOC-REPLY", "bench", doc)
        size = len(message.content_json) + sum(len(b) for _, b in message.buffers)  # as sent
        t2 = time.perf_counter()
        models = len(doc.models)
    _cleanup_doc(doc)
    return t1 - t0, t2 - t1, models, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--page", action="append", default=None,
                        help="only this page (a lesson slug, a page name or 'index'); repeat")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    pages = [p for p in PAGES if args.page is None or label(p) in args.page]
    if not pages:
        parser.error(f"no page called {args.page}; pages: {[label(p) for p in PAGES]}")
    bench = Run("page_build", args)
    print(f"tree {Path(app.__file__).resolve().parent}")

    for p in pages:  # what --warm does at the server's start: first builds out of the figures
        build_once(p)

    builds: dict[str, list[float]] = {label(p): [] for p in pages}
    sends: dict[str, list[float]] = {label(p): [] for p in pages}
    shape: dict[str, tuple[int, int]] = {}
    for r in range(args.rounds):
        cells = []
        for p in pages:
            build, send, models, size = build_once(p)
            builds[label(p)].append(build)
            sends[label(p)].append(send)
            shape[label(p)] = (models, size)
            cells.append(f"{label(p)} {build * 1e3:.0f}+{send * 1e3:.0f}")
        total = sum(builds[label(p)][-1] + sends[label(p)][-1] for p in pages)
        bench.round({"round": r + 1, "total_ms": round(total * 1e3, 1),
                     "build_ms": {label(p): round(builds[label(p)][-1] * 1e3, 1) for p in pages},
                     "send_ms": {label(p): round(sends[label(p)][-1] * 1e3, 1) for p in pages}},
                    f"round {r + 1}: {total * 1e3:.0f} ms  ({', '.join(cells)} ms build+send)")

    print(f"\n{'page':<18} {'build ms':>9} {'send ms':>8} {'total ms':>9} {'models':>7} "
          f"{'first msg kB':>13}")
    means = {}
    for p in pages:
        name = label(p)
        b, s = statistics.mean(builds[name]), statistics.mean(sends[name])
        models, size = shape[name]
        print(f"{name:<18} {b * 1e3:9.1f} {s * 1e3:8.1f} {(b + s) * 1e3:9.1f} {models:7d} "
              f"{size / 1024:13.1f}")
        means[name] = {"build_ms": round(b * 1e3, 1), "send_ms": round(s * 1e3, 1),
                       "models": models, "first_message_kb": round(size / 1024, 1)}
    all_b = statistics.mean(sum(builds[label(p)][r] for p in pages) for r in range(args.rounds))
    all_s = statistics.mean(sum(sends[label(p)][r] for p in pages) for r in range(args.rounds))
    print(f"{'all pages':<18} {all_b * 1e3:9.1f} {all_s * 1e3:8.1f} {(all_b + all_s) * 1e3:9.1f}"
          f"   (mean of {args.rounds} rounds)")
    return bench.finish({"pages": means, "all_pages_ms": {"build": round(all_b * 1e3, 1),
                                                          "send": round(all_s * 1e3, 1)}})


if __name__ == "__main__":
    sys.exit(main())
