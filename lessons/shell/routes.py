"""Routes beside the app: /engine-status (what the engine service is doing, as JSON), /metrics
(the lab's engine in Prometheus' text format) and a friendly 404 page for paths the server does
not know (/nonsense, /app/typo).

/engine-status answers the service's status (engine.lab.client.EngineService.status: the job
running, the queue in the order it will run, counters, the memory of this process and the
worker) and, as "web_heap", this process's memory trims (widgets.runtime.heap.status), so a
teacher's script or bench/lab/classroom.py can watch a class. It holds no session ids.

/metrics answers the engine service's Prometheus metrics (engine.lab.metrics: vLLM's names for
the runs served on the lab's engine, lab_ for the service's queue and counts), so a Prometheus
server, or a vLLM dashboard, can scrape the engine behind the pages as it would a served one.

Bokeh's server answers an unknown path with Tornado's bare "404: Not Found". Two ways in:
- `panel serve app.py --plugins lessons.shell.routes`: Panel adds this module's ROUTES after its
  own and the app's, so the catch-all only sees what nothing else matched (it leaves /static/,
  and the root "/" that redirects to /app, to Bokeh's handlers that come after it);
- `python app.py`: pn.serve(..., default_handler_class=NotFoundHandler), Tornado's own hook for
  requests no route matched.
"""

from __future__ import annotations

import html
import json

from tornado.web import RequestHandler

from engine.lab.client import METRICS_CONTENT_TYPE, get_service
from widgets.runtime import heap
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


class EngineStatusHandler(RequestHandler):
    """GET: the engine service's status as JSON."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        status = {**get_service().status(), "web_heap": heap.status()}
        self.finish(json.dumps(status, default=str))


class MetricsHandler(RequestHandler):
    """GET: the engine service's metrics in Prometheus' text format."""

    def get(self) -> None:
        self.set_header("Content-Type", METRICS_CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.finish(get_service().prometheus())


STATUS_ROUTE = (r"/engine-status", EngineStatusHandler, {})
METRICS_ROUTE = (r"/metrics", MetricsHandler, {})
# For `panel serve --plugins lessons.shell.routes`: the status and the metrics, then anything not
# under /static/, /login, /logout is not found.
ROUTES = [STATUS_ROUTE, METRICS_ROUTE,
          (r"/(?!static/|login$|logout$|engine-status$|metrics$).+", NotFoundHandler, {})]
