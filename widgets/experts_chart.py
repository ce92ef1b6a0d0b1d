"""The experts charts: against the batch size, the distinct experts an MoE step read (measured,
and a uniform router's expectation), the weight MiB a step read and the step time, each for the
MoE model beside the dense model of its active size.

    chart = ExpertsChart(experts=16, top_k=2)
    chart.set_point("moe", 8, experts_read=10.4, expected=10.9, weight_mib=254.0, step_ms=61.0)
    chart.set_point("dense", 8, experts_read=0.0, expected=0.0, weight_mib=76.0, step_ms=30.0)

One row per (model, batch) in `points`: measuring a batch again patches its row. The lines are
redrawn in batch order from the same rows. The x axes are logarithmic in base 2.
"""

from __future__ import annotations

import math

import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, LogTickFormatter, Range1d, Span
from bokeh.plotting import figure

from engine.calc.experts import expected_distinct

from .a11y import ChartText
from .palette import GREY, SERIES, SERIES_DASH, SERIES_MARKER
from .runtime.doc_hold import changes_bokeh_models

MODELS = {"moe": "MoE model", "dense": "dense model, same active size"}
COLUMNS = ("batch", "experts_read", "expected", "weight_mib", "step_ms")
X_LABEL = "batch size (sequences decoding together)"


def _empty() -> dict:
    return {k: [] for k in COLUMNS}


class ExpertsChart(pn.viewable.Viewer):
    """Experts read, weight MiB per step and step time against the batch size."""

    experts = param.Integer(default=16, bounds=(1, None), doc="Experts per layer (E).")
    top_k = param.Integer(default=2, bounds=(1, None), doc="Experts each token picks (k).")
    max_batch = param.Integer(default=64, bounds=(2, None), doc="The x axes' right end.")

    def __init__(self, **params):
        super().__init__(**params)
        self.sources = {m: ColumnDataSource(_empty(), name=m) for m in MODELS}
        self.lines = {m: ColumnDataSource(_empty(), name=f"{m} line") for m in MODELS}
        self.uniform = ColumnDataSource({"batch": [], "expected": []}, name="uniform router")
        self.read_fig = self._figure("distinct experts read per layer, per step")
        self.bytes_fig = self._figure("weight MiB read per decode step")
        self.time_fig = self._figure("decode step time (ms, median)")
        moe_points, moe_line = self.sources["moe"], self.lines["moe"]
        self.read_fig.line("batch", "expected", source=self.uniform, color=GREY, line_width=2,
                           line_dash="dashed", legend_label="uniform router: E(1-(1-k/E)^B)")
        self.read_fig.line("batch", "experts_read", source=moe_line, color=SERIES[0], line_width=2,
                           legend_label="measured")
        self.read_fig.scatter("batch", "experts_read", source=moe_points, color=SERIES[0], size=9,
                              marker=SERIES_MARKER[0])
        self.all_line = Span(location=self.experts, dimension="width", line_color=GREY,
                             line_dash="dotted")
        self.read_fig.add_layout(self.all_line)
        for fig, column, unit in ((self.bytes_fig, "weight_mib", "{0.0} MiB"),
                                  (self.time_fig, "step_ms", "{0.00} ms")):
            marks = []
            for i, (model, label) in enumerate(MODELS.items()):
                fig.line("batch", column, source=self.lines[model], color=SERIES[i],
                         line_dash=SERIES_DASH[i], line_width=2, legend_label=label)
                marks.append(fig.scatter("batch", column, source=self.sources[model],
                                         color=SERIES[i], marker=SERIES_MARKER[i], size=9))
            fig.add_tools(HoverTool(renderers=marks, tooltips=[
                ("batch", "@batch"), (column.replace("_", " "), f"@{column}{unit}")]))
        for fig in (self.read_fig, self.bytes_fig, self.time_fig):
            fig.legend[0].location = "top_left"
        self.text = ChartText("Charts of the experts an MoE decode step read, its weight bytes "
                              "and its time against the batch size, beside a dense model",
                              self.read_fig, self.bytes_fig, self.time_fig,
                              table_css="experts-table")
        self._layout = pn.Column(
            pn.Row(pn.pane.Bokeh(self.read_fig, sizing_mode="stretch_width"),
                   pn.pane.Bokeh(self.bytes_fig, sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            pn.pane.Bokeh(self.time_fig, sizing_mode="stretch_width"),
            self.text.summary, self.text.table, sizing_mode="stretch_width")
        self._uniform_curve()

    def _figure(self, title: str):
        fig = figure(title=title, height=300, sizing_mode="stretch_width", x_axis_type="log",
                     x_range=Range1d(0.8, self.max_batch * 1.25), x_axis_label=X_LABEL,
                     tools="save,reset", toolbar_location="above")
        fig.xaxis.formatter = LogTickFormatter()
        fig.xaxis.ticker.base = 2
        fig.y_range.start = 0
        return fig

    def _uniform_curve(self) -> None:
        """A uniform router's E x (1 - (1 - k/E)^B) over the x axis (calc.experts)."""
        batches = [2 ** (i / 4) for i in range(int(4 * math.log2(self.max_batch)) + 1)]
        self.uniform.data = {"batch": batches, "expected": [
            expected_distinct(self.experts, self.top_k, b) for b in batches]}

    @param.depends("experts", "top_k", watch=True)
    def _shape_changed(self) -> None:
        self.all_line.location = self.experts
        self._uniform_curve()

    @changes_bokeh_models
    def clear(self) -> None:
        for model in MODELS:
            self.sources[model].data = _empty()
            self.lines[model].data = _empty()

    @changes_bokeh_models
    def set_point(self, model: str, batch: int, experts_read: float, expected: float,
                  weight_mib: float, step_ms: float) -> None:
        """Add (or replace) one model's point at one batch size."""
        row = {"batch": int(batch), "experts_read": float(experts_read),
               "expected": float(expected), "weight_mib": float(weight_mib),
               "step_ms": float(step_ms)}
        source = self.sources[model]
        batches = list(source.data["batch"])
        if batch in batches:
            i = batches.index(batch)
            source.patch({k: [(i, v)] for k, v in row.items()})
        else:
            source.stream({k: [v] for k, v in row.items()})
        order = sorted(range(len(source.data["batch"])), key=lambda i: source.data["batch"][i])
        self.lines[model].data = {k: [source.data[k][i] for i in order] for k in COLUMNS}

    def __panel__(self):
        return self._layout
