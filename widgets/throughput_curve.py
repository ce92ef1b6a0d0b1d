"""The batch-size curve: total tokens per second and each user's time per token against the batch
size, built point by point as measurements come in, with a "you are here" marker.

    curve = ThroughputCurve()
    curve.add_point(8, tokens_per_s=950.0, ms_per_token=8.4, origin="measured live")
    curve.set_here(8)

Each point may carry its sample count n (decode steps timed) and 95% intervals of both values
(`interval=(tokens_lo, tokens_hi, ms_lo, ms_hi)`), drawn as whiskers; None draws none.

Points are streamed into `points` (one row per batch size; measuring a batch size again patches
its row). The lines through them are redrawn in batch order from the same points. Two y axes:
tokens/s (left, all users together) and ms per token (right, what one user waits between
tokens). The x axis is logarithmic in base 2, so each doubling is one step to the right.
"""

from __future__ import annotations

import panel as pn
import param
from bokeh.models import (
    ColumnDataSource,
    HoverTool,
    LinearAxis,
    LogTickFormatter,
    Range1d,
    Span,
    Whisker,
)
from bokeh.plotting import figure

from .a11y import ChartText
from .palette import BLUE, SERIES_DASH, SERIES_MARKER, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import sig

X_LABEL = "batch size (sequences decoding together)"
THROUGHPUT_COLOR = BLUE
LATENCY_COLOR = VERMILLION


INTERVAL = ("tokens_lo", "tokens_hi", "ms_lo", "ms_hi")
NAN = float("nan")


def _empty_points() -> dict:
    return {"batch": [], "tokens_per_s": [], "ms_per_token": [], "origin": [], "cached": [],
            "size": [], "n": [], **{k: [] for k in INTERVAL}}


