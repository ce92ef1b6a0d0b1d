"""HTML panes in the site's style: every page and lesson writes its prose, tables and figures
through these, so each pane carries the site's stylesheet (a pane has its own shadow DOM, which
the page's stylesheet does not reach) and the wrapper the stylesheet's variables hang on."""

from __future__ import annotations

import panel as pn

from .site_css import site_stylesheets


def site_html(body: str) -> str:
    """HTML for an html_pane's object: the wrapper the stylesheet's variables hang on."""
    return f'<div class="site">{body}</div>'


def html_pane(body: str, **params) -> pn.pane.HTML:
    """An HTML pane carrying the site's stylesheet (each pane has its own shadow DOM)."""
    params.setdefault("sizing_mode", "stretch_width")
    return pn.pane.HTML(site_html(body), stylesheets=site_stylesheets(), **params)
