"""Which page a URL asks for: /app is the course map, /app?lesson=<slug> a lesson,
/app?page=about|vocabulary|summary|engine-check|report the other pages, /app?page=class the
teacher's console of the class run and /app?page=class-student its student page,
/app?page=instructor the instructor notes (&lesson=<slug> for one lesson's); anything else a friendly not-found page.
Add ?embed=true to get the page without the site's header and navigation (for iframes)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import panel as pn

from engine.lab.client import get_service
from widgets.a11y import page_fixes
from widgets.html import html_pane
from widgets.runtime.heap import trim_after_session

from ..classroom.report import report_content
from ..engine_check import EngineCheckPage
from ..registry import LESSONS, lesson_class, lesson_info
from ..url_state import TRUE, raw_value
from .about import AboutPage
from .index import index_content
from .instructor import instructor_content
from .not_found import not_found_content
from .summary import summary_content
from .template import APP_TITLE, page
from .vocabulary import vocabulary_content

log = logging.getLogger(__name__)

PAGES = ("about", "vocabulary", "summary", "instructor", "engine-check", "report", "class",
         "class-student")


def choose(args: Mapping[str, Any]) -> tuple[list, str, str]:
    """(content, title, current) for the query args."""
    if "page" in args and raw_value(args["page"]) == "instructor":  # its lesson= names a lesson
        slug = raw_value(args["lesson"]) if "lesson" in args else None
        content, title = instructor_content(slug)
        return content, title, "instructor"
    if "lesson" in args:
        slug = raw_value(args["lesson"])
        info = lesson_info(slug)
        if info is None:
            return not_found_content(f"There is no lesson called “{slug}”."), "Not found", ""
        lesson = lesson_class(info).from_url(args)
        return [lesson], info.title, info.slug
    if "page" in args:
        name = raw_value(args["page"])
        if name == "about":
            return [AboutPage()], "About this machine", "about"
        if name == "vocabulary":
            return vocabulary_content(), "Vocabulary", "vocabulary"
        if name == "summary":
            return summary_content(), "The course on one page", "summary"
        if name == "report":
            return report_content(), "My course report", "report"
        if name == "engine-check":
            return [EngineCheckPage.from_url(args)], "Engine check", "about"
        if name == "class":
            from ..classroom.console import ClassConsole  # only the class's pages need it
            return [ClassConsole()], "Class run: console", ""
        if name == "class-student":
            from ..classroom.student import StudentPage
            return [StudentPage()], "Class run: your requests", ""
        return not_found_content(f"There is no page called “{name}”."), "Not found", ""
    return index_content(), APP_TITLE, "index"


def build_page(args: Mapping[str, Any] | None = None):
    """The whole page for this session's URL (one Panel session per page view)."""
    if args is None:
        args = pn.state.session_args if pn.state.curdoc is not None else {}
    embed = raw_value(args.get("embed", "false")).lower() in TRUE
    _not_the_process_default(pn.state.curdoc)
    trim_after_session(pn.state.curdoc)  # a while after the reader leaves: memory back
    get_service()  # start the engine worker with the first page, before anyone needs it
    if "bokeh-absolute-url" in args:  # embedded by a script tag (bokeh.embed.server_document)
        _fix_autoload_paths(raw_value(args["bokeh-absolute-url"]))  # before building: URLs
        embed = True  # the template cannot live inside another site's page; its content can
    try:
        content, title, current = choose(args)
    except Exception as e:  # a page's bug: a message, never a traceback, and the links still work
        log.exception("building the page for %s failed", dict(args))
        content = [html_pane(f"<h1>This page failed to load</h1><p>{type(e).__name__}: "
                             "the server's log has the details. The other pages still work.</p>")]
        title, current = "Error", ""
    _serve_panel_css_locally()
    page_fixes(pn.state.curdoc)
    return page(content, title, current, embed=embed)


def import_lessons() -> None:
    """Import every lesson's module (and what it imports), so that no reader waits for it.

    A lesson's module is imported when its page is first asked for (lessons.registry), which
    otherwise costs the first reader of each lesson the web core's time for the import while
    the class arrives. app.py calls this each time it runs: under `panel serve --warm` (the
    class command) that is once as the server starts; later calls find them imported."""
    for info in LESSONS:
        lesson_class(info)


def _not_the_process_default(doc) -> None:
    """Keep this session's document from being Bokeh's process-wide default document.

    Panel makes a session's document that default (and never puts the old one back) when Bokeh's
    stack of patched documents has a dead one on top as the session starts: that stack is one list
    shared by every thread, pushed and popped without a lock or a finally, so a document freed on
    another thread (or an exception inside a patched block) can be left on top for a moment. The
    default document then keeps the session's pages and callbacks alive after it closes, and code
    outside any session sees it as pn.state.curdoc. A fresh empty default undoes that."""
    from bokeh.document import Document
    from bokeh.io.state import curstate

    state = curstate()
    if doc is not None and state.document is doc:
        state.document = Document()


def _serve_panel_css_locally() -> None:
    """Make every Panel stylesheet of this session come from this server, never from Panel's CDN.

    Panel points a component's stylesheets at the document's "dist_url" template variable, and at
    cdn.holoviz.org when the document has none. Panel 1.9 sets it only when it renders a whole
    page, so a page embedded by a script tag (autoload.js) never gets it, and stylesheet objects
    that Panel shares between documents (its Design cache) can be flipped to the CDN by such a
    page. A classroom LAN has no internet: set it from the start, to the value Panel would use."""
    from panel.io.resources import get_dist_path

    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:
        return
    doc._template_variables["dist_url"] = get_dist_path(cdn=False)


def _fix_autoload_paths(absolute_url: str) -> None:
    """Panel 1.9 resolves some bundled scripts (es-module-shims) relative to the autoload.js
    request path ("../static/..."), which breaks inside another site's page; point them at the
    server, as Panel itself does for the rest (issue of panel.io.location._sync_pathname)."""
    from urllib.parse import urlparse

    parts = urlparse(absolute_url)
    if parts.scheme in ("http", "https") and parts.netloc:
        pn.state.rel_path = f"{parts.scheme}://{parts.netloc}"

