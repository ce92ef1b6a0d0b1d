"""Throughput and goodput against the offered request rate, in two panels that compare like with
like: requests per second (offered, completed, meeting the targets) and output tokens per second
(all, and those of requests meeting the targets). A table beside gives the same numbers.

Points are dicts {"rate", "completed_rps", "goodput_rps", "throughput_tok_s", "goodput_tok_s"}
(goodput fields may be None: no targets), each figure optionally with its 95% interval
("<figure>_lo", "<figure>_hi": drawn as whiskers, written in the table) and "runs", the runs it
rests on; `add` streams one, `set_points` replaces them all (as when the reader changes the
targets and goodput is judged again).
"""

from __future__ import annotations

import math

import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, LogTicker, Whisker
from bokeh.plotting import figure

from .a11y import ChartText
from .palette import BLUE, GREEN, GREY, SERIES_DASH
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, interval_text, sig

FIGURES = ("completed_rps", "goodput_rps", "throughput_tok_s", "goodput_tok_s")
FIELDS = ("rate", *FIGURES, *(f"{f}_{end}" for f in FIGURES for end in ("lo", "hi")), "runs")
THROUGHPUT_COLOR, GOODPUT_COLOR, OFFERED_COLOR = BLUE, GREEN, GREY


def _nan(value):
    return float("nan") if value is None else value


