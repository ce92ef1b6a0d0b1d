"""The class run's live charts: lines over run time, the batch of each step, a histogram with
one reader's own requests picked out, and the lanes of the last seconds. Each is built once and
updated in place (rows streamed, a histogram's bars replaced in its source); each has a one-line
summary for screen readers beside it.

Knob changes are marked on every time axis from one source per page (KnobMarks): a vertical band
at the change's run time and a label in plain words, so "chunked prefill off" sits where the tail
moved.

    marks = KnobMarks()
    chart = TimeChart(title="Requests", y_label="requests",
                      series=[("in_flight", "in flight"), ("waiting", "waiting")], marks=marks)
    chart.stream([{"t_s": 1.0, "in_flight": 3, "waiting": 0}])
    marks.show([{"t_s": 12.0, "label": "chunked prefill off"}])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, LabelSet, Range1d
from bokeh.plotting import figure

from .a11y import ChartText, describe_chart
from .chart_view import chart_column
from .palette import BLUE, GREY, PHASE_FILL, SERIES, SERIES_DASH, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import sig

ROLLOVER = 20000  # rows a time chart keeps in the browser
MINE = VERMILLION  # the reader's own requests, wherever they are drawn
EVERYONE = "#A6CEE3"
BACKGROUND = "#BBBBBB"
KNOB_FILL = "#F0E442"


class KnobMarks:
    """The knob changes of a page's charts: one source, drawn on each time axis given to it."""

    def __init__(self) -> None:
        self.source = ColumnDataSource({"t_s": [], "right": [], "label": []}, name="knob changes")
        self.count = 0

    def draw_on(self, fig) -> None:
        fig.quad(left="t_s", right="right", bottom=0, top=1, source=self.source,
                 fill_color=KNOB_FILL, fill_alpha=0.5, line_color=GREY, line_dash="dashed",
                 y_range_name="marks", legend_label="knob change")
        fig.add_layout(LabelSet(x="t_s", y=4, y_units="screen", text="label", source=self.source,
                                text_font_size="11px", x_offset=3, text_color="#1D2733",
                                background_fill_color="#FFFFFF", background_fill_alpha=0.8))

    @changes_bokeh_models
    def show(self, changes: Sequence[Mapping]) -> None:
        """Draw these changes (each with t_s and label); only new ones are streamed."""
        new = list(changes)[self.count:]
        if len(changes) < self.count:  # a new run: start over
            self.clear()
            new = list(changes)
        if new:
            self.source.stream({"t_s": [float(c["t_s"]) for c in new],
                                "right": [float(c["t_s"]) + 0.15 for c in new],
                                "label": [str(c["label"]) for c in new]})
            self.count += len(new)

    @changes_bokeh_models
    def clear(self) -> None:
        self.source.data = {"t_s": [], "right": [], "label": []}
        self.count = 0


def summary_text(name: str, fig) -> ChartText:
    """The chart's one-line summary, tied to the figure (these charts show no table)."""
    text = ChartText(name, fig)
    describe_chart(fig, name, text.summary)
    return text


def _figure(title: str, x_label: str, y_label: str, height: int):
    """A live chart's figure: full width, panned and zoomed along x only, counts from 0."""
    fig = figure(title=title, height=height, sizing_mode="stretch_width",
                 x_axis_label=x_label, y_axis_label=y_label,
                 tools="xpan,xwheel_zoom,reset,save", toolbar_location="above")
    fig.y_range.start = 0
    return fig


def _time_figure(title: str, y_label: str, height: int, marks: KnobMarks | None):
    """A figure over run time, with the page's knob changes marked on it."""
    fig = _figure(title, "run time (s)", y_label, height)
    fig.extra_y_ranges = {"marks": Range1d(0, 1)}
    if marks is not None:
        marks.draw_on(fig)
    return fig


class LiveChart(pn.viewable.Viewer):
    """A chart of the class run: its figure with the one-line summary beneath it."""

    def _place(self, fig, name: str, empty: str) -> None:
        """Keep the figure, tie its summary to it (saying `empty` until there is data), and lay
        the two out."""
        self.figure = fig
        self.text = summary_text(name, fig)
        self.text.say(empty)
        self._layout = chart_column(fig, self.text.summary)

    def __panel__(self):
        return self._layout


