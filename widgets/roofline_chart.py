"""A roofline: attainable FLOP/s against arithmetic intensity (FLOPs per byte moved), log-log.

Two roofs from two measured limits: the slanted one is memory bandwidth x intensity, the flat
one the matrix-multiply peak; they meet at the ridge point. A page may add a third, dashed: the
last-level cache's read bandwidth x intensity, the roof of a model whose weights stay in that
cache between steps (hidden until it is set). Measured steps are drawn as points
(one series per kind, e.g. decode steps and prefill passes), with a table of the same numbers.
The chart is built once; limits and points update it in place.
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource, HoverTool, Label, Span, Whisker
from bokeh.plotting import figure

from engine.calc import step_cost
from engine.calc.stats import Estimate

from .chart_view import ChartView
from .palette import GREY, SERIES, SERIES_MARKER, TEXT_ON_LIGHT
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, interval_text, sig

SERIES_COLORS = SERIES
ROOF_COLOR = GREY
ROOF_TEXT = TEXT_ON_LIGHT["grey"]
X_SPAN = (0.1, 3000.0)  # intensities always shown (FLOP/byte)

# a point's time is the median of its timed runs: ms_lo, ms_hi its 95% interval, n how many
# (None when the page gives none); gflops_lo, gflops_hi the interval in GFLOP/s (ends swapped)
POINT_FIELDS = ("intensity", "gflops", "label", "ms", "roof_share", "ms_lo", "ms_hi", "n",
                "gflops_lo", "gflops_hi")


class RooflineChart(ChartView):
    """Measured steps placed under this machine's two roofs."""

    bandwidth_gbs = param.Number(default=None, allow_None=True, bounds=(0, None),
                                 inclusive_bounds=(False, True),
                                 doc="Measured memory read bandwidth, GB/s (the slanted roof).")
    peak_gflops = param.Number(default=None, allow_None=True, bounds=(0, None),
                               inclusive_bounds=(False, True),
                               doc="Measured matrix-multiply peak, GFLOP/s (the flat roof).")
    cache_gbs = param.Number(default=None, allow_None=True, bounds=(0, None),
                             inclusive_bounds=(False, True),
                             doc="Measured last-level cache read bandwidth, GB/s (the dashed "
                                 "roof); None hides it.")
    series = param.List(default=["decode step", "prefill pass"], item_type=str, constant=True,
                        doc="The kinds of measured points, one colour and marker each.")
    height = param.Integer(default=420, bounds=(200, None), doc="Chart height in pixels.")

    def __init__(self, **params):
        super().__init__(**params)
        self.roof = ColumnDataSource({"x": [], "y": []}, name="roofline roof")
        self.sources = {name: ColumnDataSource({f: [] for f in POINT_FIELDS},
                                               name=f"roofline {name}")
                        for name in self.series}
        fig = figure(x_axis_type="log", y_axis_type="log", height=self.height,
                     sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save",
                     x_axis_label="arithmetic intensity (FLOPs per byte moved)",
                     y_axis_label="achieved GFLOP/s", title="This machine's roofline")
        fig.line("x", "y", source=self.roof, line_width=3, color=ROOF_COLOR,
                 legend_label="the roof (measured limits)")
        self.cache_roof = ColumnDataSource({"x": [], "y": []}, name="roofline cache roof")
        self._cache_line = fig.line("x", "y", source=self.cache_roof, line_width=2,
                                    line_dash="dashed", color=ROOF_COLOR, visible=False,
                                    legend_label="the cache roof (weights kept in cache)")
        for i, (name, source) in enumerate(self.sources.items()):
            fig.add_layout(Whisker(source=source, base="intensity", lower="gflops_lo",
                                   upper="gflops_hi", line_color=SERIES_COLORS[i % len(SERIES_COLORS)]))
            fig.scatter("intensity", "gflops", source=source, size=11, marker=SERIES_MARKER[i % len(SERIES_MARKER)],
                        color=SERIES_COLORS[i % len(SERIES_COLORS)], legend_label=name,
                        line_color="white")
        fig.add_tools(HoverTool(tooltips=[("", "@label"), ("intensity", "@intensity{0.00} FLOP/B"),
                                          ("achieved", "@gflops{0.0} GFLOP/s"),
                                          ("time", "@ms{0.00} ms")]))
        fig.legend.location = "bottom_right"
        self.ridge = Span(location=1.0, dimension="height", line_dash="dashed",
                          line_color=ROOF_COLOR, visible=False)
        self.memory_label = Label(x=1.0, y=1.0, text="", text_font_size="11px",
                                  text_color=ROOF_TEXT, x_offset=4, y_offset=4, visible=False)
        self.compute_label = Label(x=1.0, y=1.0, text="", text_font_size="11px",
                                   text_color=ROOF_TEXT, y_offset=6, visible=False)
        fig.add_layout(self.ridge)
        fig.add_layout(self.memory_label)
        fig.add_layout(self.compute_label)
        self._place(fig, "Roofline chart: measured steps against this machine's limits",
                    table_css="roofline-table")
        self._draw_roof()
        self._refresh_table()

    # ---- limits ------------------------------------------------------------------------------
    @property
    def ridge_point(self) -> float | None:
        if not self.bandwidth_gbs or not self.peak_gflops:
            return None
        return step_cost.ridge_point(self.bandwidth_gbs, self.peak_gflops)

    def roof_at(self, intensity: float) -> float | None:
        """Attainable GFLOP/s at an intensity: min(peak, bandwidth x intensity)."""
        if not self.bandwidth_gbs or not self.peak_gflops:
            return None
        return step_cost.roof_gflops(intensity, self.bandwidth_gbs, self.peak_gflops)

    def set_limits(self, bandwidth_gbs: float, peak_gflops: float,
                   cache_gbs: float | None = None) -> None:
        self.param.update(bandwidth_gbs=bandwidth_gbs, peak_gflops=peak_gflops,
                          cache_gbs=cache_gbs)

    def _x_span(self) -> tuple[float, float]:
        xs = [x for s in self.sources.values() for x in s.data["intensity"]]
        lo = min([X_SPAN[0], *[x / 3 for x in xs]])
        hi = max([X_SPAN[1], *[x * 3 for x in xs]])
        return lo, hi

    @param.depends("bandwidth_gbs", "peak_gflops", "cache_gbs", watch=True)
    @changes_bokeh_models
    def _draw_roof(self) -> None:
        ridge = self.ridge_point
        self._draw_cache_roof()
        if ridge is None:
            self.roof.data = {"x": [], "y": []}
            for model in (self.ridge, self.memory_label, self.compute_label):
                model.visible = False
            self._refresh_table()
            return
        lo, hi = self._x_span()
        xs = [lo, ridge, max(hi, ridge * 3)]
        # at the ridge the roof is the peak itself (bandwidth x (peak / bandwidth) can round off)
        self.roof.data = {"x": xs, "y": [self.roof_at(lo), self.peak_gflops, self.peak_gflops]}
        self.ridge.update(location=ridge, visible=True)
        mid = (lo * ridge) ** 0.5
        self.memory_label.update(x=mid, y=self.bandwidth_gbs * mid,
                                 text=f"memory: {sig(self.bandwidth_gbs)} GB/s x intensity",
                                 visible=True)
        self.compute_label.update(x=ridge * 1.2, y=self.peak_gflops,
                                  text=f"compute peak: {sig(self.peak_gflops)} GFLOP/s",
                                  visible=True)
        self._refresh_table()

    def _draw_cache_roof(self) -> None:
        """min(peak, cache bandwidth x intensity), dashed; hidden without both."""
        if not self.cache_gbs or not self.peak_gflops:
            self.cache_roof.data = {"x": [], "y": []}
            self._cache_line.visible = False
            self._cache_legend(False)
            return
        lo, hi = self._x_span()
        knee = self.peak_gflops / self.cache_gbs
        xs = [lo, knee, max(hi, knee * 3)] if knee > lo else [lo, hi]
        ys = [min(self.peak_gflops, self.cache_gbs * x) for x in xs]
        self.cache_roof.data = {"x": xs, "y": ys}
        self._cache_line.visible = True
        self._cache_legend(True)

    def _cache_legend(self, visible: bool) -> None:
        """The cache roof's legend entry only while it is drawn (a page without it has none)."""
        for item in self.figure.legend[0].items:
            if self._cache_line in item.renderers:
                item.visible = visible

    # ---- points ------------------------------------------------------------------------------
    @changes_bokeh_models
    def add_point(self, series: str, label: str, intensity: float, gflops: float,
                  ms: float, est: Estimate | None = None) -> None:
        """Add one measured step: its intensity (FLOP/byte), achieved GFLOP/s and time (ms, the
        median of its timed runs; est: that median's 95% interval and count, drawn as a
        whisker: GFLOP/s is work / time, so the interval's ends swap)."""
        if series not in self.sources:
            raise ValueError(f"unknown series {series!r}: one of {', '.join(self.sources)}")
        roof = self.roof_at(intensity)
        share = gflops / roof if roof else float("nan")
        lo, hi = (est.lo, est.hi) if est is not None and est.lo else (None, None)
        self.sources[series].stream({
            "intensity": [intensity], "gflops": [gflops], "label": [label], "ms": [ms],
            "roof_share": [share], "ms_lo": [lo], "ms_hi": [hi],
            "n": [est.n if est is not None else None],
            "gflops_lo": [gflops * ms / hi if hi else None],
            "gflops_hi": [gflops * ms / lo if lo else None]})
        lo, hi = self._x_span()
        if self.roof.data["x"] and (lo < self.roof.data["x"][0] or hi > self.roof.data["x"][-1]):
            self._draw_roof()
        else:
            self._refresh_table()

    @changes_bokeh_models
    def clear(self) -> None:
        for source in self.sources.values():
            source.data = {f: [] for f in POINT_FIELDS}
        self._refresh_table()

    def points(self, series: str) -> list[dict]:
        data = self.sources[series].data
        return [dict(zip(POINT_FIELDS, row, strict=True))
                for row in zip(*(data[f] for f in POINT_FIELDS), strict=True)]

    def rows(self) -> list[dict]:
        """Every point as drawn, series by series (a download of the chart)."""
        return [{"kind": name, **p} for name in self.sources for p in self.points(name)]

    # ---- the table beside the chart -------------------------------------------------------------
    def _refresh_table(self) -> None:
        rows = []
        for name in self.sources:
            for p in self.points(name):
                roof = self.roof_at(p["intensity"])
                rows.append([p["label"], name, interval_text(p["ms"], p["ms_lo"], p["ms_hi"]),
                             "-" if p["n"] is None else f"{p['n']}",
                             sig(p["intensity"]), sig(p["gflops"]), sig(roof) if roof else "-",
                             f"{100 * p['gflops'] / roof:.0f}%" if roof else "-"])
        ridge = self.ridge_point
        caption = ("Measured steps against the roof" if ridge is None else
                   f"Measured steps against the roof (ridge point {sig(ridge)} FLOP/byte: "
                   "below it memory is the limit, above it compute)")
        self._table.object = html_table(
            caption + "; time: the median of the timed runs [its 95% interval]",
            ["step", "kind", "time (ms)", "runs timed", "intensity (FLOP/byte)",
             "achieved GFLOP/s", "roof there (GFLOP/s)", "share of the roof"], rows,
            numeric=[False, False, True, True, True, True, True, True])
        shares = [(float(r[-1].rstrip("%")), r[0]) for r in rows if r[-1] != "-"]
        if shares:
            best, label = max(shares)
            self.text.say(f"{len(rows)} measured steps; the closest to its roof is {label}, at "
                          f"{best:.0f}% of what the machine allows there.")
        else:
            self.text.say(f"{len(rows)} measured steps." if rows else "No steps measured yet.")
