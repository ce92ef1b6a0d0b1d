"""The site's stylesheet URL: relative on the app's own pages, on the app server's origin when the
page lives inside another site's page (a script-tag embed sets pn.state.rel_path to it)."""

from __future__ import annotations

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from widgets.site_css import CSS_PATH, site_stylesheets


def test_relative_on_the_apps_own_pages():
    with set_curdoc(Document()):
        assert site_stylesheets() == [CSS_PATH]
        pn.state.rel_path = "."
        assert site_stylesheets() == [CSS_PATH]


def test_absolute_on_the_app_servers_origin_when_embedded_by_script_tag():
    doc = Document()
    with set_curdoc(doc):
        pn.state.rel_path = "http://localhost:5006"
        assert site_stylesheets() == ["http://localhost:5006/assets/app.css"]
    with set_curdoc(Document()):  # another session's page is untouched
        assert site_stylesheets() == [CSS_PATH]
