"""Horizontal bars comparing a few counts (e.g. how many sequences fit a memory budget under two
ways of reserving it), each labelled with its number, and a sentence-per-bar table beside.

`set(bars)` takes [(label, count, note)]: the same labels patch the bars in place.
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource

from .chart_view import ChartView, bar_figure
from .palette import BLUE, GREEN, GREY, INK, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table

COLORS = (GREY, BLUE, GREEN, VERMILLION)
FIELDS = ("label", "count", "text", "color", "note")


class CountBars(ChartView):
    """A few labelled counts as horizontal bars."""

    unit = param.String(default="sequences", doc="What is counted.")
    title = param.String(default="", doc="The chart's title.")
    height = param.Integer(default=160, bounds=(80, None))

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({f: [] for f in FIELDS})
        fig = bar_figure(self.title, self.unit, self.height)
        fig.hbar(y="label", right="count", height=0.6, source=self.source, color="color")
        fig.text(x="count", y="label", text="text", source=self.source, x_offset=6,
                 text_baseline="middle", text_font_size="12px", text_color=INK)
        self._place(fig, f"Bar chart: {self.title or self.unit}", table_css="count-table")
        self.set([])

    @changes_bokeh_models
    def set(self, bars: list[tuple[str, int, str]]) -> None:
        labels = [b[0] for b in bars]
        data = {"label": labels, "count": [b[1] for b in bars],
                "text": [f"{b[1]:,}" for b in bars],
                "color": [COLORS[i % len(COLORS)] for i in range(len(bars))],
                "note": [b[2] for b in bars]}
        if labels and labels == list(self.source.data["label"]):
            n = len(labels)
            self.source.patch({f: [(slice(0, n), data[f])] for f in ("count", "text", "note")})
        else:
            self.figure.y_range.factors = list(reversed(labels))
            self.source.data = data
        self.figure.x_range.end = max([b[1] for b in bars], default=1) * 1.25 or 1
        self._table.object = html_table(
            self.title or "Counts", ["", self.unit, "why"],
            [[b[0], f"{b[1]:,}", b[2]] for b in bars], numeric=[False, True, False])
        self.text.say("; ".join(f"{b[0]}: {b[1]:,} {self.unit}" for b in bars) + "."
                      if bars else "Nothing counted yet.")

    def counts(self) -> dict[str, int]:
        return dict(zip(self.source.data["label"], self.source.data["count"], strict=True))
