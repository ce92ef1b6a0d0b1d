"""Colour on the charts (WCAG 2.1 AA): the palette's contrast, and in every chart widget series
that differ in colour also differ in line style or marker (told apart in greyscale), and text
drawn on a chart has 4.5:1 against what it sits on."""

from __future__ import annotations

import pytest
from bokeh.models import GlyphRenderer, Label, Line, Scatter, Text

from widgets.block_table import BlockTableView
from widgets.count_bars import CountBars
from widgets.floor_chart import FloorChart
from widgets.itl_timeline import ItlTimeline
from widgets.latency_histogram import LatencyHistogram
from widgets.palette import (
    DARK_BACKGROUND,
    INK,
    LABELLED_FILL,
    LIGHT_BACKGROUND,
    SERIES,
    SERIES_DASH,
    SERIES_MARKER,
    TEXT_ON_LIGHT,
    contrast_ratio,
)
from widgets.rate_curve import RateCurve
from widgets.request_lanes import RequestLanes
from widgets.roofline_chart import RooflineChart
from widgets.throughput_curve import ThroughputCurve
from widgets.token_timeline import TokenTimeline


def test_contrast_ratio_follows_wcag():
    assert contrast_ratio("#000000", "#FFFFFF") == pytest.approx(21.0)
    assert contrast_ratio("#777777", "#FFFFFF") == pytest.approx(4.48, abs=0.01)
    assert contrast_ratio("#123456", "#123456") == 1.0


def test_series_colours_keep_3_to_1_on_the_light_and_the_dark_background():
    for colour in SERIES:
        assert contrast_ratio(colour, LIGHT_BACKGROUND) >= 3.0, colour
        assert contrast_ratio(colour, DARK_BACKGROUND) >= 3.0, colour
    assert len(set(SERIES_DASH)) == len(SERIES_DASH) == len(SERIES)
    assert len(set(SERIES_MARKER)) == len(SERIES_MARKER) == len(SERIES)


def test_text_colours_keep_4_5_to_1():
    assert contrast_ratio(INK, LIGHT_BACKGROUND) >= 4.5
    for colour in TEXT_ON_LIGHT.values():
        assert contrast_ratio(colour, LIGHT_BACKGROUND) >= 4.5, colour
    for fill in LABELLED_FILL:
        assert contrast_ratio(INK, fill) >= 4.5, fill


def figures():
    made = [ThroughputCurve(), FloorChart(), ItlTimeline(series=["whole", "chunks"]),
            LatencyHistogram(), CountBars(), BlockTableView(), RequestLanes(),
            RooflineChart(), TokenTimeline(rows=["engine", "browser"])]
    out = [(type(w).__name__, w.figure) for w in made]
    out += [(f"RateCurve {i}", f) for i, f in enumerate(RateCurve().figures)]
    return out


FIGURES = figures()


def glyphs(fig, kind):
    return [r.glyph for r in fig.renderers if isinstance(r, GlyphRenderer)
            and isinstance(r.glyph, kind)]


def fixed(value):
    """A glyph property's fixed value (None where it is read from a data column)."""
    return value if isinstance(value, (str, tuple, list)) or value is None else None


@pytest.mark.parametrize("name, fig", FIGURES, ids=[n for n, _ in FIGURES])
def test_series_differ_in_more_than_hue(name, fig):
    lines = {}
    for g in glyphs(fig, Line):
        lines.setdefault(fixed(g.line_color), set()).add(str(g.line_dash))
    styles = [frozenset(d) for d in lines.values()]
    assert len(set(styles)) == len(styles), f"{name}: two line colours share a dash: {lines}"
    markers = {}
    for g in glyphs(fig, Scatter):
        style = (str(g.marker), str(g.line_dash))
        markers.setdefault(fixed(g.fill_color) or fixed(g.line_color), set()).add(style)
    kinds = [frozenset(m) for m in markers.values()]
    assert len(set(kinds)) == len(kinds), f"{name}: two point colours share a marker: {markers}"


@pytest.mark.parametrize("name, fig", FIGURES, ids=[n for n, _ in FIGURES])
def test_text_on_charts_has_4_5_to_1(name, fig):
    texts = glyphs(fig, Text) + [a for a in fig.center + fig.renderers if isinstance(a, Label)]
    for t in texts:
        colour = fixed(t.text_color)
        if colour is None or not colour.startswith("#"):
            continue  # theme defaults (Bokeh's dark grey on white)
        box = getattr(t, "background_fill_color", None)
        behind = box if isinstance(box, str) and box.startswith("#") else LIGHT_BACKGROUND
        assert contrast_ratio(colour, behind) >= 4.5, (name, colour, behind)
    for axis in fig.axis:
        colour = axis.axis_label_text_color
        if isinstance(colour, str) and colour.startswith("#"):
            assert contrast_ratio(colour, LIGHT_BACKGROUND) >= 4.5, (name, "axis", colour)
