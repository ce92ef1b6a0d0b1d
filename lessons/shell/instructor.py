"""Notes for whoever teaches the course: /app?page=instructor lists the lessons,
/app?page=instructor&lesson=<slug> gives one lesson's notes (timing, the numbers to expect on
this machine, common misconceptions, questions to discuss). Printable, like the summary.

The numbers to expect are never written into the notes: they are read from this server's
measurement cache, which `python -m lessons.warm` fills before a class (each lesson's
warm_jobs()); what is not cached yet says so.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from engine.lab.client import get_service
from widgets.html import html_pane

from ..registry import LESSONS, lesson_class, lesson_info
from ..teaching import Lookup, service_lookup
from .not_found import not_found_content

GENERAL = """
<h1>Instructor notes</h1>
<p>Per lesson: how long it takes, the numbers this machine gives for its default settings, the
misconceptions readers bring, and questions to discuss. Before a class, run
<code>python -m lessons.warm</code> on the machine that serves the pages: it measures every
lesson's default view once, so the numbers below are filled in and thirty readers opening a
lesson at once do not queue for the same measurement. Every lesson asks the reader for a
prediction first: a result, cached or fresh, stays hidden until the reader predicts or skips,
so the warm cache only makes the reveal instant. The class can predict together, then
reveal.</p>
"""

NOT_MEASURED = ("Not measured on this machine yet: run <code>python -m lessons.warm</code> "
                "before class (or open the lesson once), then reload this page.")
STARTING = ("The engine is still starting, so its measurement cache cannot be read yet: reload "
            "this page in a few seconds.")


def cache_lookup() -> Lookup | None:
    """This server's measurement cache, or None while the engine worker is starting (the
    cache's keys need the worker's device)."""
    service = get_service()
    if not service.status()["ready"]:
        return None
    return service_lookup(service)


def index_html() -> str:
    items = "".join(
        f'<li><a href="app?page=instructor&amp;lesson={info.slug}">Lesson {info.number}: '
        f"{html.escape(info.title)}</a></li>" for info in LESSONS)
    return f"{GENERAL}<h2>The lessons</h2><ul>{items}</ul>"


def lesson_notes_html(slug: str, lookup: Lookup | None) -> str:
    info = lesson_info(slug)
    cls = lesson_class(info)
    notes = getattr(cls, "instructor", None)
    parts = [f"<h1>Instructor notes: lesson {info.number}, {html.escape(info.title)}</h1>",
             f'<p class="no-print"><a href="{info.url}">Open the lesson</a> &middot; '
             f'<a href="app?page=instructor">All lessons</a></p>']
    if notes is None:
        return "".join(parts) + "<p>No notes for this lesson yet.</p>"
    parts.append(f"<h2>Timing</h2><p>About {notes.minutes} minutes. "
                 f"{html.escape(notes.timing)}</p>")
    lines = cls.expected_numbers(lookup) if lookup is not None else []
    expected = ("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"
                if lines else f"<p>{NOT_MEASURED if lookup is not None else STARTING}</p>")
    parts.append(f"<h2>Numbers to expect on this machine</h2>{expected}")
    parts.append("<h2>Common misconceptions</h2><ul>"
                 + "".join(f"<li>{html.escape(m)}</li>" for m in notes.misconceptions)
                 + "</ul>")
    parts.append("<h2>Questions to discuss</h2><ul>"
                 + "".join(f"<li>{html.escape(p)}</li>" for p in notes.prompts) + "</ul>")
    return "".join(parts)


def instructor_content(slug: str | None, lookup: Callable[[], Lookup | None] = cache_lookup
                       ) -> tuple[list, str]:
    """(content, title) for the instructor page, all lessons or one; `lookup` gives the
    measurement cache to read the numbers from (None: not readable yet)."""
    if slug is None:
        return [html_pane(index_html(), css_classes=["instructor-notes"])], "Instructor notes"
    if lesson_info(slug) is None:
        return not_found_content(f"There is no lesson called “{slug}”."), "Not found"
    body = lesson_notes_html(slug, lookup())
    return ([html_pane(body, css_classes=["instructor-notes"])],
            f"Instructor notes: {lesson_info(slug).title}")
