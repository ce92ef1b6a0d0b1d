"""Inter-token latency over time: every gap between two consecutive tokens of a request, drawn at
the moment its later token arrived, for one or more runs side by side (e.g. a long prompt
prefilled whole, and in chunks). Vertical marks show events of each run (a long prompt arriving,
its first token). A table beside gives each run's gap count, median, P99 and worst gap.

Gaps stream in as a run goes (`stream`) and can be replaced by the run's final figures (`set`).
A run's final median and P99 carry their 95% interval, from resampling whole requests
(engine.calc.stats.grouped_estimate: one request's gaps move together), and a P99 from under
100 gaps is marked as too few to bound it; streamed gaps show the figures alone (an interval on
every step would cost more than the step).
"""

from __future__ import annotations

import numpy as np
import param
from bokeh.models import ColumnDataSource, HoverTool, Span
from bokeh.plotting import figure

from engine.calc.stats import Estimate, grouped_estimates

from .chart_view import ChartView
from .palette import SERIES, SERIES_MARKER
from .runtime.doc_hold import changes_bokeh_models
from .runtime.frame import once_per_frame
from .tables import html_table, sig, with_interval

COLORS = SERIES
FIELDS = ("t", "gap_ms", "request")


class ItlTimeline(ChartView):
    """Gaps between tokens against time, one colour and marker per run."""

    series = param.List(default=["run"], item_type=str, constant=True,
                        doc="The runs drawn, one colour and marker each.")
    mark_names = param.List(default=["long prompt arrives", "its first token"], item_type=str,
                            constant=True, doc="The events each run may mark with a vertical "
                            "line (the lines are made up front, hidden until marked).")
    height = param.Integer(default=360, bounds=(150, None))

    def __init__(self, **params):
        super().__init__(**params)
        self.sources = {name: ColumnDataSource({f: [] for f in FIELDS}, name=f"itl {name}")
                        for name in self.series}
        self.marks: dict[str, list[tuple[str, float]]] = {n: [] for n in self.series}
        self.estimates: dict[str, dict[int, Estimate]] = {}  # run -> q -> its final figure
        fig = figure(height=self.height, sizing_mode="stretch_width",
                     tools="pan,xwheel_zoom,box_zoom,reset,save",
                     x_axis_label="time since the run started (s)",
                     y_axis_label="gap before this token (ms)",
                     title="Gaps between tokens of the requests already decoding")
        for i, (name, source) in enumerate(self.sources.items()):
            fig.scatter("t", "gap_ms", source=source, size=5, alpha=0.7,
                        color=COLORS[i % len(COLORS)], marker=SERIES_MARKER[i % len(SERIES_MARKER)],
                        legend_label=name)
        fig.add_tools(HoverTool(tooltips=[("run", "$name"), ("request", "@request"),
                                          ("at", "@t{0.000} s"), ("gap", "@gap_ms{0.0} ms")]))
        for i, renderer in enumerate(fig.renderers):
            renderer.name = self.series[i]
        fig.legend.location = "top_right"
        fig.y_range.start = 0
        self.spans: dict[tuple[str, str], Span] = {}
        for i, name in enumerate(self.series):
            for j, label in enumerate(self.mark_names):
                span = Span(location=0, dimension="height", line_color=COLORS[i % len(COLORS)],
                            line_dash="dashed" if j == 0 else "dotted", line_width=2,
                            visible=False)
                fig.add_layout(span)
                self.spans[(name, label)] = span
        self._place(fig, "Chart of the gaps between tokens over time", table_css="itl-table")
        self._refresh_table()

    def _check(self, series: str) -> ColumnDataSource:
        if series not in self.sources:
            raise ValueError(f"unknown series {series!r}: one of {', '.join(self.sources)}")
        return self.sources[series]

    @changes_bokeh_models
    def stream(self, series: str, t: list[float], gap_ms: list[float],
               request: list[int]) -> None:
        """Append gaps as they are measured."""
        if t:
            self._check(series).stream({"t": list(t), "gap_ms": list(gap_ms),
                                        "request": list(request)})
            self.estimates.pop(series, None)
            self._table_stale()

    @changes_bokeh_models
    def set(self, series: str, t: list[float], gap_ms: list[float], request: list[int]) -> None:
        """Replace a run's gaps (its final figures)."""
        self._check(series).data = {"t": list(t), "gap_ms": list(gap_ms),
                                    "request": list(request)}
        by_request: dict[int, list[float]] = {}
        for rid, gap in zip(request, gap_ms, strict=True):
            by_request.setdefault(rid, []).append(gap)
        self.estimates[series] = dict(zip((50, 99), grouped_estimates(by_request.values(),
                                                                       (50, 99))))
        self._table_stale()

    @changes_bokeh_models
    def clear(self, series: str) -> None:
        self.marks[series] = []
        for label in self.mark_names:
            self.spans[(series, label)].visible = False
        self.set(series, [], [], [])

    def mark(self, series: str, label: str, t: float) -> None:
        """A vertical line at time t for this run (in the run's colour), one of mark_names."""
        self._check(series)
        if label not in self.mark_names:
            raise ValueError(f"unknown mark {label!r}: one of {', '.join(self.mark_names)}")
        self.spans[(series, label)].update(location=t, visible=True)
        self.marks[series] = [(text, at) for text, at in self.marks[series] if text != label]
        self.marks[series].append((label, t))
        self.marks[series].sort(key=lambda m: self.mark_names.index(m[0]))
        self._table_stale()

    def gaps(self, series: str) -> list[float]:
        return list(self._check(series).data["gap_ms"])

    def worst(self, series: str) -> float | None:
        gaps = self.gaps(series)
        return max(gaps) if gaps else None

    def rows(self) -> list[dict]:
        """Every gap as drawn, run by run (a download of the chart): run, time (s), gap (ms),
        request."""
        return [{"run": name, "t_s": t, "gap_ms": gap, "request": rid}
                for name, source in self.sources.items()
                for t, gap, rid in zip(*(source.data[f] for f in FIELDS), strict=True)]

    def _table_stale(self) -> None:
        """Redraw the table: once after a frame's events (a run's steps, its result and marks:
        widgets.runtime.frame), at once outside one."""
        once_per_frame((id(self), "table"), self._refresh_table)

    def _refresh_table(self) -> None:
        rows, said = [], []
        for name in self.sources:
            gaps = np.asarray(self.gaps(name), dtype=float)
            marks = "; ".join(f"{text} at {t:.2f} s" for text, t in self.marks[name])
            if gaps.size:
                est = self.estimates.get(name, {})
                rows.append([name, f"{gaps.size:,}",
                             with_interval(float(np.percentile(gaps, 50)), est.get(50)),
                             with_interval(float(np.percentile(gaps, 99)), est.get(99)),
                             sig(float(gaps.max())), marks or "-"])
                said.append(f"{name}, worst {sig(float(gaps.max()))} ms (median "
                            f"{sig(float(np.percentile(gaps, 50)))} ms)")
            else:
                rows.append([name, "0", "-", "-", "-", marks or "-"])
        self._table.object = html_table(
            "Gaps between tokens of the running requests, per run (ms; in brackets the 95% "
            "interval, resampling whole requests; † too few gaps to bound a P99)",
            ["run", "gaps", "median", "P99", "worst", "marked on the chart"], rows,
            numeric=[False, True, True, True, True, False])
        self.text.say("Gaps between tokens: " + "; ".join(said) + "." if said else
                      "No gaps between tokens measured yet.")
