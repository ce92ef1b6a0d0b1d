"""The site's stylesheet and logo, carried inside the page itself rather than served as files.

`panel serve app.py` (the command a Panel user tries first) serves no static directory, so a
stylesheet URL like assets/app.css answers 404 unless the server was started with
--static-dirs. Inline, the look needs no server option, works on a page embedded in another
site by a script tag (no URL to resolve against the wrong origin), and survives a static export.
Panel puts the text in every pane's model; widgets.runtime.shared_stylesheets sends each such
text once per page instead.
"""

from __future__ import annotations

from functools import cache

from engine.config import ASSETS


@cache
def site_css() -> str:
    """assets/app.css, the course's look."""
    return (ASSETS / "app.css").read_text(encoding="utf-8")


# The header's logo and the favicon: a local file, which Panel's template embeds in the page as a
# data: URL itself. A data: URL given directly breaks every page: Panel takes the favicon's type
# from the name's ending (.svg, .png, ...) and answers 500 for any other.
LOGO = ASSETS / "logo.svg"


def site_stylesheets() -> list[str]:
    """The stylesheets list for a pane in the site's style (each pane has its own shadow DOM,
    which the page's own stylesheet does not reach): the CSS text itself. Panel accepts only
    strings here (a shared stylesheet model is refused), and turns only URLs into imports."""
    return [site_css()]
