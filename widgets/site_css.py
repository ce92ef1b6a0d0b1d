"""The site's stylesheet (assets/app.css, served from the server's static dir), as a URL that this
session's page can load."""

from __future__ import annotations

import panel as pn

CSS_PATH = "assets/app.css"


def site_stylesheets() -> list[str]:
    """Relative to the app's route on the site's own pages and in iframes. A page embedded by a
    script tag lives inside another site's page, where a relative URL would point at that site:
    there pn.state.rel_path holds the app server's origin (lessons.shell.router sets it), and the
    URL is absolute. Call it while building a session's page."""
    rel_path = pn.state.rel_path or ""
    if rel_path.startswith(("http://", "https://")):
        return [f"{rel_path}/{CSS_PATH}"]
    return [CSS_PATH]