class TimeChart(LiveChart):
    """Lines over run time, one per series; new points streamed; knob changes marked."""

    title = param.String(default="", doc="The figure's title.")
    y_label = param.String(default="", doc="The value axis' label, with its unit.")
    unit = param.String(default="", doc="The values' unit in the summary sentence.")
    height = param.Integer(default=220, bounds=(100, None), doc="Figure height in pixels.")

    def __init__(self, series: Sequence[tuple[str, str]], marks: KnobMarks | None = None,
                 **params):
        super().__init__(**params)
        self.series = list(series)
        self.source = ColumnDataSource({"t_s": [], **{k: [] for k, _ in self.series}},
                                       name=self.title)
        fig = _time_figure(self.title, self.y_label, self.height, marks)
        for i, (key, label) in enumerate(self.series):
            fig.line("t_s", key, source=self.source, color=SERIES[i % 4],
                     line_dash=SERIES_DASH[i % 4], line_width=2, legend_label=label)
        fig.legend.location = "top_left"
        fig.legend.orientation = "horizontal"
        self._place(fig, self.title, f"{self.title}: nothing measured yet.")

    @changes_bokeh_models
    def stream(self, points: Sequence[Mapping]) -> None:
        """Add these points (each with t_s and every series' key; NaN leaves a gap)."""
        if not points:
            return
        self.source.stream({"t_s": [float(p["t_s"]) for p in points],
                            **{k: [_num(p.get(k)) for p in points] for k, _ in self.series}},
                           rollover=ROLLOVER)
        last = points[-1]
        values = ", ".join(f"{label} {sig(_num(last.get(k)))}{self.unit}"
                           for k, label in self.series if not math.isnan(_num(last.get(k))))
        self.text.say(f"{self.title} at {last['t_s']:.0f} s: {values or 'nothing yet'}.")

    @changes_bokeh_models
    def clear(self) -> None:
        self.source.data = {"t_s": [], **{k: [] for k, _ in self.series}}
        self.text.say(f"{self.title}: nothing measured yet.")


