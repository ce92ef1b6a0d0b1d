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

POST /class/start, /class/stop and /class/knobs drive the class run (lessons.classroom) from a
script: each needs the teacher's key in the X-Teacher-Key header or the console's cookie, and
answers JSON: 403 with a reason (and a log line) without it, 400 with the engine's one-line
message for a bad value, else what the service did. /class/knobs takes a JSON object of knob
changes (policy, max_batch, chunk_size, prefix_cache, background_rps, lanes); /class/start
optional settings.

Bokeh's server answers an unknown path with Tornado's bare "404: Not Found". Two ways in:
- `panel serve app.py --plugins lessons.shell.routes`: Panel adds this module's ROUTES after its
  own and the app's, so the catch-all only sees what nothing else matched (it leaves /static/,
  and the root "/" that redirects to /app, to Bokeh's handlers that come after it);
- `python app.py`: pn.serve(..., default_handler_class=NotFoundHandler), Tornado's own hook for
  requests no route matched.
"""

from __future__ import annotations

import asyncio
import html
import json
from urllib.parse import unquote

from tornado.web import RequestHandler

from engine.errors import ConfigError
from engine.lab.client import METRICS_CONTENT_TYPE, get_service
from lessons.classroom import teacher_key
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


class ClassHandler(RequestHandler):
    """POST: one teacher's action on the class run, allowed only with the teacher's key."""

    action = ""  # "start" | "stop" | "knobs"

    def initialize(self, service=None) -> None:
        self.service = service  # None: the server's one engine service

    def check_xsrf_cookie(self) -> None:  # a JSON API for scripts: the key is the credential
        return None

    async def post(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        given = (self.request.headers.get(teacher_key.HEADER)
                 or unquote(self.get_cookie(teacher_key.COOKIE) or ""))
        if not teacher_key.key_ok(given):
            teacher_key.log_refusal(f"POST /class/{self.action}", self.request.remote_ip or "?")
            self._answer(403, {"ok": False, "reason": "This needs the teacher's key (the "
                               f"{teacher_key.HEADER} header or the console's cookie)."})
            return
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            self._answer(400, {"ok": False, "reason": "The body is not JSON."})
            return
        if not isinstance(body, dict):
            self._answer(400, {"ok": False, "reason": "The body must be a JSON object."})
            return
        try:  # off the event loop: stopping waits for the run's summary
            answer = await asyncio.to_thread(self._act, self.service or get_service(), body)
        except ConfigError as e:
            self._answer(400, {"ok": False, "reason": str(e)})
            return
        self._answer(200, answer)

    def _act(self, service, body: dict) -> dict:
        if self.action == "start":
            return {"ok": True, "settings": service.class_start(body or None)}
        if self.action == "stop":
            return {"ok": True, "summary": service.class_stop()}
        return {"ok": True, **service.class_set(body, by="teacher")}

    def _answer(self, status: int, body: dict) -> None:
        self.set_status(status)
        self.finish(json.dumps(body, default=str))


class ClassStartHandler(ClassHandler):
    action = "start"


class ClassStopHandler(ClassHandler):
    action = "stop"


class ClassKnobsHandler(ClassHandler):
    action = "knobs"


STATUS_ROUTE = (r"/engine-status", EngineStatusHandler, {})
METRICS_ROUTE = (r"/metrics", MetricsHandler, {})
CLASS_ROUTES = [(r"/class/start", ClassStartHandler, {}), (r"/class/stop", ClassStopHandler, {}),
                (r"/class/knobs", ClassKnobsHandler, {})]
# For `panel serve --plugins lessons.shell.routes`: the status, the metrics and the class run's
# routes, then anything not under /static/, /login, /logout is not found.
ROUTES = [STATUS_ROUTE, METRICS_ROUTE, *CLASS_ROUTES,
          (r"/(?!static/|login$|logout$|engine-status$|metrics$|class/(?:start|stop|knobs)$).+",
           NotFoundHandler, {})]
