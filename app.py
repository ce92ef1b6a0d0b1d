"""The course's web app: every lesson as its own page, one shared engine service.

    panel serve app.py [--plugins lessons.shell.routes]   # the option adds the friendly 404
    python app.py [--port 5006] [--address 0.0.0.0] [--allow-websocket-origin HOST:PORT] ...

At start-up the app sets its engine up in the background: the engine worker builds the C++
kernels and times the lessons' models' matrix-product plans (the "setup" job; a minute or more
the first time on two cores, seconds after), pausing for readers' measurements; the About page
shows its progress, and results measured before it is done are labelled as the plain path's.
LLM_SPEED_SETUP=0 leaves it out.

Measuring an OpenAI-compatible server (vLLM, SGLang, `python -m engine serve`) as well as the
built-in engine: `panel serve app.py --args --endpoint URL --model M`, `python app.py --endpoint
URL --model M`, or $LLM_SPEED_ENDPOINT and $LLM_SPEED_MODEL (see engine.lab.endpoint).

One route, /app: /app is the course map, /app?lesson=<slug> a lesson (see lessons.registry),
/app?page=about, /app?page=vocabulary, /app?page=engine-check; add &embed=true for a page
without the site's header and navigation. /engine-status is what the engine service is doing,
as JSON, and /metrics its Prometheus metrics (lessons.shell.routes); POST
/class/start|stop|knobs drive the class run with the teacher's key. Other paths get a
friendly 404 page.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import panel as pn

from engine.errors import ConfigError
from engine.lab.endpoint import configure
from engine.lab.setup_state import start_setup
from lessons.classroom.teacher_key import teacher_key
from lessons.shell import router
from lessons.shell.first_build import before_serving, build_every_page_once
from lessons.shell.router import build_page, import_lessons
from lessons.shell.routes import CLASS_ROUTES, METRICS_ROUTE, STATUS_ROUTE, NotFoundHandler
from lessons.shell.template import APP_TITLE, ROUTE
from widgets import runtime
from widgets.a11y import A11Y_CSS

# raw_css goes into every component's shadow DOM and the template's head: focus always visible,
# no animation for readers who ask for reduced motion (widgets.a11y)
pn.extension(sizing_mode="stretch_width", notifications=False, raw_css=[A11Y_CSS])
# the server's log says what the engine ran: each measured run, its time, disturbed or not
logging.getLogger("engine.lab.client").setLevel(logging.INFO)
logging.getLogger("lessons.shell.first_build").setLevel(logging.INFO)  # pages built at start
# the web runtime's patches to Bokeh, Panel, asyncio's log and glibc's malloc, each with its
# reason (widgets.runtime; idempotent: `panel serve app.py` runs this file once a session)
runtime.install()


def serve_page(doc, args=None) -> None:
    """This session's page into its document `doc`, built at the least CPU: a class arriving at
    once queues behind each page's build on the web server's one core."""
    # One recomputation of the document's model index for the whole page: Bokeh recomputes it
    # (a walk over every model) each time a root is added or a freeze ends, seven times per
    # lesson page; under one freeze, once: a sizeable share of a page's build CPU
    # (`python bench/page_build.py` measures it).
    with doc.models.freeze():
        page = build_page(args)
        if doc.session_context is not None:
            page.servable(title=APP_TITLE)
            runtime.one_walk_per_reader_event(doc)  # a click's pane updates: one model-index walk
        else:  # built outside a server (tests, bench): what servable() does in a session
            page.server_doc(doc, title=APP_TITLE)
    runtime.share_stylesheets(doc)  # each repeated stylesheet text sent once


if __name__.startswith("bokeh_app"):  # `panel serve app.py`: this file runs once per session
    try:
        configure(sys.argv[1:])  # `--args --endpoint URL --model M`, or the environment
    except ConfigError as e:  # the site still serves, with the built-in engine only
        print(f"app.py: no endpoint to measure: {e}", file=sys.stderr)
    import_lessons()  # with --warm: as the server starts, before the first reader
    teacher_key()  # made and printed once per server (lessons.classroom.teacher_key)
    start_setup(router.get_service())  # kernels and plans, in the engine worker (once a server)
    serve_page(pn.state.curdoc)
    if before_serving():  # --warm: every page built once before the first reader
        build_every_page_once(serve_page)


def main(argv: list[str] | None = None) -> None:
    """`python app.py`: the same app, plus a friendly page for every unknown path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 5006)))
    parser.add_argument("--address", default=None, help="interface to listen on (default all)")
    parser.add_argument("--allow-websocket-origin", action="append", default=None,
                        metavar="HOST[:PORT]", help="a site allowed to embed the app (repeat)")
    parser.add_argument("--num-threads", type=int, default=None,
                        help="threads for the sessions' callbacks (default: the event loop)")
    parser.add_argument("--admin", action="store_true", help="serve the admin page at /admin")
    parser.add_argument("--show", action="store_true", help="open a browser tab")
    parser.add_argument("--endpoint", metavar="URL",
                        help="an OpenAI-compatible server the lessons may measure too")
    parser.add_argument("--model", metavar="M", help="the model to ask the endpoint for")
    args = parser.parse_args(argv)
    try:
        configure(["--endpoint", args.endpoint] * bool(args.endpoint)
                  + ["--model", args.model] * bool(args.model))
    except ConfigError as e:
        parser.error(str(e))
    if args.num_threads:
        pn.config.nthreads = args.num_threads
    import_lessons()  # before the first reader
    teacher_key()  # made and printed once per server (lessons.classroom.teacher_key)
    start_setup(router.get_service())  # kernels and plans, in the engine worker, in the background
    build_every_page_once(serve_page)  # what a first build leaves, held from the start
    pn.serve(
        {ROUTE: lambda: serve_page(pn.state.curdoc)}, port=args.port, address=args.address, websocket_origin=args.allow_websocket_origin,
        admin=args.admin, show=args.show,
        title=APP_TITLE, default_handler_class=NotFoundHandler,
        extra_patterns=[STATUS_ROUTE, METRICS_ROUTE, *CLASS_ROUTES],
    )


if __name__ == "__main__":
    main()
