"""A latency histogram with the median, the mean and the tail percentiles marked.

    hist = LatencyHistogram(title="End-to-end latency", x_label="E2E (ms)")
    hist.update(values_ms)                       # bars and markers from the values
    hist.update(values_ms, summary=metrics["e2e_ms"])   # or markers from a run's summary

Markers (P50, mean, P90, P95, P99 by default) are vertical lines with labels; percentiles are
numpy's linear interpolation, as the engine's metrics define them, unless a summary is given.
Behind each line a band in its colour is its 95% bootstrap interval over the values
(engine.calc.stats); a percentile too few values bound has no band and a † on its label.
`rows()` gives the same numbers for a table beside the chart. The figure is built once; its
sources are replaced in place on each update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from engine.calc.stats import Estimate, estimates

from .a11y import ChartText
from .palette import BLUE, GREEN, GREY, INK, PURPLE, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import UNBOUNDED, html_table, sig, with_interval

MARKERS = ("p50", "mean", "p90", "p95", "p99")
MARKER_LABELS = {"p50": "P50", "mean": "mean", "p90": "P90", "p95": "P95", "p99": "P99",
                 "max": "max"}
# Each marker differs in colour AND line style (told apart in greyscale); its label names it.
MARKER_COLORS = {"p50": GREEN, "mean": PURPLE, "p90": BLUE, "p95": VERMILLION, "p99": VERMILLION,
                 "max": GREY}
MARKER_DASH = {"p50": "solid", "mean": "dotted", "p90": "dashed", "p95": "dotdash",
               "p99": "dashdot", "max": "solid"}


def marker_values(values: Sequence[float], summary: Mapping | None = None,
                  markers: Sequence[str] = MARKERS) -> dict[str, float]:
    """name -> value for each marker: from the summary when given, else computed (numpy linear
    percentiles, the engine's definition). Empty values give no markers."""
    if summary is not None:
        return {m: float(summary[m]) for m in markers if summary.get(m) is not None}
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return {}
    out = {}
    for m in markers:
        if m == "mean":
            out[m] = float(data.mean())
        elif m == "max":
            out[m] = float(data.max())
        else:
            out[m] = float(np.percentile(data, float(m[1:])))
    return out


def histogram(values: Sequence[float], bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts, edges) over [0, max]: latency starts at zero, so the axis does too."""
    data = np.asarray(list(values), dtype=float)
    top = float(data.max()) if data.size else 1.0
    return np.histogram(data, bins=bins, range=(0.0, top * 1.02 if top > 0 else 1.0))


class LatencyHistogram(pn.viewable.Viewer):
    """Histogram of latencies (ms) with P50, mean and tail percentiles marked."""

    title = param.String(default="", doc="The figure's title.")
    x_label = param.String(default="latency (ms)", doc="The value axis' label, with its unit.")
    bins = param.Integer(default=30, bounds=(2, 500), doc="Number of bars.")
    markers = param.List(default=list(MARKERS), item_type=str, doc="""
        Which markers to draw: any of p50, mean, p90, p95, p99, max.""")
    height = param.Integer(default=260, bounds=(100, None), doc="Figure height in pixels.")
    count = param.Integer(default=0, bounds=(0, None), doc="How many values are drawn.")

    def __init__(self, **params):
        super().__init__(**params)
        self.bars = ColumnDataSource({"left": [], "right": [], "count": []}, name="bars")
        self.marks = ColumnDataSource({"x": [], "name": [], "label": [], "color": [], "dash": [],
                                       "y": [], "top": [], "align": [], "dx": [], "lo": [],
                                       "hi": []}, name="marks")
        fig = figure(title=self.title or None, height=self.height, sizing_mode="stretch_width",
                     x_axis_label=self.x_label, y_axis_label="requests",
                     tools="xpan,xwheel_zoom,reset,save", toolbar_location="above")
        bars = fig.quad(left="left", right="right", bottom=0, top="count", source=self.bars,
                        fill_color="#A6CEE3", line_color="white")
        # each marker's 95% interval: a band in its colour behind its line
        fig.quad(left="lo", right="hi", bottom=0, top="top", source=self.marks,
                 fill_color="color", fill_alpha=0.15, line_alpha=0)
        fig.segment(x0="x", x1="x", y0=0, y1="top", source=self.marks, color="color",
                    line_width=2, line_dash="dash")
        # labels in ink on a white box: 4.5:1 whatever the bars or the theme behind them
        fig.text(x="x", y="y", text="label", source=self.marks, text_color=INK,
                 text_font_size="11px", x_offset="dx", text_align="align",
                 text_baseline="middle", background_fill_color="#FFFFFF",
                 background_fill_alpha=0.85)
        fig.add_tools(HoverTool(renderers=[bars], tooltips=[
            ("from", "@left{0.0} ms"), ("to", "@right{0.0} ms"), ("requests", "@count")]))
        fig.y_range.start = 0
        fig.xgrid.grid_line_color = None
        self.figure = fig
        self._pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.values: dict[str, float] = {}
        self.estimates: dict[str, Estimate] = {}  # each marker's 95% interval (not max)
        self.text = ChartText(f"Histogram: {self.title or self.x_label}", fig,
                              table_css="histogram-table")
        self._layout = pn.Column(self._pane, self.text.summary, self.text.table,
                                 sizing_mode="stretch_width")
        self._describe()

    @changes_bokeh_models
    def update(self, values_ms: Sequence[float], summary: Mapping | None = None) -> None:
        """Draw these latencies; markers from `summary` (mean, p50, ...) if given."""
        values = [float(v) for v in values_ms if v is not None]
        counts, edges = histogram(values, self.bins)
        self.bars.data = {"left": edges[:-1].tolist(), "right": edges[1:].tolist(),
                          "count": counts.tolist()}
        self.values = marker_values(values, summary, self.markers)
        names = [n for n in self.values if n != "max"]  # one set of resamples for them all
        self.estimates = dict(zip(names, estimates(
            values, [None if n == "mean" else float(n[1:]) for n in names])))
        top = float(counts.max()) if counts.size and counts.max() > 0 else 1.0
        names = list(self.values)
        band = {n: (e.lo, e.hi) if e.bounded and e.lo is not None else (None, None)
                for n, e in self.estimates.items()}
        self.marks.data = {
            "x": [self.values[n] for n in names], "name": names,
            "label": [f"{MARKER_LABELS[n]} {self.values[n]:,.0f} ms"
                      f"{'' if n not in self.estimates or self.estimates[n].bounded else ' ' + UNBOUNDED}"
                      for n in names],
            "lo": [band.get(n, (None, None))[0] for n in names],
            "hi": [band.get(n, (None, None))[1] for n in names],
            "color": [MARKER_COLORS[n] for n in names],
            "dash": [MARKER_DASH[n] for n in names],
            # labels stacked at different heights so close markers stay readable
            "y": [top * (1.0 - 0.13 * i) for i, _ in enumerate(names)],
            "top": [top * 1.05] * len(names),
            # labels of markers in the right third sit on their left, inside the plot
            "align": ["right" if self.values[n] > 0.66 * edges[-1] else "left" for n in names],
            "dx": [-4 if self.values[n] > 0.66 * edges[-1] else 4 for n in names]}
        self.count = len(values)
        self._describe()

    def _describe(self) -> None:
        what = self.title or self.x_label
        marks = ", ".join(f"{label} {sig(ms)} ms" for label, ms in self.rows())
        self.text.say(f"{what}: {self.count:,} requests; {marks}." if self.count else
                      f"{what}: nothing measured yet.")
        self.text.table.object = html_table(
            f"{what}: the marked values (ms), each with its 95% interval [low–high] over the "
            f"{self.count:,} requests; {UNBOUNDED} too few requests to bound that percentile",
            ["marker", "ms"],
            [[label, with_interval(ms, self.estimates.get(name))]
             for name, (label, ms) in zip(self.values, self.rows())], numeric=[False, True])

    def clear(self) -> None:
        self.update([])

    def rows(self) -> list[tuple[str, float]]:
        """(label, ms) for each marker, in the order drawn: the text beside the chart."""
        return [(MARKER_LABELS[n], v) for n, v in self.values.items()]

    def __panel__(self):
        return self._layout
