"""A friendly 404 page for paths the server does not know (/nonsense, /app/typo).

Bokeh's server answers an unknown path with Tornado's bare "404: Not Found". Two ways in:
- `panel serve app.py --plugins lessons.shell.routes`: Panel adds this module's ROUTES after its
  own and the app's, so the catch-all only sees what nothing else matched (it leaves /static/,
  and the root "/" that redirects to /app, to Bokeh's handlers that come after it);
- `python app.py`: pn.serve(..., default_handler_class=NotFoundHandler), Tornado's own hook for
  requests no route matched.
"""

from __future__ import annotations

import html

from tornado.web import RequestHandler

from widgets.site_css import site_css

from .not_found import not_found_html
from .template import APP_TITLE


class NotFoundHandler(RequestHandler):
    """Status 404 and a page with links to the course map, the lessons and the reference."""

    def prepare(self) -> None:  # every method: GET, HEAD, POST...
        prefix = getattr(self.application, "prefix", "") or ""
        base = f"{prefix}/"
        self.set_status(404)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        body = not_found_html(f"This server has no page at {self.request.path}.", prefix=base)
        self.finish(
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Not found | {html.escape(APP_TITLE)}</title>"
            f"<style>{site_css()}</style></head>"
            f'<body class="site" style="margin: 2rem;">{body}</body></html>')


# For `panel serve --plugins lessons.shell.routes`: anything not under /static/, /login, /logout.
ROUTES = [(r"/(?!static/|login$|logout$).+", NotFoundHandler, {})]