class RateCurve(pn.viewable.Viewer):
    """Requests/s and tokens/s against the request rate sent to the engine."""

    height = param.Integer(default=320, bounds=(150, None))
    log_x = param.Boolean(default=True, constant=True,
                          doc="A log2 rate axis (rates that double from one point to the next).")
    goodput_label = param.String(default="goodput (met every target)",
                                 doc="Legend of the goodput lines.")

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({f: [] for f in FIELDS}, name="rate points")
        self.offered = ColumnDataSource({"x": [], "y": []})
        common = {"height": self.height, "sizing_mode": "stretch_width",
                  "x_axis_type": "log" if self.log_x else "linear",
                  "tools": "pan,wheel_zoom,reset,save",
                  "x_axis_label": "offered request rate (requests/s)"}
        rps = figure(title="Requests per second", y_axis_label="requests/s", **common)
        rps.line("x", "y", source=self.offered, color=OFFERED_COLOR, line_dash="dotted",
                 line_width=2, legend_label="offered (y = x)")
        rps.line("rate", "completed_rps", source=self.source, color=THROUGHPUT_COLOR,
                 line_width=2, legend_label="completed")
        rps.scatter("rate", "completed_rps", source=self.source, color=THROUGHPUT_COLOR, size=8)
        rps.line("rate", "goodput_rps", source=self.source, color=GOODPUT_COLOR, line_width=2,
                 line_dash=SERIES_DASH[1],
                 legend_label=self.goodput_label)
        rps.scatter("rate", "goodput_rps", source=self.source, color=GOODPUT_COLOR, size=8,
                    marker="square")
        toks = figure(title="Output tokens per second (the whole server)",
                      y_axis_label="tokens/s", x_range=rps.x_range, **common)
        toks.line("rate", "throughput_tok_s", source=self.source, color=THROUGHPUT_COLOR,
                  line_width=2, legend_label="throughput")
        toks.scatter("rate", "throughput_tok_s", source=self.source, color=THROUGHPUT_COLOR,
                     size=8)
        toks.line("rate", "goodput_tok_s", source=self.source, color=GOODPUT_COLOR, line_width=2,
                  line_dash=SERIES_DASH[1],
                  legend_label="tokens of requests that met every target")
        toks.scatter("rate", "goodput_tok_s", source=self.source, color=GOODPUT_COLOR, size=8,
                     marker="square")
        for fig, figures in ((rps, FIGURES[:2]), (toks, FIGURES[2:])):
            for field, color in zip(figures, (THROUGHPUT_COLOR, GOODPUT_COLOR), strict=True):
                fig.add_layout(Whisker(source=self.source, base="rate", lower=f"{field}_lo",
                                       upper=f"{field}_hi", line_color=color))
        if self.log_x:
            rps.xaxis.ticker = LogTicker(base=2, mantissas=[1])
            toks.xaxis.ticker = rps.xaxis.ticker
        for fig in (rps, toks):
            fig.y_range.start = 0
            fig.legend.location = "top_left"
            fig.add_tools(HoverTool(tooltips=[("rate", "@rate{0.00} req/s"),
                                              ("completed", "@completed_rps{0.00} req/s"),
                                              ("goodput", "@goodput_rps{0.00} req/s"),
                                              ("throughput", "@throughput_tok_s{0.0} tok/s"),
                                              ("goodput tokens", "@goodput_tok_s{0.0} tok/s"),
                                              ("runs", "@runs")]))
        toks.legend.location = "bottom_right"
        self.figures = (rps, toks)
        self.text = ChartText("Charts of throughput and goodput against the offered rate",
                              rps, toks, table_css="rate-table")
        self._table = self.text.table
        # one column: a figure's aria-describedby finds the summary and table in its own layout
        self._layout = pn.Column(
            pn.pane.Bokeh(rps, sizing_mode="stretch_width"),
            pn.pane.Bokeh(toks, sizing_mode="stretch_width"),
            self.text.summary, self._table, sizing_mode="stretch_width")
        self._refresh()

    @changes_bokeh_models
    def add(self, point: dict) -> None:
        """One more rate (kept in rate order: appended if it is the highest so far)."""
        rows = self.points()
        if rows and point["rate"] <= rows[-1]["rate"]:
            self.set_points([*rows, point])
            return
        self.source.stream({f: [_nan(point.get(f))] for f in FIELDS})
        self._refresh()

    @changes_bokeh_models
    def set_points(self, points: list[dict]) -> None:
        rows = sorted(points, key=lambda p: p["rate"])
        new = {f: [_nan(p.get(f)) for p in rows] for f in FIELDS}
        if len(rows) == len(self.source.data["rate"]) and rows:
            self.source.patch({f: [(slice(0, len(rows)), new[f])] for f in FIELDS})
        else:
            self.source.data = new
        self._refresh()

    def points(self) -> list[dict]:
        d = self.source.data
        return [{f: (None if isinstance(v, float) and math.isnan(v) else v)
                 for f, v in zip(FIELDS, row, strict=True)}
                for row in zip(*(d[f] for f in FIELDS), strict=True)]

    @property
    def table_html(self) -> str:
        return self._table.object

    @changes_bokeh_models
    def _refresh(self) -> None:
        rows = self.points()
        rates = [r["rate"] for r in rows]
        self.offered.data = {"x": rates, "y": rates}
        self._table.object = html_table(
            "Throughput and goodput at each offered rate [95% interval over its runs]",
            ["offered rate (req/s)", "completed (req/s)", "goodput (req/s)",
             "throughput (tokens/s)", "goodput (tokens/s)", "runs"],
            [[sig(r["rate"]), *[interval_text(r[f], r[f"{f}_lo"], r[f"{f}_hi"]) for f in FIGURES],
              "-" if r["runs"] is None else f"{r['runs']}"] for r in rows],
            numeric=[False, True, True, True, True, True])
        good = [r for r in rows if r["goodput_rps"] is not None]
        if good:
            best = max(good, key=lambda r: r["goodput_rps"])
            self.text.say(f"{len(rows)} offered rates measured; the most goodput, "
                          f"{sig(best['goodput_rps'])} requests/s, came at an offered "
                          f"{sig(best['rate'])} requests/s, with {sig(best['completed_rps'])} "
                          "requests/s completed.")
        else:
            self.text.say(f"{len(rows)} offered rates measured." if rows else
                          "No rates measured yet.")

    def __panel__(self):
        return self._layout
