"""widgets.runtime.shared_stylesheets: a page's repeated stylesheet texts become one shared model
each, and an HTML pane's update keeps naming it (Panel would set the texts again)."""

from __future__ import annotations

import panel as pn
from bokeh.document import Document
from bokeh.models import InlineStyleSheet

from widgets.html import html_pane
from widgets.runtime.shared_stylesheets import share_stylesheets
from widgets.site_css import site_css


def test_an_html_panes_update_keeps_naming_the_shared_stylesheet():
    """After share_stylesheets, a pane's update names the page's stylesheet model again, not the
    text (Panel sets every property of an HTML pane on each update): nothing re-sent, no change
    of the page's graph of models; a pane that shared nothing keeps its texts."""
    doc = Document()
    status, table = html_pane("<p>queued</p>"), html_pane("<p>-</p>")
    doc.add_root(pn.Column(status, table).get_root(doc))
    assert share_stylesheets(doc) >= 2
    model = next(m for m in doc.models if "queued" in str(getattr(m, "text", "")))
    shared = [s for s in model.stylesheets if isinstance(s, InlineStyleSheet)]
    assert any(s.css == site_css() for s in shared)
    changed = []
    model.on_change("stylesheets", lambda attr, old, new: changed.append(new))
    status.object = "<p>measured</p>"
    assert "measured" in model.text  # the update went through
    assert changed == [] and [s for s in model.stylesheets if isinstance(s, InlineStyleSheet)] == shared
    alone = Document()
    lone = html_pane("<p>alone</p>")
    alone.add_root(lone.get_root(alone))
    lone.object = "<p>still alone</p>"
    assert site_css() in alone.roots[0].stylesheets  # no page to share with: the text itself
