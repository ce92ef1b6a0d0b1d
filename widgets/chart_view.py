"""A chart widget's shared frame: its Bokeh figure full width with its text beneath it (the
one-line summary and the table of the same numbers, tied to the figure for screen readers), as
one Panel column. Each chart builds its own figure; `_place` does the rest.

    class FloorChart(ChartView):
        def __init__(self, **params):
            super().__init__(**params)
            fig = figure(...)
            self._place(fig, "Chart of latency against its floor", table_css="floor-table")
            self.text.say("...")
"""

from __future__ import annotations

import panel as pn

from .a11y import ChartText


def chart_column(fig, *below) -> pn.Column:
    """The figure full width, then `below` (its summary, its table), stretched as one column."""
    return pn.Column(pn.pane.Bokeh(fig, sizing_mode="stretch_width"), *below,
                     sizing_mode="stretch_width")


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
