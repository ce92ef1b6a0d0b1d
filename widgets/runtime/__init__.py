"""The web runtime: what the served app changes in Bokeh, Panel, asyncio's log and glibc's malloc so
that one web process carries a class, each in a module that says why. bokeh, panel and tornado
are pinned in pyproject.toml to the range these were tested with, since several reach into their
private functions; tests/widgets/runtime has the test that fails without each (the story:
docs/decisions/web-runtime-patches.md).

Process-wide, installed by `install()` (app.py calls it once; it is idempotent, and
`panel serve app.py` runs app.py once a session):
- bokeh_defaults: Bokeh's property defaults looked up once per model class (a page's build and
  send cost less of the web core).
- shared_stylesheets.keep_sheets_shared: an HTML pane's update names the page's shared
  stylesheet models instead of re-sending the CSS (Panel's HTMLBasePane).
- closed_sockets: Panel's dropped writes to a reader who left are not logged as tracebacks.
- heap: big blocks in pages of their own, PYTHONMALLOC dropped for the engine worker, trims
  logged.

Per page (app.serve_page, lessons.shell.router, lessons.session_jobs, the widgets):
- doc_hold: one_walk_per_reader_event(doc) and model_index_held(doc), a page's model index
  walked once per reader event or frame of engine events; changes_bokeh_models, widget methods
  under Panel's hold.
- shared_stylesheets.share_stylesheets(doc): each repeated stylesheet text sent once.
- heap.trim_after_session(doc): memory given back once enough sessions have ended.
- frame: once_per_frame, a redraw done once per frame of engine events (no library patched).
"""

from __future__ import annotations

from . import bokeh_defaults, closed_sockets, heap, shared_stylesheets
from .doc_hold import one_walk_per_reader_event
from .shared_stylesheets import share_stylesheets

__all__ = ["install", "installed", "one_walk_per_reader_event", "share_stylesheets"]


def install() -> None:
    """Install every process-wide patch of the web runtime, before any page is built."""
    bokeh_defaults.cache_stable_defaults()
    shared_stylesheets.keep_sheets_shared()
    closed_sockets.ignore_closed_socket_writes()
    heap.install()


def installed() -> dict[str, bool]:
    """Which process-wide patches are in place."""
    return {"bokeh_defaults": bokeh_defaults.installed(),
            "shared_stylesheets": shared_stylesheets.installed(),
            "closed_sockets": closed_sockets.installed(),
            "big_blocks_apart": heap.big_blocks_apart}
