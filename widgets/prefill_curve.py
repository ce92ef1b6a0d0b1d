"""Prefill time against prompt length: the measured passes as points, the fitted curve
t = a + b L + c L^2, and its two named parts drawn apart (the weights' linear term a + b L, the
attention's quadratic term c L^2), with a table of the points and the fit beside.

`set_points([(L, ms)])` draws the points; `set_fit(fit)` (an engine.calc.prefill_fit
QuadraticFit, or None) the curve and its parts, over the points' lengths.
"""

from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

from engine.calc.prefill_fit import QuadraticFit

from .chart_view import ChartView
from .palette import BLUE, GREEN, SERIES_DASH, VERMILLION
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table

CURVE_POINTS = 60


class PrefillCurve(ChartView):
    """Measured prefill passes and their quadratic fit, with the linear and quadratic parts."""

    def __init__(self, **params):
        super().__init__(**params)
        self.points = ColumnDataSource({"length": [], "ms": []})
        self.curves = ColumnDataSource({"length": [], "total": [], "linear": [],
                                        "quadratic": []})
        fig = figure(height=300, sizing_mode="stretch_width", tools="save",
                     toolbar_location=None, title="Prefill time against prompt length",
                     x_axis_label="prompt length L (tokens)", y_axis_label="prefill pass (ms)")
        fig.line("length", "total", source=self.curves, color=BLUE, line_width=2,
                 line_dash=SERIES_DASH[0], legend_label="fit: a + bL + cL²")
        fig.line("length", "linear", source=self.curves, color=GREEN, line_width=2,
                 line_dash=SERIES_DASH[2], legend_label="weights: a + bL")
        fig.line("length", "quadratic", source=self.curves, color=VERMILLION, line_width=2,
                 line_dash=SERIES_DASH[1], legend_label="attention: cL²")
        fig.scatter("length", "ms", source=self.points, size=8, color=BLUE, marker="circle",
                    legend_label="measured (median pass)")
        fig.legend.location = "top_left"
        fig.x_range.start = 0
        fig.y_range.start = 0
        self._place(fig, "Prefill time against prompt length", table_css="prefill-curve-table")
        self._points: list[tuple[int, float]] = []
        self.fit: QuadraticFit | None = None
        self._describe()

    @changes_bokeh_models
    def set_points(self, points: list[tuple[int, float]]) -> None:
        self._points = sorted(points)
        self.points.data = {"length": [p[0] for p in self._points],
                            "ms": [p[1] for p in self._points]}
        self._describe()

    @changes_bokeh_models
    def set_fit(self, fit: QuadraticFit | None) -> None:
        self.fit = fit
        if fit is None or not self._points:
            self.curves.data = {"length": [], "total": [], "linear": [], "quadratic": []}
        else:
            xs = np.linspace(0, max(p[0] for p in self._points), CURVE_POINTS).tolist()
            self.curves.data = {"length": xs, "total": [fit.predict(x) for x in xs],
                                "linear": [fit.a.value + fit.linear_part(x) for x in xs],
                                "quadratic": [fit.quadratic_part(x) for x in xs]}
        self._describe()

    def _describe(self) -> None:
        rows = [[f"{n:,}", f"{ms:.1f}",
                 f"{self.fit.quadratic_share(n):.0%}" if self.fit else "n/a"]
                for n, ms in self._points]
        self.text.table.object = html_table(
            "Prefill passes and the fit's attention share",
            ["prompt length (tokens)", "measured (ms)", "attention term's share of the fit"],
            rows, numeric=[True, True, True])
        if self.fit is None:
            self.text.say(f"{len(self._points)} prefill passes measured; no fit yet."
                          if self._points else "No prefill pass measured yet.")
            return
        f, top = self.fit, max(p[0] for p in self._points)
        self.text.say(f"{f.points} passes fitted as a + bL + cL², a = {f.a.value:.3g} ms, "
                      f"b = {f.b.value:.3g} ms per token, c = {f.c.value:.3g} ms per token²; "
                      f"at {top:,} tokens the attention term is {f.quadratic_share(top):.0%} "
                      "of the fitted time.")
