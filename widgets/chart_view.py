"""A chart widget's shared frame: its Bokeh figure full width with its text beneath it (the
one-line summary and the table of the same numbers, tied to the figure for screen readers), as
one Panel column, and the figure the bar charts share. Each chart builds its own figure;
`_place` does the rest.

    class FloorChart(ChartView):
        def __init__(self, **params):
            super().__init__(**params)
            fig = figure(...)
            self._place(fig, "Chart of latency against its floor", table_css="floor-table")
            self.text.say("...")
"""

from __future__ import annotations

import panel as pn
from bokeh.models import FactorRange
from bokeh.plotting import figure

from .a11y import ChartText


def chart_column(fig, *below) -> pn.Column:
    """The figure full width, then `below` (its summary, its table), stretched as one column."""
    return pn.Column(pn.pane.Bokeh(fig, sizing_mode="stretch_width"), *below,
                     sizing_mode="stretch_width")


def bar_figure(title: str, x_label: str, height: int):
    """A figure for horizontal bars, one per label (its y_range's factors, set by the chart):
    full width, no toolbar but save, the values from 0, no grid lines across the bars."""
    fig = figure(height=height, sizing_mode="stretch_width", y_range=FactorRange(),
                 tools="save", toolbar_location=None, title=title, x_axis_label=x_label)
    fig.x_range.start = 0
    fig.ygrid.visible = False
    return fig


class ChartView(pn.viewable.Viewer):
    """A chart with its summary sentence and its table beneath it."""

    def _place(self, fig, name: str, table_css: str = "chart-table") -> None:
        """Keep the figure, tie a summary and a table (CSS class `table_css`) named `name` to it,
        and lay the three out."""
        self.figure = fig
        self.text = ChartText(name, fig, table_css=table_css)
        self._table = self.text.table
        self._layout = chart_column(fig, self.text.summary, self._table)

    @property
    def table_html(self) -> str:
        """The table's HTML as shown: the chart's numbers."""
        return self._table.object

    def __panel__(self):
        return self._layout
