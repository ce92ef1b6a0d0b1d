"""The charts' shared frame: every chart built on ChartView lays out its figure, then its summary,
then its table, and names the figure for screen readers, tied to that summary and table."""

from __future__ import annotations

import panel as pn
import pytest
from bokeh.models import FactorRange, SaveTool
from bokeh.plotting import figure

from engine.lab.results import BlockSnapshot
from widgets.block_table import BlockTableView
from widgets.chart_view import ChartView, bar_figure, chart_column
from widgets.count_bars import CountBars
from widgets.floor_chart import FloorChart
from widgets.itl_timeline import ItlTimeline
from widgets.phase_bars import PhaseBars
from widgets.prefill_curve import PrefillCurve
from widgets.roofline_chart import RooflineChart

CHARTS = [CountBars, FloorChart, ItlTimeline, RooflineChart, BlockTableView, PhaseBars,
          PrefillCurve]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.__name__)
def test_each_chart_lays_out_its_figure_summary_and_table_tied_together(chart):
    view = chart()
    assert isinstance(view, ChartView)
    layout = pn.panel(view)
    layout.get_root()
    pane, summary, table = layout.objects
    assert pane.object is view.figure
    assert summary is view.text.summary and table is view.text.table is view._table
    attributes = view.figure.html_attributes
    assert attributes["role"] == "figure" and attributes["aria-label"]
    assert attributes["aria-describedby"].split() == [summary.html_id, table.html_id]
    assert view.table_html == table.object and view.text.sentence  # said something already


def test_the_table_shown_is_the_table_html():
    view = BlockTableView(num_blocks=4)
    pn.panel(view).get_root()
    before = view.table_html
    view.show(BlockSnapshot(step=3, t_s=0.1, free=4, finished=[], seqs=[]))
    assert view.table_html == view._table.object != before


def test_chart_column_puts_the_figure_first_at_full_width():
    fig = figure()
    below = pn.pane.HTML("text")
    column = chart_column(fig, below)
    assert [type(o) for o in column.objects] == [pn.pane.Bokeh, pn.pane.HTML]
    assert column.objects[0].object is fig and column.objects[1] is below
    assert column.sizing_mode == column.objects[0].sizing_mode == "stretch_width"


def test_a_bar_figure_counts_from_zero_along_categories_with_only_save():
    fig = bar_figure("What fits", "sequences", 160)
    assert isinstance(fig.y_range, FactorRange) and fig.x_range.start == 0
    assert fig.title.text == "What fits" and fig.xaxis[0].axis_label == "sequences"
    assert fig.height == 160 and fig.sizing_mode == "stretch_width"
    assert [type(t) for t in fig.toolbar.tools] == [SaveTool] and fig.toolbar_location is None
    assert not fig.ygrid[0].visible and fig.xgrid[0].visible
