"""A token timeline: one row per clock (or per request), a tick for every output token at the
moment it arrived, and the silent stretch before the first token shaded.

    timeline = TokenTimeline(rows=["engine", "your browser"], x_label="ms since the request")
    timeline.set_wait("engine", [("queued", 0, 12.0), ("prefill", 12.0, 48.5)])
    timeline.add_ticks("engine", [48.5, 60.1], texts=["The", " model"])

Each row has its own ColumnDataSource (`timeline.sources[row]`, columns x, row, index, text), so
a row can also be filled by someone else: widgets.browser_clock.BrowserClock streams the
browser's own arrival times into a row from JavaScript. The figure is built once; ticks are
streamed into the sources, the shaded spans replaced in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import panel as pn
import param
from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.plotting import figure

from .a11y import ChartText
from .palette import PHASE_FILL, SERIES, SERIES_DASH
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, sig

TICK_COLORS = SERIES
SPAN_COLORS = {part: PHASE_FILL[part] for part in ("queued", "prefill", "waiting")}


def empty_ticks() -> dict:
    return {"x": [], "row": [], "index": [], "text": []}


class TokenTimeline(pn.viewable.Viewer):
    """Ticks for tokens on a millisecond axis, one row per clock; the wait before the first
    token shaded, split into its parts (queued, prefill) when they are known."""

    rows = param.List(default=["engine"], item_type=str, constant=True, doc="""
        The rows, top to bottom (for example the engine's clock and the browser's).""")
    title = param.String(default="", doc="The figure's title.")
    x_label = param.String(default="time (ms)", doc="The time axis' label, with its unit.")
    height = param.Integer(default=200, bounds=(80, None), doc="The figure's height in pixels.")

    def __init__(self, **params):
        super().__init__(**params)
        self.sources: dict[str, ColumnDataSource] = {
            row: ColumnDataSource(empty_ticks(), name=f"ticks {row}") for row in self.rows}
        self.spans = ColumnDataSource({"left": [], "right": [], "row": [], "part": [],
                                       "color": []}, name="spans")
        fig = figure(title=self.title or None, height=self.height, sizing_mode="stretch_width",
                     y_range=FactorRange(factors=list(reversed(self.rows))),
                     x_axis_label=self.x_label, tools="xpan,xwheel_zoom,reset,save",
                     toolbar_location="above")
        fig.x_range.start = 0
        spans = fig.hbar(y="row", left="left", right="right", height=0.7, color="color",
                         alpha=0.55, source=self.spans, legend_field="part")
        for i, row in enumerate(self.rows):
            fig.scatter("x", "row", source=self.sources[row], marker="dash", angle=math.pi / 2,
                        size=22, line_width=2, color=TICK_COLORS[i % len(TICK_COLORS)],
                        line_dash=SERIES_DASH[i % len(SERIES_DASH)])  # rows differ in greyscale too
        fig.add_tools(HoverTool(renderers=[r for r in fig.renderers if r is not spans],
                                tooltips=[("token", "@index: @text"), ("at", "@x{0.0} ms")]))
        fig.legend.location = "top_right"
        fig.legend.orientation = "horizontal"
        fig.xgrid.grid_line_alpha = 0.4
        fig.ygrid.grid_line_color = None
        self.figure = fig
        self._pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.text = ChartText(f"Timeline of the tokens as they arrived: {self.title or self.x_label}",
                              fig, table_css="ticks-table")
        self._layout = pn.Column(self._pane, self.text.summary, self.text.table,
                                 sizing_mode="stretch_width")
        self._describe()

    @changes_bokeh_models
    def clear(self) -> None:
        """Forget every tick and span (a new run)."""
        for source in self.sources.values():
            source.data = empty_ticks()
        self.spans.data = {"left": [], "right": [], "row": [], "part": [], "color": []}
        self._describe()

    @changes_bokeh_models
    def add_ticks(self, row: str, times_ms: Sequence[float], texts: Sequence[str] | None = None,
                  start_index: int | None = None) -> None:
        """Stream ticks into a row; token indices count on from the row's last one."""
        if not times_ms:
            return
        source = self.sources[row]
        first = len(source.data["x"]) if start_index is None else start_index
        texts = list(texts) if texts is not None else [""] * len(times_ms)
        source.stream({"x": [float(t) for t in times_ms], "row": [row] * len(times_ms),
                       "index": list(range(first, first + len(times_ms))),
                       "text": [str(t) for t in texts]})
        self._describe()

    @changes_bokeh_models
    def set_wait(self, row: str, parts: Sequence[tuple[str, float, float]]) -> None:
        """Shade a row's wait before its first token: (part, start ms, end ms) per part."""
        data = {k: list(v) for k, v in self.spans.data.items()}
        keep = [i for i, r in enumerate(data["row"]) if r != row]
        data = {k: [v[i] for i in keep] for k, v in data.items()}
        for part, start, end in parts:
            data["left"].append(float(start))
            data["right"].append(float(max(start, end)))
            data["row"].append(row)
            data["part"].append(part)
            data["color"].append(SPAN_COLORS.get(part, SPAN_COLORS["waiting"]))
        self.spans.data = data

    def _describe(self) -> None:
        rows, said = [], []
        for row in self.rows:
            ticks = self.ticks(row)
            if ticks:
                rows.append([row, f"{len(ticks):,}", sig(min(ticks)), sig(max(ticks))])
                said.append(f"{row}: {len(ticks):,} tokens, the first at {sig(min(ticks))} ms, "
                            f"the last at {sig(max(ticks))} ms")
            else:
                rows.append([row, "0", "-", "-"])
        self.text.say("; ".join(said) + "." if said else "No tokens yet.")
        self.text.table.object = html_table(
            f"Tokens on each clock ({self.x_label})", ["clock", "tokens", "first (ms)",
                                                       "last (ms)"],
            rows, numeric=[False, True, True, True])

    def ticks(self, row: str) -> list[float]:
        """The times (ms) of a row's ticks, as the page holds them."""
        return list(self.sources[row].data["x"])

    def tick_rows(self) -> list[dict]:
        """Every tick as drawn, row by row (a download of the chart): clock, token index, its
        text and its time (ms)."""
        return [{"clock": row, "token": i, "text": text, "ms": x}
                for row in self.rows
                for x, i, text in zip(*(self.sources[row].data[k] for k in ("x", "index", "text")),
                                      strict=True)]

    def waits(self) -> list[dict]:
        """The shaded waits as drawn: clock, part (queued, prefill), from and to (ms)."""
        d = self.spans.data
        return [{"clock": r, "part": p, "from_ms": a, "to_ms": b}
                for r, p, a, b in zip(d["row"], d["part"], d["left"], d["right"], strict=True)]

    def __panel__(self):
        return self._layout
