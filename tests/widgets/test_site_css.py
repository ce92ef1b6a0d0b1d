"""The site's stylesheet and logo travel inside the page: CSS text for every pane, the logo and
favicon embedded as data URLs, so no server option (--static-dirs) is needed for the site's look."""

from __future__ import annotations

import base64
import io
import re

import panel as pn

from lessons.shell.template import page
from widgets.site_css import LOGO, site_css, site_stylesheets


def test_panes_carry_app_css_itself_not_a_url():
    (css,) = site_stylesheets()
    assert "nav.course-nav" in css and css == site_css()
    assert not css.strip().endswith(".css") and not css.startswith("http")  # not imported


def test_the_page_renders_with_the_logo_and_favicon_embedded():
    """Rendering the template is where a favicon Panel cannot type (a data: URL passed in, not
    a file name ending .svg/.png/...) fails with 'favicon type not supported': every page 500."""
    buf = io.StringIO()
    page([pn.pane.Markdown("text")], "A page", "index").save(buf)
    html = buf.getvalue()
    prefix = "data:image/svg+xml;base64,"
    svg = base64.b64encode(LOGO.read_bytes()).decode("ascii")
    favicon = re.search(r'<link rel="icon" href="([^"]+)"', html).group(1)
    logo = re.search(r'<img src="([^"]+)" class="app-logo"', html).group(1)
    assert favicon == logo == prefix + svg


def test_an_html_panes_update_keeps_naming_the_shared_stylesheet():
    """After share_stylesheets, a pane's update names the page's stylesheet model again, not the
    text (Panel sets every property of an HTML pane on each update): nothing re-sent, no change
    of the page's graph of models; a pane that shared nothing keeps its texts."""
    from bokeh.document import Document
    from bokeh.models import InlineStyleSheet

    from widgets.html import html_pane
    from widgets.site_css import share_stylesheets

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
