"""The friendly page for a lesson or page name the app does not know (a mistyped or old link)."""

from __future__ import annotations

import html

from widgets.html import html_pane

from ..registry import LESSONS
from .template import ROUTE, page_url


def not_found_html(what: str, prefix: str = "") -> str:
    """The body of the page; `prefix` goes before every link (for pages served outside /app)."""
    lessons = "".join(
        f'<li><a href="{prefix}{lesson.url}">Lesson {lesson.number}: '
        f"{html.escape(lesson.title)}</a></li>" for lesson in LESSONS)
    return (
        f'<div class="not-found"><h1>Nothing here</h1>'
        f"<p>{html.escape(what)} It may be a typo, or an old link.</p>"
        f'<p>Start from the <a href="{prefix}{ROUTE}">course map</a>, or go straight to a '
        f"lesson:</p><ul>{lessons}</ul>"
        f'<p>Also: <a href="{prefix}{page_url("about")}">about this machine</a> and the '
        f'<a href="{prefix}{page_url("vocabulary")}">vocabulary</a>.</p></div>'
    )


def not_found_content(what: str) -> list:
    return [html_pane(not_found_html(what))]
