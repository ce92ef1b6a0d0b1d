"""The browser's own clock: stamps, in the reader's browser, the moment each streamed row arrives.

The engine stamps every token when its step finished; this stamps the same tokens when they
reached the page and were drawn. The difference is everything between the two: waiting for the
engine worker, the web server, serialization, the network and the browser's drawing.

    clock = BrowserClock(watch=timeline.sources["engine"], into=timeline.sources["your browser"])
    clock.attach_start(send_button)   # time 0 = the reader's click, read in the browser

How: a Bokeh CustomJS runs in the browser whenever rows are streamed into `watch`; after the next
animation frame (when the page has drawn them) it reads performance.now() and streams one row per
new row into `into` (columns x = ms since the clock's start, row, index, text = ""). Streaming
from JavaScript syncs back to the server, so Python sees the stamps too: `stamps_ms` follows them
(index -> ms). Rows that arrive in one message get one stamp: they did arrive together. Without a
start (no click since the last run), time 0 is the run's first arrival. `reset()` clears `into` for a new run.
"""

from __future__ import annotations

import panel as pn
import param
from bokeh.models import ColumnDataSource, CustomJS

from .runtime.doc_hold import changes_bokeh_models

# Runs in the browser each time rows are streamed into `src` (the server's stream, not a reset).
STAMP_JS = """
const n = src.data[key].length;
const pending = out._pending || 0;
const have = out.data.index.length + pending;
if (n <= have) { return; }
const idx = src.data[key].slice(have, n);
out._pending = pending + idx.length;
const stamp = () => {
  const now = performance.now();
  if (out._t0 == null || (out.data.index.length == 0 && !out._fresh)) { out._t0 = now; }
  out._fresh = false;
  out._pending = Math.max(0, (out._pending || 0) - idx.length);
  out.stream({x: idx.map(() => now - out._t0), row: idx.map(() => row),
              index: idx, text: idx.map(() => "")});
};
// after the frame that draws the new rows: the time the reader could see them
if (typeof requestAnimationFrame === "function" && document.visibilityState !== "hidden") {
  requestAnimationFrame(() => setTimeout(stamp, 0));
} else {
  stamp();
}
"""

# Runs in the browser on the start event (a click): time 0 of the browser's clock.
START_JS = "out._t0 = performance.now(); out._pending = 0; out._fresh = true;"


class BrowserClock(param.Parameterized):
    """Browser arrival times of the rows streamed into a source (see the module docstring)."""

    row = param.String(default="your browser", doc="The `row` value written into `into`.")
    key = param.String(default="index", doc="The column of `watch` that names each row.")
    stamps_ms = param.Dict(default={}, doc="""
        index -> ms since the clock's start, as synced back from the browser.""")

    def __init__(self, watch: ColumnDataSource, into: ColumnDataSource | None = None, **params):
        super().__init__(**params)
        self.watch = watch
        self.into = into if into is not None else ColumnDataSource(
            {"x": [], "row": [], "index": [], "text": []}, name="browser clock")
        self.callback = CustomJS(args={"src": watch, "out": self.into, "row": self.row,
                                       "key": self.key}, code=STAMP_JS)
        watch.js_on_change("streaming", self.callback)
        self.into.on_change("data", self._synced)

    def attach_start(self, button) -> None:
        """Start the clock (time 0) when this Panel button is clicked, read in the browser.

        Panel keeps every js_on_click in a registry keyed weakly by the button; but its args lead
        back, through `into`'s sync callback, to this clock and the page that holds the button, so
        the key never dies: in a served session the click is unregistered when the session ends
        (otherwise every reader of the page would stay in memory)."""
        callback = button.js_on_click(args={"out": self.into}, code=START_JS)
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.on_session_destroyed(lambda _context: callback.unwatch())

    @changes_bokeh_models
    def reset(self) -> None:
        """Forget the stamps (a new run); the next start or first arrival is time 0."""
        self.into.data = {"x": [], "row": [], "index": [], "text": []}
        self.stamps_ms = {}

    def _synced(self, attr, old, new) -> None:
        data = self.into.data
        self.stamps_ms = {int(i): float(x) for i, x in zip(data["index"], data["x"])}
