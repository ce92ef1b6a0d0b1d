"""The chart serving teams compare settings on: total tokens/s of the server (up) against tokens/s
each user gets (right), one point per setting (a batch size, a request rate), labelled with it,
the Pareto frontier (engine.calc.pareto) drawn as a line through the points no other point beats
on both axes. Whiskers show each point's 95% intervals when the page gives them.

    chart = ParetoChart(setting="batch")
    chart.set_points([{"setting": 8, "label": "batch 8", "per_user": 120.0, "total": 950.0,
                       "per_user_lo": 110.0, "per_user_hi": 126.0, "total_lo": ..., ...}])

`source` holds the points as drawn (with `frontier` True or False), so a download of it is the
chart.
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource, HoverTool, LabelSet, Whisker
from bokeh.plotting import figure

from engine.calc.pareto import on_frontier

from .chart_view import ChartView, chart_column
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table, sig, table_pane

COLUMNS = ("setting", "label", "per_user", "per_user_lo", "per_user_hi", "total", "total_lo",
           "total_hi", "n", "frontier")
POINT_COLOR, FRONTIER_COLOR, OFF_COLOR = "#1f5f8b", "#d95f02", "#9aa5b1"
NAN = float("nan")


class ParetoChart(ChartView):
    """Total tokens/s against tokens/s each user, the frontier marked."""

    setting = param.String(default="batch size", doc="What each point is a setting of.")
    height = param.Integer(default=330, bounds=(150, None))

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name="pareto points")
        self.frontier = ColumnDataSource({"per_user": [], "total": []}, name="frontier")
        fig = figure(height=self.height, sizing_mode="stretch_width", tools="save,reset",
                     toolbar_location="above",
                     title=f"Throughput against each user's speed, one point per {self.setting}",
                     x_axis_label="tokens/s each user (1000 / ms per token)",
                     y_axis_label="total tokens/s (all users)")
        fig.x_range.start = 0
        fig.y_range.start = 0
        fig.line("per_user", "total", source=self.frontier, color=FRONTIER_COLOR, line_width=2,
                 legend_label="Pareto frontier (no point beats these on both axes)")
        dots = fig.scatter("per_user", "total", source=self.source, size=10,
                           color=POINT_COLOR, legend_label=f"a measured {self.setting}")
        fig.add_layout(Whisker(source=self.source, base="per_user", lower="total_lo",
                               upper="total_hi", line_color=POINT_COLOR))
        fig.add_layout(Whisker(source=self.source, base="total", lower="per_user_lo",
                               upper="per_user_hi", dimension="width", line_color=POINT_COLOR))
        fig.add_layout(LabelSet(x="per_user", y="total", text="label", source=self.source,
                                x_offset=6, y_offset=4, text_font_size="11px"))
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[
            ("", "@label"), ("total", "@total{0,0} tokens/s (@total_lo{0,0} to @total_hi{0,0})"),
            ("each user", "@per_user{0,0} tokens/s (@per_user_lo{0,0} to @per_user_hi{0,0})"),
            ("samples", "@n"), ("on the frontier", "@frontier")]))
        fig.legend.location = "top_right"
        self.figure = fig
        self._table = table_pane(css_classes=["pareto-table"])
        self._layout = chart_column(fig, self._table)  # the table, no summary sentence

    @changes_bokeh_models
    def set_points(self, points: list[dict]) -> None:
        """Replace the points (dicts with COLUMNS but `frontier`; missing intervals: none)."""
        rows = sorted(points, key=lambda p: p["setting"])
        flags = on_frontier([(p["per_user"], p["total"]) for p in rows])
        data = {c: [] for c in COLUMNS}
        for p, flag in zip(rows, flags, strict=True):
            for c in COLUMNS:
                value = flag if c == "frontier" else p.get(c)
                data[c].append(NAN if value is None else value)
        self.source.data = data
        front = sorted((p["per_user"], p["total"]) for p, f in zip(rows, flags, strict=True) if f)
        self.frontier.data = {"per_user": [x for x, _ in front], "total": [y for _, y in front]}
        self._table.object = html_table(
            f"Each {self.setting}: total tokens/s against tokens/s each user (95% intervals)",
            [self.setting, "total tokens/s", "95% CI", "tokens/s each user", "95% CI",
             "on the frontier"],
            [[p["label"], sig(p["total"]), _ci(p, "total"), sig(p["per_user"]),
              _ci(p, "per_user"), "yes" if f else "no"]
             for p, f in zip(rows, flags, strict=True)],
            numeric=[False, True, True, True, True, False]) if rows else ""

    def points(self) -> list[dict]:
        d = self.source.data
        return [{c: d[c][i] for c in COLUMNS} for i in range(len(d["setting"]))]


def _ci(p: dict, key: str) -> str:
    lo, hi = p.get(f"{key}_lo"), p.get(f"{key}_hi")
    return "-" if lo is None or hi is None else f"{sig(lo)} to {sig(hi)}"