class StepChart(LiveChart):
    """The batch size of each engine step (a dot per step); new steps streamed."""

    height = param.Integer(default=220, bounds=(100, None), doc="Figure height in pixels.")

    def __init__(self, marks: KnobMarks | None = None, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({"t_s": [], "batch": [], "prefill_tokens": []},
                                       name="steps")
        fig = _time_figure("Batch size of each step", "requests in the step", self.height, marks)
        fig.scatter("t_s", "batch", source=self.source, size=4, color=BLUE,
                    legend_label="one step")
        fig.add_tools(HoverTool(tooltips=[("at", "@t_s{0.00} s"), ("batch", "@batch"),
                                          ("prefill tokens", "@prefill_tokens")]))
        fig.legend.location = "top_left"
        self.count = 0
        self._place(fig, "Batch size of each step", "Batch size of each step: no steps yet.")

    @changes_bokeh_models
    def stream(self, steps: Sequence[Mapping]) -> None:
        if not steps:
            return
        self.source.stream({"t_s": [float(s["t_s"]) for s in steps],
                            "batch": [int(s.get("batch") or 0) for s in steps],
                            "prefill_tokens": [int(s.get("prefill_tokens") or 0) for s in steps]},
                           rollover=ROLLOVER)
        self.count += len(steps)
        batches = [int(s.get("batch") or 0) for s in steps]
        self.text.say(f"Batch size of each step: {self.count:,} steps so far; the last "
                      f"{len(batches)} ran {min(batches)} to {max(batches)} requests at once.")

    @changes_bokeh_models
    def clear(self) -> None:
        self.source.data = {"t_s": [], "batch": [], "prefill_tokens": []}
        self.count = 0
        self.text.say("Batch size of each step: no steps yet.")


def _values(values) -> np.ndarray:
    data = np.asarray([np.nan if v is None else v for v in values]
                      if not isinstance(values, np.ndarray) else values, dtype=float)
    return data[~np.isnan(data)]


def histogram_columns(everyone, mine, bins: int = 30) -> tuple[dict, dict]:
    """The bars of everyone's values and of the reader's own, over the same bins from 0 ms."""
    data, own = _values(everyone), _values(mine)
    top = max(float(data.max()) if data.size else 0.0, float(own.max()) if own.size else 0.0)
    edges = np.linspace(0.0, top * 1.02 if top > 0 else 1.0, bins + 1)
    counts, _ = np.histogram(data, bins=edges)
    own_counts, _ = np.histogram(own, bins=edges)
    left, right = edges[:-1].tolist(), edges[1:].tolist()
    return ({"left": left, "right": right, "count": counts.tolist()},
            {"left": left, "right": right, "count": own_counts.tolist()})


class ClassHistogram(LiveChart):
    """Everyone's latencies as bars, the reader's own in their colour in front, P50 and P99."""

    title = param.String(default="", doc="The figure's title.")
    x_label = param.String(default="latency (ms)", doc="The value axis' label, with its unit.")
    mine_label = param.String(default="yours", doc="The legend's name for the reader's own.")
    height = param.Integer(default=240, bounds=(100, None), doc="Figure height in pixels.")

    def __init__(self, **params):
        super().__init__(**params)
        short = self.x_label.split(" ")[0].lower()  # "ttft": names unique in the page
        self.everyone = ColumnDataSource({"left": [], "right": [], "count": []},
                                         name=f"{short} everyone")
        self.mine = ColumnDataSource({"left": [], "right": [], "count": []}, name=f"{short} mine")
        fig = _figure(self.title, self.x_label, "count", self.height)
        fig.quad(left="left", right="right", bottom=0, top="count", source=self.everyone,
                 fill_color=EVERYONE, line_color="white", legend_label="everyone")
        fig.quad(left="left", right="right", bottom=0, top="count", source=self.mine,
                 fill_color=MINE, fill_alpha=0.85, line_color="black", hatch_pattern="/",
                 hatch_color="white", hatch_alpha=0.6, legend_label=self.mine_label)
        fig.legend.location = "top_right"
        self._place(fig, self.title, f"{self.title}: nothing measured yet.")

    @changes_bokeh_models
    def update(self, everyone, mine=()) -> None:
        """Draw everyone's values (a sequence or array, ms) and the reader's own among them."""
        everyone, mine = _values(everyone), _values(mine)
        self.everyone.data, self.mine.data = histogram_columns(everyone, mine)
        if not everyone.size:
            self.text.say(f"{self.title}: nothing measured yet.")
            return
        p50, p99 = np.percentile(everyone, [50, 99])
        sentence = (f"{self.title}: {everyone.size:,} values, P50 {sig(p50)} ms, "
                    f"P99 {sig(p99)} ms")
        if mine.size:
            sentence += (f"; {self.mine_label}: {mine.size}, median "
                         f"{sig(float(np.median(mine)))} ms")
        self.text.say(sentence + ".")


def lane_rows(requests: Iterable[Mapping], now_s: float, window_s: float,
              me: str | None = None) -> dict:
    """The lanes' columns for requests seen in the last `window_s` seconds of run time: for each,
    a waiting bar (arrival to first token) and a decoding bar (first token to finish, or now),
    coloured as the reader's own, another student's, or background load; newest on top."""
    start = now_s - window_s
    rows = [r for r in requests
            if (r.get("finish_s") is None or r["finish_s"] >= start)
            and r.get("arrival_s") is not None]
    rows.sort(key=lambda r: r["arrival_s"])
    cols: dict[str, list] = {"y": [], "left": [], "right": [], "color": [], "part": [],
                             "who": [], "id": []}
    for y, r in enumerate(reversed(rows)):
        first = r.get("first_token_s")
        end = r.get("finish_s") if r.get("finish_s") is not None else now_s
        who = ("yours" if me is not None and r.get("student") == me
               else "background" if r.get("background") else "a student")
        colour = MINE if who == "yours" else BACKGROUND if who == "background" else BLUE
        wait_end = first if first is not None else end
        for part, left, right, fill in (("waiting for first token", r["arrival_s"], wait_end,
                                         PHASE_FILL["queued"]),
                                        ("decoding", wait_end, end, colour)):
            if part == "decoding" and first is None:
                continue
            cols["y"].append(y)
            cols["left"].append(max(float(left), start))
            cols["right"].append(max(float(right), start))
            cols["color"].append(fill)
            cols["part"].append(part)
            cols["who"].append(who)
            cols["id"].append(str(r.get("id")))
    return cols


class ClassLanes(LiveChart):
    """One lane per recent request: waiting for its first token, then decoding, in its owner's
    colour (the reader's own, other students', background load)."""

    window_s = param.Number(default=20.0, bounds=(1, None), doc="Seconds of run time shown.")
    height = param.Integer(default=300, bounds=(100, None), doc="Figure height in pixels.")

    def __init__(self, marks: KnobMarks | None = None, **params):
        super().__init__(**params)
        self.source = ColumnDataSource(lane_rows([], 0.0, self.window_s), name="lanes")
        fig = _time_figure(f"Requests of the last {self.window_s:.0f} s", "request (newest on top)",
                           self.height, marks)
        bars = fig.hbar(y="y", left="left", right="right", height=0.7, color="color",
                        source=self.source)
        fig.add_tools(HoverTool(renderers=[bars], tooltips=[
            ("request", "@id"), ("whose", "@who"), ("", "@part"),
            ("from", "@left{0.00} s"), ("to", "@right{0.00} s")]))
        fig.y_range.flipped = True
        fig.ygrid.grid_line_color = None
        self._place(fig, "Lanes of recent requests", "Lanes of recent requests: none yet.")

    @changes_bokeh_models
    def update(self, requests: Iterable[Mapping], now_s: float, me: str | None = None) -> None:
        cols = lane_rows(requests, now_s, self.window_s, me)
        self.source.data = cols
        self.figure.x_range.update(start=max(now_s - self.window_s, 0.0), end=max(now_s, 1.0))
        count = len(set(cols["id"]))
        mine = len({i for i, w in zip(cols["id"], cols["who"]) if w == "yours"})
        self.text.say(f"Lanes of the last {self.window_s:.0f} s: {count} requests"
                      + (f", {mine} of them yours." if me is not None else "."))


def _num(value) -> float:
    return float("nan") if value is None else float(value)
