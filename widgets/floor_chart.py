"""Measured times beside the floor physics puts under them, against one knob (e.g. TPOT and its
memory-bandwidth floor against batch size), with a table of both and their ratio.

A measured value that is a statistic of several samples (the median of a point's timed steps)
carries its 95% interval, drawn as a whisker and written in the table, and its sample count.
Points arrive one at a time (`add`) and are kept sorted by x; the chart is built once.
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource, HoverTool, Whisker
from bokeh.plotting import figure

from engine.calc.stats import Estimate

from .chart_view import ChartView
from .palette import BLUE, GREY, SERIES_MARKER
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, sig, with_interval

# lo, hi: the measured value's 95% interval and n its samples (None when it has none)
FIELDS = ("x", "measured", "floor", "ratio", "lo", "hi", "n")


class FloorChart(ChartView):
    """Two lines against x: what was measured, and the least it could have been."""

    x_label = param.String(default="batch size", doc="What x is.")
    y_label = param.String(default="time per decode step (ms)", doc="What both lines measure.")
    measured_label = param.String(default="measured", doc="Legend of the measured line.")
    floor_label = param.String(default="floor: bytes moved / measured bandwidth",
                               doc="Legend of the floor line.")
    log_x = param.Boolean(default=True, constant=True, doc="A log2 x axis (batch sizes).")
    log_y = param.Boolean(default=True, constant=True,
                          doc="A log y axis, so a floor far below the measured line still shows.")
    height = param.Integer(default=320, bounds=(150, None))

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({f: [] for f in FIELDS}, name="floor points")
        self._estimates: dict[float, Estimate | None] = {}  # by x: the table's † needs them
        fig = figure(height=self.height, sizing_mode="stretch_width",
                     x_axis_type="log" if self.log_x else "linear",
                     y_axis_type="log" if self.log_y else "linear",
                     tools="pan,wheel_zoom,reset,save", x_axis_label=self.x_label,
                     y_axis_label=self.y_label)
        if self.log_x:
            from bokeh.models import LogTicker
            fig.xaxis.ticker = LogTicker(base=2, mantissas=[1])
        fig.line("x", "measured", source=self.source, line_width=2, color=BLUE,
                 legend_label=self.measured_label)
        fig.add_layout(Whisker(source=self.source, base="x", lower="lo", upper="hi",
                               line_color=BLUE))
        fig.scatter("x", "measured", source=self.source, size=8, color=BLUE, marker=SERIES_MARKER[0])
        fig.line("x", "floor", source=self.source, line_width=2, line_dash="dashed",
                 color=GREY, legend_label=self.floor_label)
        fig.scatter("x", "floor", source=self.source, size=6, color=GREY, marker=SERIES_MARKER[1])
        fig.add_tools(HoverTool(tooltips=[(self.x_label, "@x"), ("measured", "@measured{0.00}"),
                                          ("floor", "@floor{0.00}"), ("ratio", "@ratio{0.0}x"),
                                          ("samples", "@n")]))
        fig.legend.location = "top_left"
        if not self.log_y:
            fig.y_range.start = 0
        self._place(fig, f"Chart of {self.measured_label} against {self.floor_label}",
                    table_css="floor-table")
        self._refresh_table()

    @changes_bokeh_models
    def add(self, x: float, measured: float, floor: float, est: Estimate | None = None) -> None:
        """One knob setting: the measured value and its floor (same units); est, the measured
        value's 95% interval and sample count (drawn when its samples bound it)."""
        rows = [r for r in self.rows() if r["x"] != x]
        drawn = est is not None and est.bounded and est.lo is not None
        rows.append({"x": x, "measured": measured, "floor": floor,
                     "ratio": measured / floor if floor else float("nan"),
                     "lo": est.lo if drawn else None, "hi": est.hi if drawn else None,
                     "n": est.n if est is not None else None})
        self._estimates[x] = est
        rows.sort(key=lambda r: r["x"])
        if len(rows) == len(self.source.data["x"]) + 1 and rows[-1]["x"] == x:
            self.source.stream({f: [rows[-1][f]] for f in FIELDS})
        else:
            self.source.data = {f: [r[f] for r in rows] for f in FIELDS}
        self._refresh_table()

    @changes_bokeh_models
    def clear(self) -> None:
        self.source.data = {f: [] for f in FIELDS}
        self._estimates.clear()
        self._refresh_table()

    def rows(self) -> list[dict]:
        d = self.source.data
        return [dict(zip(FIELDS, row, strict=True))
                for row in zip(*(d[f] for f in FIELDS), strict=True)]

    def _refresh_table(self) -> None:
        self._table.object = html_table(
            f"{self.measured_label} [its 95% interval] and {self.floor_label}",
            [self.x_label, f"{self.measured_label}", "samples", "floor", "measured / floor"],
            [[sig(r["x"]), with_interval(r["measured"], self._estimates.get(r["x"])),
              "-" if r["n"] is None else f"{r['n']}", sig(r["floor"]), f"{r['ratio']:.1f}x"]
             for r in self.rows()], numeric=[False, True, True, True, True])
        ratios = [r["ratio"] for r in self.rows() if r["ratio"] == r["ratio"]]
        self.text.say(f"{self.measured_label} at {len(ratios)} settings: from "
                      f"{min(ratios):.1f}x to {max(ratios):.1f}x its floor." if ratios else
                      f"No {self.measured_label} measured yet.")