class ThroughputCurve(pn.viewable.Viewer):
    """Total tokens/s and per-user ms/token against batch size, one point per measurement."""

    title = param.String(default="", doc="The figure's title.")
    max_batch = param.Integer(default=64, bounds=(2, None), doc="The x axis' right end.")
    here = param.Integer(default=None, allow_None=True, doc="The batch size marked as 'you are here'.")
    height = param.Integer(default=340, bounds=(120, None), doc="Figure height in pixels.")

    def __init__(self, **params):
        super().__init__(**params)
        self.points = ColumnDataSource(_empty_points(), name="points")
        self.lines = ColumnDataSource({"batch": [], "tokens_per_s": [], "ms_per_token": []},
                                      name="lines")
        self.marker = ColumnDataSource({"batch": [], "tokens_per_s": [], "ms_per_token": []},
                                       name="you are here")
        fig = figure(title=self.title or None, height=self.height, sizing_mode="stretch_width",
                     x_axis_type="log", x_range=Range1d(0.8, self.max_batch * 1.25),
                     x_axis_label=X_LABEL,
                     y_axis_label="total tokens/s (all users)", tools="save,reset",
                     toolbar_location="above")
        fig.xaxis.formatter = LogTickFormatter()
        fig.xaxis.ticker.base = 2
        fig.y_range.start = 0
        fig.extra_y_ranges = {"latency": Range1d(0, 1)}
        right = LinearAxis(y_range_name="latency", axis_label="ms per token (each user)")
        fig.add_layout(right, "right")
        fig.line("batch", "tokens_per_s", source=self.lines, color=THROUGHPUT_COLOR,
                 line_width=2, line_dash=SERIES_DASH[0], legend_label="total tokens/s")
        fig.line("batch", "ms_per_token", source=self.lines, color=LATENCY_COLOR, line_width=2,
                 line_dash=SERIES_DASH[1], y_range_name="latency", legend_label="ms per token, each user")
        tput = fig.scatter("batch", "tokens_per_s", source=self.points, size="size",
                           color=THROUGHPUT_COLOR, marker=SERIES_MARKER[0])
        lat = fig.scatter("batch", "ms_per_token", source=self.points, size="size",
                          color=LATENCY_COLOR, marker=SERIES_MARKER[1], y_range_name="latency")
        for lo, hi, color, extra in (("tokens_lo", "tokens_hi", THROUGHPUT_COLOR, {}),
                                     ("ms_lo", "ms_hi", LATENCY_COLOR,
                                      {"y_range_name": "latency"})):
            fig.add_layout(Whisker(source=self.points, base="batch", lower=lo, upper=hi,
                                   line_color=color, **extra))
        fig.scatter("batch", "tokens_per_s", source=self.marker, size=20, fill_alpha=0,
                    line_color="black", line_width=2, legend_label="you are here")
        fig.scatter("batch", "ms_per_token", source=self.marker, size=20, fill_alpha=0,
                    line_color="black", line_width=2, marker="square", y_range_name="latency")
        fig.add_tools(HoverTool(renderers=[tput, lat], tooltips=[
            ("batch", "@batch"), ("total", "@tokens_per_s{0,0} tokens/s"),
            ("each user", "@ms_per_token{0.00} ms/token"),
            ("95% CI", "@tokens_lo{0,0} to @tokens_hi{0,0} tokens/s; "
                       "@ms_lo{0.00} to @ms_hi{0.00} ms"),
            ("decode steps timed", "@n"), ("", "@origin")]))
        self.here_line = Span(location=1, dimension="height", line_color="black",
                              line_dash="dotted", visible=False)
        fig.add_layout(self.here_line)
        legend = fig.legend[0]
        legend.orientation = "horizontal"
        fig.add_layout(legend, "below")
        self.figure = fig
        self.noun = "batch size"  # what the x axis counts, in the chart's summary
        self.point_word = "batch"  # a point's x in the summary: "batch 16"
        self._pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        # the page fills text.table with its points table (it knows where each came from)
        self.text = ChartText("Chart of total tokens per second and each user's time per token "
                              "against the batch size", fig, table_css="points-table")
        self._layout = pn.Column(self._pane, self.text.summary, self.text.table,
                                 sizing_mode="stretch_width")
        self._describe()

    @changes_bokeh_models
    def set_x_label(self, label: str | None = None, noun: str = "batch size",
                    point_word: str = "batch") -> None:
        """What the x axis counts (None: the batch size), its noun in the chart's summary and
        the word before a point's x there; a lesson measuring a server whose batch is its own
        counts concurrent clients instead."""
        self.figure.xaxis.axis_label = label or X_LABEL
        self.noun, self.point_word = noun, point_word
        self._describe()

    # ---- data ---------------------------------------------------------------------------------
    @changes_bokeh_models
    def clear(self) -> None:
        self.points.data = _empty_points()
        self.lines.data = {"batch": [], "tokens_per_s": [], "ms_per_token": []}
        self.marker.data = {"batch": [], "tokens_per_s": [], "ms_per_token": []}

    @changes_bokeh_models
    def add_point(self, batch: int, tokens_per_s: float, ms_per_token: float,
                  origin: str = "", cached: bool = False, n: int = 0,
                  interval: tuple[float, float, float, float] | None = None) -> None:
        """Add (or replace) the point of one batch size; origin says where it came from, n how
        many decode steps it was timed from, interval its 95% whiskers (tokens/s, then ms)."""
        row = {"batch": int(batch), "tokens_per_s": float(tokens_per_s),
               "ms_per_token": float(ms_per_token), "origin": origin, "cached": bool(cached),
               "size": 8 if cached else 11, "n": int(n),
               **dict(zip(INTERVAL, interval or (NAN,) * 4, strict=True))}
        batches = list(self.points.data["batch"])
        if batch in batches:
            i = batches.index(batch)
            self.points.patch({k: [(i, v)] for k, v in row.items()})
        else:
            self.points.stream({k: [v] for k, v in row.items()})
        self._redraw_lines()
        self._mark()

    def point(self, batch: int) -> dict | None:
        """The drawn point of a batch size, or None."""
        batches = list(self.points.data["batch"])
        if batch not in batches:
            return None
        i = batches.index(batch)
        return {k: v[i] for k, v in self.points.data.items()}

    def batches(self) -> list[int]:
        return sorted(self.points.data["batch"])

    def set_here(self, batch: int | None) -> None:
        self.here = batch
        self._mark()

    # ---- drawing ------------------------------------------------------------------------------
    @changes_bokeh_models
    def _redraw_lines(self) -> None:
        data = self.points.data
        order = sorted(range(len(data["batch"])), key=lambda i: data["batch"][i])
        self.lines.data = {k: [data[k][i] for i in order]
                           for k in ("batch", "tokens_per_s", "ms_per_token")}
        ms = [v for v in [*data["ms_per_token"], *data["ms_hi"]] if v == v]
        top = max(ms) if ms else 1.0
        self.figure.extra_y_ranges["latency"].update(start=0, end=top * 1.15)
        self._describe()

    def _describe(self) -> None:
        lines = self.lines.data
        noun = self.noun
        if not lines["batch"]:
            self.text.say(f"No {noun} measured yet.")
            return

        def at(i: int) -> str:
            return (f"{self.point_word} {lines['batch'][i]}, {sig(lines['tokens_per_s'][i])} tokens/s in all "
                    f"and {sig(lines['ms_per_token'][i])} ms per token for each user")

        n = len(lines["batch"])
        self.text.say(f"{n} {noun}{'s' if n != 1 else ''} measured: " + (
            at(0) if n == 1 else f"from {at(0)}, to {at(n - 1)}") + ".")

    @changes_bokeh_models
    def _mark(self) -> None:
        here = self.here
        self.here_line.update(location=here or 1, visible=here is not None)
        point = self.point(here) if here is not None else None
        self.marker.data = ({"batch": [here], "tokens_per_s": [point["tokens_per_s"]],
                             "ms_per_token": [point["ms_per_token"]]} if point else
                            {"batch": [], "tokens_per_s": [], "ms_per_token": []})

    def __panel__(self):
        return self._layout
