"""One template for every page: the header, the course navigation in the sidebar, the content.

Links are relative to the app's route ("app?lesson=knob"), so they work behind a reverse proxy's
prefix and inside an iframe. The stylesheet and the logo travel inside the page (widgets.site_css),
so plain `panel serve app.py` needs no static directory.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import panel as pn

from widgets.site_css import LOGO, site_stylesheets

from ..registry import LESSONS

APP_TITLE = "LLM serving speed"
ROUTE = "app"

OTHER_PAGES = (("about", "About this machine"), ("vocabulary", "Vocabulary"),
               ("summary", "The course on one page"), ("instructor", "Instructor notes"),
               ("report", "My course report"))

# The template's own parts (header, sidebar, a viewport-high scrolling frame) are outside every
# pane's shadow DOM: on paper only the content is printed, at full width and full length. The
# sheet's margins are set here (an @page rule works only in the document's own stylesheet), so
# every printer and the browser tests lay the page out on the same area.
PRINT_CSS = """
@page { margin: 10mm 12mm; }
@media print {
  #header, #sidebar, #sidebar-toggle, .pn-busy-container { display: none !important; }
  #container, #content, #main { height: auto !important; max-height: none !important;
                                overflow: visible !important; width: 100% !important;
                                margin: 0 !important; padding: 0 !important; }
  body { background: white !important; }
}
"""


def page_url(page: str) -> str:
    return f"{ROUTE}?page={page}"


def navigation(current: str) -> pn.pane.HTML:
    """The course's links; `current` is "index", a lesson slug or a page name."""
    def item(href: str, label: str, key: str, number: str = "") -> str:
        attr = ' aria-current="page"' if key == current else ""
        num = f'<span class="nav-number">{number}</span>' if number else ""
        return f'<li><a href="{href}"{attr}>{num}{html.escape(label)}</a></li>'

    lessons = "".join(item(lesson.url, lesson.title, lesson.slug, str(lesson.number))
                      for lesson in LESSONS)
    others = "".join(item(page_url(key), label, key) for key, label in OTHER_PAGES)
    body = (f'<nav class="course-nav" aria-label="Course">'
            f'<ul>{item(ROUTE, "Course map", "index")}</ul>'
            f'<h2>Lessons</h2><ul>{lessons}</ul>'
            f'<h2>Reference</h2><ul>{others}</ul></nav>')
    return pn.pane.HTML(body, sizing_mode="stretch_width", stylesheets=site_stylesheets())


class SiteTemplate(pn.template.BootstrapTemplate):
    """Panel's Bootstrap template with its markup made accessible (WCAG 2.1 AA): a skip link,
    header/main landmarks, alt text on the logo, no list without list items. The changes are
    listed at the top of site_template.html, a copy of Panel 1.9's bootstrap.html."""

    _template = Path(__file__).with_name("site_template.html")

    def __init__(self, **params):
        # No busy spinner in the header. Panel's shows one process-wide flag: every template
        # registers its spinner in a list shared by all sessions (pn.state.sync_busy), and every
        # session's periodic callback (a status line's timer, 4 a second while a job runs) sets
        # that flag on and off, so each tick changed every open page's spinner twice and sent
        # each reader two messages: work growing with the square of the readers, all on the web
        # server's one core (in a 30-student class 50-80% of it, bench/lab/classroom.py), and a
        # spinner turning on a reader's page for other readers' timers. Each page says what it
        # is doing in its own status line (widgets.job_status).
        params.setdefault("busy_indicator", None)
        super().__init__(**params)


def page(content: Sequence, title: str, current: str, embed: bool = False):
    """The page: content inside the site's template, or alone when embedded (?embed=true)."""
    main = pn.Column(*content, sizing_mode="stretch_width", css_classes=["page-content"])
    if embed:
        return main
    template = SiteTemplate(
        title=APP_TITLE if title == APP_TITLE else f"{title} | {APP_TITLE}",
        site_url=ROUTE, logo=str(LOGO), favicon=str(LOGO),
        header_background="#1f5f8b", sidebar_width=300,
        sidebar=[navigation(current)], main=[main], raw_css=[PRINT_CSS],
    )
    return template
