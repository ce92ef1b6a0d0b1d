"""widgets.runtime.bokeh_defaults: a page built and serialized with the per-class default caches is the
same page, byte for byte but for its counters (model ids, names), as with Bokeh's own lookups; mutable defaults are
never shared between models; and the caches are actually used."""

from __future__ import annotations

import re

import panel as pn
import pytest
from bokeh.document import Document
from bokeh.models import ColumnDataSource, Slider
from bokeh.plotting import figure
from bokeh.protocol import Protocol

from widgets.html import html_pane
from widgets.pareto_chart import ParetoChart
from widgets.readouts import Readouts
from widgets.runtime import bokeh_defaults
from widgets.throughput_curve import ThroughputCurve


@pytest.fixture
def bokeh_lookups():
    """Bokeh's own lookups during the test, whatever the process had installed before."""
    installed = bokeh_defaults.installed()
    bokeh_defaults.uninstall()
    yield
    if installed:
        bokeh_defaults.cache_stable_defaults()
    else:
        bokeh_defaults.uninstall()


def page_json() -> str:
    """A page of the site's widgets (charts, readouts, sliders, a card, prose), built into a
    new document and serialized as a browser's first pull gets it, model ids numbered in order."""
    doc = Document()
    curve, pareto = ThroughputCurve(max_batch=64), ParetoChart(setting="batch size")
    plot = figure(height=200, x_axis_type="log", tools="hover,save")
    plot.line("x", "y", source=ColumnDataSource({"x": [1, 2], "y": [3, 4]}))
    layout = pn.Column(
        html_pane("<h2>Turn the knob</h2>"),
        pn.Row(pn.Column(pn.widgets.IntSlider(label="Batch", start=1, end=64, value=8),
                         pn.Card(pn.widgets.IntSlider(label="Prompt"), title="Settings",
                                 collapsed=True),
                         Readouts([("tput", "total tokens/s")]), width=330),
               curve),
        pareto, pn.pane.Bokeh(plot))
    doc.add_root(layout.get_root(doc))
    message = Protocol().create("PULL-DOC-REPLY", "test", doc)
    text = message.content_json + "".join(str(bytes(b)) for _, b in message.buffers)
    numbers: dict[str, str] = {}  # counters: Bokeh's model ids, Panel's names, the charts' texts
    return re.sub(r'"p\d+"|[A-Z][A-Za-z]*\d{5}|chart-text-\d+',
                  lambda m: numbers.setdefault(m.group(), f"<{len(numbers)}>"), text)


def test_a_page_serializes_the_same_with_and_without_the_caches(bokeh_lookups):
    reference = page_json()
    bokeh_defaults.cache_stable_defaults()
    assert page_json() == reference  # the caches filled (first page) ...
    assert page_json() == reference  # ... and answering (second page)


def test_the_caches_answer_and_mutable_defaults_stay_per_model(bokeh_lookups):
    bokeh_defaults.cache_stable_defaults()
    a, b = Slider(start=0, end=1, value=0), Slider(start=0, end=1, value=0)
    assert a.title == b.title == ""  # a stable default, read from the class's cache
    assert Slider.__dict__[bokeh_defaults.CACHE]["title"] == ("",)
    assert a.tags is not b.tags and "tags" not in Slider.__dict__[bokeh_defaults.CACHE]
    a.tags.append("mine")  # a list default is each model's own, as Bokeh makes it
    assert b.tags == [] and Slider(start=0, end=1, value=0).tags == []


def test_uninstall_puts_bokehs_lookups_back(bokeh_lookups):
    from bokeh.core.has_props import HasProps
    from bokeh.core.property.descriptors import PropertyDescriptor

    bokeh_defaults.cache_stable_defaults()
    assert bokeh_defaults.installed()
    bokeh_defaults.uninstall()
    assert not bokeh_defaults.installed()
    assert PropertyDescriptor._get_default is bokeh_defaults.BOKEH_GET_DEFAULT
    assert HasProps._overridden_defaults.__func__ is bokeh_defaults.BOKEH_OVERRIDDEN_DEFAULTS
