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
